//! Shared stores in DynamoDB. The organization item counts stores and each store item
//! counts entries; every write that creates or removes a store or entry moves the
//! counter in the same transaction, under a condition, so limits hold under concurrency.

use std::collections::{HashMap, HashSet};

use anyhow::Context;
use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    CancellationReason, ConditionCheck, Delete, DeleteRequest, KeysAndAttributes, Put, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update, WriteRequest,
};
use futures::stream::{self, StreamExt, TryStreamExt};
use uuid::Uuid;

use super::{backoff, condition_failed, key, n, number, s, text, timestamp, DynamoDb, Item};
use crate::domain::shared_stores::{
    EntryRename, EntryWrite, Metadata, SharedStore, StoreEntry, StoreError,
};
use crate::domain::time::Timestamp;
use crate::ports::SharedStoreRepo;

/// Items per transaction (DynamoDB's limit).
const TRANSACTION_ITEMS: usize = 100;
/// Bytes per transaction we aim under (DynamoDB allows 4 MB in total).
const TRANSACTION_BYTES: usize = 3_500_000;
/// Keys per BatchGetItem (DynamoDB's limit).
const BATCH_GET_KEYS: usize = 100;
/// Requests per BatchWriteItem (DynamoDB's limit).
const BATCH_WRITE_REQUESTS: usize = 25;
/// Requests one bulk upsert keeps in flight.
const PARALLEL_REQUESTS: usize = 8;

fn organization_key(organization: Uuid) -> Item {
    key(format!("ORG#{organization}"), "ORG")
}

fn store_key(organization: Uuid, store: Uuid) -> Item {
    key(format!("ORG#{organization}"), format!("STORE#{store}"))
}

fn entries_pk(organization: Uuid, store: Uuid) -> String {
    format!("ORG#{organization}#STORE#{store}")
}

