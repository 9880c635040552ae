//! Agents: workflow templates of the organization, their metadata rules, listing and the
//! use cases that create, edit, copy and delete them.

use std::collections::HashMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::graph::{self, CreatedNode, Graph, Operation};
use super::time::Timestamp;
use super::workspaces::{self, WorkspaceError};
use crate::core::retry::AGENT_UPDATE_CONFLICTS;
use crate::domain::identity::IdentityRepo;
pub use crate::domain::ids::AgentId;
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::NodeTypeId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::WorkspaceId;
use crate::domain::rejection::{DomainError, Rejection};
use crate::domain::time::Clock;

/// Longest agent name, in characters.
pub const MAX_NAME_CHARS: usize = 120;
/// Longest agent description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 5_000;
/// Largest and default page of `GET /agents`.
pub const MAX_LIST_LIMIT: usize = 100;
const DEFAULT_LIST_LIMIT: usize = 25;
/// Longest `name` filter, in characters.
pub const MAX_NAME_FILTER_CHARS: usize = 200;
/// Name of an agent created without one.
const DEFAULT_NAME: &str = "Untitled agent";

/// Who may see an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    Public,
    Private,
}

impl Visibility {
    /// The stored and shown word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Private => "private",
        }
    }

    /// Parses the stored word.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "public" => Some(Self::Public),
            "private" => Some(Self::Private),
            _ => None,
        }
    }
}

/// The agent record of list, create and read responses.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "An agent's record.")]
pub struct Agent {
    #[schema(value_type = uuid::Uuid)]
    pub id: AgentId,
    pub name: String,
    pub description: String,
    pub visibility: Visibility,
    #[schema(value_type = uuid::Uuid)]
    pub workspace_id: WorkspaceId,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// An agent with its graph, and the version that guards concurrent updates.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentRecord {
    pub agent: Agent,
    pub graph: Graph,
    pub version: u64,
}

