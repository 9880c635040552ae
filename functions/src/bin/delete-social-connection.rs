//! Lambda function `delete-social-connection`: its route is in `shared::api::routes`, and
//! it names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("delete-social-connection", shared::api::handlers::delete_social_connection)
}
