//! Lambda function `bulk-upsert-shared-store-entries`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run_parking(
        "bulk-upsert-shared-store-entries",
        shared::api::handlers::bulk_upsert_shared_store_entries,
    )
}
