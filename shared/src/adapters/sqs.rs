//! Queues on SQS: node tasks and webhook deliveries. Messages are sent in batches of
//! ten, every entry a batch refuses is sent again on a bounded schedule; `serve
//! --backend aws` receives with long polling, and the `node-worker` and
//! `webhook-sender` Lambdas get them from their event sources.

use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;

use super::dynamodb::{sdk_retry_config, sdk_timeout_config};
use super::{ActionLog, LazyClient};
use crate::core::queue::Delivery;
use crate::core::queue::Inbox;
use crate::core::queue::Queue;
use crate::core::retry::{AWS_ATTEMPT_TIMEOUT, AWS_SDK_CALLS, UNPROCESSED_ITEMS};
use crate::domain::webhooks::WebhookMessage;
use crate::domain::work::Work;

/// Entries per SendMessageBatch (SQS's limit).
const BATCH_ENTRIES: usize = 10;
/// Messages per ReceiveMessage (SQS's limit).
const RECEIVE_MAX: usize = 10;
/// Long-polling wait of a receive (SQS allows up to 20 s).
const RECEIVE_WAIT_SECONDS: i32 = 10;

/// The SQS client of a queue: the retries and timeouts of [`AWS_SDK_CALLS`], and room
/// in each call for the receive's long poll.
fn make_client(config: &aws_config::SdkConfig) -> Client {
    let wait = Duration::from_secs(RECEIVE_WAIT_SECONDS as u64);
    let attempt = AWS_ATTEMPT_TIMEOUT + wait;
    // A receive on an idle queue waits its whole long poll: the call's budget has room.
    let long_polls = crate::core::retry::RetryPolicy { budget: AWS_SDK_CALLS.budget + wait, ..AWS_SDK_CALLS };
    let config = aws_sdk_sqs::config::Builder::from(config)
        .retry_config(sdk_retry_config(&AWS_SDK_CALLS))
        .timeout_config(sdk_timeout_config(&long_polls, attempt))
        .build();
    Client::from_conf(config)
}

/// A queue of messages of type `M` on SQS; cheap to clone.
pub struct SqsQueue<M> {
    client: LazyClient<Client>,
    queue_url: String,
    messages: std::marker::PhantomData<fn() -> M>,
}

impl<M> Clone for SqsQueue<M> {
    fn clone(&self) -> Self {
        Self { client: self.client.clone(), queue_url: self.queue_url.clone(), messages: std::marker::PhantomData }
    }
}

/// The node-task queue on SQS.
pub type SqsTaskQueue = SqsQueue<Work>;
/// The webhook-delivery queue on SQS.
pub type SqsWebhookQueue = SqsQueue<WebhookMessage>;

