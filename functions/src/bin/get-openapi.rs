//! Lambda function `get-openapi`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("get-openapi")
}
