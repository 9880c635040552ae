//! The service description: generated from the routes table, committed, served.

use http::{Method, StatusCode};
use serde_json::Value;
use shared::api::openapi::{self, Access};
use shared::api::{self, Body, ROUTES};

use crate::helpers::{Backend, TestApp};

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
    for route in ROUTES {
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
    for route in ROUTES {
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
    for route in ROUTES {
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
    let mut schema = answer["content"]["application/json"]["schema"].clone();
    schema["components"] = document["components"].clone();
    let validator = jsonschema::options().should_validate_formats(true).build(&schema).expect("a valid schema");
    let problems: Vec<String> =
        validator.iter_errors(body).map(|error| format!("{} at {}", error, error.instance_path())).collect();
    assert!(
        problems.is_empty(),
        "{function} {status} does not conform to the document:\n{}\n{body}",
        problems.join("\n")
    );
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
