//! Lambda function `get-trigger`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("get-trigger", shared::api::handlers::get_trigger)
}
