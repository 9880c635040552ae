//! The store lease, bulk upserts under it, and store deletion.
//!
//! A bulk upsert takes a short lease on its store: while it holds it, every other writer
//! of the store's entries waits (their transactions require `STORE_WRITABLE`). With the
//! store to itself, the upsert knows exactly which IDs are new, reserves their slots in
//! one conditional update (refusing the whole request, writing nothing, when they do not
//! fit) and then writes with BatchWriteItem, which is several times faster than
//! conditional transactions and cannot race with anything.
//!
//! A bulk that dies between reserving and writing (a killed process) would leave slots
//! reserved for entries that never came. So before reserving it writes a journal of its
//! new IDs, and the reservation marks the store `reserved_by` its lease; a bulk that
//! finishes clears both. Whoever takes the lease next and finds the mark of a lease that
//! ran out reads that journal, counts the IDs that never landed, and gives their slots
//! back: the next bulk or delete repairs the store.
//!
//! Timing (function timeout 29 s): a holder starts no write later than [`WRITE_WINDOW`]
//! after taking the lease; writes in flight then finish within one SDK call's budget;
//! the lease runs [`LEASE`], longer than all of that, and shorter than the function
//! timeout, so a store left by a killed function is free again before the waiters'
//! own function would time out.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{Delete, ReturnValue, ReturnValuesOnConditionCheckFailure, Update};
use uuid::Uuid;

use super::shared_stores::entry_item;
use super::table::{
    condition_failed, delete_request, failure, key_of, n, number, put_request, s, text, timestamp,
    unless_condition_failed, AttributeValue, Item, TransactPart,
};
use super::{keys, DynamoDb};
use crate::core::retry::{self, STORE_LEASE_WAIT};
use crate::domain::identity::OrganizationId;
use crate::domain::shared_stores::{EntryId, EntryWrite, StoreEntry, StoreError, StoreId};
use crate::domain::time::Timestamp;

/// Condition on a store item: it exists and no lease on it is current (needs `:now`).
pub(super) const STORE_WRITABLE: &str =
    "attribute_exists(pk) AND (attribute_not_exists(lease_until) OR lease_until < :now)";

/// How long a bulk upsert or store delete holds a store.
pub const LEASE: Duration = Duration::from_secs(25);
/// How long after taking the lease a bulk upsert may still start writes.
pub const WRITE_WINDOW: Duration = Duration::from_secs(10);
/// Entries deleted per purge transaction (one more item moves the counter).
const PURGE_TRANSACTION_ENTRIES: usize = 99;
/// Bytes of entry IDs per journal item, well under DynamoDB's 400 KB item limit.
const JOURNAL_ITEM_BYTES: usize = 300_000;

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

/// A held store lease.
pub(super) struct Lease {
    pub id: Uuid,
    /// The store's entry count once the lease was taken (nobody else changes it since).
    pub entry_count: u32,
    taken: Instant,
}

impl Lease {
    /// True while new writes may still start under this lease.
    fn may_start_writes(&self) -> bool {
        self.taken.elapsed() < WRITE_WINDOW && retry::deadline().is_none_or(|deadline| Instant::now() < deadline)
    }
}

/// Splits entry IDs into journal items of at most [`JOURNAL_ITEM_BYTES`].
fn journal_chunks<'a>(ids: &[&'a EntryId]) -> Vec<Vec<&'a EntryId>> {
    let mut chunks: Vec<Vec<&EntryId>> = Vec::new();
    let mut bytes = JOURNAL_ITEM_BYTES;
    for id in ids {
        if bytes + id.as_str().len() > JOURNAL_ITEM_BYTES {
            chunks.push(Vec::new());
            bytes = 0;
        }
        bytes += id.as_str().len() + 8;
        if let Some(chunk) = chunks.last_mut() {
            chunk.push(id);
        }
    }
    chunks
}

