//! Lambda function `list-agent-runs`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("list-agent-runs", shared::api::handlers::list_agent_runs)
}
