//! Webhook deliveries and secrets in DynamoDB. A delivery is an item of its run's own
//! partition, keyed by sequence (written in the run's transaction); the claim of a
//! sender is two attributes beside the JSON document, moved by conditional writes.

use async_trait::async_trait;

use super::table::{n, s, text, unless_condition_failed, Item};
use super::{keys, DynamoDb};
use crate::domain::ids::DeliveryId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::RunId;
use crate::domain::time::Timestamp;
use crate::domain::webhooks::ports::WebhookRepo;
use crate::domain::webhooks::{WebhookDelivery, WebhookSecret};

/// Bytes of a delivery's document an item may hold, under DynamoDB's 400 KB.
const MAX_DOCUMENT_BYTES: usize = 380_000;

/// The item of a new delivery.
pub(super) fn delivery_item(delivery: &WebhookDelivery) -> anyhow::Result<Item> {
    let document = serde_json::to_string(delivery)?;
    anyhow::ensure!(
        document.len() <= MAX_DOCUMENT_BYTES,
        "the {} webhook of run {} is {} bytes, over the {MAX_DOCUMENT_BYTES} a delivery may store",
        delivery.event.as_str(),
        delivery.run_id,
        document.len()
    );
    let mut item = keys::webhook_delivery(delivery.organization_id, delivery.run_id, delivery.sequence);
    item.extend([
        ("id".to_owned(), s(delivery.id.to_string())),
        ("state".to_owned(), s(delivery.state.as_str())),
        ("attempted".to_owned(), n(delivery.attempts.len())),
        ("document".to_owned(), s(document)),
    ]);
    if delivery.state == crate::domain::webhooks::DeliveryState::Pending && delivery.attempts.is_empty() {
        item.extend(keys::sweep_unsent(delivery.id));
    }
    Ok(item)
}

fn delivery_from(item: &Item) -> anyhow::Result<WebhookDelivery> {
    serde_json::from_str(text(item, "document")?)
        .map_err(|error| anyhow::anyhow!("a stored webhook delivery could not be read: {error}"))
}

