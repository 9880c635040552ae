//! Lambda function `list-social-posts`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("list-social-posts", shared::api::handlers::list_social_posts)
}
