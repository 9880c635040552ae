//! Lambda function `get-run`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("get-run", shared::api::handlers::get_run)
}
