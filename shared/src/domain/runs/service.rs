//! The run endpoints' domain operations: start (validate everything, create nothing on
//! a refusal), read, list, cancel and resume. Every change is a versioned write of the
//! run; task messages are sent after the write that queued them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::engine::{Cancelled, Resumed, WrongStatus};
use super::events::{Before, Notifier};
use super::plan::{plan_tasks, runtime_graph};
use super::start::{InputRef, Inputs, StartRequest};
use super::{
    AgentStateId, AssetFile, BoundInput, InputSource, MediaId, MediaKind, MediaRecord, Run, RunId, RunStatus,
    RuntimeNode, TaskIndex,
};
use crate::core::cursor;
use crate::core::queue::Queue;
use crate::core::retry::{RetryPolicy, Unavailable, RUN_UPDATE_CONFLICTS};
use crate::domain::agents::AgentId;
use crate::domain::agents::AgentRepo;
use crate::domain::asset_manager;
use crate::domain::asset_manager::AssetManager;
use crate::domain::asset_manager::AssetRepo;
use crate::domain::graph::AgentNodeId;
use crate::domain::identity::OrganizationId;
use crate::domain::media::ports::DownloadError;
use crate::domain::nodes::{NodeKind, Unready, UploadUse};
use crate::domain::runs::ports::RunQuery;
use crate::domain::runs::ports::RunRepo;
use crate::domain::runs::ports::TaskMessage;
use crate::domain::sites::{SiteVideoInfo, Sites};
use crate::domain::time::Clock;
use crate::domain::time::Timestamp;
use crate::domain::uploads::UploadRepo;
use crate::domain::uploads::{Upload, UploadId, UploadKind, UploadStatus};
use futures::{StreamExt, TryStreamExt};

/// Everything that can go wrong with a run request.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The request is refused; the text names the problem (400).
    #[error("{0}")]
    Invalid(String),
    #[error("Agent not found")]
    AgentNotFound,
    #[error("Run not found")]
    NotFound,
    /// Wrong status for the operation (409).
    #[error("{0}")]
    Conflict(String),
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

impl From<WrongStatus> for RunError {
    fn from(error: WrongStatus) -> Self {
        Self::Conflict(error.0)
    }
}

/// The ports the run operations use.
pub struct RunPorts<'a> {
    pub runs: &'a dyn RunRepo,
    pub queue: &'a dyn Queue<TaskMessage>,
    pub clock: &'a dyn Clock,
    /// Records the runs' webhook events (with links for the caller's address).
    pub notifier: &'a Notifier,
    /// Video-sharing sites' pages among the URL inputs, read at start.
    pub sites: &'a Sites,
    /// Workspaces' asset-manager connections, and the managers' items.
    pub assets: &'a dyn AssetRepo,
    pub asset_manager: &'a dyn AssetManager,
}

/// Sends the messages of queued tasks.
pub async fn send_tasks(queue: &dyn Queue<TaskMessage>, run: &Run, tasks: &[TaskIndex]) -> anyhow::Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let messages: Vec<TaskMessage> = tasks
        .iter()
        .map(|task| TaskMessage {
            organization_id: run.organization_id,
            run_id: run.id,
            task: *task,
            attempt: run.tasks[*task].attempt,
        })
        .collect();
    queue.send(&messages).await
}

