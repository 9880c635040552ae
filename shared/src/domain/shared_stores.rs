//! Shared stores and their entries: parsing, limits and the use cases of the contract.

use async_trait::async_trait;
use std::collections::HashMap;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::labels::MAX_LABEL_CHARS;
use super::time::Timestamp;
use crate::domain::ids::OrganizationId;
pub use crate::domain::ids::StoreId;
use crate::domain::time::Clock;

/// Shared stores one organization may have.
pub const MAX_STORES_PER_ORGANIZATION: u32 = 10;
/// Entries one store may hold.
pub const MAX_ENTRIES_PER_STORE: u32 = 10_000;
/// Items one bulk upsert may carry.
pub const MAX_ENTRIES_PER_BULK: usize = 5_000;
/// Largest metadata object, as compact UTF-8 JSON.
pub const MAX_METADATA_BYTES: usize = 256_000;
/// Longest entry ID, in UTF-8 bytes: DynamoDB's limit on a sort key.
pub const MAX_ENTRY_ID_BYTES: usize = 1_024;

/// A shared store as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Store, description = "A shared store.")]
pub struct SharedStore {
    #[schema(value_type = uuid::Uuid)]
    pub id: StoreId,
    pub name: String,
    pub source_type: String,
    #[schema(minimum = 0, maximum = 10000)]
    pub entry_count: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// An entry of a shared store as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Entry, description = "A shared-store entry.")]
pub struct StoreEntry {
    #[schema(value_type = String)]
    pub entry_id: EntryId,
    pub display_name: String,
    #[schema(value_type = serde_json::Map<String, serde_json::Value>)]
    pub metadata: Metadata,
    pub created_at: Timestamp,
}

/// Everything that can go wrong with a shared-store request.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("name is required")]
    NameRequired,
    #[error("entryId and display_name are required")]
    PutFieldsRequired,
    #[error("entry_id and display_name are required")]
    PatchFieldsRequired,
    #[error("entries is required")]
    EntriesRequired,
    #[error("entries must include entry_id and display_name")]
    EntriesIncomplete,
    #[error("metadata must be a JSON object")]
    MetadataNotObject,
    #[error("metadata must be 256 KB or smaller")]
    MetadataTooLarge,
    #[error("A bulk request may contain at most 5000 entries")]
    BulkTooLarge,
    /// Another malformed field; the text names it.
    #[error("{0}")]
    Invalid(String),
    #[error("Shared store not found")]
    StoreNotFound,
    #[error("Shared store entry not found")]
    EntryNotFound,
    #[error("An organization may have at most 10 shared stores")]
    StoreLimitReached,
    #[error("A shared store may have at most 10000 entries")]
    EntryLimitReached,
    #[error("Entry ID already exists in this shared store")]
    EntryIdTaken,
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

/// A property outside a body's declaration is a 400 `{ error }`.
impl crate::core::json::Refusal for StoreError {
    fn unknown_property(message: String) -> Self {
        StoreError::Invalid(message)
    }
}

/// Refuses a label longer than [`MAX_LABEL_CHARS`], naming its field.
fn bounded(field: &str, text: &str) -> Result<(), StoreError> {
    if text.chars().count() > MAX_LABEL_CHARS {
        return Err(StoreError::Invalid(format!("{field} must be at most {MAX_LABEL_CHARS} characters")));
    }
    Ok(())
}

/// A store's display name: a string, non-empty once trimmed, at most 1,000 characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreName(String);

impl StoreName {
    /// Parses the `name` field of a store create or rename.
    pub fn parse(value: Option<&Value>) -> Result<Self, StoreError> {
        match value {
            None | Some(Value::Null) => Err(StoreError::NameRequired),
            Some(Value::String(text)) if text.trim().is_empty() => Err(StoreError::NameRequired),
            Some(Value::String(text)) => {
                bounded("name", text.trim())?;
                Ok(Self(text.trim().to_owned()))
            }
            Some(_) => Err(StoreError::Invalid("name must be a string".into())),
        }
    }

