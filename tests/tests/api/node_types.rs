//! `GET /node_types`: the catalog over HTTP.

use std::collections::HashSet;

use http::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Backend, TestApp};

#[tokio::test]
async fn the_catalog_lists_every_kind_with_schemas_costs_and_the_contracts_ids() {
    let app = TestApp::new(Backend::Sqlite).await;
    let (status, body) = app.call(Method::GET, "/node_types", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let types = body["node_types"].as_array().unwrap();
    let ids: HashSet<&str> = types.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), types.len(), "IDs are unique");
    for (name, id) in [
        ("AI Avatar", "b3b4c9e2-2a47-4fa9-8ce8-0c1fa1d7b6ef"),
        ("Video Generation", "a2eb3ec2-da7a-4f97-94d2-a9a537548522"),
        ("Audio Generation", "14687f30-5fd0-468f-8239-2784d83df95b"),
        ("Image Generation", "18b998a0-2ea7-4676-a5d3-3ae6c8ac0b72"),
    ] {
        let found = types.iter().find(|t| t["id"] == id).unwrap_or_else(|| panic!("{name} is listed"));
        assert_eq!((found["name"].as_str(), found["kind"].as_str()), (Some(name), Some("generation")));
    }
    let count = |kind: &str| types.iter().filter(|t| t["kind"] == kind).count();
    assert!(count("edit") >= 7, "at least seven editing types");
    assert_eq!((count("input"), count("destination")), (1, 1));
    assert!(count("trigger") >= 1);
    for node_type in types {
        assert_eq!(node_type["params_schema"]["type"], "object", "{node_type}");
        assert_eq!(node_type["params_schema"]["additionalProperties"], false, "{node_type}");
        assert!(node_type["credit_cost"]["unit"].is_string(), "{node_type}");
        let protected = matches!(node_type["kind"].as_str(), Some("input" | "destination" | "trigger"));
        assert_eq!(node_type["protected"], protected, "{node_type}");
    }
    let video = types.iter().find(|t| t["name"] == "Video Generation").unwrap();
    let properties = &video["params_schema"]["properties"];
    for param in ["prompt", "model", "resolution", "duration", "aspect_ratio"] {
        assert!(properties.get(param).is_some(), "Video Generation takes {param}");
    }
    assert_eq!(video["credit_cost"]["multipliers"], json!([{ "param": "resolution", "equals": "4k", "factor": 2 }]));
    let (status, _) = app.raw(Method::GET, "/node_types", &[], vec![]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