/// Starts a run of an agent: validates the request against the agent's graph and the
/// organization's media, plans the tasks, stores the run and queues its first tasks.
#[allow(clippy::too_many_arguments)]
pub async fn start_run(
    ports: &RunPorts<'_>,
    agents: &dyn AgentRepo,
    uploads: &dyn UploadRepo,
    organization: OrganizationId,
    agent_id: AgentId,
    request: StartRequest,
    allow_private_urls: bool,
) -> Result<RunId, RunError> {
    let record = agents.get_agent(organization, agent_id).await?.ok_or(RunError::AgentNotFound)?;
    if let Some(url) = &request.callback_url {
        check_target(url, "callback_url", allow_private_urls).await?;
    }
    let nodes =
        runtime_graph(&record.graph, &request.ignore_nodes, &request.update_params).map_err(RunError::Invalid)?;
    let now = ports.clock.now();
    // The ID carries the start time, so that ordering by ID is ordering by start.
    let run_id = RunId::v7_at(now.unix_millis());
    let mut media = Vec::new();
    let workspace = Some(record.agent.workspace_id);
    let inputs = bind_inputs(
        ports,
        uploads,
        organization,
        workspace,
        run_id,
        &nodes,
        request.inputs,
        allow_private_urls,
        now,
        &mut media,
    )
    .await?;
    let assets = resolve_assets(uploads, organization, run_id, &nodes, now, &mut media).await?;
    let mut run = Run {
        id: run_id,
        organization_id: organization,
        agent_id,
        status: RunStatus::Running,
        status_message: None,
        needs_credits: false,
        started_at: now,
        updated_at: now,
        finished_at: None,
        triggered_by: site_trigger(&inputs, now),
        callback_url: request.callback_url,
        agent_state_id: AgentStateId::new_v4(),
        resumes: Vec::new(),
        version: 0,
        nodes,
        inputs,
        tasks: Vec::new(),
        outputs: Vec::new(),
        assets,
        webhook_sequence: 0,
    };
    let outputs: Vec<bool> = run.node_indexes().map(|index| run.is_output_node(index)).collect();
    run.tasks = plan_tasks(&run.nodes, &run.inputs, |index| outputs[index.0]).map_err(RunError::Invalid)?;
    if run.output_tasks().next().is_none() {
        return Err(RunError::Invalid(
            "nothing to run: no input reaches a Destination (or, without one, a node with no outgoing connection)"
                .into(),
        ));
    }
    let queued = run.settle(now);
    let deliveries = ports.notifier.started(&mut run, now);
    ports.runs.create_run(&run, &media, &deliveries).await?;
    ports.notifier.send(&deliveries).await;
    if let Err(error) = send_tasks(ports.queue, &run, &queued).await {
        // Stored but never queued: fail those tasks rather than leave the run `running`.
        let message = "the task could not be queued when the run started; resume the run to try again";
        let failed = change_run(ports.runs, ports.notifier, organization, run.id, &RUN_UPDATE_CONFLICTS, |run| {
            Ok(match run.unqueued(&queued, message, ports.clock.now()) {
                true => Change::Store((), Vec::new()),
                false => Change::Keep(()),
            })
        })
        .await;
        if let Err(also) = failed {
            tracing::error!(run_id = %run.id, error = %also, "a run whose tasks could not be queued stays running");
        }
        return Err(RunError::Backend(error.context("queueing the run's first tasks")));
    }
    tracing::info!(run_id = %run.id, tasks = run.tasks.len(), "run started");
    Ok(run.id)
}

/// `triggered_by` of a run started from a video-sharing site's URL: its first such
/// input's video.
fn site_trigger(inputs: &[BoundInput], now: Timestamp) -> Option<Value> {
    inputs.iter().find_map(|input| match &input.source {
        InputSource::Site { video, .. } => Some(serde_json::json!({
            "type": video.site,
            "channel_id": video.channel_id,
            "video_id": video.video_id,
            "video_title": video.title,
            "video_url": video.page_url,
            "triggered_at": now,
            "trigger_id": null,
        })),
        _ => None,
    })
}

/// A URL the service will connect to must not reach private addresses.
async fn check_target(text: &str, field: &str, allow_private: bool) -> Result<(), RunError> {
    let url =
        url::Url::parse(text).map_err(|error| RunError::Invalid(format!("{field} is not a valid URL: {error}")))?;
    crate::core::ssrf::resolve_allowed(&url, allow_private)
        .await
        .map(drop)
        .map_err(|problem| RunError::Invalid(format!("{field}: {problem}")))
}

