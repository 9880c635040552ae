//! Run webhooks (ARCHITECTURE §4): the events a run change records, in the same write
//! as the change, and the sender that POSTs them to the run's `callback_url`, signed,
//! retried on a schedule given as data, every attempt kept in the delivery log.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::identity::OrganizationId;
use super::runs::views::MediaLinks;
use super::runs::{NodeStatus, Run, RunId, RunStatus};
use super::time::Timestamp;
use crate::core::retry::random_below;
use crate::core::signing::webhook_signature;
use crate::ports::{Clock, WebhookClient, WebhookPost, WebhookQueue, WebhookRepo};

crate::typed_id!(
    /// Identifies one webhook delivery: its `webhook-id`, the same on every attempt.
    DeliveryId
);

/// The event a payload's `flag` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventFlag {
    RunStarted,
    RunProgress,
    RunFinished,
}

impl EventFlag {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunStarted => "RUN_STARTED",
            Self::RunProgress => "RUN_PROGRESS",
            Self::RunFinished => "RUN_FINISHED",
        }
    }
}

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not delivered yet: its next attempt is due at `next_attempt_at`.
    Pending,
    Delivered,
    /// Every attempt of its schedule failed (dead-lettered); it can be redelivered.
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }
}

/// One POST of a delivery.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub at: Timestamp,
    /// The receiver's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// Why the attempt failed without (or despite) an answer: timeout, connection,
    /// refused address.
    pub error: Option<String>,
    pub duration_ms: u64,
    /// The start of the receiver's answer (at most [`RESPONSE_EXCERPT_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_excerpt: Option<String>,
}

/// Bytes of a receiver's answer read and kept.
pub const RESPONSE_EXCERPT_BYTES: usize = 1024;

/// One event of a run for its `callback_url`, with its attempts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    pub id: DeliveryId,
    pub organization_id: OrganizationId,
    pub run_id: RunId,
    /// The run's event counter: 1 for its first event.
    pub sequence: u64,
    pub event: EventFlag,
    pub url: String,
    /// The JSON body, fixed when the event happened: every attempt sends the same bytes.
    pub payload: String,
    pub created_at: Timestamp,
    pub state: DeliveryState,
    pub attempts: Vec<Attempt>,
    pub next_attempt_at: Option<Timestamp>,
    /// Attempts made before the current schedule started (a redelivery starts anew).
    #[serde(default)]
    pub schedule_start: usize,
}

impl WebhookDelivery {
    /// What a queue carries to have this delivery attempted.
    pub fn message(&self) -> WebhookMessage {
        WebhookMessage { organization_id: self.organization_id, run_id: self.run_id, sequence: self.sequence }
    }

    /// The delivery log's view.
    pub fn view(&self) -> serde_json::Value {
        serde_json::json!({
            "delivery_id": self.id,
            "event": self.event.as_str(),
            "sequence": self.sequence,
            "url": self.url,
            "state": self.state.as_str(),
            "created_at": self.created_at,
            "next_attempt_at": self.next_attempt_at,
            "attempts": self.attempts,
        })
    }
}

/// The message that asks a sender to attempt one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WebhookMessage {
    pub organization_id: OrganizationId,
    pub run_id: RunId,
    pub sequence: u64,
}

/// An organization's webhook secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookSecret {
    pub secret: String,
    pub created_at: Timestamp,
}

/// When deliveries are retried, and how long a receiver has to answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSchedule {
    /// The delay before each retry; after the last one fails the delivery is failed.
    pub retries: Vec<Duration>,
    /// Longest an attempt waits for the receiver's answer.
    pub timeout: Duration,
}

impl Default for WebhookSchedule {
    /// 5 retries at 1, 2, 4, 8 and 16 minutes; 10 s to answer.
    fn default() -> Self {
        Self {
            retries: [1, 2, 4, 8, 16].into_iter().map(|minutes| Duration::from_secs(minutes * 60)).collect(),
            timeout: Duration::from_secs(10),
        }
    }
}

