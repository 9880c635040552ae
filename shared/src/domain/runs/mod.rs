//! Runs: the runtime copy of an agent's graph, its items and tasks, and the rules that
//! move them (ARCHITECTURE §3). A run is one document, changed only by the functions of
//! [`engine`] and stored under a version so that concurrent writers take turns.

pub mod bind;
pub mod charges;
pub mod edits;
pub mod engine;
pub mod error;
pub mod events;
pub mod list;
pub mod parts;
pub mod plan;
pub mod ports;
pub mod service;
pub mod start;
pub mod stored;
pub mod sweep;
pub mod views;
pub mod worker;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::ids::AgentId;
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::OrganizationId;
use std::ops::{Index, IndexMut};
use std::sync::{Arc, OnceLock};

use super::media::MediaType;
use super::nodes::placement::Placement;
use super::nodes::{self, NodeKind, NodeSettings, NodeType};
use super::time::Timestamp;
use crate::core::shared_list::SharedList;
use crate::domain::ids::NodeTypeId;
use crate::domain::ids::UploadId;
pub use crate::domain::ids::{AgentStateId, MediaId, RunId, TaskIndex};

/// The position of a node in [`Run::nodes`]; stored as a plain number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeIndex(pub usize);

impl std::fmt::Display for NodeIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Index<TaskIndex> for Vec<Task> {
    type Output = Task;
    fn index(&self, index: TaskIndex) -> &Task {
        &self[index.0]
    }
}

impl IndexMut<TaskIndex> for Vec<Task> {
    fn index_mut(&mut self, index: TaskIndex) -> &mut Task {
        &mut self[index.0]
    }
}

impl Index<NodeIndex> for [RuntimeNode] {
    type Output = RuntimeNode;
    fn index(&self, index: NodeIndex) -> &RuntimeNode {
        &self[index.0]
    }
}

impl Index<NodeIndex> for Vec<RuntimeNode> {
    type Output = RuntimeNode;
    fn index(&self, index: NodeIndex) -> &RuntimeNode {
        &self[index.0]
    }
}

impl Index<TaskIndex> for SharedList<Task> {
    type Output = Task;
    fn index(&self, index: TaskIndex) -> &Task {
        &self[index.0]
    }
}

impl IndexMut<TaskIndex> for SharedList<Task> {
    fn index_mut(&mut self, index: TaskIndex) -> &mut Task {
        &mut self[index.0]
    }
}

impl Index<NodeIndex> for SharedList<RuntimeNode> {
    type Output = RuntimeNode;
    fn index(&self, index: NodeIndex) -> &RuntimeNode {
        &self[index.0]
    }
}

/// Inputs one run may bind, over all forms.
pub const MAX_INPUTS: usize = 100;
/// Tasks one run may plan (items × nodes, after chains are joined).
pub const MAX_TASKS: usize = 5_000;
/// Times a task may be claimed by workers that then stopped before finishing it.
pub const MAX_CLAIMS: u32 = 3;

/// Status of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(description = "A run's state.")]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Completed,
    PartialComplete,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 5] =
        [Self::Running, Self::Completed, Self::PartialComplete, Self::Failed, Self::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::PartialComplete => "partial_complete",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

/// Status of a task. `Waiting` is a task whose inputs are not all there yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Waiting,
    Queued,
    Running,
    Completed,
    Failed,
    Blocked,
    Cancelled,
}

/// How many task statuses there are (the length of a [`TaskCounts`] row).
pub const TASK_STATUSES: usize = 7;

impl TaskStatus {
    pub const ALL: [TaskStatus; TASK_STATUSES] =
        [Self::Waiting, Self::Queued, Self::Running, Self::Completed, Self::Failed, Self::Blocked, Self::Cancelled];

    /// Queued, running or blocked: work that was promised and not finished.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Queued | Self::Running | Self::Blocked)
    }

    /// Completed, failed or cancelled.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// Status of a runtime node, aggregated from its tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(description = "A runtime node's state.")]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    NotStarted,
    Queued,
    Running,
    Completed,
    PartialComplete,
    Failed,
    Blocked,
    Cancelled,
}

