//! Lambda function `list-shared-stores`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("list-shared-stores")
}