/// Binds the request's inputs to the runtime Video Input nodes (rules 1, 2, 6, 7), each
/// checked: uploads ready videos of the organization, renders its outputs, clip windows
/// starting inside the media, URLs allowed.
#[allow(clippy::too_many_arguments)]
async fn bind_inputs(
    ports: &RunPorts<'_>,
    uploads: &dyn UploadRepo,
    organization: OrganizationId,
    workspace: Option<crate::domain::workspaces::WorkspaceId>,
    run_id: RunId,
    nodes: &[RuntimeNode],
    inputs: Inputs,
    allow_private_urls: bool,
    now: Timestamp,
    media: &mut Vec<MediaRecord>,
) -> Result<Vec<BoundInput>, RunError> {
    let video_inputs: Vec<&RuntimeNode> = nodes.iter().filter(|node| node.kind() == Some(NodeKind::Input)).collect();
    let tiles: Vec<(AgentNodeId, Vec<super::start::InputItem>)> = match inputs {
        Inputs::None if video_inputs.is_empty() => Vec::new(),
        Inputs::None => {
            return Err(RunError::Invalid(format!(
                "this agent has {} Video Input tile(s): give the videos in video_ids, node_render_ids or video_urls \
                 (or video_inputs, one entry per tile)",
                video_inputs.len()
            )))
        }
        _ if video_inputs.is_empty() => {
            return Err(RunError::Invalid(
                "this agent has no Video Input tile (a generation-only workflow): it takes none of video_inputs, \
                 video_ids, video_urls, node_render_ids"
                    .into(),
            ))
        }
        Inputs::TopLevel(items) => match video_inputs.as_slice() {
            [only] => vec![(only.agent_node_id, items)],
            several => {
                let ids: Vec<String> = several.iter().map(|node| node.original_node_id.to_string()).collect();
                return Err(RunError::Invalid(format!(
                    "this agent has {} Video Input tiles: send video_inputs with one entry per tile ({})",
                    several.len(),
                    ids.join(", ")
                )));
            }
        },
        Inputs::PerTile(entries) => {
            let mut tiles = Vec::new();
            for (index, (original, items)) in entries.into_iter().enumerate() {
                let node = video_inputs.iter().find(|node| node.original_node_id == original).ok_or_else(|| {
                    RunError::Invalid(format!(
                        "video_inputs[{index}].agent_node_id {original} is not a Video Input tile of this run"
                    ))
                })?;
                tiles.push((node.agent_node_id, items));
            }
            if let Some(missing) =
                video_inputs.iter().find(|node| !tiles.iter().any(|(id, _)| *id == node.agent_node_id))
            {
                return Err(RunError::Invalid(format!(
                    "video_inputs has no entry for the Video Input tile {}: send one entry per tile",
                    missing.original_node_id
                )));
            }
            tiles
        }
    };
    let pages = describe_sites(ports.sites, &tiles, allow_private_urls).await?;
    // Each bound video gets a signed link of its own, recorded with the run.
    let mut link_of = |key: &str, version: &Option<String>, duration_ms: Option<u64>| {
        let record = input_link(organization, run_id, key, version, "video/mp4", duration_ms, now);
        let link = record.id;
        media.push(record);
        link
    };
    let mut bound = Vec::new();
    for (node, items) in tiles {
        for item in items {
            let field = item.field.clone();
            let (source, duration_ms) = match item.reference {
                InputRef::Upload(id) => {
                    let (key, version, link, duration) =
                        bind_video(uploads, organization, id, &field, &mut link_of).await?;
                    (InputSource::Upload { id, key, media: link, version }, duration)
                }
                InputRef::Asset { id, artifact } => {
                    let workspace =
                        workspace.ok_or_else(|| RunError::Invalid(format!("{field}: the agent has no workspace")))?;
                    let connection = asset_manager::connection_of(ports.assets, organization, workspace)
                        .await?
                        .ok_or_else(|| {
                            RunError::Invalid(format!(
                                "{field}: the agent's workspace {workspace} has no external-asset connection; create \
                                 one with POST /asset_connections"
                            ))
                        })?;
                    let item = ports.asset_manager.item(organization, &connection, id).await?.ok_or_else(|| {
                        RunError::Invalid(format!("{field}: asset {id} was not found in the workspace's asset manager"))
                    })?;
                    let (chosen, upload) = asset_manager::choose(&item, artifact)
                        .map_err(|problem| RunError::Invalid(format!("{field}: {problem}")))?;
                    let (key, version, link, duration) =
                        bind_video(uploads, organization, upload, &field, &mut link_of).await?;
                    let source = InputSource::Asset {
                        item: id,
                        name: item.name,
                        provider: connection.provider,
                        artifact: chosen,
                        upload,
                        key,
                        media: link,
                        version,
                    };
                    (source, duration)
                }
                InputRef::Render(id) => {
                    let record = ports.runs.get_media(id).await?;
                    let record = record
                        .filter(|record| record.organization_id == organization && record.kind == MediaKind::Render)
                        .ok_or_else(|| RunError::Invalid(format!("{field}: render {id} was not found")))?;
                    (InputSource::Render { id, key: record.key, version: record.version }, record.duration_ms)
                }
                InputRef::Url(url) | InputRef::Site(url) => match pages.get(&url) {
                    Some(video) => {
                        let duration = video.duration_ms;
                        if duration.is_some_and(|ms| ms > MAX_SITE_VIDEO_MS) {
                            return Err(RunError::Invalid(format!(
                                "{field}: the video is {} s long; at most 5 hours (18000 s) are accepted",
                                duration.unwrap_or_default() / 1000
                            )));
                        }
                        (InputSource::Site { url, video: video.clone() }, duration)
                    }
                    None => {
                        check_target(&url, &field, allow_private_urls).await?;
                        (InputSource::Url { url }, None)
                    }
                },
            };
            if let (Some(start), Some(duration)) = (item.clip_start_ms, duration_ms) {
                if start >= duration {
                    return Err(RunError::Invalid(format!(
                        "{field}: the clip window starts at {start} ms, after the end of the video ({duration} ms)"
                    )));
                }
            }
            bound.push(BoundInput {
                node,
                source,
                clip_start_ms: item.clip_start_ms,
                clip_end_ms: item.clip_end_ms,
                clipped: None,
            });
        }
    }
    Ok(bound)
}