/// A node of the runtime graph.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "StoredNode")]
pub struct RuntimeNode {
    pub agent_node_id: AgentNodeId,
    pub original_node_id: AgentNodeId,
    pub node_type_id: NodeTypeId,
    /// The template's parameters with `update_params` merged in.
    pub params: Map<String, Value>,
    /// Nodes feeding this one, in connection order.
    pub upstream: Vec<AgentNodeId>,
    /// Its typed parameters: parsed from `params` when the node is planned, or the first
    /// time they are asked for after it is read (a run's document is read far more often
    /// than any one node's settings are used).
    settings: OnceLock<Arc<dyn NodeSettings>>,
}

/// A runtime node as stored: its settings are parsed again from its parameters.
#[derive(Deserialize)]
struct StoredNode {
    agent_node_id: AgentNodeId,
    original_node_id: AgentNodeId,
    node_type_id: NodeTypeId,
    params: Map<String, Value>,
    upstream: Vec<AgentNodeId>,
}

impl From<StoredNode> for RuntimeNode {
    fn from(stored: StoredNode) -> Self {
        let StoredNode { agent_node_id, original_node_id, node_type_id, params, upstream } = stored;
        RuntimeNode { agent_node_id, original_node_id, node_type_id, params, upstream, settings: OnceLock::new() }
    }
}

impl Serialize for RuntimeNode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Stored<'a> {
            agent_node_id: AgentNodeId,
            original_node_id: AgentNodeId,
            node_type_id: NodeTypeId,
            params: &'a Map<String, Value>,
            upstream: &'a [AgentNodeId],
        }
        Stored {
            agent_node_id: self.agent_node_id,
            original_node_id: self.original_node_id,
            node_type_id: self.node_type_id,
            params: &self.params,
            upstream: &self.upstream,
        }
        .serialize(serializer)
    }
}

/// Nodes are equal when what is stored of them is: the settings follow from the parameters.
impl PartialEq for RuntimeNode {
    fn eq(&self, other: &Self) -> bool {
        (self.agent_node_id, self.original_node_id, self.node_type_id, &self.params, &self.upstream)
            == (other.agent_node_id, other.original_node_id, other.node_type_id, &other.params, &other.upstream)
    }
}

impl RuntimeNode {
    /// A node whose parameters passed its type's schema; its settings are parsed here.
    pub fn new(
        agent_node_id: AgentNodeId,
        original_node_id: AgentNodeId,
        node_type_id: NodeTypeId,
        params: Map<String, Value>,
        upstream: Vec<AgentNodeId>,
    ) -> Self {
        let settings = OnceLock::from(nodes::settings_of(node_type_id, &params));
        Self { agent_node_id, original_node_id, node_type_id, params, upstream, settings }
    }

    /// Its typed parameters.
    pub fn settings(&self) -> &dyn NodeSettings {
        self.settings.get_or_init(|| nodes::settings_of(self.node_type_id, &self.params)).as_ref()
    }

    /// Its node type, unless the catalog no longer has it.
    pub fn node_type(&self) -> Option<&'static NodeType> {
        nodes::find(self.node_type_id)
    }

    pub fn kind(&self) -> Option<NodeKind> {
        self.node_type().map(|node_type| node_type.kind)
    }

    pub fn type_name(&self) -> &'static str {
        self.node_type().map_or("unknown", |node_type| node_type.name)
    }
}

/// Where a bound input comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputSource {
    /// A ready video upload.
    Upload {
        id: UploadId,
        key: String,
        media: MediaId,
        /// The object version finalize sealed (S3): the task reads that version, so a
        /// later PUT to the upload URL cannot change a run's input.
        #[serde(default)]
        version: Option<String>,
    },
    /// An output of an earlier run.
    Render {
        id: MediaId,
        key: String,
        /// The version its media record reads (an upload passed through untouched).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
    },
    /// A plain HTTP(S) URL, downloaded by the Video Input task.
    Url { url: String },
    /// A video-sharing site's page, read at start and fetched by the Video Input task
    /// with yt-dlp.
    Site { url: String, video: crate::domain::sites::SiteVideoInfo },
    /// An item of the workspace's asset manager: its chosen file, a ready video upload.
    Asset {
        item: crate::domain::asset_manager::AssetItemId,
        name: String,
        provider: String,
        /// The file taken (`auto` resolved).
        artifact: crate::domain::asset_manager::Artifact,
        upload: UploadId,
        key: String,
        media: MediaId,
        #[serde(default)]
        version: Option<String>,
    },
}

