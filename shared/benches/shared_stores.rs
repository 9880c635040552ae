//! CPU cost of the shared-store hot paths, without storage latency: parsing a 5,000-item
//! bulk body, size-checking large metadata, matching routes, and a whole GET entry
//! through the router on the embedded backend.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use http::Method;
use serde_json::{json, Map, Value};
use shared::api::{self, routes, Body};
use shared::app::App;
use shared::domain::identity::{apply_seed, Seed};
use shared::domain::shared_stores::{parse_bulk, Metadata};

fn bulk_body() -> Map<String, Value> {
    let entries: Vec<Value> = (0..5000)
        .map(|i| json!({ "entry_id": format!("entry-{i}"), "display_name": format!("Entry {i}"), "metadata": { "i": i, "tags": ["a", "b"] } }))
        .collect();
    match json!({ "entries": entries }) {
        Value::Object(map) => map,
        _ => unreachable!(),
    }
}

fn parsing(c: &mut Criterion) {
    let body = bulk_body();
    c.bench_function("parse_bulk 5000 items", |b| b.iter(|| parse_bulk(black_box(&body)).map(|writes| writes.len())));
    let large = json!({ "blob": "x".repeat(250_000), "list": (0..500).collect::<Vec<_>>() });
    c.bench_function("metadata parse 250 KB", |b| b.iter(|| Metadata::parse(Some(black_box(&large))).is_ok()));
    c.bench_function("route match entry path", |b| {
        b.iter(|| {
            matches!(
                routes::find(&Method::GET, black_box("/shared-stores/0b7c/entries/a%2Fb")),
                routes::Match::Found(..)
            )
        })
    });
}

fn dispatch(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let app = Arc::new(App::embedded());
    let seed = Seed::from_json(
        r#"{"organizations":[{"id":"6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01","name":"B","slug":"b","api_keys":["bench-key"]}]}"#,
    )
    .unwrap();
    let send = |method: Method, path: String, body: Option<Value>| {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", "Bearer bench-key")
            .body(Body::from(body.map(|b| b.to_string().into_bytes()).unwrap_or_default()))
            .unwrap();
        api::dispatch(app.clone(), request)
    };
    let path = runtime.block_on(async {
        apply_seed(app.identity.as_ref(), app.clock.as_ref(), &seed).await.unwrap();
        let created = send(Method::POST, "/shared-stores".into(), Some(json!({ "name": "bench" }))).await;
        let created: Value = serde_json::from_slice(created.body()).unwrap();
        let path = format!("/shared-stores/{}/entries/item", created["store"]["id"].as_str().unwrap());
        send(Method::PUT, path.clone(), Some(json!({ "display_name": "Item", "metadata": { "k": "v" } }))).await;
        path
    });
    c.bench_function("embedded GET entry through the router", |b| {
        b.iter(|| runtime.block_on(send(Method::GET, path.clone(), None)).status())
    });
}

criterion_group!(benches, parsing, dispatch);
criterion_main!(benches);
