//! Lambda function `finalize-upload`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::lambda::run("finalize-upload")
}