/// One video bound to a Video Input node: an item of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BoundInput {
    /// The runtime Video Input node.
    pub node: AgentNodeId,
    pub source: InputSource,
    pub clip_start_ms: Option<u64>,
    pub clip_end_ms: Option<u64>,
    /// The clipped input and its thumbnail, once the Video Input task made them.
    pub clipped: Option<MediaLinkIds>,
}

/// A video and its thumbnail, by media ID.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MediaLinkIds {
    pub video: MediaId,
    pub thumbnail: Option<MediaId>,
}

/// A media file a task made, and what it holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MediaFile {
    pub key: String,
    /// The object version to read (an upload sealed on S3, whose key its upload URL
    /// could still write to); none for files the engine made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub duration_ms: u64,
    pub width: u32,
    pub height: u32,
    pub has_audio: bool,
    /// A video (the engine's renders), or an image or sound a generation made.
    #[serde(default, skip_serializing_if = "is_video")]
    pub media: MediaType,
    /// Who made it, when a generation did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<GeneratedBy>,
}

fn is_video(media: &MediaType) -> bool {
    *media == MediaType::Video
}

/// The provider that made a generated file, and the file's signed-link ID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeneratedBy {
    pub provider: String,
    pub link: Option<MediaId>,
}

/// What a task works on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TaskSource {
    /// The bound input with this index (a Video Input task).
    Input { input: usize },
    /// The results of these tasks: one for a single-input chain, all of them (in
    /// connection order, then item order) for Concatenate. An edit that takes a
    /// generated medium through a connection lists that task after the video's.
    Tasks { tasks: Vec<TaskIndex> },
    /// Nothing: a generation node's task makes its media from its parameters.
    Generate,
}

/// A unit of work: one execution of a chain of nodes on one item (or, for Concatenate,
/// on all the items reaching it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Nodes of [`Run::nodes`]: a chain of single-input nodes done in one pass.
    pub nodes: Vec<NodeIndex>,
    pub source: TaskSource,
    /// Counts the times the task was (re)queued; messages name the attempt they are for.
    pub attempt: u32,
    /// Workers that claimed this attempt (more than one: earlier ones stopped).
    pub claims: u32,
    pub status: TaskStatus,
    /// A claim is held until then; after it a redelivered message may claim again.
    pub lease_until: Option<Timestamp>,
    /// Why the task failed; None for a task skipped because an upstream task failed.
    pub error: Option<String>,
    /// The node (of the run's nodes) the error is about, when the task runs a chain and
    /// one of its nodes is the problem; otherwise the error is the chain's last node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_node: Option<NodeIndex>,
    pub result: Option<MediaFile>,
    /// Earlier attempts dropped by resume, kept as history only.
    pub detached_attempts: u32,
    /// Whether the current attempt was ever queued (a task that never was is not
    /// history when a resume resets it).
    #[serde(default)]
    pub sent: bool,
    /// When the task was last queued (or its message last sent again by the sweeper):
    /// a task queued long ago whose message may have been lost is sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<Timestamp>,
    /// The credits this attempt took, per node of its chain (None: not charged yet; a
    /// claim again of an attempt whose worker stopped pays nothing more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charged: Option<Vec<u64>>,
    /// Blocked because the balance did not cover its price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credits: Option<CreditBlock>,
    /// Credits an ended attempt took that are owed back, per node of the chain, until a
    /// batch of refunds pays them ([`Run::pay_refunds`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_owed: Option<Vec<u64>>,
    /// An edit whose output is longer than a segment is rendered in parts ([`parts`]):
    /// the pictures of its segments and its sound, each a message and a claim of its
    /// own, then joined by the task. Empty for a task rendered in one pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Part>,
    /// When a `RUN_PROGRESS` event last told of its parts made (at most one a second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_event_at: Option<Timestamp>,
    /// When a worker first took the current attempt (or a part of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When the current attempt ended (completed, failed or cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
}

