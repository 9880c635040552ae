//! The `local` asset-manager provider: its items are kept in the service's own storage
//! (created with `POST /asset_connections/{id}/items`), each file a ready video upload.

use std::sync::Arc;

use async_trait::async_trait;

use crate::domain::asset_manager::AssetManager;
use crate::domain::asset_manager::AssetRepo;
use crate::domain::asset_manager::{AssetConnection, AssetItem};
use crate::domain::ids::AssetItemId;
use crate::domain::ids::OrganizationId;

/// Reads `local` connections' items from the repository.
pub struct LocalAssetManager {
    repo: Arc<dyn AssetRepo>,
}

impl LocalAssetManager {
    pub fn new(repo: Arc<dyn AssetRepo>) -> Self {
        Self { repo }
    }
}

#[async_trait]
impl AssetManager for LocalAssetManager {
    async fn item(
        &self,
        organization: OrganizationId,
        connection: &AssetConnection,
        id: AssetItemId,
    ) -> anyhow::Result<Option<AssetItem>> {
        anyhow::ensure!(connection.provider == "local", "provider {:?} is not served here", connection.provider);
        self.repo.get_asset_item(organization, connection.id, id).await
    }
}
