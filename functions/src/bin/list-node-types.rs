//! Lambda function `list-node-types`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("list-node-types", shared::api::handlers::list_node_types)
}
