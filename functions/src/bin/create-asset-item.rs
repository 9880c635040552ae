//! Lambda function `create-asset-item`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("create-asset-item")
}
