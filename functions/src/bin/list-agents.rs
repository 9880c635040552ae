//! Lambda function `list-agents`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("list-agents")
}
