//! Social posts: an organization connects accounts on social platforms, then posts media
//! with a description to some of them, now, at a later time (`scheduled`), or once
//! someone approves (`pending_approval`). Publishing is a queued task (`processing →
//! posted | partial_failure | failed`) that hands each destination to its publisher
//! ([`publisher::Publisher`]: the sandbox, or YouTube), recording one result per
//! destination; a post read by its ID asks the publishers about destinations they
//! accepted but had not finished.

pub mod limits;
pub mod publisher;
pub mod publishing;
pub mod service;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::time::Timestamp;
use crate::domain::ids::MediaId;
use crate::domain::ids::OrganizationId;
pub use crate::domain::ids::{PostId, SocialConnectionId};
use crate::domain::media::MediaRecord;
use crate::domain::rejection::{DomainError, Rejection};

/// A social platform.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = SocialPlatform)]
pub enum Platform {
    X,
    Linkedin,
    Instagram,
    Facebook,
    Tiktok,
    Youtube,
}

impl Platform {
    /// Every platform, in the contract's order.
    pub const ALL: [Platform; 6] =
        [Self::X, Self::Linkedin, Self::Instagram, Self::Facebook, Self::Tiktok, Self::Youtube];

    /// The contract's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::X => "x",
            Self::Linkedin => "linkedin",
            Self::Instagram => "instagram",
            Self::Facebook => "facebook",
            Self::Tiktok => "tiktok",
            Self::Youtube => "youtube",
        }
    }

    /// The platform of a contract name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|platform| platform.as_str() == text)
    }
}

/// Who publishes a connection's posts: the local sandbox, or YouTube's Data API (for the
/// youtube platform, with `credentials`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = SocialPublisher)]
pub enum PublisherKind {
    // The local sandbox: posts are pages `serve` answers.
    Sandbox,
    // YouTube's Data API v3 (youtube connections only).
    Youtube,
}

impl PublisherKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sandbox => "sandbox",
            Self::Youtube => "youtube",
        }
    }
}

/// What the sandbox does with a connection's posts: post them, refuse them, or accept
/// them and finish when the post is read again (`GET /social/post/{post_id}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxBehavior {
    // Posted at once.
    #[default]
    Succeed,
    // Refused, with a message.
    Fail,
    // Accepted, and `processing` until the post is read once more.
    Async,
}

impl SandboxBehavior {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeed => "succeed",
            Self::Fail => "fail",
            Self::Async => "async",
        }
    }
}

/// A connected account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocialConnection {
    pub id: SocialConnectionId,
    pub organization_id: OrganizationId,
    pub platform: Platform,
    pub account_name: String,
    pub account_username: String,
    pub profile_url: String,
    pub requires_approval: bool,
    pub publisher: PublisherKind,
    pub sandbox_behavior: SandboxBehavior,
    /// Where the publisher's credentials are kept ([`publisher::CredentialVault`]);
    /// never shown.
    pub credentials: Option<String>,
    pub created_at: Timestamp,
}

/// A social post's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = SocialPostStatus)]
pub enum PostStatus {
    Scheduled,
    PendingApproval,
    Processing,
    Posted,
    PartialFailure,
    Failed,
    Rejected,
}

impl PostStatus {
    /// Every status, in the contract's order.
    pub const ALL: [PostStatus; 7] = [
        Self::Scheduled,
        Self::PendingApproval,
        Self::Processing,
        Self::Posted,
        Self::PartialFailure,
        Self::Failed,
        Self::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::PendingApproval => "pending_approval",
            Self::Processing => "processing",
            Self::Posted => "posted",
            Self::PartialFailure => "partial_failure",
            Self::Failed => "failed",
            Self::Rejected => "rejected",
        }
    }

    /// The status of a contract name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

/// A destination's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = DestinationStatus)]
pub enum ResultStatus {
    Success,
    Scheduled,
    Processing,
    Failed,
}

impl ResultStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Scheduled => "scheduled",
            Self::Processing => "processing",
            Self::Failed => "failed",
        }
    }
}

/// A destination of a post: the connection as it was when the post was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    pub connection: SocialConnection,
}

/// What became of one destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationResult {
    pub social_connection_id: SocialConnectionId,
    pub platform: Platform,
    pub status: ResultStatus,
    pub platform_post_id: Option<String>,
    pub post_url: Option<String>,
    pub message: Option<String>,
}

impl DestinationResult {
    /// A new post's result for `destination`, in `status`.
    pub fn new(destination: &Destination, status: ResultStatus) -> Self {
        Self {
            social_connection_id: destination.connection.id,
            platform: destination.connection.platform,
            status,
            platform_post_id: None,
            post_url: None,
            message: None,
        }
    }
}

/// A medium of a post, stored by the service when the post was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostMedium {
    pub key: String,
    pub version: Option<String>,
    pub content_type: String,
    pub bytes: u64,
    /// None for a picture.
    pub duration_ms: Option<u64>,
    pub width: u32,
    pub height: u32,
}