    /// The trimmed name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The caller's label for where a store's data comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceType(String);

impl SourceType {
    /// Parses `source_type`; omitted means `manual` (null is refused, as for `name`).
    /// Any string is a label, the empty one included: the contract sets no minimum.
    pub fn parse(value: Option<&Value>) -> Result<Self, StoreError> {
        match value {
            None => Ok(Self("manual".into())),
            Some(Value::String(text)) => {
                bounded("source_type", text.trim())?;
                Ok(Self(text.trim().to_owned()))
            }
            Some(_) => Err(StoreError::Invalid("source_type must be a string".into())),
        }
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

crate::closed_body! {
    /// `POST /shared-stores`
    #[schema(as = CreateStore)]
    pub struct NewStore -> StoreError {
        /// Non-empty once trimmed; at most 1,000 characters.
        #[schema(value_type = String, min_length = 1, max_length = 1000)]
        name: StoreName = StoreName::parse,
        /// A caller-defined label, possibly empty, kept trimmed; omitted means `manual`
        /// (null is refused).
        #[schema(value_type = String, required = false, max_length = 1000)]
        source_type: SourceType = SourceType::parse,
    }
}

crate::closed_body! {
    /// `PATCH /shared-stores/{store_id}`
    #[schema(as = RenameStore)]
    pub struct StoreRename -> StoreError {
        #[schema(value_type = String, min_length = 1, max_length = 1000)]
        name: StoreName = StoreName::parse,
    }
}

/// A caller-defined entry ID: non-empty, at most [`MAX_ENTRY_ID_BYTES`], kept exactly
/// as sent (no trimming).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct EntryId(String);

/// Why text is not an entry ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryIdError {
    Empty,
    TooLong,
}

impl EntryId {
    /// Parses an ID from a path or a body.
    pub fn parse(text: &str) -> Result<Self, EntryIdError> {
        match text.len() {
            0 => Err(EntryIdError::Empty),
            length if length > MAX_ENTRY_ID_BYTES => Err(EntryIdError::TooLong),
            _ => Ok(Self(text.to_owned())),
        }
    }

    /// An ID read back from storage, where only parsed IDs are ever written.
    pub fn from_storage(text: String) -> Self {
        Self(text)
    }

    /// The ID's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses an entry ID field; an empty one is `missing`, a long one names `field`.
fn entry_id_field(text: &str, field: &str, missing: StoreError) -> Result<EntryId, StoreError> {
    EntryId::parse(text).map_err(|error| match error {
        EntryIdError::Empty => missing,
        EntryIdError::TooLong => StoreError::Invalid(format!("{field} must be at most {MAX_ENTRY_ID_BYTES} bytes")),
    })
}

/// Parses the entry ID of a GET, PATCH or DELETE path: an empty one names no entry.
pub fn parse_path_entry_id(text: &str) -> Result<EntryId, StoreError> {
    entry_id_field(text, "entry_id", StoreError::EntryNotFound)
}

/// The trimmed `display_name` of an entry write; `missing` when it is absent, not a
/// string, or blank; a trimmed text over [`MAX_LABEL_CHARS`] is refused by name.
fn display_name(value: Option<&Value>, missing: StoreError) -> Result<String, StoreError> {
    match value {
        Some(Value::String(text)) if !text.trim().is_empty() => {
            bounded("display_name", text.trim())?;
            Ok(text.trim().to_owned())
        }
        _ => Err(missing),
    }
}

/// The `entry_id` of a body; `missing` when it is absent, not a string, or empty.
fn body_entry_id(value: Option<&Value>, missing: StoreError) -> Result<EntryId, StoreError> {
    match value {
        Some(Value::String(id)) => entry_id_field(id, "entry_id", missing),
        _ => Err(missing),
    }
}

/// An entry's metadata: a JSON object of at most [`MAX_METADATA_BYTES`], held as the
/// compact JSON text that is size-checked, stored and answered, so it is serialized
/// once on the way in and never parsed into a tree on the way out.
#[derive(Clone, Debug)]
pub struct Metadata(Box<RawValue>);

impl Metadata {
    /// Parses `metadata`: omitted or null is `{}`, anything but an object is refused.
    pub fn parse(value: Option<&Value>) -> Result<Self, StoreError> {
        match value {
            None | Some(Value::Null) => Ok(Self::default()),
            Some(Value::Object(map)) => {
                // Serialized straight into a raw value: JSON that serde_json wrote needs
                // no second parse to be known valid.
                let raw = serde_json::value::to_raw_value(map).map_err(anyhow::Error::from)?;
                if raw.get().len() > MAX_METADATA_BYTES {
                    return Err(StoreError::MetadataTooLarge);
                }
                Ok(Self(raw))
            }
            Some(_) => Err(StoreError::MetadataNotObject),
        }
    }

