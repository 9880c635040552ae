//! Runs in SQLite, as the records of [`stored`]: the row in `runs` holds the head (with
//! the columns lists filter and sort on) and the plan, `run_chunks` the tasks' state and
//! `run_outputs` the outputs; an update is conditional on the version it read and writes
//! what changed. A row without a plan is a run stored whole, before the split.

use async_trait::async_trait;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};

use super::{parsed, Db, Pool, Sqlite};
use crate::domain::credits::{AccountWrite, Written};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::{MediaId, RunId};
use crate::domain::media::ports::MediaRecords;
use crate::domain::media::{MediaKind, MediaRecord};
use crate::domain::runs::ports::RunQuery;
use crate::domain::runs::ports::{read_run_document, RunRepo, RunningPage};
use crate::domain::runs::stored::{self, Encoded, Stored};
use crate::domain::runs::{Run, RunStatus};
use crate::domain::webhooks::WebhookDelivery;

use super::webhooks::insert_deliveries;

/// The run `(organization, id)` at `version`: from this process's cache when it has that
/// version, else read (within the caller's snapshot) and cached.
fn load(
    connection: &Connection,
    pool: &Pool,
    organization: OrganizationId,
    id: RunId,
    version: u64,
) -> anyhow::Result<Run> {
    if let Some(cached) = pool.runs.get(organization, id, version) {
        return Ok(cached.run.clone());
    }
    let (org, run) = (organization.to_string(), id.to_string());
    let (plan, head): (Option<String>, String) = connection
        .prepare_cached("SELECT plan, document FROM runs WHERE organization_id = ?1 AND id = ?2")
        .db("reading a run")?
        .query_row([&org, &run], |row| Ok((row.get(0)?, row.get(1)?)))
        .db("reading a run")?;
    let stored = match plan {
        None => Stored { run: read_run_document(head.as_bytes())?, sizes: None },
        Some(plan) => {
            let chunks: Vec<(i64, String)> = connection
                .prepare_cached("SELECT chunk, document FROM run_chunks WHERE organization_id = ?1 AND run_id = ?2")
                .db("reading a run's tasks")?
                .query_map([&org, &run], |row| Ok((row.get(0)?, row.get(1)?)))
                .db("reading a run's tasks")?
                .collect::<Result<_, _>>()
                .db("reading a run's tasks")?;
            let outputs: Vec<(i64, String)> = connection
                .prepare_cached(
                    "SELECT position, document FROM run_outputs
                     WHERE organization_id = ?1 AND run_id = ?2 AND position < ?3",
                )
                .db("reading a run's outputs")?
                .query_map(params![&org, &run, stored::head_outputs(head.as_bytes())? as i64], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .db("reading a run's outputs")?
                .collect::<Result<_, _>>()
                .db("reading a run's outputs")?;
            let chunks: Vec<(usize, &[u8])> =
                chunks.iter().map(|(chunk, text)| (*chunk as usize, text.as_bytes())).collect();
            let outputs: Vec<(usize, &[u8])> =
                outputs.iter().map(|(position, text)| (*position as usize, text.as_bytes())).collect();
            stored::decode(plan.as_bytes(), head.as_bytes(), &chunks, &outputs)?
        }
    };
    let run = stored.run.clone();
    pool.runs.put(stored);
    Ok(run)
}

/// The columns of a run's row, and its key (what a write needs of the run beside its
/// records: no copy of the run crosses to the database thread).
struct Row {
    organization: String,
    id: String,
    agent: String,
    status: &'static str,
    started_at: String,
    version: i64,
    /// The trigger that started it (`triggered_by.trigger_id`), for its trigger's list.
    trigger: Option<String>,
    /// Tasks owing a refund: a run with some is swept like a running one.
    refunds_owed: i64,
}

impl Row {
    fn of(run: &Run) -> Self {
        Self {
            organization: run.organization_id.to_string(),
            id: run.id.to_string(),
            agent: run.agent_id.to_string(),
            status: run.status.as_str(),
            started_at: run.started_at.to_string(),
            version: run.version as i64,
            trigger: run.trigger_id().map(|id| id.to_string()),
            refunds_owed: run.refunds_owed as i64,
        }
    }
}

/// Writes the records of `encoded` beside the run's row (written by the caller).
fn write_records(connection: &Connection, row: &Row, encoded: &Encoded) -> anyhow::Result<()> {
    let (org, id) = (&row.organization, &row.id);
    let mut chunks = connection
        .prepare_cached(
            "INSERT OR REPLACE INTO run_chunks (organization_id, run_id, chunk, document) VALUES (?1, ?2, ?3, ?4)",
        )
        .db("storing a run's tasks")?;
    for (chunk, bytes) in &encoded.chunks {
        chunks.execute(params![org, id, *chunk as i64, std::str::from_utf8(bytes)?]).db("storing a run's tasks")?;
    }
    let mut outputs = connection
        .prepare_cached(
            "INSERT OR REPLACE INTO run_outputs (organization_id, run_id, position, document) VALUES (?1, ?2, ?3, ?4)",
        )
        .db("storing a run's outputs")?;
    for (position, bytes) in &encoded.outputs {
        outputs
            .execute(params![org, id, *position as i64, std::str::from_utf8(bytes)?])
            .db("storing a run's outputs")?;
    }
    Ok(())
}

pub(super) fn insert_media(connection: &rusqlite::Connection, media: &[MediaRecord]) -> anyhow::Result<()> {
    let mut statement = connection
        .prepare_cached(
            "INSERT INTO media (id, organization_id, run_id, kind, key, version, content_type, duration_ms, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .db("recording media")?;
    for record in media {
        statement
            .execute(params![
                record.id.to_string(),
                record.organization_id.to_string(),
                record.run_id.to_string(),
                record.kind.as_str(),
                record.key,
                record.version,
                record.content_type,
                record.duration_ms.map(|ms| ms as i64),
                record.created_at.to_string(),
            ])
            .db("recording media")?;
    }
    Ok(())
}

#[async_trait]
impl RunRepo for Sqlite {
    async fn create_run(
        &self,
        run: &Run,
        media: &[MediaRecord],
        deliveries: &[WebhookDelivery],
        claim: Option<&str>,
    ) -> anyhow::Result<bool> {
        let encoded = stored::encode(None, run)?;
        let sizes = encoded.sizes.clone();
        let (row, media, deliveries) = (Row::of(run), media.to_vec(), deliveries.to_vec());
        let claim = claim.map(str::to_owned);
        let created = self
            .write(move |transaction| {
                if let Some(claim) = &claim {
                    let claimed = transaction
                        .prepare_cached(
                            "INSERT INTO run_claims (organization_id, claim, run_id) VALUES (?1, ?2, ?3)
                             ON CONFLICT DO NOTHING",
                        )
                        .db("claiming a run")?
                        .execute(params![row.organization, claim, row.id])
                        .db("claiming a run")?;
                    if claimed == 0 {
                        return Ok(false);
                    }
                }
                let inserted = transaction
                    .prepare_cached(
                        "INSERT INTO runs (organization_id, id, agent_id, status, started_at, version, document, plan, \
                         trigger_id)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO NOTHING",
                    )
                    .db("storing a run")?
                    .execute(params![
                        row.organization,
                        row.id,
                        row.agent,
                        row.status,
                        row.started_at,
                        row.version,
                        std::str::from_utf8(&encoded.head)?,
                        std::str::from_utf8(encoded.plan.as_deref().unwrap_or_default())?,
                        row.trigger,
                    ])
                    .db("storing a run")?;
                // An error rolls back the claim written above.
                anyhow::ensure!(inserted == 1, "run {} already exists", row.id);
                write_records(transaction, &row, &encoded)?;
                insert_media(transaction, &media)?;
                insert_deliveries(transaction, &deliveries)?;
                Ok(true)
            })
            .await?;
        if created {
            // Kept once committed: a cached version is always one that was stored.
            self.inner.runs.put(Stored { run: run.clone(), sizes: Some(sizes) });
        }
        Ok(created)
    }

    async fn get_run(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<Run>> {
        let pool = self.inner.clone();
        self.read(move |connection| {
            let version: Option<i64> = connection
                .prepare_cached("SELECT version FROM runs WHERE organization_id = ?1 AND id = ?2")
                .db("reading a run")?
                .query_row([organization.to_string(), id.to_string()], |row| row.get(0))
                .optional()
                .db("reading a run")?;
            version.map(|version| load(connection, &pool, organization, id, version as u64)).transpose()
        })
        .await
    }

    async fn run_status(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<RunStatus>> {
        let status: Option<String> = self
            .call(move |connection| {
                connection
                    .prepare_cached("SELECT status FROM runs WHERE organization_id = ?1 AND id = ?2")
                    .db("reading a run's status")?
                    .query_row(params![organization.to_string(), id.to_string()], |row| row.get(0))
                    .optional()
                    .db("reading a run's status")
            })
            .await?;
        status
            .map(|status| {
                RunStatus::parse(&status).ok_or_else(|| anyhow::anyhow!("run status {status:?} is not known"))
            })
            .transpose()
    }

    async fn update_run(
        &self,
        run: &Run,
        media: &[MediaRecord],
        deliveries: &[WebhookDelivery],
        account: Option<&AccountWrite>,
    ) -> anyhow::Result<bool> {
        let before = self.inner.runs.get(run.organization_id, run.id, run.version.wrapping_sub(1));
        let encoded = stored::encode(before.as_deref(), run)?;
        let sizes = encoded.sizes.clone();
        let (row, media, deliveries) = (Row::of(run), media.to_vec(), deliveries.to_vec());
        let account = account.cloned();
        let stored = self
            .write(move |transaction| -> anyhow::Result<bool> {
                // The account first: when another writer moved it, nothing is written.
                if let Some(account) = &account {
                    let current: Option<i64> = transaction
                        .prepare_cached("SELECT version FROM runs WHERE organization_id = ?1 AND id = ?2")
                        .db("reading a run's version")?
                        .query_row([&row.organization, &row.id], |found| found.get(0))
                        .optional()
                        .db("reading a run's version")?;
                    if current != Some(row.version - 1) {
                        return Ok(false);
                    }
                    if super::credits::write_account_in(transaction, account)? != Written::Done {
                        return Ok(false);
                    }
                }
                let changed = transaction
                    .prepare_cached(
                        "UPDATE runs SET status = ?3, version = ?4, document = ?5, plan = coalesce(?6, plan),
                         refunds_owed = ?8
                     WHERE organization_id = ?1 AND id = ?2 AND version = ?7",
                    )
                    .db("updating a run")?
                    .execute(params![
                        row.organization,
                        row.id,
                        row.status,
                        row.version,
                        std::str::from_utf8(&encoded.head)?,
                        encoded.plan.as_deref().map(std::str::from_utf8).transpose()?,
                        row.version - 1,
                        row.refunds_owed,
                    ])
                    .db("updating a run")?;
                if changed == 0 {
                    return Ok(false);
                }
                write_records(transaction, &row, &encoded)?;
                insert_media(transaction, &media)?;
                insert_deliveries(transaction, &deliveries)?;
                Ok(true)
            })
            .await?;
        if stored {
            self.inner.runs.put(Stored { run: run.clone(), sizes: Some(sizes) });
        }
        Ok(stored)
    }

    async fn list_runs(&self, organization: OrganizationId, query: &RunQuery) -> anyhow::Result<Vec<Run>> {
        let query = query.clone();
        let pool = self.inner.clone();
        self.read(move |connection| {
            let mut sql = String::from("SELECT id, version FROM runs WHERE organization_id = ?");
            let mut values: Vec<String> = vec![organization.to_string()];
            if let Some(agent) = query.agent_id {
                sql.push_str(" AND agent_id = ?");
                values.push(agent.to_string());
            }
            if let Some(trigger) = query.trigger_id {
                sql.push_str(" AND trigger_id = ?");
                values.push(trigger.to_string());
            }
            if !query.statuses.is_empty() {
                let marks = vec!["?"; query.statuses.len()].join(", ");
                sql.push_str(&format!(" AND status IN ({marks})"));
                values.extend(query.statuses.iter().map(|status| status.as_str().to_owned()));
            }
            if let Some(from) = query.from {
                sql.push_str(" AND started_at >= ?");
                values.push(from.to_string());
            }
            if let Some(to) = query.to {
                sql.push_str(" AND started_at <= ?");
                values.push(to.to_string());
            }
            if let Some((at, id)) = query.after {
                sql.push_str(" AND (started_at < ? OR (started_at = ? AND id < ?))");
                values.extend([at.to_string(), at.to_string(), id.to_string()]);
            }
            sql.push_str(&format!(" ORDER BY started_at DESC, id DESC LIMIT {}", query.limit + 1));
            let mut statement = connection.prepare_cached(&sql).db("listing runs")?;
            let rows = statement
                .query_map(params_from_iter(values), |row| Ok((parsed::<RunId>(row, 0)?, row.get::<_, i64>(1)?)))
                .db("listing runs")?;
            let found = rows.collect::<Result<Vec<_>, _>>().db("listing runs")?;
            found.into_iter().map(|(id, version)| load(connection, &pool, organization, id, version as u64)).collect()
        })
        .await
    }

    async fn running_runs(&self, cursor: Option<String>, limit: usize) -> anyhow::Result<RunningPage> {
        let (organization, run) = match cursor.as_deref().and_then(|cursor| cursor.split_once('/')) {
            Some((organization, run)) => (organization.to_owned(), run.to_owned()),
            None => (String::new(), String::new()),
        };
        let found: Vec<(OrganizationId, RunId)> = self
            .call(move |connection| {
                let mut statement = connection
                    .prepare_cached(
                        "SELECT organization_id, id FROM runs
                         WHERE (status = 'running' OR refunds_owed > 0) AND (organization_id, id) > (?1, ?2)
                         ORDER BY organization_id, id LIMIT ?3",
                    )
                    .db("listing running runs")?;
                let rows = statement
                    .query_map(params![organization, run, limit as i64], |row| Ok((parsed(row, 0)?, parsed(row, 1)?)))
                    .db("listing running runs")?;
                rows.collect::<Result<Vec<_>, _>>().db("listing running runs")
            })
            .await?;
        let next = (found.len() == limit)
            .then(|| found.last().map(|(organization, run)| format!("{organization}/{run}")))
            .flatten();
        Ok((found, next))
    }
}

#[async_trait]
impl MediaRecords for Sqlite {
    async fn get_media(&self, id: MediaId) -> anyhow::Result<Option<MediaRecord>> {
        self.call(move |connection| {
            connection
                .prepare_cached(
                    "SELECT id, organization_id, run_id, kind, key, version, content_type, duration_ms, created_at
                     FROM media WHERE id = ?1",
                )
                .db("reading media")?
                .query_row([id.to_string()], |row| {
                    let kind: String = row.get(3)?;
                    Ok(MediaRecord {
                        id: parsed(row, 0)?,
                        organization_id: parsed(row, 1)?,
                        run_id: parsed(row, 2)?,
                        kind: MediaKind::parse(&kind).ok_or_else(|| {
                            rusqlite::Error::FromSqlConversionFailure(
                                3,
                                rusqlite::types::Type::Text,
                                format!("media kind {kind:?} is not known").into(),
                            )
                        })?,
                        key: row.get(4)?,
                        version: row.get(5)?,
                        content_type: row.get(6)?,
                        duration_ms: row.get::<_, Option<i64>>(7)?.map(|ms| ms.max(0) as u64),
                        created_at: parsed(row, 8)?,
                    })
                })
                .optional()
                .db("reading media")
        })
        .await
    }
}

impl Sqlite {
    /// Runs that are `running`, of every organization: what a restarted local worker pool
    /// picks up again.
    pub async fn running_runs(&self) -> anyhow::Result<Vec<(OrganizationId, RunId)>> {
        self.call(|connection| {
            let mut statement = connection
                .prepare_cached("SELECT organization_id, id FROM runs WHERE status = 'running'")
                .db("listing running runs")?;
            let rows =
                statement.query_map([], |row| Ok((parsed(row, 0)?, parsed(row, 1)?))).db("listing running runs")?;
            rows.collect::<Result<Vec<_>, _>>().db("listing running runs")
        })
        .await
    }
}
