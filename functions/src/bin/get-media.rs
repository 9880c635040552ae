//! Lambda function `get-media`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("get-media")
}