/// One part of a task rendered in parts: what it makes, where it stands, and the file
/// it made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Part {
    pub part: crate::domain::media::RenderPart,
    /// Queued, running, completed or failed.
    pub status: TaskStatus,
    /// Workers that claimed it (more than one: earlier ones stopped).
    pub claims: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<Timestamp>,
    /// The stored file, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A task blocked for credits: its price, the balance it met, and until when it waits
/// for an auto top-up to be paid (None: it waits for a resume).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditBlock {
    pub price: u64,
    pub balance: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_up_until: Option<Timestamp>,
}

/// Whose fault a task's failure is: ours (a render, a provider, a time limit) gives its
/// credits back; the caller's (media that is not media, a profile that failed) keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Ours,
    Caller,
}

/// A finished video of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunOutput {
    /// The render ID.
    pub id: MediaId,
    pub thumbnail: Option<MediaId>,
    /// The runtime node that produced it.
    pub node: AgentNodeId,
    pub original_node_id: AgentNodeId,
    pub task: TaskIndex,
    pub completed_at: Timestamp,
    /// The timeline project zip (`timeline_prproj_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<MediaId>,
    /// Where each medium plays in the output (`sources`, the timeline).
    #[serde(default)]
    pub placements: Vec<Placement>,
}

/// One resume of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    pub at: Timestamp,
    pub agent_state_id: AgentStateId,
    pub nodes_queued: usize,
}

/// What started a run that the API did not: a trigger (a schedule's due time, a fire by
/// hand, a feed's entry) or a video-sharing site's URL among its inputs. Stored with the
/// run as it is shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggeredBy {
    /// `schedule`, `manual`, or the site of the video (e.g. `youtube`; `generic` for a
    /// feed entry on no known site).
    #[serde(rename = "type")]
    pub kind: String,
    /// The site's channel of the video; null for a schedule or a manual fire.
    #[schema(required = true)]
    pub channel_id: Option<String>,
    /// The site's ID of the video; null for a schedule or a manual fire.
    #[schema(required = true)]
    pub video_id: Option<String>,
    #[schema(required = true)]
    pub video_title: Option<String>,
    /// The video's page; null for a schedule or a manual fire.
    #[schema(required = true)]
    pub video_url: Option<String>,
    /// When it fired: a schedule's due time, a fire's or a start's time.
    pub triggered_at: Timestamp,
    /// The trigger node (its `agent_node_id`); null for a run started from a site URL
    /// through the API.
    #[schema(required = true, value_type = Option<uuid::Uuid>)]
    pub trigger_id: Option<AgentNodeId>,
}

/// The whole state of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub id: RunId,
    pub organization_id: OrganizationId,
    pub agent_id: AgentId,
    pub status: RunStatus,
    pub status_message: Option<String>,
    pub needs_credits: bool,
    pub started_at: Timestamp,
    pub updated_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub triggered_by: Option<TriggeredBy>,
    pub callback_url: Option<String>,
    pub agent_state_id: AgentStateId,
    pub resumes: Vec<Resume>,
    /// Incremented by every stored change; a write names the version it read.
    pub version: u64,
    /// The runtime graph, its tasks and its outputs are lists whose copies share their
    /// elements: a change copies the run (from this process's cache) and then only the
    /// tasks it changes, so it costs the same in a run of ten tasks or of thousands.
    pub nodes: SharedList<RuntimeNode>,
    pub inputs: Vec<BoundInput>,
    pub tasks: SharedList<Task>,
    pub outputs: SharedList<RunOutput>,
    /// Uploaded files the nodes' parameters name (`audio_id`, `image_id`): upload ID to
    /// its sealed file, resolved when the run started.
    #[serde(default)]
    pub assets: std::collections::BTreeMap<UploadId, AssetFile>,
    /// Events recorded for `callback_url` so far: the last event's `sequence`.
    #[serde(default)]
    pub webhook_sequence: u64,
    /// How many tasks owe a refund ([`Task::refund_owed`]): while any does, the run stays
    /// where the sweep looks, so that a payer that stopped between batches is followed.
    #[serde(default)]
    pub refunds_owed: usize,
    /// Its tasks by status, over the run and per node: counted when the run is read or
    /// planned ([`Run::recount`]) and moved by every status change ([`Run::set_status`]),
    /// so that the run's end and its nodes' statuses never walk its tasks.
    #[serde(skip)]
    pub counts: TaskCounts,
    /// Each task's dependents, found once when first asked for (see [`Run::dependents`]).
    #[serde(skip)]
    dependents: Dependents,
    /// Credit movements the change being made asks for: written with the run, in the
    /// same atomic write, by [`service::change_run`].
    #[serde(skip)]
    pub credit_moves: Vec<crate::domain::credits::CreditMove>,
}

