//! Shared stores in SQLite. Each store row counts its entries; every write that adds or
//! removes an entry moves that counter in the same `BEGIN IMMEDIATE` transaction after
//! checking the limit, so the limits hold under concurrent writers and the counter always
//! equals the entries, even when the process is killed in the middle.

use std::collections::HashMap;

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::{parsed, Db, Sqlite};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::StoreId;
use crate::domain::shared_stores::SharedStoreRepo;
use crate::domain::shared_stores::{EntryId, EntryRename, EntryWrite, Metadata, SharedStore, StoreEntry, StoreError};
use crate::domain::time::Timestamp;

const STORE_COLUMNS: &str = "id, name, source_type, entry_count, created_at, updated_at";
const ENTRY_COLUMNS: &str = "entry_id, display_name, metadata, created_at";

fn store_from(row: &Row<'_>) -> rusqlite::Result<SharedStore> {
    Ok(SharedStore {
        id: parsed(row, 0)?,
        name: row.get(1)?,
        source_type: row.get(2)?,
        entry_count: row.get(3)?,
        created_at: parsed(row, 4)?,
        updated_at: parsed(row, 5)?,
    })
}

fn entry_from(row: &Row<'_>) -> rusqlite::Result<StoreEntry> {
    let metadata: String = row.get(2)?;
    Ok(StoreEntry {
        entry_id: EntryId::from_storage(row.get(0)?),
        display_name: row.get(1)?,
        metadata: Metadata::from_json(&metadata)
            .map_err(|error| rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, error.into()))?,
        created_at: parsed(row, 3)?,
    })
}

/// The store's entry count, or `StoreNotFound`.
fn entry_count(transaction: &Connection, organization: OrganizationId, store: StoreId) -> Result<u32, StoreError> {
    let count = transaction
        .prepare_cached("SELECT entry_count FROM shared_stores WHERE organization_id = ?1 AND id = ?2")
        .db("reading a shared store")?
        .query_row([organization.to_string(), store.to_string()], |row| row.get(0))
        .optional()
        .db("reading a shared store")?;
    count.ok_or(StoreError::StoreNotFound)
}

fn find_entry(
    transaction: &Connection,
    organization: OrganizationId,
    store: StoreId,
    entry_id: &EntryId,
) -> anyhow::Result<Option<StoreEntry>> {
    transaction
        .prepare_cached(&format!(
            "SELECT {ENTRY_COLUMNS} FROM store_entries WHERE organization_id = ?1 AND store_id = ?2 AND entry_id = ?3"
        ))
        .db("reading a shared store entry")?
        .query_row(params![organization.to_string(), store.to_string(), entry_id.as_str()], entry_from)
        .optional()
        .db("reading a shared store entry")
}

fn existing_created_at(
    transaction: &Connection,
    organization: OrganizationId,
    store: StoreId,
    entry_id: &EntryId,
) -> anyhow::Result<Option<Timestamp>> {
    transaction
        .prepare_cached(
            "SELECT created_at FROM store_entries WHERE organization_id = ?1 AND store_id = ?2 AND entry_id = ?3",
        )
        .db("reading a shared store entry")?
        .query_row(params![organization.to_string(), store.to_string(), entry_id.as_str()], |row| parsed(row, 0))
        .optional()
        .db("reading a shared store entry")
}

/// IDs looked up per statement by [`existing_created_ats`].
const LOOKUP_CHUNK: usize = 500;

/// When each of the written IDs that exist was created, a few hundred IDs per statement.
fn existing_created_ats(
    transaction: &Connection,
    organization: OrganizationId,
    store: StoreId,
    writes: &[EntryWrite],
) -> anyhow::Result<HashMap<EntryId, Timestamp>> {
    let mut found = HashMap::new();
    for chunk in writes.chunks(LOOKUP_CHUNK) {
        let placeholders = (0..chunk.len()).map(|i| format!("?{}", i + 3)).collect::<Vec<_>>().join(", ");
        let mut statement = transaction
            .prepare_cached(&format!(
                "SELECT entry_id, created_at FROM store_entries
                 WHERE organization_id = ?1 AND store_id = ?2 AND entry_id IN ({placeholders})"
            ))
            .db("reading shared store entries")?;
        let (organization, store) = (organization.to_string(), store.to_string());
        let values = [organization.as_str(), store.as_str()]
            .into_iter()
            .chain(chunk.iter().map(|write| write.entry_id.as_str()));
        let rows = statement
            .query_map(rusqlite::params_from_iter(values), |row| {
                Ok((EntryId::from_storage(row.get(0)?), parsed(row, 1)?))
            })
            .db("reading shared store entries")?;
        for row in rows {
            let (id, created_at) = row.db("reading shared store entries")?;
            found.insert(id, created_at);
        }
    }
    Ok(found)
}

