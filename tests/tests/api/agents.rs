//! Agents and their graphs, run against SQLite and DynamoDB Local.

use std::collections::HashSet;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::domain::identity::{apply_seed, OrganizationId, Seed, SeedOrganization, SeedWorkspace};
use shared::domain::nodes::{
    NodeTypeId, CLIP, CONCATENATE, DESTINATION, SCHEDULE_TRIGGER, SPEED, VIDEO_GENERATION, VIDEO_INPUT,
};
use shared::domain::workspaces::WorkspaceId;
use uuid::Uuid;

use crate::conformance;
use crate::helpers::{Backend, TestApp};

conformance!(
    create_applies_defaults_and_the_primary_workspace,
    create_validates_every_field,
    get_returns_the_graph_and_unknown_ids_are_not_found,
    list_pages_250_agents_newest_first_each_exactly_once,
    list_filters_by_name_literally_and_case_insensitively,
    list_and_create_refuse_foreign_workspaces,
    reseeding_with_workspaces_leaves_one_primary,
    list_refuses_bad_limits_cursors_and_names,
    operations_build_a_graph_with_temp_refs,
    update_and_delete_node_edit_params_and_connections,
    each_refused_operation_names_its_index_and_changes_nothing,
    metadata_updates_and_empty_updates,
    duplicate_copies_the_graph_with_new_node_ids,
    delete_is_soft_and_final,
    another_organizations_agents_and_nodes_are_not_found,
    concurrent_updates_lose_no_operation,
    bad_input_is_a_client_error_and_changes_nothing,
);

