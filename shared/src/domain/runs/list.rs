//! The run lists (`GET /agent_runs`, `GET /agent/{id}/runs`): their query parameters,
//! parsed, and one page of runs with the cursor of the next.

use super::ports::RunQuery;
use super::service::RunError;
use super::{Run, RunId, RunStatus};
use crate::core::cursor;
use crate::domain::agents::AgentRepo;
use crate::domain::ids::AgentId;
use crate::domain::ids::OrganizationId;
use crate::domain::runs::ports::RunRepo;
use crate::domain::time::Timestamp;

/// Most runs one page may have.
pub const MAX_LIST_LIMIT: usize = 100;
const CURSOR_LIST: &str = "runs";

/// Parses `limit`, `cursor`, `status`, `from`, `to` (and `agent_id` when `agent_filter`).
pub fn parse_list(param: impl Fn(&str) -> Option<String>, agent_filter: bool) -> Result<RunQuery, RunError> {
    let invalid = |message: String| RunError::Invalid(message);
    let limit = match param("limit") {
        None => 25,
        Some(text) => match text.parse::<usize>() {
            Ok(limit) if (1..=MAX_LIST_LIMIT).contains(&limit) => limit,
            _ => return Err(invalid(format!("limit must be an integer from 1 to {MAX_LIST_LIMIT}, got {text:?}"))),
        },
    };
    let mut statuses = Vec::new();
    if let Some(text) = param("status") {
        for part in text.split(',').map(str::trim).filter(|part| !part.is_empty()) {
            let status = RunStatus::parse(part).ok_or_else(|| {
                invalid(format!(
                    "status {part:?} is not one of running, completed, partial_complete, failed, cancelled"
                ))
            })?;
            if !statuses.contains(&status) {
                statuses.push(status);
            }
        }
    }
    let time = |name: &str| -> Result<Option<Timestamp>, RunError> {
        param(name)
            .map(|text| {
                chrono::DateTime::parse_from_rfc3339(&text)
                    .map(|at| Timestamp::from_datetime(at.with_timezone(&chrono::Utc)))
                    .map_err(|_| invalid(format!("{name} must be an ISO 8601 date-time, got {text:?}")))
            })
            .transpose()
    };
    let (from, to) = (time("from")?, time("to")?);
    if let (Some(from), Some(to)) = (from, to) {
        if from > to {
            return Err(invalid("from must not be after to".into()));
        }
    }
    let after = match param("cursor") {
        None => None,
        Some(text) => {
            let position = cursor::decode(CURSOR_LIST, &text).ok_or_else(|| invalid("cursor is not valid".into()))?;
            let (at, id) = position.split_once('|').ok_or_else(|| invalid("cursor is not valid".into()))?;
            Some((
                Timestamp::parse(at).map_err(|_| invalid("cursor is not valid".into()))?,
                RunId::parse(id).ok_or_else(|| invalid("cursor is not valid".into()))?,
            ))
        }
    };
    let agent_id = match param("agent_id").filter(|_| agent_filter) {
        None => None,
        Some(text) => {
            Some(AgentId::parse(&text).ok_or_else(|| invalid(format!("agent_id must be a UUID, got {text:?}")))?)
        }
    };
    Ok(RunQuery { agent_id, trigger_id: None, statuses, from, to, after, limit })
}

/// One page of runs and the cursor of the next.
pub async fn list_runs(
    runs: &dyn RunRepo,
    agents: &dyn AgentRepo,
    organization: OrganizationId,
    query: RunQuery,
) -> Result<(Vec<Run>, Option<String>), RunError> {
    if let Some(agent) = query.agent_id {
        agents.get_agent(organization, agent).await?.ok_or(RunError::AgentNotFound)?;
    }
    let mut page = runs.list_runs(organization, &query).await?;
    let next = if page.len() > query.limit {
        page.truncate(query.limit);
        page.last().map(|run| cursor::encode(CURSOR_LIST, &format!("{}|{}", run.started_at, run.id)))
    } else {
        None
    };
    Ok((page, next))
}
