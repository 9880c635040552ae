//! The ten shared-store endpoints. Each: bearer auth, parse, one domain call, map.

use std::sync::Arc;

use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::{authenticate, Scheme};
use super::body::json_object;
use super::openapi::prelude::*;
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::StoreId;
use crate::domain::shared_stores::{
    self as stores, EntryId, EntryRename, EntryWrite, NewStore, SharedStore, StoreEntry, StoreError, StoreRename,
};

endpoints! {
    list_shared_stores: GET "/shared-stores" => "list-shared-stores", handler: list_stores,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): Doc::new("List shared stores, by name", STORES, Bearer)
            .answer(200, "At most 10 stores", sc.of::<StoreList>())
            .store(sc, &[]);
    create_shared_store: POST "/shared-stores" => "create-shared-store", handler: create_store,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"], idempotent: true,
        operation(sc): Doc::new("Create a shared store", STORES, Bearer)
            .body(sc.of::<stores::NewStore>(), true)
            .answer(200, "The store", sc.of::<StoreAnswer>())
            .store(sc, &[400, 409])
            .idempotent(sc);
    rename_shared_store: PATCH "/shared-stores/{store_id}" => "rename-shared-store", handler: rename_store,
        dynamodb: ["dynamodb:GetItem", "dynamodb:UpdateItem"],
        operation(sc): Doc::new("Rename a shared store", STORES, Bearer)
            .body(sc.of::<stores::StoreRename>(), true)
            .answer(200, "The store", sc.of::<StoreAnswer>())
            .store(sc, &[400, 404]);
    delete_shared_store: DELETE "/shared-stores/{store_id}" => "delete-shared-store", handler: delete_store,
        dynamodb: [
            "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:DeleteItem",
            "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem",
        ],
        operation(sc): Doc::new("Delete a shared store and its entries", STORES, Bearer)
            .answer(200, "Deleted", sc.of::<s::Success>())
            .store(sc, &[404]);
    // A list of 10,000 entries, and a bulk's answer, can be larger than a Lambda response.
    list_shared_store_entries: GET "/shared-stores/{store_id}/entries" => "list-shared-store-entries",
        handler: list_entries,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"], s3: ["s3:PutObject", "s3:GetObject"], large_responses: true,
        operation(sc): Doc::new("List a store's entries, by display name", STORES, Bearer)
            .answer(200, "Up to 10,000 entries with their metadata", sc.of::<EntryList>())
            .large(sc)
            .store(sc, &[404]);
    // Query: a bulk repairing the store a killed bulk left reads that bulk's journal.
    bulk_upsert_shared_store_entries: POST "/shared-stores/{store_id}/entries/bulk" => "bulk-upsert-shared-store-entries",
        handler: bulk_upsert,
        dynamodb: [
            "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem",
            "dynamodb:BatchWriteItem",
        ], s3: ["s3:PutObject", "s3:GetObject"], large_responses: true,
        operation(sc): Doc::new("Create or replace up to 5,000 entries", STORES, Bearer)
            .body(sc.of::<stores::BulkBody>(), true)
            .answer(200, "The entries written", sc.of::<stores::BulkUpsert>())
            .large(sc)
            .store(sc, &[400, 404, 409, 413]);
    get_shared_store_entry: GET "/shared-stores/{store_id}/entries/{entry_id}" => "get-shared-store-entry",
        handler: get_entry,
        dynamodb: ["dynamodb:GetItem"],
        operation(sc): Doc::new("Read an entry", STORES, Bearer)
            .answer(200, "The entry", sc.of::<EntryAnswer>())
            .store(sc, &[400, 404]);
    // Writers of one entry repair a store a dead bulk left first (lease, journal, counts):
    // UpdateItem, Query, BatchGetItem and BatchWriteItem.
    put_shared_store_entry: PUT "/shared-stores/{store_id}/entries/{entry_id}" => "put-shared-store-entry",
        handler: put_entry,
        dynamodb: [
            "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem",
            "dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem",
        ],
        operation(sc): Doc::new("Create or replace an entry", STORES, Bearer)
            .body(sc.of::<stores::EntryBody>(), true)
            .answer(200, "The entry", sc.of::<EntryAnswer>())
            .store(sc, &[400, 404, 409, 413]);
    rename_shared_store_entry: PATCH "/shared-stores/{store_id}/entries/{entry_id}" => "rename-shared-store-entry",
        handler: rename_entry,
        dynamodb: [
            "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem",
            "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem",
        ],
        operation(sc): Doc::new("Rename an entry, and maybe replace its metadata", STORES, Bearer)
            .body(sc.of::<stores::EntryRename>(), true)
            .answer(200, "The entry", sc.of::<EntryAnswer>())
            .store(sc, &[400, 404, 409, 413]);
    delete_shared_store_entry: DELETE "/shared-stores/{store_id}/entries/{entry_id}" => "delete-shared-store-entry",
        handler: delete_entry,
        dynamodb: [
            "dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:UpdateItem", "dynamodb:Query",
            "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem",
        ],
        operation(sc): Doc::new("Delete an entry", STORES, Bearer)
            .answer(200, "Deleted", sc.of::<s::Success>())
            .store(sc, &[400, 404]);
}

