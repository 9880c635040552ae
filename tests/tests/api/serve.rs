//! `serve` over real TCP: startup from a seed file, routing and body limits.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::json;
use shared::serve::{self, Backend, ServeOptions};

use crate::helpers::send;

/// A data folder for a server whose URLs are not fetched.
fn media_options() -> ServeOptions {
    ServeOptions {
        data_dir: tempfile::tempdir().unwrap().keep(),
        public_url: "http://127.0.0.1:9".into(),
        in_memory: false,
        task_budget: shared::config::DEFAULT_TASK_BUDGET,
        segment: None,
        allow_private_urls: true,
        webhook_schedule: Default::default(),
        create_named_queues: false,
    }
}

fn seed_file() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    let seed = json!({
        "organizations": [
            { "id": "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01", "name": "Acme", "slug": "acme", "api_access": true,
              "plan": "free", "credits": 1000, "api_keys": ["acme-key"],
              "workspaces": [{ "id": "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e02", "name": "Main", "primary": true }] },
            { "id": "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e03", "name": "Closed", "slug": "closed", "api_access": false,
              "api_keys": ["closed-key"] }
        ],
        "unbound_api_keys": ["loose-key"]
    });
    std::fs::write(file.path(), seed.to_string()).unwrap();
    file
}

#[tokio::test]
async fn serve_loads_a_seed_file_and_answers_over_http() {
    let seed = seed_file();
    let (app, development_key) =
        serve::build_app(Backend::Embedded, Some(seed.path()), &media_options()).await.unwrap();
    assert!(development_key.is_none(), "no development organization with a seed");
    let (addr, _stop) = serve::spawn(Arc::new(app), "127.0.0.1:0".parse().unwrap()).await.unwrap();

    let (status, body) = send(addr, Method::GET, "/whoami", "acme-key", vec![]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["organization_slug"], "acme");
    let (status, body) = send(addr, Method::GET, "/shared-stores", "closed-key", vec![]).await;
    assert_eq!((status, body), (StatusCode::FORBIDDEN, json!({ "detail": "api_access_required" })));
    let (status, body) = send(addr, Method::GET, "/shared-stores", "loose-key", vec![]).await;
    assert_eq!(
        (status, body),
        (StatusCode::UNAUTHORIZED, json!({ "detail": "API key must be associated with an organization" }))
    );
    let (status, _) = send(addr, Method::GET, "/no/such/route", "acme-key", vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(addr, Method::POST, "/whoami", "acme-key", vec![]).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    // Agents go to the seeded primary workspace.
    let (status, body) = send(addr, Method::POST, "/agent/create", "acme-key", vec![]).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body["agent"]["workspace_id"], "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e02");
}

