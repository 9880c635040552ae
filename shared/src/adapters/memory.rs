//! The embedded backend: every port in process memory, behind one lock, so each
//! operation is atomic exactly like a conditional write.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use uuid::Uuid;

use crate::domain::agents::{Agent, AgentQuery, AgentRecord};
use crate::domain::identity::{ApiKeyRecord, Organization};
use crate::domain::shared_stores::{EntryRename, EntryWrite, SharedStore, StoreEntry, StoreError};
use crate::domain::time::Timestamp;
use crate::domain::uploads::{MediaInfo, SealedBlob, Upload, UploadStatus};
use crate::domain::workspaces::Workspace;
use crate::ports::{AgentRepo, IdentityRepo, SharedStoreRepo, UploadRepo};

#[derive(Default)]
struct State {
    organizations: HashMap<Uuid, Organization>,
    api_keys: HashMap<String, ApiKeyRecord>,
    stores: HashMap<Uuid, HashMap<Uuid, StoreState>>,
    workspaces: HashMap<Uuid, BTreeMap<Uuid, Workspace>>,
    /// Agents per organization, in ID (creation) order; the flag marks soft deletion.
    agents: HashMap<Uuid, BTreeMap<Uuid, (AgentRecord, bool)>>,
    uploads: HashMap<(Uuid, Uuid), Upload>,
}

struct StoreState {
    store: SharedStore,
    entries: HashMap<String, StoreEntry>,
}

impl StoreState {
    fn view(&self) -> SharedStore {
        SharedStore { entry_count: self.entries.len() as u32, ..self.store.clone() }
    }
}

/// The in-memory backend.
#[derive(Default)]
pub struct MemoryBackend {
    state: Mutex<State>,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied write: every
        // operation validates before it mutates.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn store_mut(&mut self, organization: Uuid, store: Uuid) -> Result<&mut StoreState, StoreError> {
        self.stores.get_mut(&organization).and_then(|stores| stores.get_mut(&store)).ok_or(StoreError::StoreNotFound)
    }
}

fn entry_from(write: &EntryWrite, created_at: Timestamp) -> StoreEntry {
    StoreEntry {
        entry_id: write.entry_id.clone(),
        display_name: write.display_name.clone(),
        metadata: write.metadata.clone(),
        created_at,
    }
}

#[async_trait]
impl IdentityRepo for MemoryBackend {
    async fn api_key(&self, key_hash: &str) -> anyhow::Result<Option<ApiKeyRecord>> {
        Ok(self.lock().api_keys.get(key_hash).cloned())
    }

    async fn organization(&self, id: Uuid) -> anyhow::Result<Option<Organization>> {
        Ok(self.lock().organizations.get(&id).cloned())
    }

    async fn touch_api_key(&self, key_hash: &str, at: Timestamp) -> anyhow::Result<()> {
        if let Some(record) = self.lock().api_keys.get_mut(key_hash) {
            record.last_used_at = Some(at);
        }
        Ok(())
    }

    async fn upsert_organization(&self, organization: &Organization) -> anyhow::Result<()> {
        let mut state = self.lock();
        let created_at = state.organizations.get(&organization.id).map_or(organization.created_at, |o| o.created_at);
        state.organizations.insert(organization.id, Organization { created_at, ..organization.clone() });
        Ok(())
    }

    async fn upsert_api_key(&self, key_hash: &str, organization: Option<Uuid>, at: Timestamp) -> anyhow::Result<()> {
        let mut state = self.lock();
        let record = state.api_keys.entry(key_hash.to_owned()).or_insert_with(|| ApiKeyRecord {
            key_hash: key_hash.to_owned(),
            organization_id: organization,
            created_at: at,
            last_used_at: None,
        });
        record.organization_id = organization;
        Ok(())
    }

    async fn workspaces(&self, organization: Uuid) -> anyhow::Result<Vec<Workspace>> {
        Ok(self.lock().workspaces.get(&organization).map(|all| all.values().cloned().collect()).unwrap_or_default())
    }

