//! Lambda function `list-shared-stores`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::lambda::run("list-shared-stores")
}
