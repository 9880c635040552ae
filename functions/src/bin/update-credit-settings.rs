//! Lambda function `update-credit-settings`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("update-credit-settings", shared::api::handlers::update_credit_settings)
}
