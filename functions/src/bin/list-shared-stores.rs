//! Lambda function `list-shared-stores`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("list-shared-stores", shared::api::handlers::list_shared_stores)
}
