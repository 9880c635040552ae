//! Lambda function `list-shared-store-entries`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::lambda::run("list-shared-store-entries")
}
