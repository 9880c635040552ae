//! Lambda function `fire-trigger`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("fire-trigger", shared::api::handlers::fire_trigger)
}
