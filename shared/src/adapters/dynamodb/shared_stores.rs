//! Shared stores in DynamoDB. The organization item counts stores and each store item
//! counts entries; every write that creates or removes a store or entry moves the
//! counter in the same transaction, under a condition, so limits hold under concurrency.
//!
//! Every write to a store's entries also requires that no bulk upsert or store delete
//! holds the store's lease (see `bulk.rs`), and waits while one does, on the
//! `STORE_LEASE_WAIT` schedule.

use std::future::Future;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    CancellationReason, ConditionCheck, Delete, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};

use super::bulk::{is_reserved, lease_is_active, STORE_WRITABLE};
use super::table::{condition_failed, failure, id, n, number, s, text, timestamp, Item, TransactPart};
use super::{keys, DynamoDb};
use crate::core::retry::{STORE_LEASE_WAIT, TRANSACTION_CONFLICTS};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::StoreId;
use crate::domain::shared_stores::SharedStoreRepo;
use crate::domain::shared_stores::{EntryId, EntryRename, EntryWrite, Metadata, SharedStore, StoreEntry, StoreError};
use crate::domain::time::Timestamp;

fn store_from(item: &Item) -> anyhow::Result<SharedStore> {
    Ok(SharedStore {
        id: id(item, "id")?,
        name: text(item, "name")?.to_owned(),
        source_type: text(item, "source_type")?.to_owned(),
        entry_count: number(item, "entry_count")?,
        created_at: timestamp(item, "created_at")?,
        updated_at: timestamp(item, "updated_at")?,
    })
}

fn entry_from(item: &Item) -> anyhow::Result<StoreEntry> {
    Ok(StoreEntry {
        entry_id: EntryId::from_storage(text(item, "entry_id")?.to_owned()),
        display_name: text(item, "display_name")?.to_owned(),
        metadata: Metadata::from_json(text(item, "metadata")?)?,
        created_at: timestamp(item, "created_at")?,
    })
}

/// The item of an entry as stored at `now`.
pub(super) fn entry_item(organization: OrganizationId, store: StoreId, entry: &StoreEntry, now: Timestamp) -> Item {
    let mut item = keys::entry(organization, store, &entry.entry_id);
    item.insert("entry_id".into(), s(entry.entry_id.as_str()));
    item.insert("display_name".into(), s(&entry.display_name));
    item.insert("metadata".into(), s(entry.metadata.to_json()));
    item.insert("created_at".into(), s(entry.created_at.to_string()));
    item.insert("updated_at".into(), s(now.to_string()));
    item
}

/// Why the store item's condition failed, from the item DynamoDB returned with it.
enum StoreBlock {
    /// There is no such store.
    Missing,
    /// A bulk upsert or a store delete holds the store: wait and try again.
    Leased,
    /// A bulk died after reserving slots: repair the store, then try again.
    Unrepaired,
    /// The store exists and is free, so the rest of the condition failed (a limit).
    Other,
}

fn store_block(reason: Option<&CancellationReason>, now: u64) -> StoreBlock {
    match reason.and_then(CancellationReason::item) {
        None => StoreBlock::Missing,
        Some(item) if lease_is_active(item, now) => StoreBlock::Leased,
        Some(item) if is_reserved(item) => StoreBlock::Unrepaired,
        Some(_) => StoreBlock::Other,
    }
}

