//! Lambda function `cancel-run`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("cancel-run", shared::api::handlers::cancel_run)
}