    async fn put_workspace(&self, organization: Uuid, workspace: &Workspace) -> anyhow::Result<()> {
        let mut state = self.lock();
        let all = state.workspaces.entry(organization).or_default();
        let created_at = all.get(&workspace.id).map_or(workspace.created_at, |existing| existing.created_at);
        all.insert(workspace.id, Workspace { created_at, ..workspace.clone() });
        Ok(())
    }
}

#[async_trait]
impl SharedStoreRepo for MemoryBackend {
    async fn list_stores(&self, organization: Uuid) -> Result<Vec<SharedStore>, StoreError> {
        let state = self.lock();
        Ok(state
            .stores
            .get(&organization)
            .map(|stores| stores.values().map(StoreState::view).collect())
            .unwrap_or_default())
    }

    async fn create_store(&self, organization: Uuid, store: &SharedStore, max_stores: u32) -> Result<(), StoreError> {
        let mut state = self.lock();
        let stores = state.stores.entry(organization).or_default();
        if stores.len() >= max_stores as usize {
            return Err(StoreError::StoreLimitReached);
        }
        stores.insert(store.id, StoreState { store: store.clone(), entries: HashMap::new() });
        Ok(())
    }

    async fn rename_store(
        &self,
        organization: Uuid,
        store: Uuid,
        name: &str,
        now: Timestamp,
    ) -> Result<SharedStore, StoreError> {
        let mut state = self.lock();
        let found = state.store_mut(organization, store)?;
        found.store.name = name.to_owned();
        found.store.updated_at = now;
        Ok(found.view())
    }

    async fn delete_store(&self, organization: Uuid, store: Uuid) -> Result<(), StoreError> {
        let mut state = self.lock();
        state
            .stores
            .get_mut(&organization)
            .and_then(|stores| stores.remove(&store))
            .map(|_| ())
            .ok_or(StoreError::StoreNotFound)
    }

    async fn list_entries(&self, organization: Uuid, store: Uuid) -> Result<Vec<StoreEntry>, StoreError> {
        let mut state = self.lock();
        Ok(state.store_mut(organization, store)?.entries.values().cloned().collect())
    }

    async fn get_entry(&self, organization: Uuid, store: Uuid, entry_id: &str) -> Result<StoreEntry, StoreError> {
        let mut state = self.lock();
        state.store_mut(organization, store)?.entries.get(entry_id).cloned().ok_or(StoreError::EntryNotFound)
    }

    async fn put_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry: &EntryWrite,
        now: Timestamp,
        max_entries: u32,
    ) -> Result<StoreEntry, StoreError> {
        let mut state = self.lock();
        let found = state.store_mut(organization, store)?;
        let created_at = match found.entries.get(&entry.entry_id) {
            Some(existing) => existing.created_at,
            None if found.entries.len() >= max_entries as usize => return Err(StoreError::EntryLimitReached),
            None => now,
        };
        let stored = entry_from(entry, created_at);
        found.entries.insert(entry.entry_id.clone(), stored.clone());
        Ok(stored)
    }

    async fn rename_entry(
        &self,
        organization: Uuid,
        store: Uuid,
        entry_id: &str,
        rename: &EntryRename,
        _now: Timestamp,
    ) -> Result<StoreEntry, StoreError> {
        let mut state = self.lock();
        let found = state.store_mut(organization, store)?;
        let current = found.entries.get(entry_id).ok_or(StoreError::EntryNotFound)?;
        if rename.new_entry_id != entry_id && found.entries.contains_key(&rename.new_entry_id) {
            return Err(StoreError::EntryIdTaken);
        }
        let renamed = StoreEntry {
            entry_id: rename.new_entry_id.clone(),
            display_name: rename.display_name.clone(),
            metadata: rename.metadata.clone().unwrap_or_else(|| current.metadata.clone()),
            created_at: current.created_at,
        };
        found.entries.remove(entry_id);
        found.entries.insert(renamed.entry_id.clone(), renamed.clone());
        Ok(renamed)
    }

    async fn delete_entry(&self, organization: Uuid, store: Uuid, entry_id: &str) -> Result<(), StoreError> {
        let mut state = self.lock();
        state.store_mut(organization, store)?.entries.remove(entry_id).map(|_| ()).ok_or(StoreError::EntryNotFound)
    }

    async fn upsert_entries(
        &self,
        organization: Uuid,
        store: Uuid,
        entries: &[EntryWrite],
        now: Timestamp,
        max_entries: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        let mut state = self.lock();
        let found = state.store_mut(organization, store)?;
        let new_ids = entries.iter().filter(|entry| !found.entries.contains_key(&entry.entry_id)).count();
        if found.entries.len() + new_ids > max_entries as usize {
            return Err(StoreError::EntryLimitReached);
        }
        let written: Vec<StoreEntry> = entries
            .iter()
            .map(|entry| {
                let created_at = found.entries.get(&entry.entry_id).map_or(now, |existing| existing.created_at);
                entry_from(entry, created_at)
            })
            .collect();
        for entry in &written {
            found.entries.insert(entry.entry_id.clone(), entry.clone());
        }
        Ok(written)
    }
}

