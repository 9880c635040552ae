//! Lambda function `create-asset-connection`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("create-asset-connection", shared::api::handlers::create_asset_connection)
}
