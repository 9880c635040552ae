//! The service description: generated from the routes table, committed, served.

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::api::openapi::{self, Access};
use shared::api::{self, Body, ROUTES};
use shared::domain::nodes::{BACKGROUND_MUSIC, DESTINATION, IMAGE_GENERATION, OVERLAY, SCHEDULE_TRIGGER, VIDEO_INPUT};

use crate::conformance;
use crate::helpers::{Backend, TestApp};
use crate::runs::{file_server, Harness};
use crate::uploads::sample;
use crate::webhooks::{Mode, Receiver};

conformance!(
    a_typed_client_reads_the_sources_of_url_inputs_uploads_and_generated_media_and_their_webhooks,
    a_typed_client_reads_triggered_by_of_a_site_run_and_a_fire_by_hand_and_their_webhooks,
    a_typed_client_pages_agents_by_date_time_cursors_and_may_write_one,
);

fn document() -> Value {
    serde_json::from_str(openapi::json()).expect("the document is JSON")
}

#[test]
fn the_committed_document_is_the_generated_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
    let committed = std::fs::read_to_string(path).expect("docs/openapi.json");
    assert!(
        committed == openapi::json(),
        "docs/openapi.json is not the generated document: run `cargo run --bin openapi > docs/openapi.json`"
    );
}

#[test]
fn every_route_is_a_documented_operation_and_nothing_else_is() {
    let document = document();
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(document["info"]["version"], "2.0.0", "the contract's version of the description");
    let mut operations = 0;
    for route in ROUTES.iter() {
        assert!(openapi::operation(route.function).is_some(), "{} has no documented operation", route.function);
        let method = route.method.as_str().to_lowercase();
        let operation = &document["paths"][route.path][&method];
        assert_eq!(operation["operationId"], route.function, "{} {}", route.method, route.path);
        let responses = operation["responses"].as_object().unwrap();
        assert!(responses.keys().any(|status| status.starts_with('2')), "{}: no success answer", route.function);
        operations += 1;
    }
    let documented: usize =
        document["paths"].as_object().unwrap().values().map(|item| item.as_object().unwrap().len()).sum();
    assert_eq!(documented, operations, "every documented operation is a route");
    assert!(openapi::operation("no-such-function").is_none());
}

#[test]
fn shared_stores_declare_bearer_only_and_the_rest_either_scheme() {
    let document = document();
    let schemes = &document["components"]["securitySchemes"];
    assert_eq!(schemes["bearerAuth"]["scheme"], "bearer");
    assert_eq!((&schemes["apiKeyAuth"]["in"], &schemes["apiKeyAuth"]["name"]), (&"header".into(), &"X-API-Key".into()));
    for route in ROUTES.iter() {
        let operation = &document["paths"][route.path][route.method.as_str().to_lowercase()];
        let names: Vec<String> = operation["security"]
            .as_array()
            .map(|list| list.iter().flat_map(|item| item.as_object().unwrap().keys().cloned()).collect())
            .unwrap_or_default();
        let access = openapi::operation(route.function).unwrap().access;
        let expected: &[&str] = match access {
            Access::Bearer => &["bearerAuth"],
            Access::BearerOrApiKey => &["bearerAuth", "apiKeyAuth"],
            Access::Public => &[],
        };
        assert_eq!(names, expected, "{}", route.function);
        assert_eq!(route.path.starts_with("/shared-stores"), access == Access::Bearer, "{}", route.function);
        if access != Access::Public {
            assert!(operation["responses"]["401"]["headers"]["WWW-Authenticate"].is_object(), "{}", route.function);
        }
    }
}

