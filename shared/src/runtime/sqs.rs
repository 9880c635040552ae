//! The SQS-fed Lambdas. `node-worker`: its event source hands it batches of task
//! messages; each runs through the same worker as `serve`'s, and the ones that could not
//! be handled (storage trouble, an unreadable message) are reported as batch item
//! failures, so SQS delivers only those again, and after the queue's receive limit moves
//! them to the DLQ. `webhook-sender`: attempts the deliveries its event source hands it
//! with the same sender as `serve`'s; a delivery to retry later has its message hidden
//! until then (ChangeMessageVisibility) and reported as a failure, so it comes back
//! when due.

use std::sync::Arc;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use futures::stream::{self, StreamExt};

use crate::adapters::sqs::SqsWebhookQueue;
use crate::app::App;
use crate::domain::runs::worker::Processed;
use crate::domain::webhooks::sender::Sent;
use crate::domain::webhooks::WebhookMessage;
use crate::domain::work::Work;

/// The function's name, and its binary's.
pub const NODE_WORKER: &str = "node-worker";
/// The DynamoDB actions `node-worker` performs, and its policy grants: Query reads the
/// delivery log when a redelivered message finds its task ended (events to queue again);
/// DeleteItem moves a social post it publishes out of its former status's list.
pub const NODE_WORKER_DYNAMODB_ACTIONS: &[&str] =
    &["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:DeleteItem"];
/// The S3 actions on the media bucket `node-worker` performs, and its policy grants:
/// uploads are read at the version finalize sealed, outputs by key.
/// (A URL input streamed in a multipart upload that fails part way is left to the bucket's
/// `abort-incomplete-multipart-uploads` rule: its abort is not granted.)
pub const NODE_WORKER_S3_ACTIONS: &[&str] = &["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject"];
/// The S3 actions `node-worker` performs on the files of parts only (under
/// [`PARTS_PREFIX`](crate::domain::runs::parts::PARTS_PREFIX)), granted by a policy of
/// their own on that prefix: a joined task's parts are deleted.
pub const NODE_WORKER_PART_ACTIONS: &[&str] = &["s3:DeleteObject"];
/// The SQS actions `node-worker` performs (downstream tasks, run events), and its
/// policy grants; receiving and deleting are the event source's, granted apart.
pub const NODE_WORKER_SQS_ACTIONS: &[&str] = &["sqs:SendMessage"];
/// The queues `node-worker` sends to.
pub const NODE_WORKER_QUEUES: &[&str] = &["TaskQueue", "WebhookQueue"];

/// The webhook sender's function name, and its binary's.
pub const WEBHOOK_SENDER: &str = "webhook-sender";
/// The DynamoDB actions `webhook-sender` performs: read a delivery and the secret, claim
/// (UpdateItem) and record (PutItem).
pub const WEBHOOK_SENDER_DYNAMODB_ACTIONS: &[&str] = &["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:PutItem"];
/// The SQS actions `webhook-sender` performs on its own queue: hiding a message until
/// its retry is due.
pub const WEBHOOK_SENDER_SQS_ACTIONS: &[&str] = &["sqs:ChangeMessageVisibility"];

/// Messages of one batch worked on at once (the event source's batch size is the bound).
const PARALLEL_TASKS: usize = 1;

