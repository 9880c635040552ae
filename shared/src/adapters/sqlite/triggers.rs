//! Triggers' states in SQLite: one row each, the state as a JSON document beside its
//! write count and its due time (`due_at`, NULL when none), which a partial index keeps
//! in order for the scheduler. Writes are conditional on the count; those that go with
//! an agent's graph are made in the agent's transaction ([`apply`]).

use async_trait::async_trait;
use rusqlite::{params, Connection};

use super::{parsed, Db, Sqlite};
use crate::domain::graph::AgentNodeId;
use crate::domain::identity::OrganizationId;
use crate::domain::time::Timestamp;
use crate::domain::triggers::{TriggerRepo, TriggerState, TriggerWrite};

/// Makes one write in `connection`'s transaction: false when its condition failed.
pub(super) fn apply(connection: &Connection, write: &TriggerWrite) -> anyhow::Result<bool> {
    match write {
        TriggerWrite::Put(state) => put(connection, state),
        TriggerWrite::Delete { organization, trigger_id, version } => {
            let deleted = connection
                .prepare_cached("DELETE FROM triggers WHERE organization_id = ?1 AND id = ?2 AND version = ?3")
                .db("removing a trigger")?
                .execute(params![organization.to_string(), trigger_id.to_string(), *version as i64])
                .db("removing a trigger")?;
            Ok(deleted == 1)
        }
    }
}

fn put(connection: &Connection, state: &TriggerState) -> anyhow::Result<bool> {
    let document = serde_json::to_string(state)?;
    let (organization, id) = (state.organization_id.to_string(), state.trigger_id.to_string());
    let due = state.next_at.filter(|_| state.enabled).map(|at| at.to_string());
    let changed = if state.version == 1 {
        connection
            .prepare_cached(
                "INSERT INTO triggers (organization_id, id, version, due_at, document) VALUES (?1, ?2, 1, ?3, ?4)
                 ON CONFLICT DO NOTHING",
            )
            .db("recording a trigger")?
            .execute(params![organization, id, due, document])
            .db("recording a trigger")?
    } else {
        connection
            .prepare_cached(
                "UPDATE triggers SET version = ?3, due_at = ?4, document = ?5
                 WHERE organization_id = ?1 AND id = ?2 AND version = ?6",
            )
            .db("recording a trigger")?
            .execute(params![organization, id, state.version as i64, due, document, state.version as i64 - 1])
            .db("recording a trigger")?
    };
    Ok(changed == 1)
}

#[async_trait]
impl TriggerRepo for Sqlite {
    async fn trigger(&self, organization: OrganizationId, id: AgentNodeId) -> anyhow::Result<Option<TriggerState>> {
        self.call(move |connection| {
            let key = (organization.to_string(), id.to_string());
            super::document_of(connection, "triggers", (&key.0, &key.1), "reading a trigger")
        })
        .await
    }

    async fn put_trigger(&self, state: &TriggerState) -> anyhow::Result<bool> {
        let state = state.clone();
        self.write(move |transaction| put(transaction, &state)).await
    }

    async fn delete_trigger(
        &self,
        organization: OrganizationId,
        trigger_id: AgentNodeId,
        version: u64,
    ) -> anyhow::Result<bool> {
        self.write(move |transaction| apply(transaction, &TriggerWrite::Delete { organization, trigger_id, version }))
            .await
    }

    async fn due_triggers(&self, now: Timestamp, limit: usize) -> anyhow::Result<Vec<(OrganizationId, AgentNodeId)>> {
        self.call(move |connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT organization_id, id FROM triggers WHERE due_at IS NOT NULL AND due_at <= ?1
                     ORDER BY due_at LIMIT ?2",
                )
                .db("listing due triggers")?;
            let rows = statement
                .query_map(params![now.to_string(), limit as i64], |row| Ok((parsed(row, 0)?, parsed(row, 1)?)))
                .db("listing due triggers")?;
            rows.collect::<Result<Vec<_>, _>>().db("listing due triggers")
        })
        .await
    }
}
