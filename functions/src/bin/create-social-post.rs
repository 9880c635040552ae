//! Lambda function `create-social-post`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("create-social-post", shared::api::handlers::create_social_post)
}