const LIST_STORES_FAILED: &str = "Failed to list shared stores";
const CREATE_STORE_FAILED: &str = "Failed to create shared store";
const RENAME_STORE_FAILED: &str = "Failed to rename shared store";
const DELETE_STORE_FAILED: &str = "Failed to delete shared store";
const LIST_ENTRIES_FAILED: &str = "Failed to list shared store entries";
const GET_ENTRY_FAILED: &str = "Failed to get shared store entry";
const PUT_ENTRY_FAILED: &str = "Failed to put shared store entry";
const RENAME_ENTRY_FAILED: &str = "Failed to rename shared store entry";
const DELETE_ENTRY_FAILED: &str = "Failed to delete shared store entry";
const UPSERT_ENTRIES_FAILED: &str = "Failed to upsert shared store entries";

/// The caller's organization, from a bearer key.
async fn organization(app: &App, call: &Call) -> Result<OrganizationId, ApiError> {
    Ok(authenticate(app, call.request.headers(), Scheme::Bearer).await?.organization_id())
}

/// Authenticates, then reads the `store_id` path parameter.
async fn store_scope(app: &App, call: &Call, failure: &'static str) -> Result<(OrganizationId, StoreId), ApiError> {
    let organization = organization(app, call).await?;
    let store =
        stores::parse_store_id(call.params.get("store_id")).map_err(|error| ApiError::from_store(error, failure))?;
    Ok((organization, store))
}

/// Reads the `entry_id` path parameter of a GET, PATCH or DELETE.
fn path_entry_id(call: &Call, failure: &'static str) -> Result<EntryId, ApiError> {
    stores::parse_path_entry_id(call.params.get("entry_id")).map_err(fail(failure))
}

/// `{ store }`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreAnswer<'a> {
    pub store: &'a SharedStore,
}

/// `{ stores }`, by name.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreList<'a> {
    #[schema(max_items = 10)]
    pub stores: &'a [SharedStore],
}

/// `{ entry }`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EntryAnswer<'a> {
    pub entry: &'a StoreEntry,
}

/// `{ entries }`, by display name.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EntryList<'a> {
    #[schema(max_items = 10000)]
    pub entries: &'a [StoreEntry],
}

/// A 200 whose body is `answer`, serialized straight from the domain's values (metadata
/// is written out as the JSON text it is held as, without building a tree first).
fn ok<T: Serialize>(answer: &T) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, answer))
}

/// Maps a store error with the endpoint's 500 text.
fn fail(failure: &'static str) -> impl Fn(StoreError) -> ApiError {
    move |error| ApiError::from_store(error, failure)
}

/// `GET /shared-stores`
pub async fn list_stores(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let list = stores::list_stores(app.stores().as_ref(), organization).await.map_err(fail(LIST_STORES_FAILED))?;
    ok(&StoreList { stores: &list })
}

/// `POST /shared-stores`
pub async fn create_store(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let body = json_object(&call.request)?;
    let NewStore { name, source_type } = NewStore::parse(&body).map_err(fail(CREATE_STORE_FAILED))?;
    let store = stores::create_store(app.stores().as_ref(), app.clock.as_ref(), organization, name, source_type)
        .await
        .map_err(fail(CREATE_STORE_FAILED))?;
    ok(&StoreAnswer { store: &store })
}