/// The media record of a signed link to a file a run reads (an input video, or an
/// uploaded sound or picture a node uses).
fn input_link(
    organization: OrganizationId,
    run_id: RunId,
    key: &str,
    version: &Option<String>,
    content_type: &str,
    duration_ms: Option<u64>,
    now: Timestamp,
) -> MediaRecord {
    MediaRecord {
        id: MediaId::new_v4(),
        organization_id: organization,
        run_id,
        kind: MediaKind::Input,
        key: key.to_owned(),
        version: version.clone(),
        content_type: content_type.to_owned(),
        duration_ms,
        created_at: now,
    }
}

/// A ready video upload of the organization, as a run input: its file, a new signed
/// link (made by `link_of`) and its length.
async fn bind_video(
    uploads: &dyn UploadRepo,
    organization: OrganizationId,
    id: UploadId,
    field: &str,
    link_of: &mut impl FnMut(&str, &Option<String>, Option<u64>) -> MediaId,
) -> Result<(String, Option<String>, MediaId, Option<u64>), RunError> {
    let upload = uploads.get_upload(organization, id).await?;
    let upload = upload.ok_or_else(|| RunError::Invalid(format!("{field}: video {id} was not found")))?;
    if upload.kind != UploadKind::Video {
        return Err(RunError::Invalid(format!("{field}: upload {id} is not a video")));
    }
    let (UploadStatus::Ready, Some(blob)) = (upload.status, upload.blob) else {
        return Err(RunError::Invalid(format!("{field}: video {id} is not ready (finalize the upload first)")));
    };
    let duration = upload.media.as_ref().and_then(|media| media.duration_ms);
    let link = link_of(&blob.key, &blob.version, duration);
    Ok((blob.key, blob.version, link, duration))
}

/// Longest video read from a video-sharing site (the contract's limit).
pub const MAX_SITE_VIDEO_MS: u64 = 5 * 60 * 60 * 1000;
/// Site pages read at once at start.
const SITE_READS: usize = 4;
/// Longest a page may take to read at start (the request has 29 s on API Gateway).
pub const SITE_READ_TIME: Duration = Duration::from_secs(15);

