//! Lambda function `create-agent`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("create-agent", shared::api::handlers::create_agent)
}