/// Runs an SQS-fed function until the runtime stops it: `setup` builds its state at cold
/// start (a failure is reported to the Runtime API), `handle` answers each batch.
fn run_sqs_function<S, Setup, Handle, Answer>(name: &'static str, setup: Setup, handle: Handle) -> !
where
    S: Send + Sync + 'static,
    Setup: std::future::Future<Output = anyhow::Result<S>>,
    Handle: Fn(Arc<S>, SqsEvent) -> Answer + Send + Sync + Copy + 'static,
    Answer: std::future::Future<Output = SqsBatchResponse> + Send,
{
    super::run_function(name, setup, move |state: S| {
        let state = Arc::new(state);
        lambda_http::lambda_runtime::run(lambda_http::service_fn(move |event: lambda_http::LambdaEvent<SqsEvent>| {
            let state = state.clone();
            async move { Ok::<_, std::convert::Infallible>(handle(state, event.payload).await) }
        }))
    })
}

/// Runs the `node-worker` function until the runtime stops it.
pub fn run_node_worker() -> ! {
    run_sqs_function(
        NODE_WORKER,
        async {
            let app = App::from_env().await?;
            anyhow::ensure!(app.engine().missing.is_none(), "node-worker needs TASK_QUEUE_URL and MEDIA_LINK_SECRET");
            Ok(app)
        },
        |app: Arc<App>, event| async move { handle_batch(&app, event).await },
    )
}

/// Parses every record of a batch as an `M` and hands it to `handle`, `parallel` at
/// once; answers the records to deliver again: those `handle` refused (None) and those
/// that are not an `M` (delivering them again cannot help; the DLQ keeps them).
async fn each_record<M, H, F>(event: SqsEvent, parallel: usize, kind: &'static str, handle: H) -> SqsBatchResponse
where
    M: serde::de::DeserializeOwned,
    H: Fn(M, aws_lambda_events::event::sqs::SqsMessage) -> F,
    F: std::future::Future<Output = bool>,
{
    let outcomes: Vec<Option<BatchItemFailure>> = stream::iter(event.records)
        .map(|record| {
            let handle = &handle;
            async move {
                let id = record.message_id.clone().unwrap_or_default();
                let Some(Ok(message)) = record.body.as_deref().map(serde_json::from_str::<M>) else {
                    tracing::error!(message_id = id, body = ?record.body, "not a {kind} message");
                    return Some(failure(id));
                };
                (!handle(message, record).await).then(|| failure(id))
            }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    response(outcomes.into_iter().flatten().collect())
}

/// Every record of a batch, when the deployment lacks what runs need (no task queue):
/// all go back (and on to the DLQ).
fn all_failed(event: &SqsEvent) -> SqsBatchResponse {
    response(event.records.iter().filter_map(|record| record.message_id.clone()).map(failure).collect())
}

/// Works on every message of a batch; answers the ones to deliver again.
pub async fn handle_batch(app: &App, event: SqsEvent) -> SqsBatchResponse {
    let engine = &app.engine();
    if engine.missing.is_some() {
        return all_failed(&event);
    }
    each_record(event, PARALLEL_TASKS, "task", |message: Work, record| async move {
        match engine.dispatch().process(message).await {
            Ok(Processed::Done) => true,
            // A new copy, delivered after the delay (a task waiting for its avatar, a
            // claim held by another worker): this receive is done, and the copy's is
            // its first (the queue's dead-letter count is for failures).
            Ok(Processed::Later(delay)) => match engine.queue.send_after(&[message], delay).await {
                Ok(()) => true,
                Err(error) => {
                    let id = record.message_id.unwrap_or_default();
                    tracing::warn!(error = %format!("{error:#}"), message_id = id, "task message comes back after its visibility timeout");
                    false
                }
            },
            Err(error) => {
                let id = record.message_id.unwrap_or_default();
                tracing::warn!(error = %format!("{error:#}"), message_id = id, "task message will be delivered again");
                false
            }
        }
    })
    .await
}

/// Runs the `webhook-sender` function until the runtime stops it.
pub fn run_webhook_sender() -> ! {
    run_sqs_function(
        WEBHOOK_SENDER,
        async {
            let config = crate::config::Config::from_env()?;
            let url = config
                .webhook_queue_url
                .clone()
                .ok_or_else(|| anyhow::anyhow!("webhook-sender needs WEBHOOK_QUEUE_URL"))?;
            let aws = crate::adapters::aws_env::lambda_settings()?;
            let app = App::from_env_with(&aws)?;
            anyhow::ensure!(
                app.engine().missing.is_none(),
                "webhook-sender needs TASK_QUEUE_URL and MEDIA_LINK_SECRET"
            );
            Ok((app, SqsWebhookQueue::from_config(&aws, url)))
        },
        |state: Arc<(App, SqsWebhookQueue)>, event| async move { handle_webhook_batch(&state.0, &state.1, event).await },
    )
}

/// Attempts every delivery of a batch (concurrently: one slow receiver does not hold up
/// the others); answers the messages to deliver again.
pub async fn handle_webhook_batch(app: &App, queue: &SqsWebhookQueue, event: SqsEvent) -> SqsBatchResponse {
    let engine = &app.engine();
    if engine.missing.is_some() {
        return all_failed(&event);
    }
    each_record(event, WEBHOOKS_AT_ONCE, "webhook", |message: WebhookMessage, record| async move {
        let id = record.message_id.unwrap_or_default();
        match engine.sender.process(&message, &id).await {
            Ok(Sent::Done) => true,
            Ok(Sent::RetryIn(delay)) => {
                let handle = record.receipt_handle.unwrap_or_default();
                if let Err(error) = queue.show_after(&handle, delay).await {
                    tracing::warn!(error = %format!("{error:#}"), message_id = id, "could not delay a webhook retry");
                }
                false
            }
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), message_id = id, "webhook message will be delivered again");
                false
            }
        }
    })
    .await
}

/// Deliveries one `webhook-sender` invocation attempts at once (its batch size bounds it).
const WEBHOOKS_AT_ONCE: usize = 10;

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
