//! Lambda function `finalize-upload`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("finalize-upload", shared::api::handlers::finalize_upload)
}
