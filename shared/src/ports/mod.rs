//! The traits the domain needs from the outside world; adapters implement them.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::domain::agents::{Agent, AgentId, AgentQuery, AgentRecord};
use crate::domain::asset_manager::{AssetConnection, AssetConnectionId, AssetItem, AssetItemId};
use crate::domain::idempotency::{KeptAnswer, KeyRecord};
use crate::domain::identity::{ApiKeyRecord, Organization, OrganizationId};
use crate::domain::media::{MediaError, RenderJob};
use crate::domain::runs::{MediaId, MediaRecord, Run, RunId, RunStatus};
use crate::domain::shared_stores::{EntryId, EntryRename, EntryWrite, SharedStore, StoreEntry, StoreError, StoreId};
use crate::domain::time::Timestamp;
use crate::domain::uploads::{ProbeReport, SealedBlob, Upload, UploadId};
use crate::domain::webhooks::{DeliveryId, WebhookDelivery, WebhookMessage, WebhookSecret};
use crate::domain::workspaces::Workspace;

/// The source of "now", replaceable in tests.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Organizations and API keys.
#[async_trait]
pub trait IdentityRepo: Send + Sync {
    /// The key with this SHA-256 hash, if any.
    async fn api_key(&self, key_hash: &str) -> anyhow::Result<Option<ApiKeyRecord>>;
    /// An organization by ID.
    async fn organization(&self, id: OrganizationId) -> anyhow::Result<Option<Organization>>;
    /// The key with this hash and the organization it is bound to (None when it is
    /// unbound or its organization is missing): what authenticating a request reads.
    /// A backend that can read both at once overrides this.
    async fn api_key_with_organization(
        &self,
        key_hash: &str,
    ) -> anyhow::Result<Option<(ApiKeyRecord, Option<Organization>)>> {
        let Some(record) = self.api_key(key_hash).await? else { return Ok(None) };
        let organization = match record.organization_id {
            Some(id) => self.organization(id).await?,
            None => None,
        };
        Ok(Some((record, organization)))
    }
    /// Records that a key was used at `at`.
    async fn touch_api_key(&self, key_hash: &str, at: Timestamp) -> anyhow::Result<()>;
    /// Creates an organization or updates its descriptive fields, keeping its counters
    /// and its original `created_at`.
    async fn upsert_organization(&self, organization: &Organization) -> anyhow::Result<()>;
    /// Creates or rebinds a key.
    async fn upsert_api_key(
        &self,
        key_hash: &str,
        organization: Option<OrganizationId>,
        at: Timestamp,
    ) -> anyhow::Result<()>;
    /// All workspaces of an organization.
    async fn workspaces(&self, organization: OrganizationId) -> anyhow::Result<Vec<Workspace>>;
    /// Creates or renames a workspace (keeping its original `created_at`).
    async fn put_workspace(&self, organization: OrganizationId, workspace: &Workspace) -> anyhow::Result<()>;
}

/// Shared stores and their entries, always addressed through the owning organization.
///
/// Every limit is enforced atomically by the implementation, also under concurrent
/// writers; a missing store (or one of another organization) is `StoreNotFound`. What an
/// entry becomes on a write is the domain's rule ([`EntryWrite::into_entry`],
/// [`EntryRename::apply`]); implementations supply what is stored now.
#[async_trait]
pub trait SharedStoreRepo: Send + Sync {
    /// All stores of the organization, in no particular order.
    async fn list_stores(&self, organization: OrganizationId) -> Result<Vec<SharedStore>, StoreError>;
    /// Adds a store unless the organization already has `max_stores`.
    async fn create_store(
        &self,
        organization: OrganizationId,
        store: &SharedStore,
        max_stores: u32,
    ) -> Result<(), StoreError>;
    /// Sets a store's name and returns the store.
    async fn rename_store(
        &self,
        organization: OrganizationId,
        store: StoreId,
        name: &str,
        now: Timestamp,
    ) -> Result<SharedStore, StoreError>;
    /// Removes a store and all its entries.
    async fn delete_store(&self, organization: OrganizationId, store: StoreId) -> Result<(), StoreError>;
    /// All entries of a store, in no particular order.
    async fn list_entries(&self, organization: OrganizationId, store: StoreId) -> Result<Vec<StoreEntry>, StoreError>;
    /// One entry.
    async fn get_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
    ) -> Result<StoreEntry, StoreError>;
    /// Creates (taking a slot, if fewer than `max_entries` are used) or replaces an entry.
    async fn put_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry: &EntryWrite,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<StoreEntry, StoreError>;
    /// Moves an entry to a new ID (which must be free) with a new display name.
    async fn rename_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
        rename: &EntryRename,
        now: Timestamp,
    ) -> Result<StoreEntry, StoreError>;
    /// Removes an entry, freeing its slot.
    async fn delete_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
    ) -> Result<(), StoreError>;
    /// Upserts entries with distinct IDs; refuses the whole request, writing nothing,
    /// when the new IDs would take the store past `max_entries`.
    async fn upsert_entries(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entries: Vec<EntryWrite>,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError>;
}

