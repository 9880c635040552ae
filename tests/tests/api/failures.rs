//! When storage fails, each endpoint answers 500 with its own contract message and
//! leaks nothing of the cause.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::{Method, StatusCode};
use serde_json::json;
use shared::app::App;
use shared::domain::identity::{apply_seed, Seed};
use shared::domain::shared_stores::{EntryRename, EntryWrite, SharedStore, StoreEntry, StoreError};
use shared::domain::time::Timestamp;
use shared::ports::SharedStoreRepo;
use uuid::Uuid;

use crate::helpers::TestApp;

/// A store repository whose storage is always down.
struct Unavailable;

fn down() -> StoreError {
    StoreError::Backend(anyhow::anyhow!("connection refused: secret-host:8000"))
}

#[async_trait]
impl SharedStoreRepo for Unavailable {
    async fn list_stores(&self, _: Uuid) -> Result<Vec<SharedStore>, StoreError> {
        Err(down())
    }
    async fn create_store(&self, _: Uuid, _: &SharedStore, _: u32) -> Result<(), StoreError> {
        Err(down())
    }
    async fn rename_store(&self, _: Uuid, _: Uuid, _: &str, _: Timestamp) -> Result<SharedStore, StoreError> {
        Err(down())
    }
    async fn delete_store(&self, _: Uuid, _: Uuid) -> Result<(), StoreError> {
        Err(down())
    }
    async fn list_entries(&self, _: Uuid, _: Uuid) -> Result<Vec<StoreEntry>, StoreError> {
        Err(down())
    }
    async fn get_entry(&self, _: Uuid, _: Uuid, _: &str) -> Result<StoreEntry, StoreError> {
        Err(down())
    }
    async fn put_entry(
        &self,
        _: Uuid,
        _: Uuid,
        _: &EntryWrite,
        _: Timestamp,
        _: u32,
    ) -> Result<StoreEntry, StoreError> {
        Err(down())
    }
    async fn rename_entry(
        &self,
        _: Uuid,
        _: Uuid,
        _: &str,
        _: &EntryRename,
        _: Timestamp,
    ) -> Result<StoreEntry, StoreError> {
        Err(down())
    }
    async fn delete_entry(&self, _: Uuid, _: Uuid, _: &str) -> Result<(), StoreError> {
        Err(down())
    }
    async fn upsert_entries(
        &self,
        _: Uuid,
        _: Uuid,
        _: &[EntryWrite],
        _: Timestamp,
        _: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        Err(down())
    }
}

#[tokio::test]
async fn every_shared_store_endpoint_has_its_own_500_body() {
    let mut app = App::embedded();
    app.stores = Arc::new(Unavailable);
    let app = Arc::new(app);
    let seed = Seed::from_json(
        r#"{"organizations":[{"id":"6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01","name":"A","slug":"a","api_keys":["k"]}]}"#,
    )
    .unwrap();
    apply_seed(app.identity.as_ref(), app.clock.as_ref(), &seed).await.unwrap();
    let test = TestApp { app, key: "k".into(), organization: Uuid::nil() };
    let store = Uuid::new_v4();
    let cases = [
        (Method::GET, "/shared-stores".to_owned(), None, "Failed to list shared stores"),
        (Method::POST, "/shared-stores".to_owned(), Some(json!({ "name": "n" })), "Failed to create shared store"),
        (
            Method::PATCH,
            format!("/shared-stores/{store}"),
            Some(json!({ "name": "n" })),
            "Failed to rename shared store",
        ),
        (Method::DELETE, format!("/shared-stores/{store}"), None, "Failed to delete shared store"),
        (Method::GET, format!("/shared-stores/{store}/entries"), None, "Failed to list shared store entries"),
        (Method::GET, format!("/shared-stores/{store}/entries/e"), None, "Failed to get shared store entry"),
        (
            Method::PUT,
            format!("/shared-stores/{store}/entries/e"),
            Some(json!({ "display_name": "d" })),
            "Failed to put shared store entry",
        ),
        (
            Method::PATCH,
            format!("/shared-stores/{store}/entries/e"),
            Some(json!({ "entry_id": "f", "display_name": "d" })),
            "Failed to rename shared store entry",
        ),
        (Method::DELETE, format!("/shared-stores/{store}/entries/e"), None, "Failed to delete shared store entry"),
        (
            Method::POST,
            format!("/shared-stores/{store}/entries/bulk"),
            Some(json!({ "entries": [{ "entry_id": "e", "display_name": "d" }] })),
            "Failed to upsert shared store entries",
        ),
    ];
    for (method, path, body, message) in cases {
        let (status, response) = test.call(method.clone(), &path, body).await;
        assert_eq!(
            (status, response),
            (StatusCode::INTERNAL_SERVER_ERROR, json!({ "error": message })),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_dynamodb_is_a_500_not_a_panic() {
    // Port 9 (discard) has no listener here: every call is refused at once.
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new("local", "local", None, None, "test"))
        .endpoint_url("http://127.0.0.1:9")
        .build();
    let dynamodb =
        shared::adapters::dynamodb::DynamoDb::new(aws_sdk_dynamodb::Client::from_conf(config), "unreachable");
    let app = Arc::new(App::dynamodb(dynamodb, crate::helpers::temp_media(), "ffprobe", Duration::ZERO));
    let test = TestApp { app, key: "k".into(), organization: Uuid::nil() };
    let (status, body) = test.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body, json!({ "detail": "authentication is unavailable, try again" }));
}
