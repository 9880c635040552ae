//! Asset-manager inputs (rule 10): a connection per workspace, `local` items with a
//! high-resolution file and/or a proxy, `artifact` `highres`, `proxy` and `auto` with
//! exactly the contract's 400s, combined with other inputs in one `video_inputs` entry
//! (rule 3), cited in the output's sources.

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::domain::nodes::{DESTINATION, VIDEO_INPUT};

use crate::conformance;
use crate::helpers::Backend;
use crate::runs::{fetch_and_probe, Harness};

conformance!(asset_manager_items_are_inputs_in_the_file_their_artifact_asks_for);

async fn asset_manager_items_are_inputs_in_the_file_their_artifact_asks_for(backend: Backend) {
    let harness = Harness::new(backend).await;
    let test = &harness.test;
    let (agent, nodes) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let start = |body: Value| {
        let path = format!("/agent/{agent}/run");
        async move { test.call(Method::POST, &path, Some(body)).await }
    };
    let item_id = json!("7f1d2a4e-3b5c-4d6e-8f90-a1b2c3d4e5f6");

    // No connection for the agent's workspace: 400.
    let (status, body) = start(json!({ "asset_manager_assets": [{ "id": item_id }] })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("no external-asset connection"), "{body}");

    // One connection per workspace.
    let (status, created) = test.call(Method::POST, "/asset_connections", Some(json!({ "name": "Archive" }))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let connection = created["connection"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["connection"]["provider"], "local");
    let (status, body) = test.call(Method::POST, "/asset_connections", Some(json!({}))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let foreign = json!({ "workspace_id": uuid::Uuid::new_v4().to_string() });
    assert_eq!(test.call(Method::POST, "/asset_connections", Some(foreign)).await.0, StatusCode::BAD_REQUEST);
    let (status, body) = test.call(Method::POST, "/asset_connections", Some(json!({ "provider": "dam" }))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Items: a high-resolution file (320×240) and/or a proxy (160×120).
    let highres = harness.upload("video", "video.mp4").await;
    let proxy = harness.upload("video", "short.mp4").await;
    let items = format!("/asset_connections/{connection}/items");
    let item = |body: Value| {
        let items = items.clone();
        async move {
            let (status, created) = test.call(Method::POST, &items, Some(body)).await;
            assert_eq!(status, StatusCode::CREATED, "{created}");
            created["item"]["id"].as_str().unwrap().to_owned()
        }
    };
    let both = item(json!({ "name": "both", "highres_video_id": highres, "proxy_video_id": proxy })).await;
    let highres_only = item(json!({ "name": "master", "highres_video_id": highres })).await;
    let proxy_only = item(json!({ "name": "preview", "proxy_video_id": proxy })).await;
    let (status, body) = test.call(Method::POST, &items, Some(json!({ "name": "empty" }))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let elsewhere = format!("/asset_connections/{}/items", uuid::Uuid::new_v4());
    let (status, body) =
        test.call(Method::POST, &elsewhere, Some(json!({ "name": "x", "proxy_video_id": proxy }))).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "detail": "Asset connection not found" })));

    // Rule 10's refusals, each a 400 naming the item's field.
    let refusals = [
        (json!({ "id": highres_only, "artifact": "proxy" }), "has no proxy file"),
        (json!({ "id": proxy_only }), "has no highres file"),
        (json!({ "id": proxy_only, "artifact": "highres" }), "has no highres file"),
        (json!({ "id": item_id }), "was not found"),
        (json!({ "id": both, "artifact": "original" }), "artifact must be highres, proxy or auto"),
        (json!({ "artifact": "auto" }), "id is required"),
    ];
    for (asset, reason) in refusals {
        let (status, body) = start(json!({ "asset_manager_assets": [asset] })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{asset}: {body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("asset_manager_assets[0]") && detail.contains(reason), "{asset}: {detail}");
    }
    let (_, runs) = test.call(Method::GET, &format!("/agent/{agent}/runs"), None).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 0, "no run for a refusal");

    // Each artifact gives its file: auto prefers the high-resolution one.
    for (asset, width) in [
        (json!({ "id": both }), 320),
        (json!({ "id": both, "artifact": "proxy" }), 160),
        (json!({ "id": both, "artifact": "auto" }), 320),
        (json!({ "id": proxy_only, "artifact": "auto" }), 160),
    ] {
        let run = harness.start(&agent, json!({ "asset_manager_assets": [asset] })).await;
        let record = harness.finished(&run).await;
        assert_eq!(record["status"], "completed", "{asset}: {record}");
        let probed = fetch_and_probe(record["outputs"][0]["video_url"].as_str().unwrap()).await;
        assert_eq!(probed.width, width, "{asset}");
    }

    // Rule 3: with other inputs in one entry; the item is cited with where it plays.
    let entry = json!({ "video_inputs": [{
        "agent_node_id": nodes["in"],
        "video_ids": [highres],
        "asset_manager_assets": [{ "id": both, "artifact": "proxy", "input_clip_start_ms": 200 }],
    }] });
    let run = harness.start(&agent, entry).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let outputs = record["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 2, "one output per item: {record}");
    let cited: Vec<&Value> = outputs.iter().flat_map(|output| output["sources"].as_array().unwrap()).collect();
    assert_eq!(cited.len(), 1, "only the asset item is external: {record}");
    assert_eq!(cited[0]["provider"], "local");
    assert_eq!(cited[0]["source_kind"], "asset_manager_item");
    assert_eq!(cited[0]["provider_asset_id"], both.as_str());
    assert_eq!(cited[0]["query"], "both");
    assert_eq!(cited[0]["start_ms"], 0);
    let end = cited[0]["end_ms"].as_u64().unwrap();
    assert!(end.abs_diff(800) <= 100, "the proxy from 200 ms: {end}");

    // An organization-scoped key is required: a key of no organization is refused.
    let unbound = test.add_unbound_key().await;
    let (status, body) = test
        .call_as(
            &unbound,
            Method::POST,
            &format!("/agent/{agent}/run"),
            Some(json!({ "asset_manager_assets": [{ "id": both }] })),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["detail"], "API key must be associated with an organization");
}
