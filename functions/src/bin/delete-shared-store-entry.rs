//! Lambda function `delete-shared-store-entry`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("delete-shared-store-entry", shared::api::handlers::delete_shared_store_entry)
}
