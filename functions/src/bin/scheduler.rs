//! Lambda function `scheduler`: every minute (EventBridge schedule), fires the triggers
//! that are due.
fn main() {
    shared::runtime::schedule::run_scheduler()
}
