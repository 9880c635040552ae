//! Lambda function `list-avatar-profiles`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run_parking("list-avatar-profiles", shared::api::handlers::list_avatar_profiles)
}
