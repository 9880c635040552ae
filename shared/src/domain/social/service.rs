//! The social operations: connections, and posts made, listed, read with a refresh from
//! the publishers, approved or rejected (publishing them, and the scheduler's
//! [`Social::publish_due`], are `super::publishing`). Every change of a post is a write
//! conditional on the version it read, so two writers never both move a post.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::limits;
use super::publisher::{CredentialVault, Published, Publishers};
use super::{Destination, DestinationResult, PostId, PostMedium, PostPage, PostStatus, ResultStatus};
use super::{
    MediaSource, PendingMedia, PostFilter, CONNECTION_DELETED, CONNECTION_NOT_FOUND, MAX_CONNECTIONS_PER_ORGANIZATION,
};
use super::{NewConnection, NewPost, PostQuery, MAX_LIMIT};
use super::{SocialConnection, SocialConnectionId, SocialError, SocialPost, SocialRepo, POST_NOT_FOUND};
use crate::core::queue::Queue;
use crate::core::retry::POST_CONFLICTS;
use crate::core::versioned::{self, Changed, Edit};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::{MediaId, RunId};
use crate::domain::media::ports::{
    BlobStore, DownloadError, Downloader, MediaProbe, MediaRecords, MediaToolkit, ProbeError,
};
use crate::domain::media::{MediaKind, MediaRecord};
use crate::domain::media::{MediaLinks, MEDIA_PATH_PREFIX};
use crate::domain::time::{Clock, Timestamp};
use crate::domain::work::Work;

/// Largest medium a post takes (what a function's scratch space holds).
pub const MAX_MEDIUM_BYTES: u64 = 512 * 1024 * 1024;
/// Most bytes the media of one post may have in all (the scratch space of the function
/// that takes them: 2 GB, with room for the thumbnail's work).
pub const MAX_POST_BYTES: u64 = 1536 * 1024 * 1024;
/// Longest a create works on its media itself (fetch, probe, checks, storing, the
/// thumbnail) before it hands them to a worker and answers `processing`: far inside API
/// Gateway's 29 s, whatever the media's size or their servers' speed.
pub const INLINE_MEDIA_BUDGET: Duration = Duration::from_secs(8);
/// Longest a read's refresh may wait for a platform (then the post is shown as stored).
const REFRESH_BUDGET: Duration = Duration::from_secs(5);
/// Pages of pending posts per status a connection's delete fails at most.
const DELETE_PAGES: usize = 20;
/// Longest a connection's delete fails its pending posts (after the connection is gone).
pub const DELETE_BUDGET: Duration = Duration::from_secs(8);
/// Posts a connection's delete fails at once.
const DELETE_CONCURRENCY: usize = 8;

/// The ports the social operations borrow, as every context borrows its own: the wiring
/// owns the adapters and lends them for one request, task or tick.
#[derive(Clone, Copy)]
pub struct Social<'a> {
    pub repo: &'a dyn SocialRepo,
    /// Media records: the service's own links among `media_urls` are read from the store.
    pub media: &'a dyn MediaRecords,
    pub blobs: &'a dyn BlobStore,
    pub probe: &'a dyn MediaProbe,
    pub toolkit: &'a dyn MediaToolkit,
    /// Fetches `media_urls` through the SSRF guard.
    pub downloader: &'a dyn Downloader,
    pub publishers: &'a Publishers,
    pub vault: &'a dyn CredentialVault,
    /// Where publishing is queued (the node-task queue).
    pub queue: &'a dyn Queue<Work>,
    pub clock: &'a dyn Clock,
    /// Folder for scratch files (a folder per operation inside it).
    pub scratch: &'a Path,
    /// How long a publishing attempt's claim holds.
    pub lease: Duration,
    /// How long a create works on its media before a worker takes them over
    /// ([`INLINE_MEDIA_BUDGET`] unless a test asks for less).
    pub inline_media: Duration,
    /// How long a connection's delete fails its pending posts ([`DELETE_BUDGET`]
    /// unless a test asks for less).
    pub delete_budget: Duration,
}

/// The status of a post whose media passed, and of its destinations: waiting for
/// approval, for its time, or publishing now.
pub(super) fn waiting_status(approval: bool, later: Option<Timestamp>) -> (PostStatus, ResultStatus) {
    match (approval, later) {
        (true, _) => (PostStatus::PendingApproval, ResultStatus::Scheduled),
        (false, Some(_)) => (PostStatus::Scheduled, ResultStatus::Scheduled),
        (false, None) => (PostStatus::Processing, ResultStatus::Processing),
    }
}

/// What a change makes of the post it read.
pub(super) enum PostEdit {
    Write,
    Keep,
    Refuse(SocialError),
}

/// A medium fetched for a new post: its local file and what it is.
struct Fetched {
    path: PathBuf,
    bytes: u64,
    /// The stored file, when the URL was one of the service's own links.
    stored: Option<(String, Option<String>)>,
}

