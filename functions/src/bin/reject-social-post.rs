//! Lambda function `reject-social-post`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("reject-social-post", shared::api::handlers::reject_social_post)
}
