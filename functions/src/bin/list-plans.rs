//! Lambda function `list-plans`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("list-plans", shared::api::handlers::list_plans)
}