impl Social<'_> {
    /// Connects an account; its credentials go to the vault.
    pub async fn create_connection(
        &self,
        organization: OrganizationId,
        new: NewConnection,
    ) -> Result<SocialConnection, SocialError> {
        let now = self.clock.now();
        // In-process monotonic: connections made in one millisecond list in their order.
        let id = SocialConnectionId::now_v7();
        let credentials = match &new.credentials {
            Some(fields) => Some(self.vault.put(&format!("{organization}/{id}"), fields).await?),
            None => None,
        };
        let connection = SocialConnection {
            id,
            organization_id: organization,
            platform: new.platform,
            account_name: new.account_name,
            account_username: new.account_username,
            profile_url: new.profile_url,
            requires_approval: new.requires_approval,
            publisher: new.publisher,
            sandbox_behavior: new.sandbox_behavior,
            credentials,
            created_at: now,
        };
        let stored = self.repo.create_connection(&connection, MAX_CONNECTIONS_PER_ORGANIZATION).await;
        if !matches!(stored, Ok(true)) {
            // Refused or failed: its secret would belong to no connection.
            if let Some(reference) = &connection.credentials {
                if let Err(error) = self.vault.delete(reference).await {
                    tracing::error!(error = %format!("{error:#}"), "the secret of a connection not made was left");
                }
            }
        }
        if !stored? {
            return Err(SocialError::Conflict(format!(
                "this organization has {MAX_CONNECTIONS_PER_ORGANIZATION} social connections, the most it may have; \
                 delete one (DELETE /social/connections/{{id}}) to connect another"
            )));
        }
        tracing::info!(connection = %connection.id, platform = connection.platform.as_str(), "social account connected");
        Ok(connection)
    }

    /// Deletes a connection of the organization (`id` as given): its credentials are
    /// deleted from the vault, then its record, so nothing is published with it from
    /// then on; then its pending posts' destinations to it (`scheduled`,
    /// `pending_approval`, `processing` not yet published) fail with
    /// [`CONNECTION_DELETED`], a few at once, for at most `delete_budget`. A destination
    /// left then fails when it is published (publishing reads the connection first).
    /// A repeat after a failure before the record went finishes the work.
    pub async fn delete_connection(&self, organization: OrganizationId, id: &str) -> Result<(), SocialError> {
        let id = SocialConnectionId::parse(id).ok_or(SocialError::NotFound(CONNECTION_NOT_FOUND))?;
        let connection =
            self.repo.get_connection(organization, id).await?.ok_or(SocialError::NotFound(CONNECTION_NOT_FOUND))?;
        if let Some(reference) = &connection.credentials {
            self.vault.delete(reference).await?;
        }
        self.repo.delete_connection(organization, id).await?;
        let deadline = std::time::Instant::now() + self.delete_budget;
        let (failed, left) = match self.fail_pending_posts(organization, id, deadline).await {
            Ok(counts) => counts,
            Err(error) => {
                // The connection is gone: publishing fails what this did not reach.
                tracing::warn!(connection = %id, error = %error, "pending posts of a deleted connection left to publishing");
                (0, true)
            }
        };
        tracing::info!(connection = %id, failed_posts = failed, left_to_publishing = left, "social connection deleted");
        Ok(())
    }

    /// Fails the destinations to connection `id` of the organization's pending posts
    /// until `deadline`: how many posts changed, and whether some may be left.
    async fn fail_pending_posts(
        &self,
        organization: OrganizationId,
        id: SocialConnectionId,
        deadline: std::time::Instant,
    ) -> Result<(usize, bool), SocialError> {
        let mut failed = 0;
        for status in [PostStatus::Scheduled, PostStatus::PendingApproval, PostStatus::Processing] {
            let filter = PostFilter { status: Some(status), platform: None, connection: Some(id) };
            let mut after = None;
            // Bounded: past DELETE_PAGES pages, publishing fails what is left.
            for _ in 0..DELETE_PAGES {
                if std::time::Instant::now() >= deadline {
                    return Ok((failed, true));
                }
                let (posts, more) = self.repo.list_posts(organization, &filter, after, MAX_LIMIT).await?;
                let mut changed = Vec::with_capacity(posts.len());
                for some in posts.chunks(DELETE_CONCURRENCY) {
                    let each: Vec<_> =
                        some.iter().map(|post| self.fail_destinations_of(organization, post.id, id)).collect();
                    for result in futures::future::join_all(each).await {
                        changed.push(result?);
                    }
                }
                failed += changed.into_iter().filter(|changed| *changed).count();
                match posts.last() {
                    Some(last) if more => after = Some(last.id),
                    _ => break,
                }
            }
        }
        Ok((failed, false))
    }

    /// Fails the unpublished destinations to connection `id` of a post, settling it when
    /// nothing else of it is left to publish; true when it changed.
    async fn fail_destinations_of(
        &self,
        organization: OrganizationId,
        post: PostId,
        id: SocialConnectionId,
    ) -> Result<bool, SocialError> {
        let now = self.clock.now();
        let changed = self
            .change(organization, post, |post| {
                if !fail_connection(post, id, now) {
                    return PostEdit::Keep;
                }
                PostEdit::Write
            })
            .await?;
        Ok(matches!(changed, Changed::Written(_, ())))
    }

    /// The organization's connections, oldest first.
    pub async fn list_connections(&self, organization: OrganizationId) -> Result<Vec<SocialConnection>, SocialError> {
        Ok(self.repo.list_connections(organization).await?)
    }

    /// Makes a post: its connections must be the organization's, its
    /// media are fetched (the service's own links read from the store), probed and checked
    /// against each destination's limits, then stored with a thumbnail. A future
    /// `scheduled_at` makes it `scheduled`, a destination that requires approval
    /// `pending_approval`, otherwise publishing is queued. `links` recognises the
    /// service's own media links. Every refusal stores nothing.
    pub async fn create_post(
        &self,
        organization: OrganizationId,
        new: NewPost,
        links: &MediaLinks,
    ) -> Result<SocialPost, SocialError> {
        let now = self.clock.now();
        let destinations = self.destinations(organization, &new).await?;
        let id = PostId::v7_at(now.unix_millis());
        let sources = media_sources(&new.media_urls, links, now)?;
        let approval = destinations.iter().any(|destination| destination.connection.requires_approval);
        let later = new.scheduled_at.filter(|at| *at > now);
        let thumbnail = MediaId::new_v4();
        let prepared = self.prepare(organization, id, thumbnail, &sources, &destinations, now);
        let (status, result, media, records, pending) = match tokio::time::timeout(self.inline_media, prepared).await {
            Ok(prepared) => {
                let (media, record) = prepared?;
                let (status, result) = waiting_status(approval, later);
                (status, result, media, vec![record], None)
            }
            // Slow or large media: a worker fetches, probes and checks them, so that the
            // answer comes at once; what it finds wrong fails the destinations, saying why.
            Err(_) => {
                tracing::info!(post = %id, "a post's media are prepared by a worker");
                let pending = PendingMedia { sources, approval, later };
                (PostStatus::Processing, ResultStatus::Processing, Vec::new(), Vec::new(), Some(pending))
            }
        };
        let results = destinations.iter().map(|destination| DestinationResult::new(destination, result)).collect();
        let post = SocialPost {
            id,
            organization_id: organization,
            status,
            description: new.description,
            media,
            thumbnail,
            scheduled_at: later.unwrap_or(now),
            destinations,
            results,
            error: None,
            attempts: 0,
            publishing_until: None,
            created_at: now,
            updated_at: now,
            version: 0,
            pending_media: pending,
        };
        self.repo.create_post(&post, &records).await?;
        tracing::info!(post = %post.id, status = post.status.as_str(), "social post created");
        if post.status == PostStatus::Processing {
            return self.queue_publishing(post).await;
        }
        Ok(post)
    }

    /// The connections a new post names, each checked against its platform's limits on
    /// the description.
    async fn destinations(&self, organization: OrganizationId, new: &NewPost) -> Result<Vec<Destination>, SocialError> {
        let mut destinations = Vec::with_capacity(new.destinations.len());
        for (index, id) in new.destinations.iter().enumerate() {
            let connection = self.repo.get_connection(organization, *id).await?.ok_or_else(|| {
                SocialError::Invalid(format!(
                    "destinations[{index}].social_connection_id: social connection {id} was not found in this \
                     organization"
                ))
            })?;
            check_description(&new.description, connection.platform)?;
            destinations.push(Destination { connection });
        }
        Ok(destinations)
    }

    /// Fetches a post's media (the service's own from the store), probes them, checks
    /// them against every destination's limits, stores them and makes the thumbnail
    /// (media record `thumbnail`). A refusal (`Invalid`) names the medium and the limit;
    /// nothing is recorded in the database.
    pub(super) async fn prepare(
        &self,
        organization: OrganizationId,
        id: PostId,
        thumbnail: MediaId,
        sources: &[MediaSource],
        destinations: &[Destination],
        now: Timestamp,
    ) -> Result<(Vec<PostMedium>, MediaRecord), SocialError> {
        tokio::fs::create_dir_all(self.scratch).await.map_err(anyhow::Error::from)?;
        let scratch = tempfile::Builder::new().prefix("post-").tempdir_in(self.scratch).map_err(anyhow::Error::from)?;
        let mut media = Vec::with_capacity(sources.len());
        let mut files = Vec::with_capacity(sources.len());
        let mut total: u64 = 0;
        for (index, source) in sources.iter().enumerate() {
            let field = format!("media_urls[{index}]");
            let fetched = self.fetch(organization, source, &field, &scratch.path().join(format!("{index}"))).await?;
            total = total.saturating_add(fetched.bytes);
            if total > MAX_POST_BYTES {
                return Err(SocialError::Invalid(format!(
                    "{field}: the post's media are over {} MB in all",
                    MAX_POST_BYTES / (1024 * 1024)
                )));
            }
            let medium = self.examine(&fetched, &field).await?;
            for destination in destinations {
                limits::check_medium(destination.connection.platform, &medium, &field).map_err(SocialError::Invalid)?;
            }
            media.push(medium);
            files.push(fetched);
        }
        let Some(first) = files.first() else {
            return Err(SocialError::Invalid("media_urls must name 1 to 10 media".into()));
        };
        // Every check passed: store the media and the thumbnail.
        for (index, (medium, fetched)) in media.iter_mut().zip(&files).enumerate() {
            match &fetched.stored {
                Some((key, version)) => (medium.key, medium.version) = (key.clone(), version.clone()),
                None => {
                    medium.key = format!("social/{organization}/{id}/{index}");
                    self.blobs.put_file(&medium.key, &fetched.path, &medium.content_type).await?;
                }
            }
        }
        let record = self.thumbnail((organization, id, thumbnail), &first.path, &media[0], scratch.path(), now).await?;
        Ok((media, record))
    }

    /// Fetches a medium into `path`: the service's own from the store, anything else
    /// through the SSRF-guarded downloader.
    async fn fetch(
        &self,
        organization: OrganizationId,
        source: &MediaSource,
        field: &str,
        path: &Path,
    ) -> Result<Fetched, SocialError> {
        let url = match source {
            MediaSource::Url(url) => url,
            MediaSource::Stored(id) => {
                let id = *id;
                let record = self.media.get_media(id).await?;
                let record = record
                    .filter(|record| record.organization_id == organization)
                    .ok_or_else(|| SocialError::Invalid(format!("{field}: media {id} was not found")))?;
                let location = self.blobs.read_location(&record.key, record.version.as_deref()).await?;
                let path = if let Some(local) = local_file(&location) {
                    local
                } else {
                    self.downloader
                        .download(&location, path, MAX_MEDIUM_BYTES)
                        .await
                        .map_err(|error| SocialError::Backend(anyhow::anyhow!("reading stored media {id}: {error}")))?;
                    path.to_path_buf()
                };
                let bytes = tokio::fs::metadata(&path).await.map_err(anyhow::Error::from)?.len();
                return Ok(Fetched { path, bytes, stored: Some((record.key, record.version)) });
            }
        };
        let bytes = match self.downloader.download(url, path, MAX_MEDIUM_BYTES).await {
            Ok(bytes) => bytes,
            Err(DownloadError::Refused(problem)) => return Err(SocialError::Invalid(format!("{field}: {problem}"))),
            Err(DownloadError::Failed(error)) => {
                return Err(SocialError::Invalid(format!("{field} could not be downloaded: {error:#}")))
            }
        };
        Ok(Fetched { path: path.to_path_buf(), bytes, stored: None })
    }

    /// Probes a fetched medium: a video (with its length) or a picture, and its size.
    async fn examine(&self, fetched: &Fetched, field: &str) -> Result<PostMedium, SocialError> {
        let location = fetched.path.to_string_lossy();
        let report = match self.probe.probe(&location).await {
            Ok(report) => report,
            Err(ProbeError::Unreadable(problem)) => {
                return Err(SocialError::Invalid(format!("{field} is not a video or picture: {problem}")))
            }
            Err(ProbeError::Unavailable(error)) => return Err(SocialError::Backend(error)),
        };
        let picture = report.streams.iter().find(|stream| stream.codec_type == "video");
        let (Some(width), Some(height)) = (picture.and_then(|s| s.width), picture.and_then(|s| s.height)) else {
            return Err(SocialError::Invalid(format!("{field} has no picture: a post's media are videos or pictures")));
        };
        let format = report.format_name.as_str();
        let still = format.ends_with("_pipe") || format == "image2" || picture.is_some_and(|s| s.attached_pic);
        let (content_type, duration_ms) = if still {
            // By the picture's codec: a file named `.jpg` probes as `image2`.
            let content_type = match picture.map(|stream| stream.codec_name.as_str()) {
                Some("png") => "image/png",
                Some("mjpeg" | "jpeg") => "image/jpeg",
                Some("webp") => "image/webp",
                _ => return Err(SocialError::Invalid(format!("{field}: pictures must be PNG, JPEG or WebP"))),
            };
            (content_type, None)
        } else {
            let seconds = report.duration_seconds.filter(|seconds| seconds.is_finite() && *seconds > 0.0);
            let Some(seconds) = seconds else {
                return Err(SocialError::Invalid(format!("{field}: the video's length could not be read")));
            };
            let content_type = if format.contains("mp4") || format.contains("mov") {
                "video/mp4"
            } else if format.contains("webm") {
                "video/webm"
            } else {
                return Err(SocialError::Invalid(format!("{field}: videos must be MP4, MOV or WebM, got {format}")));
            };
            (content_type, Some((seconds * 1000.0).round() as u64))
        };
        Ok(PostMedium {
            key: String::new(),
            version: None,
            content_type: content_type.to_owned(),
            bytes: fetched.bytes,
            duration_ms,
            width,
            height,
        })
    }

    /// A JPEG of the first medium (record `id` of `post`), stored with its media record.
    async fn thumbnail(
        &self,
        (organization, post, id): (OrganizationId, PostId, MediaId),
        source: &Path,
        medium: &PostMedium,
        scratch: &Path,
        now: Timestamp,
    ) -> Result<MediaRecord, SocialError> {
        let output = scratch.join("thumbnail.jpg");
        let location = source.to_string_lossy();
        self.toolkit
            .thumbnail(&location, medium.duration_ms.unwrap_or(0), &output)
            .await
            .map_err(|error| SocialError::Backend(anyhow::anyhow!("making the post's thumbnail: {error}")))?;
        if !tokio::fs::try_exists(&output).await.unwrap_or(false) {
            return Err(SocialError::Invalid(
                "media_urls[0]: no picture could be taken from the first medium for the thumbnail".into(),
            ));
        }
        let key = format!("social/{organization}/{post}/thumbnail.jpg");
        self.blobs.put_file(&key, &output, "image/jpeg").await?;
        Ok(MediaRecord {
            id,
            organization_id: organization,
            run_id: RunId::from_uuid(post.as_uuid()),
            kind: MediaKind::Thumbnail,
            key,
            version: None,
            content_type: "image/jpeg".into(),
            duration_ms: None,
            created_at: now,
        })
    }

    /// Sends the publishing message of a post now `processing`. A message that cannot be
    /// sent is sent again by the scheduler's repair of posts left `processing`.
    pub(super) async fn queue_publishing(&self, post: SocialPost) -> Result<SocialPost, SocialError> {
        let message = Work::PublishPost { organization_id: post.organization_id, post_id: post.id };
        if let Err(error) = self.queue.send(&[message]).await {
            // Stored `processing` and due for the scheduler's repair: its tick sends the
            // message again once the post has waited `REQUEUE_AFTER`. Nothing is lost.
            tracing::error!(
                post = %post.id,
                error = %format!("{error:#}"),
                "social post publishing could not be queued; the scheduler sends it again"
            );
        }
        Ok(post)
    }

    /// A page of the organization's posts as stored (no refresh), newest first, and
    /// whether more follow.
    pub async fn list_posts(&self, organization: OrganizationId, query: &PostQuery) -> Result<PostPage, SocialError> {
        Ok(self.repo.list_posts(organization, &query.filter, query.cursor, query.limit).await?)
    }

    /// A post of the organization by its ID as given, refreshed first from the publishers
    /// of destinations they accepted but had not finished.
    pub async fn get_post(&self, organization: OrganizationId, id: &str) -> Result<SocialPost, SocialError> {
        let id = PostId::parse(id).ok_or(SocialError::NotFound(POST_NOT_FOUND))?;
        let post = self.repo.get_post(organization, id).await?.ok_or(SocialError::NotFound(POST_NOT_FOUND))?;
        let accepted: Vec<(usize, String)> = post
            .results
            .iter()
            .enumerate()
            .filter(|(_, result)| result.status == ResultStatus::Processing)
            .filter_map(|(index, result)| Some((index, result.platform_post_id.clone()?)))
            .collect();
        if post.status != PostStatus::Processing || accepted.is_empty() {
            return Ok(post);
        }
        let answers = self.ask_destinations(&post, accepted).await;
        if answers.is_empty() {
            return Ok(post);
        }
        let now = self.clock.now();
        let changed = self
            .change(organization, id, |stored| {
                let mut moved = false;
                for (index, platform_post_id, answer) in &answers {
                    let Some(result) = stored.results.get_mut(*index) else { continue };
                    if result.status == ResultStatus::Processing
                        && result.platform_post_id.as_deref() == Some(platform_post_id.as_str())
                    {
                        record(result, answer.clone());
                        moved = true;
                    }
                }
                if !moved {
                    return PostEdit::Keep;
                }
                if stored.publishing_until.is_none_or(|until| until <= now) {
                    settle(stored, now);
                }
                stored.updated_at = now;
                PostEdit::Write
            })
            .await?;
        match changed {
            Changed::Written(post, ()) | Changed::Kept(post) => Ok(post),
            Changed::Missing => Err(SocialError::NotFound(POST_NOT_FOUND)),
        }
    }

    /// Asks the platforms of `accepted` destinations (index, platform post ID) where
    /// their posts stand: every destination at once, all within one wait of
    /// REFRESH_BUDGET (not one per destination), so that a read answers inside API
    /// Gateway's 29 s however many destinations it has; a platform slow to say is asked
    /// again at the next read. The answers that moved on from accepted.
    async fn ask_destinations(
        &self,
        post: &SocialPost,
        accepted: Vec<(usize, String)>,
    ) -> Vec<(usize, String, Published)> {
        let mut asking: futures::stream::FuturesUnordered<_> = accepted
            .into_iter()
            .map(|(index, platform_post_id)| async move {
                let connection = &post.destinations[index].connection;
                // The credentials as kept now (a refreshed token replaces the one the post
                // was made with).
                let credentials = self.current_credentials(post.organization_id, connection).await;
                let answer = match credentials {
                    Ok(credentials) => {
                        self.publishers
                            .of(connection.publisher)
                            .status(post, connection, credentials.as_ref(), &platform_post_id)
                            .await
                    }
                    Err(error) => Err(error),
                };
                (index, platform_post_id, answer)
            })
            .collect();
        let deadline = tokio::time::Instant::now() + REFRESH_BUDGET;
        let mut answers = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut asking)).await {
                Ok(Some((index, platform_post_id, answer))) => match answer {
                    Ok(Published::Accepted { .. }) => {}
                    Ok(answer) => answers.push((index, platform_post_id, answer)),
                    // The platform could not say: the destination is shown as stored.
                    Err(error) => {
                        tracing::warn!(post = %post.id, error = %format!("{error:#}"), "a publisher could not be asked")
                    }
                },
                Ok(None) => break,
                Err(_) => {
                    tracing::warn!(post = %post.id, waiting = asking.len(), "publishers did not answer within {REFRESH_BUDGET:?}");
                    break;
                }
            }
        }
        answers
    }

    /// Approves a post `pending_approval`: it is published now (or `scheduled` until its
    /// time). 409 for a post in any other status.
    pub async fn approve(&self, organization: OrganizationId, id: &str) -> Result<SocialPost, SocialError> {
        let id = PostId::parse(id).ok_or(SocialError::NotFound(POST_NOT_FOUND))?;
        let now = self.clock.now();
        let changed = self
            .change(organization, id, |post| {
                if post.status != PostStatus::PendingApproval {
                    return PostEdit::Refuse(not_pending(post));
                }
                let later = post.scheduled_at > now;
                post.status = if later { PostStatus::Scheduled } else { PostStatus::Processing };
                // A destination failed already (its connection deleted) stays failed.
                for result in post.results.iter_mut().filter(|result| result.status != ResultStatus::Failed) {
                    result.status = if later { ResultStatus::Scheduled } else { ResultStatus::Processing };
                }
                post.updated_at = now;
                PostEdit::Write
            })
            .await?;
        match changed {
            Changed::Written(post, ()) if post.status == PostStatus::Processing => self.queue_publishing(post).await,
            Changed::Written(post, ()) | Changed::Kept(post) => Ok(post),
            Changed::Missing => Err(SocialError::NotFound(POST_NOT_FOUND)),
        }
    }

    /// Rejects a post `pending_approval`: it is never published. 409 for a post in any
    /// other status.
    pub async fn reject(&self, organization: OrganizationId, id: &str) -> Result<SocialPost, SocialError> {
        let id = PostId::parse(id).ok_or(SocialError::NotFound(POST_NOT_FOUND))?;
        let now = self.clock.now();
        let changed = self
            .change(organization, id, |post| {
                if post.status != PostStatus::PendingApproval {
                    return PostEdit::Refuse(not_pending(post));
                }
                post.status = PostStatus::Rejected;
                for result in &mut post.results {
                    result.status = ResultStatus::Failed;
                    result.message = Some("the post was rejected".into());
                }
                post.error = Some("the post was rejected before it was published".into());
                post.updated_at = now;
                PostEdit::Write
            })
            .await?;
        match changed {
            Changed::Written(post, ()) | Changed::Kept(post) => Ok(post),
            Changed::Missing => Err(SocialError::NotFound(POST_NOT_FOUND)),
        }
    }

    /// A connection's credentials, read from the vault.
    pub(super) async fn credentials(
        &self,
        connection: &SocialConnection,
    ) -> anyhow::Result<Option<Map<String, Value>>> {
        match &connection.credentials {
            Some(reference) => Ok(Some(self.vault.get(reference).await?)),
            None => Ok(None),
        }
    }

    /// The credentials of a connection as stored now; an error when it was deleted.
    async fn current_credentials(
        &self,
        organization: OrganizationId,
        connection: &SocialConnection,
    ) -> anyhow::Result<Option<Map<String, Value>>> {
        let current = self.repo.get_connection(organization, connection.id).await?;
        let current = current.ok_or_else(|| anyhow::anyhow!("social connection {} was deleted", connection.id))?;
        self.credentials(&current).await
    }

    /// Reads a post, lets `apply` change it, and writes it conditionally on the version
    /// read, again when another writer came first ([`POST_CONFLICTS`]).
    pub(super) async fn change(
        &self,
        organization: OrganizationId,
        id: PostId,
        apply: impl FnMut(&mut SocialPost) -> PostEdit + Send,
    ) -> Result<PostChange, SocialError> {
        self.change_with(organization, id, &[], apply).await
    }

    /// [`Social::change`], recording `media` (a prepared post's thumbnail) with the post.
    pub(super) async fn change_with(
        &self,
        organization: OrganizationId,
        id: PostId,
        media: &[MediaRecord],
        apply: impl FnMut(&mut SocialPost) -> PostEdit + Send,
    ) -> Result<PostChange, SocialError> {
        let mut change = EditPost { repo: self.repo, organization, id, media, apply };
        versioned::change(&POST_CONFLICTS, format!("social post {id}"), &mut change).await
    }
}