/// Each task's dependents: the tasks whose source names it. The plan never changes, so
/// they are found once per run read; equal whatever they hold (they follow from the tasks).
#[derive(Clone, Debug, Default)]
struct Dependents(OnceLock<Arc<Vec<Vec<TaskIndex>>>>);

impl PartialEq for Dependents {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Tasks by status (a row is indexed by `TaskStatus as usize`): over the run, and per
/// node (a task counts once for each node of its chain).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskCounts {
    pub run: [u32; TASK_STATUSES],
    pub nodes: Vec<[u32; TASK_STATUSES]>,
}

impl TaskCounts {
    /// Tasks of the run in `status`.
    pub fn of(&self, status: TaskStatus) -> u32 {
        self.run[status as usize]
    }

    /// Tasks not final: waiting, queued, running or blocked.
    pub fn unfinished(&self) -> u32 {
        TaskStatus::ALL.iter().filter(|status| !status.is_final()).map(|status| self.of(*status)).sum()
    }
}

/// A sealed upload a run reads: its key and, on S3, the version finalize sealed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "AssetForm")]
pub struct AssetFile {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its signed link's media ID (runs started before links to assets had none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<MediaId>,
}

/// How an asset is stored: runs started before versions were kept stored the key alone.
#[derive(Deserialize)]
#[serde(untagged)]
enum AssetForm {
    Key(String),
    File {
        key: String,
        #[serde(default)]
        version: Option<String>,
        #[serde(default)]
        media: Option<MediaId>,
    },
}

impl From<AssetForm> for AssetFile {
    fn from(form: AssetForm) -> Self {
        match form {
            AssetForm::Key(key) => AssetFile { key, version: None, media: None },
            AssetForm::File { key, version, media } => AssetFile { key, version, media },
        }
    }
}

/// Which task statuses a node's tasks have.
#[derive(Clone, Copy, Default)]
struct TaskStatuses(u8);

impl TaskStatuses {
    /// The statuses a node's counts hold.
    fn of_counts(row: &[u32; TASK_STATUSES]) -> Self {
        let mut seen = Self::default();
        for status in TaskStatus::ALL.into_iter().filter(|status| row[*status as usize] > 0) {
            seen.add(status);
        }
        seen
    }

    fn bit(status: TaskStatus) -> u8 {
        1 << status as u8
    }

    fn add(&mut self, status: TaskStatus) {
        self.0 |= Self::bit(status);
    }

    fn any(self, status: TaskStatus) -> bool {
        self.0 & Self::bit(status) != 0
    }

    /// The status of a node whose tasks have these statuses.
    fn node_status(self, is_trigger: bool) -> NodeStatus {
        if self.0 == 0 {
            return if is_trigger { NodeStatus::Completed } else { NodeStatus::NotStarted };
        }
        if self.any(TaskStatus::Running) {
            return NodeStatus::Running;
        }
        if self.any(TaskStatus::Queued) {
            return NodeStatus::Queued;
        }
        if self.any(TaskStatus::Blocked) {
            return NodeStatus::Blocked;
        }
        if self.any(TaskStatus::Waiting) {
            let started = self.0 != Self::bit(TaskStatus::Waiting);
            return if started { NodeStatus::Running } else { NodeStatus::NotStarted };
        }
        if self.any(TaskStatus::Cancelled) {
            return NodeStatus::Cancelled;
        }
        match (self.any(TaskStatus::Completed), self.any(TaskStatus::Failed)) {
            (true, true) => NodeStatus::PartialComplete,
            (false, true) => NodeStatus::Failed,
            _ => NodeStatus::Completed,
        }
    }
}

