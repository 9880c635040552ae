//! Lambda function `delete-agent`: its route and handler are in `shared::api::routes`.
fn main() {
    shared::runtime::http::run("delete-agent")
}
