//! The store lease, bulk upserts under it, batch reads and writes, and store deletion.
//!
//! A bulk upsert takes a short lease on its store: while it holds it, every other
//! writer of the store's entries waits (their transactions require `STORE_WRITABLE`).
//! With the store to itself, the upsert knows exactly which IDs are new, reserves their
//! slots in one conditional update (refusing the whole request, writing nothing, when
//! they do not fit) and then writes with BatchWriteItem, which is several times faster
//! than conditional transactions and cannot race with anything.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    Delete, KeysAndAttributes, PutRequest, ReturnValue, ReturnValuesOnConditionCheckFailure, Update, WriteRequest,
};
use futures::stream::{self, StreamExt, TryStreamExt};
use uuid::Uuid;

use super::shared_stores::{
    build, entries_pk, entry_item, entry_key, organization_key, store_key, stored_entry, TransactPart,
};
use super::{backoff, n, number, s, timestamp, AttributeValue, DynamoDb, Item};
use crate::domain::shared_stores::{EntryWrite, StoreEntry, StoreError};
use crate::domain::time::Timestamp;

/// Condition on a store item: it exists and no bulk upsert holds it (needs `:now`).
pub(super) const STORE_WRITABLE: &str =
    "attribute_exists(pk) AND (attribute_not_exists(lease_until) OR lease_until < :now)";

/// How long a bulk upsert may hold a store. Longer than a Lambda's timeout, so the
/// lease of a crashed upsert always runs out.
const LEASE: Duration = Duration::from_secs(40);
/// How long a writer waits for a lease before giving up.
const LEASE_WAIT: Duration = Duration::from_secs(45);
/// Keys per BatchGetItem (DynamoDB's limit).
const BATCH_GET_KEYS: usize = 100;
/// Requests per BatchWriteItem (DynamoDB's limit).
const BATCH_WRITE_REQUESTS: usize = 25;
/// Entries deleted per purge transaction (one more item moves the counter).
const PURGE_TRANSACTION_ENTRIES: usize = 99;
/// Requests kept in flight by batch reads and writes (16 measured slower for reads).
const PARALLEL_REQUESTS: usize = 8;

/// Milliseconds since the Unix epoch, the unit of `lease_until`.
pub(super) fn now_millis() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis())
}

/// True when the store item carries a lease that has not run out.
pub(super) fn lease_is_active(item: &Item) -> bool {
    match item.get("lease_until") {
        Some(AttributeValue::N(until)) => until.parse::<u128>().is_ok_and(|until| until >= now_millis()),
        _ => false,
    }
}

/// Sleeps before another attempt at a store held by a bulk upsert; gives up (as a
/// backend failure) after [`LEASE_WAIT`].
pub(super) async fn wait_for_lease(waiting: &mut (u32, Instant)) -> Result<(), StoreError> {
    if waiting.1.elapsed() > LEASE_WAIT {
        return Err(anyhow::anyhow!("the store stayed locked by a bulk upsert for {LEASE_WAIT:?}").into());
    }
    // Slower than conflict retries: a bulk upsert holds a store for a second or more,
    // and each refused attempt costs write capacity.
    waiting.0 += 1;
    let ceiling_ms = (25u64 << waiting.0.min(6)).min(1000);
    let jitter = (Uuid::new_v4().as_u128() % u128::from(ceiling_ms / 2)) as u64;
    tokio::time::sleep(Duration::from_millis(ceiling_ms / 2 + jitter)).await;
    Ok(())
}

/// A held store lease.
pub(super) struct Lease {
    pub id: Uuid,
    /// The store's entry count when the lease was taken (nobody else changes it since).
    pub entry_count: u32,
}