async fn create(app: &TestApp, body: Value) -> Value {
    let (status, created) = app.call(Method::POST, "/agent/create", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["agent"].clone()
}

async fn update(app: &TestApp, agent: &str, body: Value) -> (StatusCode, Value) {
    app.call(Method::POST, &format!("/agent/{agent}/update"), Some(body)).await
}

async fn read(app: &TestApp, agent: &str) -> Value {
    let (status, body) = app.call(Method::GET, &format!("/agent/{agent}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn id(value: &Value) -> String {
    value["id"].as_str().expect("id").to_owned()
}

fn node(node_type: NodeTypeId, temp: &str, params: Value) -> Value {
    json!({ "op": "create_node", "node_type_id": node_type, "temp_ref_id": temp, "params_used": params })
}

fn connect(source: &str, target: &str) -> Value {
    json!({ "op": "create_connection", "source_temp_ref_id": source, "target_temp_ref_id": target })
}

/// Creates an agent with Video Input → Clip → Destination and returns (agent, node IDs by temp ref).
async fn agent_with_chain(app: &TestApp) -> (String, Value) {
    let agent = id(&create(app, json!({ "name": "chain" })).await);
    let operations = json!([
        node(VIDEO_INPUT, "in", json!({})),
        node(CLIP, "clip", json!({ "start_ms": 0, "end_ms": 1000 })),
        node(DESTINATION, "out", json!({})),
        connect("in", "clip"),
        connect("clip", "out"),
    ]);
    let (status, body) = update(app, &agent, json!({ "operations": operations })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut ids = serde_json::Map::new();
    for created in body["created_nodes"].as_array().unwrap() {
        ids.insert(created["temp_ref_id"].as_str().unwrap().to_owned(), created["agent_node_id"].clone());
    }
    (agent, Value::Object(ids))
}

async fn create_applies_defaults_and_the_primary_workspace(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (status, created) = app.call(Method::POST, "/agent/create", None).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let agent = &created["agent"];
    assert_eq!(created["agent_id"], agent["id"]);
    assert_eq!(agent["name"], "Untitled agent");
    assert_eq!(agent["description"], "");
    assert_eq!(agent["visibility"], "private");
    assert_eq!(agent["created_at"], agent["updated_at"]);
    let keys: HashSet<&str> = agent.as_object().unwrap().keys().map(String::as_str).collect();
    let expected = ["id", "name", "description", "visibility", "workspace_id", "created_at", "updated_at"];
    assert_eq!(keys, expected.into_iter().collect());
    let second = create(&app, json!({ "name": "  Promo cut  ", "description": "d", "visibility": "public" })).await;
    assert_eq!(second["name"], "Promo cut");
    assert_eq!(second["visibility"], "public");
    assert_eq!(second["workspace_id"], agent["workspace_id"], "both in the primary workspace");
    let explicit = create(&app, json!({ "workspace_id": agent["workspace_id"] })).await;
    assert_eq!(explicit["workspace_id"], agent["workspace_id"]);
}

async fn create_validates_every_field(backend: Backend) {
    let app = TestApp::new(backend).await;
    let cases = [
        (json!({ "name": "" }), "name must be 1 to 120 characters"),
        (json!({ "name": "x".repeat(121) }), "name must be 1 to 120 characters"),
        (json!({ "name": 5 }), "name must be a string"),
        (json!({ "description": "d".repeat(5001) }), "description must be at most 5000 characters"),
        (json!({ "visibility": "team" }), "visibility must be \"public\" or \"private\""),
        (json!({ "workspace_id": "nope" }), "workspace_id must be a UUID"),
        (json!({ "owner": "me" }), "unknown property: owner"),
    ];
    for (body, detail) in cases {
        let (status, answer) = app.call(Method::POST, "/agent/create", Some(body.clone())).await;
        assert_eq!((status, answer), (StatusCode::BAD_REQUEST, json!({ "detail": detail })), "{body}");
    }
    let (status, answer) = app
        .raw(Method::POST, "/agent/create", &[("authorization", &format!("Bearer {}", app.key))], b"[1]".to_vec())
        .await;
    assert_eq!((status, answer), (StatusCode::BAD_REQUEST, json!({ "detail": "request body must be a JSON object" })));
    // Limits count characters, not bytes.
    create(&app, json!({ "name": "é".repeat(120), "description": "é".repeat(5000) })).await;
    let (status, body) = app.call(Method::GET, "/agents", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["agents"].as_array().unwrap().len(), 1, "refused creates stored nothing");
}

async fn get_returns_the_graph_and_unknown_ids_are_not_found(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (agent, ids) = agent_with_chain(&app).await;
    let body = read(&app, &agent).await;
    assert_eq!(body["agent"]["id"], agent.as_str());
    let nodes = body["agent_nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    assert_eq!(nodes[1]["agent_node_id"], ids["clip"]);
    assert_eq!(nodes[1]["node_type"], json!({ "node_type_id": CLIP, "node_type_name": "Clip" }));
    assert_eq!(nodes[1]["params_used"], json!({ "start_ms": 0, "end_ms": 1000 }));
    assert_eq!(
        body["connections"],
        json!([
            { "source_agent_node_id": ids["in"], "target_agent_node_id": ids["clip"] },
            { "source_agent_node_id": ids["clip"], "target_agent_node_id": ids["out"] },
        ])
    );
    for missing in [Uuid::new_v4().to_string(), "not-a-uuid".to_owned()] {
        let (status, body) = app.call(Method::GET, &format!("/agent/{missing}"), None).await;
        assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "detail": "Agent not found" })));
    }
}

async fn list_pages_250_agents_newest_first_each_exactly_once(backend: Backend) {
    let app = TestApp::new(backend).await;
    let mut created = Vec::new();
    for i in 0..250 {
        created.push(id(&create(&app, json!({ "name": format!("agent {i}") })).await));
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/agents?limit=100&cursor={cursor}"),
            None => "/agents?limit=100".to_owned(),
        };
        let (status, body) = app.call(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        pages += 1;
        seen.extend(body["agents"].as_array().unwrap().iter().map(id));
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert!(body["next_cursor"].is_null());
                break;
            }
        }
    }
    assert_eq!(pages, 3);
    created.reverse();
    assert_eq!(seen, created, "every agent once, newest first");
    let (_, body) = app.call(Method::GET, "/agents", None).await;
    assert_eq!(body["agents"].as_array().unwrap().len(), 25, "default limit");
}

