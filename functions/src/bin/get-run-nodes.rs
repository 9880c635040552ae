//! Lambda function `get-run-nodes`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("get-run-nodes")
}
