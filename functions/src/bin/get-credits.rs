//! Lambda function `get-credits`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("get-credits", shared::api::handlers::get_credits)
}