impl WebhookSchedule {
    /// The delay after the `failed`-th failed attempt of a schedule (1-based), up to a
    /// fifth more at random so that receivers that failed together are not retried
    /// together; None once the retries are used up.
    pub fn retry_after(&self, failed: usize) -> Option<Duration> {
        let base = *self.retries.get(failed.checked_sub(1)?)?;
        let fifth = u64::try_from(base.as_millis() / 5).unwrap_or(u64::MAX);
        Some(base + Duration::from_millis(random_below(fifth.max(1))))
    }
}

/// A run's node statuses and status before a change, to tell what the change did.
#[derive(Clone, Debug)]
pub struct Before {
    status: RunStatus,
    nodes: Vec<NodeStatus>,
}

impl Before {
    pub fn of(run: &Run) -> Self {
        Self { status: run.status, nodes: (0..run.nodes.len()).map(|index| run.node_status(index)).collect() }
    }
}

/// Records the events of run changes and asks for their delivery.
#[derive(Clone)]
pub struct Notifier {
    /// Signs the media links in payloads.
    pub links: MediaLinks,
    pub queue: Arc<dyn WebhookQueue>,
}

impl Notifier {
    /// The events of a run that was just created: `RUN_STARTED`.
    pub fn started(&self, run: &mut Run, now: Timestamp) -> Vec<WebhookDelivery> {
        self.events(None, run, now)
    }

    /// The events of a change from `before` to `run`: `RUN_STARTED` when it (re)started,
    /// `RUN_PROGRESS` with every node whose status changed, `RUN_FINISHED` when it ended;
    /// none when the run has no `callback_url`. Each takes the run's next sequence number
    /// (the run is changed: store it with the deliveries, in one write).
    pub fn events(&self, before: Option<&Before>, run: &mut Run, now: Timestamp) -> Vec<WebhookDelivery> {
        let Some(url) = run.callback_url.clone() else { return Vec::new() };
        let was_running = before.is_some_and(|before| before.status == RunStatus::Running);
        let mut flags: Vec<(EventFlag, Vec<usize>)> = Vec::new();
        if run.status == RunStatus::Running && !was_running {
            flags.push((EventFlag::RunStarted, Vec::new()));
        }
        if let Some(before) = before {
            let changed: Vec<usize> =
                run.work_nodes().filter(|index| before.nodes.get(*index) != Some(&run.node_status(*index))).collect();
            if !changed.is_empty() {
                flags.push((EventFlag::RunProgress, changed));
            }
        }
        if run.status != RunStatus::Running && was_running {
            flags.push((EventFlag::RunFinished, Vec::new()));
        }
        flags
            .into_iter()
            .map(|(event, nodes)| {
                run.webhook_sequence += 1;
                let sequence = run.webhook_sequence;
                WebhookDelivery {
                    id: DeliveryId::now_v7(),
                    organization_id: run.organization_id,
                    run_id: run.id,
                    sequence,
                    event,
                    url: url.clone(),
                    payload: bounded_payload(run.event_payload(event, sequence, &nodes, &self.links, now)),
                    created_at: now,
                    state: DeliveryState::Pending,
                    attempts: Vec::new(),
                    next_attempt_at: Some(now),
                    schedule_start: 0,
                }
            })
            .collect()
    }

    /// Asks for the deliveries to be attempted. A failure is logged, not returned: the
    /// change they belong to is stored, and they stay `pending` in the delivery log (the
    /// local queue is the log itself; on SQS a redelivered task message sends them again).
    pub async fn send(&self, deliveries: &[WebhookDelivery]) {
        if deliveries.is_empty() {
            return;
        }
        let messages: Vec<WebhookMessage> = deliveries.iter().map(WebhookDelivery::message).collect();
        if let Err(error) = self.queue.send(&messages).await {
            tracing::error!(
                run_id = %deliveries[0].run_id,
                error = %format!("{error:#}"),
                "webhook deliveries were recorded but could not be queued"
            );
        }
    }
}