/// `node_status_counts`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "Nodes by state.")]
pub struct NodeStatusCounts {
    #[schema(value_type = u64)]
    pub completed: usize,
    #[schema(value_type = u64)]
    pub in_progress: usize,
    #[schema(value_type = u64)]
    pub failed: usize,
}

impl Run {
    /// The trigger node that started it (`triggered_by.trigger_id`), if one did.
    pub fn trigger_id(&self) -> Option<crate::domain::graph::AgentNodeId> {
        self.triggered_by.as_ref()?.trigger_id
    }

    /// Index of a runtime node.
    pub fn node_index(&self, id: AgentNodeId) -> Option<NodeIndex> {
        self.nodes.iter().position(|node| node.agent_node_id == id).map(NodeIndex)
    }

    /// Every task's index, in order.
    pub fn task_indexes(&self) -> impl Iterator<Item = TaskIndex> {
        (0..self.tasks.len()).map(TaskIndex)
    }

    /// Every node's index, in order.
    pub fn node_indexes(&self) -> impl Iterator<Item = NodeIndex> {
        (0..self.nodes.len()).map(NodeIndex)
    }

    /// The tasks that run node `index`.
    pub fn tasks_of(&self, index: NodeIndex) -> impl Iterator<Item = (TaskIndex, &Task)> {
        self.tasks
            .iter()
            .enumerate()
            .filter(move |(_, task)| task.nodes.contains(&index))
            .map(|(i, task)| (TaskIndex(i), task))
    }

    /// A node's status from its tasks' counts (see [`Run::node_statuses`]).
    pub fn node_status(&self, index: NodeIndex) -> NodeStatus {
        let seen = self.counts.nodes.get(index.0).map(TaskStatuses::of_counts).unwrap_or_default();
        seen.node_status(self.nodes[index].kind() == Some(NodeKind::Trigger))
    }

    /// Every node's status from its tasks' counts. A trigger has no tasks and is
    /// completed; any other node without tasks (nothing reaches it) never started.
    pub fn node_statuses(&self) -> Vec<NodeStatus> {
        self.node_indexes().map(|index| self.node_status(index)).collect()
    }

    /// Each task's dependents (the tasks whose source names it), in task order.
    pub fn dependents(&self) -> Arc<Vec<Vec<TaskIndex>>> {
        self.dependents
            .0
            .get_or_init(|| {
                let mut dependents = vec![Vec::new(); self.tasks.len()];
                for (index, task) in self.tasks.iter().enumerate() {
                    if let TaskSource::Tasks { tasks } = &task.source {
                        for source in tasks {
                            if let Some(list) = dependents.get_mut(source.0) {
                                if list.last() != Some(&TaskIndex(index)) {
                                    list.push(TaskIndex(index));
                                }
                            }
                        }
                    }
                }
                Arc::new(dependents)
            })
            .clone()
    }

    /// Counts the tasks by status again (after the run was read or planned).
    pub fn recount(&mut self) {
        self.counts = self.recounted();
    }

    /// The counts its tasks make.
    pub fn recounted(&self) -> TaskCounts {
        let mut counts = TaskCounts { run: [0; TASK_STATUSES], nodes: vec![[0; TASK_STATUSES]; self.nodes.len()] };
        for task in &self.tasks {
            counts.run[task.status as usize] += 1;
            for node in &task.nodes {
                if let Some(row) = counts.nodes.get_mut(node.0) {
                    row[task.status as usize] += 1;
                }
            }
        }
        counts
    }