/// What a change of a post did: the post as written, or as read when it wrote nothing.
pub(super) type PostChange = Changed<SocialPost, (), SocialPost>;

/// A change of one post, by `apply`.
struct EditPost<'a, F> {
    repo: &'a dyn SocialRepo,
    organization: OrganizationId,
    id: PostId,
    media: &'a [MediaRecord],
    apply: F,
}

#[async_trait]
impl<F: FnMut(&mut SocialPost) -> PostEdit + Send> versioned::Change for EditPost<'_, F> {
    type Record = SocialPost;
    type Write = SocialPost;
    type Landed = ();
    type Kept = SocialPost;
    type Error = SocialError;

    async fn read(&mut self) -> Result<Option<SocialPost>, SocialError> {
        Ok(self.repo.get_post(self.organization, self.id).await?)
    }

    async fn edit(&mut self, mut post: SocialPost) -> Result<Edit<SocialPost, SocialPost>, SocialError> {
        match (self.apply)(&mut post) {
            PostEdit::Keep => Ok(Edit::Keep(post)),
            PostEdit::Refuse(error) => Err(error),
            PostEdit::Write => {
                post.version += 1;
                Ok(Edit::Write(post))
            }
        }
    }

    async fn write(&mut self, post: &mut SocialPost) -> Result<Option<()>, SocialError> {
        Ok(self.repo.update_post_with_media(post, self.media).await?.then_some(()))
    }
}

