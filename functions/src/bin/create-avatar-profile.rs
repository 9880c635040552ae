//! Lambda function `create-avatar-profile`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("create-avatar-profile", shared::api::handlers::create_avatar_profile)
}
