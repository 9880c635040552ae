//! External asset managers (rule 10): a workspace may have one connection to an asset
//! manager; runs take its items as inputs (`asset_manager_assets`), each in its
//! high-resolution file or its proxy. The manager is a port; the `local` provider keeps
//! its items in the service's own storage, each file a ready video upload.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::time::Timestamp;
use super::uploads::{Upload, UploadKind, UploadStatus};
use super::workspaces::{self, WorkspaceError};
use crate::domain::identity::IdentityRepo;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::UploadId;
use crate::domain::ids::WorkspaceId;
pub use crate::domain::ids::{AssetConnectionId, AssetItemId};
use crate::domain::rejection::{DomainError, Rejection};
use crate::domain::uploads::UploadRepo;

/// The providers a connection may use.
pub const PROVIDERS: &[&str] = &["local"];
/// Longest item or connection name.
pub const MAX_NAME_CHARS: usize = 200;

/// A workspace's connection to an asset manager.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "A workspace's asset-manager connection.")]
pub struct AssetConnection {
    #[schema(value_type = uuid::Uuid)]
    pub id: AssetConnectionId,
    #[schema(value_type = uuid::Uuid)]
    pub workspace_id: WorkspaceId,
    pub provider: String,
    pub name: String,
    pub created_at: Timestamp,
}

/// An item of an asset manager: a video with a high-resolution file, a proxy, or both.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssetItem {
    #[schema(value_type = uuid::Uuid)]
    pub id: AssetItemId,
    #[schema(value_type = uuid::Uuid)]
    pub connection_id: AssetConnectionId,
    pub name: String,
    #[schema(required = true, value_type = Option<uuid::Uuid>)]
    pub highres: Option<UploadId>,
    #[schema(required = true, value_type = Option<uuid::Uuid>)]
    pub proxy: Option<UploadId>,
    pub created_at: Timestamp,
}

/// Which file of an item a run takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(description = "Which file of an asset-manager item a run takes.")]
#[serde(rename_all = "snake_case")]
pub enum Artifact {
    Highres,
    Proxy,
    Auto,
}

impl Artifact {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "highres" => Some(Self::Highres),
            "proxy" => Some(Self::Proxy),
            "auto" => Some(Self::Auto),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Highres => "highres",
            Self::Proxy => "proxy",
            Self::Auto => "auto",
        }
    }
}

/// The file of `item` that `artifact` asks for, and which one it is (`auto` prefers the
/// high-resolution file); the refusal names what is missing.
pub fn choose(item: &AssetItem, artifact: Artifact) -> Result<(Artifact, UploadId), String> {
    let id = item.id;
    match (artifact, item.highres, item.proxy) {
        (Artifact::Highres | Artifact::Auto, Some(file), _) => Ok((Artifact::Highres, file)),
        (Artifact::Proxy | Artifact::Auto, _, Some(file)) => Ok((Artifact::Proxy, file)),
        (Artifact::Highres, None, _) => Err(format!("asset {id} has no highres file (ask for artifact proxy or auto)")),
        (Artifact::Proxy, _, None) => Err(format!("asset {id} has no proxy file (ask for artifact highres or auto)")),
        (Artifact::Auto, None, None) => Err(format!("asset {id} has neither a highres nor a proxy file")),
    }
}

/// Why an asset-manager request is refused.
#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error("{0}")]
    Invalid(String),
    #[error("workspace_id does not belong to your organization")]
    ForeignWorkspace,
    #[error("the workspace already has an asset-manager connection")]
    AlreadyConnected,
    #[error("Asset connection not found")]
    ConnectionNotFound,
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

impl DomainError for AssetError {
    fn rejection(self) -> Result<Rejection, anyhow::Error> {
        match self {
            AssetError::Invalid(_) | AssetError::ForeignWorkspace => Ok(Rejection::Invalid),
            AssetError::AlreadyConnected => Ok(Rejection::Conflict),
            AssetError::ConnectionNotFound => Ok(Rejection::NotFound),
            AssetError::Backend(cause) => Err(cause),
        }
    }
}

/// A property outside a body's declaration is a 400 `{ detail }`.
impl crate::core::json::Refusal for AssetError {
    fn unknown_property(message: String) -> Self {
        AssetError::Invalid(message)
    }
}

