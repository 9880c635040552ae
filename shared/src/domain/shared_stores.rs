//! Shared stores and their entries: parsing, limits and the use cases of the contract.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::time::Timestamp;
use crate::ports::{Clock, SharedStoreRepo};

/// Shared stores one organization may have.
pub const MAX_STORES_PER_ORGANIZATION: u32 = 10;
/// Entries one store may hold.
pub const MAX_ENTRIES_PER_STORE: u32 = 10_000;
/// Items one bulk upsert may carry.
pub const MAX_ENTRIES_PER_BULK: usize = 5_000;
/// Largest metadata object, as compact UTF-8 JSON.
pub const MAX_METADATA_BYTES: usize = 256_000;

/// A shared store as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SharedStore {
    pub id: Uuid,
    pub name: String,
    pub source_type: String,
    pub entry_count: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// An entry of a shared store as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoreEntry {
    pub entry_id: String,
    pub display_name: String,
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

/// A store's display name: a string, non-empty once trimmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreName(String);

impl StoreName {
    /// Parses the `name` field of a store create or rename.
    pub fn parse(value: Option<&Value>) -> Result<Self, StoreError> {
        match value {
            None | Some(Value::Null) => Err(StoreError::NameRequired),
            Some(Value::String(text)) if text.trim().is_empty() => Err(StoreError::NameRequired),
            Some(Value::String(text)) => Ok(Self(text.trim().to_owned())),
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
    /// Parses `source_type`; omitted or null means `manual`.
    pub fn parse(value: Option<&Value>) -> Result<Self, StoreError> {
        match value {
            None | Some(Value::Null) => Ok(Self("manual".into())),
            Some(Value::String(text)) if !text.trim().is_empty() => Ok(Self(text.trim().to_owned())),
            Some(_) => Err(StoreError::Invalid("source_type must be a non-empty string".into())),
        }
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Returns the trimmed text of a required string field, or None when it is missing,
/// not a string, or blank.
fn required_text(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::String(text)) if !text.trim().is_empty() => Some(text),
        _ => None,
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
                let text = serde_json::to_string(map).map_err(anyhow::Error::from)?;
                if text.len() > MAX_METADATA_BYTES {
                    return Err(StoreError::MetadataTooLarge);
                }
                Ok(Self(RawValue::from_string(text).map_err(anyhow::Error::from)?))
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
    pub entry_id: String,
    pub display_name: String,
    pub metadata: Metadata,
}

impl EntryWrite {
    /// Parses a PUT: the entry ID comes from the path, the rest from the body.
    pub fn parse_put(entry_id: &str, body: &Map<String, Value>) -> Result<Self, StoreError> {
        let display_name = required_text(body.get("display_name"));
        let (false, Some(display_name)) = (entry_id.is_empty(), display_name) else {
            return Err(StoreError::PutFieldsRequired);
        };
        Ok(Self {
            entry_id: entry_id.to_owned(),
            display_name: display_name.trim().to_owned(),
            metadata: Metadata::parse(body.get("metadata"))?,
        })
    }

    /// Parses one item of a bulk upsert.
    pub fn parse_bulk_item(item: &Value) -> Result<Self, StoreError> {
        let Value::Object(item) = item else {
            return Err(StoreError::EntriesIncomplete);
        };
        let entry_id = match item.get("entry_id") {
            Some(Value::String(id)) if !id.is_empty() => id,
            _ => return Err(StoreError::EntriesIncomplete),
        };
        let display_name = required_text(item.get("display_name")).ok_or(StoreError::EntriesIncomplete)?;
        Ok(Self {
            entry_id: entry_id.clone(),
            display_name: display_name.trim().to_owned(),
            metadata: Metadata::parse(item.get("metadata"))?,
        })
    }
}

/// A PATCH of an entry: a new ID, a new display name, and maybe new metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryRename {
    pub new_entry_id: String,
    pub display_name: String,
    /// None keeps the current metadata.
    pub metadata: Option<Metadata>,
}

impl EntryRename {
    /// Parses a PATCH body.
    pub fn parse(body: &Map<String, Value>) -> Result<Self, StoreError> {
        let new_entry_id = match body.get("entry_id") {
            Some(Value::String(id)) if !id.is_empty() => Some(id),
            _ => None,
        };
        let display_name = required_text(body.get("display_name"));
        let (Some(new_entry_id), Some(display_name)) = (new_entry_id, display_name) else {
            return Err(StoreError::PatchFieldsRequired);
        };
        let metadata = match body.get("metadata") {
            None => None,
            present => Some(Metadata::parse(present)?),
        };
        Ok(Self { new_entry_id: new_entry_id.clone(), display_name: display_name.trim().to_owned(), metadata })
    }
}

/// Parses a store ID from a path; text that is not a UUID names no store.
pub fn parse_store_id(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|_| StoreError::StoreNotFound)
}

/// Parses the `entries` list of a bulk upsert, keeping the last occurrence of each ID.
pub fn parse_bulk(body: &Map<String, Value>) -> Result<Vec<EntryWrite>, StoreError> {
    let items = match body.get("entries") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => return Err(StoreError::EntriesRequired),
    };
    if items.len() > MAX_ENTRIES_PER_BULK {
        return Err(StoreError::BulkTooLarge);
    }
    let mut writes: Vec<EntryWrite> = Vec::with_capacity(items.len());
    let mut position: HashMap<String, usize> = HashMap::with_capacity(items.len());
    for item in items {
        let write = EntryWrite::parse_bulk_item(item)?;
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
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BulkUpsert {
    pub success: bool,
    pub count: usize,
    pub entries: Vec<StoreEntry>,
}

/// The organization's stores, sorted by name.
pub async fn list_stores(repo: &dyn SharedStoreRepo, organization: Uuid) -> Result<Vec<SharedStore>, StoreError> {
    let mut stores = repo.list_stores(organization).await?;
    stores.sort_by(|a, b| a.name.cmp(&b.name).then(a.created_at.cmp(&b.created_at)).then(a.id.cmp(&b.id)));
    Ok(stores)
}

/// Creates a store, unless the organization already has the maximum.
pub async fn create_store(
    repo: &dyn SharedStoreRepo,
    clock: &dyn Clock,
    organization: Uuid,
    name: StoreName,
    source_type: SourceType,
) -> Result<SharedStore, StoreError> {
    let now = clock.now();
    let store = SharedStore {
        id: Uuid::new_v4(),
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
    organization: Uuid,
    store_id: Uuid,
    name: StoreName,
) -> Result<SharedStore, StoreError> {
    repo.rename_store(organization, store_id, name.as_str(), clock.now()).await
}

/// Deletes a store and all its entries.
pub async fn delete_store(repo: &dyn SharedStoreRepo, organization: Uuid, store_id: Uuid) -> Result<(), StoreError> {
    repo.delete_store(organization, store_id).await
}

/// A store's entries, sorted by display name.
pub async fn list_entries(
    repo: &dyn SharedStoreRepo,
    organization: Uuid,
    store_id: Uuid,
) -> Result<Vec<StoreEntry>, StoreError> {
    let mut entries = repo.list_entries(organization, store_id).await?;
    entries.sort_by(|a, b| a.display_name.cmp(&b.display_name).then_with(|| a.entry_id.cmp(&b.entry_id)));
    Ok(entries)
}

/// One entry.
pub async fn get_entry(
    repo: &dyn SharedStoreRepo,
    organization: Uuid,
    store_id: Uuid,
    entry_id: &str,
) -> Result<StoreEntry, StoreError> {
    if entry_id.is_empty() {
        return Err(StoreError::EntryNotFound);
    }
    repo.get_entry(organization, store_id, entry_id).await
}

/// Creates or replaces an entry; a replace keeps `created_at` and takes no new slot.
pub async fn put_entry(
    repo: &dyn SharedStoreRepo,
    clock: &dyn Clock,
    organization: Uuid,
    store_id: Uuid,
    write: EntryWrite,
) -> Result<StoreEntry, StoreError> {
    repo.put_entry(organization, store_id, &write, clock.now(), MAX_ENTRIES_PER_STORE).await
}

/// Renames an entry and replaces its display name (and metadata, when given).
pub async fn rename_entry(
    repo: &dyn SharedStoreRepo,
    clock: &dyn Clock,
    organization: Uuid,
    store_id: Uuid,
    entry_id: &str,
    rename: EntryRename,
) -> Result<StoreEntry, StoreError> {
    if entry_id.is_empty() {
        return Err(StoreError::EntryNotFound);
    }
    repo.rename_entry(organization, store_id, entry_id, &rename, clock.now()).await
}

/// Deletes an entry.
pub async fn delete_entry(
    repo: &dyn SharedStoreRepo,
    organization: Uuid,
    store_id: Uuid,
    entry_id: &str,
) -> Result<(), StoreError> {
    if entry_id.is_empty() {
        return Err(StoreError::EntryNotFound);
    }
    repo.delete_entry(organization, store_id, entry_id).await
}

/// Upserts de-duplicated entries; all or nothing with respect to the entry limit.
pub async fn bulk_upsert(
    repo: &dyn SharedStoreRepo,
    clock: &dyn Clock,
    organization: Uuid,
    store_id: Uuid,
    writes: Vec<EntryWrite>,
) -> Result<BulkUpsert, StoreError> {
    let entries = repo.upsert_entries(organization, store_id, &writes, clock.now(), MAX_ENTRIES_PER_STORE).await?;
    Ok(BulkUpsert { success: true, count: entries.len(), entries })
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