/// A post as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocialPost {
    pub id: PostId,
    pub organization_id: OrganizationId,
    pub status: PostStatus,
    pub description: String,
    pub media: Vec<PostMedium>,
    /// A JPEG of the first medium.
    pub thumbnail: MediaId,
    pub scheduled_at: Timestamp,
    pub destinations: Vec<Destination>,
    /// One per destination, in the same order.
    pub results: Vec<DestinationResult>,
    pub error: Option<String>,
    /// Publishing attempts started (a worker that stopped leaves its attempt behind).
    pub attempts: u32,
    /// While an attempt publishes, its claim holds until then.
    pub publishing_until: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Incremented by every stored change; a write names the version it read.
    pub version: u64,
    /// Media a worker has still to fetch, probe and check (a create that handed them
    /// over); none once they are stored in `media`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_media: Option<PendingMedia>,
}

impl SocialPost {
    /// The platforms it goes to, each once, in the contract's order.
    pub fn platforms(&self) -> Vec<Platform> {
        let mut platforms: Vec<Platform> =
            self.destinations.iter().map(|destination| destination.connection.platform).collect();
        platforms.sort();
        platforms.dedup();
        platforms
    }

    /// The connections it goes to.
    pub fn connection_ids(&self) -> Vec<SocialConnectionId> {
        self.destinations.iter().map(|destination| destination.connection.id).collect()
    }

    /// When the scheduler must act on it: while `scheduled`, its time (publish it);
    /// while `processing` with work left for a worker (destinations not yet handed to
    /// their publisher, or a status never settled), [`REQUEUE_AFTER`] past its last
    /// change or the end of its claim (its message was lost: send it again). Indexed by
    /// both backends.
    pub fn due_at(&self) -> Option<Timestamp> {
        match self.status {
            PostStatus::Scheduled => Some(self.scheduled_at),
            PostStatus::Processing if self.needs_worker() => {
                let since = self.publishing_until.map_or(self.updated_at, |until| until.max(self.updated_at));
                Some(since.after(REQUEUE_AFTER))
            }
            _ => None,
        }
    }

    /// Whether a worker has something left to do: a destination still waits to be
    /// handed to its publisher, or every destination is done and the status was never
    /// settled (a worker stopped between its last two writes). Destinations a publisher
    /// accepted wait for a read of the post instead.
    pub fn needs_worker(&self) -> bool {
        let mut waiting = self.results.iter().filter(|result| result.status == ResultStatus::Processing).peekable();
        waiting.peek().is_none() || waiting.any(|result| result.platform_post_id.is_none())
    }
}

/// How long a post being published may go without a change before the scheduler sends
/// its publishing message again (a process that stopped between a write and its send).
pub const REQUEUE_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// Which posts a list shows (every filter given must hold).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostFilter {
    pub status: Option<PostStatus>,
    pub platform: Option<Platform>,
    pub connection: Option<SocialConnectionId>,
}

impl PostFilter {
    /// Whether `post` is shown.
    pub fn admits(&self, post: &SocialPost) -> bool {
        self.status.is_none_or(|status| post.status == status)
            && self.platform.is_none_or(|platform| post.platforms().contains(&platform))
            && self.connection.is_none_or(|connection| post.connection_ids().contains(&connection))
    }
}

/// A page of posts, newest first, and whether more follow.
pub type PostPage = (Vec<SocialPost>, bool);

/// Most social connections one organization may have at once: each YouTube connection
/// is a Secrets Manager secret of its own, so the count is bounded (delete one to make
/// room).
pub const MAX_CONNECTIONS_PER_ORGANIZATION: u32 = 50;

/// The message of a destination whose connection was deleted before it was published.
pub const CONNECTION_DELETED: &str = "the social connection was deleted before this post was published to it";

/// Latest a post may be scheduled: a year ahead.
pub const MAX_SCHEDULE_AHEAD: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);
/// Largest page of the post list.
pub const MAX_LIMIT: usize = 100;

/// What a connection create asks for, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewConnection {
    pub platform: Platform,
    pub account_name: String,
    pub account_username: String,
    pub profile_url: String,
    pub requires_approval: bool,
    pub publisher: PublisherKind,
    pub sandbox_behavior: SandboxBehavior,
    /// The publisher's credentials as given (YouTube: `{access_token, refresh_token?,
    /// client_id?, client_secret?}`).
    pub credentials: Option<Map<String, Value>>,
}

/// What a post create asks for, checked (its connections and media not yet looked at).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPost {
    pub description: String,
    pub destinations: Vec<SocialConnectionId>,
    pub media_urls: Vec<String>,
    pub scheduled_at: Option<Timestamp>,
}

/// The query of `GET /social/posts`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostQuery {
    pub limit: usize,
    pub cursor: Option<PostId>,
    pub filter: PostFilter,
}

/// The message of a connection not found (or another organization's).
pub const CONNECTION_NOT_FOUND: &str = "Social connection not found";

