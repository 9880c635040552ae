//! Lambda function `list-runs`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("list-runs", shared::api::handlers::list_runs)
}