/// Writes entries of one store as the domain made them (a replacement carries its first
/// `created_at`), with one prepared statement and the store's key formatted once.
struct EntryRows<'c> {
    statement: rusqlite::CachedStatement<'c>,
    organization: String,
    store: String,
    now: String,
}

impl<'c> EntryRows<'c> {
    fn new(
        connection: &'c Connection,
        organization: OrganizationId,
        store: StoreId,
        now: Timestamp,
    ) -> anyhow::Result<Self> {
        let statement = connection
            .prepare_cached(
                "INSERT INTO store_entries (organization_id, store_id, entry_id, display_name, metadata, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (organization_id, store_id, entry_id) DO UPDATE SET display_name = excluded.display_name,
                     metadata = excluded.metadata, created_at = excluded.created_at, updated_at = excluded.updated_at",
            )
            .db("writing a shared store entry")?;
        Ok(Self { statement, organization: organization.to_string(), store: store.to_string(), now: now.to_string() })
    }

    fn write(&mut self, entry: &StoreEntry) -> anyhow::Result<()> {
        let created_at = entry.created_at.to_string();
        self.statement
            .execute(params![
                self.organization,
                self.store,
                entry.entry_id.as_str(),
                entry.display_name,
                entry.metadata.to_json(),
                created_at,
                self.now
            ])
            .db("writing a shared store entry")?;
        Ok(())
    }
}

fn move_count(
    transaction: &Connection,
    organization: OrganizationId,
    store: StoreId,
    delta: i64,
) -> anyhow::Result<()> {
    transaction
        .prepare_cached(
            "UPDATE shared_stores SET entry_count = entry_count + ?3 WHERE organization_id = ?1 AND id = ?2",
        )
        .db("counting shared store entries")?
        .execute(params![organization.to_string(), store.to_string(), delta])
        .db("counting shared store entries")?;
    Ok(())
}

#[async_trait]
impl SharedStoreRepo for Sqlite {
    async fn list_stores(&self, organization: OrganizationId) -> Result<Vec<SharedStore>, StoreError> {
        self.call(move |transaction| {
            let mut statement = transaction
                .prepare_cached(&format!("SELECT {STORE_COLUMNS} FROM shared_stores WHERE organization_id = ?1"))
                .db("listing shared stores")?;
            let stores = statement.query_map([organization.to_string()], store_from).db("listing shared stores")?;
            Ok(stores.collect::<Result<Vec<_>, _>>().db("listing shared stores")?)
        })
        .await
    }

    async fn create_store(
        &self,
        organization: OrganizationId,
        store: &SharedStore,
        max_stores: u32,
    ) -> Result<(), StoreError> {
        let store = store.clone();
        self.write(move |transaction| {
            let count: u32 = transaction
                .query_row("SELECT count(*) FROM shared_stores WHERE organization_id = ?1", [organization.to_string()], |row| {
                    row.get(0)
                })
                .db("counting shared stores")?;
            if count >= max_stores {
                return Err(StoreError::StoreLimitReached);
            }
            transaction
                .execute(
                    &format!("INSERT INTO shared_stores (organization_id, {STORE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6)"),
                    params![
                        organization.to_string(),
                        store.id.to_string(),
                        store.name,
                        store.source_type,
                        store.created_at.to_string(),
                        store.updated_at.to_string()
                    ],
                )
                .db("creating a shared store")?;
            Ok(())
        })
        .await
    }

    async fn rename_store(
        &self,
        organization: OrganizationId,
        store: StoreId,
        name: &str,
        now: Timestamp,
    ) -> Result<SharedStore, StoreError> {
        let name = name.to_owned();
        self.write(move |transaction| {
            let renamed = transaction
                .query_row(
                    &format!(
                        "UPDATE shared_stores SET name = ?3, updated_at = ?4 WHERE organization_id = ?1 AND id = ?2
                         RETURNING {STORE_COLUMNS}"
                    ),
                    params![organization.to_string(), store.to_string(), name, now.to_string()],
                    store_from,
                )
                .optional()
                .db("renaming a shared store")?;
            renamed.ok_or(StoreError::StoreNotFound)
        })
        .await
    }

    async fn delete_store(&self, organization: OrganizationId, store: StoreId) -> Result<(), StoreError> {
        self.write(move |transaction| {
            // Its entries go with it (ON DELETE CASCADE), in the same transaction.
            let deleted = transaction
                .execute(
                    "DELETE FROM shared_stores WHERE organization_id = ?1 AND id = ?2",
                    [organization.to_string(), store.to_string()],
                )
                .db("deleting a shared store")?;
            if deleted == 0 {
                return Err(StoreError::StoreNotFound);
            }
            Ok(())
        })
        .await
    }