/// Everything that can go wrong with an agent request.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A malformed field; the text names it.
    #[error("{0}")]
    Invalid(String),
    /// A graph operation was refused.
    #[error(transparent)]
    Operation(#[from] graph::OperationError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("Agent not found")]
    NotFound,
    #[error("the agent kept being changed by other requests; try again")]
    Contended,
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

/// A foreign workspace is invalid in a body; a list filter of one answers 403 itself.
impl DomainError for AgentError {
    fn rejection(self) -> Result<Rejection, anyhow::Error> {
        match self {
            AgentError::Invalid(_) | AgentError::Operation(_) | AgentError::Workspace(WorkspaceError::Foreign) => {
                Ok(Rejection::Invalid)
            }
            AgentError::NotFound => Ok(Rejection::NotFound),
            AgentError::Contended => Ok(Rejection::Conflict),
            AgentError::Workspace(WorkspaceError::Backend(cause)) | AgentError::Backend(cause) => Err(cause),
        }
    }
}

/// A property outside a body's declaration is a 400 `{ detail }`.
impl crate::core::json::Refusal for AgentError {
    fn unknown_property(message: String) -> Self {
        invalid(message)
    }
}

crate::closed_body! {
    /// `POST /agent/create`; every field optional.
    #[derive(Clone, Debug, Default, PartialEq)]
    #[schema(as = CreateAgent)]
    pub struct AgentCreate -> AgentError {
        #[schema(nullable = false, min_length = 1, max_length = 120)]
        name: Option<String> = agent_name,
        #[schema(nullable = false, max_length = 5000)]
        description: Option<String> = agent_description,
        #[schema(nullable = false)]
        visibility: Option<Visibility> = agent_visibility,
        /// A workspace of the key's organization; omitted: its primary workspace.
        #[schema(value_type = Option<uuid::Uuid>, nullable = false)]
        workspace_id: Option<WorkspaceId> = optional_workspace,
    }
}

crate::closed_body! {
    /// `POST /agent/{agent_id}/update`: metadata, operations, or both.
    #[derive(Clone, Debug, PartialEq)]
    #[schema(as = UpdateAgent, min_properties = 1)]
    pub struct AgentUpdate -> AgentError {
        #[schema(nullable = false, min_length = 1, max_length = 120)]
        name: Option<String> = agent_name,
        #[schema(nullable = false, max_length = 5000)]
        description: Option<String> = agent_description,
        #[schema(nullable = false)]
        visibility: Option<Visibility> = agent_visibility,
        #[schema(nullable = false, min_items = 1, max_items = 1000)]
        operations: Option<Vec<Operation>> = |value: Option<&Value>| {
            value.map(|value| graph::parse_operations(value).map_err(AgentError::Invalid)).transpose()
        },
    }
}

crate::closed_body! {
    /// `POST /agent/{agent_id}/duplicate`
    #[schema(as = DuplicateAgent)]
    pub struct AgentCopy -> AgentError {
        /// The copy's name; omitted: the original's with ` (copy)`.
        #[schema(nullable = false, min_length = 1, max_length = 120)]
        name: Option<String> = agent_name,
    }
}

impl AgentUpdate {
    /// The operations, in order (none when only metadata changes).
    pub fn operations(&self) -> &[Operation] {
        self.operations.as_deref().unwrap_or_default()
    }

    /// Refuses an update that changes nothing.
    fn check(&self) -> Result<(), AgentError> {
        if self.name.is_none() && self.description.is_none() && self.visibility.is_none() && self.operations.is_none() {
            return Err(invalid("nothing to update: give name, description, visibility or operations"));
        }
        Ok(())
    }
}

/// Sets the metadata a create or update gives.
fn apply_fields(
    agent: &mut Agent,
    name: &Option<String>,
    description: &Option<String>,
    visibility: Option<Visibility>,
) {
    if let Some(name) = name {
        agent.name.clone_from(name);
    }
    if let Some(description) = description {
        agent.description.clone_from(description);
    }
    if let Some(visibility) = visibility {
        agent.visibility = visibility;
    }
}

/// `name`: 1 to [`MAX_NAME_CHARS`] characters once trimmed.
fn agent_name(value: Option<&Value>) -> Result<Option<String>, AgentError> {
    match value {
        None => Ok(None),
        Some(Value::String(text)) => {
            let name = text.trim();
            let length = name.chars().count();
            if length == 0 || length > MAX_NAME_CHARS {
                return Err(invalid(format!("name must be 1 to {MAX_NAME_CHARS} characters")));
            }
            Ok(Some(name.to_owned()))
        }
        Some(_) => Err(invalid("name must be a string")),
    }
}

/// `description`: at most [`MAX_DESCRIPTION_CHARS`] characters.
fn agent_description(value: Option<&Value>) -> Result<Option<String>, AgentError> {
    match value {
        None => Ok(None),
        Some(Value::String(text)) if text.chars().count() <= MAX_DESCRIPTION_CHARS => Ok(Some(text.clone())),
        Some(Value::String(_)) => {
            Err(invalid(format!("description must be at most {MAX_DESCRIPTION_CHARS} characters")))
        }
        Some(_) => Err(invalid("description must be a string")),
    }
}

/// `visibility`: `public` or `private`.
fn agent_visibility(value: Option<&Value>) -> Result<Option<Visibility>, AgentError> {
    match value {
        None => Ok(None),
        Some(Value::String(text)) => {
            Ok(Some(Visibility::parse(text).ok_or_else(|| invalid("visibility must be \"public\" or \"private\""))?))
        }
        Some(_) => Err(invalid("visibility must be \"public\" or \"private\"")),
    }
}

fn invalid(message: impl Into<String>) -> AgentError {
    AgentError::Invalid(message.into())
}

/// Parses the optional `workspace_id` field.
fn optional_workspace(value: Option<&Value>) -> Result<Option<WorkspaceId>, AgentError> {
    match value {
        None => Ok(None),
        Some(Value::String(text)) => {
            WorkspaceId::parse(text).map(Some).ok_or_else(|| invalid("workspace_id must be a UUID"))
        }
        Some(_) => Err(invalid("workspace_id must be a UUID string")),
    }
}

/// The result of an update.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UpdateAnswer, description = "The answer of an update.")]
pub struct UpdateResult {
    pub success: bool,
    #[schema(value_type = uuid::Uuid)]
    pub agent_id: AgentId,
    #[schema(value_type = u64)]
    pub operations_applied: usize,
    pub created_nodes: Vec<CreatedNode>,
}

/// Filters and position of one `GET /agents` page, already validated.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentQuery {
    pub limit: usize,
    /// List agents whose IDs sort before this position: the previous page's last agent,
    /// or the first ID of the instant a caller wrote (see [`decode_cursor`]).
    pub after: Option<AgentId>,
    pub workspace_id: Option<WorkspaceId>,
    /// Lower-cased substring the name must contain, matched literally.
    pub name_contains: Option<String>,
}

