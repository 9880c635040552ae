//! Lambda function `get-avatar-profile`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("get-avatar-profile", shared::api::handlers::get_avatar_profile)
}