/// Every object schema reachable from `schema` (through references, items, properties,
/// `oneOf`/`anyOf`/`allOf`), by where it was found.
fn objects<'a>(document: &'a Value, schema: &'a Value, path: String, found: &mut Vec<(String, &'a Value)>) {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap();
        if found.iter().any(|(seen, _)| seen == name) {
            return;
        }
        return objects(document, &document["components"]["schemas"][name], name.to_owned(), found);
    }
    if schema["properties"].is_object() {
        found.push((path.clone(), schema));
        for (name, property) in schema["properties"].as_object().unwrap() {
            objects(document, property, format!("{path}.{name}"), found);
        }
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        for (index, item) in schema[key].as_array().into_iter().flatten().enumerate() {
            objects(document, item, format!("{path}/{key}[{index}]"), found);
        }
    }
    for key in ["items", "additionalProperties"] {
        if schema[key].is_object() {
            objects(document, &schema[key], format!("{path}/{key}"), found);
        }
    }
}

#[test]
fn bodies_the_service_reads_are_closed_all_the_way_down() {
    let document = document();
    let mut checked = 0;
    for route in ROUTES.iter() {
        let operation = &document["paths"][route.path][route.method.as_str().to_lowercase()];
        let schema = &operation["requestBody"]["content"]["application/json"]["schema"];
        let mut found = Vec::new();
        objects(&document, schema, route.function.to_owned(), &mut found);
        for (path, object) in found {
            assert_eq!(object["additionalProperties"], false, "{}: {path} accepts unknown properties", route.function);
            checked += 1;
        }
    }
    assert!(checked > 20, "the walk reached the nested bodies ({checked} objects)");
    let operation = &document["components"]["schemas"]["Operation"]["oneOf"];
    assert_eq!(operation.as_array().map(Vec::len), Some(5), "five graph operations");
}

#[tokio::test]
async fn the_document_is_served_without_an_api_key() {
    let app = TestApp::new(Backend::Sqlite).await;
    let request = http::Request::builder().method(Method::GET).uri("/openapi.json").body(Body::Empty).unwrap();
    let response = api::dispatch(app.app.clone(), request).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[http::header::CONTENT_TYPE], "application/json");
    let body: &[u8] = response.body();
    assert_eq!(body, openapi::json().as_bytes());
}

/// Checks an answer of the route served by `function` against the document's schema for
/// that status, formats (UUIDs, date-times) included; panics naming every violation.
pub fn conforms(function: &str, status: StatusCode, body: &Value) {
    let document = document();
    let route = ROUTES.iter().find(|route| route.function == function).expect("a function of the routes table");
    let answer = &document["paths"][route.path][route.method.as_str().to_lowercase()]["responses"][status.as_str()];
    assert!(answer.is_object(), "{function} does not document a {status}");
    validate(&document, &answer["content"]["application/json"]["schema"], &format!("{function} {status}"), body);
}

/// Checks a webhook's body against the document's `webhooks` entry of its `flag`, as a
/// client generated from the document reads it.
pub fn conforms_event(body: &Value) {
    let document = document();
    let flag = body["flag"].as_str().unwrap_or_else(|| panic!("a webhook names its flag: {body}"));
    let event = &document["webhooks"][flag]["post"];
    assert!(event.is_object(), "the document describes no webhook {flag}");
    validate(&document, &event["requestBody"]["content"]["application/json"]["schema"], flag, body);
}

fn validate(document: &Value, schema: &Value, what: &str, body: &Value) {
    let mut schema = schema.clone();
    schema["components"] = document["components"].clone();
    let validator = jsonschema::options().should_validate_formats(true).build(&schema).expect("a valid schema");
    let problems: Vec<String> =
        validator.iter_errors(body).map(|error| format!("{} at {}", error, error.instance_path())).collect();
    assert!(problems.is_empty(), "{what} does not conform to the document:\n{}\n{body}", problems.join("\n"));
}

