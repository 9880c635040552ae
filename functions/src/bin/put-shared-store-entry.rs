//! Lambda function `put-shared-store-entry`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("put-shared-store-entry")
}