#[tokio::test]
async fn agent_updates_of_10_mb_are_refused_and_change_nothing() {
    let seed = seed_file();
    let (app, _) = serve::build_app(Backend::Embedded, Some(seed.path()), &media_options()).await.unwrap();
    let (addr, _stop) = serve::spawn(Arc::new(app), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (_, created) = send(addr, Method::POST, "/agent/create", "acme-key", br#"{"name":"a"}"#.to_vec()).await;
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let path = format!("/agent/{agent}/update");
    let (_, before) = send(addr, Method::GET, &format!("/agent/{agent}"), "acme-key", vec![]).await;
    let captions = shared::domain::nodes::CAPTIONS;
    // Just under the body limit: a caption text far past what a node may hold.
    let srt = "x".repeat(10 * 1024 * 1024 - 500);
    let under =
        json!({ "operations": [{ "op": "create_node", "node_type_id": captions, "params_used": { "srt": srt } }] });
    let (status, body) = send(addr, Method::POST, &path, "acme-key", under.to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["detail"].as_str().unwrap().starts_with("operations[0]: params_used.srt"), "{body}");
    // Over it.
    let over = format!(r#"{{"name":"{}"}}"#, "x".repeat(11 * 1024 * 1024));
    let (status, body) = send(addr, Method::POST, &path, "acme-key", over.into_bytes()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let (_, after) = send(addr, Method::GET, &format!("/agent/{agent}"), "acme-key", vec![]).await;
    assert_eq!(after, before);
}

#[tokio::test]
async fn serve_refuses_bodies_over_10_mb_and_writes_nothing() {
    let seed = seed_file();
    let (app, _) = serve::build_app(Backend::Embedded, Some(seed.path()), &media_options()).await.unwrap();
    let (addr, _stop) = serve::spawn(Arc::new(app), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (_, created) = send(addr, Method::POST, "/shared-stores", "acme-key", br#"{"name":"s"}"#.to_vec()).await;
    let store = created["store"]["id"].as_str().unwrap().to_owned();
    let huge = format!(r#"{{"display_name":"d","metadata":{{"k":"{}"}}}}"#, "x".repeat(11 * 1024 * 1024));
    let (status, body) =
        send(addr, Method::PUT, &format!("/shared-stores/{store}/entries/e"), "acme-key", huge.into_bytes()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let (_, listed) = send(addr, Method::GET, &format!("/shared-stores/{store}/entries"), "acme-key", vec![]).await;
    assert_eq!(listed["entries"], json!([]));
}

#[tokio::test]
async fn serve_without_a_seed_gives_the_same_development_organization_a_new_key_at_each_start() {
    let options = media_options();
    let (app, key) = serve::build_app(Backend::Embedded, None, &options).await.unwrap();
    let first = key.expect("a development key is returned to print");
    let (addr, stop) = serve::spawn(Arc::new(app), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (status, body) = send(addr, Method::GET, "/whoami", &first, vec![]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["organization_slug"], "development");
    let (status, _) = send(addr, Method::POST, "/shared-stores", &first, br#"{"name":"kept"}"#.to_vec()).await;
    assert_eq!(status, StatusCode::OK);
    drop(stop);

    // Started again on the same folder: a new key, the same organization and its store.
    let (app, key) = serve::build_app(Backend::Embedded, None, &options).await.unwrap();
    let second = key.expect("a new key");
    assert_ne!(second, first);
    let (addr, _stop) = serve::spawn(Arc::new(app), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (_, stores) = send(addr, Method::GET, "/shared-stores", &second, vec![]).await;
    assert_eq!(stores["stores"][0]["name"], "kept");
    let (status, _) = send(addr, Method::GET, "/whoami", &first, vec![]).await;
    assert_eq!(status, StatusCode::OK, "the earlier key keeps working");
}

#[tokio::test]
async fn a_bad_seed_file_is_refused_with_its_reason() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), r#"{"organizations": [{"id": "nope"}]}"#).unwrap();
    let error = serve::build_app(Backend::Embedded, Some(file.path()), &media_options()).await.err().expect("refused");
    assert!(format!("{error:#}").contains("seed file"), "{error:#}");
}

/// A GET to `serve` with the given headers: status, headers and the body as text.
async fn fetch_text(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, http::HeaderMap, String) {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut request = http::Request::builder().uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client.request(request.body(Default::default()).unwrap()).await.expect("serve answers");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8(bytes.to_vec()).expect("text"))
}

/// The console is served on the API's origin with no key; its script is the embedded
/// bundle, revalidated by its tag; an entry called "console" stays the API's.
#[tokio::test]
async fn serve_answers_the_console_with_no_key() {
    let seed = seed_file();
    let (app, _) = serve::build_app(Backend::Embedded, Some(seed.path()), &media_options()).await.unwrap();
    let (addr, _stop) = serve::spawn(Arc::new(app), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let (status, headers, page) = fetch_text(addr, "/console", &[]).await;
    assert_eq!((status, &headers["content-type"]), (StatusCode::OK, &"text/html; charset=utf-8".parse().unwrap()));
    assert!(page.contains(r#"src="/console/console.js""#), "{page}");
    let (status, headers, script) = fetch_text(addr, "/console/console.js", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(script, shared::api::console::FILES[1].body);
    let tag = headers["etag"].to_str().unwrap().to_owned();
    let (status, _, body) = fetch_text(addr, "/console/console.js", &[("if-none-match", &tag)]).await;
    assert_eq!((status, body.as_str()), (StatusCode::NOT_MODIFIED, ""));
    let (status, _, body) = fetch_text(addr, "/console/nothing", &[]).await;
    assert_eq!((status, body.as_str()), (StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#));
    // The API is unchanged beside it: a key is still needed there.
    let (status, _, _) = fetch_text(addr, "/agents", &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