impl DynamoDb {
    /// Takes the store's lease, waiting while another holds it, and repairs the store if
    /// the previous holder died after reserving slots.
    pub(super) async fn acquire_lease(
        &self,
        organization: OrganizationId,
        store: StoreId,
    ) -> Result<Lease, StoreError> {
        let lease = Uuid::new_v4();
        let mut waiting = STORE_LEASE_WAIT.start();
        loop {
            let now = now_millis();
            let acquired = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(keys::store(organization, store)))
                .update_expression("SET lease_id = :lease, lease_until = :until")
                .condition_expression(STORE_WRITABLE)
                .expression_attribute_values(":lease", s(lease.to_string()))
                .expression_attribute_values(":until", n(now + LEASE.as_millis()))
                .expression_attribute_values(":now", n(now))
                .return_values(ReturnValue::AllOld)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .send()
                .await;
            let error = match acquired {
                Ok(output) => {
                    let before = output.attributes.unwrap_or_default();
                    let mut held =
                        Lease { id: lease, entry_count: number(&before, "entry_count")?, taken: Instant::now() };
                    if let Some(AttributeValue::S(dead)) = before.get("reserved_by") {
                        let repaired = match Uuid::parse_str(dead) {
                            Ok(dead) => self.repair(organization, store, &held, dead).await,
                            Err(error) => Err(anyhow::Error::from(error).context("a store's reservation mark").into()),
                        };
                        match repaired {
                            Ok(missing) => held.entry_count = held.entry_count.saturating_sub(missing),
                            Err(error) => {
                                if let Err(release) = self.release_lease(organization, store, &held, false).await {
                                    tracing::warn!(error = %format!("{release:#}"), %store, "could not release a lease after a failed repair");
                                }
                                return Err(error);
                            }
                        }
                    }
                    return Ok(held);
                }
                Err(error) => error,
            };
            match error.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) if failed.item().is_none() => {
                    return Err(StoreError::StoreNotFound)
                }
                Some(
                    UpdateItemError::ConditionalCheckFailedException(_)
                    | UpdateItemError::TransactionConflictException(_),
                ) => waiting
                    .wait("another bulk upsert or store delete holds the store")
                    .await
                    .map_err(anyhow::Error::from)?,
                _ => return Err(failure(error, "taking the store's bulk lease").into()),
            }
        }
    }

    /// Releases a lease; with `settled`, also clears the store's reservation mark (the
    /// reserved slots all have their entries, or were given back).
    pub(super) async fn release_lease(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        settled: bool,
    ) -> anyhow::Result<()> {
        let expression =
            if settled { "REMOVE lease_id, lease_until, reserved_by" } else { "REMOVE lease_id, lease_until" };
        let released = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .update_expression(expression)
            .condition_expression("lease_id = :lease")
            .expression_attribute_values(":lease", s(lease.id.to_string()))
            .send()
            .await;
        unless_condition_failed(released, "releasing the store's bulk lease")?;
        Ok(())
    }

    /// Gives back the slots that the bulk upsert of the lease `dead` reserved for entries
    /// it never wrote; returns how many. Runs under `held`.
    async fn repair(
        &self,
        organization: OrganizationId,
        store: StoreId,
        held: &Lease,
        dead: Uuid,
    ) -> Result<u32, StoreError> {
        let journal = self
            .query_all(
                keys::journal_pk(organization, store),
                Some(&keys::journal_prefix(dead)),
                None,
                "reading a bulk upsert's journal",
            )
            .await?;
        let mut reserved: Vec<Item> = Vec::new();
        for item in &journal {
            if let Some(AttributeValue::L(ids)) = item.get("ids") {
                for id in ids {
                    if let AttributeValue::S(id) = id {
                        reserved.push(keys::entry(organization, store, &EntryId::from_storage(id.clone())));
                    }
                }
            }
        }
        let landed = if reserved.is_empty() { 0 } else { self.batch_get(reserved.clone(), Some("pk")).await?.len() };
        let missing = (reserved.len() - landed) as u32;
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .update_expression("SET entry_count = entry_count - :missing REMOVE reserved_by")
            .condition_expression("lease_id = :lease")
            .expression_attribute_values(":missing", n(missing))
            .expression_attribute_values(":lease", s(held.id.to_string()))
            .send()
            .await
            .map_err(|error| failure(error, "repairing a store's entry count"))?;
        tracing::warn!(
            %store,
            reserved = reserved.len(),
            missing,
            "repaired a store left by a bulk upsert that did not finish: gave back the slots of entries it never wrote"
        );
        let journal = journal.iter().map(|item| delete_request(key_of(item))).collect::<anyhow::Result<Vec<_>>>()?;
        self.batch_write(journal, &|| true).await?;
        Ok(missing)
    }

    /// Writes the journal of the new IDs a bulk upsert is about to reserve slots for.
    async fn write_journal(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        new_ids: &[&EntryId],
    ) -> anyhow::Result<Vec<Item>> {
        let mut keys_written = Vec::new();
        let mut requests = Vec::new();
        for (index, chunk) in journal_chunks(new_ids).into_iter().enumerate() {
            let mut item = keys::journal(organization, store, lease.id, index);
            keys_written.push(item.clone());
            item.insert("ids".into(), AttributeValue::L(chunk.iter().map(|id| s(id.as_str())).collect()));
            requests.push(put_request(item)?);
        }
        self.batch_write(requests, &|| true).await?;
        Ok(keys_written)
    }

    async fn delete_items(&self, keys: Vec<Item>) -> anyhow::Result<()> {
        let requests = keys.into_iter().map(delete_request).collect::<anyhow::Result<Vec<_>>>()?;
        self.batch_write(requests, &|| true).await
    }

    /// Reserves `count` slots for `lease`, marking the store as holding a reservation;
    /// refused when they do not fit in `max_entries`.
    async fn reserve(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        count: u32,
        max_entries: u32,
    ) -> Result<(), StoreError> {
        let reserved = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .update_expression("SET entry_count = entry_count + :count, reserved_by = :lease")
            .condition_expression("lease_id = :lease AND entry_count <= :room")
            .expression_attribute_values(":count", n(count))
            .expression_attribute_values(":lease", s(lease.id.to_string()))
            .expression_attribute_values(":room", n(i64::from(max_entries) - i64::from(count)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let Err(error) = reserved else { return Ok(()) };
        match error.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                let ours = matches!(failed.item().and_then(|item| item.get("lease_id")),
                    Some(AttributeValue::S(id)) if *id == lease.id.to_string());
                if ours {
                    Err(StoreError::EntryLimitReached)
                } else {
                    Err(anyhow::anyhow!("the bulk upsert lost its lease on the store").into())
                }
            }
            _ => Err(failure(error, "reserving entry slots").into()),
        }
    }

    /// Gives back `count` reserved slots whose entries were not written.
    async fn give_back(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        count: u32,
    ) -> anyhow::Result<()> {
        let given = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .update_expression("SET entry_count = entry_count - :count")
            .condition_expression("lease_id = :lease")
            .expression_attribute_values(":count", n(count))
            .expression_attribute_values(":lease", s(lease.id.to_string()))
            .send()
            .await;
        match unless_condition_failed(given, "giving back reserved slots")? {
            Some(_) => Ok(()),
            None => anyhow::bail!("the bulk upsert lost its lease on the store before giving back its slots"),
        }
    }

    /// Takes the lease, upserts, and releases the lease; the reservation mark is cleared
    /// only when every reserved slot is accounted for.
    pub(super) async fn upsert_under_lease(
        &self,
        organization: OrganizationId,
        store: StoreId,
        writes: &[EntryWrite],
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        let lease = self.acquire_lease(organization, store).await?;
        let (result, settled) = self.upsert_leased(organization, store, &lease, writes, now, max_entries).await;
        if let Err(error) = self.release_lease(organization, store, &lease, settled).await {
            // It runs out by itself; the next holder repairs what is not settled.
            tracing::warn!(error = %format!("{error:#}"), %store, "could not release a bulk upsert lease");
        }
        result
    }

    /// Upserts distinct entries while holding the store's lease; also says whether the
    /// reservation is settled (false leaves it for the next holder to repair).
    async fn upsert_leased(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        writes: &[EntryWrite],
        now: Timestamp,
        max_entries: u32,
    ) -> (Result<Vec<StoreEntry>, StoreError>, bool) {
        let started = Instant::now();
        // An empty store (a first import) has nothing to read back.
        let existing: HashMap<EntryId, Timestamp> = if lease.entry_count == 0 {
            HashMap::new()
        } else {
            let keys = writes.iter().map(|write| keys::entry(organization, store, &write.entry_id)).collect();
            let read = async {
                self.batch_get(keys, Some("entry_id, created_at"))
                    .await?
                    .iter()
                    .map(|item| {
                        Ok((EntryId::from_storage(text(item, "entry_id")?.to_owned()), timestamp(item, "created_at")?))
                    })
                    .collect::<anyhow::Result<_>>()
            };
            match read.await {
                Ok(existing) => existing,
                Err(error) => return (Err(error.into()), true),
            }
        };
        let new_ids: Vec<&EntryId> =
            writes.iter().map(|write| &write.entry_id).filter(|id| !existing.contains_key(*id)).collect();
        let new_count = new_ids.len() as u32;
        if new_count > max_entries {
            return (Err(StoreError::EntryLimitReached), true);
        }
        let journal = if new_count == 0 {
            Vec::new()
        } else {
            let journal = match self.write_journal(organization, store, lease, &new_ids).await {
                Ok(journal) => journal,
                Err(error) => return (Err(error.into()), true),
            };
            if let Err(refused) = self.reserve(organization, store, lease, new_count, max_entries).await {
                let cleaned = self.delete_items(journal).await;
                return (Err(refused), cleaned.is_ok());
            }
            journal
        };
        let entries: Vec<StoreEntry> =
            writes.iter().map(|write| write.clone().into_entry(existing.get(&write.entry_id).copied(), now)).collect();
        let reserved_at = started.elapsed();
        let requests = entries.iter().map(|entry| put_request(entry_item(organization, store, entry, now))).collect();
        let written = match requests {
            Ok(requests) => self.batch_write(requests, &|| lease.may_start_writes()).await,
            Err(error) => Err(error),
        };
        match written {
            Ok(()) => {
                tracing::debug!(
                    %store,
                    entries = entries.len(),
                    new = new_count,
                    read_and_reserve_ms = reserved_at.as_millis() as u64,
                    write_ms = (started.elapsed() - reserved_at).as_millis() as u64,
                    "bulk upsert written"
                );
                let settled = self.delete_items(journal).await.is_ok();
                (Ok(entries), settled)
            }
            Err(error) => {
                // Still under our lease, so the store is exactly as we left it: give back
                // the slots of new entries that were not written before reporting.
                let settled = self.settle(organization, store, lease, &new_ids, journal).await;
                if let Err(problem) = &settled {
                    tracing::warn!(error = %format!("{problem:#}"), %store, "left a bulk reservation for the next holder to repair");
                }
                (Err(error.context("bulk upsert writes").into()), settled.is_ok())
            }
        }
    }

    /// After failed writes: gives back the slots of new IDs that did not land, then drops
    /// the journal.
    async fn settle(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        new_ids: &[&EntryId],
        journal: Vec<Item>,
    ) -> anyhow::Result<()> {
        if !new_ids.is_empty() {
            let new_keys: Vec<Item> = new_ids.iter().map(|id| keys::entry(organization, store, id)).collect();
            let landed = self.batch_get(new_keys, Some("pk")).await?.len() as u32;
            let missing = new_ids.len() as u32 - landed;
            if missing > 0 {
                self.give_back(organization, store, lease, missing).await?;
            }
        }
        self.delete_items(journal).await
    }

    /// Deletes a store: under its lease the entries go first, in transactions that also
    /// move the entry counter, then the journals, then the store item. If this stops
    /// half-way the store still exists, exact, with fewer entries, and can be deleted
    /// again: entries never outlive their store, so reading an entry needs no read of
    /// the store.
    pub(super) async fn delete_store_leased(
        &self,
        organization: OrganizationId,
        store: StoreId,
    ) -> Result<(), StoreError> {
        let lease = self.acquire_lease(organization, store).await?;
        let deleted = self.purge_and_delete(organization, store, &lease).await;
        if deleted.is_err() {
            if let Err(error) = self.release_lease(organization, store, &lease, true).await {
                tracing::warn!(error = %format!("{error:#}"), %store, "could not release a store deletion lease");
            }
        }
        deleted
    }

    async fn purge_and_delete(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        let entries = self
            .query_all(keys::entries_pk(organization, store), None, Some("pk, sk"), "listing entries to delete")
            .await?;
        for chunk in entries.chunks(PURGE_TRANSACTION_ENTRIES) {
            let count = Update::builder()
                .table_name(&self.table)
                .set_key(Some(keys::store(organization, store)))
                .update_expression("SET entry_count = entry_count - :count")
                .condition_expression("lease_id = :lease")
                .expression_attribute_values(":lease", s(lease.id.to_string()))
                .expression_attribute_values(":count", n(chunk.len()))
                .build();
            let mut items = vec![count.into_part()?];
            for key in chunk {
                items.push(Delete::builder().table_name(&self.table).set_key(Some(key.clone())).build().into_part()?);
            }
            if let Err(reasons) = self.transact(items, "purging a store's entries").await? {
                return Err(anyhow::anyhow!("store purge cancelled, lease lost: {reasons:?}").into());
            }
        }
        let journals = self
            .query_all(keys::journal_pk(organization, store), None, Some("pk, sk"), "listing a store's bulk journals")
            .await?;
        self.delete_items(journals).await?;
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .condition_expression("lease_id = :lease")
            .expression_attribute_values(":lease", s(lease.id.to_string()))
            .build();
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(keys::organization(organization)))
            .update_expression("SET store_count = store_count - :one")
            .condition_expression("store_count > :zero")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":zero", n(0))
            .build();
        let items = vec![delete.into_part()?, count.into_part()?];
        match self.transact(items, "deleting a shared store").await? {
            Ok(()) => Ok(()),
            Err(reasons) if condition_failed(reasons.first()) => {
                Err(anyhow::anyhow!("store deletion cancelled, lease lost: {reasons:?}").into())
            }
            Err(reasons) => Err(anyhow::anyhow!("store deletion cancelled: {reasons:?}").into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    use crate::core::retry::{AWS_SDK_CALLS, REQUEST_BUDGET};

    #[test]
    fn journal_chunks_stay_under_the_item_limit_and_keep_every_id() {
        let ids: Vec<EntryId> = (0..5000).map(|i| EntryId::parse(&format!("{i:0>1000}")).unwrap()).collect();
        let refs: Vec<&EntryId> = ids.iter().collect();
        let chunks = journal_chunks(&refs);
        assert!(chunks.len() > 1);
        assert!(chunks
            .iter()
            .all(|chunk| chunk.iter().map(|id| id.as_str().len() + 8).sum::<usize>() <= JOURNAL_ITEM_BYTES));
        let kept: HashSet<&str> = chunks.iter().flatten().map(|id| id.as_str()).collect();
        assert_eq!(kept.len(), 5000);
        assert!(journal_chunks(&[]).is_empty());
    }

    #[test]
    fn a_holder_finishes_its_writes_before_its_lease_runs_out() {
        // The last write starts within the window and ends within one SDK call's budget;
        // what is left of the lease covers settling and releasing.
        assert!(WRITE_WINDOW + AWS_SDK_CALLS.budget + Duration::from_secs(5) <= LEASE);
        assert!(REQUEST_BUDGET < LEASE);
    }
}
