//! Workspaces: every organization has exactly one primary workspace, and every agent
//! belongs to a workspace of its organization.

use serde::Serialize;
use uuid::Uuid;

use super::time::Timestamp;
use crate::ports::IdentityRepo;

/// Name of the primary workspace made for an organization that lists none.
pub const DEFAULT_WORKSPACE_NAME: &str = "Default workspace";

/// A workspace of an organization.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Workspace {
    pub id: Uuid,
    pub name: String,
    pub primary: bool,
    pub created_at: Timestamp,
}

/// Why a requested workspace cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The ID names no workspace of the caller's organization (it may be another's).
    #[error("workspace_id does not belong to your organization")]
    Foreign,
    /// The organization has no primary workspace (it was created without a seed step).
    #[error("the organization has no primary workspace")]
    NoPrimary,
    #[error("reading workspaces failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

/// The workspace an agent goes to: the requested one when it is the organization's, the
/// primary one when none is requested.
pub async fn resolve(
    repo: &dyn IdentityRepo,
    organization: Uuid,
    requested: Option<Uuid>,
) -> Result<Uuid, WorkspaceError> {
    let workspaces = repo.workspaces(organization).await?;
    let found = match requested {
        Some(id) => workspaces.iter().find(|workspace| workspace.id == id).ok_or(WorkspaceError::Foreign)?,
        None => workspaces.iter().find(|workspace| workspace.primary).ok_or(WorkspaceError::NoPrimary)?,
    };
    Ok(found.id)
}

/// Makes sure the organization has a primary workspace, creating one when it has none.
pub async fn ensure_primary(repo: &dyn IdentityRepo, organization: Uuid, now: Timestamp) -> anyhow::Result<Workspace> {
    let workspaces = repo.workspaces(organization).await?;
    if let Some(primary) = workspaces.into_iter().find(|workspace| workspace.primary) {
        return Ok(primary);
    }
    let workspace =
        Workspace { id: Uuid::new_v4(), name: DEFAULT_WORKSPACE_NAME.to_owned(), primary: true, created_at: now };
    repo.put_workspace(organization, &workspace).await?;
    Ok(workspace)
}
