//! When storage fails, each endpoint answers its contract 500 body (shared stores) or a
//! 503, leaks nothing of the cause, and does so within its retry schedule: every wait
//! is bounded.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http::{Method, StatusCode};
use serde_json::json;
use shared::adapters::dynamodb::{keys, AttributeValue, DynamoDb};
use shared::app::App;
use shared::core::retry::{AWS_SDK_CALLS, STORE_LEASE_WAIT, TRANSACTION_CONFLICTS};
use shared::domain::identity::OrganizationId;
use shared::domain::shared_stores::SharedStoreRepo;
use shared::domain::shared_stores::{EntryId, EntryRename, EntryWrite, SharedStore, StoreEntry, StoreError, StoreId};
use shared::domain::time::Timestamp;

use crate::faults;
use crate::helpers::{dynamodb, temp_media, TestApp};

/// A store repository whose storage is always down.
struct Down;

fn down() -> StoreError {
    StoreError::Backend(anyhow::anyhow!("connection refused: secret-host:8000"))
}

#[async_trait]
impl SharedStoreRepo for Down {
    async fn list_stores(&self, _: OrganizationId) -> Result<Vec<SharedStore>, StoreError> {
        Err(down())
    }
    async fn create_store(&self, _: OrganizationId, _: &SharedStore, _: u32) -> Result<(), StoreError> {
        Err(down())
    }
    async fn rename_store(
        &self,
        _: OrganizationId,
        _: StoreId,
        _: &str,
        _: Timestamp,
    ) -> Result<SharedStore, StoreError> {
        Err(down())
    }
    async fn delete_store(&self, _: OrganizationId, _: StoreId) -> Result<(), StoreError> {
        Err(down())
    }
    async fn list_entries(&self, _: OrganizationId, _: StoreId) -> Result<Vec<StoreEntry>, StoreError> {
        Err(down())
    }
    async fn get_entry(&self, _: OrganizationId, _: StoreId, _: &EntryId) -> Result<StoreEntry, StoreError> {
        Err(down())
    }
    async fn put_entry(
        &self,
        _: OrganizationId,
        _: StoreId,
        _: &EntryWrite,
        _: Timestamp,
        _: u32,
    ) -> Result<StoreEntry, StoreError> {
        Err(down())
    }
    async fn rename_entry(
        &self,
        _: OrganizationId,
        _: StoreId,
        _: &EntryId,
        _: &EntryRename,
        _: Timestamp,
    ) -> Result<StoreEntry, StoreError> {
        Err(down())
    }
    async fn delete_entry(&self, _: OrganizationId, _: StoreId, _: &EntryId) -> Result<(), StoreError> {
        Err(down())
    }
    async fn upsert_entries(
        &self,
        _: OrganizationId,
        _: StoreId,
        _: Vec<EntryWrite>,
        _: Timestamp,
        _: u32,
    ) -> Result<Vec<StoreEntry>, StoreError> {
        Err(down())
    }
}

#[tokio::test]
async fn every_shared_store_endpoint_has_its_own_500_body() {
    let mut app = App::embedded().unwrap();
    app.replace_stores(Arc::new(Down));
    let test = TestApp::seeded(app).await;
    let store = StoreId::new_v4();
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

/// A DynamoDB client for `endpoint`, with the retries and timeouts the service uses.
fn dynamodb_at(endpoint: &str) -> DynamoDb {
    let shared = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(
            aws_sdk_dynamodb::config::Credentials::new("local", "local", None, None, "test"),
        ))
        .endpoint_url(endpoint)
        .http_client(shared::adapters::aws_env::https_client())
        .build();
    DynamoDb::from_config(&shared, "unreachable")
}

fn app_on(dynamodb: DynamoDb) -> TestApp {
    let app = Arc::new(App::dynamodb(dynamodb, temp_media()));
    TestApp { app, key: "k".into(), organization: OrganizationId::new_v4() }
}

#[tokio::test]
async fn an_unreachable_dynamodb_is_a_503_not_a_panic() {
    // Port 9 (discard) has no listener here: every call is refused at once.
    let test = app_on(dynamodb_at("http://127.0.0.1:9"));
    let (status, body) = test.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, json!({ "detail": "authentication is unavailable, try again" }));
}

