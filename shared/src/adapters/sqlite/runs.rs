//! Runs in SQLite: one JSON document per run, with the columns the lists filter and sort
//! on beside it; an update is conditional on the version it read.

use async_trait::async_trait;
use rusqlite::{params, params_from_iter, OptionalExtension};

use super::{parsed, Db, Sqlite};
use crate::domain::identity::OrganizationId;
use crate::domain::runs::ports::RunQuery;
use crate::domain::runs::ports::{read_run_document, run_document, RunRepo, RunningPage};
use crate::domain::runs::{MediaId, MediaKind, MediaRecord, Run, RunId, RunStatus};
use crate::domain::webhooks::WebhookDelivery;

use super::webhooks::insert_deliveries;

fn document(run: &Run) -> anyhow::Result<String> {
    Ok(String::from_utf8(run_document(run)?)?)
}

fn from_document(text: &str) -> anyhow::Result<Run> {
    read_run_document(text.as_bytes())
}

fn insert_media(connection: &rusqlite::Connection, media: &[MediaRecord]) -> anyhow::Result<()> {
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
    async fn create_run(&self, run: &Run, media: &[MediaRecord], deliveries: &[WebhookDelivery]) -> anyhow::Result<()> {
        let (run, media, deliveries) = (run.clone(), media.to_vec(), deliveries.to_vec());
        let text = document(&run)?;
        self.write(move |transaction| {
            transaction
                .prepare_cached(
                    "INSERT INTO runs (organization_id, id, agent_id, status, started_at, version, document)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .db("storing a run")?
                .execute(params![
                    run.organization_id.to_string(),
                    run.id.to_string(),
                    run.agent_id.to_string(),
                    run.status.as_str(),
                    run.started_at.to_string(),
                    run.version as i64,
                    text
                ])
                .db("storing a run")?;
            insert_media(transaction, &media)?;
            insert_deliveries(transaction, &deliveries)
        })
        .await
    }

    async fn get_run(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<Run>> {
        let text: Option<String> = self
            .call(move |connection| {
                connection
                    .prepare_cached("SELECT document FROM runs WHERE organization_id = ?1 AND id = ?2")
                    .db("reading a run")?
                    .query_row([organization.to_string(), id.to_string()], |row| row.get(0))
                    .optional()
                    .db("reading a run")
            })
            .await?;
        text.as_deref().map(from_document).transpose()
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
    ) -> anyhow::Result<bool> {
        let (run, media, deliveries) = (run.clone(), media.to_vec(), deliveries.to_vec());
        let text = document(&run)?;
        self.write(move |transaction| {
            let changed = transaction
                .prepare_cached(
                    "UPDATE runs SET status = ?3, version = ?4, document = ?5
                     WHERE organization_id = ?1 AND id = ?2 AND version = ?6",
                )
                .db("updating a run")?
                .execute(params![
                    run.organization_id.to_string(),
                    run.id.to_string(),
                    run.status.as_str(),
                    run.version as i64,
                    text,
                    run.version as i64 - 1
                ])
                .db("updating a run")?;
            if changed == 0 {
                return Ok(false);
            }
            insert_media(transaction, &media)?;
            insert_deliveries(transaction, &deliveries)?;
            Ok(true)
        })
        .await
    }

    async fn list_runs(&self, organization: OrganizationId, query: &RunQuery) -> anyhow::Result<Vec<Run>> {
        let query = query.clone();
        let texts: Vec<String> = self
            .call(move |connection| {
                let mut sql = String::from("SELECT document FROM runs WHERE organization_id = ?");
                let mut values: Vec<String> = vec![organization.to_string()];
                if let Some(agent) = query.agent_id {
                    sql.push_str(" AND agent_id = ?");
                    values.push(agent.to_string());
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
                let rows = statement.query_map(params_from_iter(values), |row| row.get(0)).db("listing runs")?;
                rows.collect::<Result<Vec<String>, _>>().db("listing runs")
            })
            .await?;
        texts.iter().map(|text| from_document(text)).collect()
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
                         WHERE status = 'running' AND (organization_id, id) > (?1, ?2)
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
