//! Lambda function `sweeper`: every minute (EventBridge schedule), repairs what crashes
//! and failed sends left behind.
fn main() {
    shared::runtime::schedule::run_sweeper()
}