#[tokio::test]
async fn a_dynamodb_that_never_answers_is_a_503_within_the_sdk_budget() {
    // A listener that accepts connections and never answers: each attempt times out.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((connection, _)) = listener.accept().await {
            held.push(connection);
        }
    });
    let test = app_on(dynamodb_at(&format!("http://{address}")));
    let started = Instant::now();
    let (status, body) = test.call(Method::GET, "/agents", None).await;
    let took = started.elapsed();
    assert_eq!(
        (status, body),
        (StatusCode::SERVICE_UNAVAILABLE, json!({ "detail": "authentication is unavailable, try again" }))
    );
    assert!(took <= AWS_SDK_CALLS.budget + Duration::from_secs(2), "answered after {took:?}");
    assert!(took >= Duration::from_secs(2), "attempts waited for an answer first: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_that_keep_conflicting_give_the_contract_500_within_their_budget() {
    let plain = dynamodb().await;
    let test = TestApp::seeded(App::dynamodb(plain.clone(), temp_media())).await;
    let store = test.create_store("s").await;
    let conflicted = test.through(plain.with_interceptor(faults::conflicting_transactions()));
    put_gives_up_within(&conflicted, &store, TRANSACTION_CONFLICTS.budget).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_applied_while_every_answer_said_in_progress_is_sent_again_as_itself() {
    let plain = dynamodb().await;
    let test = TestApp::seeded(App::dynamodb(plain.clone(), temp_media())).await;
    let attempts = AWS_SDK_CALLS.max_attempts as usize;
    let fault = faults::applied_transactions_said_in_progress(attempts);
    let refused = fault.refused();
    let slow = test.through(plain.with_interceptor(fault));
    // The store's count and the store are one transaction, each write conditional: sent
    // again under a new token, it would fail on its own writes (a 500).
    let (status, body) = slow.call(Method::POST, "/shared-stores", Some(json!({ "name": "once" }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(refused.load(Ordering::SeqCst), attempts, "the SDK gave up, and the service sent it again");
    let (_, stores) = test.call(Method::GET, "/shared-stores", None).await;
    let named: Vec<_> = stores["stores"].as_array().expect("stores").iter().filter(|s| s["name"] == "once").collect();
    assert_eq!(named.len(), 1, "{stores}");
    assert_eq!(named[0]["id"], body["store"]["id"]);
}

/// A PUT of a new entry answers the contract's 500 body after retrying for at least half
/// of `budget`, and no later than two seconds after it.
async fn put_gives_up_within(app: &TestApp, store: &str, budget: Duration) {
    let started = Instant::now();
    let (status, body) =
        app.call(Method::PUT, &format!("/shared-stores/{store}/entries/e"), Some(json!({ "display_name": "d" }))).await;
    let took = started.elapsed();
    assert_eq!(
        (status, body),
        (StatusCode::INTERNAL_SERVER_ERROR, json!({ "error": "Failed to put shared store entry" }))
    );
    assert!(took >= budget / 2, "it retried first: {took:?}");
    assert!(took <= budget + Duration::from_secs(2), "answered after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_batch_writes_give_the_contract_500_and_leave_an_exact_store() {
    let plain = dynamodb().await;
    let test = TestApp::seeded(App::dynamodb(plain.clone(), temp_media())).await;
    let store = test.create_store("s").await;
    test.fill(&store, "kept", 10).await;
    let fault = faults::throttled_batch_writes();
    let refused = fault.refused();
    let throttled = test.through(plain.with_interceptor(fault));
    let entries: Vec<_> = (0..60).map(|i| json!({ "entry_id": format!("new-{i}"), "display_name": "d" })).collect();
    let started = Instant::now();
    let (status, body) = throttled
        .call(Method::POST, &format!("/shared-stores/{store}/entries/bulk"), Some(json!({ "entries": entries })))
        .await;
    let took = started.elapsed();
    assert_eq!(
        (status, body),
        (StatusCode::INTERNAL_SERVER_ERROR, json!({ "error": "Failed to upsert shared store entries" }))
    );
    assert!(took <= AWS_SDK_CALLS.budget + Duration::from_secs(5), "answered after {took:?}");
    assert!(refused.load(std::sync::atomic::Ordering::SeqCst) >= 3, "the entry writes were throttled, and retried");
    // The slots reserved for the 60 entries that never landed were given back.
    let (_, stores) = test.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], 10);
    let (status, _) = test
        .call(Method::PUT, &format!("/shared-stores/{store}/entries/after"), Some(json!({ "display_name": "d" })))
        .await;
    assert_eq!(status, StatusCode::OK, "the lease was released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_of_a_store_whose_lease_never_ends_give_up_within_the_lease_wait_budget() {
    let plain = dynamodb().await;
    let test = TestApp::seeded(App::dynamodb(plain.clone(), temp_media())).await;
    let store = test.create_store("s").await;
    // A holder that keeps its lease for an hour.
    let far = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() + 3_600_000)
        .to_string();
    plain
        .client()
        .update_item()
        .table_name(plain.table())
        .set_key(Some(keys::store(test.organization, store.parse().unwrap())))
        .update_expression("SET lease_id = :lease, lease_until = :until")
        .expression_attribute_values(":lease", AttributeValue::S("someone-else".into()))
        .expression_attribute_values(":until", AttributeValue::N(far))
        .send()
        .await
        .unwrap();
    put_gives_up_within(&test, &store, STORE_LEASE_WAIT.budget).await;
}