/// The outcome of one attempt at a guarded write.
enum Attempt<T> {
    Done(T),
    /// Something changed meanwhile (the text says what): look again.
    Changed(&'static str),
    /// The store's lease is held by someone else: wait for it.
    Leased,
    /// The store carries the reservation of a dead bulk: repair it first.
    Unrepaired,
}

impl<T> Attempt<T> {
    /// The attempt after a failed store condition: an error, a wait for the lease, or a
    /// repair.
    fn store_blocked(reason: Option<&CancellationReason>, now: u64) -> Result<Self, StoreError> {
        match store_block(reason, now) {
            StoreBlock::Missing => Err(StoreError::StoreNotFound),
            StoreBlock::Leased => Ok(Attempt::Leased),
            StoreBlock::Unrepaired => Ok(Attempt::Unrepaired),
            StoreBlock::Other => Err(anyhow::anyhow!("store condition failed unexpectedly").into()),
        }
    }
}

impl DynamoDb {
    /// Repeats a guarded write until it is done or fails for good: writes that lost to a
    /// concurrent change (or repaired the store first) retry on the `TRANSACTION_CONFLICTS`
    /// schedule, writes that found the store leased wait on the `STORE_LEASE_WAIT`
    /// schedule. Either ends, when spent, as an unavailable backend.
    async fn until_done<T, F, Fut>(
        &self,
        organization: OrganizationId,
        store: StoreId,
        mut attempt: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<T>, StoreError>>,
    {
        let mut changes = TRANSACTION_CONFLICTS.start();
        let mut lease = STORE_LEASE_WAIT.start();
        loop {
            match attempt().await? {
                Attempt::Done(value) => return Ok(value),
                Attempt::Changed(why) => changes.wait(why).await.map_err(anyhow::Error::from)?,
                Attempt::Leased => {
                    lease.wait("a bulk upsert or a store delete holds the store").await.map_err(anyhow::Error::from)?
                }
                Attempt::Unrepaired => {
                    // Taking the lease repairs what a dead bulk left; the write then goes on.
                    let held = self.acquire_lease(organization, store).await?;
                    self.release_lease(organization, store, &held, true).await?;
                    changes.wait("repaired the store a dead bulk upsert left").await.map_err(anyhow::Error::from)?;
                }
            }
        }
    }

    /// A condition check that the store exists and no bulk upsert holds it.
    fn store_writable_check(&self, organization: OrganizationId, store: StoreId) -> anyhow::Result<TransactWriteItem> {
        ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .condition_expression(STORE_WRITABLE)
            .expression_attribute_values(":now", n(self.now_millis()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .into_part()
    }

    pub(super) async fn store_item(
        &self,
        organization: OrganizationId,
        store: StoreId,
    ) -> anyhow::Result<Option<Item>> {
        self.get(keys::store(organization, store), "reading a shared store").await
    }

    async fn entry_item(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
    ) -> anyhow::Result<Option<Item>> {
        self.get(keys::entry(organization, store, entry_id), "reading a shared store entry").await
    }

    /// Which 404 a missing entry is: the entry's, or the store's.
    async fn entry_missing(&self, organization: OrganizationId, store: StoreId) -> StoreError {
        match self.store_item(organization, store).await {
            Ok(Some(_)) => StoreError::EntryNotFound,
            Ok(None) => StoreError::StoreNotFound,
            Err(error) => error.into(),
        }
    }

    /// Replaces an existing entry in place, as long as it is still the one created at
    /// `entry.created_at`.
    async fn replace_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry: &StoreEntry,
        now: Timestamp,
    ) -> Result<Attempt<StoreEntry>, StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(entry_item(organization, store, entry, now)))
            .condition_expression("attribute_exists(pk) AND created_at = :created")
            .expression_attribute_values(":created", s(entry.created_at.to_string()))
            .build();
        let items = vec![self.store_writable_check(organization, store)?, put.into_part()?];
        match self.transact(items, "replacing an entry").await? {
            Ok(()) => Ok(Attempt::Done(entry.clone())),
            Err(reasons) if condition_failed(reasons.first()) => {
                Attempt::store_blocked(reasons.first(), self.now_millis())
            }
            Err(_) => Ok(Attempt::Changed("the entry was deleted or replaced meanwhile")),
        }
    }

