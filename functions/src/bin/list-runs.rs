//! Lambda function `list-runs`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("list-runs")
}