/// Agents with their graphs, always addressed through the owning organization.
/// Soft-deleted agents are invisible to every read.
#[async_trait]
pub trait AgentRepo: Send + Sync {
    /// Stores a new agent.
    async fn create_agent(&self, organization: OrganizationId, record: &AgentRecord) -> anyhow::Result<()>;
    /// An agent with its graph and version, unless missing or deleted.
    async fn get_agent(&self, organization: OrganizationId, id: AgentId) -> anyhow::Result<Option<AgentRecord>>;
    /// Agents matching the query, newest first, created before `query.after` when set;
    /// up to `query.limit + 1` of them, so the caller can tell whether a page follows.
    async fn list_agents(&self, organization: OrganizationId, query: &AgentQuery) -> anyhow::Result<Vec<Agent>>;
    /// Replaces an agent (metadata and graph) if it is still at `expected_version` and not
    /// deleted; false when another write came first.
    async fn replace_agent(
        &self,
        organization: OrganizationId,
        record: &AgentRecord,
        expected_version: u64,
    ) -> anyhow::Result<bool>;
    /// Marks an agent deleted; false when it is missing or already deleted.
    async fn delete_agent(&self, organization: OrganizationId, id: AgentId, at: Timestamp) -> anyhow::Result<bool>;
}

/// Upload records (assets once finalized).
#[async_trait]
pub trait UploadRepo: Send + Sync {
    /// Stores a new pending upload.
    async fn put_upload(&self, organization: OrganizationId, upload: &Upload) -> anyhow::Result<()>;
    /// An upload of the organization.
    async fn get_upload(&self, organization: OrganizationId, id: UploadId) -> anyhow::Result<Option<Upload>>;
    /// Records a finalized upload (see [`Upload::finalized`]) if the stored one is still
    /// pending, so that the first finalize wins; returns the upload as stored afterwards,
    /// None when there is no such upload.
    async fn record_finalized(&self, organization: OrganizationId, upload: &Upload) -> anyhow::Result<Option<Upload>>;
}

/// Where media files live: S3, or a local folder served by `serve`.
#[async_trait]
pub trait BlobStore: Send + Sync {
    /// A URL that accepts HTTP PUTs of the object at `key` for `ttl`.
    async fn upload_url(&self, key: &str, ttl: Duration) -> anyhow::Result<String>;
    /// Freezes what was uploaded to `key` so that later PUTs cannot change it and says
    /// where it now is (a new key under `sealed_prefix`, or a pinned version); None when
    /// nothing was uploaded. Two seals never give the same place different contents.
    async fn seal(&self, key: &str, sealed_prefix: &str) -> anyhow::Result<Option<SealedBlob>>;
    /// A path or short-lived URL from which the media toolkit can read a sealed object.
    async fn probe_location(&self, blob: &SealedBlob) -> anyhow::Result<String>;
    /// Stores `bytes` at `key`.
    async fn put(&self, key: &str, bytes: Bytes, content_type: &str) -> anyhow::Result<()>;
    /// A URL that answers HTTP GETs of the object at `key` (of `version`, when given)
    /// for `ttl`.
    async fn download_url(&self, key: &str, version: Option<&str>, ttl: Duration) -> anyhow::Result<String>;
    /// Stores the file at `path` as the object at `key` (streamed, not read into memory).
    async fn put_file(&self, key: &str, path: &std::path::Path, content_type: &str) -> anyhow::Result<()>;
    /// A path or short-lived URL from which the media toolkit can read the object at
    /// `key` (of `version`, when given).
    async fn read_location(&self, key: &str, version: Option<&str>) -> anyhow::Result<String>;
}