    async fn try_put_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        write: &EntryWrite,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Attempt<StoreEntry>, StoreError> {
        let fresh = write.clone().into_entry(None, now);
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .update_expression("SET entry_count = entry_count + :one")
            .condition_expression(format!("{STORE_WRITABLE} AND entry_count < :max"))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":max", n(max_entries))
            .expression_attribute_values(":now", n(self.now_millis()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build();
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(entry_item(organization, store, &fresh, now)))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build();
        let items = vec![count.into_part()?, put.into_part()?];
        let reasons = match self.transact(items, "creating an entry").await? {
            Ok(()) => return Ok(Attempt::Done(fresh)),
            Err(reasons) => reasons,
        };
        let full = condition_failed(reasons.first());
        if full && !matches!(store_block(reasons.first(), self.now_millis()), StoreBlock::Other) {
            return Attempt::store_blocked(reasons.first(), self.now_millis());
        }
        // The entry exists (reported directly, or read back when the store is full):
        // replace it in place, which needs no slot.
        let existing = match reasons.get(1).and_then(CancellationReason::item) {
            Some(item) if condition_failed(reasons.get(1)) => Some(item.clone()),
            _ => self.entry_item(organization, store, &write.entry_id).await?,
        };
        match existing {
            Some(existing) => {
                let replacement = write.clone().into_entry(Some(timestamp(&existing, "created_at")?), now);
                self.replace_entry(organization, store, &replacement, now).await
            }
            None if full => Err(StoreError::EntryLimitReached),
            None => Ok(Attempt::Changed("the entry was deleted meanwhile")),
        }
    }

    async fn try_rename_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
        rename: &EntryRename,
        now: Timestamp,
    ) -> Result<Attempt<StoreEntry>, StoreError> {
        let Some(current) = self.entry_item(organization, store, entry_id).await? else {
            return Err(self.entry_missing(organization, store).await);
        };
        let renamed = rename.apply(entry_from(&current)?);
        if rename.entry_id == *entry_id {
            return self.replace_entry(organization, store, &renamed, now).await;
        }
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(keys::entry(organization, store, entry_id)))
            .condition_expression("attribute_exists(pk) AND created_at = :created")
            .expression_attribute_values(":created", s(renamed.created_at.to_string()))
            .build();
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(entry_item(organization, store, &renamed, now)))
            .condition_expression("attribute_not_exists(pk)")
            .build();
        let items = vec![self.store_writable_check(organization, store)?, delete.into_part()?, put.into_part()?];
        match self.transact(items, "renaming an entry").await? {
            Ok(()) => Ok(Attempt::Done(renamed)),
            Err(reasons) if condition_failed(reasons.first()) => {
                Attempt::store_blocked(reasons.first(), self.now_millis())
            }
            Err(reasons) if condition_failed(reasons.get(2)) => Err(StoreError::EntryIdTaken),
            Err(_) => Ok(Attempt::Changed("the entry changed meanwhile")),
        }
    }

    async fn try_delete_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
    ) -> Result<Attempt<()>, StoreError> {
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .update_expression("SET entry_count = entry_count - :one")
            .condition_expression(STORE_WRITABLE)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":now", n(self.now_millis()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build();
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(keys::entry(organization, store, entry_id)))
            .condition_expression("attribute_exists(pk)")
            .build();
        let items = vec![count.into_part()?, delete.into_part()?];
        match self.transact(items, "deleting an entry").await? {
            Ok(()) => Ok(Attempt::Done(())),
            Err(reasons) if condition_failed(reasons.first()) => {
                Attempt::store_blocked(reasons.first(), self.now_millis())
            }
            Err(_) => Err(StoreError::EntryNotFound),
        }
    }
}

#[async_trait]
impl SharedStoreRepo for DynamoDb {
    async fn list_stores(&self, organization: OrganizationId) -> Result<Vec<SharedStore>, StoreError> {
        let items = self
            .query_all(keys::organization_pk(organization), Some(keys::STORE_PREFIX), None, "listing shared stores")
            .await?;
        Ok(items.iter().map(store_from).collect::<anyhow::Result<_>>()?)
    }

