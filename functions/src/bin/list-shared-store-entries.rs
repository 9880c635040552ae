//! Lambda function `list-shared-store-entries`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run_parking("list-shared-store-entries", shared::api::handlers::list_shared_store_entries)
}
