//! Lambda function `list-run-webhooks`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("list-run-webhooks")
}
