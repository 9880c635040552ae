//! Lambda function `rotate-webhook-secret`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("rotate-webhook-secret")
}
