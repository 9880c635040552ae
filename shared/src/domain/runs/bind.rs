//! Binding a start request to a run: its inputs to the runtime Video Input nodes (each
//! form checked as it is bound: uploads ready videos of the organization, renders its
//! outputs, asset-manager items their chosen file, URLs allowed, site pages read), and
//! the uploads the nodes' parameters name. Every bound file gets a signed link of its
//! own, recorded with the run.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};

use super::error::RunError;
use super::ports::RunRepo;
use super::start::{InputItem, InputRef, Inputs};
use super::{AssetFile, BoundInput, InputSource, MediaId, RunId, RuntimeNode};
use crate::core::retry::Unavailable;
use crate::domain::asset_manager::{self, Artifact, AssetManager, AssetRepo};
use crate::domain::avatars::AvatarStatus;
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::AssetItemId;
use crate::domain::ids::AvatarProfileId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::UploadId;
use crate::domain::ids::WorkspaceId;
use crate::domain::media::ports::DownloadError;
use crate::domain::media::{MediaKind, MediaRecord};
use crate::domain::nodes::{Connectable, Generation, NodeKind, Unready, UploadUse};
use crate::domain::sites::{SiteVideoInfo, Sites};
use crate::domain::time::Timestamp;
use crate::domain::uploads::{Upload, UploadKind, UploadRepo, UploadStatus};

/// What checking a start request reads (and nothing it writes): what a trigger's
/// `run_request` is checked with when it is saved.
pub struct BindPorts<'a> {
    /// Renders named as inputs.
    pub runs: &'a dyn RunRepo,
    pub uploads: &'a dyn UploadRepo,
    pub sites: &'a Sites,
    pub assets: &'a dyn AssetRepo,
    pub asset_manager: &'a dyn AssetManager,
    pub avatars: &'a dyn crate::domain::avatars::AvatarRepo,
    pub allow_private_urls: bool,
}

/// Longest video read from a video-sharing site (the contract's limit).
pub const MAX_SITE_VIDEO_MS: u64 = 5 * 60 * 60 * 1000;
/// Site pages read at once at start.
const SITE_READS: usize = 4;
/// Longest a page may take to read at start (the request has 29 s on API Gateway).
pub const SITE_READ_TIME: Duration = Duration::from_secs(15);

/// An input and where it comes from, with its length when known.
type Bound = (InputSource, Option<u64>);

/// Binds what one start request names to its run.
pub(super) struct Binder<'a> {
    ports: &'a BindPorts<'a>,
    organization: OrganizationId,
    /// The agent's workspace (its asset-manager connection).
    workspace: WorkspaceId,
    run_id: RunId,
    now: Timestamp,
    /// The signed links made so far, stored with the run.
    pub media: Vec<MediaRecord>,
}

impl<'a> Binder<'a> {
    pub(super) fn new(
        ports: &'a BindPorts<'a>,
        organization: OrganizationId,
        workspace: WorkspaceId,
        run_id: RunId,
        now: Timestamp,
    ) -> Self {
        Self { ports, organization, workspace, run_id, now, media: Vec::new() }
    }

