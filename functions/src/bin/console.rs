//! Lambda function `console`: the console's files at `GET /console/{proxy+}`, embedded
//! in the binary (`console/dist`), no API key and no state.
fn main() {
    shared::runtime::http::run_console()
}