impl AgentQuery {
    /// Parses the query parameters of `GET /agents`.
    pub fn parse(
        limit: Option<&str>,
        cursor: Option<&str>,
        workspace_id: Option<&str>,
        name: Option<&str>,
    ) -> Result<Self, AgentError> {
        let limit = match limit {
            None => DEFAULT_LIST_LIMIT,
            // Digits only: `+5` or ` 5` are not integers as a client would write them.
            Some(text) => match text.parse::<usize>().ok().filter(|_| text.bytes().all(|b| b.is_ascii_digit())) {
                Some(limit) if (1..=MAX_LIST_LIMIT).contains(&limit) => limit,
                _ => return Err(invalid(format!("limit must be an integer from 1 to {MAX_LIST_LIMIT}"))),
            },
        };
        let after = cursor
            .map(|cursor| {
                decode_cursor(cursor).ok_or_else(|| {
                    invalid("cursor must be an RFC 3339 date-time, e.g. 2026-01-31T12:00:00Z or a next_cursor")
                })
            })
            .transpose()?;
        let workspace_id = workspace_id
            .map(|text| WorkspaceId::parse(text).ok_or_else(|| invalid("workspace_id must be a UUID")))
            .transpose()?;
        let name_contains = match name {
            Some(text) if text.chars().count() > MAX_NAME_FILTER_CHARS => {
                return Err(invalid(format!("name must be at most {MAX_NAME_FILTER_CHARS} characters")))
            }
            Some("") | None => None,
            Some(text) => Some(text.to_lowercase()),
        };
        Ok(Self { limit, after, workspace_id, name_contains })
    }

    /// True when an agent passes the filters (cursor aside).
    pub fn matches(&self, agent: &Agent) -> bool {
        self.workspace_id.is_none_or(|workspace| agent.workspace_id == workspace)
            && self.name_contains.as_ref().is_none_or(|part| agent.name.to_lowercase().contains(part.as_str()))
    }
}

/// One page of agents, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentPage {
    pub agents: Vec<Agent>,
    /// The `cursor` of the next page; null on the last. A date-time: the page's last
    /// agent's creation instant, with sub-millisecond digits unique to that agent.
    #[schema(required = true, value_type = Option<Timestamp>)]
    pub next_cursor: Option<String>,
}

/// Digits after the millisecond in an agent cursor: the 80 bits of the agent's ID after
/// its 48-bit creation time, in decimal (2^80 < 10^25), so that agents created in the
/// same millisecond have distinct cursors, in their list order.
const TIE_DIGITS: usize = 25;

/// The cursor just past `last`: an RFC 3339 date-time, the agent's creation instant (its
/// ID's millisecond) followed by [`TIE_DIGITS`] sub-millisecond digits taken from the
/// rest of its ID. Unique per agent, the same every time, and ordered as the list is.
fn encode_cursor(last: AgentId) -> String {
    let bytes = last.as_uuid().into_bytes();
    let millis = bytes[..6].iter().fold(0u64, |value, byte| value << 8 | u64::from(*byte));
    let tie = bytes[6..].iter().fold(0u128, |value, byte| value << 8 | u128::from(*byte));
    let at = Timestamp::from_unix_millis(millis).as_datetime();
    format!("{}.{:03}{tie:0width$}Z", at.format("%Y-%m-%dT%H:%M:%S"), millis % 1000, width = TIE_DIGITS)
}