fn entry_key(organization: Uuid, store: Uuid, entry_id: &str) -> Item {
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

fn entry_item(organization: Uuid, store: Uuid, entry: &StoreEntry, now: Timestamp) -> Item {
    let mut item = entry_key(organization, store, &entry.entry_id);
    item.insert("entry_id".into(), s(&entry.entry_id));
    item.insert("display_name".into(), s(&entry.display_name));
    item.insert("metadata".into(), s(entry.metadata.to_json()));
    item.insert("created_at".into(), s(entry.created_at.to_string()));
    item.insert("updated_at".into(), s(now.to_string()));
    item
}

fn stored_entry(write: &EntryWrite, created_at: Timestamp) -> StoreEntry {
    StoreEntry {
        entry_id: write.entry_id.clone(),
        display_name: write.display_name.clone(),
        metadata: write.metadata.clone(),
        created_at,
    }
}

fn build<T>(built: Result<T, aws_sdk_dynamodb::error::BuildError>) -> anyhow::Result<T> {
    built.context("building a DynamoDB request")
}

impl DynamoDb {
    fn store_exists_check(
        &self,
        organization: Uuid,
        store: Uuid,
    ) -> anyhow::Result<TransactWriteItem> {
        let check = ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .condition_expression("attribute_exists(pk)")
            .build();
        Ok(TransactWriteItem::builder()
            .condition_check(build(check)?)
            .build())
    }

    /// Moves a store's entry counter by `delta`; a positive move must stay within `max`.
    /// Returns false (with nothing changed) when the store is missing or would overflow.
    async fn move_entry_count(
        &self,
        organization: Uuid,
        store: Uuid,
        delta: i64,
        max: u32,
    ) -> Result<(), StoreError> {
        let mut attempt = 0;
        loop {
            let mut update = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(store_key(organization, store)))
                .update_expression("SET entry_count = entry_count + :delta")
                .expression_attribute_values(":delta", n(delta))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
            update = if delta > 0 {
                update
                    .condition_expression("attribute_exists(pk) AND entry_count <= :room")
                    .expression_attribute_values(":room", n(i64::from(max) - delta))
            } else {
                update.condition_expression("attribute_exists(pk)")
            };
            match update
                .send()
                .await
                .map_err(|error| error.into_service_error())
            {
                Ok(_) => return Ok(()),
                Err(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    return Err(if failed.item().is_some() {
                        StoreError::EntryLimitReached
                    } else {
                        StoreError::StoreNotFound
                    });
                }
                Err(UpdateItemError::TransactionConflictException(_))
                    if attempt < super::MAX_CONFLICT_ATTEMPTS =>
                {
                    attempt += 1;
                    backoff(attempt).await;
                }
                Err(other) => {
                    return Err(anyhow::Error::new(other)
                        .context("moving the entry counter")
                        .into())
                }
            }
        }
    }

    async fn store_item(&self, organization: Uuid, store: Uuid) -> anyhow::Result<Option<Item>> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .consistent_read(true)
            .send()
            .await
            .context("reading a shared store")?;
        Ok(output.item)
    }

    async fn entry_item(
        &self,
        organization: Uuid,
        store: Uuid,
        entry_id: &str,
    ) -> anyhow::Result<Option<Item>> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(entry_key(organization, store, entry_id)))
            .consistent_read(true)
            .send()
            .await
            .context("reading a shared store entry")?;
        Ok(output.item)
    }

    /// Reads many keys with strongly consistent BatchGetItem calls, several in flight.
    async fn batch_get(
        &self,
        keys: Vec<Item>,
        projection: Option<&str>,
    ) -> anyhow::Result<Vec<Item>> {
        let chunks: Vec<Vec<Item>> = keys.chunks(BATCH_GET_KEYS).map(<[Item]>::to_vec).collect();
        let pages: Vec<Vec<Item>> = stream::iter(chunks)
            .map(|chunk| self.batch_get_chunk(chunk, projection))
            .buffer_unordered(PARALLEL_REQUESTS)
            .try_collect()
            .await?;
        Ok(pages.into_iter().flatten().collect())
    }

    async fn batch_get_chunk(
        &self,
        keys: Vec<Item>,
        projection: Option<&str>,
    ) -> anyhow::Result<Vec<Item>> {
        let mut found = Vec::with_capacity(keys.len());
        let mut pending = build(
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(true)
                .set_projection_expression(projection.map(str::to_owned))
                .build(),
        )?;
        let mut attempt = 0;
        loop {
            let output = self
                .client
                .batch_get_item()
                .request_items(&self.table, pending)
                .send()
                .await
                .context("batch reading")?;
            if let Some(items) = output
                .responses
                .and_then(|mut tables| tables.remove(&self.table))
            {
                found.extend(items);
            }
            match output
                .unprocessed_keys
                .and_then(|mut tables| tables.remove(&self.table))
            {
                Some(rest) if !rest.keys.is_empty() => {
                    attempt += 1;
                    backoff(attempt).await;
                    pending = rest;
                }
                _ => return Ok(found),
            }
        }
    }

    /// Deletes every entry under a store's partition (after the store item is gone).
    async fn purge_entries(&self, organization: Uuid, store: Uuid) -> anyhow::Result<()> {
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(entries_pk(organization, store)))
                .projection_expression("pk, sk")
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .context("listing entries to delete")?;
            let deletes: Vec<WriteRequest> = page
                .items
                .unwrap_or_default()
                .into_iter()
                .map(|item| {
                    Ok(WriteRequest::builder()
                        .delete_request(build(
                            DeleteRequest::builder().set_key(Some(item)).build(),
                        )?)
                        .build())
                })
                .collect::<anyhow::Result<_>>()?;
            let chunks: Vec<Vec<WriteRequest>> = deletes
                .chunks(BATCH_WRITE_REQUESTS)
                .map(<[WriteRequest]>::to_vec)
                .collect();
            stream::iter(chunks)
                .map(|chunk| self.batch_write(chunk))
                .buffer_unordered(PARALLEL_REQUESTS)
                .try_collect::<Vec<()>>()
                .await?;
            match page.last_evaluated_key {
                Some(next) => start = Some(next),
                None => return Ok(()),
            }
        }
    }

    async fn batch_write(&self, mut requests: Vec<WriteRequest>) -> anyhow::Result<()> {
        let mut attempt = 0;
        while !requests.is_empty() {
            let output = self
                .client
                .batch_write_item()
                .request_items(&self.table, requests)
                .send()
                .await
                .context("batch writing")?;
            requests = output
                .unprocessed_items
                .and_then(|mut tables| tables.remove(&self.table))
                .unwrap_or_default();
            if !requests.is_empty() {
                attempt += 1;
                backoff(attempt).await;
            }
        }
        Ok(())
    }

    /// Replaces an existing entry in place, keeping its `created_at`; `Ok(None)` when the
    /// entry vanished meanwhile.
    async fn replace_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry: &StoreEntry,
        now: Timestamp,
    ) -> Result<Option<StoreEntry>, StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(entry_item(organization, store, entry, now)))
            .condition_expression("attribute_exists(pk) AND created_at = :created")
            .expression_attribute_values(":created", s(entry.created_at.to_string()))
            .build();
        let items = vec![
            self.store_exists_check(organization, store)?,
            TransactWriteItem::builder().put(build(put)?).build(),
        ];
        match self.transact(items).await? {
            Ok(()) => Ok(Some(entry.clone())),
            Err(reasons) if condition_failed(reasons.first()) => Err(StoreError::StoreNotFound),
            Err(_) => Ok(None),
        }
    }

    /// Writes one transaction's worth of a bulk upsert. `known` maps the IDs believed to
    /// exist to their `created_at`; it is corrected when a concurrent writer proved it
    /// wrong, and the entry counter is moved to match before the chunk is tried again.
    async fn upsert_chunk(
        &self,
        organization: Uuid,
        store: Uuid,
        chunk: &[EntryWrite],
        mut known: HashMap<String, Timestamp>,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        loop {
            let entries: Vec<StoreEntry> = chunk
                .iter()
                .map(|write| {
                    stored_entry(write, known.get(&write.entry_id).copied().unwrap_or(now))
                })
                .collect();
            let items = entries
                .iter()
                .map(|entry| {
                    let put = Put::builder()
                        .table_name(&self.table)
                        .set_item(Some(entry_item(organization, store, entry, now)))
                        .return_values_on_condition_check_failure(
                            ReturnValuesOnConditionCheckFailure::AllOld,
                        );
                    let put = if known.contains_key(&entry.entry_id) {
                        put.condition_expression("attribute_exists(pk)")
                    } else {
                        put.condition_expression("attribute_not_exists(pk)")
                    };
                    Ok(TransactWriteItem::builder()
                        .put(build(put.build())?)
                        .build())
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let reasons = match self.transact(items).await? {
                Ok(()) => return Ok(entries),
                Err(reasons) => reasons,
            };
            let mut slots: i64 = 0;
            for (entry, reason) in entries.iter().zip(&reasons) {
                if !condition_failed(Some(reason)) {
                    continue;
                }
                match reason.item() {
                    // Created by someone else since we looked: it needs no slot of ours.
                    Some(existing) => {
                        known.insert(entry.entry_id.clone(), timestamp(existing, "created_at")?);
                        slots -= 1;
                    }
                    // Deleted by someone else since we looked: it now needs a slot.
                    None => {
                        known.remove(&entry.entry_id);
                        slots += 1;
                    }
                }
            }
            if slots != 0 {
                self.move_entry_count(organization, store, slots, max_entries)
                    .await?;
            }
        }
    }
}

/// Splits writes into transactions that respect both the item and the byte limit.
fn transaction_chunks(writes: &[EntryWrite]) -> Vec<&[EntryWrite]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, write) in writes.iter().enumerate() {
        // Attribute names, keys and timestamps add a few hundred bytes to each item.
        let size = 256
            + write.entry_id.len() * 2
            + write.display_name.len()
            + write.metadata.to_json().len();
        if index > start && (index - start == TRANSACTION_ITEMS || bytes + size > TRANSACTION_BYTES)
        {
            chunks.push(&writes[start..index]);
            start = index;
            bytes = 0;
        }
        bytes += size;
    }
    if start < writes.len() {
        chunks.push(&writes[start..]);
    }
    chunks
}

