//! Lambda function `list-node-types`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("list-node-types")
}
