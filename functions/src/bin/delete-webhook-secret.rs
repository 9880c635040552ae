//! Lambda function `delete-webhook-secret`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("delete-webhook-secret", shared::api::handlers::delete_webhook_secret)
}