    /// Moves task `index` to `status`, and its counts with it. Every change of a task's
    /// status goes through here.
    pub fn set_status(&mut self, index: TaskIndex, status: TaskStatus, now: Timestamp) {
        if self.tasks[index].status == status {
            // Unchanged: the task stays shared with the copy the run was made from.
            return;
        }
        let task = &mut self.tasks[index];
        let was = std::mem::replace(&mut task.status, status);
        // Its times, for a timeline of the run: from the first claim of the current
        // attempt (or of one of its parts) to its end; a claim again after a lease, or
        // the join after the parts, keeps the start. A resume's new attempt clears them.
        match status {
            TaskStatus::Running => task.started_at = task.started_at.or(Some(now)),
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled => task.finished_at = Some(now),
            _ => {}
        }
        let counts = &mut self.counts;
        counts.run[was as usize] = counts.run[was as usize].saturating_sub(1);
        counts.run[status as usize] += 1;
        for node in &task.nodes {
            if let Some(row) = counts.nodes.get_mut(node.0) {
                row[was as usize] = row[was as usize].saturating_sub(1);
                row[status as usize] += 1;
            }
        }
    }

    /// `node_status_counts` over the runtime nodes that are not triggers.
    pub fn node_status_counts(&self) -> NodeStatusCounts {
        let mut counts = NodeStatusCounts::default();
        let statuses = self.node_statuses();
        for index in self.work_nodes() {
            match statuses[index.0] {
                NodeStatus::Completed | NodeStatus::PartialComplete => counts.completed += 1,
                NodeStatus::Failed => counts.failed += 1,
                NodeStatus::Queued | NodeStatus::Running | NodeStatus::Blocked => counts.in_progress += 1,
                NodeStatus::NotStarted | NodeStatus::Cancelled => {}
            }
        }
        counts
    }

    /// Indexes of the runtime nodes that are not triggers.
    pub fn work_nodes(&self) -> impl Iterator<Item = NodeIndex> + '_ {
        self.node_indexes().filter(|index| self.nodes[*index].kind() != Some(NodeKind::Trigger))
    }

    /// Task error messages grouped by template node, in node order.
    pub fn errors(&self) -> Vec<(AgentNodeId, Vec<String>)> {
        let mut groups: Vec<(AgentNodeId, Vec<String>)> = Vec::new();
        for task in &self.tasks {
            let Some(message) = &task.error else { continue };
            let Some(&last) = task.nodes.last() else { continue };
            let original = self.nodes[task.error_node.unwrap_or(last)].original_node_id;
            match groups.iter_mut().find(|(node, _)| *node == original) {
                Some((_, messages)) => messages.push(message.clone()),
                None => groups.push((original, vec![message.clone()])),
            }
        }
        groups
    }

    /// Whether a task's last node delivers outputs: a Destination, or (in a graph
    /// without one) a node nothing leaves.
    pub fn is_output_node(&self, index: NodeIndex) -> bool {
        let has_destination = self.nodes.iter().any(|node| node.kind() == Some(NodeKind::Destination));
        let node = &self.nodes[index];
        if has_destination {
            return node.kind() == Some(NodeKind::Destination);
        }
        node.kind() != Some(NodeKind::Trigger)
            && !self.nodes.iter().any(|other| other.upstream.contains(&node.agent_node_id))
    }

    /// The tasks whose results are run outputs.
    pub fn output_tasks(&self) -> impl Iterator<Item = TaskIndex> + '_ {
        self.task_indexes()
            .filter(|index| self.tasks[*index].nodes.last().is_some_and(|last| self.is_output_node(*last)))
    }
}

#[cfg(test)]
mod tests {
    use super::{AssetFile, MediaId};

    #[test]
    fn an_asset_stored_as_a_bare_key_reads_without_a_version() {
        let old: AssetFile = serde_json::from_str(r#""assets/o/a""#).unwrap();
        assert_eq!(old, AssetFile { key: "assets/o/a".into(), version: None, media: None });
        let new = AssetFile { key: "uploads/o/a".into(), version: Some("v1".into()), media: Some(MediaId::new_v4()) };
        let again: AssetFile = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(again, new);
    }
}
