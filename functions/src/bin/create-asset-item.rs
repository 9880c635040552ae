//! Lambda function `create-asset-item`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("create-asset-item", shared::api::handlers::create_asset_item)
}