#[test]
fn the_document_describes_the_three_webhooks_and_triggered_by_field_by_field() {
    let document = document();
    let webhooks = document["webhooks"].as_object().expect("a webhooks section");
    let mut flags: Vec<&String> = webhooks.keys().collect();
    flags.sort();
    assert_eq!(flags, ["RUN_FINISHED", "RUN_PROGRESS", "RUN_STARTED"]);
    let schemas = &document["components"]["schemas"];
    let triggered_by = &schemas["TriggeredBy"];
    let mut fields: Vec<&String> = triggered_by["properties"].as_object().unwrap().keys().collect();
    fields.sort();
    let expected = ["channel_id", "trigger_id", "triggered_at", "type", "video_id", "video_title", "video_url"];
    assert_eq!(fields, expected);
    assert_eq!(triggered_by["additionalProperties"], false);
    for (name, fields) in [("Source", &["render_asset_id", "query", "end_ms"][..]), ("AgentPage", &["next_cursor"])] {
        let required = schemas[name]["required"].as_array().unwrap();
        for field in fields {
            assert!(required.iter().any(|given| given == field), "{name}.{field} is required");
        }
    }
    for (field, kind) in [("render_asset_id", "string"), ("query", "string"), ("end_ms", "integer")] {
        assert_eq!(schemas["Source"]["properties"][field]["type"], kind, "{field} is never null");
    }
    assert!(!schemas["Source"]["required"].as_array().unwrap().contains(&json!("provider_asset_id")));
    let cursor = document["paths"]["/agents"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|parameter| parameter["name"] == "cursor")
        .unwrap();
    assert_eq!(cursor["schema"]["format"], "date-time");
    // A typed client reads a payload of each kind; one that breaks the types is caught.
    let started = json!({
        "flag": "RUN_STARTED", "sequence": 1, "occurred_at": "2026-11-26T12:00:00.000Z",
        "agent_id": "5f2d8c1e-3b7a-4c9d-8e6f-0a1b2c3d4e5f", "run_id": "5f2d8c1e-3b7a-4c9d-8e6f-0a1b2c3d4e50",
        "status": "running", "node_status_counts": { "completed": 0, "in_progress": 1, "failed": 0 },
        "triggered_by": null, "inputs": [],
    });
    conforms_event(&started);
    let mut untyped = started.clone();
    untyped["triggered_by"] = json!({ "type": "schedule" });
    let mut finished_flag = started.clone();
    finished_flag["flag"] = json!("RUN_FINISHED");
    for broken in [untyped, finished_flag] {
        assert!(std::panic::catch_unwind(|| conforms_event(&broken)).is_err(), "{broken} passed");
    }
    // An opaque agent cursor, or a citation without its typed fields, is refused too.
    let page = |cursor: &str| json!({ "agents": [], "next_cursor": cursor });
    conforms("list-agents", StatusCode::OK, &page("2026-11-26T12:00:00.1230000000000000000000000001Z"));
    let opaque = page("YWdlbnRzOjAxOTA");
    assert!(std::panic::catch_unwind(|| conforms("list-agents", StatusCode::OK, &opaque)).is_err());
    let citation = json!({
        "provider": "url", "source_kind": "video_url", "media_type": "video", "render_asset_id": "m",
        "query": "https://example.com/a.mp4", "start_ms": 0, "end_ms": 2000, "placement": "main",
        "layout": "full_frame", "licensed_asset_family": "customer_supplied",
    });
    let output = |source: Value| {
        json!({ "id": "5f2d8c1e-3b7a-4c9d-8e6f-0a1b2c3d4e5f", "video_url": "u", "thumbnail_url": null,
                "completed_at": "2026-11-26T12:00:00.000Z", "original_node_id": null,
                "timeline_prproj_url": null, "sources": [source] })
    };
    let mut finished = started.clone();
    finished["flag"] = json!("RUN_FINISHED");
    finished["status_message"] = Value::Null;
    finished["needs_credits"] = json!(false);
    finished["errors"] = json!([]);
    finished["outputs"] = json!([output(citation.clone())]);
    finished["finished_at"] = json!("2026-11-26T12:00:01.000Z");
    conforms_event(&finished);
    for (field, value) in [("render_asset_id", Value::Null), ("end_ms", Value::Null), ("query", Value::Null)] {
        let mut broken = finished.clone();
        broken["outputs"][0]["sources"][0][field] = value;
        assert!(std::panic::catch_unwind(|| conforms_event(&broken)).is_err(), "a null {field} passed");
        broken["outputs"][0]["sources"][0].as_object_mut().unwrap().remove(field);
        assert!(std::panic::catch_unwind(|| conforms_event(&broken)).is_err(), "a missing {field} passed");
    }
}