/// Which runs a list returns: newest first, `limit + 1` of them (so the caller can tell
/// whether a page follows), all of one organization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunQuery {
    pub agent_id: Option<crate::domain::agents::AgentId>,
    /// Empty: every status.
    pub statuses: Vec<RunStatus>,
    /// `started_at` at or after.
    pub from: Option<Timestamp>,
    /// `started_at` at or before.
    pub to: Option<Timestamp>,
    /// Only runs after this one in the order (started_at descending, then ID descending).
    pub after: Option<(Timestamp, RunId)>,
    pub limit: usize,
}

/// Runs and the media records of the files they made.
#[async_trait]
pub trait RunRepo: Send + Sync {
    /// Stores a new run (version 0), the media records it starts with and the webhook
    /// deliveries of its first events, in one atomic write.
    async fn create_run(&self, run: &Run, media: &[MediaRecord], deliveries: &[WebhookDelivery]) -> anyhow::Result<()>;
    /// A run of the organization.
    async fn get_run(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<Run>>;
    /// Stores `run` if the stored one is still at `run.version - 1`, with new media
    /// records and the webhook deliveries of the change's events, in one atomic write;
    /// false when another writer came first.
    async fn update_run(
        &self,
        run: &Run,
        media: &[MediaRecord],
        deliveries: &[WebhookDelivery],
    ) -> anyhow::Result<bool>;
    /// One page of the organization's runs (see [`RunQuery`]); one query.
    async fn list_runs(&self, organization: OrganizationId, query: &RunQuery) -> anyhow::Result<Vec<Run>>;
    /// A media record by ID (links carry no organization: their signature is the authority).
    async fn get_media(&self, id: MediaId) -> anyhow::Result<Option<MediaRecord>>;
}

/// The message that asks a worker to run one attempt of one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TaskMessage {
    pub organization_id: OrganizationId,
    pub run_id: RunId,
    pub task: usize,
    pub attempt: u32,
}

/// Where task messages go: the durable local task table, or SQS.
#[async_trait]
pub trait TaskQueue: Send + Sync {
    /// Sends the messages (at least once each).
    async fn send(&self, messages: &[TaskMessage]) -> anyhow::Result<()>;
}

/// A message taken from a queue (a task message unless said otherwise), with what
/// settles it.
#[derive(Clone, Debug)]
pub struct Delivery<M = TaskMessage> {
    /// The queue's handle for acknowledging this delivery (row ID, SQS receipt).
    pub handle: String,
    pub message: M,
    /// Times the message was received, this one included.
    pub receives: u32,
}

/// The receiving side of a task queue, for workers that poll it (`serve`).
#[async_trait]
pub trait TaskInbox: Send + Sync {
    /// Takes up to `max` visible messages, hiding each for `lease`; waits a little
    /// (bounded) when there are none, then returns what it has, maybe nothing.
    async fn receive(&self, max: usize, lease: Duration) -> anyhow::Result<Vec<Delivery>>;
    /// Deletes a delivered message: its work is done.
    async fn acknowledge(&self, delivery: &Delivery) -> anyhow::Result<()>;
    /// Makes a delivered message visible again after `delay`.
    async fn retry_later(&self, delivery: &Delivery, delay: Duration) -> anyhow::Result<()>;
}

/// Edits media (ffmpeg).
#[async_trait]
pub trait MediaToolkit: Send + Sync {
    /// Renders `job` to its output file; stops (killing the work) as soon as `cancelled`
    /// becomes true.
    async fn render(&self, job: &RenderJob, cancelled: tokio::sync::watch::Receiver<bool>) -> Result<(), MediaError>;
    /// Writes a JPEG thumbnail of the video at `location` to `output`.
    async fn thumbnail(&self, location: &str, duration_ms: u64, output: &std::path::Path) -> Result<(), MediaError>;
}