impl DynamoDb {
    /// Takes the store's lease, waiting while another holds it; returns the lease and the
    /// store's entry count at that moment.
    pub(super) async fn acquire_lease(&self, organization: Uuid, store: Uuid) -> Result<Lease, StoreError> {
        let lease = Uuid::new_v4();
        let mut waiting = (0, Instant::now());
        loop {
            let now = now_millis();
            let acquired = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(store_key(organization, store)))
                .update_expression("SET lease_id = :lease, lease_until = :until")
                .condition_expression(STORE_WRITABLE)
                .expression_attribute_values(":lease", s(lease.to_string()))
                .expression_attribute_values(":until", n(now + LEASE.as_millis()))
                .expression_attribute_values(":now", n(now))
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .send()
                .await
                .map_err(|error| error.into_service_error());
            match acquired {
                Ok(output) => {
                    let entry_count = number(&output.attributes.unwrap_or_default(), "entry_count")?;
                    return Ok(Lease { id: lease, entry_count });
                }
                Err(UpdateItemError::ConditionalCheckFailedException(failed)) if failed.item().is_none() => {
                    return Err(StoreError::StoreNotFound)
                }
                Err(
                    UpdateItemError::ConditionalCheckFailedException(_)
                    | UpdateItemError::TransactionConflictException(_),
                ) => wait_for_lease(&mut waiting).await?,
                Err(other) => return Err(anyhow::Error::new(other).context("taking the store's bulk lease").into()),
            }
        }
    }

    pub(super) async fn release_lease(&self, organization: Uuid, store: Uuid, lease: &Lease) -> anyhow::Result<()> {
        let released = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .update_expression("REMOVE lease_id, lease_until")
            .condition_expression("lease_id = :lease")
            .expression_attribute_values(":lease", s(lease.id.to_string()))
            .send()
            .await
            .map_err(|error| error.into_service_error());
        match released {
            Ok(_) | Err(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(()),
            Err(other) => Err(anyhow::Error::new(other).context("releasing the store's bulk lease")),
        }
    }

    /// Moves the entry counter by `delta` while holding `lease`; a positive move must
    /// stay within `max_entries`.
    async fn move_entry_count(
        &self,
        organization: Uuid,
        store: Uuid,
        lease: &Lease,
        delta: i64,
        max_entries: u32,
    ) -> Result<(), StoreError> {
        let moved = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .update_expression("SET entry_count = entry_count + :delta")
            .condition_expression("lease_id = :lease AND entry_count <= :room")
            .expression_attribute_values(":delta", n(delta))
            .expression_attribute_values(":lease", s(lease.id.to_string()))
            .expression_attribute_values(":room", n(i64::from(max_entries) - delta.max(0)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await
            .map_err(|error| error.into_service_error());
        match moved {
            Ok(_) => Ok(()),
            Err(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                let ours = matches!(failed.item().and_then(|item| item.get("lease_id")), Some(AttributeValue::S(id)) if *id == lease.id.to_string());
                if ours {
                    Err(StoreError::EntryLimitReached)
                } else {
                    Err(anyhow::anyhow!("the bulk upsert lost its lease on the store").into())
                }
            }
            Err(other) => Err(anyhow::Error::new(other).context("moving the entry counter").into()),
        }
    }

    /// Upserts distinct entries while holding the store's lease.
    pub(super) async fn upsert_leased(
        &self,
        organization: Uuid,
        store: Uuid,
        lease: &Lease,
        writes: &[EntryWrite],
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        let started = Instant::now();
        // An empty store (a first import) has nothing to read back.
        let existing: HashMap<String, Timestamp> = if lease.entry_count == 0 {
            HashMap::new()
        } else {
            let keys = writes.iter().map(|write| entry_key(organization, store, &write.entry_id)).collect();
            self.batch_get(keys, Some("entry_id, created_at"))
                .await?
                .iter()
                .map(|item| Ok((super::text(item, "entry_id")?.to_owned(), timestamp(item, "created_at")?)))
                .collect::<anyhow::Result<_>>()?
        };
        let entries: Vec<StoreEntry> = writes
            .iter()
            .map(|write| stored_entry(write, existing.get(&write.entry_id).copied().unwrap_or(now)))
            .collect();
        let new_ids = (writes.len() - existing.len()) as i64;
        if new_ids > i64::from(max_entries) {
            return Err(StoreError::EntryLimitReached);
        }
        if new_ids > 0 {
            self.move_entry_count(organization, store, lease, new_ids, max_entries).await?;
        }
        let requests = entries
            .iter()
            .map(|entry| {
                let put =
                    build(PutRequest::builder().set_item(Some(entry_item(organization, store, entry, now))).build())?;
                Ok(WriteRequest::builder().put_request(put).build())
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let deadline = LEASE.saturating_sub(Duration::from_secs(5)).saturating_sub(started.elapsed());
        let read_and_reserved = started.elapsed();
        let written = tokio::time::timeout(deadline, self.batch_write_all(requests)).await;
        if let Ok(Ok(())) = written {
            tracing::debug!(
                %store,
                entries = entries.len(),
                new = new_ids,
                read_and_reserve_ms = read_and_reserved.as_millis() as u64,
                write_ms = (started.elapsed() - read_and_reserved).as_millis() as u64,
                "bulk upsert written"
            );
            return Ok(entries);
        }
        // Still under our lease, so the store is exactly as we left it: give back the
        // slots of new entries that were not written before reporting the failure.
        let new_keys: Vec<Item> = entries
            .iter()
            .filter(|entry| !existing.contains_key(&entry.entry_id))
            .map(|entry| entry_key(organization, store, &entry.entry_id))
            .collect();
        let landed = self.batch_get(new_keys, Some("pk")).await?.len() as i64;
        if landed < new_ids {
            self.move_entry_count(organization, store, lease, landed - new_ids, max_entries).await?;
        }
        Err(match written {
            Ok(Err(error)) => error.context("bulk upsert writes").into(),
            _ => anyhow::anyhow!("bulk upsert did not finish within its lease").into(),
        })
    }

    /// Every item of a partition (optionally with a sort-key prefix), page after page.
    pub(super) async fn query_all(
        &self,
        pk: String,
        sk_prefix: Option<&str>,
        projection: Option<&str>,
    ) -> anyhow::Result<Vec<Item>> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .expression_attribute_values(":pk", s(&pk))
                .consistent_read(true)
                .set_projection_expression(projection.map(str::to_owned))
                .set_exclusive_start_key(start.take());
            query = match sk_prefix {
                Some(prefix) => query
                    .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                    .expression_attribute_values(":prefix", s(prefix)),
                None => query.key_condition_expression("pk = :pk"),
            };
            let page = query.send().await?;
            items.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(next) => start = Some(next),
                None => return Ok(items),
            }
        }
    }

    /// Reads many keys with strongly consistent BatchGetItem calls, several in flight.
    pub(super) async fn batch_get(&self, keys: Vec<Item>, projection: Option<&str>) -> anyhow::Result<Vec<Item>> {
        let chunks: Vec<Vec<Item>> = keys.chunks(BATCH_GET_KEYS).map(<[Item]>::to_vec).collect();
        let pages: Vec<Vec<Item>> = stream::iter(chunks)
            .map(|chunk| self.batch_get_chunk(chunk, projection))
            .buffer_unordered(PARALLEL_REQUESTS)
            .try_collect()
            .await?;
        Ok(pages.into_iter().flatten().collect())
    }

    async fn batch_get_chunk(&self, keys: Vec<Item>, projection: Option<&str>) -> anyhow::Result<Vec<Item>> {
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
            if let Some(items) = output.responses.and_then(|mut tables| tables.remove(&self.table)) {
                found.extend(items);
            }
            match output.unprocessed_keys.and_then(|mut tables| tables.remove(&self.table)) {
                Some(rest) if !rest.keys.is_empty() => {
                    attempt += 1;
                    backoff(attempt).await;
                    pending = rest;
                }
                _ => return Ok(found),
            }
        }
    }

    /// Writes requests with BatchWriteItem, several calls in flight, retrying what
    /// DynamoDB leaves unprocessed.
    pub(super) async fn batch_write_all(&self, requests: Vec<WriteRequest>) -> anyhow::Result<()> {
        let chunks: Vec<Vec<WriteRequest>> =
            requests.chunks(BATCH_WRITE_REQUESTS).map(<[WriteRequest]>::to_vec).collect();
        stream::iter(chunks)
            .map(|chunk| self.batch_write(chunk))
            .buffer_unordered(PARALLEL_REQUESTS)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
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
            requests = output.unprocessed_items.and_then(|mut tables| tables.remove(&self.table)).unwrap_or_default();
            if !requests.is_empty() {
                attempt += 1;
                backoff(attempt).await;
            }
        }
        Ok(())
    }

    /// Deletes a store: under its lease the entries go first, in transactions that also
    /// move the entry counter, then the store item. If this stops half-way the store
    /// still exists, exact, with fewer entries, and can be deleted again: entries never
    /// outlive their store, so reading an entry needs no read of the store.
    pub(super) async fn delete_store_leased(&self, organization: Uuid, store: Uuid) -> Result<(), StoreError> {
        let lease = self.acquire_lease(organization, store).await?;
        let deleted = self.purge_and_delete(organization, store, &lease).await;
        if deleted.is_err() {
            if let Err(error) = self.release_lease(organization, store, &lease).await {
                tracing::warn!(error = %format!("{error:#}"), %store, "could not release a store deletion lease");
            }
        }
        deleted
    }

    async fn purge_and_delete(&self, organization: Uuid, store: Uuid, lease: &Lease) -> Result<(), StoreError> {
        let keys = self
            .query_all(entries_pk(organization, store), None, Some("pk, sk"))
            .await
            .context("listing entries to delete")?;
        for chunk in keys.chunks(PURGE_TRANSACTION_ENTRIES) {
            let count = Update::builder()
                .table_name(&self.table)
                .set_key(Some(store_key(organization, store)))
                .update_expression("SET entry_count = entry_count - :count")
                .condition_expression("lease_id = :lease")
                .expression_attribute_values(":lease", s(lease.id.to_string()))
                .expression_attribute_values(":count", n(chunk.len()))
                .build();
            let mut items = vec![count.into_part()?];
            for key in chunk {
                items.push(Delete::builder().table_name(&self.table).set_key(Some(key.clone())).build().into_part()?);
            }
            if let Err(reasons) = self.transact(items).await? {
                return Err(anyhow::anyhow!("store purge cancelled, lease lost: {reasons:?}").into());
            }
        }
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(store_key(organization, store)))
            .condition_expression("lease_id = :lease")
            .expression_attribute_values(":lease", s(lease.id.to_string()))
            .build();
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(organization_key(organization)))
            .update_expression("SET store_count = store_count - :one")
            .condition_expression("store_count > :zero")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":zero", n(0))
            .build();
        let items = vec![delete.into_part()?, count.into_part()?];
        match self.transact(items).await? {
            Ok(()) => Ok(()),
            Err(reasons) => Err(anyhow::anyhow!("store deletion cancelled: {reasons:?}").into()),
        }
    }
}