/// Largest webhook body: with the run's own state, a change's deliveries stay inside a
/// DynamoDB transaction (4 MB) and each inside an item (400 KB).
pub const MAX_PAYLOAD_BYTES: usize = 100_000;

/// The payload as sent: when it is larger than [`MAX_PAYLOAD_BYTES`] (a run of hundreds
/// of inputs and outputs), its lists of media are emptied and `truncated` is set, so
/// the receiver reads them from `GET /agent_run/{id}`; the event itself is never lost.
fn bounded_payload(mut payload: serde_json::Value) -> String {
    let text = payload.to_string();
    if text.len() <= MAX_PAYLOAD_BYTES {
        return text;
    }
    if let Some(fields) = payload.as_object_mut() {
        for list in ["inputs", "outputs"] {
            if fields.contains_key(list) {
                fields.insert(list.into(), serde_json::Value::Array(Vec::new()));
            }
        }
        if let Some(nodes) = fields.get_mut("updated_nodes").and_then(serde_json::Value::as_array_mut) {
            for node in nodes.iter_mut() {
                node["outputs"] = serde_json::Value::Array(Vec::new());
                node["errors"] = serde_json::Value::Array(Vec::new());
            }
        }
        if let Some(errors) = fields.get_mut("errors").and_then(serde_json::Value::as_array_mut) {
            errors.truncate(20);
        }
        fields.insert("truncated".into(), serde_json::Value::Bool(true));
    }
    let mut text = payload.to_string();
    if text.len() > MAX_PAYLOAD_BYTES {
        // Only the common fields are left to send.
        if let Some(fields) = payload.as_object_mut() {
            fields.retain(|name, _| {
                ["flag", "sequence", "occurred_at", "agent_id", "run_id", "status", "node_status_counts", "truncated"]
                    .contains(&name.as_str())
            });
        }
        text = payload.to_string();
    }
    text
}

/// What became of a delivery message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Nothing more to do with this message (delivered, failed for good, or not ours).
    Done,
    /// Attempt again after this delay (the queue shows the message again then).
    RetryIn(Duration),
}

/// Attempts deliveries: claims one, POSTs it with its signatures, records the attempt.
#[derive(Clone)]
pub struct WebhookSender {
    pub repo: Arc<dyn WebhookRepo>,
    pub client: Arc<dyn WebhookClient>,
    pub clock: Arc<dyn Clock>,
    pub schedule: WebhookSchedule,
}

impl WebhookSender {
    /// How long a claim on a delivery lasts: an attempt and time to record it.
    pub fn lease(&self) -> Duration {
        self.schedule.timeout + Duration::from_secs(30)
    }