/// Reads the site pages among the inputs (`youtube_url_inputs`, and `video_urls` of a
/// known site), a few at a time: what the site says of each video, by URL. A page that
/// cannot be read, or has no video, refuses the run.
async fn describe_sites(
    sites: &Sites,
    tiles: &[(AgentNodeId, Vec<super::start::InputItem>)],
    allow_private_urls: bool,
) -> Result<BTreeMap<String, SiteVideoInfo>, RunError> {
    let mut pages: Vec<(String, String)> = Vec::new();
    for item in tiles.iter().flat_map(|(_, items)| items) {
        let url = match &item.reference {
            InputRef::Site(url) if sites.is_site(url) => url,
            // yt-dlp reads known sites only: its generic reader would fetch any page.
            InputRef::Site(url) => {
                let host = url::Url::parse(url).ok().and_then(|url| url.host_str().map(str::to_owned));
                return Err(RunError::Invalid(format!(
                    "{}: {} is not a video-sharing site this deployment reads (the known sites, and the hosts \
                     added with VIDEO_SITE_HOSTS)",
                    item.field,
                    host.unwrap_or_default()
                )));
            }
            InputRef::Url(url) if sites.is_site(url) => url,
            _ => continue,
        };
        if !pages.iter().any(|(known, _)| known == url) {
            pages.push((url.clone(), item.field.clone()));
        }
    }
    // Owned values only: the reads run on a stream that must be Send for any lifetime.
    let read = futures::stream::iter(pages)
        .map(|(url, field)| {
            let videos = sites.videos.clone();
            async move {
                check_target(&url, &field, allow_private_urls).await?;
                let described = tokio::time::timeout(SITE_READ_TIME, videos.describe(&url)).await.map_err(|_| {
                    RunError::Backend(anyhow::Error::new(Unavailable(format!(
                        "{field}: the page {url} could not be read within {} s; try again",
                        SITE_READ_TIME.as_secs()
                    ))))
                })?;
                match described {
                    Ok(video) => Ok((url, SiteVideoInfo::from(video))),
                    Err(DownloadError::Refused(problem)) => Err(RunError::Invalid(format!("{field}: {problem}"))),
                    Err(DownloadError::Failed(error)) => {
                        Err(RunError::Backend(error.context(format!("reading the video page {url}"))))
                    }
                }
            }
        })
        .buffer_unordered(SITE_READS);
    read.try_collect().await
}

/// The uploads the nodes' parameters name must be ready files of the right kind, and
/// the nodes that need one must have it.
async fn resolve_assets(
    uploads: &dyn UploadRepo,
    organization: OrganizationId,
    run_id: RunId,
    nodes: &[RuntimeNode],
    now: Timestamp,
    media: &mut Vec<MediaRecord>,
) -> Result<BTreeMap<UploadId, AssetFile>, RunError> {
    let mut assets = BTreeMap::new();
    for node in nodes {
        let name = node.type_name();
        let original = node.original_node_id;
        match node.settings.check() {
            Ok(()) => {}
            Err(Unready::Needs(param)) => {
                return Err(RunError::Invalid(format!("node {original} ({name}) needs {param}")))
            }
            Err(Unready::Refused(problem)) => {
                return Err(RunError::Invalid(format!("node {original} ({name}): {problem}")))
            }
        }
        for UploadUse { param, kind, value } in node.settings.uploads() {
            let Some(text) = value else {
                return Err(RunError::Invalid(format!("node {original} ({name}) needs {param}")));
            };
            let id = UploadId::parse(&text)
                .ok_or_else(|| RunError::Invalid(format!("node {original} ({name}): {param} is not a UUID")))?;
            let upload = uploads.get_upload(organization, id).await?;
            match upload {
                Some(Upload { kind: found, status: UploadStatus::Ready, blob: Some(blob), .. }) if found == kind => {
                    if assets.contains_key(&id) {
                        continue;
                    }
                    // A link for the timeline project, which points at the run's media.
                    // Sounds and pictures of any format ffprobe reads: served as bytes.
                    let record = input_link(
                        organization,
                        run_id,
                        &blob.key,
                        &blob.version,
                        "application/octet-stream",
                        None,
                        now,
                    );
                    assets.insert(id, AssetFile { key: blob.key, version: blob.version, media: Some(record.id) });
                    media.push(record);
                }
                Some(upload) if upload.kind != kind => {
                    return Err(RunError::Invalid(format!(
                        "node {original} ({name}): {param} {id} is not an {} upload",
                        kind.as_str()
                    )))
                }
                Some(_) => {
                    return Err(RunError::Invalid(format!(
                        "node {original} ({name}): {param} {id} is not ready (finalize the upload first)"
                    )))
                }
                None => return Err(RunError::Invalid(format!("node {original} ({name}): {param} {id} was not found"))),
            }
        }
    }
    Ok(assets)
}

