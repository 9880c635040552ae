//! Lambda function `webhook-sender`: attempts the webhook deliveries its SQS event source delivers.
fn main() {
    shared::runtime::sqs::run_webhook_sender()
}