/// The position a `cursor` names: agents listed after it have smaller IDs. Any RFC 3339
/// date-time is a position: its millisecond and up to [`TIE_DIGITS`] further digits of
/// its fraction (missing ones are zeros), so a date-time a caller writes lists the
/// agents created before it, and a `next_cursor` lists those after its agent. None when
/// the text is not a date-time.
fn decode_cursor(text: &str) -> Option<AgentId> {
    // The fraction's digits apart: chrono keeps nanoseconds only.
    let (whole, digits) = match text.find('.') {
        Some(dot) => {
            let count = text[dot + 1..].bytes().take_while(u8::is_ascii_digit).count();
            if count == 0 {
                return None;
            }
            (format!("{}{}", &text[..dot], &text[dot + 1 + count..]), &text[dot + 1..dot + 1 + count])
        }
        None => (text.to_owned(), ""),
    };
    let seconds = chrono::DateTime::parse_from_rfc3339(&whole).ok()?.timestamp();
    let digit = |at: usize| u64::from(digits.as_bytes().get(at).map_or(0, |byte| byte - b'0'));
    let Ok(seconds) = u64::try_from(seconds) else {
        // Before 1970: no agent is older.
        return Some(AgentId::from_uuid(uuid::Uuid::nil()));
    };
    let millis = seconds * 1000 + digit(0) * 100 + digit(1) * 10 + digit(2);
    if millis >= 1 << 48 {
        return Some(AgentId::from_uuid(uuid::Uuid::max()));
    }
    let tie = (3..3 + TIE_DIGITS).fold(0u128, |value, at| value * 10 + u128::from(digit(at))).min((1 << 80) - 1);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6..].copy_from_slice(&tie.to_be_bytes()[6..]);
    Some(AgentId::from_uuid(uuid::Uuid::from_bytes(bytes)))
}

/// Creates an agent (empty graph) in the requested or the primary workspace.
pub async fn create_agent(
    repo: &dyn AgentRepo,
    identity: &dyn IdentityRepo,
    clock: &dyn Clock,
    organization: OrganizationId,
    create: AgentCreate,
) -> Result<Agent, AgentError> {
    let now = clock.now();
    let workspace_id = workspaces::for_new_agent(identity, organization, create.workspace_id, now).await?;
    // Version 7 IDs start with their creation time, so the key order is the list order.
    let mut agent = Agent {
        id: AgentId::now_v7(),
        name: DEFAULT_NAME.to_owned(),
        description: String::new(),
        visibility: Visibility::Private,
        workspace_id,
        created_at: now,
        updated_at: now,
    };
    apply_fields(&mut agent, &create.name, &create.description, create.visibility);
    let record = AgentRecord { agent: agent.clone(), graph: Graph::default(), version: 1 };
    if !repo.create_agent(organization, &record, &[]).await? {
        return Err(AgentError::Backend(anyhow::anyhow!("agent {} already exists", agent.id)));
    }
    Ok(agent)
}

/// An agent with its graph.
pub async fn get_agent(
    repo: &dyn AgentRepo,
    organization: OrganizationId,
    id: AgentId,
) -> Result<AgentRecord, AgentError> {
    repo.get_agent(organization, id).await?.ok_or(AgentError::NotFound)
}

/// One page of the organization's agents, newest first.
pub async fn list_agents(
    repo: &dyn AgentRepo,
    identity: &dyn IdentityRepo,
    organization: OrganizationId,
    query: AgentQuery,
) -> Result<AgentPage, AgentError> {
    if let Some(workspace) = query.workspace_id {
        workspaces::check_owned(identity, organization, workspace).await?;
    }
    let mut agents = repo.list_agents(organization, &query).await?;
    let next_cursor = if agents.len() > query.limit {
        agents.truncate(query.limit);
        agents.last().map(|agent| encode_cursor(agent.id))
    } else {
        None
    };
    Ok(AgentPage { agents, next_cursor })
}

