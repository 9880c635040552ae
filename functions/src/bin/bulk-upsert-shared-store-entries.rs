//! Lambda function `bulk-upsert-shared-store-entries`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("bulk-upsert-shared-store-entries")
}