/// Refuses a description longer than `platform` takes (YouTube also counts its bytes
/// and refuses angle brackets in it).
fn check_description(description: &str, platform: super::Platform) -> Result<(), SocialError> {
    let most = limits::of(platform).description_chars;
    let chars = description.chars().count();
    if chars > most {
        return Err(SocialError::Invalid(format!(
            "description is {chars} characters; {} takes at most {most}",
            platform.as_str()
        )));
    }
    if platform == super::Platform::Youtube {
        let bytes = description.len();
        if bytes > most {
            return Err(SocialError::Invalid(format!(
                "description is {bytes} bytes of UTF-8; youtube takes at most {most}"
            )));
        }
        if description.contains(['<', '>']) {
            return Err(SocialError::Invalid("description: youtube refuses the characters < and >".into()));
        }
    }
    Ok(())
}

/// Where a new post's media come from: the service's own links are checked now (a
/// forged one is the caller's 400), so that a worker preparing the media later needs no
/// request.
fn media_sources(urls: &[String], links: &MediaLinks, now: Timestamp) -> Result<Vec<MediaSource>, SocialError> {
    let mut sources = Vec::with_capacity(urls.len());
    for (index, url) in urls.iter().enumerate() {
        let own = own_media(url, links, now)
            .map_err(|problem| SocialError::Invalid(format!("media_urls[{index}]: {problem}")))?;
        sources.push(match own {
            Some(media) => MediaSource::Stored(media),
            None => MediaSource::Url(url.clone()),
        });
    }
    Ok(sources)
}

