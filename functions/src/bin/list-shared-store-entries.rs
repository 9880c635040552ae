//! Lambda function `list-shared-store-entries`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("list-shared-store-entries")
}
