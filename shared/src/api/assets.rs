//! Asset-manager connections and their items: auth, parse, one domain call, map.

use std::sync::Arc;

use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use super::body::json_body;
use super::openapi::prelude::*;
use super::runs::organization;
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::domain::asset_manager::{self, AssetConnection, AssetError, AssetItem, NewConnection, NewItem};
use crate::domain::ids::AssetConnectionId;

endpoints! {
    // Asset managers (rule 10): a connection per workspace (Query lists the
    // organization's), and the `local` provider's items made of ready video uploads.
    create_asset_connection: POST "/asset_connections" => "create-asset-connection", handler: create_connection,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"], idempotent: true,
        operation(sc): Doc::new("Connect an asset manager to a workspace", UPLOADS, BearerOrApiKey)
            .body(sc.of::<NewConnection>(), false)
            .answer(201, "The connection", sc.of::<AssetConnectionAnswer>())
            .general(sc, &[400, 409])
            .idempotent(sc);
    create_asset_item: POST "/asset_connections/{connection_id}/items" => "create-asset-item", handler: create_item,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"], idempotent: true,
        operation(sc): Doc::new("Add an item to a `local` asset manager", UPLOADS, BearerOrApiKey)
            .body(sc.of::<NewItem>(), true)
            .answer(201, "The item", sc.of::<AssetItemAnswer>())
            .general(sc, &[400, 404])
            .idempotent(sc);
}

/// `201 { connection }`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssetConnectionAnswer<'a> {
    pub connection: &'a AssetConnection,
}

/// `201 { item }`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssetItemAnswer<'a> {
    pub item: &'a AssetItem,
}

fn map_error(error: AssetError) -> ApiError {
    ApiError::refused(error, || "the asset manager could not be updated".into())
}

/// `POST /asset_connections`.
pub async fn create_connection(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let new = NewConnection::parse(&json_body(&call.request)?).map_err(map_error)?;
    let connection = asset_manager::create_connection(
        app.identity().as_ref(),
        app.assets().as_ref(),
        organization,
        new,
        app.clock.now(),
    )
    .await
    .map_err(map_error)?;
    Ok(json_response(StatusCode::CREATED, &AssetConnectionAnswer { connection: &connection }))
}

/// `POST /asset_connections/{connection_id}/items`.
pub async fn create_item(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let connection = AssetConnectionId::parse(call.params.get("connection_id"))
        .ok_or_else(|| map_error(AssetError::ConnectionNotFound))?;
    let new = NewItem::parse(&json_body(&call.request)?).map_err(map_error)?;
    let item = asset_manager::create_item(
        app.assets().as_ref(),
        app.uploads().as_ref(),
        organization,
        connection,
        new,
        app.clock.now(),
    )
    .await
    .map_err(map_error)?;
    Ok(json_response(StatusCode::CREATED, &AssetItemAnswer { item: &item }))
}
