//! Organizations, API keys and the authentication rules of the contract.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::labels::MAX_LABEL_CHARS;
use super::time::Timestamp;
use super::workspaces::{self, Workspace, WorkspaceRepo};
use crate::domain::credits::plans::PlanId;
use crate::domain::credits::service as credit_service;
use crate::domain::credits::CreditRepo;
pub use crate::domain::ids::OrganizationId;
use crate::domain::ids::WorkspaceId;
use crate::domain::time::Clock;

/// An organization: the owner of every resource an API key can reach.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Organization {
    pub id: OrganizationId,
    pub name: String,
    pub slug: String,
    /// False when the organization's plan gives no API access (403 `api_access_required`).
    pub api_access: bool,
    pub plan: String,
    pub credits: i64,
    pub created_at: Timestamp,
}

/// A stored API key. Only the SHA-256 hash of the key is ever kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    pub key_hash: String,
    /// None for a key that is not bound to any organization.
    pub organization_id: Option<OrganizationId>,
    pub created_at: Timestamp,
    pub last_used_at: Option<Timestamp>,
}

/// Who a request acts for, once its key is verified.
#[derive(Clone, Debug, PartialEq)]
pub struct Principal {
    pub key_hash: String,
    pub organization: Organization,
}

impl Principal {
    /// The organization every resource of this request must belong to.
    pub fn organization_id(&self) -> OrganizationId {
        self.organization.id
    }
}

/// Why a key was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("invalid_api_key")]
    InvalidApiKey,
    #[error("API key must be associated with an organization")]
    NoOrganization,
    #[error("api_access_required")]
    ApiAccessRequired,
    #[error("identity lookup failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

/// The hex SHA-256 of an API key: the only form in which keys are stored.
pub fn hash_api_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Verifies API keys, remembering verified principals for a short while so that a warm
/// Lambda does not pay two reads per request (like an API Gateway authorizer cache).
pub struct Authenticator {
    repo: Arc<dyn IdentityRepo>,
    ttl: Duration,
    cache: Mutex<HashMap<String, (Principal, Instant)>>,
}

impl Authenticator {
    /// An authenticator; `ttl` of zero disables the cache.
    pub fn new(repo: Arc<dyn IdentityRepo>, ttl: Duration) -> Self {
        Self { repo, ttl, cache: Mutex::new(HashMap::new()) }
    }

    /// Resolves a presented key to its principal, or says why it is refused.
    pub async fn authenticate(&self, key: &str) -> Result<Principal, AuthError> {
        if key.is_empty() {
            return Err(AuthError::InvalidApiKey);
        }
        let key_hash = hash_api_key(key);
        let principal = match self.cached(&key_hash) {
            Some(principal) => principal,
            None => {
                let principal = self.lookup(&key_hash).await?;
                self.remember(&principal);
                principal
            }
        };
        if !principal.organization.api_access {
            return Err(AuthError::ApiAccessRequired);
        }
        Ok(principal)
    }

    async fn lookup(&self, key_hash: &str) -> Result<Principal, AuthError> {
        let (_, organization) = self.repo.api_key_with_organization(key_hash).await?.ok_or(AuthError::InvalidApiKey)?;
        let organization = organization.ok_or(AuthError::NoOrganization)?;
        Ok(Principal { key_hash: key_hash.to_owned(), organization })
    }

    fn cached(&self, key_hash: &str) -> Option<Principal> {
        if self.ttl.is_zero() {
            return None;
        }
        let cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.get(key_hash).filter(|(_, at)| at.elapsed() < self.ttl).map(|(principal, _)| principal.clone())
    }

    fn remember(&self, principal: &Principal) {
        if self.ttl.is_zero() {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.retain(|_, (_, at)| at.elapsed() < self.ttl);
        cache.insert(principal.key_hash.clone(), (principal.clone(), Instant::now()));
    }
}

/// Who the caller is (`GET /whoami` shows it as `api::identity::Whoami`).
#[derive(Clone, Debug, PartialEq)]
pub struct WhoAmI {
    pub organization_id: OrganizationId,
    pub organization_name: String,
    pub organization_slug: String,
    pub created_at: Timestamp,
    pub last_used_at: Timestamp,
}

/// Describes the caller and records that its key was used now.
pub async fn whoami(repo: &dyn IdentityRepo, clock: &dyn Clock, principal: &Principal) -> anyhow::Result<WhoAmI> {
    let now = clock.now();
    repo.touch_api_key(&principal.key_hash, now).await?;
    let organization = &principal.organization;
    Ok(WhoAmI {
        organization_id: organization.id,
        organization_name: organization.name.clone(),
        organization_slug: organization.slug.clone(),
        created_at: organization.created_at,
        last_used_at: now,
    })
}

/// The `--seed` file: organizations with their keys, and keys bound to no organization.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seed {
    #[serde(default)]
    pub organizations: Vec<SeedOrganization>,
    #[serde(default)]
    pub unbound_api_keys: Vec<String>,
}

