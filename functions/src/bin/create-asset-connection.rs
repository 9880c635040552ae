//! Lambda function `create-asset-connection`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("create-asset-connection")
}
