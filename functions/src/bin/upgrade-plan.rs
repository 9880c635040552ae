//! Lambda function `upgrade-plan`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("upgrade-plan", shared::api::handlers::upgrade_plan)
}