    /// Reads metadata back from the JSON text it was stored as.
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(text.starts_with('{'), "stored metadata is not a JSON object");
        Ok(Self(RawValue::from_string(text.to_owned())?))
    }

    /// Compact JSON text, the form that is stored and size-checked.
    pub fn to_json(&self) -> &str {
        self.0.get()
    }
}

impl Default for Metadata {
    fn default() -> Self {
        Self(RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| unreachable!("{{}} is JSON")))
    }
}

impl PartialEq for Metadata {
    fn eq(&self, other: &Self) -> bool {
        self.to_json() == other.to_json()
    }
}

impl Serialize for Metadata {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// A full entry write: PUT, or one item of a bulk upsert.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryWrite {
    pub entry_id: EntryId,
    pub display_name: String,
    pub metadata: Metadata,
}

crate::closed_body! {
    /// `PUT /shared-stores/{store_id}/entries/{entry_id}`
    #[schema(as = PutEntry)]
    pub struct EntryBody -> StoreError {
        /// Non-empty once trimmed (it is stored trimmed).
        #[schema(min_length = 1, max_length = 1000)]
        display_name: String = |value| display_name(value, StoreError::PutFieldsRequired),
        /// Any JSON object of at most 256,000 bytes; omitted or null is stored as `{}`.
        #[schema(value_type = Option<Map<String, Value>>)]
        metadata: Metadata = Metadata::parse,
    }
}

crate::closed_body! {
    /// One item of a bulk upsert.
    pub struct BulkItem -> StoreError {
        #[schema(value_type = String, min_length = 1, max_length = 1024)]
        entry_id: EntryId = |value| body_entry_id(value, StoreError::EntriesIncomplete),
        #[schema(min_length = 1, max_length = 1000)]
        display_name: String = |value| display_name(value, StoreError::EntriesIncomplete),
        #[schema(value_type = Option<Map<String, Value>>)]
        metadata: Metadata = Metadata::parse,
    }
}

crate::closed_body! {
    /// `POST /shared-stores/{store_id}/entries/bulk`; the last item of an ID wins.
    #[schema(as = Bulk)]
    pub struct BulkBody -> StoreError {
        #[schema(min_items = 1, max_items = 5000)]
        entries: Vec<BulkItem> = bulk_items,
    }
}

/// The items of a bulk: 1 to [`MAX_ENTRIES_PER_BULK`] of them, counted before any is read.
fn bulk_items(value: Option<&Value>) -> Result<Vec<BulkItem>, StoreError> {
    let items = match value {
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => return Err(StoreError::EntriesRequired),
    };
    if items.len() > MAX_ENTRIES_PER_BULK {
        return Err(StoreError::BulkTooLarge);
    }
    items
        .iter()
        .map(|item| match item {
            Value::Object(item) => BulkItem::parse(item),
            _ => Err(StoreError::EntriesIncomplete),
        })
        .collect()
}

impl EntryWrite {
    /// Parses a PUT: the entry ID comes from the path, the rest from the body.
    pub fn parse_put(entry_id: &str, body: &Map<String, Value>) -> Result<Self, StoreError> {
        let EntryBody { display_name, metadata } = EntryBody::parse(body)?;
        let entry_id = entry_id_field(entry_id, "entry_id", StoreError::PutFieldsRequired)?;
        Ok(Self { entry_id, display_name, metadata })
    }