async fn list_filters_by_name_literally_and_case_insensitively(backend: Backend) {
    let app = TestApp::new(backend).await;
    for name in ["Summer Promo", "summer_cut", "Winter 100%", "summerXcut", "PROMO summer"] {
        create(&app, json!({ "name": name })).await;
    }
    let names = |body: &Value| -> Vec<String> {
        body["agents"].as_array().unwrap().iter().map(|agent| agent["name"].as_str().unwrap().to_owned()).collect()
    };
    let (_, body) = app.call(Method::GET, "/agents?name=SUMMER", None).await;
    assert_eq!(names(&body), ["PROMO summer", "summerXcut", "summer_cut", "Summer Promo"]);
    let (_, body) = app.call(Method::GET, "/agents?name=r_c", None).await;
    assert_eq!(names(&body), ["summer_cut"], "_ is not a wildcard");
    let (_, body) = app.call(Method::GET, "/agents?name=100%25", None).await;
    assert_eq!(names(&body), ["Winter 100%"], "% is not a wildcard");
    let (_, body) = app.call(Method::GET, "/agents?name=promo&limit=1", None).await;
    assert_eq!(names(&body), ["PROMO summer"]);
    let cursor = body["next_cursor"].as_str().expect("a second page").to_owned();
    let (_, body) = app.call(Method::GET, &format!("/agents?name=promo&limit=1&cursor={cursor}"), None).await;
    assert_eq!(names(&body), ["Summer Promo"]);
    assert!(body["next_cursor"].is_null());
}

/// Seeds an organization with two workspaces and returns (key, primary, other).
async fn organization_with_two_workspaces(app: &TestApp) -> (String, WorkspaceId, WorkspaceId) {
    let (organization, primary, other) = (OrganizationId::new_v4(), WorkspaceId::new_v4(), WorkspaceId::new_v4());
    let key = format!("two-workspaces-{organization}");
    let seed = Seed {
        organizations: vec![SeedOrganization {
            id: organization,
            name: "Two".into(),
            slug: format!("two-{organization}"),
            api_access: true,
            plan: "free".into(),
            credits: 1000,
            plan_started_at: None,
            api_keys: vec![key.clone()],
            workspaces: Some(vec![
                SeedWorkspace { id: primary, name: "Main".into(), primary: true },
                SeedWorkspace { id: other, name: "Side".into(), primary: false },
            ]),
        }],
        unbound_api_keys: vec![],
    };
    apply_seed(app.app.identity().as_ref(), app.app.credits().as_ref(), app.app.clock.as_ref(), &seed).await.unwrap();
    (key, primary, other)
}