    /// Handles one message under `token` (the queue's handle of it: a claim made by the
    /// queue under the same token is this one's). Errors are storage trouble: the
    /// message should come again later.
    pub async fn process(&self, message: &WebhookMessage, token: &str) -> anyhow::Result<Sent> {
        let WebhookMessage { organization_id: organization, run_id, sequence } = *message;
        let Some(delivery) = self.repo.get_delivery(organization, run_id, sequence).await? else {
            return Ok(Sent::Done);
        };
        let now = self.clock.now();
        if delivery.state != DeliveryState::Pending {
            return Ok(Sent::Done);
        }
        if let Some(due) = delivery.next_attempt_at.filter(|due| *due > now) {
            // An early copy (a duplicate, or a redelivered task's resend): come back when due.
            return Ok(Sent::RetryIn(Duration::from_millis(due.unix_millis().saturating_sub(now.unix_millis()))));
        }
        if !self.repo.claim_delivery(organization, run_id, sequence, token, now.after(self.lease()), now).await? {
            // Another sender holds it: look again once its claim has passed (it may
            // stop before recording), unless it is settled by then.
            return Ok(Sent::RetryIn(self.lease()));
        }
        // What is stored now, under the claim: another copy of the message may have
        // been attempted and recorded between the read above and the claim.
        let Some(delivery) = self.repo.get_delivery(organization, run_id, sequence).await? else {
            return Ok(Sent::Done);
        };
        if delivery.state != DeliveryState::Pending {
            return Ok(Sent::Done);
        }
        if let Some(due) = delivery.next_attempt_at.filter(|due| *due > now) {
            return Ok(Sent::RetryIn(Duration::from_millis(due.unix_millis().saturating_sub(now.unix_millis()))));
        }
        let secret = self.repo.webhook_secret(organization).await?;
        let attempt_at = self.clock.now();
        let id = delivery.id.to_string();
        let timestamp = attempt_at.unix_seconds();
        let mut headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("user-agent".to_owned(), "video-workflow-webhooks/1".to_owned()),
            ("webhook-id".to_owned(), id.clone()),
            ("webhook-timestamp".to_owned(), timestamp.to_string()),
        ];
        if let Some(secret) = &secret {
            headers.push((
                "webhook-signature".to_owned(),
                webhook_signature(&secret.secret, &id, timestamp, delivery.payload.as_bytes()),
            ));
            headers.push(("x-service-signature".to_owned(), secret.secret.clone()));
        }
        let started = std::time::Instant::now();
        let answer = self
            .client
            .post(WebhookPost {
                url: &delivery.url,
                headers: &headers,
                body: delivery.payload.as_bytes(),
                timeout: self.schedule.timeout,
            })
            .await;
        let duration_ms = started.elapsed().as_millis() as u64;
        let (status_code, error, response_excerpt) = match answer {
            Ok(answer) => (Some(answer.status), None, Some(answer.excerpt).filter(|text| !text.is_empty())),
            Err(problem) => (None, Some(problem), None),
        };
        let delivered = status_code.is_some_and(|status| (200..300).contains(&status));
        let mut recorded = delivery;
        recorded.attempts.push(Attempt { at: attempt_at, status_code, error, duration_ms, response_excerpt });
        let done = self.clock.now();
        let failed = recorded.attempts.len() - recorded.schedule_start;
        let outcome = if delivered {
            recorded.state = DeliveryState::Delivered;
            recorded.next_attempt_at = None;
            Sent::Done
        } else {
            match self.schedule.retry_after(failed) {
                Some(delay) => {
                    recorded.next_attempt_at = Some(done.after(delay));
                    Sent::RetryIn(delay)
                }
                None => {
                    recorded.state = DeliveryState::Failed;
                    recorded.next_attempt_at = None;
                    Sent::Done
                }
            }
        };
        let last = recorded.attempts.last().cloned();
        tracing::info!(
            %run_id,
            sequence,
            event = recorded.event.as_str(),
            status = ?last.as_ref().and_then(|attempt| attempt.status_code),
            error = ?last.as_ref().and_then(|attempt| attempt.error.clone()),
            state = recorded.state.as_str(),
            ms = duration_ms,
            "webhook attempt"
        );
        if !self.repo.record_delivery(&recorded, token).await? {
            tracing::warn!(%run_id, sequence, "a webhook attempt was made but its claim had passed to another sender");
        }
        Ok(outcome)
    }
}

/// Why a delivery-log request is refused.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("Run not found")]
    RunNotFound,
    #[error("Webhook delivery not found")]
    NotFound,
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

/// Most deliveries one page of the log holds.
pub const MAX_LOG_LIMIT: usize = 100;

/// One page of a run's delivery log, by sequence, and the sequence to continue after.
pub async fn delivery_log(
    repo: &dyn WebhookRepo,
    organization: OrganizationId,
    run: RunId,
    after: Option<u64>,
    limit: usize,
) -> Result<(Vec<WebhookDelivery>, Option<u64>), DeliveryError> {
    let mut page = repo.list_deliveries(organization, run, after, limit).await?;
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(|delivery| delivery.sequence)
    } else {
        None
    };
    Ok((page, next))
}

