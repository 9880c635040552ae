//! Lambda function `list-credit-ledger`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("list-credit-ledger", shared::api::handlers::list_credit_ledger)
}
