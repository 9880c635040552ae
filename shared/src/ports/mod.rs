//! The traits the domain needs from the outside world; adapters implement them.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::domain::agents::{Agent, AgentId, AgentQuery, AgentRecord};
use crate::domain::identity::{ApiKeyRecord, Organization, OrganizationId};
use crate::domain::shared_stores::{EntryId, EntryRename, EntryWrite, SharedStore, StoreEntry, StoreError, StoreId};
use crate::domain::time::Timestamp;
use crate::domain::uploads::{ProbeReport, SealedBlob, Upload, UploadId};
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
    /// A URL that answers HTTP GETs of the object at `key` for `ttl`.
    async fn download_url(&self, key: &str, ttl: Duration) -> anyhow::Result<String>;
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
