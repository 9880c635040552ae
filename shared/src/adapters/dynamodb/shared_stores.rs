//! Shared stores in DynamoDB. The organization item counts stores and each store item
//! counts entries; every write that creates or removes a store or entry moves the
//! counter in the same transaction, under a condition, so limits hold under concurrency.
//!
//! Every write to a store's entries also requires that no bulk upsert holds the store's
//! lease (see `bulk.rs`), and waits while one does.

use std::time::Instant;

use anyhow::Context;
use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    CancellationReason, ConditionCheck, Delete, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use uuid::Uuid;

use super::bulk::{lease_is_active, now_millis, wait_for_lease, STORE_WRITABLE};
use super::{condition_failed, key, n, number, s, text, timestamp, DynamoDb, Item};
use crate::domain::shared_stores::{EntryRename, EntryWrite, Metadata, SharedStore, StoreEntry, StoreError};
use crate::domain::time::Timestamp;
use crate::ports::SharedStoreRepo;

pub(super) fn organization_key(organization: Uuid) -> Item {
    key(format!("ORG#{organization}"), "ORG")
}

pub(super) fn store_key(organization: Uuid, store: Uuid) -> Item {
    key(format!("ORG#{organization}"), format!("STORE#{store}"))
}

pub(super) fn entries_pk(organization: Uuid, store: Uuid) -> String {
    format!("ORG#{organization}#STORE#{store}")
}

pub(super) fn entry_key(organization: Uuid, store: Uuid, entry_id: &str) -> Item {
    key(entries_pk(organization, store), format!("ENTRY#{entry_id}"))
}

fn store_from(item: &Item) -> anyhow::Result<SharedStore> {
    Ok(SharedStore {
        id: Uuid::parse_str(text(item, "id")?)?,
        name: text(item, "name")?.to_owned(),
        source_type: text(item, "source_type")?.to_owned(),
        entry_count: number(item, "entry_count")?,
        created_at: timestamp(item, "created_at")?,
        updated_at: timestamp(item, "updated_at")?,
    })
}

fn entry_from(item: &Item) -> anyhow::Result<StoreEntry> {
    Ok(StoreEntry {
        entry_id: text(item, "entry_id")?.to_owned(),
        display_name: text(item, "display_name")?.to_owned(),
        metadata: Metadata::from_json(text(item, "metadata")?)?,
        created_at: timestamp(item, "created_at")?,
    })
}

pub(super) fn entry_item(organization: Uuid, store: Uuid, entry: &StoreEntry, now: Timestamp) -> Item {
    let mut item = entry_key(organization, store, &entry.entry_id);
    item.insert("entry_id".into(), s(&entry.entry_id));
    item.insert("display_name".into(), s(&entry.display_name));
    item.insert("metadata".into(), s(entry.metadata.to_json()));
    item.insert("created_at".into(), s(entry.created_at.to_string()));
    item.insert("updated_at".into(), s(now.to_string()));
    item
}

pub(super) fn stored_entry(write: &EntryWrite, created_at: Timestamp) -> StoreEntry {
    StoreEntry {
        entry_id: write.entry_id.clone(),
        display_name: write.display_name.clone(),
        metadata: write.metadata.clone(),
        created_at,
    }
}

pub(super) fn build<T>(built: Result<T, aws_sdk_dynamodb::error::BuildError>) -> anyhow::Result<T> {
    built.context("building a DynamoDB request")
}

/// A built put, update, delete or condition check, as one part of a transaction.
pub(super) trait TransactPart {
    /// Wraps the part, or reports why it could not be built.
    fn into_part(self) -> anyhow::Result<TransactWriteItem>;
}

macro_rules! transact_part {
    ($($kind:ty => $setter:ident),*) => {$(
        impl TransactPart for Result<$kind, aws_sdk_dynamodb::error::BuildError> {
            fn into_part(self) -> anyhow::Result<TransactWriteItem> {
                Ok(TransactWriteItem::builder().$setter(build(self)?).build())
            }
        }
    )*};
}

transact_part!(Put => put, Update => update, Delete => delete, ConditionCheck => condition_check);