#[async_trait]
impl SharedStoreRepo for DynamoDb {
    async fn list_stores(&self, organization: Uuid) -> Result<Vec<SharedStore>, StoreError> {
        let mut stores = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":pk", s(format!("ORG#{organization}")))
                .expression_attribute_values(":prefix", s("STORE#"))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .context("listing shared stores")?;
            for item in page.items.unwrap_or_default() {
                stores.push(store_from(&item)?);
            }
            match page.last_evaluated_key {
                Some(next) => start = Some(next),
                None => return Ok(stores),
            }
        }
    }

    async fn create_store(
        &self,
        organization: Uuid,
        store: &SharedStore,
        max_stores: u32,
    ) -> Result<(), StoreError> {
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
        let items = vec![
            TransactWriteItem::builder().update(build(count)?).build(),
            TransactWriteItem::builder().put(build(put)?).build(),
        ];
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
            Err(UpdateItemError::ConditionalCheckFailedException(_)) => {
                Err(StoreError::StoreNotFound)
            }
            Err(other) => Err(anyhow::Error::new(other)
                .context("renaming a shared store")
                .into()),
        }
    }

    async fn delete_store(&self, organization: Uuid, store: Uuid) -> Result<(), StoreError> {
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .condition_expression("attribute_exists(pk)")
            .build();
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(organization_key(organization)))
            .update_expression("SET store_count = store_count - :one")
            .condition_expression("store_count > :zero")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":zero", n(0))
            .build();
        let items = vec![
            TransactWriteItem::builder().delete(build(delete)?).build(),
            TransactWriteItem::builder().update(build(count)?).build(),
        ];
        match self.transact(items).await? {
            Ok(()) => {}
            Err(reasons) if condition_failed(reasons.first()) => {
                return Err(StoreError::StoreNotFound)
            }
            Err(reasons) => {
                return Err(anyhow::anyhow!("store deletion cancelled: {reasons:?}").into())
            }
        }
        // The store is gone for every reader and writer now; its entries go after it.
        self.purge_entries(organization, store).await?;
        Ok(())
    }

    async fn list_entries(
        &self,
        organization: Uuid,
        store: Uuid,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        if self.store_item(organization, store).await?.is_none() {
            return Err(StoreError::StoreNotFound);
        }
        let mut entries = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(entries_pk(organization, store)))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .context("listing shared store entries")?;
            for item in page.items.unwrap_or_default() {
                entries.push(entry_from(&item)?);
            }
            match page.last_evaluated_key {
                Some(next) => start = Some(next),
                None => return Ok(entries),
            }
        }
    }

    async fn get_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry_id: &str,
    ) -> Result<StoreEntry, StoreError> {
        // One round trip reads the store and the entry, so an entry of a deleted store
        // is never served while its partition is being purged.
        let items = self
            .batch_get(
                vec![
                    store_key(organization, store),
                    entry_key(organization, store, entry_id),
                ],
                None,
            )
            .await?;
        let (stores, entries): (Vec<&Item>, Vec<&Item>) =
            items.iter().partition(|item| matches!(item.get("sk"), Some(super::AttributeValue::S(sk)) if sk.starts_with("STORE#")));
        if stores.is_empty() {
            return Err(StoreError::StoreNotFound);
        }
        match entries.first() {
            Some(item) => Ok(entry_from(item)?),
            None => Err(StoreError::EntryNotFound),
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
        let fresh = stored_entry(write, now);
        loop {
            let count = Update::builder()
                .table_name(&self.table)
                .set_key(Some(store_key(organization, store)))
                .update_expression("SET entry_count = entry_count + :one")
                .condition_expression("attribute_exists(pk) AND entry_count < :max")
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":max", n(max_entries))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build();
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(entry_item(organization, store, &fresh, now)))
                .condition_expression("attribute_not_exists(pk)")
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build();
            let items = vec![
                TransactWriteItem::builder().update(build(count)?).build(),
                TransactWriteItem::builder().put(build(put)?).build(),
            ];
            let reasons = match self.transact(items).await? {
                Ok(()) => return Ok(fresh),
                Err(reasons) => reasons,
            };
            let store_reason = reasons.first();
            if condition_failed(store_reason)
                && store_reason.and_then(CancellationReason::item).is_none()
            {
                return Err(StoreError::StoreNotFound);
            }
            // The entry exists (reported directly, or read back when the store is full):
            // replace it in place, which needs no slot.
            let existing = match reasons.get(1).and_then(CancellationReason::item) {
                Some(item) if condition_failed(reasons.get(1)) => Some(item.clone()),
                _ => {
                    self.entry_item(organization, store, &write.entry_id)
                        .await?
                }
            };
            let Some(existing) = existing else {
                if condition_failed(store_reason) {
                    return Err(StoreError::EntryLimitReached);
                }
                continue;
            };
            let replacement = stored_entry(write, timestamp(&existing, "created_at")?);
            if let Some(replaced) = self
                .replace_entry(organization, store, &replacement, now)
                .await?
            {
                return Ok(replaced);
            }
        }
    }

    async fn rename_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry_id: &str,
        rename: &EntryRename,
        now: Timestamp,
    ) -> Result<StoreEntry, StoreError> {
        loop {
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
                match self
                    .replace_entry(organization, store, &renamed, now)
                    .await?
                {
                    Some(entry) => return Ok(entry),
                    None => continue,
                }
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
            let items = vec![
                self.store_exists_check(organization, store)?,
                TransactWriteItem::builder().delete(build(delete)?).build(),
                TransactWriteItem::builder().put(build(put)?).build(),
            ];
            match self.transact(items).await? {
                Ok(()) => return Ok(renamed),
                Err(reasons) if condition_failed(reasons.first()) => {
                    return Err(StoreError::StoreNotFound)
                }
                Err(reasons) if condition_failed(reasons.get(2)) => {
                    return Err(StoreError::EntryIdTaken)
                }
                // The old entry changed under us: look again.
                Err(_) => continue,
            }
        }
    }

    async fn delete_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry_id: &str,
    ) -> Result<(), StoreError> {
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .update_expression("SET entry_count = entry_count - :one")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":one", n(1))
            .build();
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(entry_key(organization, store, entry_id)))
            .condition_expression("attribute_exists(pk)")
            .build();
        let items = vec![
            TransactWriteItem::builder().update(build(count)?).build(),
            TransactWriteItem::builder().delete(build(delete)?).build(),
        ];
        match self.transact(items).await? {
            Ok(()) => Ok(()),
            Err(reasons) if condition_failed(reasons.first()) => Err(StoreError::StoreNotFound),
            Err(_) => Err(StoreError::EntryNotFound),
        }
    }

    async fn upsert_entries(
        &self,
        organization: Uuid,
        store: Uuid,
        writes: &[EntryWrite],
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        let mut keys = vec![store_key(organization, store)];
        keys.extend(
            writes
                .iter()
                .map(|write| entry_key(organization, store, &write.entry_id)),
        );
        let found = self
            .batch_get(keys, Some("sk, entry_id, created_at"))
            .await?;
        let mut existing: HashMap<String, Timestamp> = HashMap::new();
        let mut store_found = false;
        for item in &found {
            match item.get("entry_id") {
                Some(super::AttributeValue::S(id)) => {
                    existing.insert(id.clone(), timestamp(item, "created_at")?);
                }
                _ => store_found = true,
            }
        }
        if !store_found {
            return Err(StoreError::StoreNotFound);
        }
        // Reserve every slot first: if the new IDs do not fit, nothing is written.
        let new_ids = writes
            .iter()
            .filter(|write| !existing.contains_key(&write.entry_id))
            .count() as i64;
        if new_ids > i64::from(max_entries) {
            return Err(StoreError::EntryLimitReached);
        }
        if new_ids > 0 {
            self.move_entry_count(organization, store, new_ids, max_entries)
                .await?;
        }
        let ids: HashSet<&str> = writes.iter().map(|write| write.entry_id.as_str()).collect();
        debug_assert_eq!(
            ids.len(),
            writes.len(),
            "bulk writes must have distinct IDs"
        );
        let chunks: Vec<_> = transaction_chunks(writes)
            .into_iter()
            .map(|chunk| {
                let known = chunk
                    .iter()
                    .filter_map(|write| {
                        existing
                            .get(&write.entry_id)
                            .map(|at| (write.entry_id.clone(), *at))
                    })
                    .collect();
                self.upsert_chunk(organization, store, chunk, known, now, max_entries)
            })
            .collect();
        let written: Vec<Vec<StoreEntry>> = stream::iter(chunks)
            .buffer_unordered(PARALLEL_REQUESTS)
            .try_collect()
            .await?;
        Ok(written.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(id: usize, metadata_bytes: usize) -> EntryWrite {
        let metadata = serde_json::json!({ "k": "x".repeat(metadata_bytes) });
        EntryWrite {
            entry_id: id.to_string(),
            display_name: "d".into(),
            metadata: Metadata::parse(Some(&metadata)).unwrap(),
        }
    }

    #[test]
    fn chunks_respect_item_and_byte_limits() {
        let small: Vec<EntryWrite> = (0..250).map(|i| write(i, 10)).collect();
        let sizes: Vec<usize> = transaction_chunks(&small)
            .iter()
            .map(|chunk| chunk.len())
            .collect();
        assert_eq!(sizes, vec![100, 100, 50]);
        let large: Vec<EntryWrite> = (0..30).map(|i| write(i, 250_000)).collect();
        for chunk in transaction_chunks(&large) {
            let bytes: usize = chunk.iter().map(|w| w.metadata.to_json().len()).sum();
            assert!(bytes <= TRANSACTION_BYTES, "{bytes}");
        }
        assert_eq!(
            transaction_chunks(&large)
                .iter()
                .map(|c| c.len())
                .sum::<usize>(),
            30
        );
    }
}
