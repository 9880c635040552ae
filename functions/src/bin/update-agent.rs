//! Lambda function `update-agent`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("update-agent", shared::api::handlers::update_agent)
}