/// Connections and posts as stored.
#[async_trait]
pub trait SocialRepo: Send + Sync {
    /// Stores a new connection unless its organization has `max` already (false then),
    /// counted atomically with the write, so concurrent creates never pass the cap.
    async fn create_connection(&self, connection: &SocialConnection, max: u32) -> anyhow::Result<bool>;
    /// Replaces a stored connection's record (its credentials' reference); false when it
    /// is gone.
    async fn update_connection(&self, connection: &SocialConnection) -> anyhow::Result<bool>;
    /// Deletes a connection of the organization, freeing its place under the cap; false
    /// when there was none.
    async fn delete_connection(&self, organization: OrganizationId, id: SocialConnectionId) -> anyhow::Result<bool>;
    /// The organization's connections, oldest first.
    async fn list_connections(&self, organization: OrganizationId) -> anyhow::Result<Vec<SocialConnection>>;
    /// A connection of the organization.
    async fn get_connection(
        &self,
        organization: OrganizationId,
        id: SocialConnectionId,
    ) -> anyhow::Result<Option<SocialConnection>>;
    /// Stores a new post (version 0) with the media records of its files.
    async fn create_post(&self, post: &SocialPost, media: &[MediaRecord]) -> anyhow::Result<()>;
    /// A post of the organization.
    async fn get_post(&self, organization: OrganizationId, id: PostId) -> anyhow::Result<Option<SocialPost>>;
    /// Stores `post` if the stored one is still at `post.version - 1`; false when another
    /// writer came first.
    async fn update_post(&self, post: &SocialPost) -> anyhow::Result<bool> {
        self.update_post_with_media(post, &[]).await
    }
    /// As [`SocialRepo::update_post`], recording `media` (a prepared post's thumbnail)
    /// in the same atomic write.
    async fn update_post_with_media(&self, post: &SocialPost, media: &[MediaRecord]) -> anyhow::Result<bool>;
    /// The organization's posts `filter` admits, newest first, after the post `after`
    /// (a cursor), at most `limit`: one paginated query.
    async fn list_posts(
        &self,
        organization: OrganizationId,
        filter: &PostFilter,
        after: Option<PostId>,
        limit: usize,
    ) -> anyhow::Result<PostPage>;
    /// Scheduled posts due at or before `now`, earliest first, at most `limit`, read from
    /// an index of due times (possibly a little stale: the caller claims each with a
    /// conditional write).
    async fn due_posts(&self, now: Timestamp, limit: usize) -> anyhow::Result<Vec<(OrganizationId, PostId)>>;
}

/// A refused request, or a failure of ours.
#[derive(Debug, thiserror::Error)]
pub enum SocialError {
    /// 400, naming the field.
    #[error("{0}")]
    Invalid(String),
    /// 404.
    #[error("{0}")]
    NotFound(&'static str),
    /// 409.
    #[error("{0}")]
    Conflict(String),
    #[error("social storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

impl DomainError for SocialError {
    fn rejection(self) -> Result<Rejection, anyhow::Error> {
        match self {
            SocialError::Invalid(_) => Ok(Rejection::Invalid),
            SocialError::NotFound(_) => Ok(Rejection::NotFound),
            SocialError::Conflict(_) => Ok(Rejection::Conflict),
            SocialError::Backend(cause) => Err(cause),
        }
    }
}

/// The message of a post not found (or another organization's).
pub const POST_NOT_FOUND: &str = "Social post not found";

/// Where a medium of a post comes from: one of the service's own media (a signed link,
/// checked when the post was made), or a URL to download.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaSource {
    Stored(MediaId),
    Url(String),
}

/// The media of a post a worker has still to fetch, probe and check, and what the post
/// becomes once they pass.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingMedia {
    pub sources: Vec<MediaSource>,
    /// A destination requires approval: `pending_approval` then.
    pub approval: bool,
    /// A time ahead it was scheduled at: `scheduled` then.
    pub later: Option<Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: ResultStatus, accepted: bool) -> DestinationResult {
        DestinationResult {
            social_connection_id: SocialConnectionId::new_v4(),
            platform: Platform::X,
            status,
            platform_post_id: accepted.then(|| "p".to_owned()),
            post_url: None,
            message: None,
        }
    }

    #[test]
    fn a_worker_is_needed_until_every_destination_is_handed_over_and_settled() {
        use ResultStatus::{Processing, Success};
        let cases = [
            (vec![result(Processing, false)], true),
            (vec![result(Processing, true)], false),
            (vec![result(Processing, true), result(Processing, false)], true),
            (vec![result(Success, true), result(Processing, true)], false),
            (vec![result(Success, true)], true),
        ];
        for (results, expected) in cases {
            let post = post_with(results);
            assert_eq!(post.needs_worker(), expected, "{:?}", post.results);
        }
    }

    fn post_with(results: Vec<DestinationResult>) -> SocialPost {
        let now = Timestamp::parse("2030-01-01T00:00:00.000Z").unwrap();
        SocialPost {
            id: PostId::new_v4(),
            organization_id: OrganizationId::new_v4(),
            status: PostStatus::Processing,
            description: "d".into(),
            media: Vec::new(),
            thumbnail: MediaId::new_v4(),
            scheduled_at: now,
            destinations: Vec::new(),
            results,
            error: None,
            attempts: 0,
            publishing_until: None,
            created_at: now,
            updated_at: now,
            version: 0,
            pending_media: None,
        }
    }
}
