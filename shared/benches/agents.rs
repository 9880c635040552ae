//! CPU cost of the agent hot paths, without storage latency: validating node parameters
//! against their JSON Schema, applying a payload of operations to a 200-node graph, and
//! reading a graph through the router on the embedded backend.

mod common;

use std::hint::black_box;

use common::BenchApp;
use criterion::{criterion_group, criterion_main, Criterion};
use http::Method;
use serde_json::{json, Map, Value};
use shared::domain::graph::{parse_operations, Graph};
use shared::domain::nodes::{self, CLIP, SPEED, VIDEO_GENERATION};

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("an object literal"),
    }
}

/// A chain of `count` Speed nodes, each connected to the next.
fn chain_operations(count: usize) -> Value {
    let mut operations: Vec<Value> = (0..count)
        .map(|i| json!({ "op": "create_node", "node_type_id": SPEED, "temp_ref_id": format!("n{i}"), "params_used": { "factor": 1.5 } }))
        .collect();
    operations.extend((1..count).map(|i| {
        json!({ "op": "create_connection", "source_temp_ref_id": format!("n{}", i - 1), "target_temp_ref_id": format!("n{i}") })
    }));
    Value::Array(operations)
}

fn domain(c: &mut Criterion) {
    let video = nodes::find(VIDEO_GENERATION).unwrap();
    let params = object(
        json!({ "prompt": "a cat on a skateboard", "model": "veo-3", "resolution": "4k", "duration": "8", "aspect_ratio": "16:9" }),
    );
    c.bench_function("validate Video Generation params", |b| {
        b.iter(|| video.validate_params(black_box(&params)).is_ok())
    });

    let (graph, _) = Graph::default().apply(&parse_operations(&chain_operations(200)).unwrap()).unwrap();
    let last = graph.nodes.last().unwrap().agent_node_id;
    let payload = json!([
        { "op": "create_node", "node_type_id": CLIP, "temp_ref_id": "c", "params_used": { "start_ms": 0, "end_ms": 500 } },
        { "op": "create_connection", "source_agent_node_id": last, "target_temp_ref_id": "c" },
    ]);
    let operations = parse_operations(&payload).unwrap();
    c.bench_function("apply 2 operations to a 200-node graph", |b| {
        b.iter(|| black_box(&graph).apply(black_box(&operations)).map(|(g, _)| g.nodes.len()))
    });
    let build = parse_operations(&chain_operations(200)).unwrap();
    c.bench_function("apply 399 operations (200-node chain) to an empty graph", |b| {
        b.iter(|| Graph::default().apply(black_box(&build)).map(|(g, _)| g.connections.len()))
    });
}

fn dispatch(c: &mut Criterion) {
    let bench = BenchApp::new();
    let created = bench.json(Method::POST, "/agent/create", None);
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let (read, update) = (format!("/agent/{agent}"), format!("/agent/{agent}/update"));
    bench.send(Method::POST, &update, Some(&json!({ "operations": chain_operations(200) })));
    c.bench_function("embedded GET agent with 200 nodes through the router", |b| {
        b.iter(|| bench.send(Method::GET, black_box(&read), None).status())
    });
    let rename = json!({ "name": "n" });
    c.bench_function("embedded update (rename) of a 200-node agent through the router", |b| {
        b.iter(|| bench.send(Method::POST, black_box(&update), Some(&rename)).status())
    });
}

criterion_group!(benches, domain, dispatch);
criterion_main!(benches);
