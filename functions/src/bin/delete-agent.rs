//! Lambda function `delete-agent`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("delete-agent", shared::api::handlers::delete_agent)
}
