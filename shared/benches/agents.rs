//! CPU cost of the agent hot paths, without storage latency: validating node parameters
//! against their JSON Schema, applying a payload of operations to a 200-node graph, and
//! reading a graph through the router on the embedded backend.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use http::Method;
use serde_json::{json, Map, Value};
use shared::api::{self, Body};
use shared::app::App;
use shared::domain::graph::{parse_operations, Graph};
use shared::domain::identity::{apply_seed, Seed};
use shared::domain::node_types::{self, CLIP, SPEED, VIDEO_GENERATION};

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
    let video = node_types::find(VIDEO_GENERATION).unwrap();
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
    let agent = runtime.block_on(async {
        apply_seed(app.identity.as_ref(), app.clock.as_ref(), &seed).await.unwrap();
        let created = send(Method::POST, "/agent/create".into(), None).await;
        let created: Value = serde_json::from_slice(created.body()).unwrap();
        let agent = created["agent_id"].as_str().unwrap().to_owned();
        let update = json!({ "operations": chain_operations(200) });
        send(Method::POST, format!("/agent/{agent}/update"), Some(update)).await;
        agent
    });
    c.bench_function("embedded GET agent with 200 nodes through the router", |b| {
        b.iter(|| runtime.block_on(send(Method::GET, format!("/agent/{agent}"), None)).status())
    });
    c.bench_function("embedded update (rename) of a 200-node agent through the router", |b| {
        b.iter(|| {
            runtime
                .block_on(send(Method::POST, format!("/agent/{agent}/update"), Some(json!({ "name": "n" }))))
                .status()
        })
    });
}

criterion_group!(benches, domain, dispatch);
criterion_main!(benches);
