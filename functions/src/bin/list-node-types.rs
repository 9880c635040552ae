//! Lambda function `list-node-types`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::lambda::run("list-node-types")
}
