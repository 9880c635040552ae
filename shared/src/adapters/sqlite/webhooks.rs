//! Webhook deliveries and secrets in SQLite. The delivery table is also the local
//! webhook queue: a pending delivery whose attempt is due and that no sender claims is
//! a message, so a delivery written with its run's change cannot be lost between the
//! write and a send. A run's first attempts go out in sequence order: a delivery waits
//! while an earlier one of its run has not been attempted yet.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use tokio::sync::Notify;

use super::{Db, Sqlite};
use crate::core::queue::Delivery;
use crate::core::queue::Inbox;
use crate::core::queue::Queue;
use crate::domain::ids::DeliveryId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::RunId;
use crate::domain::time::Clock;
use crate::domain::time::Timestamp;
use crate::domain::webhooks::ports::WebhookRepo;
use crate::domain::webhooks::{WebhookDelivery, WebhookMessage, WebhookSecret};

/// How long a receive waits for a delivery to become due when none is.
const IDLE_WAIT: Duration = Duration::from_millis(500);

fn millis(at: Option<Timestamp>) -> Option<i64> {
    at.map(|at| at.unix_millis() as i64)
}

fn from_document(text: &str) -> anyhow::Result<WebhookDelivery> {
    serde_json::from_str(text).map_err(|error| anyhow::anyhow!("a stored webhook delivery could not be read: {error}"))
}

