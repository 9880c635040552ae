//! Lambda function `get-social-post`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("get-social-post", shared::api::handlers::get_social_post)
}
