//! Lambda function `list-trigger-runs`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("list-trigger-runs", shared::api::handlers::list_trigger_runs)
}
