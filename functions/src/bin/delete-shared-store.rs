//! Lambda function `delete-shared-store`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("delete-shared-store", shared::api::handlers::delete_shared_store)
}
