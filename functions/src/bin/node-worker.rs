//! Lambda function `node-worker`: runs the node tasks its SQS event source delivers.
fn main() {
    shared::runtime::sqs::run_node_worker()
}
