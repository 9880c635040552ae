//! Lambda function `create-social-connection`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("create-social-connection", shared::api::handlers::create_social_connection)
}
