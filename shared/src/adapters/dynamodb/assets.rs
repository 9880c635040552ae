//! Asset-manager connections and `local` items in DynamoDB, as JSON documents. A
//! connection's sort key is its workspace: a conditional put keeps one per workspace.

use async_trait::async_trait;

use super::table::{s, text, Item};
use super::{keys, DynamoDb};
use crate::domain::asset_manager::AssetRepo;
use crate::domain::asset_manager::{AssetConnection, AssetItem};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::{AssetConnectionId, AssetItemId};

fn document<T: serde::de::DeserializeOwned>(item: &Item, what: &str) -> anyhow::Result<T> {
    serde_json::from_str(text(item, "document")?)
        .map_err(|error| anyhow::anyhow!("a stored {what} could not be read: {error}"))
}

#[async_trait]
impl AssetRepo for DynamoDb {
    async fn create_connection(
        &self,
        organization: OrganizationId,
        connection: &AssetConnection,
    ) -> anyhow::Result<bool> {
        let mut item = keys::asset_connection(organization, connection.workspace_id);
        item.insert("document".to_owned(), s(serde_json::to_string(connection)?));
        self.put_if(item, "attribute_not_exists(pk)", &[], "storing an asset connection").await
    }

    async fn connections(&self, organization: OrganizationId) -> anyhow::Result<Vec<AssetConnection>> {
        let items = self
            .query_all(
                keys::organization_pk(organization),
                Some(keys::ASSET_CONNECTION_PREFIX),
                None,
                "listing asset connections",
            )
            .await?;
        items.iter().map(|item| document(item, "asset connection")).collect()
    }

    async fn put_asset_item(&self, organization: OrganizationId, item: &AssetItem) -> anyhow::Result<()> {
        let mut stored = keys::asset_item(organization, item.connection_id, item.id);
        stored.insert("document".to_owned(), s(serde_json::to_string(item)?));
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(stored))
            .send()
            .await
            .map_err(|error| super::table::failure(error, "storing an asset item"))?;
        Ok(())
    }

    async fn get_asset_item(
        &self,
        organization: OrganizationId,
        connection: AssetConnectionId,
        id: AssetItemId,
    ) -> anyhow::Result<Option<AssetItem>> {
        let item = self.get(keys::asset_item(organization, connection, id), "reading an asset item").await?;
        item.as_ref().map(|item| document(item, "asset item")).transpose()
    }
}