crate::closed_body! {
    /// `POST /asset_connections`; null for a field is the same as leaving it out.
    #[schema(as = CreateAssetConnection)]
    pub struct NewConnection -> AssetError {
        /// Default: the primary workspace.
        #[schema(value_type = Option<uuid::Uuid>)]
        workspace_id: Option<WorkspaceId> = |value: Option<&Value>| match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => WorkspaceId::parse(text)
                .map(Some)
                .ok_or_else(|| AssetError::Invalid("workspace_id must be a UUID".into())),
            Some(_) => Err(AssetError::Invalid("workspace_id must be a UUID string".into())),
        },
        /// Default and only provider: `local` (items made of this organization's uploads).
        #[schema(value_type = Option<String>)]
        provider: String = |value| {
            let provider = optional_text(value, "provider")?.unwrap_or_else(|| "local".into());
            if !PROVIDERS.contains(&provider.as_str()) {
                return Err(AssetError::Invalid(format!("provider must be one of {}", PROVIDERS.join(", "))));
            }
            Ok(provider)
        },
        /// Default: `Asset manager`.
        #[schema(value_type = Option<String>, min_length = 1, max_length = 200)]
        name: String = |value| checked_name(optional_text(value, "name")?.unwrap_or_else(|| "Asset manager".into())),
    }
}

crate::closed_body! {
    /// `POST /asset_connections/{connection_id}/items`: a ready video upload as the
    /// high-resolution file, the proxy, or both (null is the same as leaving it out).
    #[schema(as = CreateAssetItem)]
    pub struct NewItem -> AssetError {
        #[schema(min_length = 1, max_length = 200)]
        name: String = |value| {
            checked_name(optional_text(value, "name")?.ok_or_else(|| AssetError::Invalid("name is required".into()))?)
        },
        #[schema(value_type = Option<uuid::Uuid>)]
        highres_video_id: Option<UploadId> = |value| video_id(value, "highres_video_id"),
        #[schema(value_type = Option<uuid::Uuid>)]
        proxy_video_id: Option<UploadId> = |value| video_id(value, "proxy_video_id"),
    }
}

/// An optional upload ID of an item's file.
fn video_id(value: Option<&Value>, field: &str) -> Result<Option<UploadId>, AssetError> {
    optional_text(value, field)?
        .map(|text| {
            UploadId::parse(&text)
                .ok_or_else(|| AssetError::Invalid(format!("{field} must be a video UUID, got {text:?}")))
        })
        .transpose()
}

/// Connects a workspace (the requested one, or the primary) to an asset manager.
pub async fn create_connection(
    identity: &dyn IdentityRepo,
    assets: &dyn AssetRepo,
    organization: OrganizationId,
    new: NewConnection,
    now: Timestamp,
) -> Result<AssetConnection, AssetError> {
    let workspace_id = workspaces::for_new_agent(identity, organization, new.workspace_id, now).await.map_err(
        |error| match error {
            WorkspaceError::Foreign => AssetError::ForeignWorkspace,
            WorkspaceError::Backend(error) => AssetError::Backend(error),
        },
    )?;
    let connection = AssetConnection {
        id: AssetConnectionId::new_v4(),
        workspace_id,
        provider: new.provider,
        name: new.name,
        created_at: now,
    };
    if !assets.create_connection(organization, &connection).await? {
        return Err(AssetError::AlreadyConnected);
    }
    Ok(connection)
}

/// The workspace's connection, if it has one.
pub async fn connection_of(
    assets: &dyn AssetRepo,
    organization: OrganizationId,
    workspace: WorkspaceId,
) -> anyhow::Result<Option<AssetConnection>> {
    Ok(assets.connections(organization).await?.into_iter().find(|connection| connection.workspace_id == workspace))
}