    async fn list_entries(&self, organization: OrganizationId, store: StoreId) -> Result<Vec<StoreEntry>, StoreError> {
        self.read(move |transaction| {
            entry_count(transaction, organization, store)?;
            let mut statement = transaction
                .prepare_cached(&format!(
                    "SELECT {ENTRY_COLUMNS} FROM store_entries WHERE organization_id = ?1 AND store_id = ?2"
                ))
                .db("listing shared store entries")?;
            let entries = statement
                .query_map([organization.to_string(), store.to_string()], entry_from)
                .db("listing shared store entries")?;
            Ok(entries.collect::<Result<Vec<_>, _>>().db("listing shared store entries")?)
        })
        .await
    }

    async fn get_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
    ) -> Result<StoreEntry, StoreError> {
        let entry_id = entry_id.clone();
        // One statement, so no transaction around it; the store is read only to tell
        // which 404 a miss is.
        self.call(move |connection| match find_entry(connection, organization, store, &entry_id)? {
            Some(entry) => Ok(entry),
            None => {
                entry_count(connection, organization, store)?;
                Err(StoreError::EntryNotFound)
            }
        })
        .await
    }

    async fn put_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        write: &EntryWrite,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<StoreEntry, StoreError> {
        let write = write.clone();
        self.write(move |transaction| {
            let count = entry_count(transaction, organization, store)?;
            let created_at = existing_created_at(transaction, organization, store, &write.entry_id)?;
            if created_at.is_none() && count >= max_entries {
                return Err(StoreError::EntryLimitReached);
            }
            let entry = write.into_entry(created_at, now);
            EntryRows::new(transaction, organization, store, now)?.write(&entry)?;
            if created_at.is_none() {
                move_count(transaction, organization, store, 1)?;
            }
            Ok(entry)
        })
        .await
    }

    async fn rename_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
        rename: &EntryRename,
        now: Timestamp,
    ) -> Result<StoreEntry, StoreError> {
        let (entry_id, rename) = (entry_id.clone(), rename.clone());
        self.write(move |transaction| {
            let Some(current) = find_entry(transaction, organization, store, &entry_id)? else {
                entry_count(transaction, organization, store)?;
                return Err(StoreError::EntryNotFound);
            };
            let moving = rename.entry_id != entry_id;
            if moving && existing_created_at(transaction, organization, store, &rename.entry_id)?.is_some() {
                return Err(StoreError::EntryIdTaken);
            }
            let renamed = rename.apply(current);
            if moving {
                transaction
                    .execute(
                        "DELETE FROM store_entries WHERE organization_id = ?1 AND store_id = ?2 AND entry_id = ?3",
                        params![organization.to_string(), store.to_string(), entry_id.as_str()],
                    )
                    .db("renaming a shared store entry")?;
            }
            EntryRows::new(transaction, organization, store, now)?.write(&renamed)?;
            Ok(renamed)
        })
        .await
    }

    async fn delete_entry(
        &self,
        organization: OrganizationId,
        store: StoreId,
        entry_id: &EntryId,
    ) -> Result<(), StoreError> {
        let entry_id = entry_id.clone();
        self.write(move |transaction| {
            entry_count(transaction, organization, store)?;
            let deleted = transaction
                .execute(
                    "DELETE FROM store_entries WHERE organization_id = ?1 AND store_id = ?2 AND entry_id = ?3",
                    params![organization.to_string(), store.to_string(), entry_id.as_str()],
                )
                .db("deleting a shared store entry")?;
            if deleted == 0 {
                return Err(StoreError::EntryNotFound);
            }
            move_count(transaction, organization, store, -1)?;
            Ok(())
        })
        .await
    }

    async fn upsert_entries(
        &self,
        organization: OrganizationId,
        store: StoreId,
        writes: Vec<EntryWrite>,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        self.write(move |transaction| {
            let started = std::time::Instant::now();
            let count = entry_count(transaction, organization, store)?;
            // An empty store (a first import) has nothing to look up.
            let existing = if count == 0 {
                HashMap::new()
            } else {
                existing_created_ats(transaction, organization, store, &writes)?
            };
            let mut new_ids = 0u32;
            let mut entries = Vec::with_capacity(writes.len());
            for write in writes {
                let created_at = existing.get(&write.entry_id).copied();
                new_ids += u32::from(created_at.is_none());
                entries.push(write.into_entry(created_at, now));
            }
            // Nothing is written until the whole request is known to fit.
            if count + new_ids > max_entries {
                return Err(StoreError::EntryLimitReached);
            }
            let looked_up = started.elapsed();
            let mut rows = EntryRows::new(transaction, organization, store, now)?;
            for entry in &entries {
                rows.write(entry)?;
            }
            move_count(transaction, organization, store, i64::from(new_ids))?;
            tracing::debug!(
                %store,
                entries = entries.len(),
                new = new_ids,
                look_up_ms = looked_up.as_secs_f64() * 1000.0,
                write_ms = (started.elapsed() - looked_up).as_secs_f64() * 1000.0,
                "bulk upsert written (before commit)"
            );
            Ok(entries)
        })
        .await
    }
}
