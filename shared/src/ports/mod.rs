//! The traits the domain needs from the outside world; adapters implement them.

use async_trait::async_trait;
use uuid::Uuid;

use crate::domain::identity::{ApiKeyRecord, Organization};
use crate::domain::shared_stores::{EntryRename, EntryWrite, SharedStore, StoreEntry, StoreError};
use crate::domain::time::Timestamp;

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
    async fn organization(&self, id: Uuid) -> anyhow::Result<Option<Organization>>;
    /// Records that a key was used at `at`.
    async fn touch_api_key(&self, key_hash: &str, at: Timestamp) -> anyhow::Result<()>;
    /// Creates an organization or updates its descriptive fields, keeping its counters
    /// and its original `created_at`.
    async fn upsert_organization(&self, organization: &Organization) -> anyhow::Result<()>;
    /// Creates or rebinds a key.
    async fn upsert_api_key(&self, key_hash: &str, organization: Option<Uuid>, at: Timestamp) -> anyhow::Result<()>;
}

/// Shared stores and their entries, always addressed through the owning organization.
///
/// Every limit is enforced atomically by the implementation, also under concurrent
/// writers; a missing store (or one of another organization) is `StoreNotFound`.
#[async_trait]
pub trait SharedStoreRepo: Send + Sync {
    /// All stores of the organization, in no particular order.
    async fn list_stores(&self, organization: Uuid) -> Result<Vec<SharedStore>, StoreError>;
    /// Adds a store unless the organization already has `max_stores`.
    async fn create_store(&self, organization: Uuid, store: &SharedStore, max_stores: u32) -> Result<(), StoreError>;
    /// Sets a store's name and returns the store.
    async fn rename_store(
        &self,
        organization: Uuid,
        store: Uuid,
        name: &str,
        now: Timestamp,
    ) -> Result<SharedStore, StoreError>;
    /// Removes a store and all its entries.
    async fn delete_store(&self, organization: Uuid, store: Uuid) -> Result<(), StoreError>;
    /// All entries of a store, in no particular order.
    async fn list_entries(&self, organization: Uuid, store: Uuid) -> Result<Vec<StoreEntry>, StoreError>;
    /// One entry.
    async fn get_entry(&self, organization: Uuid, store: Uuid, entry_id: &str) -> Result<StoreEntry, StoreError>;
    /// Creates (taking a slot, if fewer than `max_entries` are used) or replaces an entry.
    async fn put_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry: &EntryWrite,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<StoreEntry, StoreError>;
    /// Moves an entry to a new ID (which must be free) with a new display name.
    async fn rename_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry_id: &str,
        rename: &EntryRename,
        now: Timestamp,
    ) -> Result<StoreEntry, StoreError>;
    /// Removes an entry, freeing its slot.
    async fn delete_entry(&self, organization: Uuid, store: Uuid, entry_id: &str) -> Result<(), StoreError>;
    /// Upserts entries with distinct IDs; refuses the whole request, writing nothing,
    /// when the new IDs would take the store past `max_entries`.
    async fn upsert_entries(
        &self,
        organization: Uuid,
        store: Uuid,
        entries: &[EntryWrite],
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError>;
}
