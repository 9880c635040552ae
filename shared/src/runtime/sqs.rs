//! The `node-worker` Lambda: its SQS event source hands it batches of task messages; each
//! runs through the same worker as `serve`'s, and the ones that could not be handled
//! (storage trouble, an unreadable message) are reported as batch item failures, so SQS
//! delivers only those again, and after the queue's receive limit moves them to the DLQ.

use std::sync::Arc;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use futures::stream::{self, StreamExt};

use crate::app::App;
use crate::ports::TaskMessage;

/// The function's name, and its binary's.
pub const NODE_WORKER: &str = "node-worker";
/// The DynamoDB actions `node-worker` performs, and its policy grants.
pub const NODE_WORKER_DYNAMODB_ACTIONS: &[&str] = &["dynamodb:GetItem", "dynamodb:PutItem"];
/// The S3 actions on the media bucket `node-worker` performs, and its policy grants:
/// uploads are read at the version finalize sealed, outputs by key.
pub const NODE_WORKER_S3_ACTIONS: &[&str] = &["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject"];
/// The SQS actions on the node-task queue `node-worker` performs (downstream tasks),
/// and its policy grants; receiving and deleting are the event source's, granted apart.
pub const NODE_WORKER_SQS_ACTIONS: &[&str] = &["sqs:SendMessage"];

/// Messages of one batch worked on at once (the event source's batch size is the bound).
const PARALLEL_TASKS: usize = 1;

/// Runs the `node-worker` function until the runtime stops it.
pub fn run_node_worker() -> ! {
    super::http::init_tracing();
    let result =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(anyhow::Error::from).and_then(
            |runtime| {
                runtime.block_on(async move {
                    let app = Arc::new(App::from_env().await?);
                    anyhow::ensure!(app.engine.is_some(), "node-worker needs TASK_QUEUE_URL and MEDIA_LINK_SECRET");
                    let service = lambda_http::service_fn(move |event: lambda_http::LambdaEvent<SqsEvent>| {
                        let app = app.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle_batch(&app, event.payload).await) }
                    });
                    lambda_http::lambda_runtime::run(service).await.map_err(|error| anyhow::anyhow!("{error}"))
                })
            },
        );
    match result {
        Ok(()) => std::process::exit(0),
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), function = "node-worker", "lambda runtime stopped");
            std::process::exit(1);
        }
    }
}

/// Works on every message of a batch; answers the ones to deliver again.
pub async fn handle_batch(app: &App, event: SqsEvent) -> SqsBatchResponse {
    let Some(engine) = app.engine.as_ref() else {
        // Nothing can run: every message goes back (and on to the DLQ).
        let failures = event.records.iter().filter_map(|record| record.message_id.clone()).map(failure).collect();
        return response(failures);
    };
    let outcomes: Vec<Option<BatchItemFailure>> = stream::iter(event.records)
        .map(|record| async move {
            let id = record.message_id.clone().unwrap_or_default();
            let message = match record.body.as_deref().map(serde_json::from_str::<TaskMessage>) {
                Some(Ok(message)) => message,
                _ => {
                    // Not a task message: delivering it again cannot help; the DLQ keeps it.
                    tracing::error!(message_id = id, body = ?record.body, "not a task message");
                    return Some(failure(id));
                }
            };
            match engine.worker.process(message).await {
                Ok(()) => None,
                Err(error) => {
                    tracing::warn!(error = %format!("{error:#}"), message_id = id, "task message will be delivered again");
                    Some(failure(id))
                }
            }
        })
        .buffer_unordered(PARALLEL_TASKS)
        .collect()
        .await;
    response(outcomes.into_iter().flatten().collect())
}

fn response(failures: Vec<BatchItemFailure>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = failures;
    response
}

fn failure(id: String) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    failure.item_identifier = id;
    failure
}