/// Adds an item to a `local` connection: its files must be ready video uploads.
pub async fn create_item(
    assets: &dyn AssetRepo,
    uploads: &dyn UploadRepo,
    organization: OrganizationId,
    connection: AssetConnectionId,
    new: NewItem,
    now: Timestamp,
) -> Result<AssetItem, AssetError> {
    if new.highres_video_id.is_none() && new.proxy_video_id.is_none() {
        return Err(AssetError::Invalid("an item needs highres_video_id, proxy_video_id or both".into()));
    }
    let connections = assets.connections(organization).await?;
    if !connections.iter().any(|known| known.id == connection) {
        return Err(AssetError::ConnectionNotFound);
    }
    for (field, id) in [("highres_video_id", new.highres_video_id), ("proxy_video_id", new.proxy_video_id)] {
        let Some(id) = id else { continue };
        match uploads.get_upload(organization, id).await? {
            Some(Upload { kind: UploadKind::Video, status: UploadStatus::Ready, .. }) => {}
            Some(Upload { kind: UploadKind::Video, .. }) => {
                return Err(AssetError::Invalid(format!(
                    "{field}: video {id} is not ready (finalize the upload first)"
                )))
            }
            Some(_) => return Err(AssetError::Invalid(format!("{field}: upload {id} is not a video"))),
            None => return Err(AssetError::Invalid(format!("{field}: video {id} was not found"))),
        }
    }
    let item = AssetItem {
        id: AssetItemId::new_v4(),
        connection_id: connection,
        name: new.name,
        highres: new.highres_video_id,
        proxy: new.proxy_video_id,
        created_at: now,
    };
    assets.put_asset_item(organization, &item).await?;
    Ok(item)
}

fn optional_text(value: Option<&Value>, field: &str) -> Result<Option<String>, AssetError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(AssetError::Invalid(format!("{field} must be a string"))),
    }
}

fn checked_name(name: String) -> Result<String, AssetError> {
    let length = name.chars().count();
    if length == 0 || length > MAX_NAME_CHARS {
        return Err(AssetError::Invalid(format!("name must be 1 to {MAX_NAME_CHARS} characters")));
    }
    Ok(name)
}

/// Workspaces' asset-manager connections, and the items of the `local` provider.
#[async_trait]
pub trait AssetRepo: Send + Sync {
    /// Stores a connection; false (nothing stored) when its workspace already has one.
    async fn create_connection(
        &self,
        organization: OrganizationId,
        connection: &AssetConnection,
    ) -> anyhow::Result<bool>;
    /// The organization's connections (one per workspace at most).
    async fn connections(&self, organization: OrganizationId) -> anyhow::Result<Vec<AssetConnection>>;
    async fn put_asset_item(&self, organization: OrganizationId, item: &AssetItem) -> anyhow::Result<()>;
    async fn get_asset_item(
        &self,
        organization: OrganizationId,
        connection: AssetConnectionId,
        id: AssetItemId,
    ) -> anyhow::Result<Option<AssetItem>>;
}

/// An external asset manager: reads the items of a connection.
#[async_trait]
pub trait AssetManager: Send + Sync {
    async fn item(
        &self,
        organization: OrganizationId,
        connection: &AssetConnection,
        id: AssetItemId,
    ) -> anyhow::Result<Option<AssetItem>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(highres: bool, proxy: bool) -> AssetItem {
        AssetItem {
            id: AssetItemId::new_v4(),
            connection_id: AssetConnectionId::new_v4(),
            name: "clip".into(),
            highres: highres.then(UploadId::new_v4),
            proxy: proxy.then(UploadId::new_v4),
            created_at: Timestamp::now(),
        }
    }

    #[test]
    fn every_artifact_branch_of_rule_10() {
        let both = item(true, true);
        assert_eq!(choose(&both, Artifact::Highres).unwrap(), (Artifact::Highres, both.highres.unwrap()));
        assert_eq!(choose(&both, Artifact::Proxy).unwrap(), (Artifact::Proxy, both.proxy.unwrap()));
        assert_eq!(choose(&both, Artifact::Auto).unwrap(), (Artifact::Highres, both.highres.unwrap()));
        let proxy_only = item(false, true);
        assert!(choose(&proxy_only, Artifact::Highres).unwrap_err().contains("no highres file"));
        assert_eq!(choose(&proxy_only, Artifact::Auto).unwrap(), (Artifact::Proxy, proxy_only.proxy.unwrap()));
        let highres_only = item(true, false);
        assert!(choose(&highres_only, Artifact::Proxy).unwrap_err().contains("no proxy file"));
        assert!(choose(&item(false, false), Artifact::Auto).unwrap_err().contains("neither"));
    }
}