/// `POST /agent_run/{id}/webhooks/{delivery_id}/redeliver`: the delivery is attempted
/// again now, on a new schedule, with the same `webhook-id` and body.
pub async fn redeliver(
    repo: &dyn WebhookRepo,
    queue: &dyn WebhookQueue,
    clock: &dyn Clock,
    organization: OrganizationId,
    run: RunId,
    id: DeliveryId,
) -> Result<WebhookDelivery, DeliveryError> {
    let mut delivery = repo.find_delivery(organization, run, id).await?.ok_or(DeliveryError::NotFound)?;
    let now = clock.now();
    delivery.state = DeliveryState::Pending;
    delivery.next_attempt_at = Some(now);
    delivery.schedule_start = delivery.attempts.len();
    if !repo.redeliver(&delivery, now).await? {
        return Err(DeliveryError::Conflict(
            "this delivery is being attempted right now (or just was); look at its log again in a few seconds".into(),
        ));
    }
    queue.send(&[delivery.message()]).await?;
    Ok(delivery)
}

/// `POST /webhooks/secret`: a new secret for the organization, replacing any other.
pub async fn rotate_secret(
    repo: &dyn WebhookRepo,
    clock: &dyn Clock,
    organization: OrganizationId,
) -> anyhow::Result<WebhookSecret> {
    let secret = WebhookSecret { secret: crate::core::signing::generate_webhook_secret(), created_at: clock.now() };
    repo.put_webhook_secret(organization, Some(&secret)).await?;
    Ok(secret)
}

/// `DELETE /webhooks/secret`: false when the organization had none.
pub async fn delete_secret(repo: &dyn WebhookRepo, organization: OrganizationId) -> anyhow::Result<bool> {
    let had = repo.webhook_secret(organization).await?.is_some();
    repo.put_webhook_secret(organization, None).await?;
    Ok(had)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_too_large_for_a_delivery_is_sent_without_its_media_lists() {
        let output = serde_json::json!({ "id": "x", "video_url": "https://example.com/".repeat(20), "sources": [] });
        let payload = serde_json::json!({
            "flag": "RUN_FINISHED", "sequence": 9, "run_id": "r", "status": "completed",
            "outputs": vec![output; 2_000], "inputs": [], "errors": [],
        });
        let sent: serde_json::Value = serde_json::from_str(&bounded_payload(payload.clone())).unwrap();
        assert!(sent.to_string().len() <= MAX_PAYLOAD_BYTES);
        assert_eq!(
            (sent["truncated"].clone(), sent["outputs"].clone()),
            (serde_json::json!(true), serde_json::json!([]))
        );
        assert_eq!(
            (sent["flag"].clone(), sent["sequence"].clone()),
            (payload["flag"].clone(), payload["sequence"].clone())
        );
        let small = serde_json::json!({ "flag": "RUN_STARTED", "inputs": [] });
        assert_eq!(bounded_payload(small.clone()), small.to_string(), "a small payload is sent as it is");
    }

    #[test]
    fn the_default_schedule_is_1_2_4_8_16_minutes_with_up_to_a_fifth_of_jitter() {
        let schedule = WebhookSchedule::default();
        for (failed, minutes) in [(1, 1u64), (2, 2), (3, 4), (4, 8), (5, 16)] {
            let base = Duration::from_secs(minutes * 60);
            let delay = schedule.retry_after(failed).unwrap();
            assert!(delay >= base && delay < base + base / 5, "{failed}: {delay:?}");
        }
        assert_eq!(schedule.retry_after(6), None);
        assert_eq!(schedule.retry_after(0), None);
        assert_eq!(schedule.timeout, Duration::from_secs(10));
    }
}
