//! The sender: claims a due delivery, POSTs it with its signatures through the
//! [`WebhookClient`] port, and records the attempt and the next one of the schedule.

use std::sync::Arc;
use std::time::Duration;

use super::ports::{WebhookClient, WebhookPost, WebhookRepo};
use super::{Attempt, DeliveryState, WebhookDelivery, WebhookMessage, WebhookSchedule};
use crate::core::signing::webhook_signature;
use crate::domain::time::{Clock, Timestamp};

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
        let due = delivery.next_attempt_at.filter(|due| *due > now);
        if delivery.state != DeliveryState::Pending || due.is_some() {
            // Nothing to attempt: the claim goes with the delivery as stored, so that
            // neither its next copy nor a redelivery waits a whole lease for it.
            self.repo.record_delivery(&delivery, token).await?;
            return Ok(match (delivery.state, due) {
                (DeliveryState::Pending, Some(due)) => {
                    Sent::RetryIn(Duration::from_millis(due.unix_millis().saturating_sub(now.unix_millis())))
                }
                _ => Sent::Done,
            });
        }
        let (recorded, outcome) = self.attempt(delivery).await?;
        let last = recorded.attempts.last().cloned();
        tracing::info!(
            %run_id,
            sequence,
            event = recorded.event.as_str(),
            status = ?last.as_ref().and_then(|attempt| attempt.status_code),
            error = ?last.as_ref().and_then(|attempt| attempt.error.clone()),
            state = recorded.state.as_str(),
            ms = last.as_ref().map_or(0, |attempt| attempt.duration_ms),
            "webhook attempt"
        );
        if !self.repo.record_delivery(&recorded, token).await? {
            tracing::warn!(%run_id, sequence, "a webhook attempt was made but its claim had passed to another sender");
        }
        Ok(outcome)
    }

    /// Makes one attempt of a claimed `delivery`: POSTs it with its headers, and answers
    /// it with the attempt recorded and the next one of the schedule (or its end).
    async fn attempt(&self, delivery: WebhookDelivery) -> anyhow::Result<(WebhookDelivery, Sent)> {
        let secret = self.repo.webhook_secret(delivery.organization_id).await?;
        let attempt_at = self.clock.now();
        let headers = headers(&delivery, secret.as_ref().map(|secret| secret.secret.as_str()), attempt_at);
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
        Ok((recorded, outcome))
    }
}

/// The Standard Webhooks headers of an attempt at `at`, signed when there is a `secret`.
fn headers(delivery: &WebhookDelivery, secret: Option<&str>, at: Timestamp) -> Vec<(String, String)> {
    let id = delivery.id.to_string();
    let timestamp = at.unix_seconds();
    let mut headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("user-agent".to_owned(), "video-workflow-webhooks/1".to_owned()),
        ("webhook-id".to_owned(), id.clone()),
        ("webhook-timestamp".to_owned(), timestamp.to_string()),
    ];
    if let Some(secret) = secret {
        headers.push((
            "webhook-signature".to_owned(),
            webhook_signature(secret, &id, timestamp, delivery.payload.as_bytes()),
        ));
        headers.push(("x-service-signature".to_owned(), secret.to_owned()));
    }
    headers
}
