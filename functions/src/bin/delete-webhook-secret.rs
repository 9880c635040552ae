//! Lambda function `delete-webhook-secret`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("delete-webhook-secret")
}