/// Why a download failed.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// The URL cannot be used; the text says why (status, size, address).
    #[error("{0}")]
    Refused(String),
    #[error("download failed: {0:#}")]
    Failed(anyhow::Error),
}

/// The refusal of a URL that answers with a web page rather than a media file.
pub const WEB_PAGE_REFUSAL: &str = "the server answered with a web page (text/html), not a video file";

/// Fetches URL inputs.
#[async_trait]
pub trait Downloader: Send + Sync {
    /// Streams `url` into the file `output`, refusing more than `max_bytes`; returns the size.
    async fn download(&self, url: &str, output: &std::path::Path, max_bytes: u64) -> Result<u64, DownloadError>;
}

/// What a video-sharing site says of one of its videos.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteVideo {
    /// The site, as a short lower-case name (`youtube`, `vimeo`; `generic` for a page
    /// that merely embeds a video file).
    pub site: String,
    /// The site's ID of the video.
    pub video_id: String,
    pub title: String,
    /// The video's page, as the site names it.
    pub page_url: String,
    /// The channel (or uploader) that published it, when the site says.
    pub channel_id: Option<String>,
    /// The video's length, when the site says.
    pub duration_ms: Option<u64>,
}

/// Reads and fetches videos of video-sharing sites (yt-dlp).
#[async_trait]
pub trait SiteVideos: Send + Sync {
    /// What the site says of the video at `url`, without fetching the media;
    /// `DownloadError::Refused` when the page cannot be read or has no video.
    async fn describe(&self, url: &str) -> Result<SiteVideo, DownloadError>;
    /// Fetches the video at `url` into the file `output`, refusing more than
    /// `max_bytes`; returns the size.
    async fn download(&self, url: &str, output: &std::path::Path, max_bytes: u64) -> Result<u64, DownloadError>;
}

/// Why a file could not be probed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The file is not media the toolkit can read; the text says why.
    #[error("{0}")]
    Unreadable(String),
    /// The toolkit itself could not run.
    #[error("media probe unavailable: {0:#}")]
    Unavailable(anyhow::Error),
}

/// Reads media properties (ffprobe).
#[async_trait]
pub trait MediaProbe: Send + Sync {
    /// Probes the file at a path or URL.
    async fn probe(&self, location: &str) -> Result<ProbeReport, ProbeError>;
}

/// Webhook deliveries (the delivery log) and organizations' webhook secrets. Deliveries
/// are created with their run's change ([`RunRepo::update_run`]); here they are read,
/// claimed by a sender and updated.
#[async_trait]
pub trait WebhookRepo: Send + Sync {
    /// A delivery by its run and sequence.
    async fn get_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        sequence: u64,
    ) -> anyhow::Result<Option<WebhookDelivery>>;
    /// A delivery by its ID.
    async fn find_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        id: DeliveryId,
    ) -> anyhow::Result<Option<WebhookDelivery>>;
    /// A run's deliveries in sequence order after `after`, up to `limit + 1` of them.
    async fn list_deliveries(
        &self,
        organization: OrganizationId,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> anyhow::Result<Vec<WebhookDelivery>>;
    /// Takes the right to attempt a pending delivery until `until`, under `token`: true
    /// when it is unclaimed, its claim has passed (`now`), or `token` holds it already.
    async fn claim_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        sequence: u64,
        token: &str,
        until: Timestamp,
        now: Timestamp,
    ) -> anyhow::Result<bool>;
    /// Stores an attempted delivery and releases the claim, if `token` still holds it.
    async fn record_delivery(&self, delivery: &WebhookDelivery, token: &str) -> anyhow::Result<bool>;
    /// Stores a delivery made pending again, unless a sender holds a claim on it at `now`.
    async fn redeliver(&self, delivery: &WebhookDelivery, now: Timestamp) -> anyhow::Result<bool>;
    /// The organization's webhook secret.
    async fn webhook_secret(&self, organization: OrganizationId) -> anyhow::Result<Option<WebhookSecret>>;
    /// Sets (or, with None, removes) the organization's webhook secret.
    async fn put_webhook_secret(
        &self,
        organization: OrganizationId,
        secret: Option<&WebhookSecret>,
    ) -> anyhow::Result<()>;
}

