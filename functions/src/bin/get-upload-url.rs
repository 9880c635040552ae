//! Lambda function `get-upload-url`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("get-upload-url")
}
