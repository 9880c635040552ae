//! Lambda function `rename-shared-store`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("rename-shared-store")
}