/// Why the store item's condition failed, from the item DynamoDB returned with it.
enum StoreBlock {
    /// There is no such store.
    Missing,
    /// A bulk upsert holds the store: wait and try again.
    Leased,
    /// The store exists and is free, so the rest of the condition failed (a limit).
    Other,
}

fn store_block(item: Option<&Item>) -> StoreBlock {
    match item {
        None => StoreBlock::Missing,
        Some(item) if lease_is_active(item) => StoreBlock::Leased,
        Some(_) => StoreBlock::Other,
    }
}

/// The outcome of one attempt at a guarded write.
enum Attempt<T> {
    Done(T),
    /// Something changed meanwhile (or a lease was waited out): look again.
    Retry,
}

impl DynamoDb {
    /// A condition check that the store exists and no bulk upsert holds it.
    fn store_writable_check(&self, organization: Uuid, store: Uuid) -> anyhow::Result<TransactWriteItem> {
        let check = ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .condition_expression(STORE_WRITABLE)
            .expression_attribute_values(":now", n(now_millis()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build();
        check.into_part()
    }

    /// Interprets a failed store condition: an error to return, or (after waiting out a
    /// lease) a retry.
    async fn store_blocked<T>(
        &self,
        reason: Option<&CancellationReason>,
        waiting: &mut (u32, Instant),
    ) -> Result<Attempt<T>, StoreError> {
        match store_block(reason.and_then(CancellationReason::item)) {
            StoreBlock::Missing => Err(StoreError::StoreNotFound),
            StoreBlock::Leased => {
                wait_for_lease(waiting).await?;
                Ok(Attempt::Retry)
            }
            StoreBlock::Other => Err(anyhow::anyhow!("store condition failed unexpectedly").into()),
        }
    }

    pub(super) async fn store_item(&self, organization: Uuid, store: Uuid) -> anyhow::Result<Option<Item>> {
        self.get_consistent(store_key(organization, store)).await.context("reading a shared store")
    }

    async fn entry_item(&self, organization: Uuid, store: Uuid, entry_id: &str) -> anyhow::Result<Option<Item>> {
        self.get_consistent(entry_key(organization, store, entry_id)).await.context("reading a shared store entry")
    }

    async fn get_consistent(&self, key: Item) -> anyhow::Result<Option<Item>> {
        let output =
            self.client.get_item().table_name(&self.table).set_key(Some(key)).consistent_read(true).send().await?;
        Ok(output.item)
    }

    /// Replaces an existing entry in place, keeping its `created_at`.
    async fn replace_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry: &StoreEntry,
        now: Timestamp,
        waiting: &mut (u32, Instant),
    ) -> Result<Attempt<StoreEntry>, StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(entry_item(organization, store, entry, now)))
            .condition_expression("attribute_exists(pk) AND created_at = :created")
            .expression_attribute_values(":created", s(entry.created_at.to_string()))
            .build();
        let items = vec![self.store_writable_check(organization, store)?, put.into_part()?];
        match self.transact(items).await? {
            Ok(()) => Ok(Attempt::Done(entry.clone())),
            Err(reasons) if condition_failed(reasons.first()) => self.store_blocked(reasons.first(), waiting).await,
            // The entry was deleted or replaced meanwhile.
            Err(_) => Ok(Attempt::Retry),
        }
    }

    async fn try_put_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        write: &EntryWrite,
        now: Timestamp,
        max_entries: u32,
        waiting: &mut (u32, Instant),
    ) -> Result<Attempt<StoreEntry>, StoreError> {
        let fresh = stored_entry(write, now);
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .update_expression("SET entry_count = entry_count + :one")
            .condition_expression(format!("{STORE_WRITABLE} AND entry_count < :max"))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":max", n(max_entries))
            .expression_attribute_values(":now", n(now_millis()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build();
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(entry_item(organization, store, &fresh, now)))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build();
        let items = vec![count.into_part()?, put.into_part()?];
        let reasons = match self.transact(items).await? {
            Ok(()) => return Ok(Attempt::Done(fresh)),
            Err(reasons) => reasons,
        };
        let store_reason = reasons.first();
        let full = condition_failed(store_reason);
        if full {
            match store_block(store_reason.and_then(CancellationReason::item)) {
                StoreBlock::Other => {}
                _ => return self.store_blocked(store_reason, waiting).await,
            }
        }
        // The entry exists (reported directly, or read back when the store is full):
        // replace it in place, which needs no slot.
        let existing = match reasons.get(1).and_then(CancellationReason::item) {
            Some(item) if condition_failed(reasons.get(1)) => Some(item.clone()),
            _ => self.entry_item(organization, store, &write.entry_id).await?,
        };
        match existing {
            Some(existing) => {
                let replacement = stored_entry(write, timestamp(&existing, "created_at")?);
                self.replace_entry(organization, store, &replacement, now, waiting).await
            }
            None if full => Err(StoreError::EntryLimitReached),
            None => Ok(Attempt::Retry),
        }
    }

    async fn try_rename_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry_id: &str,
        rename: &EntryRename,
        now: Timestamp,
        waiting: &mut (u32, Instant),
    ) -> Result<Attempt<StoreEntry>, StoreError> {
        let Some(current) = self.entry_item(organization, store, entry_id).await? else {
            return Err(match self.store_item(organization, store).await? {
                Some(_) => StoreError::EntryNotFound,
                None => StoreError::StoreNotFound,
            });
        };
        let current = entry_from(&current)?;
        let renamed = StoreEntry {
            entry_id: rename.new_entry_id.clone(),
            display_name: rename.display_name.clone(),
            metadata: rename.metadata.clone().unwrap_or(current.metadata),
            created_at: current.created_at,
        };
        if rename.new_entry_id == entry_id {
            return self.replace_entry(organization, store, &renamed, now, waiting).await;
        }
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(entry_key(organization, store, entry_id)))
            .condition_expression("attribute_exists(pk) AND created_at = :created")
            .expression_attribute_values(":created", s(current.created_at.to_string()))
            .build();
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(entry_item(organization, store, &renamed, now)))
            .condition_expression("attribute_not_exists(pk)")
            .build();
        let items = vec![self.store_writable_check(organization, store)?, delete.into_part()?, put.into_part()?];
        match self.transact(items).await? {
            Ok(()) => Ok(Attempt::Done(renamed)),
            Err(reasons) if condition_failed(reasons.first()) => self.store_blocked(reasons.first(), waiting).await,
            Err(reasons) if condition_failed(reasons.get(2)) => Err(StoreError::EntryIdTaken),
            // The old entry changed under us: look again.
            Err(_) => Ok(Attempt::Retry),
        }
    }

    async fn try_delete_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry_id: &str,
        waiting: &mut (u32, Instant),
    ) -> Result<Attempt<()>, StoreError> {
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .update_expression("SET entry_count = entry_count - :one")
            .condition_expression(STORE_WRITABLE)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":now", n(now_millis()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build();
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(entry_key(organization, store, entry_id)))
            .condition_expression("attribute_exists(pk)")
            .build();
        let items = vec![count.into_part()?, delete.into_part()?];
        match self.transact(items).await? {
            Ok(()) => Ok(Attempt::Done(())),
            Err(reasons) if condition_failed(reasons.first()) => self.store_blocked(reasons.first(), waiting).await,
            Err(_) => Err(StoreError::EntryNotFound),
        }
    }
}

