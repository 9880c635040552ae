//! Lambda function `rename-shared-store`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("rename-shared-store", shared::api::handlers::rename_shared_store)
}