    /// The entry this write leaves behind. Replacing an entry keeps the time it was
    /// first created (`existing_created_at`); a new one is created `now`.
    pub fn into_entry(self, existing_created_at: Option<Timestamp>, now: Timestamp) -> StoreEntry {
        StoreEntry {
            entry_id: self.entry_id,
            display_name: self.display_name,
            metadata: self.metadata,
            created_at: existing_created_at.unwrap_or(now),
        }
    }
}

crate::closed_body! {
    /// `PATCH /shared-stores/{store_id}/entries/{entry_id}`
    #[derive(Clone, Debug, PartialEq)]
    #[schema(as = PatchEntry)]
    pub struct EntryRename -> StoreError {
        /// The entry's new ID.
        #[schema(value_type = String, min_length = 1, max_length = 1024)]
        entry_id: EntryId = |value| body_entry_id(value, StoreError::PatchFieldsRequired),
        #[schema(min_length = 1, max_length = 1000)]
        display_name: String = |value| display_name(value, StoreError::PatchFieldsRequired),
        /// Omitted keeps the current metadata; null replaces it with `{}`.
        #[schema(value_type = Option<Map<String, Value>>)]
        metadata: Option<Metadata> = |value: Option<&Value>| value.map(|value| Metadata::parse(Some(value))).transpose(),
    }
}

impl EntryRename {
    /// The entry a rename of `current` leaves: the new ID and display name, the metadata
    /// replaced only when the PATCH gave some, and the first creation time kept.
    pub fn apply(&self, current: StoreEntry) -> StoreEntry {
        StoreEntry {
            entry_id: self.entry_id.clone(),
            display_name: self.display_name.clone(),
            metadata: self.metadata.clone().unwrap_or(current.metadata),
            created_at: current.created_at,
        }
    }
}

/// Parses a store ID from a path; text that is not a UUID names no store.
pub fn parse_store_id(text: &str) -> Result<StoreId, StoreError> {
    StoreId::parse(text).ok_or(StoreError::StoreNotFound)
}

/// Parses the `entries` list of a bulk upsert, keeping the last occurrence of each ID.
pub fn parse_bulk(body: &Map<String, Value>) -> Result<Vec<EntryWrite>, StoreError> {
    let BulkBody { entries } = BulkBody::parse(body)?;
    let mut writes: Vec<EntryWrite> = Vec::with_capacity(entries.len());
    let mut position: HashMap<EntryId, usize> = HashMap::with_capacity(entries.len());
    for BulkItem { entry_id, display_name, metadata } in entries {
        let write = EntryWrite { entry_id, display_name, metadata };
        match position.get(&write.entry_id) {
            Some(&at) => writes[at] = write,
            None => {
                position.insert(write.entry_id.clone(), writes.len());
                writes.push(write);
            }
        }
    }
    Ok(writes)
}

/// The result of a bulk upsert.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = BulkAnswer, description = "The answer of a bulk upsert.")]
pub struct BulkUpsert {
    pub success: bool,
    /// Unique IDs written.
    #[schema(minimum = 1, maximum = 5000, value_type = u64)]
    pub count: usize,
    pub entries: Vec<StoreEntry>,
}

/// The organization's stores, sorted by name.
pub async fn list_stores(
    repo: &dyn SharedStoreRepo,
    organization: OrganizationId,
) -> Result<Vec<SharedStore>, StoreError> {
    let mut stores = repo.list_stores(organization).await?;
    stores.sort_by(|a, b| a.name.cmp(&b.name).then(a.created_at.cmp(&b.created_at)).then(a.id.cmp(&b.id)));
    Ok(stores)
}

/// Creates a store, unless the organization already has the maximum.
pub async fn create_store(
    repo: &dyn SharedStoreRepo,
    clock: &dyn Clock,
    organization: OrganizationId,
    name: StoreName,
    source_type: SourceType,
) -> Result<SharedStore, StoreError> {
    let now = clock.now();
    let store = SharedStore {
        id: StoreId::new_v4(),
        name: name.0,
        source_type: source_type.0,
        entry_count: 0,
        created_at: now,
        updated_at: now,
    };
    repo.create_store(organization, &store, MAX_STORES_PER_ORGANIZATION).await?;
    Ok(store)
}

/// Renames a store.
pub async fn rename_store(
    repo: &dyn SharedStoreRepo,
    clock: &dyn Clock,
    organization: OrganizationId,
    store_id: StoreId,
    name: StoreName,
) -> Result<SharedStore, StoreError> {
    repo.rename_store(organization, store_id, name.as_str(), clock.now()).await
}

/// Deletes a store and all its entries.
pub async fn delete_store(
    repo: &dyn SharedStoreRepo,
    organization: OrganizationId,
    store_id: StoreId,
) -> Result<(), StoreError> {
    repo.delete_store(organization, store_id).await
}

/// A store's entries, sorted by display name.
pub async fn list_entries(
    repo: &dyn SharedStoreRepo,
    organization: OrganizationId,
    store_id: StoreId,
) -> Result<Vec<StoreEntry>, StoreError> {
    let mut entries = repo.list_entries(organization, store_id).await?;
    entries.sort_by(|a, b| a.display_name.cmp(&b.display_name).then_with(|| a.entry_id.cmp(&b.entry_id)));
    Ok(entries)
}

/// One entry.
pub async fn get_entry(
    repo: &dyn SharedStoreRepo,
    organization: OrganizationId,
    store_id: StoreId,
    entry_id: &EntryId,
) -> Result<StoreEntry, StoreError> {
    repo.get_entry(organization, store_id, entry_id).await
}

/// Creates or replaces an entry; a replace keeps `created_at` and takes no new slot.
pub async fn put_entry(
    repo: &dyn SharedStoreRepo,
    clock: &dyn Clock,
    organization: OrganizationId,
    store_id: StoreId,
    write: EntryWrite,
) -> Result<StoreEntry, StoreError> {
    repo.put_entry(organization, store_id, &write, clock.now(), MAX_ENTRIES_PER_STORE).await
}

/// Renames an entry and replaces its display name (and metadata, when given).
pub async fn rename_entry(
    repo: &dyn SharedStoreRepo,
    clock: &dyn Clock,
    organization: OrganizationId,
    store_id: StoreId,
    entry_id: &EntryId,
    rename: EntryRename,
) -> Result<StoreEntry, StoreError> {
    repo.rename_entry(organization, store_id, entry_id, &rename, clock.now()).await
}

/// Deletes an entry.
pub async fn delete_entry(
    repo: &dyn SharedStoreRepo,
    organization: OrganizationId,
    store_id: StoreId,
    entry_id: &EntryId,
) -> Result<(), StoreError> {
    repo.delete_entry(organization, store_id, entry_id).await
}

/// Upserts de-duplicated entries; all or nothing with respect to the entry limit.
pub async fn bulk_upsert(
    repo: &dyn SharedStoreRepo,
    clock: &dyn Clock,
    organization: OrganizationId,
    store_id: StoreId,
    writes: Vec<EntryWrite>,
) -> Result<BulkUpsert, StoreError> {
    let entries = repo.upsert_entries(organization, store_id, writes, clock.now(), MAX_ENTRIES_PER_STORE).await?;
    Ok(BulkUpsert { success: true, count: entries.len(), entries })
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("test bodies are objects"),
        }
    }

