//! Lambda function `resume-run`: its route is in `shared::api::routes`, and it
//! names its handler, so that it links that one alone.
fn main() {
    shared::runtime::http::run("resume-run", shared::api::handlers::resume_run)
}
