//! Lambda function `approve-social-post`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("approve-social-post", shared::api::handlers::approve_social_post)
}
