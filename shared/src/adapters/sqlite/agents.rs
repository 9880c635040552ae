//! Agents in SQLite: one row per agent with its graph as JSON text and a version, so an
//! update (metadata and every operation) is one conditional UPDATE.

use anyhow::Context;
use async_trait::async_trait;
use rusqlite::{params, params_from_iter, OptionalExtension, Row};

use super::{parsed, Db, Sqlite};
use crate::domain::agents::AgentRepo;
use crate::domain::agents::{Agent, AgentQuery, AgentRecord, Visibility};
use crate::domain::ids::AgentId;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;
use crate::domain::triggers::TriggerWrite;

const AGENT_COLUMNS: &str = "id, name, description, visibility, workspace_id, created_at, updated_at";

fn agent_from(row: &Row<'_>) -> rusqlite::Result<Agent> {
    let visibility: String = row.get(3)?;
    Ok(Agent {
        id: parsed(row, 0)?,
        name: row.get(1)?,
        description: row.get(2)?,
        visibility: Visibility::parse(&visibility).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                3,
                rusqlite::types::Type::Text,
                format!("stored visibility {visibility:?} is not known").into(),
            )
        })?,
        workspace_id: parsed(row, 4)?,
        created_at: parsed(row, 5)?,
        updated_at: parsed(row, 6)?,
    })
}

/// The columns of a record, in the order of `INSERT INTO agents (organization_id, …)`.
fn record_params(organization: OrganizationId, record: &AgentRecord) -> anyhow::Result<Vec<rusqlite::types::Value>> {
    let agent = &record.agent;
    Ok(vec![
        organization.to_string().into(),
        agent.id.to_string().into(),
        agent.name.clone().into(),
        agent.name.to_lowercase().into(),
        agent.description.clone().into(),
        agent.visibility.as_str().to_owned().into(),
        agent.workspace_id.to_string().into(),
        agent.created_at.to_string().into(),
        agent.updated_at.to_string().into(),
        i64::try_from(record.version).context("agent version")?.into(),
        serde_json::to_string(&record.graph)?.into(),
    ])
}

/// A trigger write whose condition failed: the whole transaction is rolled back.
#[derive(Debug, thiserror::Error)]
#[error("a trigger's state changed meanwhile")]
struct TriggerConflict;

/// Makes the trigger writes in the agent's transaction; a failed condition rolls it back.
fn apply_triggers(transaction: &rusqlite::Connection, triggers: &[TriggerWrite]) -> anyhow::Result<bool> {
    for write in triggers {
        if !super::triggers::apply(transaction, write)? {
            return Err(TriggerConflict.into());
        }
    }
    Ok(true)
}

/// The answer of a write made with [`apply_triggers`]: false for a rolled-back conflict.
async fn with_triggers(written: impl std::future::Future<Output = anyhow::Result<bool>>) -> anyhow::Result<bool> {
    match written.await {
        Err(error) if error.is::<TriggerConflict>() => Ok(false),
        other => other,
    }
}

#[async_trait]
impl AgentRepo for Sqlite {
    async fn create_agent(
        &self,
        organization: OrganizationId,
        record: &AgentRecord,
        triggers: &[TriggerWrite],
    ) -> anyhow::Result<bool> {
        let values = record_params(organization, record)?;
        let triggers = triggers.to_vec();
        with_triggers(self.write(move |transaction| {
            transaction
                .execute(
                    "INSERT INTO agents (organization_id, id, name, name_lower, description, visibility, workspace_id,
                         created_at, updated_at, version, graph) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    params_from_iter(values),
                )
                .db("creating an agent")?;
            apply_triggers(transaction, &triggers)
        }))
        .await
    }

    async fn get_agent(&self, organization: OrganizationId, id: AgentId) -> anyhow::Result<Option<AgentRecord>> {
        self.call(move |connection| {
            let found = connection
                .prepare_cached(&format!(
                    "SELECT {AGENT_COLUMNS}, version, graph FROM agents
                     WHERE organization_id = ?1 AND id = ?2 AND deleted_at IS NULL"
                ))
                .db("reading an agent")?
                .query_row([organization.to_string(), id.to_string()], |row| {
                    Ok((agent_from(row)?, row.get::<_, i64>(7)?, row.get::<_, String>(8)?))
                })
                .optional()
                .db("reading an agent")?;
            let Some((agent, version, graph)) = found else { return Ok(None) };
            Ok(Some(AgentRecord {
                agent,
                graph: serde_json::from_str(&graph).context("stored graph is not valid")?,
                version: u64::try_from(version).context("stored agent version")?,
            }))
        })
        .await
    }

    async fn list_agents(&self, organization: OrganizationId, query: &AgentQuery) -> anyhow::Result<Vec<Agent>> {
        let mut sql = format!("SELECT {AGENT_COLUMNS} FROM agents WHERE organization_id = ?1 AND deleted_at IS NULL");
        let mut values: Vec<String> = vec![organization.to_string()];
        // Version 7 IDs in their text form sort by creation time.
        if let Some(after) = query.after {
            values.push(after.to_string());
            sql.push_str(&format!(" AND id < ?{}", values.len()));
        }
        if let Some(workspace) = query.workspace_id {
            values.push(workspace.to_string());
            sql.push_str(&format!(" AND workspace_id = ?{}", values.len()));
        }
        if let Some(part) = &query.name_contains {
            // `instr` compares literally: `%` and `_` are plain characters here.
            values.push(part.clone());
            sql.push_str(&format!(" AND instr(name_lower, ?{}) > 0", values.len()));
        }
        // limit + 1 tells whether another page follows.
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", query.limit + 1));
        self.call(move |connection| {
            let mut statement = connection.prepare_cached(&sql).db("listing agents")?;
            let agents = statement.query_map(params_from_iter(values), agent_from).db("listing agents")?;
            agents.collect::<Result<Vec<_>, _>>().db("listing agents")
        })
        .await
    }

    async fn replace_agent(
        &self,
        organization: OrganizationId,
        record: &AgentRecord,
        expected_version: u64,
        triggers: &[TriggerWrite],
    ) -> anyhow::Result<bool> {
        let mut values = record_params(organization, record)?;
        values.push(i64::try_from(expected_version).context("agent version")?.into());
        let triggers = triggers.to_vec();
        with_triggers(self.write(move |transaction| {
            let changed = transaction
                .execute(
                    "UPDATE agents SET name = ?3, name_lower = ?4, description = ?5, visibility = ?6, workspace_id = ?7,
                         created_at = ?8, updated_at = ?9, version = ?10, graph = ?11
                     WHERE organization_id = ?1 AND id = ?2 AND version = ?12 AND deleted_at IS NULL",
                    params_from_iter(values),
                )
                .db("updating an agent")?;
            if changed != 1 {
                return Ok(false);
            }
            apply_triggers(transaction, &triggers)
        }))
        .await
    }

    async fn delete_agent(&self, organization: OrganizationId, id: AgentId, at: Timestamp) -> anyhow::Result<bool> {
        self.write(move |transaction| {
            let changed = transaction
                .execute(
                    "UPDATE agents SET deleted_at = ?3, updated_at = ?3, version = version + 1
                     WHERE organization_id = ?1 AND id = ?2 AND deleted_at IS NULL",
                    params![organization.to_string(), id.to_string(), at.to_string()],
                )
                .db("deleting an agent")?;
            Ok(changed == 1)
        })
        .await
    }
}
