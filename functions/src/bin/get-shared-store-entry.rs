//! Lambda function `get-shared-store-entry`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::lambda::run("get-shared-store-entry")
}
