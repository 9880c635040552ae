//! Lambda function `get-upload-url`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::lambda::run("get-upload-url")
}
