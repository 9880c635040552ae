//! Lambda function `put-shared-store-entry`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::lambda::run("put-shared-store-entry")
}