/// One organization of a seed file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedOrganization {
    pub id: OrganizationId,
    pub name: String,
    pub slug: String,
    #[serde(default = "default_true")]
    pub api_access: bool,
    #[serde(default = "default_plan")]
    pub plan: String,
    #[serde(default = "default_credits")]
    pub credits: i64,
    /// When its plan started (default: when it is seeded): its monthly periods count
    /// from it.
    #[serde(default)]
    pub plan_started_at: Option<Timestamp>,
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// Workspaces of the organization; one primary workspace is made when absent.
    #[serde(default)]
    pub workspaces: Option<Vec<SeedWorkspace>>,
}

/// One workspace of a seeded organization.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedWorkspace {
    pub id: WorkspaceId,
    pub name: String,
    #[serde(default)]
    pub primary: bool,
}

fn default_true() -> bool {
    true
}

fn default_plan() -> String {
    "free".to_owned()
}

fn default_credits() -> i64 {
    1000
}

impl Seed {
    /// Parses and checks a seed file's JSON.
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let seed: Seed = serde_json::from_str(text)?;
        let bounded = |text: &str| !text.trim().is_empty() && text.trim().chars().count() <= MAX_LABEL_CHARS;
        for organization in &seed.organizations {
            anyhow::ensure!(
                bounded(&organization.name),
                "organization {} needs a name of 1 to {MAX_LABEL_CHARS} characters",
                organization.id
            );
            anyhow::ensure!(
                bounded(&organization.slug),
                "organization {} needs a slug of 1 to {MAX_LABEL_CHARS} characters",
                organization.id
            );
            anyhow::ensure!(
                crate::domain::credits::plans::PlanId::parse(&organization.plan).is_some(),
                "organization {} names plan {:?}; plans are free, creator, creator_annual, professional and \
                 professional_annual",
                organization.id,
                organization.plan
            );
            anyhow::ensure!(
                organization.credits >= 0,
                "organization {} is seeded with {} credits; a balance is never below zero",
                organization.id,
                organization.credits
            );
            anyhow::ensure!(
                organization.api_keys.iter().all(|key| !key.is_empty()),
                "organization {} lists an empty API key",
                organization.id
            );
            if let Some(workspaces) = &organization.workspaces {
                let primaries = workspaces.iter().filter(|workspace| workspace.primary).count();
                anyhow::ensure!(
                    workspaces.iter().all(|workspace| bounded(&workspace.name)),
                    "organization {} lists a workspace without a name of 1 to {MAX_LABEL_CHARS} characters",
                    organization.id
                );
                anyhow::ensure!(
                    primaries == 1,
                    "organization {} must have exactly one primary workspace, has {primaries}",
                    organization.id
                );
            }
        }
        anyhow::ensure!(seed.unbound_api_keys.iter().all(|key| !key.is_empty()), "unbound_api_keys lists an empty key");
        Ok(seed)
    }
}

/// Writes a seed into the identity repository, and opens each organization's credit
/// account (with its seeded credits as the opening balance, once: an account already
/// open keeps its balance); running it twice changes nothing more.
pub async fn apply_seed(
    repo: &dyn IdentityRepo,
    credits: &dyn CreditRepo,
    clock: &dyn Clock,
    seed: &Seed,
) -> anyhow::Result<()> {
    let now = clock.now();
    for seeded in &seed.organizations {
        let organization = Organization {
            id: seeded.id,
            name: seeded.name.trim().to_owned(),
            slug: seeded.slug.trim().to_owned(),
            api_access: seeded.api_access,
            plan: seeded.plan.clone(),
            credits: seeded.credits,
            created_at: now,
        };
        repo.upsert_organization(&organization).await?;
        let plan = PlanId::parse(&seeded.plan).unwrap_or(PlanId::Free);
        let started = seeded.plan_started_at.unwrap_or(now);
        credit_service::open(credits, seeded.id, plan, seeded.credits, started, now).await?;
        match &seeded.workspaces {
            Some(workspaces) => {
                let workspaces: Vec<Workspace> = workspaces
                    .iter()
                    .map(|workspace| Workspace {
                        id: workspace.id,
                        name: workspace.name.trim().to_owned(),
                        primary: workspace.primary,
                        created_at: now,
                    })
                    .collect();
                workspaces::apply_seeded(repo, seeded.id, &workspaces).await?;
            }
            None => {
                workspaces::ensure_primary(repo, seeded.id, now).await?;
            }
        }
        for key in &seeded.api_keys {
            repo.upsert_api_key(&hash_api_key(key), Some(seeded.id), now).await?;
        }
    }
    for key in &seed.unbound_api_keys {
        repo.upsert_api_key(&hash_api_key(key), None, now).await?;
    }
    Ok(())
}