async fn list_and_create_refuse_foreign_workspaces(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (key, primary, other) = organization_with_two_workspaces(&app).await;
    let (status, created) = app.call_as(&key, Method::POST, "/agent/create", None).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["agent"]["workspace_id"], primary.to_string());
    let (status, created) =
        app.call_as(&key, Method::POST, "/agent/create", Some(json!({ "workspace_id": other, "name": "side" }))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["agent"]["workspace_id"], other.to_string());
    let (_, body) = app.call_as(&key, Method::GET, &format!("/agents?workspace_id={other}"), None).await;
    let listed: Vec<&str> = body["agents"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["side"]);

    // The first organization may neither list nor create in the other's workspace.
    let refused = json!({ "detail": "workspace_id does not belong to your organization" });
    let (status, body) = app.call(Method::GET, &format!("/agents?workspace_id={other}"), None).await;
    assert_eq!((status, body), (StatusCode::FORBIDDEN, refused.clone()));
    let (status, body) = app.call(Method::POST, "/agent/create", Some(json!({ "workspace_id": other }))).await;
    assert_eq!((status, body), (StatusCode::BAD_REQUEST, refused));
    let (status, _) = app.call(Method::GET, "/agents?workspace_id=nope", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

async fn reseeding_with_workspaces_leaves_one_primary(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (status, created) = app.call(Method::POST, "/agent/create", None).await;
    assert_eq!(status, StatusCode::CREATED);
    let default = created["agent"]["workspace_id"].clone();
    let seeded = WorkspaceId::new_v4();
    let seed = Seed {
        organizations: vec![SeedOrganization {
            id: app.organization,
            name: "Renamed".into(),
            slug: format!("renamed-{}", app.organization),
            api_access: true,
            plan: "free".into(),
            credits: 1000,
            plan_started_at: None,
            api_keys: vec![app.key.clone()],
            workspaces: Some(vec![SeedWorkspace { id: seeded, name: "Seeded".into(), primary: true }]),
        }],
        unbound_api_keys: vec![],
    };
    for _ in 0..2 {
        apply_seed(app.app.identity().as_ref(), app.app.credits().as_ref(), app.app.clock.as_ref(), &seed)
            .await
            .unwrap();
        let workspaces = app.app.identity().workspaces(app.organization).await.unwrap();
        let primaries: Vec<WorkspaceId> = workspaces.iter().filter(|w| w.primary).map(|w| w.id).collect();
        assert_eq!(primaries, [seeded], "exactly the seeded primary");
        assert_eq!(workspaces.len(), 2, "the old default stays, no longer primary");
    }
    let (_, created) = app.call(Method::POST, "/agent/create", None).await;
    assert_eq!(created["agent"]["workspace_id"], seeded.to_string());
    let (status, _) = app.call(Method::GET, &format!("/agents?workspace_id={}", default.as_str().unwrap()), None).await;
    assert_eq!(status, StatusCode::OK, "the old default is still the organization's");
}

async fn list_refuses_bad_limits_cursors_and_names(backend: Backend) {
    let app = TestApp::new(backend).await;
    create(&app, json!({})).await;
    let long = "n".repeat(201);
    let cases = [
        ("limit=0", "limit must be an integer from 1 to 100"),
        ("limit=101", "limit must be an integer from 1 to 100"),
        ("limit=2.5", "limit must be an integer from 1 to 100"),
        ("limit=abc", "limit must be an integer from 1 to 100"),
        ("limit=%2B5", "limit must be an integer from 1 to 100"),
        ("cursor=not-a-cursor", "cursor must be an RFC 3339 date-time, e.g. 2026-01-31T12:00:00Z or a next_cursor"),
        ("cursor=2026-01-01", "cursor must be an RFC 3339 date-time, e.g. 2026-01-31T12:00:00Z or a next_cursor"),
        (&format!("name={long}"), "name must be at most 200 characters"),
        ("limit=1&limit=2", "query parameter limit is given more than once"),
    ];
    for (query, detail) in cases {
        let (status, body) = app.call(Method::GET, &format!("/agents?{query}"), None).await;
        assert_eq!((status, body), (StatusCode::BAD_REQUEST, json!({ "detail": detail })), "{query}");
    }
    for limit in [1, 100] {
        let (status, _) = app.call(Method::GET, &format!("/agents?limit={limit}"), None).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, _) = app.call(Method::GET, &format!("/agents?name={}", "n".repeat(200)), None).await;
    assert_eq!(status, StatusCode::OK);
}

async fn operations_build_a_graph_with_temp_refs(backend: Backend) {
    let app = TestApp::new(backend).await;
    let agent = id(&create(&app, json!({})).await);
    let operations = json!([
        node(VIDEO_INPUT, "a", json!({})),
        node(VIDEO_INPUT, "b", json!({})),
        node(CONCATENATE, "join", json!({})),
        node(SPEED, "fast", json!({ "factor": 2 })),
        node(DESTINATION, "out", json!({ "name": "final" })),
        connect("b", "join"),
        connect("a", "join"),
        connect("join", "fast"),
        connect("fast", "out"),
    ]);
    let (status, body) = update(&app, &agent, json!({ "operations": operations, "name": "joined" })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["agent_id"], agent.as_str());
    assert_eq!(body["operations_applied"], 9);
    let created = body["created_nodes"].as_array().unwrap();
    let temp_refs: Vec<&str> = created.iter().map(|node| node["temp_ref_id"].as_str().unwrap()).collect();
    assert_eq!(temp_refs, ["a", "b", "join", "fast", "out"]);
    let ids: Vec<&str> = created.iter().map(|node| node["agent_node_id"].as_str().unwrap()).collect();
    let graph = read(&app, &agent).await;
    assert_eq!(graph["agent"]["name"], "joined");
    let connections = graph["connections"].as_array().unwrap();
    // Concatenate takes its inputs in connection order: b first, then a.
    assert_eq!(connections[0], json!({ "source_agent_node_id": ids[1], "target_agent_node_id": ids[2] }));
    assert_eq!(connections[1], json!({ "source_agent_node_id": ids[0], "target_agent_node_id": ids[2] }));
    // Later payloads connect existing nodes by ID; a node without temp_ref_id reports null.
    let more = json!([
        { "op": "create_node", "node_type_id": CLIP },
        { "op": "delete_connection", "source_agent_node_id": ids[3], "target_agent_node_id": ids[4] },
    ]);
    let (status, body) = update(&app, &agent, json!({ "operations": more })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["created_nodes"][0]["temp_ref_id"].is_null());
    let clip = body["created_nodes"][0]["agent_node_id"].as_str().unwrap().to_owned();
    let wire = json!([
        { "op": "create_connection", "source_agent_node_id": ids[3], "target_agent_node_id": clip },
        { "op": "create_connection", "source_agent_node_id": clip, "target_agent_node_id": ids[4] },
    ]);
    let (status, body) = update(&app, &agent, json!({ "operations": wire })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(read(&app, &agent).await["connections"].as_array().unwrap().len(), 5);
}

async fn update_and_delete_node_edit_params_and_connections(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (agent, ids) = agent_with_chain(&app).await;
    let operations = json!([{ "op": "update_node", "agent_node_id": ids["clip"], "params_used": { "end_ms": 2500, "start_ms": null } }]);
    let (status, body) = update(&app, &agent, json!({ "operations": operations })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let graph = read(&app, &agent).await;
    assert_eq!(graph["agent_nodes"][1]["params_used"], json!({ "end_ms": 2500 }), "set one, removed one");
    let operations = json!([{ "op": "delete_node", "agent_node_id": ids["clip"] }]);
    let (status, _) = update(&app, &agent, json!({ "operations": operations })).await;
    assert_eq!(status, StatusCode::OK);
    let graph = read(&app, &agent).await;
    assert_eq!(graph["agent_nodes"].as_array().unwrap().len(), 2);
    assert_eq!(graph["connections"], json!([]), "the node's connections went with it");
}

async fn each_refused_operation_names_its_index_and_changes_nothing(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (agent, ids) = agent_with_chain(&app).await;
    let before = read(&app, &agent).await;
    let unknown = Uuid::new_v4();
    let fresh = node(SPEED, "s", json!({ "factor": 1.5 }));
    let cases = [
        (
            json!([fresh, { "op": "create_node", "node_type_id": unknown }]),
            format!("operations[1]: unknown node_type_id {unknown} (see GET /node_types)"),
        ),
        (
            json!([fresh, { "op": "update_node", "agent_node_id": unknown, "params_used": {} }]),
            format!("operations[1]: agent_node_id {unknown} is not a node of this agent"),
        ),
        (
            json!([fresh, { "op": "delete_node", "agent_node_id": unknown }]),
            format!("operations[1]: agent_node_id {unknown} is not a node of this agent"),
        ),
        (
            json!([node(SPEED, "s", json!({ "factor": 5 }))]),
            "operations[0]: params_used.factor: 5 is greater than the maximum of 4".to_owned(),
        ),
        (
            json!([node(SPEED, "s", json!({ "factor": "fast" }))]),
            "operations[0]: params_used.factor: \"fast\" is not of type \"number\"".to_owned(),
        ),
        (
            json!([node(SPEED, "s", json!({ "speed": 2 }))]),
            "operations[0]: params_used.speed: unknown parameter".to_owned(),
        ),
        (
            json!([fresh, { "op": "create_connection", "source_agent_node_id": ids["out"], "target_temp_ref_id": "s" }]),
            "operations[1]: a Destination node has no outgoing connections".to_owned(),
        ),
        (
            json!([fresh, { "op": "create_connection", "source_temp_ref_id": "s", "target_agent_node_id": ids["in"] }]),
            "operations[1]: nothing may connect into a Video Input node".to_owned(),
        ),
        (
            json!([node(SCHEDULE_TRIGGER, "t", json!({})), { "op": "create_connection", "source_agent_node_id": ids["clip"], "target_temp_ref_id": "t" }]),
            "operations[1]: nothing may connect into a Schedule node".to_owned(),
        ),
        (
            json!([{ "op": "create_connection", "source_agent_node_id": ids["in"], "target_agent_node_id": ids["clip"] }]),
            format!(
                "operations[0]: the connection from {} to {} already exists",
                ids["in"].as_str().unwrap(),
                ids["clip"].as_str().unwrap()
            ),
        ),
        (json!([fresh, connect("s", "s")]), "operations[1]: the connection from".to_owned()),
        (
            json!([fresh, { "op": "create_connection", "source_agent_node_id": ids["clip"], "target_temp_ref_id": "s" }, { "op": "create_connection", "source_temp_ref_id": "s", "target_agent_node_id": ids["clip"] }]),
            "operations[2]: the connection from".to_owned(),
        ),
        (
            json!([{ "op": "delete_connection", "source_agent_node_id": ids["in"], "target_agent_node_id": ids["out"] }]),
            "operations[0]: there is no connection from".to_owned(),
        ),
        (
            json!([fresh, node(SPEED, "s", json!({}))]),
            "operations[1]: temp_ref_id \"s\" is used twice in this payload".to_owned(),
        ),
        (
            json!([connect("nope", "s")]),
            "operations[0]: temp_ref_id \"nope\" was not created earlier in this payload".to_owned(),
        ),
    ];
    for (operations, detail) in cases {
        let (status, body) = update(&app, &agent, json!({ "operations": operations, "name": "changed" })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{operations}: {body}");
        let text = body["detail"].as_str().unwrap_or_default();
        assert!(text.starts_with(&detail), "{operations}:\n got  {text}\n want {detail}");
        assert_eq!(read(&app, &agent).await, before, "a refused payload changes nothing");
    }
}

async fn metadata_updates_and_empty_updates(backend: Backend) {
    let app = TestApp::new(backend).await;
    let agent = create(&app, json!({ "name": "a" })).await;
    let agent_id = id(&agent);
    let (status, body) = update(&app, &agent_id, json!({ "description": "new", "visibility": "public" })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["operations_applied"], 0);
    let read_back = read(&app, &agent_id).await["agent"].clone();
    assert_eq!((read_back["name"].as_str(), read_back["description"].as_str()), (Some("a"), Some("new")));
    assert_eq!(read_back["visibility"], "public");
    assert!(read_back["updated_at"].as_str() >= agent["updated_at"].as_str());
    assert_eq!(read_back["created_at"], agent["created_at"]);
    let cases = [
        (json!({}), "nothing to update: give name, description, visibility or operations"),
        (json!({ "operations": [] }), "operations must contain at least 1 item"),
        (json!({ "operations": {} }), "operations must be an array"),
        (json!({ "name": "" }), "name must be 1 to 120 characters"),
        (json!({ "workspace_id": Uuid::new_v4() }), "unknown property: workspace_id"),
    ];
    for (body, detail) in cases {
        let (status, answer) = update(&app, &agent_id, body.clone()).await;
        assert_eq!((status, answer), (StatusCode::BAD_REQUEST, json!({ "detail": detail })), "{body}");
    }
}

async fn duplicate_copies_the_graph_with_new_node_ids(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (agent, ids) = agent_with_chain(&app).await;
    let (status, body) = app.call(Method::POST, &format!("/agent/{agent}/duplicate"), None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["agent"]["name"], "chain (copy)");
    let copy = body["agent_id"].as_str().unwrap().to_owned();
    assert_ne!(copy, agent);
    let (original, duplicate) = (read(&app, &agent).await, read(&app, &copy).await);
    let node_ids = |graph: &Value| -> HashSet<String> {
        graph["agent_nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["agent_node_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(node_ids(&original).is_disjoint(&node_ids(&duplicate)));
    assert_eq!(duplicate["agent_nodes"].as_array().unwrap().len(), 3);
    let first = &duplicate["connections"][0];
    assert!(node_ids(&duplicate).contains(first["source_agent_node_id"].as_str().unwrap()));
    assert_eq!(duplicate["agent_nodes"][1]["params_used"], original["agent_nodes"][1]["params_used"]);
    // Editing the copy leaves the original alone.
    let copy_clip = duplicate["agent_nodes"][1]["agent_node_id"].clone();
    let operations = json!([{ "op": "delete_node", "agent_node_id": copy_clip }]);
    assert_eq!(update(&app, &copy, json!({ "operations": operations })).await.0, StatusCode::OK);
    assert_eq!(read(&app, &agent).await, original);
    assert_ne!(ids["clip"], copy_clip);
    let long = create(&app, json!({ "name": "n".repeat(120) })).await;
    let (_, body) = app.call(Method::POST, &format!("/agent/{}/duplicate", id(&long)), None).await;
    assert_eq!(body["agent"]["name"].as_str().unwrap().chars().count(), 120);
    let (_, body) =
        app.call(Method::POST, &format!("/agent/{agent}/duplicate"), Some(json!({ "name": "named" }))).await;
    assert_eq!(body["agent"]["name"], "named");
}

async fn delete_is_soft_and_final(backend: Backend) {
    let app = TestApp::new(backend).await;
    let keep = id(&create(&app, json!({ "name": "keep" })).await);
    let (gone, _) = agent_with_chain(&app).await;
    let (status, body) = app.call(Method::POST, &format!("/agent/{gone}/delete"), None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "success": true })));
    let not_found = (StatusCode::NOT_FOUND, json!({ "detail": "Agent not found" }));
    assert_eq!(app.call(Method::GET, &format!("/agent/{gone}"), None).await, not_found);
    assert_eq!(app.call(Method::POST, &format!("/agent/{gone}/delete"), None).await, not_found);
    assert_eq!(update(&app, &gone, json!({ "name": "x" })).await, not_found);
    assert_eq!(app.call(Method::POST, &format!("/agent/{gone}/duplicate"), None).await, not_found);
    let (_, body) = app.call(Method::GET, "/agents", None).await;
    let listed: Vec<String> = body["agents"].as_array().unwrap().iter().map(id).collect();
    assert_eq!(listed, std::slice::from_ref(&keep));

    // A page still continues after its last agent is deleted.
    let newer = id(&create(&app, json!({ "name": "newer" })).await);
    let newest = id(&create(&app, json!({ "name": "newest" })).await);
    let (_, page) = app.call(Method::GET, "/agents?limit=2", None).await;
    let first: Vec<String> = page["agents"].as_array().unwrap().iter().map(id).collect();
    assert_eq!(first, [newest, newer.clone()]);
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    assert_eq!(app.call(Method::POST, &format!("/agent/{newer}/delete"), None).await.0, StatusCode::OK);
    let (status, page) = app.call(Method::GET, &format!("/agents?limit=2&cursor={cursor}"), None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let rest: Vec<String> = page["agents"].as_array().unwrap().iter().map(id).collect();
    assert_eq!(rest, [keep]);
    assert!(page["next_cursor"].is_null());
}

async fn another_organizations_agents_and_nodes_are_not_found(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (agent, ids) = agent_with_chain(&app).await;
    let (_, other_key) = app.add_organization(true).await;
    let not_found = (StatusCode::NOT_FOUND, json!({ "detail": "Agent not found" }));
    assert_eq!(app.call_as(&other_key, Method::GET, &format!("/agent/{agent}"), None).await, not_found);
    let rename = Some(json!({ "name": "stolen" }));
    assert_eq!(app.call_as(&other_key, Method::POST, &format!("/agent/{agent}/update"), rename).await, not_found);
    assert_eq!(app.call_as(&other_key, Method::POST, &format!("/agent/{agent}/duplicate"), None).await, not_found);
    assert_eq!(app.call_as(&other_key, Method::POST, &format!("/agent/{agent}/delete"), None).await, not_found);
    let (_, body) = app.call_as(&other_key, Method::GET, "/agents", None).await;
    assert_eq!(body["agents"], json!([]));
    // Org B's own agent cannot reach org A's nodes either.
    let (status, created) = app.call_as(&other_key, Method::POST, "/agent/create", None).await;
    assert_eq!(status, StatusCode::CREATED);
    let theirs = id(&created["agent"]);
    let operations = json!([{ "op": "update_node", "agent_node_id": ids["clip"], "params_used": {} }]);
    let (status, body) = app
        .call_as(
            &other_key,
            Method::POST,
            &format!("/agent/{theirs}/update"),
            Some(json!({ "operations": operations })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["detail"].as_str().unwrap().contains("is not a node of this agent"));
    assert_eq!(read(&app, &agent).await["agent"]["name"], "chain");
}

async fn concurrent_updates_lose_no_operation(backend: Backend) {
    let app = std::sync::Arc::new(TestApp::new(backend).await);
    let agent = id(&create(&app, json!({})).await);
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let (app, agent) = (app.clone(), agent.clone());
            tokio::spawn(async move {
                let operations = json!([node(SPEED, &format!("n{i}"), json!({ "factor": 1 }))]);
                update(&app, &agent, json!({ "operations": operations })).await
            })
        })
        .collect();
    let mut created = HashSet::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        created.insert(body["created_nodes"][0]["agent_node_id"].as_str().unwrap().to_owned());
    }
    let graph = read(&app, &agent).await;
    let stored: HashSet<String> = graph["agent_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["agent_node_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(stored, created, "every concurrent update landed exactly once");
}

async fn bad_input_is_a_client_error_and_changes_nothing(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (agent, ids) = agent_with_chain(&app).await;
    let before = read(&app, &agent).await;
    let many: Vec<Value> = (0..10_000).map(|i| node(SPEED, &format!("n{i}"), json!({}))).collect();
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let cases = [
        (json!({ "operations": many }), "operations may contain at most 1000 items, got 10000"),
        (json!({ "operations": [{ "op": "rename_node" }] }), "operations[0]: unknown op \"rename_node\" (expected one of create_node, update_node, delete_node, create_connection, delete_connection)"),
        (json!({ "operations": [{ "node_type_id": SPEED }] }), "operations[0]: op is required (one of create_node, update_node, delete_node, create_connection, delete_connection)"),
        (json!({ "operations": [{ "op": 3 }] }), "operations[0]: op must be a string"),
        (json!({ "operations": ["create_node"] }), "operations[0]: each operation must be an object"),
        (json!({ "operations": [{ "op": "create_node", "node_type_id": 7 }] }), "operations[0]: node_type_id must be a UUID string"),
        (json!({ "operations": [{ "op": "create_node", "node_type_id": SPEED, "params_used": [] }] }), "operations[0]: params_used must be an object"),
        (json!({ "operations": [{ "op": "delete_node", "agent_node_id": ids["clip"], "extra": 1 }] }), "operations[0]: delete_node: unknown property: extra"),
        (json!({ "operations": [{ "op": "update_node", "agent_node_id": ids["clip"] }] }), "operations[0]: params_used is required"),
        (json!({ "operations": [{ "op": "create_connection", "source_agent_node_id": ids["in"], "source_temp_ref_id": "x", "target_agent_node_id": ids["clip"] }] }), "operations[0]: give either source_agent_node_id or source_temp_ref_id, not both"),
        (json!({ "operations": [node(VIDEO_GENERATION, "g", json!({ "prompt": deep }))] }), "operations[0]: params_used.prompt:"),
    ];
    for (body, detail) in cases {
        let (status, answer) = update(&app, &agent, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let text = answer["detail"].as_str().unwrap_or_default();
        assert!(text.starts_with(detail), "\n got  {text}\n want {detail}");
    }
    // Nesting beyond what the JSON parser accepts is refused before anything else.
    let too_deep = format!("{{\"operations\":{}1{}}}", "[".repeat(300), "]".repeat(300));
    let headers = [("authorization", format!("Bearer {}", app.key))];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(name, value)| (*name, value.as_str())).collect();
    let (status, answer) =
        app.raw(Method::POST, &format!("/agent/{agent}/update"), &headers, too_deep.into_bytes()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(answer["detail"].as_str().unwrap().starts_with("request body is not valid JSON"), "{answer}");
    assert_eq!(read(&app, &agent).await, before);
}
