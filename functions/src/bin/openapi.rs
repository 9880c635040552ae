//! `openapi`: prints the service description (OpenAPI 3.1) that `GET /openapi.json`
//! answers; `cargo run --bin openapi > docs/openapi.json` refreshes the committed copy.
fn main() {
    print!("{}", shared::api::openapi::json());
}
