//! A Lambda function fed a real API Gateway HTTP API (v2) event.

use http::StatusCode;
use serde_json::json;
use shared::api::{self, routes};

use crate::helpers::{Backend, TestApp};

fn event(method: &str, raw_path: &str, key: &str, body: Option<&str>) -> String {
    event_with_query(method, raw_path, "", key, body)
}

fn event_with_query(method: &str, raw_path: &str, query: &str, key: &str, body: Option<&str>) -> String {
    json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": query,
        "headers": { "authorization": format!("Bearer {key}"), "content-type": "application/json" },
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api",
            "domainName": "api.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "api",
            "http": { "method": method, "path": raw_path, "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1", "userAgent": "test" },
            "requestId": "request",
            "routeKey": "$default",
            "stage": "$default",
            "time": "22/Nov/2026:00:00:00 +0000",
            "timeEpoch": 0
        },
        "body": body,
        "isBase64Encoded": false
    })
    .to_string()
}

#[tokio::test]
async fn a_function_serves_its_route_from_an_api_gateway_event() {
    let app = TestApp::new(Backend::Embedded).await;
    let store = app.create_store("s").await;
    let put = routes::by_function("put-shared-store-entry").unwrap();
    let raw_path = format!("/shared-stores/{store}/entries/a%2Fb");
    let request =
        lambda_http::request::from_str(&event("PUT", &raw_path, &app.key, Some(r#"{"display_name":"x"}"#))).unwrap();
    let response = api::invoke_route(put, app.app.clone(), request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(body["entry"]["entry_id"], "a/b");

    let get = routes::by_function("get-shared-store-entry").unwrap();
    let request = lambda_http::request::from_str(&event("GET", &format!("/prod{raw_path}"), &app.key, None)).unwrap();
    let response = api::invoke_route(get, app.app.clone(), request).await;
    assert_eq!(response.status(), StatusCode::OK, "a stage prefix is ignored");
}

#[tokio::test]
async fn a_function_reads_its_query_string_from_the_event() {
    let app = TestApp::new(Backend::Embedded).await;
    for name in ["100% real", "100 percent"] {
        let (status, _) = app.call(http::Method::POST, "/agent/create", Some(json!({ "name": name }))).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let list = routes::by_function("list-agents").unwrap();
    let request =
        lambda_http::request::from_str(&event_with_query("GET", "/agents", "limit=1&name=100%25", &app.key, None))
            .unwrap();
    let response = api::invoke_route(list, app.app.clone(), request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(body["agents"].as_array().unwrap().len(), 1);
    assert_eq!(body["agents"][0]["name"], "100% real");
    assert!(body["next_cursor"].is_null(), "the name filter left one agent");
}
