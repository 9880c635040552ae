//! Lambda function `rotate-webhook-secret`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("rotate-webhook-secret", shared::api::handlers::rotate_webhook_secret)
}
