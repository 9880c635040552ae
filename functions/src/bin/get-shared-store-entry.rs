//! Lambda function `get-shared-store-entry`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("get-shared-store-entry")
}
