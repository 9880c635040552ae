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
//! new IDs, and the reservation marks the store `reserved_by` its lease. The mark goes
//! when every reserved slot is accounted for: when the writes all landed (the lease's
//! release clears it), or when the slots of those that did not were given back (in the
//! same update). While a store carries the mark of a lease that ran out, nobody writes
//! its entries (`STORE_WRITABLE` requires no mark): whoever comes next takes the lease,
//! reads the dead bulk's journal, counts the IDs that never landed and gives their slots
//! back, then goes on. Every update that moves the counter is conditioned on the mark,
//! so the SDK's retry of an update whose answer was lost is recognised as done, never
//! applied twice.
//!
//! Timing (function timeout 29 s): a holder starts no write, and no retry of one, later
//! than [`WRITE_WINDOW`] after asking for the lease; a write started then ends within
//! one SDK call's budget; the lease runs [`LEASE`] from that same instant, longer than
//! all of that and shorter than the function timeout, so a store left by a killed
//! function is free again before the waiters' own function would time out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

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
use crate::domain::ids::OrganizationId;
use crate::domain::ids::StoreId;
use crate::domain::shared_stores::{EntryId, EntryWrite, StoreEntry, StoreError};
use crate::domain::time::Timestamp;

/// Condition on a store item: it exists and no lease on it is current (needs `:now`).
const LEASE_FREE: &str = "attribute_exists(pk) AND (attribute_not_exists(lease_until) OR lease_until < :now)";

/// Condition for writing a store's entries one at a time: no lease is current and no
/// reservation of a dead bulk waits for repair (needs `:now`).
pub(super) const STORE_WRITABLE: &str =
    "attribute_exists(pk) AND (attribute_not_exists(lease_until) OR lease_until < :now) \
     AND attribute_not_exists(reserved_by)";

/// How long a bulk upsert or store delete holds a store.
pub const LEASE: Duration = Duration::from_secs(25);
/// How long after taking the lease a bulk upsert may still start writes.
pub const WRITE_WINDOW: Duration = Duration::from_secs(10);
/// Entries deleted per purge transaction (one more item moves the counter).
const PURGE_TRANSACTION_ENTRIES: usize = 99;
/// Bytes of entry IDs per journal item, well under DynamoDB's 400 KB item limit.
const JOURNAL_ITEM_BYTES: usize = 300_000;

/// True when the store item carries a lease that has not run out at `now` (milliseconds
/// since the Unix epoch).
pub(super) fn lease_is_active(item: &Item, now: u64) -> bool {
    match item.get("lease_until") {
        Some(AttributeValue::N(until)) => until.parse::<u64>().is_ok_and(|until| until >= now),
        _ => false,
    }
}

/// True when the store item carries the reservation mark of some bulk.
pub(super) fn is_reserved(item: &Item) -> bool {
    item.contains_key("reserved_by")
}

/// True when the item's `name` attribute is the ID of `lease`.
fn names(item: &Item, name: &str, lease: Uuid) -> bool {
    matches!(item.get(name), Some(AttributeValue::S(id)) if *id == lease.to_string())
}

/// What became of a reservation.
enum Reservation {
    /// The slots are reserved and the store marked.
    Made,
    /// Refused, with nothing changed (no room, or the lease is lost).
    Refused(StoreError),
    /// Unknown: the update may have been applied. The journal and the mark (if made)
    /// stay for the next holder to repair.
    Unknown(anyhow::Error),
}

/// A held store lease.
pub(super) struct Lease {
    pub id: Uuid,
    /// The store's entry count once the lease was taken (nobody else changes it since).
    pub entry_count: u32,
    /// Just before the lease was asked for: its end was counted from then.
    taken: Instant,
}