    async fn create_store(
        &self,
        organization: OrganizationId,
        store: &SharedStore,
        max_stores: u32,
    ) -> Result<(), StoreError> {
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(keys::organization(organization)))
            .update_expression("SET store_count = if_not_exists(store_count, :zero) + :one")
            .condition_expression("attribute_not_exists(store_count) OR store_count < :max")
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":max", n(max_stores))
            .build();
        let mut item = keys::store(organization, store.id);
        item.insert("id".into(), s(store.id.to_string()));
        item.insert("name".into(), s(&store.name));
        item.insert("source_type".into(), s(&store.source_type));
        item.insert("entry_count".into(), n(0));
        item.insert("created_at".into(), s(store.created_at.to_string()));
        item.insert("updated_at".into(), s(store.updated_at.to_string()));
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .build();
        let items = vec![count.into_part()?, put.into_part()?];
        match self.transact(items, "creating a shared store").await? {
            Ok(()) => Ok(()),
            Err(reasons) if condition_failed(reasons.first()) => Err(StoreError::StoreLimitReached),
            Err(reasons) => Err(anyhow::anyhow!("store creation cancelled: {reasons:?}").into()),
        }
    }

    async fn rename_store(
        &self,
        organization: OrganizationId,
        store: StoreId,
        name: &str,
        now: Timestamp,
    ) -> Result<SharedStore, StoreError> {
        let updated = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .update_expression("SET #name = :name, updated_at = :now")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#name", "name")
            .expression_attribute_values(":name", s(name))
            .expression_attribute_values(":now", s(now.to_string()))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match updated {
            Ok(output) => Ok(store_from(&output.attributes.unwrap_or_default())?),
            Err(error)
                if matches!(error.as_service_error(), Some(UpdateItemError::ConditionalCheckFailedException(_))) =>
            {
                Err(StoreError::StoreNotFound)
            }
            Err(error) => Err(failure(error, "renaming a shared store").into()),
        }
    }

    async fn delete_store(&self, organization: OrganizationId, store: StoreId) -> Result<(), StoreError> {
        self.delete_store_leased(organization, store).await
    }

    async fn list_entries(&self, organization: OrganizationId, store: StoreId) -> Result<Vec<StoreEntry>, StoreError> {
        let (store_item, items) = tokio::join!(
            self.store_item(organization, store),
            self.query_all(keys::entries_pk(organization, store), None, None, "listing shared store entries")
        );
        if store_item?.is_none() {
            return Err(StoreError::StoreNotFound);
        }
        Ok(items?.iter().map(entry_from).collect::<anyhow::Result<_>>()?)
    }

    async fn get_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
    ) -> Result<StoreEntry, StoreError> {
        // Entries never outlive their store (see `delete_store_leased`), so one read
        // answers; the store is read only to tell which 404 a miss is.
        match self.entry_item(organization, store, entry_id).await? {
            Some(item) => Ok(entry_from(&item)?),
            None => Err(self.entry_missing(organization, store).await),
        }
    }

    async fn put_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        write: &EntryWrite,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<StoreEntry, StoreError> {
        self.until_done(organization, store, || self.try_put_entry(organization, store, write, now, max_entries)).await
    }

    async fn rename_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
        rename: &EntryRename,
        now: Timestamp,
    ) -> Result<StoreEntry, StoreError> {
        self.until_done(organization, store, || self.try_rename_entry(organization, store, entry_id, rename, now)).await
    }

    async fn delete_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
    ) -> Result<(), StoreError> {
        self.until_done(organization, store, || self.try_delete_entry(organization, store, entry_id)).await
    }

    async fn upsert_entries(
        &self,
        organization: OrganizationId,
        store: StoreId,
        writes: Vec<EntryWrite>,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        self.upsert_under_lease(organization, store, &writes, now, max_entries).await
    }
}
