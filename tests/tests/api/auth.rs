//! Authentication rules and `GET /whoami`, on both backends.

use http::{Method, StatusCode};
use serde_json::json;

use crate::conformance;
use crate::helpers::{Backend, TestApp};

conformance!(
    shared_stores_accept_bearer_only_with_exact_bodies,
    unknown_unbound_and_no_access_keys_are_refused,
    whoami_accepts_both_schemes_and_updates_last_used_at,
    general_endpoints_accept_both_schemes_and_refuse_bad_keys,
);

async fn general_endpoints_accept_both_schemes_and_refuse_bad_keys(backend: Backend) {
    let app = TestApp::new(backend).await;
    let bearer = format!("Bearer {}", app.key);
    let (_, no_access) = app.add_organization(false).await;
    let routes = [
        (Method::GET, "/agents"),
        (Method::POST, "/agent/create"),
        (Method::GET, "/node_types"),
        (Method::POST, "/uploads/image/get_upload_url"),
        (Method::GET, "/avatar-profiles"),
    ];
    for (method, path) in routes {
        for headers in [vec![("x-api-key", app.key.as_str())], vec![("authorization", bearer.as_str())]] {
            let (status, body) = app.raw(method.clone(), path, &headers, vec![]).await;
            assert!(status.is_success(), "{method} {path} with {headers:?}: {status} {body}");
        }
        let (status, body) = app.raw(method.clone(), path, &[], vec![]).await;
        let must_start = json!({ "detail": "Authorization header must start with Bearer" });
        assert_eq!((status, body), (StatusCode::UNAUTHORIZED, must_start), "{method} {path}");
        let (status, body) = app.raw(method.clone(), path, &[("x-api-key", "nope")], vec![]).await;
        assert_eq!((status, body), (StatusCode::UNAUTHORIZED, json!({ "detail": "invalid_api_key" })), "{path}");
        let (status, body) = app.call_as(&no_access, method.clone(), path, None).await;
        assert_eq!((status, body), (StatusCode::FORBIDDEN, json!({ "detail": "api_access_required" })), "{path}");
    }
}

async fn shared_stores_accept_bearer_only_with_exact_bodies(backend: Backend) {
    let app = TestApp::new(backend).await;
    let must_start = json!({ "detail": "Authorization header must start with Bearer" });
    let bearer = format!("Bearer {}", app.key);
    let basic = format!("Basic {}", app.key);
    for headers in [
        vec![],
        vec![("x-api-key", app.key.as_str())],
        vec![("authorization", basic.as_str())],
        vec![("authorization", app.key.as_str())],
    ] {
        let (status, body) = app.raw(Method::GET, "/shared-stores", &headers, vec![]).await;
        assert_eq!((status, &body), (StatusCode::UNAUTHORIZED, &must_start), "{headers:?}");
    }
    let (status, _) = app.raw(Method::GET, "/shared-stores", &[("authorization", &bearer)], vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = app.raw(Method::GET, "/shared-stores", &[("authorization", "Bearer ")], vec![]).await;
    assert_eq!((status, body), (StatusCode::UNAUTHORIZED, json!({ "detail": "invalid_api_key" })));
}

async fn unknown_unbound_and_no_access_keys_are_refused(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (status, body) = app.call_as("no-such-key", Method::GET, "/shared-stores", None).await;
    assert_eq!((status, body), (StatusCode::UNAUTHORIZED, json!({ "detail": "invalid_api_key" })));
    let unbound = app.add_unbound_key().await;
    let (status, body) = app.call_as(&unbound, Method::GET, "/shared-stores", None).await;
    assert_eq!(
        (status, body),
        (StatusCode::UNAUTHORIZED, json!({ "detail": "API key must be associated with an organization" }))
    );
    let (_, no_access) = app.add_organization(false).await;
    let (status, body) = app.call_as(&no_access, Method::POST, "/shared-stores", Some(json!({ "name": "x" }))).await;
    assert_eq!((status, body), (StatusCode::FORBIDDEN, json!({ "detail": "api_access_required" })));
    let (status, body) = app.raw(Method::GET, "/whoami", &[("x-api-key", &no_access)], vec![]).await;
    assert_eq!((status, body), (StatusCode::FORBIDDEN, json!({ "detail": "api_access_required" })));
    // Keys are stored only as their SHA-256 hash.
    let hash = shared::domain::identity::hash_api_key(&app.key);
    let record = app.app.identity().api_key(&hash).await.unwrap().expect("stored under its hash");
    assert_eq!(record.organization_id, Some(app.organization));
    assert!(app.app.identity().api_key(&app.key).await.unwrap().is_none(), "never stored in clear");
}

async fn whoami_accepts_both_schemes_and_updates_last_used_at(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (status, first) = app.raw(Method::GET, "/whoami", &[("x-api-key", &app.key)], vec![]).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["organization_id"], app.organization.to_string());
    assert_eq!(first["organization_name"], format!("Org {}", app.organization));
    assert_eq!(first["organization_slug"], format!("org-{}", app.organization));
    let fields: Vec<&String> = first.as_object().unwrap().keys().collect();
    assert_eq!(fields, ["organization_id", "organization_name", "organization_slug", "created_at", "last_used_at"]);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (status, second) = app.call(Method::GET, "/whoami", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(second["last_used_at"].as_str() > first["last_used_at"].as_str());
    let hash = shared::domain::identity::hash_api_key(&app.key);
    let record = app.app.identity().api_key(&hash).await.unwrap().unwrap();
    assert_eq!(record.last_used_at.map(|at| at.to_string()).as_deref(), second["last_used_at"].as_str(), "persisted");
    let (status, body) = app.raw(Method::GET, "/whoami", &[], vec![]).await;
    assert_eq!(
        (status, body),
        (StatusCode::UNAUTHORIZED, json!({ "detail": "Authorization header must start with Bearer" }))
    );
}
