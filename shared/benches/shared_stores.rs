//! CPU cost of the shared-store hot paths, without storage latency: parsing a 5,000-item
//! bulk body, size-checking large metadata, matching routes, and a whole GET entry
//! through the router on the embedded backend.

mod common;

use std::hint::black_box;

use common::BenchApp;
use criterion::{criterion_group, criterion_main, Criterion};
use http::Method;
use serde_json::{json, Map, Value};
use shared::api::routes;
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
    let bench = BenchApp::new();
    let created = bench.json(Method::POST, "/shared-stores", Some(&json!({ "name": "bench" })));
    let path = format!("/shared-stores/{}/entries/item", created["store"]["id"].as_str().unwrap());
    bench.send(Method::PUT, &path, Some(&json!({ "display_name": "Item", "metadata": { "k": "v" } })));
    c.bench_function("embedded GET entry through the router", |b| {
        b.iter(|| bench.send(Method::GET, black_box(&path), None).status())
    });
}

criterion_group!(benches, parsing, dispatch);
criterion_main!(benches);