/// What changes as a trigger fires, beside its parameters in the graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TriggerState {
    pub organization_id: OrganizationId,
    /// The trigger node's `agent_node_id`.
    pub trigger_id: AgentNodeId,
    pub agent_id: AgentId,
    pub node_type_id: NodeTypeId,
    pub enabled: bool,
    /// The next fire (Schedule) or poll (Channel Feed); None when it has none.
    pub next_at: Option<Timestamp>,
    pub last_fired_at: Option<Timestamp>,
    pub last_error: Option<String>,
    /// When the parameters it fires with were saved (a feed's entries published before
    /// are not new).
    pub saved_at: Timestamp,
    /// A feed's address as of the state (a new address starts the feed's record anew).
    #[serde(default)]
    pub feed_url: Option<String>,
    /// Whether a poll of the feed recorded the entries present.
    #[serde(default)]
    pub polled: bool,
    /// Keys of the feed's entries dealt with (run started, or not new), among those of
    /// its last poll.
    #[serde(default)]
    pub seen: Vec<String>,
    /// Incremented by every write; a write names the version it read.
    pub version: u64,
}

/// A write of a trigger's state that goes with the agent's.
#[derive(Clone, Debug, PartialEq)]
pub enum TriggerWrite {
    /// Stores the state if the stored one is at `version - 1` (none stored: version 1).
    Put(TriggerState),
    /// Removes the state if it is at `version`.
    Delete { organization: OrganizationId, trigger_id: AgentNodeId, version: u64 },
}

/// What an agent's save also checks and writes beyond its graph: its trigger nodes'
/// states (a trigger's run request checked as a run would check it). Given by the
/// contexts above agents (`triggers::TriggerSaves`).
#[async_trait]
pub trait SaveChecks: Send + Sync {
    /// The writes that go with saving `after` over `before` (None: a new agent); an
    /// error when a node created or changed (the operation at `touched[node]`) is refused.
    async fn on_save(
        &self,
        organization: OrganizationId,
        before: Option<&Graph>,
        after: &AgentRecord,
        touched: &HashMap<AgentNodeId, usize>,
        now: Timestamp,
    ) -> Result<Vec<TriggerWrite>, AgentError>;
}

/// Where an agent's update is saved and checked: its triggers' states go with its graph
/// ([`SaveChecks`]).
pub struct UpdatePorts<'a> {
    pub agents: &'a dyn AgentRepo,
    pub checks: &'a dyn SaveChecks,
    pub clock: &'a dyn Clock,
}

/// Applies metadata and operations all-or-nothing; when another update lands first the
/// payload is applied again to the newer graph. Trigger nodes created or changed are
/// checked once every operation applied (a Video Input created in the same payload
/// counts), and their states are saved with the graph.
pub async fn update_agent(
    ports: &UpdatePorts<'_>,
    organization: OrganizationId,
    id: AgentId,
    update: AgentUpdate,
) -> Result<UpdateResult, AgentError> {
    update.check()?;
    let mut retry = AGENT_UPDATE_CONFLICTS.start();
    loop {
        let current = get_agent(ports.agents, organization, id).await?;
        let (graph, created_nodes) = current.graph.apply(update.operations())?;
        let mut agent = current.agent.clone();
        apply_fields(&mut agent, &update.name, &update.description, update.visibility);
        let now = ports.clock.now();
        agent.updated_at = now;
        let next = AgentRecord { agent, graph, version: current.version + 1 };
        let touched = touched_nodes(update.operations(), &created_nodes);
        let writes = ports.checks.on_save(organization, Some(&current.graph), &next, &touched, now).await?;
        if ports.agents.replace_agent(organization, &next, current.version, &writes).await? {
            return Ok(UpdateResult {
                success: true,
                agent_id: id,
                operations_applied: update.operations().len(),
                created_nodes,
            });
        }
        if retry.wait("another update of the agent landed first").await.is_err() {
            return Err(AgentError::Contended);
        }
    }
}