impl<M> SqsQueue<M>
where
    M: serde::Serialize + serde::de::DeserializeOwned + Send + Sync,
{
    /// Uses AWS settings loaded already; the client is made on first use.
    pub fn from_config(config: &aws_config::SdkConfig, queue_url: impl Into<String>) -> Self {
        Self { client: LazyClient::new(config), queue_url: queue_url.into(), messages: std::marker::PhantomData }
    }

    fn client(&self) -> &Client {
        self.client.get(make_client)
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Creates the queue `name` when it does not exist yet (local use against the
    /// emulator; AWS gets it from SAM) with the given visibility timeout, and returns
    /// its URL.
    pub async fn ensure_queue(
        config: &aws_config::SdkConfig,
        name: &str,
        visibility: Duration,
    ) -> anyhow::Result<String> {
        let client = Client::new(config);
        let created = client
            .create_queue()
            .queue_name(name)
            .attributes(QueueAttributeName::VisibilityTimeout, visibility.as_secs().to_string())
            .send()
            .await
            .with_context(|| format!("creating the SQS queue {name}"))?;
        created.queue_url.context("SQS did not return the queue's URL")
    }

    /// A copy whose client records the IAM action of every call.
    pub fn recording_actions(&self) -> (Self, ActionLog) {
        let log = ActionLog::default();
        let config = self.client().config().to_builder().interceptor(RecordActions(log.clone())).build();
        (
            Self {
                client: LazyClient::ready(Client::from_conf(config)),
                queue_url: self.queue_url.clone(),
                messages: std::marker::PhantomData,
            },
            log,
        )
    }

    async fn send_messages(&self, messages: &[M], delay: Duration) -> anyhow::Result<()> {
        let delay_seconds = delay.min(crate::core::queue::MAX_SEND_DELAY).as_secs() as i32;
        for chunk in messages.chunks(BATCH_ENTRIES) {
            let mut pending: Vec<SendMessageBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .map(|(index, message)| {
                    SendMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .message_body(serde_json::to_string(message)?)
                        .set_delay_seconds((delay_seconds > 0).then_some(delay_seconds))
                        .build()
                        .context("building an SQS entry")
                })
                .collect::<anyhow::Result<_>>()?;
            let mut retry = UNPROCESSED_ITEMS.start();
            while !pending.is_empty() {
                let output = self
                    .client()
                    .send_message_batch()
                    .queue_url(&self.queue_url)
                    .set_entries(Some(pending.clone()))
                    .send()
                    .await
                    .map_err(|error| {
                        anyhow::anyhow!(
                            "SQS did not take messages: {}",
                            aws_sdk_sqs::error::DisplayErrorContext(&error)
                        )
                    })?;
                let failed = output.failed();
                if let Some(wrong) = failed.iter().find(|entry| entry.sender_fault) {
                    anyhow::bail!("SQS refused a message: {}", wrong.message.as_deref().unwrap_or(&wrong.code));
                }
                pending.retain(|entry| failed.iter().any(|failure| failure.id == entry.id));
                if !pending.is_empty() {
                    retry.wait(format!("SQS left {} messages unsent", pending.len())).await?;
                }
            }
        }
        Ok(())
    }

    async fn receive_messages(&self, max: usize, lease: Duration) -> anyhow::Result<Vec<Delivery<M>>> {
        let output = self
            .client()
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(max.clamp(1, RECEIVE_MAX) as i32)
            .visibility_timeout(lease.as_secs().min(12 * 3600) as i32)
            .wait_time_seconds(RECEIVE_WAIT_SECONDS)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|error| {
                anyhow::anyhow!("receiving messages: {}", aws_sdk_sqs::error::DisplayErrorContext(&error))
            })?;
        let mut deliveries = Vec::new();
        for message in output.messages.unwrap_or_default() {
            let handle = message.receipt_handle.context("an SQS message without a receipt handle")?;
            let receives = message
                .attributes
                .as_ref()
                .and_then(|attributes| attributes.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|count| count.parse().ok())
                .unwrap_or(1);
            match message.body.as_deref().map(serde_json::from_str::<M>) {
                Some(Ok(body)) => deliveries.push(Delivery { handle, message: body, receives }),
                _ => {
                    // Not ours to work on: dropping it is the only way it stops coming back.
                    tracing::warn!(body = ?message.body, "an SQS message of another kind was deleted");
                    self.delete(&handle).await?;
                }
            }
        }
        Ok(deliveries)
    }

    /// Shows the message with receipt `handle` again after `delay` (at most 12 hours).
    pub async fn show_after(&self, handle: &str, delay: Duration) -> anyhow::Result<()> {
        self.client()
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(handle)
            // Whole seconds, rounded up: a message never shows before it is due.
            .visibility_timeout(delay.as_millis().div_ceil(1000).min(12 * 3600) as i32)
            .send()
            .await
            .map_err(|error| {
                anyhow::anyhow!("delaying a message: {}", aws_sdk_sqs::error::DisplayErrorContext(&error))
            })?;
        Ok(())
    }

    async fn delete(&self, handle: &str) -> anyhow::Result<()> {
        self.client().delete_message().queue_url(&self.queue_url).receipt_handle(handle).send().await.map_err(
            |error| anyhow::anyhow!("deleting a message: {}", aws_sdk_sqs::error::DisplayErrorContext(&error)),
        )?;
        Ok(())
    }
}

#[async_trait]
impl<M> Queue<M> for SqsQueue<M>
where
    M: serde::Serialize + serde::de::DeserializeOwned + Send + Sync,
{
    async fn send(&self, messages: &[M]) -> anyhow::Result<()> {
        self.send_messages(messages, Duration::ZERO).await
    }

    async fn send_after(&self, messages: &[M], delay: Duration) -> anyhow::Result<()> {
        self.send_messages(messages, delay).await
    }
}

#[async_trait]
impl<M> Inbox<M> for SqsQueue<M>
where
    M: serde::Serialize + serde::de::DeserializeOwned + Send + Sync,
{
    async fn receive(&self, max: usize, lease: Duration) -> anyhow::Result<Vec<Delivery<M>>> {
        self.receive_messages(max, lease).await
    }

    async fn acknowledge(&self, delivery: &Delivery<M>) -> anyhow::Result<()> {
        self.delete(&delivery.handle).await
    }

    async fn retry_later(&self, delivery: &Delivery<M>, delay: Duration) -> anyhow::Result<()> {
        self.show_after(&delivery.handle, delay).await
    }
}

/// Maps every SQS call to its IAM action.
#[derive(Debug)]
struct RecordActions(ActionLog);

impl aws_sdk_sqs::config::Intercept for RecordActions {
    fn name(&self) -> &'static str {
        "RecordSqsActions"
    }

    fn read_before_execution(
        &self,
        context: &aws_sdk_sqs::config::interceptors::BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        use aws_sdk_sqs::operation as op;
        let input = context.input();
        let actions = [
            (input.downcast_ref::<op::send_message_batch::SendMessageBatchInput>().is_some(), "SendMessage"),
            (input.downcast_ref::<op::send_message::SendMessageInput>().is_some(), "SendMessage"),
            (input.downcast_ref::<op::receive_message::ReceiveMessageInput>().is_some(), "ReceiveMessage"),
            (input.downcast_ref::<op::delete_message::DeleteMessageInput>().is_some(), "DeleteMessage"),
            (
                input.downcast_ref::<op::change_message_visibility::ChangeMessageVisibilityInput>().is_some(),
                "ChangeMessageVisibility",
            ),
        ];
        let action = actions.iter().find(|(matched, _)| *matched).map_or("unrecognized-operation", |(_, name)| name);
        self.0.record([format!("sqs:{action}")]);
        Ok(())
    }
}
