//! Lambda function `put-shared-store-entry`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("put-shared-store-entry", shared::api::handlers::put_shared_store_entry)
}
