//! Run webhooks (ARCHITECTURE §4): the delivery records a run change stores with itself
//! (one per event, see [`crate::domain::runs::events`]) and the retry schedule, given as
//! data. The [`sender`] POSTs them, signed; [`log`] serves the delivery log and
//! [`secret`] the organization's secret.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::time::Timestamp;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::RunId;

pub mod log;
pub mod ports;
pub mod secret;
pub mod sender;
use crate::core::retry::random_below;
pub use crate::domain::ids::DeliveryId;

/// A run event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

/// A delivery's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    // Not delivered yet: its next attempt is due at `next_attempt_at`.
    Pending,
    Delivered,
    // Every attempt of its schedule failed (dead-lettered); it can be redelivered.
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
    /// The start of the receiver's answer (at most [`RESPONSE_EXCERPT_BYTES`]); always
    /// written, null when there was none.
    #[serde(default)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_without_an_answer_shows_a_null_response_excerpt() {
        let at = Timestamp::now();
        let attempt =
            Attempt { at, status_code: None, error: Some("timeout".into()), duration_ms: 3, response_excerpt: None };
        let shown = serde_json::to_value(&attempt).unwrap();
        assert!(shown["response_excerpt"].is_null() && shown.as_object().unwrap().contains_key("response_excerpt"));
        assert_eq!(serde_json::from_value::<Attempt>(shown).unwrap(), attempt);
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
