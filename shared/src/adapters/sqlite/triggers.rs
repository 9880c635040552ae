//! Triggers' states in SQLite: one row each, the state as a JSON document beside its
//! write count, its kind (`schedule`, `feed`) and its due time (`due_at`, NULL when
//! none), which a partial index keeps in order by kind for the scheduler (each kind read
//! with its own bound). Writes are conditional on the count; those that go with
//! an agent's graph are made in the agent's transaction ([`apply`]).

use async_trait::async_trait;
use rusqlite::{params, Connection};

use super::{parsed, Db, Sqlite};
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;
use crate::domain::triggers::{DuePage, TriggerKind, TriggerRepo, TriggerState, TriggerWrite};

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
    let kind = TriggerKind::of(state.node_type_id).name();
    let changed = if state.version == 1 {
        connection
            .prepare_cached(
                "INSERT INTO triggers (organization_id, id, version, due_at, document, kind)
                 VALUES (?1, ?2, 1, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
            )
            .db("recording a trigger")?
            .execute(params![organization, id, due, document, kind])
            .db("recording a trigger")?
    } else {
        connection
            .prepare_cached(
                "UPDATE triggers SET version = ?3, due_at = ?4, document = ?5, kind = ?7
                 WHERE organization_id = ?1 AND id = ?2 AND version = ?6",
            )
            .db("recording a trigger")?
            .execute(params![organization, id, state.version as i64, due, document, state.version as i64 - 1, kind])
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

    async fn due_triggers(
        &self,
        kind: TriggerKind,
        now: Timestamp,
        after: Option<&str>,
        limit: usize,
    ) -> anyhow::Result<DuePage> {
        // A page's position is its last row's `<due_at>#<organization>#<id>` (the order
        // of the index).
        let after = match after {
            None => None,
            Some(after) => {
                let parts: Vec<&str> = after.splitn(3, '#').collect();
                let [at, organization, id] = parts[..] else { anyhow::bail!("a due page's position is not ours") };
                Some((at.to_owned(), organization.to_owned(), id.to_owned()))
            }
        };
        self.call(move |connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT organization_id, id, due_at FROM triggers
                     WHERE kind = ?1 AND due_at IS NOT NULL AND due_at <= ?2
                       AND (?3 IS NULL OR (due_at, organization_id, id) > (?3, ?4, ?5))
                     ORDER BY due_at, organization_id, id LIMIT ?6",
                )
                .db("listing due triggers")?;
            let (at, organization, id) = match after {
                Some((at, organization, id)) => (Some(at), Some(organization), Some(id)),
                None => (None, None, None),
            };
            let rows = statement
                .query_map(params![kind.name(), now.to_string(), at, organization, id, limit as i64], |row| {
                    Ok((parsed(row, 0)?, parsed(row, 1)?, row.get::<_, String>(2)?))
                })
                .db("listing due triggers")?;
            let rows: Vec<(OrganizationId, AgentNodeId, String)> =
                rows.collect::<Result<Vec<_>, _>>().db("listing due triggers")?;
            let next = match rows.last() {
                Some((organization, id, at)) if rows.len() >= limit => Some(format!("{at}#{organization}#{id}")),
                _ => None,
            };
            Ok(DuePage { due: rows.into_iter().map(|(organization, id, _)| (organization, id)).collect(), next })
        })
        .await
    }
}
