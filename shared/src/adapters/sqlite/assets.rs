//! Asset-manager connections and `local` items in SQLite, as JSON documents; a
//! workspace's connection is its primary key, so a second one is refused.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use super::{Db, Sqlite};
use crate::domain::asset_manager::AssetRepo;
use crate::domain::asset_manager::{AssetConnection, AssetItem};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::{AssetConnectionId, AssetItemId};

fn read<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> anyhow::Result<T> {
    serde_json::from_str(text).map_err(|error| anyhow::anyhow!("a stored {what} could not be read: {error}"))
}

#[async_trait]
impl AssetRepo for Sqlite {
    async fn create_connection(
        &self,
        organization: OrganizationId,
        connection: &AssetConnection,
    ) -> anyhow::Result<bool> {
        let document = serde_json::to_string(connection)?;
        let workspace = connection.workspace_id.to_string();
        self.write(move |transaction| {
            let inserted = transaction
                .prepare_cached(
                    "INSERT INTO asset_connections (organization_id, workspace_id, document) VALUES (?1, ?2, ?3)
                     ON CONFLICT DO NOTHING",
                )
                .db("storing an asset connection")?
                .execute(params![organization.to_string(), workspace, document])
                .db("storing an asset connection")?;
            Ok(inserted == 1)
        })
        .await
    }

    async fn connections(&self, organization: OrganizationId) -> anyhow::Result<Vec<AssetConnection>> {
        let documents: Vec<String> = self
            .read(move |transaction| {
                let mut statement = transaction
                    .prepare_cached("SELECT document FROM asset_connections WHERE organization_id = ?1")
                    .db("reading asset connections")?;
                let rows = statement
                    .query_map([organization.to_string()], |row| row.get(0))
                    .db("reading asset connections")?;
                rows.collect::<Result<Vec<String>, _>>().db("reading asset connections")
            })
            .await?;
        documents.iter().map(|text| read(text, "asset connection")).collect()
    }

    async fn put_asset_item(&self, organization: OrganizationId, item: &AssetItem) -> anyhow::Result<()> {
        let document = serde_json::to_string(item)?;
        let (connection, id) = (item.connection_id.to_string(), item.id.to_string());
        self.write(move |transaction| {
            transaction
                .prepare_cached(
                    "INSERT INTO asset_items (organization_id, connection_id, id, document) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (organization_id, connection_id, id) DO UPDATE SET document = ?4",
                )
                .db("storing an asset item")?
                .execute(params![organization.to_string(), connection, id, document])
                .db("storing an asset item")?;
            Ok(())
        })
        .await
    }

    async fn get_asset_item(
        &self,
        organization: OrganizationId,
        connection: AssetConnectionId,
        id: AssetItemId,
    ) -> anyhow::Result<Option<AssetItem>> {
        let document: Option<String> = self
            .call(move |connection_| {
                connection_
                    .prepare_cached(
                        "SELECT document FROM asset_items WHERE organization_id = ?1 AND connection_id = ?2 AND id = ?3",
                    )
                    .db("reading an asset item")?
                    .query_row(params![organization.to_string(), connection.to_string(), id.to_string()], |row| {
                        row.get(0)
                    })
                    .optional()
                    .db("reading an asset item")
            })
            .await?;
        document.map(|text| read(&text, "asset item")).transpose()
    }
}
