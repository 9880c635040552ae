//! Lambda function `get-media`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("get-media", shared::api::handlers::get_media)
}