/// Inserts new deliveries (with their run's write).
pub(super) fn insert_deliveries(
    connection: &rusqlite::Connection,
    deliveries: &[WebhookDelivery],
) -> anyhow::Result<()> {
    if deliveries.is_empty() {
        return Ok(());
    }
    let mut statement = connection
        .prepare_cached(
            "INSERT INTO webhook_deliveries
             (organization_id, run_id, sequence, id, state, next_attempt_ms, attempted, document)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .db("recording webhook deliveries")?;
    for delivery in deliveries {
        statement
            .execute(params![
                delivery.organization_id.to_string(),
                delivery.run_id.to_string(),
                delivery.sequence as i64,
                delivery.id.to_string(),
                delivery.state.as_str(),
                millis(delivery.next_attempt_at),
                delivery.attempts.len() as i64,
                serde_json::to_string(delivery)?,
            ])
            .db("recording webhook deliveries")?;
    }
    Ok(())
}

impl Sqlite {
    async fn delivery_where(
        &self,
        condition: &'static str,
        values: Vec<String>,
    ) -> anyhow::Result<Option<WebhookDelivery>> {
        let text: Option<String> = self
            .call(move |connection| {
                connection
                    .prepare_cached(&format!("SELECT document FROM webhook_deliveries WHERE {condition}"))
                    .db("reading a webhook delivery")?
                    .query_row(rusqlite::params_from_iter(values), |row| row.get(0))
                    .optional()
                    .db("reading a webhook delivery")
            })
            .await?;
        text.as_deref().map(from_document).transpose()
    }
}

#[async_trait]
impl WebhookRepo for Sqlite {
    async fn get_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        sequence: u64,
    ) -> anyhow::Result<Option<WebhookDelivery>> {
        self.delivery_where(
            "organization_id = ?1 AND run_id = ?2 AND sequence = ?3",
            vec![organization.to_string(), run.to_string(), sequence.to_string()],
        )
        .await
    }

    async fn find_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        id: DeliveryId,
    ) -> anyhow::Result<Option<WebhookDelivery>> {
        self.delivery_where(
            "organization_id = ?1 AND run_id = ?2 AND id = ?3",
            vec![organization.to_string(), run.to_string(), id.to_string()],
        )
        .await
    }

    async fn list_deliveries(
        &self,
        organization: OrganizationId,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> anyhow::Result<Vec<WebhookDelivery>> {
        let texts: Vec<String> = self
            .call(move |connection| {
                let mut statement = connection
                    .prepare_cached(
                        "SELECT document FROM webhook_deliveries
                         WHERE organization_id = ?1 AND run_id = ?2 AND sequence > ?3
                         ORDER BY sequence LIMIT ?4",
                    )
                    .db("listing webhook deliveries")?;
                let rows = statement
                    .query_map(
                        params![
                            organization.to_string(),
                            run.to_string(),
                            after.map_or(0, |after| i64::try_from(after).unwrap_or(i64::MAX)),
                            (limit + 1) as i64
                        ],
                        |row| row.get(0),
                    )
                    .db("listing webhook deliveries")?;
                rows.collect::<Result<Vec<String>, _>>().db("listing webhook deliveries")
            })
            .await?;
        texts.iter().map(|text| from_document(text)).collect()
    }

    async fn claim_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        sequence: u64,
        token: &str,
        until: Timestamp,
        now: Timestamp,
    ) -> anyhow::Result<bool> {
        let token = token.to_owned();
        self.write(move |transaction| {
            let changed = transaction
                .prepare_cached(
                    "UPDATE webhook_deliveries SET claim_token = ?4, claimed_until_ms = ?5
                     WHERE organization_id = ?1 AND run_id = ?2 AND sequence = ?3 AND state = 'pending'
                       AND (claim_token IS NULL OR claim_token = ?4 OR claimed_until_ms < ?6)",
                )
                .db("claiming a webhook delivery")?
                .execute(params![
                    organization.to_string(),
                    run.to_string(),
                    sequence as i64,
                    token,
                    until.unix_millis() as i64,
                    now.unix_millis() as i64
                ])
                .db("claiming a webhook delivery")?;
            Ok(changed == 1)
        })
        .await
    }

    async fn record_delivery(&self, delivery: &WebhookDelivery, token: &str) -> anyhow::Result<bool> {
        let (delivery, token) = (delivery.clone(), token.to_owned());
        let text = serde_json::to_string(&delivery)?;
        let changed = self
            .write(move |transaction| {
                let changed = transaction
                    .prepare_cached(
                        "UPDATE webhook_deliveries
                         SET state = ?4, next_attempt_ms = ?5, attempted = ?6, document = ?7,
                             claim_token = NULL, claimed_until_ms = NULL
                         WHERE organization_id = ?1 AND run_id = ?2 AND sequence = ?3 AND claim_token = ?8",
                    )
                    .db("recording a webhook attempt")?
                    .execute(params![
                        delivery.organization_id.to_string(),
                        delivery.run_id.to_string(),
                        delivery.sequence as i64,
                        delivery.state.as_str(),
                        millis(delivery.next_attempt_at),
                        delivery.attempts.len() as i64,
                        text,
                        token
                    ])
                    .db("recording a webhook attempt")?;
                Ok::<_, anyhow::Error>(changed == 1)
            })
            .await?;
        Ok(changed)
    }

    async fn redeliver(&self, delivery: &WebhookDelivery, now: Timestamp) -> anyhow::Result<bool> {
        let delivery = delivery.clone();
        let text = serde_json::to_string(&delivery)?;
        self.write(move |transaction| {
            let changed = transaction
                .prepare_cached(
                    "UPDATE webhook_deliveries SET state = ?4, next_attempt_ms = ?5, document = ?6
                     WHERE organization_id = ?1 AND run_id = ?2 AND sequence = ?3 AND attempted = ?8
                       AND (claim_token IS NULL OR claimed_until_ms < ?7)",
                )
                .db("redelivering a webhook")?
                .execute(params![
                    delivery.organization_id.to_string(),
                    delivery.run_id.to_string(),
                    delivery.sequence as i64,
                    delivery.state.as_str(),
                    millis(delivery.next_attempt_at),
                    text,
                    now.unix_millis() as i64,
                    delivery.attempts.len() as i64
                ])
                .db("redelivering a webhook")?;
            Ok(changed == 1)
        })
        .await
    }

    async fn unsent_deliveries(&self, before: Timestamp, limit: usize) -> anyhow::Result<Vec<WebhookDelivery>> {
        let bound = DeliveryId::v7_bound(before.unix_millis(), false).to_string();
        let texts: Vec<String> = self
            .call(move |connection| {
                let mut statement = connection
                    .prepare_cached(
                        "SELECT document FROM webhook_deliveries
                         WHERE state = 'pending' AND attempted = 0 AND id < ?1 ORDER BY id LIMIT ?2",
                    )
                    .db("listing unsent webhook deliveries")?;
                let rows = statement
                    .query_map(params![bound, limit as i64], |row| row.get(0))
                    .db("listing unsent webhook deliveries")?;
                rows.collect::<Result<Vec<String>, _>>().db("listing unsent webhook deliveries")
            })
            .await?;
        texts.iter().map(|text| from_document(text)).collect()
    }

    async fn webhook_secret(&self, organization: OrganizationId) -> anyhow::Result<Option<WebhookSecret>> {
        let row: Option<(String, String)> = self
            .call(move |connection| {
                connection
                    .prepare_cached("SELECT secret, created_at FROM webhook_secrets WHERE organization_id = ?1")
                    .db("reading the webhook secret")?
                    .query_row([organization.to_string()], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
                    .db("reading the webhook secret")
            })
            .await?;
        row.map(|(secret, created_at)| Ok(WebhookSecret { secret, created_at: Timestamp::parse(&created_at)? }))
            .transpose()
    }

    async fn put_webhook_secret(
        &self,
        organization: OrganizationId,
        secret: Option<&WebhookSecret>,
    ) -> anyhow::Result<()> {
        let secret = secret.cloned();
        self.write(move |transaction| {
            match secret {
                Some(secret) => transaction
                    .prepare_cached(
                        "INSERT INTO webhook_secrets (organization_id, secret, created_at) VALUES (?1, ?2, ?3)
                         ON CONFLICT (organization_id) DO UPDATE SET secret = ?2, created_at = ?3",
                    )
                    .db("storing the webhook secret")?
                    .execute(params![organization.to_string(), secret.secret, secret.created_at.to_string()])
                    .db("storing the webhook secret")?,
                None => transaction
                    .prepare_cached("DELETE FROM webhook_secrets WHERE organization_id = ?1")
                    .db("removing the webhook secret")?
                    .execute([organization.to_string()])
                    .db("removing the webhook secret")?,
            };
            Ok(())
        })
        .await
    }
}

