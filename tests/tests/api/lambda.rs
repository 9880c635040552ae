//! A Lambda function fed a real API Gateway HTTP API (v2) event.

use http::StatusCode;
use serde_json::{json, Value};
use shared::api;
use shared::runtime::http::MAX_INLINE_BODY_BYTES;

use crate::helpers::{call_function, http_get, lambda_event, large_entries, s3_media, Backend, TestApp};

#[tokio::test]
async fn a_function_serves_its_route_from_an_api_gateway_event() {
    let app = TestApp::new(Backend::Sqlite).await;
    let store = app.create_store("s").await;
    let put = api::Endpoint::of("put-shared-store-entry").unwrap();
    let raw_path = format!("/shared-stores/{store}/entries/a%2Fb");
    let request = lambda_event("PUT", &raw_path, "", &app.key, Some(r#"{"display_name":"x"}"#));
    let response = api::invoke_route(put, app.app.clone(), request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(body["entry"]["entry_id"], "a/b");

    let get = api::Endpoint::of("get-shared-store-entry").unwrap();
    let request = lambda_event("GET", &format!("/prod{raw_path}"), "", &app.key, None);
    let response = api::invoke_route(get, app.app.clone(), request).await;
    assert_eq!(response.status(), StatusCode::OK, "a stage prefix is ignored");
}

#[tokio::test]
async fn a_function_reads_its_query_string_from_the_event() {
    let app = TestApp::new(Backend::Sqlite).await;
    for name in ["100% real", "100 percent"] {
        let (status, _) = app.call(http::Method::POST, "/agent/create", Some(json!({ "name": name }))).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let list = api::Endpoint::of("list-agents").unwrap();
    let request = lambda_event("GET", "/agents", "limit=1&name=100%25", &app.key, None);
    let response = api::invoke_route(list, app.app.clone(), request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(body["agents"].as_array().unwrap().len(), 1);
    assert_eq!(body["agents"][0]["name"], "100% real");
    assert!(body["next_cursor"].is_null(), "the name filter left one agent");
}

/// Follows a 303 to the link it names and returns the JSON found there.
pub(crate) async fn follow(status: StatusCode, headers: &http::HeaderMap, body: &Value) -> Value {
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let location = headers.get(http::header::LOCATION).expect("a Location").to_str().unwrap();
    assert_eq!(body["location"], location);
    let (status, bytes) = http_get(location).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_slice(&bytes).expect("the whole JSON answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_larger_than_a_lambda_response_are_delivered_whole_through_a_link() {
    let app = TestApp::with_media(Backend::DynamoDb, s3_media().await).await;
    let store = app.create_store("big").await;
    // 26 entries of 255,000 bytes of metadata: 6.6 MB, more than a Lambda may return.
    let entries = large_entries("e", 26, 255_000);
    let bulk = json!({ "entries": entries });
    let (status, headers, body) = call_function(
        &app,
        "bulk-upsert-shared-store-entries",
        "POST",
        &format!("/shared-stores/{store}/entries/bulk"),
        Some(&bulk),
    )
    .await;
    let upserted = follow(status, &headers, &body).await;
    assert_eq!((upserted["success"].clone(), upserted["count"].clone()), (json!(true), json!(26)));

    let path = format!("/shared-stores/{store}/entries");
    let (status, headers, body) = call_function(&app, "list-shared-store-entries", "GET", &path, None).await;
    let listed = follow(status, &headers, &body).await;
    assert!(serde_json::to_vec(&listed).unwrap().len() > MAX_INLINE_BODY_BYTES);
    // The same list as `serve` answers it directly.
    let (status, direct) = app.call(http::Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed, direct);
    assert_eq!(listed["entries"].as_array().unwrap().len(), 26);
    assert_eq!(listed["entries"][25]["metadata"]["blob"].as_str().unwrap().len(), 255_000);

    // Smaller answers come back as they are.
    let (status, _, body) = call_function(&app, "get-shared-store-entry", "GET", &format!("{path}/e1"), None).await;
    assert_eq!((status, body["entry"]["entry_id"].as_str()), (StatusCode::OK, Some("e1")));
}

/// A deployment whose functions were given no task queue answers the run endpoints with a
/// 503 that names what is missing, and the task worker sends every message back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_task_queue_the_run_endpoints_say_what_is_missing() {
    let app = TestApp::new(Backend::DynamoDb).await;
    let missing = json!({
        "detail": "runs are not available: this deployment has no task queue (set TASK_QUEUE_URL and MEDIA_LINK_SECRET)"
    });
    for (method, path) in [
        (http::Method::GET, "/agent_runs".to_owned()),
        (http::Method::GET, format!("/agent_run/{}", uuid::Uuid::new_v4())),
        (http::Method::POST, format!("/agent/{}/run", uuid::Uuid::new_v4())),
        (http::Method::GET, format!("/agent/{}/runs", uuid::Uuid::new_v4())),
        (http::Method::GET, format!("/agent_run/{}/nodes", uuid::Uuid::new_v4())),
        (http::Method::POST, format!("/agent_run/{}/cancel", uuid::Uuid::new_v4())),
        (http::Method::POST, format!("/agent_run/{}/resume", uuid::Uuid::new_v4())),
        (http::Method::GET, format!("/agent_run/{}/webhooks", uuid::Uuid::new_v4())),
        (
            http::Method::POST,
            format!("/agent_run/{}/webhooks/{}/redeliver", uuid::Uuid::new_v4(), uuid::Uuid::new_v4()),
        ),
        (http::Method::GET, format!("/media/{}?expires=1&signature=00", uuid::Uuid::new_v4())),
    ] {
        let (status, body) = app.call(method.clone(), &path, Some(json!({}))).await;
        assert_eq!((status, &body), (StatusCode::SERVICE_UNAVAILABLE, &missing), "{method} {path}");
    }
    let event = serde_json::from_value(json!({ "Records": [{ "messageId": "m1", "body": "{}" }] })).unwrap();
    let answer = shared::runtime::sqs::handle_batch(&app.app, event).await;
    let failed: Vec<&str> = answer.batch_item_failures.iter().map(|failure| failure.item_identifier.as_str()).collect();
    assert_eq!(failed, ["m1"]);
}
