//! What webhooks need from the outside world: the delivery log and secrets, and an HTTP
//! client that posts to receivers.

use std::time::Duration;

use async_trait::async_trait;

use super::{DeliveryId, WebhookDelivery, WebhookSecret};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::RunId;
use crate::domain::time::Timestamp;

/// Webhook deliveries (the delivery log) and organizations' webhook secrets. Deliveries
/// are created with their run's change ([`RunRepo::update_run`]); here they are read,
/// claimed by a sender and updated.
#[async_trait]
pub trait WebhookRepo: Send + Sync {
    /// A delivery by its run and sequence.
    async fn get_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        sequence: u64,
    ) -> anyhow::Result<Option<WebhookDelivery>>;
    /// A delivery by its ID.
    async fn find_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        id: DeliveryId,
    ) -> anyhow::Result<Option<WebhookDelivery>>;
    /// A run's deliveries in sequence order after `after`, up to `limit + 1` of them.
    async fn list_deliveries(
        &self,
        organization: OrganizationId,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> anyhow::Result<Vec<WebhookDelivery>>;
    /// Takes the right to attempt a pending delivery until `until`, under `token`: true
    /// when it is unclaimed, its claim has passed (`now`), or `token` holds it already.
    async fn claim_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        sequence: u64,
        token: &str,
        until: Timestamp,
        now: Timestamp,
    ) -> anyhow::Result<bool>;
    /// Stores an attempted delivery and releases the claim, if `token` still holds it.
    async fn record_delivery(&self, delivery: &WebhookDelivery, token: &str) -> anyhow::Result<bool>;
    /// Stores a delivery made pending again, unless a sender holds a claim on it at `now`.
    async fn redeliver(&self, delivery: &WebhookDelivery, now: Timestamp) -> anyhow::Result<bool>;
    /// Deliveries of every organization still pending with no attempt, created before
    /// `before`, oldest first, at most `limit` (their message may have been lost: the
    /// sweeper sends it again). One query of an index, never a scan.
    async fn unsent_deliveries(&self, before: Timestamp, limit: usize) -> anyhow::Result<Vec<WebhookDelivery>>;
    /// The organization's webhook secret.
    async fn webhook_secret(&self, organization: OrganizationId) -> anyhow::Result<Option<WebhookSecret>>;
    /// Sets (or, with None, removes) the organization's webhook secret.
    async fn put_webhook_secret(
        &self,
        organization: OrganizationId,
        secret: Option<&WebhookSecret>,
    ) -> anyhow::Result<()>;
}

/// One webhook POST.
pub struct WebhookPost<'a> {
    pub url: &'a str,
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
    /// Longest wait for the whole answer.
    pub timeout: Duration,
}

/// A receiver's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookAnswer {
    pub status: u16,
    /// The start of its body, lossily decoded.
    pub excerpt: String,
}

/// Posts webhooks: no redirects followed, only to addresses the SSRF guard allows,
/// checked at every connection.
#[async_trait]
pub trait WebhookClient: Send + Sync {
    /// The receiver's answer, or why there was none (timeout, connection, refused address).
    async fn post(&self, post: WebhookPost<'_>) -> Result<WebhookAnswer, String>;
}