/// The file a store's location names, when it is a local one (the local media folder's
/// `file:{path}`, or a path).
pub(super) fn local_file(location: &str) -> Option<PathBuf> {
    let path = PathBuf::from(location.strip_prefix("file:").unwrap_or(location));
    path.is_file().then_some(path)
}

/// Fails `post`'s destinations to connection `id` that are not published yet (a
/// deleted connection), and settles the post when nothing of it is left to publish and
/// no attempt holds it (an attempt settles it at its end); true when it changed.
pub(super) fn fail_connection(post: &mut SocialPost, id: SocialConnectionId, now: Timestamp) -> bool {
    let mut changed = false;
    for (result, destination) in post.results.iter_mut().zip(&post.destinations) {
        let open = matches!(result.status, ResultStatus::Scheduled | ResultStatus::Processing);
        if destination.connection.id == id && open {
            result.status = ResultStatus::Failed;
            result.message = Some(CONNECTION_DELETED.to_owned());
            changed = true;
        }
    }
    if !changed {
        return false;
    }
    post.updated_at = now;
    let open =
        post.results.iter().any(|result| matches!(result.status, ResultStatus::Scheduled | ResultStatus::Processing));
    if !open && post.publishing_until.is_none_or(|until| until <= now) {
        settle(post, now);
    }
    true
}

