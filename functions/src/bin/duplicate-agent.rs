//! Lambda function `duplicate-agent`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("duplicate-agent")
}