    /// Binds the request's inputs to the runtime Video Input nodes (rules 1, 2, 6, 7):
    /// each item by its form, its clip window starting inside the media when its length
    /// is known.
    pub(super) async fn inputs(&mut self, nodes: &[RuntimeNode], inputs: Inputs) -> Result<Vec<BoundInput>, RunError> {
        let tiles = tiles(nodes, inputs)?;
        let pages = describe_sites(self.ports.sites, &tiles, self.ports.allow_private_urls).await?;
        let mut bound = Vec::new();
        for (node, items) in tiles {
            for item in items {
                let field = item.field.as_str();
                let (source, duration_ms) = match item.reference.clone() {
                    InputRef::Upload(id) => self.upload(id, field).await?,
                    InputRef::Asset { id, artifact } => self.asset(id, artifact, field).await?,
                    InputRef::Render(id) => self.render(id, field).await?,
                    InputRef::Url(url) | InputRef::Site(url) => self.url(url, &pages, field).await?,
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

    /// `video_ids`: a ready video upload of the organization.
    async fn upload(&mut self, id: UploadId, field: &str) -> Result<Bound, RunError> {
        let (key, version, link, duration) = self.video(id, field).await?;
        Ok((InputSource::Upload { id, key, media: link, version }, duration))
    }

    /// `asset_manager_assets`: an item of the workspace's asset manager, in the file its
    /// artifact asks for (rule 10).
    async fn asset(&mut self, id: AssetItemId, artifact: Artifact, field: &str) -> Result<Bound, RunError> {
        let (organization, workspace) = (self.organization, self.workspace);
        let connection =
            asset_manager::connection_of(self.ports.assets, organization, workspace).await?.ok_or_else(|| {
                RunError::Invalid(format!(
                    "{field}: the agent's workspace {workspace} has no external-asset connection; create one with \
                     POST /asset_connections"
                ))
            })?;
        let item = self.ports.asset_manager.item(organization, &connection, id).await?.ok_or_else(|| {
            RunError::Invalid(format!("{field}: asset {id} was not found in the workspace's asset manager"))
        })?;
        let (chosen, upload) = asset_manager::choose(&item, artifact)
            .map_err(|problem| RunError::Invalid(format!("{field}: {problem}")))?;
        let (key, version, link, duration) = self.video(upload, field).await?;
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
        Ok((source, duration))
    }

    /// `node_render_ids`: an output of one of the organization's runs.
    async fn render(&mut self, id: MediaId, field: &str) -> Result<Bound, RunError> {
        let record = self.ports.runs.get_media(id).await?;
        let record = record
            .filter(|record| record.organization_id == self.organization && record.kind == MediaKind::Render)
            .ok_or_else(|| RunError::Invalid(format!("{field}: render {id} was not found")))?;
        Ok((InputSource::Render { id, key: record.key, version: record.version }, record.duration_ms))
    }

    /// `video_urls` and `youtube_url_inputs`: a site's page read at start (`pages`), or a
    /// file's URL the SSRF guard allows.
    async fn url(
        &mut self,
        url: String,
        pages: &BTreeMap<String, SiteVideoInfo>,
        field: &str,
    ) -> Result<Bound, RunError> {
        let Some(video) = pages.get(&url) else {
            check_target(&url, field, self.ports.allow_private_urls).await?;
            return Ok((InputSource::Url { url }, None));
        };
        let duration = video.duration_ms;
        if let Some(ms) = duration.filter(|ms| *ms > MAX_SITE_VIDEO_MS) {
            return Err(RunError::Invalid(format!(
                "{field}: the video is {} s long; at most 5 hours (18000 s) are accepted",
                ms / 1000
            )));
        }
        Ok((InputSource::Site { url, video: video.clone() }, duration))
    }

    /// A ready video upload of the organization, as a run input: its file, a new signed
    /// link and its length.
    async fn video(
        &mut self,
        id: UploadId,
        field: &str,
    ) -> Result<(String, Option<String>, MediaId, Option<u64>), RunError> {
        let upload = self.ports.uploads.get_upload(self.organization, id).await?;
        let upload = upload.ok_or_else(|| RunError::Invalid(format!("{field}: video {id} was not found")))?;
        if upload.kind != UploadKind::Video {
            return Err(RunError::Invalid(format!("{field}: upload {id} is not a video")));
        }
        let (UploadStatus::Ready, Some(blob)) = (upload.status, upload.blob) else {
            return Err(RunError::Invalid(format!("{field}: video {id} is not ready (finalize the upload first)")));
        };
        let duration = upload.media.as_ref().and_then(|media| media.duration_ms);
        let link = self.link(&blob.key, &blob.version, "video/mp4", duration);
        Ok((blob.key, blob.version, link, duration))
    }

    /// A new signed link to a file the run reads (an input video, or an uploaded sound
    /// or picture a node uses), recorded with the run.
    fn link(&mut self, key: &str, version: &Option<String>, content_type: &str, duration_ms: Option<u64>) -> MediaId {
        let record = MediaRecord {
            id: MediaId::new_v4(),
            organization_id: self.organization,
            run_id: self.run_id,
            kind: MediaKind::Input,
            key: key.to_owned(),
            version: version.clone(),
            content_type: content_type.to_owned(),
            duration_ms,
            created_at: self.now,
        };
        let id = record.id;
        self.media.push(record);
        id
    }

    /// Refuses an AI Avatar node's profile that is unknown, another organization's or
    /// failed. A profile pending or processing is kept: the node's task waits
    /// (`blocked`) until it is ready.
    async fn check_avatar(&self, node: &RuntimeNode, profile: &str) -> Result<(), RunError> {
        let (original, name) = (node.original_node_id, node.type_name());
        let found = match AvatarProfileId::parse(profile) {
            Some(id) => self.ports.avatars.get_avatar(self.organization, id).await?,
            None => None,
        };
        match found {
            None => {
                Err(RunError::Invalid(format!("node {original} ({name}): avatar_profile_id {profile} was not found")))
            }
            Some(found) if found.status == AvatarStatus::Failed => Err(RunError::Invalid(format!(
                "node {original} ({name}): avatar profile {profile} failed ({}); it cannot be used",
                found.status_message.unwrap_or_default()
            ))),
            Some(_) => Ok(()),
        }
    }

    /// The uploads the nodes' parameters name, which must be ready files of the right
    /// kind; each node must have what it needs to run.
    pub(super) async fn node_uploads(
        &mut self,
        nodes: &[RuntimeNode],
    ) -> Result<BTreeMap<UploadId, AssetFile>, RunError> {
        let mut assets = BTreeMap::new();
        for node in nodes {
            let name = node.type_name();
            let original = node.original_node_id;
            match node.settings().check() {
                Ok(()) => {}
                Err(Unready::Needs(param)) => {
                    return Err(RunError::Invalid(format!("node {original} ({name}) needs {param}")))
                }
                Err(Unready::Refused(problem)) => {
                    return Err(RunError::Invalid(format!("node {original} ({name}): {problem}")))
                }
            }
            if let Some(Generation::Avatar { profile, .. }) = node.settings().generation() {
                self.check_avatar(node, &profile).await?;
            }
            let connected = connected_media(nodes, node);
            for UploadUse { param, kind, value } in node.settings().uploads() {
                if let Some(media) = connected.filter(|connectable| connectable.param == param).map(|c| c.media) {
                    if value.is_some() {
                        return Err(RunError::Invalid(format!(
                            "node {original} ({name}): give {param} or a connected {}, not both",
                            media.as_str()
                        )));
                    }
                    continue;
                }
                let Some(text) = value else {
                    return Err(RunError::Invalid(format!("node {original} ({name}) needs {param}")));
                };
                let id = UploadId::parse(&text)
                    .ok_or_else(|| RunError::Invalid(format!("node {original} ({name}): {param} is not a UUID")))?;
                let upload = self.ports.uploads.get_upload(self.organization, id).await?;
                match upload {
                    Some(Upload { kind: found, status: UploadStatus::Ready, blob: Some(blob), .. })
                        if found == kind =>
                    {
                        if assets.contains_key(&id) {
                            continue;
                        }
                        // A link for the timeline project, which points at the run's media.
                        // Sounds and pictures of any format ffprobe reads: served as bytes.
                        let link = self.link(&blob.key, &blob.version, "application/octet-stream", None);
                        assets.insert(id, AssetFile { key: blob.key, version: blob.version, media: Some(link) });
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
                    None => {
                        return Err(RunError::Invalid(format!("node {original} ({name}): {param} {id} was not found")))
                    }
                }
            }
        }
        Ok(assets)
    }
}

/// What `node` takes through a connection from a generation node upstream, if any.
fn connected_media(nodes: &[RuntimeNode], node: &RuntimeNode) -> Option<Connectable> {
    let connectable = node.node_type()?.connectable?;
    let produces = |id: &AgentNodeId| {
        nodes.iter().find(|other| other.agent_node_id == *id).and_then(|other| other.node_type()?.produces)
    };
    node.upstream.iter().any(|id| produces(id) == Some(connectable.media)).then_some(connectable)
}

/// Which items go to which runtime Video Input node: the top-level arrays to the only
/// one, `video_inputs` entries to theirs, one entry per tile.
fn tiles(nodes: &[RuntimeNode], inputs: Inputs) -> Result<Vec<(AgentNodeId, Vec<InputItem>)>, RunError> {
    let video_inputs: Vec<&RuntimeNode> = nodes.iter().filter(|node| node.kind() == Some(NodeKind::Input)).collect();
    let tiles = match inputs {
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
    Ok(tiles)
}

/// A URL the service will connect to must not reach private addresses.
pub(super) async fn check_target(text: &str, field: &str, allow_private: bool) -> Result<(), RunError> {
    let url =
        url::Url::parse(text).map_err(|error| RunError::Invalid(format!("{field} is not a valid URL: {error}")))?;
    crate::core::ssrf::resolve_allowed(&url, allow_private)
        .await
        .map(drop)
        .map_err(|problem| RunError::Invalid(format!("{field}: {problem}")))
}

/// Reads the site pages among the inputs (`youtube_url_inputs`, and `video_urls` of a
/// known site), a few at a time: what the site says of each video, by URL. A page that
/// cannot be read, or has no video, refuses the run.
async fn describe_sites(
    sites: &Sites,
    tiles: &[(AgentNodeId, Vec<InputItem>)],
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