    #[test]
    fn metadata_omitted_or_null_is_an_empty_object() {
        assert_eq!(Metadata::parse(None).unwrap().to_json(), "{}");
        assert_eq!(Metadata::parse(Some(&Value::Null)).unwrap().to_json(), "{}");
    }

    #[test]
    fn metadata_that_is_not_an_object_is_refused() {
        for value in [json!([1]), json!("x"), json!(1), json!(true)] {
            assert!(matches!(Metadata::parse(Some(&value)), Err(StoreError::MetadataNotObject)));
        }
    }

    #[test]
    fn metadata_limit_counts_utf8_bytes_of_compact_json() {
        // {"k":"…"} is 8 bytes of punctuation and key around the value.
        let fits = json!({ "k": "a".repeat(MAX_METADATA_BYTES - 8) });
        assert_eq!(fits.to_string().len(), MAX_METADATA_BYTES);
        assert!(Metadata::parse(Some(&fits)).is_ok());
        let over = json!({ "k": "é".repeat((MAX_METADATA_BYTES - 8) / 2 + 1) });
        assert!(matches!(Metadata::parse(Some(&over)), Err(StoreError::MetadataTooLarge)));
    }

    #[test]
    fn put_trims_display_name_and_requires_both_fields() {
        let write = EntryWrite::parse_put("a/b", &object(json!({"display_name": "  Hi  "}))).unwrap();
        assert_eq!(write.display_name, "Hi");
        assert!(matches!(
            EntryWrite::parse_put("", &object(json!({"display_name": "x"}))),
            Err(StoreError::PutFieldsRequired)
        ));
        assert!(matches!(
            EntryWrite::parse_put("a", &object(json!({"display_name": "   "}))),
            Err(StoreError::PutFieldsRequired)
        ));
    }

    #[test]
    fn entry_ids_are_kept_exactly_and_bounded_in_bytes() {
        let id = EntryWrite::parse_put(" a/b ", &object(json!({"display_name": "d"}))).unwrap().entry_id;
        assert_eq!(id.as_str(), " a/b ");
        let longest = "é".repeat(MAX_ENTRY_ID_BYTES / 2);
        assert!(EntryWrite::parse_put(&longest, &object(json!({"display_name": "d"}))).is_ok());
        let over = format!("{longest}x");
        let refused = EntryWrite::parse_put(&over, &object(json!({"display_name": "d"}))).unwrap_err();
        assert_eq!(refused.to_string(), "entry_id must be at most 1024 bytes");
        let refused = parse_path_entry_id(&over).unwrap_err();
        assert_eq!(refused.to_string(), "entry_id must be at most 1024 bytes");
        assert!(matches!(parse_path_entry_id(""), Err(StoreError::EntryNotFound)));
    }

