//! Defects a Schemathesis run against the contract found, each with its own test: what
//! RFC 9110 asks of a 405 and a 401, bodies that ignored unknown properties, and `null`
//! accepted for optional strings without a documented meaning.

use http::{header, Method, StatusCode};
use serde_json::{json, Value};
use shared::api::{self, Body};

use crate::helpers::{Backend, TestApp};

/// Sends a request through the local router and returns the whole response.
async fn send(app: &TestApp, method: Method, path: &str, headers: &[(&str, &str)]) -> api::Response {
    let mut request = http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    api::dispatch(app.app.clone(), request.body(Body::Empty).unwrap()).await
}

#[tokio::test]
async fn a_method_a_path_does_not_answer_is_refused_with_the_methods_it_does() {
    let app = TestApp::new(Backend::Sqlite).await;
    let cases = [
        (Method::TRACE, "/whoami".to_owned(), "GET"),
        (Method::POST, "/shared-stores/s/entries/e".to_owned(), "GET, PUT, PATCH, DELETE"),
        (Method::DELETE, "/shared-stores".to_owned(), "GET, POST"),
    ];
    for (method, path, allowed) in cases {
        let response = send(&app, method.clone(), &path, &[]).await;
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_eq!(response.headers()[header::ALLOW], allowed, "{method} {path}");
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body, json!({ "detail": "Method Not Allowed" }));
    }
    let response = send(&app, Method::GET, "/nowhere", &[]).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(response.headers().get(header::ALLOW).is_none());
}

/// Found by our own document: `GET /agent/create` read an agent called `create` (404)
/// where OpenAPI's concrete path answers POST only.
#[tokio::test]
async fn a_concrete_path_answers_only_its_own_methods() {
    let app = TestApp::new(Backend::Sqlite).await;
    let key = format!("Bearer {}", app.key);
    for (method, path) in [(Method::GET, "/agent/create"), (Method::GET, "/uploads/video/get_upload_url")] {
        let response = send(&app, method.clone(), path, &[("authorization", &key)]).await;
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_eq!(response.headers()[header::ALLOW], "POST", "{method} {path}");
    }
    let response = send(&app, Method::GET, "/agent/not-a-uuid", &[("authorization", &key)]).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "an ID that is not a UUID still gets its endpoint's 404");
    let store = app.create_store("s").await;
    let (status, body) = app
        .call(Method::PUT, &format!("/shared-stores/{store}/entries/bulk"), Some(json!({ "display_name": "B" })))
        .await;
    assert_eq!((status, &body["entry"]["entry_id"]), (StatusCode::OK, &json!("bulk")), "an entry may be called bulk");
}

#[tokio::test]
async fn every_401_carries_a_bearer_challenge() {
    let app = TestApp::new(Backend::Sqlite).await;
    for (path, headers) in [
        ("/whoami", vec![]),
        ("/whoami", vec![("x-api-key", "nope")]),
        ("/shared-stores", vec![("authorization", "Basic abc")]),
        ("/agents", vec![("authorization", "Bearer nope")]),
    ] {
        let response = send(&app, Method::GET, path, &headers).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path} {headers:?}");
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], r#"Bearer realm="video-workflow""#);
    }
    let allowed = send(&app, Method::GET, "/whoami", &[("x-api-key", &app.key)]).await;
    assert_eq!(allowed.status(), StatusCode::OK);
    assert!(allowed.headers().get(header::WWW_AUTHENTICATE).is_none());
}

#[tokio::test]
async fn a_misspelled_property_of_a_store_or_entry_body_is_refused_and_changes_nothing() {
    let app = TestApp::new(Backend::Sqlite).await;
    let store = app.create_store("s").await;
    let entry = format!("/shared-stores/{store}/entries/e");
    let (status, _) =
        app.call(Method::PUT, &entry, Some(json!({ "display_name": "E", "metadata": { "keep": true } }))).await;
    assert_eq!(status, StatusCode::OK);

    let refused = |name: &str| (StatusCode::BAD_REQUEST, json!({ "error": format!("unknown property: {name}") }));
    let cases = [
        (Method::PATCH, format!("/shared-stores/{store}"), json!({ "name": "t", "nmae": "u" }), "nmae"),
        (Method::PUT, entry.clone(), json!({ "display_name": "E2", "metdata": {} }), "metdata"),
        (Method::PATCH, entry.clone(), json!({ "entry_id": "e", "display_name": "E3", "metdata": null }), "metdata"),
        (
            Method::POST,
            format!("/shared-stores/{store}/entries/bulk"),
            json!({ "entries": [{ "entry_id": "e", "display_name": "E4", "metdata": {} }] }),
            "metdata",
        ),
        (
            Method::POST,
            format!("/shared-stores/{store}/entries/bulk"),
            json!({ "entries": [{ "entry_id": "e", "display_name": "E5" }], "upsert": true }),
            "upsert",
        ),
        (Method::POST, "/shared-stores".to_owned(), json!({ "name": "n", "kind": "x" }), "kind"),
    ];
    for (method, path, body, name) in cases {
        let answer = app.call(method.clone(), &path, Some(body)).await;
        assert_eq!(answer, refused(name), "{method} {path}");
    }
    let (status, body) = app.call(Method::GET, &entry, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["entry"]["display_name"], "E", "no refused write changed the entry");
    assert_eq!(body["entry"]["metadata"], json!({ "keep": true }));
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"].as_array().unwrap().len(), 1);
    assert_eq!(stores["stores"][0]["name"], "s");

    for (path, body, name) in [
        ("/uploads/video/get_upload_url", json!({ "content_type": "video/mp4", "contnet": 1 }), "contnet"),
        ("/uploads/video/finalize_upload", json!({ "id": uuid::Uuid::new_v4(), "kind": "video" }), "kind"),
    ] {
        let answer = app.call(Method::POST, path, Some(body)).await;
        let detail = json!({ "detail": format!("unknown property: {name}") });
        assert_eq!(answer, (StatusCode::BAD_REQUEST, detail), "{path}");
    }
}

#[tokio::test]
async fn null_for_an_optional_string_is_refused_like_a_null_name() {
    let app = TestApp::new(Backend::Sqlite).await;
    let (status, body) =
        app.call(Method::POST, "/shared-stores", Some(json!({ "name": "s", "source_type": null }))).await;
    assert_eq!((status, body), (StatusCode::BAD_REQUEST, json!({ "error": "source_type must be a string" })));
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert!(stores["stores"].as_array().unwrap().is_empty());

    for (body, message) in [
        (json!({ "name": "a", "description": null }), "description must be a string"),
        (json!({ "name": "a", "workspace_id": null }), "workspace_id must be a UUID string"),
    ] {
        let answer = app.call(Method::POST, "/agent/create", Some(body.clone())).await;
        assert_eq!(answer, (StatusCode::BAD_REQUEST, json!({ "detail": message })), "{body}");
    }
    let (status, created) = app.call(Method::POST, "/agent/create", Some(json!({ "name": "a" }))).await;
    assert_eq!(status, StatusCode::CREATED);
    let agent = created["agent_id"].as_str().unwrap();
    let answer = app.call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "description": null }))).await;
    assert_eq!(answer, (StatusCode::BAD_REQUEST, json!({ "detail": "description must be a string" })));
    let answer = app.call(Method::POST, "/uploads/video/get_upload_url", Some(json!({ "content_type": null }))).await;
    assert_eq!(answer, (StatusCode::BAD_REQUEST, json!({ "detail": "content_type must be a string" })));
}