impl Lease {
    /// True while new writes (and retries of writes) may still start under this lease.
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
    /// a bulk died after reserving slots in it.
    pub(super) async fn acquire_lease(
        &self,
        organization: OrganizationId,
        store: StoreId,
    ) -> Result<Lease, StoreError> {
        let lease = Uuid::new_v4();
        let mut waiting = STORE_LEASE_WAIT.start();
        loop {
            let taken = Instant::now();
            let now = self.now_millis();
            let acquired = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(keys::store(organization, store)))
                .update_expression("SET lease_id = :lease, lease_until = :until")
                .condition_expression(LEASE_FREE)
                .expression_attribute_values(":lease", s(lease.to_string()))
                .expression_attribute_values(":until", n(u128::from(now) + LEASE.as_millis()))
                .expression_attribute_values(":now", n(now))
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                .send()
                .await;
            let state = match acquired {
                Ok(output) => output.attributes.unwrap_or_default(),
                Err(error) => match error.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(failed)) => match failed.item() {
                        None => return Err(StoreError::StoreNotFound),
                        // The SDK retried an attempt whose answer was lost: it is ours.
                        Some(item) if names(item, "lease_id", lease) => item.clone(),
                        Some(_) => {
                            waiting
                                .wait("another bulk upsert or store delete holds the store")
                                .await
                                .map_err(anyhow::Error::from)?;
                            continue;
                        }
                    },
                    Some(UpdateItemError::TransactionConflictException(_)) => {
                        waiting.wait("a transaction on the store item").await.map_err(anyhow::Error::from)?;
                        continue;
                    }
                    _ => return Err(failure(error, "taking the store's bulk lease").into()),
                },
            };
            let mut held = Lease { id: lease, entry_count: 0, taken };
            match self.take_over(organization, store, &mut held, &state).await {
                Ok(()) => return Ok(held),
                Err(error) => {
                    if let Err(release) = self.release_lease(organization, store, &held, false).await {
                        tracing::warn!(error = %format!("{release:#}"), %store, "could not release a lease after a failed take-over");
                    }
                    return Err(error);
                }
            }
        }
    }

    /// Reads the state of a store just leased, repairing the reservation of a dead bulk.
    async fn take_over(
        &self,
        organization: OrganizationId,
        store: StoreId,
        held: &mut Lease,
        state: &Item,
    ) -> Result<(), StoreError> {
        held.entry_count = number(state, "entry_count")?;
        if let Some(AttributeValue::S(dead)) = state.get("reserved_by") {
            let dead =
                Uuid::parse_str(dead).map_err(|error| anyhow::Error::from(error).context("a reservation mark"))?;
            let missing = self.repair(organization, store, held, dead).await?;
            held.entry_count -= missing;
        }
        Ok(())
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
    /// it never wrote, and clears its mark; returns how many. Runs under `held`.
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
        let mut missing = (reserved.len() - landed) as u32;
        if missing > held.entry_count {
            // Cannot happen while every writer respects the mark; never go below zero.
            tracing::error!(%store, missing, count = held.entry_count, "a store counts fewer entries than a dead bulk reserved");
            missing = held.entry_count;
        }
        let repaired = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .update_expression("SET entry_count = entry_count - :missing REMOVE reserved_by")
            .condition_expression("lease_id = :lease AND reserved_by = :dead")
            .expression_attribute_values(":missing", n(missing))
            .expression_attribute_values(":lease", s(held.id.to_string()))
            .expression_attribute_values(":dead", s(dead.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        if let Err(error) = repaired {
            let applied = match error.as_service_error() {
                // A retried attempt finds its own work done: our lease, no mark.
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    failed.item().is_some_and(|item| names(item, "lease_id", held.id) && !is_reserved(item))
                }
                _ => false,
            };
            if !applied {
                return Err(failure(error, "repairing a store's entry count").into());
            }
        }
        tracing::warn!(
            %store,
            reserved = reserved.len(),
            missing,
            "repaired a store left by a bulk upsert that did not finish: gave back the slots of entries it never wrote"
        );
        // Only clean-up from here: the journal of a settled reservation is never read.
        let keys: Vec<Item> = journal.iter().map(key_of).collect();
        if let Err(error) = self.delete_items(keys).await {
            tracing::warn!(error = %format!("{error:#}"), %store, "could not delete a repaired bulk's journal");
        }
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

    /// Reserves `count` slots for `lease` and marks the store with the reservation;
    /// refused when they do not fit in `max_entries`.
    async fn reserve(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        count: u32,
        max_entries: u32,
    ) -> Reservation {
        let reserved = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::store(organization, store)))
            .update_expression("SET entry_count = entry_count + :count, reserved_by = :lease")
            .condition_expression("lease_id = :lease AND attribute_not_exists(reserved_by) AND entry_count <= :room")
            .expression_attribute_values(":count", n(count))
            .expression_attribute_values(":lease", s(lease.id.to_string()))
            .expression_attribute_values(":room", n(i64::from(max_entries) - i64::from(count)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let Err(error) = reserved else { return Reservation::Made };
        match error.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(failed)) => match failed.item() {
                // A retried attempt finds its own reservation made.
                Some(item) if names(item, "reserved_by", lease.id) => Reservation::Made,
                Some(item) if names(item, "lease_id", lease.id) => Reservation::Refused(StoreError::EntryLimitReached),
                _ => Reservation::Refused(anyhow::anyhow!("the bulk upsert lost its lease on the store").into()),
            },
            _ => Reservation::Unknown(failure(error, "reserving entry slots")),
        }
    }

    /// Gives back `count` reserved slots whose entries were not written, and clears the
    /// reservation mark in the same update.
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
            .update_expression("SET entry_count = entry_count - :count REMOVE reserved_by")
            .condition_expression("lease_id = :lease AND reserved_by = :lease")
            .expression_attribute_values(":count", n(count))
            .expression_attribute_values(":lease", s(lease.id.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let Err(error) = given else { return Ok(()) };
        match error.as_service_error() {
            // A retried attempt finds its own work done: our lease, no mark.
            Some(UpdateItemError::ConditionalCheckFailedException(failed))
                if failed.item().is_some_and(|item| names(item, "lease_id", lease.id) && !is_reserved(item)) =>
            {
                Ok(())
            }
            Some(UpdateItemError::ConditionalCheckFailedException(_)) => {
                anyhow::bail!("the bulk upsert lost its lease on the store before giving back its slots")
            }
            _ => Err(failure(error, "giving back reserved slots")),
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
        let existing = match self.existing_entries(organization, store, lease, writes).await {
            Ok(existing) => existing,
            Err(error) => return (Err(error.into()), true),
        };
        let new_ids: Vec<&EntryId> =
            writes.iter().map(|write| &write.entry_id).filter(|id| !existing.contains_key(*id)).collect();
        let new_count = new_ids.len() as u32;
        if new_count > max_entries {
            return (Err(StoreError::EntryLimitReached), true);
        }
        let journal = match self.reserve_new(organization, store, lease, &new_ids, max_entries).await {
            Ok(journal) => journal,
            Err((error, settled)) => return (Err(error), settled),
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
                // Every reserved slot has its entry: releasing the lease clears the mark.
                self.drop_journal(store, journal).await;
                (Ok(entries), true)
            }
            Err(error) => {
                // Still under our lease, so the store is exactly as we left it: give back
                // the slots of new entries that were not written before reporting.
                let settled = self.settle(organization, store, lease, &new_ids).await;
                match &settled {
                    Ok(()) => self.drop_journal(store, journal).await,
                    Err(problem) => {
                        tracing::warn!(error = %format!("{problem:#}"), %store, "left a bulk reservation for the next holder to repair")
                    }
                }
                (Err(error.context("bulk upsert writes").into()), settled.is_ok())
            }
        }
    }

    /// When each of the entries `writes` names that exists was created (an empty store,
    /// a first import, has nothing to read back).
    async fn existing_entries(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        writes: &[EntryWrite],
    ) -> anyhow::Result<HashMap<EntryId, Timestamp>> {
        if lease.entry_count == 0 {
            return Ok(HashMap::new());
        }
        let keys = writes.iter().map(|write| keys::entry(organization, store, &write.entry_id)).collect();
        self.batch_get(keys, Some("entry_id, created_at"))
            .await?
            .iter()
            .map(|item| Ok((EntryId::from_storage(text(item, "entry_id")?.to_owned()), timestamp(item, "created_at")?)))
            .collect()
    }

    /// Journals the new entries and reserves their slots under the lease: the journal's
    /// items, or the refusal and whether the reservation is settled (false leaves it for
    /// the next holder to repair).
    async fn reserve_new(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        new_ids: &[&EntryId],
        max_entries: u32,
    ) -> Result<Vec<Item>, (StoreError, bool)> {
        if new_ids.is_empty() {
            return Ok(Vec::new());
        }
        let journal = match self.write_journal(organization, store, lease, new_ids).await {
            Ok(journal) => journal,
            // Nothing is reserved: what was written of the journal is never read.
            Err(error) => return Err((error.into(), true)),
        };
        match self.reserve(organization, store, lease, new_ids.len() as u32, max_entries).await {
            Reservation::Made => Ok(journal),
            Reservation::Refused(refusal) => {
                self.drop_journal(store, journal).await;
                Err((refusal, true))
            }
            Reservation::Unknown(error) => Err((error.into(), false)),
        }
    }

    /// Deletes a journal whose reservation is settled; a journal left behind is never
    /// read (repairs read the journal of a marked lease only), so failing is harmless.
    async fn drop_journal(&self, store: StoreId, journal: Vec<Item>) {
        if let Err(error) = self.delete_items(journal).await {
            tracing::warn!(error = %format!("{error:#}"), %store, "could not delete a settled bulk's journal");
        }
    }

    /// After failed writes: gives back the slots of new IDs that did not land (which
    /// clears the mark); with all of them landed, the release will clear it.
    async fn settle(
        &self,
        organization: OrganizationId,
        store: StoreId,
        lease: &Lease,
        new_ids: &[&EntryId],
    ) -> anyhow::Result<()> {
        if new_ids.is_empty() {
            return Ok(());
        }
        let new_keys: Vec<Item> = new_ids.iter().map(|id| keys::entry(organization, store, id)).collect();
        let landed = self.batch_get(new_keys, Some("pk")).await?.len() as u32;
        let missing = new_ids.len() as u32 - landed;
        if missing > 0 {
            self.give_back(organization, store, lease, missing).await?;
        }
        Ok(())
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