    #[test]
    fn labels_are_bounded_in_characters_after_trimming() {
        let fits = format!("  {}  ", "é".repeat(MAX_LABEL_CHARS));
        let over = "é".repeat(MAX_LABEL_CHARS + 1);
        assert_eq!(StoreName::parse(Some(&json!(fits))).unwrap().as_str().chars().count(), MAX_LABEL_CHARS);
        assert_eq!(
            StoreName::parse(Some(&json!(over))).unwrap_err().to_string(),
            "name must be at most 1000 characters"
        );
        assert_eq!(
            SourceType::parse(Some(&json!(over))).unwrap_err().to_string(),
            "source_type must be at most 1000 characters"
        );
        let put = EntryWrite::parse_put("e", &object(json!({"display_name": over}))).unwrap_err();
        assert_eq!(put.to_string(), "display_name must be at most 1000 characters");
        let bulk = parse_bulk(&object(json!({"entries": [{"entry_id": "e", "display_name": over}]}))).unwrap_err();
        assert_eq!(bulk.to_string(), "display_name must be at most 1000 characters");
        let patch = EntryRename::parse(&object(json!({"entry_id": "e", "display_name": over}))).unwrap_err();
        assert_eq!(patch.to_string(), "display_name must be at most 1000 characters");
        let long_id = "x".repeat(MAX_ENTRY_ID_BYTES + 1);
        let patch = EntryRename::parse(&object(json!({"entry_id": long_id, "display_name": "d"}))).unwrap_err();
        assert_eq!(patch.to_string(), "entry_id must be at most 1024 bytes");
    }

    #[test]
    fn a_replace_keeps_the_first_creation_time_and_a_rename_keeps_omitted_metadata() {
        let (first, later) = (Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap(), Timestamp::now());
        let write = EntryWrite::parse_put("e", &object(json!({"display_name": "d"}))).unwrap();
        assert_eq!(write.clone().into_entry(None, later).created_at, later);
        let current = write.into_entry(Some(first), later);
        assert_eq!(current.created_at, first);
        let current = StoreEntry { metadata: Metadata::parse(Some(&json!({"k": 1}))).unwrap(), ..current };
        let keep = EntryRename::parse(&object(json!({"entry_id": "f", "display_name": "n"}))).unwrap();
        let renamed = keep.apply(current.clone());
        assert_eq!(
            (renamed.entry_id.as_str(), renamed.metadata.to_json(), renamed.created_at),
            ("f", r#"{"k":1}"#, first)
        );
        let clear =
            EntryRename::parse(&object(json!({"entry_id": "f", "display_name": "n", "metadata": null}))).unwrap();
        assert_eq!(clear.apply(current).metadata.to_json(), "{}");
    }

    #[test]
    fn bulk_keeps_last_occurrence_in_first_position() {
        let body = object(json!({"entries": [
            {"entry_id": "a", "display_name": "first"},
            {"entry_id": "b", "display_name": "b"},
            {"entry_id": "a", "display_name": "last"}
        ]}));
        let writes = parse_bulk(&body).unwrap();
        assert_eq!(writes.len(), 2);
        assert_eq!(writes[0].display_name, "last");
    }

    #[test]
    fn bulk_limits_are_checked_before_items() {
        let many: Vec<Value> = (0..=MAX_ENTRIES_PER_BULK).map(|_| json!({})).collect();
        assert!(matches!(parse_bulk(&object(json!({ "entries": many }))), Err(StoreError::BulkTooLarge)));
        assert!(matches!(parse_bulk(&object(json!({ "entries": [] }))), Err(StoreError::EntriesRequired)));
        assert!(matches!(parse_bulk(&object(json!({}))), Err(StoreError::EntriesRequired)));
    }

    #[test]
    fn patch_distinguishes_omitted_and_null_metadata() {
        let keep = EntryRename::parse(&object(json!({"entry_id": "n", "display_name": "d"}))).unwrap();
        assert_eq!(keep.metadata, None);
        let clear =
            EntryRename::parse(&object(json!({"entry_id": "n", "display_name": "d", "metadata": null}))).unwrap();
        assert_eq!(clear.metadata, Some(Metadata::default()));
    }
}