#[async_trait]
impl AgentRepo for MemoryBackend {
    async fn create_agent(&self, organization: Uuid, record: &AgentRecord) -> anyhow::Result<()> {
        let mut state = self.lock();
        let agents = state.agents.entry(organization).or_default();
        anyhow::ensure!(!agents.contains_key(&record.agent.id), "agent {} already exists", record.agent.id);
        agents.insert(record.agent.id, (record.clone(), false));
        Ok(())
    }

    async fn get_agent(&self, organization: Uuid, id: Uuid) -> anyhow::Result<Option<AgentRecord>> {
        let state = self.lock();
        let found = state.agents.get(&organization).and_then(|agents| agents.get(&id));
        Ok(found.filter(|(_, deleted)| !deleted).map(|(record, _)| record.clone()))
    }

    async fn list_agents(&self, organization: Uuid, query: &AgentQuery) -> anyhow::Result<Vec<Agent>> {
        let state = self.lock();
        let Some(agents) = state.agents.get(&organization) else { return Ok(Vec::new()) };
        let before = match query.after {
            Some(after) => agents.range(..after),
            None => agents.range(..),
        };
        Ok(before
            .rev()
            .filter(|(_, (record, deleted))| !deleted && query.matches(&record.agent))
            .take(query.limit + 1)
            .map(|(_, (record, _))| record.agent.clone())
            .collect())
    }

    async fn replace_agent(
        &self,
        organization: Uuid,
        record: &AgentRecord,
        expected_version: u64,
    ) -> anyhow::Result<bool> {
        let mut state = self.lock();
        let current = state.agents.get_mut(&organization).and_then(|agents| agents.get_mut(&record.agent.id));
        match current {
            Some((stored, false)) if stored.version == expected_version => {
                *stored = record.clone();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn delete_agent(&self, organization: Uuid, id: Uuid, at: Timestamp) -> anyhow::Result<bool> {
        let mut state = self.lock();
        match state.agents.get_mut(&organization).and_then(|agents| agents.get_mut(&id)) {
            Some((record, deleted)) if !*deleted => {
                *deleted = true;
                record.agent.updated_at = at;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

#[async_trait]
impl UploadRepo for MemoryBackend {
    async fn put_upload(&self, organization: Uuid, upload: &Upload) -> anyhow::Result<()> {
        self.lock().uploads.insert((organization, upload.id), upload.clone());
        Ok(())
    }

    async fn get_upload(&self, organization: Uuid, id: Uuid) -> anyhow::Result<Option<Upload>> {
        Ok(self.lock().uploads.get(&(organization, id)).cloned())
    }

    async fn finalize_upload(
        &self,
        organization: Uuid,
        id: Uuid,
        media: &MediaInfo,
        blob: &SealedBlob,
        at: Timestamp,
    ) -> anyhow::Result<Option<Upload>> {
        let mut state = self.lock();
        let Some(upload) = state.uploads.get_mut(&(organization, id)) else { return Ok(None) };
        if upload.status == UploadStatus::PendingUpload {
            upload.status = UploadStatus::Ready;
            upload.finalized_at = Some(at);
            upload.media = Some(media.clone());
            upload.blob = Some(blob.clone());
        }
        Ok(Some(upload.clone()))
    }
}