/// The index of the operation that last created or changed each node.
fn touched_nodes(operations: &[Operation], created: &[CreatedNode]) -> std::collections::HashMap<AgentNodeId, usize> {
    let mut created = created.iter();
    let mut touched = std::collections::HashMap::new();
    for (index, operation) in operations.iter().enumerate() {
        match operation {
            Operation::CreateNode { .. } => {
                if let Some(node) = created.next() {
                    touched.insert(node.agent_node_id, index);
                }
            }
            Operation::UpdateNode { agent_node_id, .. } => {
                touched.insert(*agent_node_id, index);
            }
            _ => {}
        }
    }
    touched
}

/// Copies an agent with its graph (new node IDs) into a new agent of the same workspace.
/// Its triggers do not fire until their nodes are saved (checked) in the copy: their
/// run requests still name the source's nodes.
pub async fn duplicate_agent(
    ports: &UpdatePorts<'_>,
    organization: OrganizationId,
    id: AgentId,
    copy: AgentCopy,
) -> Result<Agent, AgentError> {
    let source = get_agent(ports.agents, organization, id).await?;
    let now = ports.clock.now();
    let name = copy.name.unwrap_or_else(|| {
        let suffix = " (copy)";
        let kept: String = source.agent.name.chars().take(MAX_NAME_CHARS - suffix.len()).collect();
        format!("{kept}{suffix}")
    });
    let agent = Agent { id: AgentId::now_v7(), name, created_at: now, updated_at: now, ..source.agent };
    let record = AgentRecord { agent: agent.clone(), graph: source.graph.with_new_ids(), version: 1 };
    let writes = [];
    if !ports.agents.create_agent(organization, &record, &writes).await? {
        return Err(AgentError::Backend(anyhow::anyhow!("agent {} already exists", agent.id)));
    }
    Ok(agent)
}

/// Soft-deletes an agent: it leaves lists and reads; its runs keep their history.
pub async fn delete_agent(
    repo: &dyn AgentRepo,
    clock: &dyn Clock,
    organization: OrganizationId,
    id: AgentId,
) -> Result<(), AgentError> {
    if repo.delete_agent(organization, id, clock.now()).await? {
        Ok(())
    } else {
        Err(AgentError::NotFound)
    }
}

/// Parses an agent ID from a path; anything but a UUID names no agent.
pub fn parse_agent_id(text: &str) -> Result<AgentId, AgentError> {
    AgentId::parse(text).ok_or(AgentError::NotFound)
}

