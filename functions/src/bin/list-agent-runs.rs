//! Lambda function `list-agent-runs`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("list-agent-runs")
}
