//! Workspaces: every organization has exactly one primary workspace, and every agent
//! belongs to a workspace of its organization.

use serde::Serialize;

use async_trait::async_trait;

use super::time::Timestamp;
use crate::domain::ids::OrganizationId;
pub use crate::domain::ids::WorkspaceId;

/// Name of the primary workspace made for an organization that lists none.
pub const DEFAULT_WORKSPACE_NAME: &str = "Default workspace";

/// A workspace of an organization.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Workspace {
    pub id: WorkspaceId,
    pub name: String,
    pub primary: bool,
    pub created_at: Timestamp,
}

/// Where an organization's workspaces are kept (with its identity: every identity
/// repository is one).
#[async_trait]
pub trait WorkspaceRepo: Send + Sync {
    /// All workspaces of an organization.
    async fn workspaces(&self, organization: OrganizationId) -> anyhow::Result<Vec<Workspace>>;
    /// Creates or renames a workspace (keeping its original `created_at`).
    async fn put_workspace(&self, organization: OrganizationId, workspace: &Workspace) -> anyhow::Result<()>;
}

/// Why a requested workspace cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The ID names no workspace of the caller's organization (it may be another's).
    #[error("workspace_id does not belong to your organization")]
    Foreign,
    #[error("reading workspaces failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

/// Checks that a workspace is one of the organization's.
pub async fn check_owned(
    repo: &dyn WorkspaceRepo,
    organization: OrganizationId,
    id: WorkspaceId,
) -> Result<(), WorkspaceError> {
    let workspaces = repo.workspaces(organization).await?;
    if workspaces.iter().any(|workspace| workspace.id == id) {
        Ok(())
    } else {
        Err(WorkspaceError::Foreign)
    }
}

/// The workspace a new agent goes to: the requested one when it is the organization's,
/// the primary one when none is requested.
pub async fn for_new_agent(
    repo: &dyn WorkspaceRepo,
    organization: OrganizationId,
    requested: Option<WorkspaceId>,
    now: Timestamp,
) -> Result<WorkspaceId, WorkspaceError> {
    if let Some(id) = requested {
        check_owned(repo, organization, id).await?;
        return Ok(id);
    }
    // An organization stored before workspaces existed gets its primary now.
    Ok(ensure_primary(repo, organization, now).await?.id)
}

/// The primary workspace; should a stored list ever hold two, the same one is always chosen.
fn primary_of(workspaces: &[Workspace]) -> Option<&Workspace> {
    workspaces.iter().filter(|workspace| workspace.primary).min_by_key(|workspace| workspace.id)
}

/// The organization's primary workspace, if it has one (read only).
pub async fn find_primary(repo: &dyn WorkspaceRepo, organization: OrganizationId) -> anyhow::Result<Option<Workspace>> {
    Ok(primary_of(&repo.workspaces(organization).await?).cloned())
}

/// The ID of the primary workspace made for an organization that lists none: derived
/// from the organization, so concurrent first uses all write the same workspace.
fn default_workspace_id(organization: OrganizationId) -> WorkspaceId {
    WorkspaceId::from_uuid(uuid::Uuid::new_v5(&organization.as_uuid(), b"primary-workspace"))
}

/// Makes sure the organization has a primary workspace, creating one when it has none.
pub async fn ensure_primary(
    repo: &dyn WorkspaceRepo,
    organization: OrganizationId,
    now: Timestamp,
) -> anyhow::Result<Workspace> {
    let workspaces = repo.workspaces(organization).await?;
    if let Some(primary) = primary_of(&workspaces) {
        return Ok(primary.clone());
    }
    let workspace = Workspace {
        id: default_workspace_id(organization),
        name: DEFAULT_WORKSPACE_NAME.to_owned(),
        primary: true,
        created_at: now,
    };
    repo.put_workspace(organization, &workspace).await?;
    Ok(workspace)
}

/// Stores the seeded workspaces of an organization; a primary stored earlier that is not
/// the seeded one stops being primary, so there is always exactly one.
pub async fn apply_seeded(
    repo: &dyn WorkspaceRepo,
    organization: OrganizationId,
    seeded: &[Workspace],
) -> anyhow::Result<()> {
    for stored in repo.workspaces(organization).await? {
        if stored.primary && !seeded.iter().any(|workspace| workspace.id == stored.id) {
            repo.put_workspace(organization, &Workspace { primary: false, ..stored }).await?;
        }
    }
    for workspace in seeded {
        repo.put_workspace(organization, workspace).await?;
    }
    Ok(())
}