/// Agents with their graphs, always addressed through the owning organization.
/// Soft-deleted agents are invisible to every read.
#[async_trait]
pub trait AgentRepo: Send + Sync {
    /// Stores a new agent, with its triggers' states (see [`TriggerWrite`]); false when
    /// a trigger's state is not as the write expects.
    async fn create_agent(
        &self,
        organization: OrganizationId,
        record: &AgentRecord,
        triggers: &[TriggerWrite],
    ) -> anyhow::Result<bool>;
    /// An agent with its graph and version, unless missing or deleted.
    async fn get_agent(&self, organization: OrganizationId, id: AgentId) -> anyhow::Result<Option<AgentRecord>>;
    /// Agents matching the query, newest first, created before `query.after` when set;
    /// up to `query.limit + 1` of them, so the caller can tell whether a page follows.
    async fn list_agents(&self, organization: OrganizationId, query: &AgentQuery) -> anyhow::Result<Vec<Agent>>;
    /// Replaces an agent (metadata and graph) if it is still at `expected_version` and not
    /// deleted, with the writes of its triggers' states, in one atomic write; false when
    /// another write (of the agent or of a trigger's state) came first.
    async fn replace_agent(
        &self,
        organization: OrganizationId,
        record: &AgentRecord,
        expected_version: u64,
        triggers: &[TriggerWrite],
    ) -> anyhow::Result<bool>;
    /// Marks an agent deleted; false when it is missing or already deleted.
    async fn delete_agent(&self, organization: OrganizationId, id: AgentId, at: Timestamp) -> anyhow::Result<bool>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_date_times_unique_per_agent_in_list_order() {
        let mut ids: Vec<AgentId> = (0..50).map(|_| AgentId::now_v7()).collect();
        // Agents of one millisecond: their cursors differ only after the millisecond.
        ids.extend((0..50).map(|_| AgentId::v7_at(1_780_000_000_123)));
        for id in &ids {
            let cursor = encode_cursor(*id);
            assert!(chrono::DateTime::parse_from_rfc3339(&cursor).is_ok(), "{cursor}");
            assert_eq!(decode_cursor(&cursor), Some(*id), "{cursor}");
        }
        let mut by_id = ids.clone();
        by_id.sort();
        let mut by_cursor = ids.clone();
        by_cursor.sort_by_key(|id| encode_cursor(*id));
        assert_eq!(by_cursor, by_id, "text order is list order");
        let same = encode_cursor(AgentId::v7_at(1_780_000_000_123));
        assert!(same.starts_with("2026-05-28T20:26:40.123"), "{same}");
        assert_eq!(same.len(), "2026-05-28T20:26:40.".len() + 3 + TIE_DIGITS + 1);
    }

    #[test]
    fn a_written_date_time_is_the_first_position_of_its_instant() {
        let at = 1_780_000_000_123;
        for text in ["2026-05-28T20:26:40.123Z", "2026-05-28T22:26:40.123+02:00", "2026-05-28T20:26:40.1230Z"] {
            let position = decode_cursor(text).unwrap();
            assert!(position < AgentId::v7_bound(at, false), "{text}: every agent of that millisecond is after it");
            assert!(position > AgentId::v7_bound(at - 1, true), "{text}: every earlier agent is before it");
        }
        let whole_second = decode_cursor("2026-05-28T20:26:40Z").unwrap();
        assert!(whole_second < AgentId::v7_bound(at - 123, false) && whole_second > AgentId::v7_bound(at - 124, true));
        assert_eq!(decode_cursor("1969-12-31T23:59:59Z"), Some(AgentId::from_uuid(uuid::Uuid::nil())));
        // Whatever RFC 3339 allows a client to write is a position.
        for text in [
            "2026-01-01t00:00:00z",
            "2026-06-30T23:59:60Z",
            "0000-01-01T00:00:00Z",
            "2026-01-01T00:00:00-00:00",
            "9999-12-31T23:59:59.99999999999999999999999999999999999+14:00",
        ] {
            assert!(decode_cursor(text).is_some(), "{text}");
        }
        for bad in ["not a cursor", "2026-05-28", "2026-05-28T20:26:40.Z", "2026-13-01T00:00:00Z", ""] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }

    #[test]
    fn query_limits_and_filters() {
        assert_eq!(AgentQuery::parse(None, None, None, None).unwrap().limit, 25);
        for bad in ["0", "101", "1.5", "ten", "-1", "+5", " 5", ""] {
            assert!(AgentQuery::parse(Some(bad), None, None, None).is_err(), "{bad}");
        }
        let long = "x".repeat(201);
        assert!(AgentQuery::parse(None, None, None, Some(&long)).is_err());
        assert_eq!(AgentQuery::parse(None, None, None, Some("AbC")).unwrap().name_contains.as_deref(), Some("abc"));
    }

    #[test]
    fn duplicate_names_stay_within_the_limit() {
        let suffix = " (copy)";
        let kept: String = "n".repeat(120).chars().take(MAX_NAME_CHARS - suffix.len()).collect();
        assert_eq!(format!("{kept}{suffix}").chars().count(), MAX_NAME_CHARS);
    }
}