/// Repeats a guarded write until it is done or fails for good; `waiting` tracks how
/// long it has waited for a bulk upsert's lease.
macro_rules! until_done {
    (|$waiting:ident| $call:expr) => {{
        let mut state = (0u32, Instant::now());
        loop {
            let $waiting = &mut state;
            match $call.await? {
                Attempt::Done(value) => break value,
                Attempt::Retry => continue,
            }
        }
    }};
}

#[async_trait]
impl SharedStoreRepo for DynamoDb {
    async fn list_stores(&self, organization: Uuid) -> Result<Vec<SharedStore>, StoreError> {
        let items = self
            .query_all(format!("ORG#{organization}"), Some("STORE#"), None)
            .await
            .context("listing shared stores")?;
        Ok(items.iter().map(store_from).collect::<anyhow::Result<_>>()?)
    }

    async fn create_store(&self, organization: Uuid, store: &SharedStore, max_stores: u32) -> Result<(), StoreError> {
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(organization_key(organization)))
            .update_expression("SET store_count = if_not_exists(store_count, :zero) + :one")
            .condition_expression("attribute_not_exists(store_count) OR store_count < :max")
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":max", n(max_stores))
            .build();
        let mut item = store_key(organization, store.id);
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
        match self.transact(items).await? {
            Ok(()) => Ok(()),
            Err(reasons) if condition_failed(reasons.first()) => Err(StoreError::StoreLimitReached),
            Err(reasons) => Err(anyhow::anyhow!("store creation cancelled: {reasons:?}").into()),
        }
    }

    async fn rename_store(
        &self,
        organization: Uuid,
        store: Uuid,
        name: &str,
        now: Timestamp,
    ) -> Result<SharedStore, StoreError> {
        let updated = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .update_expression("SET #name = :name, updated_at = :now")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#name", "name")
            .expression_attribute_values(":name", s(name))
            .expression_attribute_values(":now", s(now.to_string()))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|error| error.into_service_error());
        match updated {
            Ok(output) => Ok(store_from(&output.attributes.unwrap_or_default())?),
            Err(UpdateItemError::ConditionalCheckFailedException(_)) => Err(StoreError::StoreNotFound),
            Err(other) => Err(anyhow::Error::new(other).context("renaming a shared store").into()),
        }
    }

    async fn delete_store(&self, organization: Uuid, store: Uuid) -> Result<(), StoreError> {
        self.delete_store_leased(organization, store).await
    }

    async fn list_entries(&self, organization: Uuid, store: Uuid) -> Result<Vec<StoreEntry>, StoreError> {
        let (store_item, items) = tokio::join!(
            self.store_item(organization, store),
            self.query_all(entries_pk(organization, store), None, None)
        );
        if store_item?.is_none() {
            return Err(StoreError::StoreNotFound);
        }
        let items = items.context("listing shared store entries")?;
        Ok(items.iter().map(entry_from).collect::<anyhow::Result<_>>()?)
    }

    async fn get_entry(&self, organization: Uuid, store: Uuid, entry_id: &str) -> Result<StoreEntry, StoreError> {
        // Entries never outlive their store (see `delete_store_leased`), so one read
        // answers; the store is read only to tell which 404 a miss is.
        match self.entry_item(organization, store, entry_id).await? {
            Some(item) => Ok(entry_from(&item)?),
            None => match self.store_item(organization, store).await? {
                Some(_) => Err(StoreError::EntryNotFound),
                None => Err(StoreError::StoreNotFound),
            },
        }
    }

    async fn put_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        write: &EntryWrite,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<StoreEntry, StoreError> {
        Ok(until_done!(|waiting| self.try_put_entry(organization, store, write, now, max_entries, waiting)))
    }

    async fn rename_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry_id: &str,
        rename: &EntryRename,
        now: Timestamp,
    ) -> Result<StoreEntry, StoreError> {
        Ok(until_done!(|waiting| self.try_rename_entry(organization, store, entry_id, rename, now, waiting)))
    }

    async fn delete_entry(&self, organization: Uuid, store: Uuid, entry_id: &str) -> Result<(), StoreError> {
        until_done!(|waiting| self.try_delete_entry(organization, store, entry_id, waiting));
        Ok(())
    }

    async fn upsert_entries(
        &self,
        organization: Uuid,
        store: Uuid,
        writes: &[EntryWrite],
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        let lease = self.acquire_lease(organization, store).await?;
        let result = self.upsert_leased(organization, store, &lease, writes, now, max_entries).await;
        if let Err(error) = self.release_lease(organization, store, &lease).await {
            // It runs out by itself within its lease time.
            tracing::warn!(error = %format!("{error:#}"), %store, "could not release a bulk upsert lease");
        }
        result
    }
}
