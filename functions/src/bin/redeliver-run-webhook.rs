//! Lambda function `redeliver-run-webhook`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("redeliver-run-webhook")
}