/// `PATCH /shared-stores/{store_id}`
pub async fn rename_store(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, store) = store_scope(&app, &call, RENAME_STORE_FAILED).await?;
    let body = json_object(&call.request)?;
    let StoreRename { name } = StoreRename::parse(&body).map_err(fail(RENAME_STORE_FAILED))?;
    let store = stores::rename_store(app.stores().as_ref(), app.clock.as_ref(), organization, store, name)
        .await
        .map_err(fail(RENAME_STORE_FAILED))?;
    ok(&StoreAnswer { store: &store })
}

/// `DELETE /shared-stores/{store_id}`
pub async fn delete_store(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, store) = store_scope(&app, &call, DELETE_STORE_FAILED).await?;
    stores::delete_store(app.stores().as_ref(), organization, store).await.map_err(fail(DELETE_STORE_FAILED))?;
    ok(&s::Success { success: true })
}

/// `GET /shared-stores/{store_id}/entries`
pub async fn list_entries(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, store) = store_scope(&app, &call, LIST_ENTRIES_FAILED).await?;
    let entries =
        stores::list_entries(app.stores().as_ref(), organization, store).await.map_err(fail(LIST_ENTRIES_FAILED))?;
    ok(&EntryList { entries: &entries })
}

/// `GET /shared-stores/{store_id}/entries/{entry_id}`
pub async fn get_entry(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, store) = store_scope(&app, &call, GET_ENTRY_FAILED).await?;
    let entry_id = path_entry_id(&call, GET_ENTRY_FAILED)?;
    let entry = stores::get_entry(app.stores().as_ref(), organization, store, &entry_id)
        .await
        .map_err(fail(GET_ENTRY_FAILED))?;
    ok(&EntryAnswer { entry: &entry })
}

/// `PUT /shared-stores/{store_id}/entries/{entry_id}`
pub async fn put_entry(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, store) = store_scope(&app, &call, PUT_ENTRY_FAILED).await?;
    let body = json_object(&call.request)?;
    let write = EntryWrite::parse_put(call.params.get("entry_id"), &body).map_err(fail(PUT_ENTRY_FAILED))?;
    let entry = stores::put_entry(app.stores().as_ref(), app.clock.as_ref(), organization, store, write)
        .await
        .map_err(fail(PUT_ENTRY_FAILED))?;
    ok(&EntryAnswer { entry: &entry })
}

/// `PATCH /shared-stores/{store_id}/entries/{entry_id}`
pub async fn rename_entry(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, store) = store_scope(&app, &call, RENAME_ENTRY_FAILED).await?;
    let entry_id = path_entry_id(&call, RENAME_ENTRY_FAILED)?;
    let body = json_object(&call.request)?;
    let rename = EntryRename::parse(&body).map_err(fail(RENAME_ENTRY_FAILED))?;
    let entry = stores::rename_entry(app.stores().as_ref(), app.clock.as_ref(), organization, store, &entry_id, rename)
        .await
        .map_err(fail(RENAME_ENTRY_FAILED))?;
    ok(&EntryAnswer { entry: &entry })
}

/// `DELETE /shared-stores/{store_id}/entries/{entry_id}`
pub async fn delete_entry(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, store) = store_scope(&app, &call, DELETE_ENTRY_FAILED).await?;
    let entry_id = path_entry_id(&call, DELETE_ENTRY_FAILED)?;
    stores::delete_entry(app.stores().as_ref(), organization, store, &entry_id)
        .await
        .map_err(fail(DELETE_ENTRY_FAILED))?;
    ok(&s::Success { success: true })
}

/// `POST /shared-stores/{store_id}/entries/bulk`
pub async fn bulk_upsert(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, store) = store_scope(&app, &call, UPSERT_ENTRIES_FAILED).await?;
    let body = json_object(&call.request)?;
    let writes = stores::parse_bulk(&body).map_err(fail(UPSERT_ENTRIES_FAILED))?;
    let result = stores::bulk_upsert(app.stores().as_ref(), app.clock.as_ref(), organization, store, writes)
        .await
        .map_err(fail(UPSERT_ENTRIES_FAILED))?;
    ok(&result)
}