/// `sources` of an output as a typed client reads them, and the output.
fn sources_of(record: &Value) -> (&Value, &Vec<Value>) {
    let output = &record["outputs"][0];
    (output, output["sources"].as_array().unwrap_or_else(|| panic!("sources: {record}")))
}

/// Every event the receiver accepted for `run` (once its `RUN_FINISHED` and every
/// sequence before it arrived), each checked against its webhook's schema.
async fn events_conform(receiver: &Receiver, run: &str) -> Vec<Value> {
    let of_run = |received: &[crate::webhooks::Received]| -> Vec<Value> {
        let mut bodies: Vec<Value> = received
            .iter()
            .filter(|event| event.answered.is_some_and(|status| status < 300) && event.body["run_id"] == run)
            .map(|event| event.body.clone())
            .collect();
        bodies.sort_by_key(|body| body["sequence"].as_u64());
        bodies.dedup_by_key(|body| body["sequence"].as_u64());
        bodies
    };
    let received = receiver
        .wait_until("the run's RUN_FINISHED and every event before it", |received| {
            let bodies = of_run(received);
            let finished = bodies.iter().any(|body| body["flag"] == "RUN_FINISHED");
            finished && bodies.last().and_then(|body| body["sequence"].as_u64()) == Some(bodies.len() as u64)
        })
        .await;
    let bodies = of_run(&received);
    for body in &bodies {
        conforms_event(body);
    }
    bodies
}

