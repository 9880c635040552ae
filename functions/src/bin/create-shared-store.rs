//! Lambda function `create-shared-store`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("create-shared-store", shared::api::handlers::create_shared_store)
}
