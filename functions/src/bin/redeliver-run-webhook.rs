//! Lambda function `redeliver-run-webhook`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("redeliver-run-webhook", shared::api::handlers::redeliver_run_webhook)
}