/// The local webhook queue: the delivery table, read by in-process senders; sending
/// wakes them.
#[derive(Clone)]
pub struct SqliteWebhookQueue {
    database: Sqlite,
    wake: Arc<Notify>,
    /// The time leases and delays count from.
    clock: Arc<dyn Clock>,
}

impl SqliteWebhookQueue {
    pub fn new(database: Sqlite, clock: Arc<dyn Clock>) -> Self {
        Self { database, wake: Arc::new(Notify::new()), clock }
    }

    /// Frees every claim: at start, when no sender of an earlier process can still hold
    /// one (the data folder is locked by this process).
    pub async fn release_all(&self) -> anyhow::Result<()> {
        self.database
            .write(|transaction| {
                transaction
                    .execute(
                        "UPDATE webhook_deliveries SET claim_token = NULL, claimed_until_ms = NULL
                         WHERE claim_token IS NOT NULL",
                        [],
                    )
                    .db("releasing webhook deliveries")?;
                Ok(())
            })
            .await
    }

    /// Claims the next due delivery, if any.
    async fn receive_one(&self, lease: Duration) -> anyhow::Result<Option<Delivery<WebhookMessage>>> {
        let token = uuid::Uuid::new_v4().to_string();
        let claim = token.clone();
        let clock = self.clock.clone();
        let found: Option<(String, String, i64, i64)> = self
            .database
            .write(move |transaction| {
                let now = super::now_millis(clock.as_ref());
                let row: Option<(String, String, i64, i64)> = transaction
                    .prepare_cached(
                        "SELECT d.organization_id, d.run_id, d.sequence, d.attempted FROM webhook_deliveries d
                         WHERE d.state = 'pending' AND d.next_attempt_ms <= ?1
                           AND (d.claim_token IS NULL OR d.claimed_until_ms < ?1)
                           AND NOT EXISTS (
                               SELECT 1 FROM webhook_deliveries e
                               WHERE e.organization_id = d.organization_id AND e.run_id = d.run_id
                                 AND e.sequence < d.sequence AND e.state = 'pending' AND e.attempted = 0)
                         ORDER BY d.next_attempt_ms, d.sequence LIMIT 1",
                    )
                    .db("receiving a webhook delivery")?
                    .query_row([now], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
                    .optional()
                    .db("receiving a webhook delivery")?;
                let Some((organization, run, sequence, attempted)) = row else { return Ok(None) };
                transaction
                    .prepare_cached(
                        "UPDATE webhook_deliveries SET claim_token = ?4, claimed_until_ms = ?5
                         WHERE organization_id = ?1 AND run_id = ?2 AND sequence = ?3",
                    )
                    .db("receiving a webhook delivery")?
                    .execute(params![organization, run, sequence, claim, now + lease.as_millis() as i64])
                    .db("receiving a webhook delivery")?;
                Ok::<_, anyhow::Error>(Some((organization, run, sequence, attempted)))
            })
            .await?;
        let Some((organization, run, sequence, attempted)) = found else { return Ok(None) };
        let message = WebhookMessage {
            organization_id: OrganizationId::parse(&organization)
                .ok_or_else(|| anyhow::anyhow!("a delivery of organization {organization:?}"))?,
            run_id: RunId::parse(&run).ok_or_else(|| anyhow::anyhow!("a delivery of run {run:?}"))?,
            sequence: sequence as u64,
        };
        Ok(Some(Delivery { handle: token, message, receives: attempted as u32 + 1 }))
    }
}

#[async_trait]
impl Queue<WebhookMessage> for SqliteWebhookQueue {
    async fn send(&self, _messages: &[WebhookMessage]) -> anyhow::Result<()> {
        // The deliveries are in the table already (written with their run's change).
        self.wake.notify_waiters();
        Ok(())
    }
}

#[async_trait]
impl Inbox<WebhookMessage> for SqliteWebhookQueue {
    async fn receive(&self, _max: usize, lease: Duration) -> anyhow::Result<Vec<Delivery<WebhookMessage>>> {
        // A retry falls due without a wake-up: the wait is short.
        super::look_or_wait(&self.wake, IDLE_WAIT, || self.receive_one(lease)).await
    }

    /// The sender recorded the outcome on the delivery itself.
    async fn acknowledge(&self, _delivery: &Delivery<WebhookMessage>) -> anyhow::Result<()> {
        Ok(())
    }

    /// The recorded delivery says when it is due again; nothing to hide.
    async fn retry_later(&self, _delivery: &Delivery<WebhookMessage>, _delay: Duration) -> anyhow::Result<()> {
        Ok(())
    }
}
