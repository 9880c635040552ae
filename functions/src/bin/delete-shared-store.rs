//! Lambda function `delete-shared-store`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("delete-shared-store")
}
