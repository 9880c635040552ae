//! Lambda function `start-run`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("start-run")
}