#[async_trait]
impl WebhookRepo for DynamoDb {
    async fn get_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        sequence: u64,
    ) -> anyhow::Result<Option<WebhookDelivery>> {
        let item = self.get(keys::webhook_delivery(organization, run, sequence), "reading a webhook delivery").await?;
        item.as_ref().map(delivery_from).transpose()
    }

    async fn find_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        id: DeliveryId,
    ) -> anyhow::Result<Option<WebhookDelivery>> {
        // The log of one run, read with a filter: redelivery is rare and a log is short.
        let items = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .filter_expression("id = :id")
            .expression_attribute_values(":pk", s(keys::run_parts_pk(organization, run)))
            .expression_attribute_values(":prefix", s(keys::WEBHOOK_PREFIX))
            .expression_attribute_values(":id", s(id.to_string()))
            .consistent_read(true);
        let found = super::table::query_beyond(items, None, 0, "finding a webhook delivery", |item| async move {
            delivery_from(&item)
        })
        .await?;
        Ok(found.into_iter().next())
    }

    async fn list_deliveries(
        &self,
        organization: OrganizationId,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> anyhow::Result<Vec<WebhookDelivery>> {
        let low = format!("{}{:012}", keys::WEBHOOK_PREFIX, after.map_or(0, |after| after.saturating_add(1)));
        let request = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :low AND :high")
            .expression_attribute_values(":pk", s(keys::run_parts_pk(organization, run)))
            .expression_attribute_values(":low", s(low))
            .expression_attribute_values(":high", s(format!("{}~", keys::WEBHOOK_PREFIX)))
            .consistent_read(true)
            .limit(limit as i32 + 1);
        super::table::query_beyond(request, None, limit, "listing webhook deliveries", |item| async move {
            delivery_from(&item)
        })
        .await
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
        let claimed = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::webhook_delivery(organization, run, sequence)))
            .update_expression("SET claim_token = :token, claimed_until_ms = :until")
            .condition_expression(
                "#state = :pending AND (attribute_not_exists(claim_token) OR claim_token = :token \
                 OR claimed_until_ms < :now)",
            )
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":pending", s("pending"))
            .expression_attribute_values(":token", s(token))
            .expression_attribute_values(":until", n(until.unix_millis()))
            .expression_attribute_values(":now", n(now.unix_millis()))
            .send()
            .await;
        Ok(unless_condition_failed(claimed, "claiming a webhook delivery")?.is_some())
    }

    async fn record_delivery(&self, delivery: &WebhookDelivery, token: &str) -> anyhow::Result<bool> {
        let item = delivery_item(delivery)?;
        let recorded = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("claim_token = :token")
            .expression_attribute_values(":token", s(token))
            .send()
            .await;
        Ok(unless_condition_failed(recorded, "recording a webhook attempt")?.is_some())
    }

    async fn redeliver(&self, delivery: &WebhookDelivery, now: Timestamp) -> anyhow::Result<bool> {
        let item = delivery_item(delivery)?;
        let stored = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(
                "attempted = :attempted AND (attribute_not_exists(claim_token) OR claimed_until_ms < :now)",
            )
            .expression_attribute_values(":attempted", n(delivery.attempts.len()))
            .expression_attribute_values(":now", n(now.unix_millis()))
            .send()
            .await;
        Ok(unless_condition_failed(stored, "redelivering a webhook")?.is_some())
    }

    async fn unsent_deliveries(&self, before: Timestamp, limit: usize) -> anyhow::Result<Vec<WebhookDelivery>> {
        let bound = DeliveryId::v7_bound(before.unix_millis(), false).to_string();
        let mut unsent = Vec::new();
        for shard in 0..keys::SWEEP_SHARDS {
            if unsent.len() >= limit {
                break;
            }
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(keys::SWEEP_INDEX)
                .key_condition_expression("sweep_pk = :pk AND sweep_sk < :bound")
                .expression_attribute_values(":pk", s(format!("UNSENT#{shard}")))
                .expression_attribute_values(":bound", s(&bound))
                .limit((limit - unsent.len()) as i32)
                .send()
                .await
                .map_err(|error| super::table::failure(error, "listing unsent webhook deliveries"))?;
            for found in page.items() {
                // The index holds keys only, and may lag the table: read the delivery itself.
                let Some(item) = self.get(super::table::key_of(found), "reading a webhook delivery").await? else {
                    continue;
                };
                let delivery = delivery_from(&item)?;
                if delivery.state == crate::domain::webhooks::DeliveryState::Pending && delivery.attempts.is_empty() {
                    unsent.push(delivery);
                }
            }
        }
        Ok(unsent)
    }

    async fn webhook_secret(&self, organization: OrganizationId) -> anyhow::Result<Option<WebhookSecret>> {
        let Some(item) = self.get(keys::webhook_secret(organization), "reading the webhook secret").await? else {
            return Ok(None);
        };
        let created_at = Timestamp::parse(text(&item, "created_at")?)?;
        Ok(Some(WebhookSecret { secret: text(&item, "secret")?.to_owned(), created_at }))
    }

    async fn put_webhook_secret(
        &self,
        organization: OrganizationId,
        secret: Option<&WebhookSecret>,
    ) -> anyhow::Result<()> {
        let key = keys::webhook_secret(organization);
        match secret {
            Some(secret) => {
                let mut item = key;
                item.extend([
                    ("secret".to_owned(), s(&secret.secret)),
                    ("created_at".to_owned(), s(secret.created_at.to_string())),
                ]);
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .send()
                    .await
                    .map_err(|error| super::table::failure(error, "storing the webhook secret"))?;
            }
            None => {
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .set_key(Some(key))
                    .send()
                    .await
                    .map_err(|error| super::table::failure(error, "removing the webhook secret"))?;
            }
        }
        Ok(())
    }
}