async fn a_typed_client_reads_the_sources_of_url_inputs_uploads_and_generated_media_and_their_webhooks(
    backend: Backend,
) {
    let harness = Harness::new(backend).await;
    let receiver = Receiver::start(Mode::Accept).await;
    let music = harness.upload("audio", "audio.mp3").await;
    // A 2 s video at a plain URL, used whole (no clip window): its citation still ends.
    let url = file_server(sample("video.mp4")).await;
    let (agent, _) = harness
        .agent(
            &[
                ("in", VIDEO_INPUT, json!({})),
                ("logo", IMAGE_GENERATION, json!({"prompt": "a small logo", "quality": "low"})),
                ("overlay", OVERLAY, json!({"position": "top_right", "scale": 0.25})),
                ("bgm", BACKGROUND_MUSIC, json!({"audio_id": music, "volume": 0.5})),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "overlay"), ("logo", "overlay"), ("overlay", "bgm"), ("bgm", "out")],
        )
        .await;
    let run = harness.start(&agent, json!({ "video_urls": [url], "callback_url": receiver.url })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    conforms("get-run", StatusCode::OK, &record);
    let (status, nodes) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    conforms("get-run-nodes", status, &nodes);
    let (status, list) = harness.test.call(Method::GET, &format!("/agent_runs?agent_id={agent}"), None).await;
    conforms("list-runs", status, &list);
    let (output, sources) = sources_of(&record);
    let kind = |wanted: &str| {
        sources.iter().find(|source| source["source_kind"] == wanted).unwrap_or_else(|| panic!("{wanted}: {output}"))
    };
    let cited = kind("video_url");
    assert_eq!((&cited["query"], &cited["start_ms"]), (&json!(url), &json!(0)), "{cited}");
    let end = cited["end_ms"].as_u64().expect("end_ms is an integer without a clip window");
    assert!(end.abs_diff(2_000) <= 60, "the input's whole 2 s: {cited}");
    assert!(cited.get("provider_asset_id").is_none(), "a plain URL resolves to no provider ID: {cited}");
    let generated = kind("generated");
    assert_eq!(generated["query"], "a small logo");
    let uploaded = kind("uploaded_audio");
    assert_eq!((&uploaded["query"], &uploaded["provider_asset_id"]), (&json!(""), &json!(music)), "{uploaded}");
    let mut assets: Vec<&str> = sources.iter().map(|source| source["render_asset_id"].as_str().unwrap()).collect();
    assets.push(output["id"].as_str().unwrap());
    assets.sort_unstable();
    assets.dedup();
    assert_eq!(assets.len(), sources.len() + 1, "each cited file is an asset of its own: {output}");
    let events = events_conform(&receiver, &run).await;
    let finished = events.iter().find(|body| body["flag"] == "RUN_FINISHED").unwrap();
    assert_eq!(finished["outputs"][0]["sources"], output["sources"], "the webhook cites as the record does");

    // A Video Input that is itself the output: the URL's downloaded copy is still an
    // asset of its own, not the output's ID.
    let (alone, _) = harness.agent(&[("in", VIDEO_INPUT, json!({}))], &[]).await;
    let run = harness.start(&alone, json!({ "video_urls": [url], "callback_url": receiver.url })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    conforms("get-run", StatusCode::OK, &record);
    let (output, sources) = sources_of(&record);
    assert_eq!(sources.len(), 1, "{output}");
    let asset = sources[0]["render_asset_id"].as_str().expect("a render_asset_id");
    assert!(uuid::Uuid::parse_str(asset).is_ok() && asset != output["id"], "{output}");
    assert!(sources[0]["end_ms"].as_u64().is_some_and(|end| end.abs_diff(2_000) <= 60), "{output}");
    events_conform(&receiver, &run).await;
}

async fn a_typed_client_reads_triggered_by_of_a_site_run_and_a_fire_by_hand_and_their_webhooks(backend: Backend) {
    let harness = Harness::new(backend).await;
    let receiver = Receiver::start(Mode::Accept).await;
    // A site's video (the harness reads `localhost` as a video-sharing site).
    let site = crate::sites::site_server(sample("video.mp4")).await.replace("127.0.0.1", "localhost");
    let page = format!("{site}/watch");
    let (agent, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let body = json!({ "youtube_url_inputs": [{ "url": page }], "callback_url": receiver.url });
    let run = harness.start(&agent, body).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    conforms("get-run", StatusCode::OK, &record);
    let by = &record["triggered_by"];
    assert_eq!((&by["video_url"], &by["trigger_id"]), (&json!(page), &Value::Null), "{by}");
    let (_, sources) = sources_of(&record);
    assert!(sources[0]["end_ms"].is_u64() && sources[0]["render_asset_id"].is_string(), "{sources:?}");
    for event in events_conform(&receiver, &run).await {
        assert_eq!(&event["triggered_by"], by, "every event names what started the run");
    }

    // A Schedule fired by hand: `manual`, the trigger's ID, no video.
    let video = harness.upload("video", "video.mp4").await;
    let schedule = json!({ "cron": "0 3 * * *", "timezone": "Europe/Paris", "run_request": { "video_ids": [video] } });
    let (agent, nodes) = harness
        .agent(
            &[("tick", SCHEDULE_TRIGGER, schedule), ("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))],
            &[("in", "out")],
        )
        .await;
    let (status, fired) = harness.test.call(Method::POST, &format!("/trigger/{}/fire", nodes["tick"]), None).await;
    assert_eq!(status, StatusCode::OK, "{fired}");
    let run = fired["run_ids"][0].as_str().unwrap().to_owned();
    let record = harness.finished(&run).await;
    conforms("get-run", StatusCode::OK, &record);
    let by = &record["triggered_by"];
    assert_eq!(
        (&by["type"], &by["trigger_id"], &by["video_url"]),
        (&json!("manual"), &json!(nodes["tick"]), &Value::Null)
    );
    let (status, list) = harness.test.call(Method::GET, &format!("/agent_runs?agent_id={agent}"), None).await;
    conforms("list-runs", status, &list);
    assert_eq!(list["runs"][0]["triggered_by"], *by);
}

/// The UUID version 7 millisecond of an agent ID.
fn id_millis(id: &str) -> u64 {
    u64::from_str_radix(&id.replace('-', "")[..12], 16).unwrap()
}

async fn a_typed_client_pages_agents_by_date_time_cursors_and_may_write_one(backend: Backend) {
    let app = TestApp::new(backend).await;
    let mut created = Vec::new();
    for index in 0..7 {
        let (status, body) =
            app.call(Method::POST, "/agent/create", Some(json!({ "name": format!("a{index}") }))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        created.push(body["agent_id"].as_str().unwrap().to_owned());
    }
    created.reverse();
    // Pages of two: each answer typed as the document says, each cursor a date-time of
    // its own, every agent once, newest first.
    let (mut seen, mut cursors, mut cursor) = (Vec::new(), Vec::new(), None::<String>);
    for _ in 0..10 {
        let path = match &cursor {
            Some(cursor) => format!("/agents?limit=2&cursor={cursor}"),
            None => "/agents?limit=2".to_owned(),
        };
        let (status, page) = app.call(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        conforms("list-agents", status, &page);
        seen.extend(page["agents"].as_array().unwrap().iter().map(|agent| agent["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(next) => {
                let at = chrono::DateTime::parse_from_rfc3339(next).unwrap_or_else(|_| panic!("{next}"));
                let last = seen.last().unwrap();
                assert_eq!(at.timestamp_millis() as u64, id_millis(last), "the last agent's instant: {next}");
                cursors.push(next.to_owned());
                cursor = Some(next.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(seen, created, "every agent once, newest first");
    let mut distinct = cursors.clone();
    distinct.dedup();
    assert_eq!((cursors.len(), distinct.len()), (3, 3), "{cursors:?}");

    // A date-time the caller writes: the agents created before it.
    let middle = id_millis(&created[3]);
    let written = shared::domain::time::Timestamp::from_unix_millis(middle).to_string();
    let older: Vec<&String> = created.iter().filter(|id| id_millis(id) < middle).collect();
    // The same instant written at +02:00 (`+` escaped in the query).
    let offset = chrono::DateTime::parse_from_rfc3339(&written)
        .unwrap()
        .with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).unwrap())
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
        .replace('+', "%2B");
    for cursor in [written.clone(), offset] {
        let (status, page) = app.call(Method::GET, &format!("/agents?limit=100&cursor={cursor}"), None).await;
        assert_eq!(status, StatusCode::OK, "{cursor}: {page}");
        conforms("list-agents", status, &page);
        let listed: Vec<&str> = page["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
        assert_eq!(listed, older, "{cursor}");
        assert!(page["next_cursor"].is_null());
    }
    let (status, page) = app.call(Method::GET, "/agents?cursor=1999-01-01T00:00:00Z", None).await;
    assert_eq!((status, &page["agents"]), (StatusCode::OK, &json!([])), "nothing is older");
    let (status, page) = app.call(Method::GET, "/agents?cursor=2999-01-01T00:00:00Z", None).await;
    assert_eq!((status, page["agents"].as_array().unwrap().len()), (StatusCode::OK, 7), "everything is older");
    for bad in ["not-a-date", "2026-13-01T00:00:00Z", "2026-01-01"] {
        let (status, body) = app.call(Method::GET, &format!("/agents?cursor={bad}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(body["detail"].as_str().unwrap().contains("cursor must be an RFC 3339 date-time"), "{body}");
        conforms("list-agents", status, &body);
    }
}

#[test]
fn an_answer_that_breaks_the_document_is_caught() {
    let store = serde_json::json!({
        "id": "5f2d8c1e-3b7a-4c9d-8e6f-0a1b2c3d4e5f", "name": "s", "source_type": "manual", "entry_count": 0,
        "created_at": "2026-11-26T12:00:00.000Z", "updated_at": "2026-11-26T12:00:00.000Z",
    });
    conforms("create-shared-store", StatusCode::OK, &serde_json::json!({ "store": store }));
    let mut bad_id = store.clone();
    bad_id["id"] = "not-a-uuid".into();
    let mut no_name = store.clone();
    no_name.as_object_mut().unwrap().remove("name");
    for broken in [
        serde_json::json!({ "store": store, "extra": 1 }),
        serde_json::json!({ "store": bad_id }),
        serde_json::json!({ "store": no_name }),
    ] {
        let caught = std::panic::catch_unwind(|| conforms("create-shared-store", StatusCode::OK, &broken));
        assert!(caught.is_err(), "{broken} passed");
    }
}
