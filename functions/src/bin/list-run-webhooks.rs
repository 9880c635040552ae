//! Lambda function `list-run-webhooks`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("list-run-webhooks", shared::api::handlers::list_run_webhooks)
}