/// The organization `serve` makes for local development when it is given no seed file:
/// always the same one, so that what was made with an earlier key is still there.
pub const DEVELOPMENT_ORGANIZATION: OrganizationId =
    OrganizationId::from_uuid(uuid::uuid!("d5e1e10b-0000-4000-8000-000000000001"));

/// Makes sure the development organization exists (with API access and a primary
/// workspace) and binds `key` to it, a new key ([`generate_api_key`]) to be printed:
/// only hashes are stored, so earlier keys cannot be shown again, but they keep working.
/// Done again with the same key, it writes the same.
pub async fn bind_development_key(
    repo: &dyn IdentityRepo,
    credits: &dyn CreditRepo,
    clock: &dyn Clock,
    key: &str,
) -> anyhow::Result<Organization> {
    let now = clock.now();
    let organization = match repo.organization(DEVELOPMENT_ORGANIZATION).await? {
        Some(existing) => existing,
        None => {
            let organization = Organization {
                id: DEVELOPMENT_ORGANIZATION,
                name: "Development".to_owned(),
                slug: "development".to_owned(),
                api_access: true,
                plan: default_plan(),
                credits: default_credits(),
                created_at: now,
            };
            repo.upsert_organization(&organization).await?;
            organization
        }
    };
    credit_service::open(credits, organization.id, PlanId::Free, default_credits(), now, now).await?;
    workspaces::ensure_primary(repo, organization.id, now).await?;
    repo.upsert_api_key(&hash_api_key(key), Some(organization.id), now).await?;
    Ok(organization)
}

/// A new random API key in the form handed to developers.
pub fn generate_api_key() -> String {
    format!("vw_{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// Organizations and API keys.
#[async_trait]
pub trait IdentityRepo: WorkspaceRepo + Send + Sync {
    /// The key with this SHA-256 hash, if any.
    async fn api_key(&self, key_hash: &str) -> anyhow::Result<Option<ApiKeyRecord>>;
    /// An organization by ID.
    async fn organization(&self, id: OrganizationId) -> anyhow::Result<Option<Organization>>;
    /// The key with this hash and the organization it is bound to (None when it is
    /// unbound or its organization is missing): what authenticating a request reads.
    /// A backend that can read both at once overrides this.
    async fn api_key_with_organization(
        &self,
        key_hash: &str,
    ) -> anyhow::Result<Option<(ApiKeyRecord, Option<Organization>)>> {
        let Some(record) = self.api_key(key_hash).await? else { return Ok(None) };
        let organization = match record.organization_id {
            Some(id) => self.organization(id).await?,
            None => None,
        };
        Ok(Some((record, organization)))
    }
    /// Records that a key was used at `at`.
    async fn touch_api_key(&self, key_hash: &str, at: Timestamp) -> anyhow::Result<()>;
    /// Creates an organization or updates its descriptive fields, keeping its counters
    /// and its original `created_at`.
    async fn upsert_organization(&self, organization: &Organization) -> anyhow::Result<()>;
    /// Creates or rebinds a key.
    async fn upsert_api_key(
        &self,
        key_hash: &str,
        organization: Option<OrganizationId>,
        at: Timestamp,
    ) -> anyhow::Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_hashed_with_sha256() {
        assert_eq!(hash_api_key("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn seed_requires_one_primary_workspace_when_workspaces_are_listed() {
        let text = r#"{"organizations":[{"id":"6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01","name":"A","slug":"a",
            "workspaces":[{"id":"6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e02","name":"W"}]}]}"#;
        assert!(Seed::from_json(text).is_err());
    }

    #[test]
    fn seed_defaults_api_access_plan_and_credits() {
        let text = r#"{"organizations":[{"id":"6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01","name":"A","slug":"a","api_keys":["k"]}]}"#;
        let seed = Seed::from_json(text).unwrap();
        let organization = &seed.organizations[0];
        assert!(organization.api_access);
        assert_eq!(organization.plan, "free");
        assert_eq!(organization.credits, 1000);
    }
}