/// The 409 of approving or rejecting a post that is not pending.
fn not_pending(post: &SocialPost) -> SocialError {
    SocialError::Conflict(format!("the post is {}, not pending_approval", post.status.as_str()))
}

/// The media ID of one of the service's own signed links (`{public_url}/media/{id}?…`),
/// when `url` is one: Err when it is one whose signature does not hold.
fn own_media(url: &str, links: &MediaLinks, now: Timestamp) -> Result<Option<MediaId>, String> {
    let base = links.public_url();
    let Some(rest) = url.strip_prefix(base).filter(|_| !base.is_empty()) else { return Ok(None) };
    let Some(rest) = rest.strip_prefix(MEDIA_PATH_PREFIX) else { return Ok(None) };
    let (id, query) = rest.split_once('?').unwrap_or((rest, ""));
    let Some(id) = MediaId::parse(id) else { return Ok(None) };
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    let value = |name: &str| pairs.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str()).unwrap_or("");
    links
        .verify(id, value("expires"), value("signature"), now)
        .map_err(|error| format!("media link of media {id} cannot be used: {error}"))?;
    Ok(Some(id))
}

/// Longest message kept of a destination's failure, in characters.
pub const MAX_MESSAGE_CHARS: usize = 2_000;
/// Longest platform post ID or URL kept, in characters.
pub const MAX_REFERENCE_CHARS: usize = 2_048;