/// Where webhook delivery messages go: SQS, or (locally) a wake-up of the senders that
/// read due deliveries from the delivery log itself.
#[async_trait]
pub trait WebhookQueue: Send + Sync {
    /// Asks for the deliveries to be attempted (at least once each).
    async fn send(&self, messages: &[WebhookMessage]) -> anyhow::Result<()>;
}

/// The receiving side of a webhook queue, for senders that poll it (`serve`).
#[async_trait]
pub trait WebhookInbox: Send + Sync {
    /// Takes up to `max` due messages, hiding each for `lease`; waits a little (bounded)
    /// when there are none.
    async fn receive(&self, max: usize, lease: Duration) -> anyhow::Result<Vec<Delivery<WebhookMessage>>>;
    /// The message is done with.
    async fn acknowledge(&self, delivery: &Delivery<WebhookMessage>) -> anyhow::Result<()>;
    /// Shows the message again after `delay`.
    async fn retry_later(&self, delivery: &Delivery<WebhookMessage>, delay: Duration) -> anyhow::Result<()>;
}

/// One webhook POST.
pub struct WebhookPost<'a> {
    pub url: &'a str,
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
    /// Longest wait for the whole answer.
    pub timeout: Duration,
}

/// A receiver's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookAnswer {
    pub status: u16,
    /// The start of its body, lossily decoded.
    pub excerpt: String,
}

/// Posts webhooks: no redirects followed, only to addresses the SSRF guard allows,
/// checked at every connection.
#[async_trait]
pub trait WebhookClient: Send + Sync {
    /// The receiver's answer, or why there was none (timeout, connection, refused address).
    async fn post(&self, post: WebhookPost<'_>) -> Result<WebhookAnswer, String>;
}

/// Organizations' idempotency keys (see [`crate::domain::idempotency`]).
#[async_trait]
pub trait IdempotencyRepo: Send + Sync {
    /// Stores `record` (a claim) unless a record that still holds its key at `now`
    /// ([`KeyRecord::holds`]) is stored for the organization and key: then returns that
    /// one and stores nothing. Atomic: of concurrent claims one is stored.
    async fn claim_key(&self, record: &KeyRecord, now: Timestamp) -> anyhow::Result<Option<KeyRecord>>;
    /// The organization's record of `key`, whatever its state (a consistent read).
    async fn get_key(&self, organization: OrganizationId, key: &str) -> anyhow::Result<Option<KeyRecord>>;
    /// Ends `claim` (a record this process stored with [`Self::claim_key`]): keeps
    /// `answer` for repeats, or (None) releases the key. Does nothing when another claim
    /// took the key over meanwhile (its token differs).
    async fn settle_key(&self, claim: &KeyRecord, answer: Option<&KeptAnswer>) -> anyhow::Result<()>;
}

/// Workspaces' asset-manager connections, and the items of the `local` provider.
#[async_trait]
pub trait AssetRepo: Send + Sync {
    /// Stores a connection; false (nothing stored) when its workspace already has one.
    async fn create_connection(
        &self,
        organization: OrganizationId,
        connection: &AssetConnection,
    ) -> anyhow::Result<bool>;
    /// The organization's connections (one per workspace at most).
    async fn connections(&self, organization: OrganizationId) -> anyhow::Result<Vec<AssetConnection>>;
    async fn put_asset_item(&self, organization: OrganizationId, item: &AssetItem) -> anyhow::Result<()>;
    async fn get_asset_item(
        &self,
        organization: OrganizationId,
        connection: AssetConnectionId,
        id: AssetItemId,
    ) -> anyhow::Result<Option<AssetItem>>;
}

/// An external asset manager: reads the items of a connection.
#[async_trait]
pub trait AssetManager: Send + Sync {
    async fn item(
        &self,
        organization: OrganizationId,
        connection: &AssetConnection,
        id: AssetItemId,
    ) -> anyhow::Result<Option<AssetItem>>;
}