/// A run of the organization.
pub async fn get_run(runs: &dyn RunRepo, organization: OrganizationId, id: RunId) -> Result<Run, RunError> {
    runs.get_run(organization, id).await?.ok_or(RunError::NotFound)
}

/// What a change of a run decided.
pub enum Change<T> {
    /// Store the changed run, with the media records it made; `T` is the change's answer.
    Store(T, Vec<MediaRecord>),
    /// Leave the stored run as it is, answering `T`.
    Keep(T),
}

/// Applies `change` to the stored run until a write wins (another writer may store the
/// run in between; the change is then made again on what it stored). The change's
/// webhook events are stored in the same write, then queued. Answers the run as stored
/// (None when the change kept it) and the change's answer.
pub async fn change_run<T>(
    runs: &dyn RunRepo,
    notifier: &Notifier,
    organization: OrganizationId,
    id: RunId,
    policy: &RetryPolicy,
    mut change: impl FnMut(&mut Run) -> Result<Change<T>, RunError>,
) -> Result<(Option<Run>, T), RunError> {
    let mut retry = policy.start();
    loop {
        let mut run = runs.get_run(organization, id).await?.ok_or(RunError::NotFound)?;
        let before = run.callback_url.is_some().then(|| Before::of(&run));
        let (answer, media) = match change(&mut run)? {
            Change::Store(answer, media) => (answer, media),
            Change::Keep(answer) => return Ok((None, answer)),
        };
        let deliveries = match &before {
            Some(before) => {
                let at = run.updated_at;
                notifier.events(Some(before), &mut run, at)
            }
            None => Vec::new(),
        };
        run.version += 1;
        if runs.update_run(&run, &media, &deliveries).await? {
            notifier.send(&deliveries).await;
            return Ok((Some(run), answer));
        }
        retry.wait(format!("run {id} was changed by another writer")).await.map_err(anyhow::Error::from)?;
    }
}

/// `POST /agent_run/{id}/cancel`.
pub async fn cancel_run(ports: &RunPorts<'_>, organization: OrganizationId, id: RunId) -> Result<Cancelled, RunError> {
    let now = ports.clock.now();
    let (_, cancelled) = change_run(ports.runs, ports.notifier, organization, id, &RUN_UPDATE_CONFLICTS, |run| {
        Ok(match run.status {
            RunStatus::Cancelled => Change::Keep(Cancelled { tasks_cancelled: 0, nodes_reset: 0 }),
            _ => Change::Store(run.cancel(now)?, Vec::new()),
        })
    })
    .await?;
    Ok(cancelled)
}

/// `POST /agent_run/{id}/resume`.
pub async fn resume_run(ports: &RunPorts<'_>, organization: OrganizationId, id: RunId) -> Result<Resumed, RunError> {
    let now = ports.clock.now();
    let (run, (resumed, queued)) =
        change_run(ports.runs, ports.notifier, organization, id, &RUN_UPDATE_CONFLICTS, |run| {
            Ok(Change::Store(run.resume(now)?, Vec::new()))
        })
        .await?;
    let run = run.ok_or(RunError::NotFound)?;
    send_tasks(ports.queue, &run, &queued).await?;
    Ok(resumed)
}

/// A parsed run-list request.
pub struct ListRequest {
    pub query: RunQuery,
}

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
    Ok(RunQuery { agent_id, statuses, from, to, after, limit })
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