/// `text` cut to `max` characters (a platform's answer is stored, so it is bounded).
fn bounded(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        text
    } else {
        text.chars().take(max).collect()
    }
}

/// Records a publisher's answer in a destination's result.
pub(super) fn record(result: &mut DestinationResult, answer: Published) {
    match answer {
        Published::Posted { platform_post_id, post_url } => {
            result.status = ResultStatus::Success;
            result.platform_post_id = Some(bounded(platform_post_id, MAX_REFERENCE_CHARS));
            result.post_url = Some(bounded(post_url, MAX_REFERENCE_CHARS));
            result.message = None;
        }
        Published::Accepted { platform_post_id } => {
            result.status = ResultStatus::Processing;
            result.platform_post_id = Some(bounded(platform_post_id, MAX_REFERENCE_CHARS));
        }
        Published::Failed(message) => {
            result.status = ResultStatus::Failed;
            result.message = Some(bounded(message, MAX_MESSAGE_CHARS));
        }
    }
}

/// The status of a post from its results: `processing` while any destination is;
/// otherwise `posted`, `failed`, or `partial_failure`, with an error naming the failures.
pub(super) fn settle(post: &mut SocialPost, now: Timestamp) {
    post.updated_at = now;
    if post.results.iter().any(|result| result.status == ResultStatus::Processing) {
        post.status = PostStatus::Processing;
        return;
    }
    let failed: Vec<&DestinationResult> =
        post.results.iter().filter(|result| result.status == ResultStatus::Failed).collect();
    post.status = match failed.len() {
        0 => PostStatus::Posted,
        count if count == post.results.len() => PostStatus::Failed,
        _ => PostStatus::PartialFailure,
    };
    post.error = failed.first().map(|first| {
        format!(
            "{} of {} destinations failed; {}: {}",
            failed.len(),
            post.results.len(),
            first.platform.as_str(),
            first.message.as_deref().unwrap_or("no reason given")
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_connection_fails_only_its_open_destinations() {
        use crate::domain::social::{Platform, PublisherKind, SandboxBehavior};
        let now = Timestamp::parse("2030-01-01T00:00:00.000Z").unwrap();
        let organization = OrganizationId::new_v4();
        let connection = |platform| SocialConnection {
            id: SocialConnectionId::new_v4(),
            organization_id: organization,
            platform,
            account_name: "a".into(),
            account_username: "a".into(),
            profile_url: "https://a.test".into(),
            requires_approval: false,
            publisher: PublisherKind::Sandbox,
            sandbox_behavior: SandboxBehavior::Succeed,
            credentials: None,
            created_at: now,
        };
        let (gone, kept) = (connection(Platform::X), connection(Platform::Tiktok));
        let result = |connection: &SocialConnection| DestinationResult {
            social_connection_id: connection.id,
            platform: connection.platform,
            status: ResultStatus::Scheduled,
            platform_post_id: None,
            post_url: None,
            message: None,
        };
        let mut post = SocialPost {
            id: PostId::new_v4(),
            organization_id: organization,
            status: PostStatus::Scheduled,
            description: "d".into(),
            media: Vec::new(),
            thumbnail: MediaId::new_v4(),
            scheduled_at: now,
            destinations: vec![Destination { connection: gone.clone() }, Destination { connection: kept.clone() }],
            results: vec![result(&gone), result(&kept)],
            error: None,
            attempts: 0,
            publishing_until: None,
            created_at: now,
            updated_at: now,
            version: 0,
            pending_media: None,
        };
        assert!(fail_connection(&mut post, gone.id, now));
        assert_eq!((post.status, post.results[0].status), (PostStatus::Scheduled, ResultStatus::Failed));
        assert_eq!(post.results[1].status, ResultStatus::Scheduled);
        assert!(!fail_connection(&mut post, gone.id, now), "done once");
        assert!(fail_connection(&mut post, kept.id, now));
        assert_eq!(post.status, PostStatus::Failed, "nothing left to publish");
        assert!(post.error.as_deref().is_some_and(|error| error.contains(CONNECTION_DELETED)));
    }

    #[test]
    fn own_links_are_recognised_and_checked() {
        let links = MediaLinks::new(b"secret", "https://api.test");
        let now = Timestamp::parse("2030-01-01T00:00:00.000Z").unwrap();
        let id = MediaId::new_v4();
        let link = links.link(id, now);
        assert_eq!(own_media(&link, &links, now), Ok(Some(id)));
        assert_eq!(own_media("https://cdn.test/media/x.mp4", &links, now), Ok(None));
        let forged = link.replace("signature=", "signature=0");
        assert!(own_media(&forged, &links, now).is_err());
    }
}

#[cfg(test)]
mod answers_tests {
    use super::*;
    use crate::domain::ids::SocialConnectionId;

    #[test]
    fn a_platforms_answers_are_kept_bounded() {
        let mut result = DestinationResult {
            social_connection_id: SocialConnectionId::new_v4(),
            platform: super::super::Platform::Youtube,
            status: ResultStatus::Processing,
            platform_post_id: None,
            post_url: None,
            message: None,
        };
        record(&mut result, Published::Failed("é".repeat(5_000)));
        assert_eq!(result.message.as_ref().map(|message| message.chars().count()), Some(MAX_MESSAGE_CHARS));
        record(&mut result, Published::Posted { platform_post_id: "v".into(), post_url: "u".repeat(3_000) });
        assert_eq!((result.status, result.post_url.map(|url| url.len())), (ResultStatus::Success, Some(2_048)));
    }
}
