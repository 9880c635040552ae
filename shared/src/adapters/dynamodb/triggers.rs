//! Triggers' states in DynamoDB: one item each in the organization's partition
//! (`TRIGGER#<id>`), the state as JSON text beside its write count; while it has a due
//! time the item carries the sweep index's due attributes of its kind (`DUE#schedule`,
//! `DUE#feed`), which the scheduler's queries read in due order, each kind with its own
//! bound. Items written before the kinds were split carry `DUE#trigger`: that partition
//! is read too (merged in due order) until every state has been written again (a fire,
//! a poll or a save rewrites it with its kind's partition). Writes are conditional on the count; those that
//! go with an agent's graph are parts of the agent's transaction ([`write_item`]).

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem};

use super::table::{build, n, text, unless_condition_failed, Item};
use super::{keys, DynamoDb};
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;
use crate::domain::triggers::{DuePage, TriggerKind, TriggerRepo, TriggerState, TriggerWrite};

/// The sweep index's partition of due triggers written before the kinds had their own:
/// read, never written.
const LEGACY_DUE_KIND: &str = "trigger";

fn state_item(state: &TriggerState) -> anyhow::Result<Item> {
    let mut item = keys::trigger(state.organization_id, state.trigger_id);
    item.insert("version".to_owned(), n(state.version));
    item.insert("document".to_owned(), super::table::s(serde_json::to_string(state)?));
    if let Some(due) = state.next_at.filter(|_| state.enabled) {
        let kind = TriggerKind::of(state.node_type_id).name();
        item.extend(keys::sweep_due(kind, due, state.organization_id, state.trigger_id));
    }
    Ok(item)
}

/// The condition a state's write is made under: absent (version 1) or at the version before.
fn condition(version: u64) -> (&'static str, Option<u64>) {
    if version == 1 {
        ("attribute_not_exists(pk)", None)
    } else {
        ("version = :expected", Some(version - 1))
    }
}

/// One trigger write as a part of a transaction.
pub(super) fn write_item(table: &str, write: &TriggerWrite) -> anyhow::Result<TransactWriteItem> {
    Ok(match write {
        TriggerWrite::Put(state) => {
            let (expression, expected) = condition(state.version);
            let mut put =
                Put::builder().table_name(table).set_item(Some(state_item(state)?)).condition_expression(expression);
            if let Some(expected) = expected {
                put = put.expression_attribute_values(":expected", n(expected));
            }
            TransactWriteItem::builder().put(build(put.build())?).build()
        }
        TriggerWrite::Delete { organization, trigger_id, version } => {
            let delete = Delete::builder()
                .table_name(table)
                .set_key(Some(keys::trigger(*organization, *trigger_id)))
                .condition_expression("version = :expected")
                .expression_attribute_values(":expected", n(*version));
            TransactWriteItem::builder().delete(build(delete.build())?).build()
        }
    })
}

#[async_trait]
impl TriggerRepo for DynamoDb {
    async fn trigger(&self, organization: OrganizationId, id: AgentNodeId) -> anyhow::Result<Option<TriggerState>> {
        let Some(item) = self.get(keys::trigger(organization, id), "reading a trigger").await? else { return Ok(None) };
        Ok(Some(serde_json::from_str(text(&item, "document")?)?))
    }

    async fn put_trigger(&self, state: &TriggerState) -> anyhow::Result<bool> {
        let (expression, expected) = condition(state.version);
        let values: Vec<_> = expected.map(|expected| (":expected", n(expected))).into_iter().collect();
        self.put_if(state_item(state)?, expression, &values, "recording a trigger").await
    }

    async fn delete_trigger(
        &self,
        organization: OrganizationId,
        id: AgentNodeId,
        version: u64,
    ) -> anyhow::Result<bool> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(keys::trigger(organization, id)))
            .condition_expression("version = :expected")
            .expression_attribute_values(":expected", n(version))
            .send()
            .await;
        Ok(unless_condition_failed(deleted, "removing a trigger")?.is_some())
    }

    async fn due_triggers(
        &self,
        kind: TriggerKind,
        now: Timestamp,
        after: Option<&str>,
        limit: usize,
    ) -> anyhow::Result<DuePage> {
        const WHAT: &str = "listing due triggers";
        let own = self.due_page(kind.name(), now, after, limit, WHAT).await?;
        let legacy = self.due_page(LEGACY_DUE_KIND, now, after, limit, WHAT).await?;
        // Either page full: more may follow it.
        let more = own.len() >= limit || legacy.len() >= limit;
        let mut merged = Vec::with_capacity(own.len() + legacy.len());
        for item in own.iter().chain(&legacy) {
            merged.push((text(item, "sweep_sk")?.to_owned(), item));
        }
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        merged.truncate(limit);
        let next = if more || merged.len() >= limit { merged.last().map(|(at, _)| at.clone()) } else { None };
        let due = merged
            .iter()
            .map(|(_, key)| {
                let organization = text(key, "pk")?
                    .strip_prefix("ORG#")
                    .and_then(OrganizationId::parse)
                    .ok_or_else(|| anyhow::anyhow!("a trigger's key has no organization"))?;
                let id = text(key, "sk")?
                    .strip_prefix("TRIGGER#")
                    .and_then(AgentNodeId::parse)
                    .ok_or_else(|| anyhow::anyhow!("a trigger's key has no ID"))?;
                Ok((organization, id))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(DuePage { due, next })
    }
}
