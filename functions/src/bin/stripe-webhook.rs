//! Lambda function `stripe-webhook`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("stripe-webhook", shared::api::handlers::stripe_webhook)
}
