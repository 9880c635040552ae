//! The shared-store contract, run against SQLite and DynamoDB Local.

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::conformance;
use crate::helpers::{alone_on_dynamodb, Backend, TestApp};

conformance!(
    create_store_trims_name_defaults_source_type_and_lists_by_name,
    create_store_requires_a_string_name_and_no_other_properties,
    eleventh_store_is_refused_with_the_limit_body,
    rename_store_changes_the_name_and_requires_one,
    delete_store_removes_its_entries_and_frees_its_slot,
    put_entry_creates_then_replace_keeps_created_at_and_slot,
    put_entry_requires_entry_id_and_display_name,
    metadata_is_an_object_of_at_most_256000_bytes,
    entry_ids_with_reserved_characters_round_trip,
    entries_are_listed_by_display_name_with_metadata,
    patch_entry_renames_and_follows_metadata_rules,
    patch_entry_errors_follow_the_contract,
    delete_entry_frees_the_id_and_reports_missing_entries,
    bulk_last_occurrence_wins_and_count_is_unique_ids,
    bulk_validation_errors_write_nothing,
    bulk_over_the_entry_limit_writes_nothing,
    put_at_the_entry_limit_refuses_new_ids_but_replaces_existing,
    another_organizations_store_is_not_found,
    malformed_ids_and_bodies_are_client_errors,
    stored_strings_are_bounded_alike_on_every_backend,
);

/// Percent-encodes every byte but ASCII letters and digits, as a client encodes a path.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| if byte.is_ascii_alphanumeric() { (byte as char).to_string() } else { format!("%{byte:02X}") })
        .collect()
}

fn entries_path(store: &str) -> String {
    format!("/shared-stores/{store}/entries")
}

fn entry_path(store: &str, entry: &str) -> String {
    format!("/shared-stores/{store}/entries/{entry}")
}

async fn list_entries(app: &TestApp, store: &str) -> Vec<Value> {
    let (status, body) = app.call(Method::GET, &entries_path(store), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["entries"].as_array().expect("entries array").clone()
}

async fn create_store_trims_name_defaults_source_type_and_lists_by_name(backend: Backend) {
    let app = TestApp::new(backend).await;
    let (status, body) = app.call(Method::POST, "/shared-stores", Some(json!({ "name": "  beta  " }))).await;
    assert_eq!(status, StatusCode::OK);
    let store = &body["store"];
    assert_eq!(store["name"], "beta");
    assert_eq!(store["source_type"], "manual");
    assert_eq!(store["entry_count"], 0);
    assert!(uuid::Uuid::parse_str(store["id"].as_str().unwrap()).is_ok());
    for field in ["created_at", "updated_at"] {
        assert!(store[field].as_str().unwrap().ends_with('Z'), "{field}");
    }
    let (status, body) =
        app.call(Method::POST, "/shared-stores", Some(json!({ "name": "Alpha", "source_type": "crm" }))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["store"]["source_type"], "crm");
    // The contract sets no minimum length: an empty label is a label, kept as given.
    for given in ["", "   "] {
        let body = json!({ "name": "empty label", "source_type": given });
        let (status, answer) = app.call(Method::POST, "/shared-stores", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["store"]["source_type"], "", "{answer}");
        crate::openapi::conforms("create-shared-store", status, &answer);
        let id = answer["store"]["id"].as_str().unwrap();
        let (status, list) = app.call(Method::GET, "/shared-stores", None).await;
        crate::openapi::conforms("list-shared-stores", status, &list);
        let listed = list["stores"].as_array().unwrap().iter().find(|store| store["id"] == id).cloned();
        assert_eq!(listed.map(|store| store["source_type"].clone()), Some(json!("")), "{list}");
        assert_eq!(app.call(Method::DELETE, &format!("/shared-stores/{id}"), None).await.0, StatusCode::OK);
    }
    app.create_store("alpha").await;

    let (status, body) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = body["stores"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Alpha", "alpha", "beta"]);
}

async fn create_store_requires_a_string_name_and_no_other_properties(backend: Backend) {
    let app = TestApp::new(backend).await;
    for body in [
        json!({}),
        json!({ "name": "" }),
        json!({ "name": "   " }),
        json!({ "name": null }),
        json!({ "source_type": "x" }),
    ] {
        let (status, response) = app.call(Method::POST, "/shared-stores", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(response, json!({ "error": "name is required" }), "{body}");
    }
    let (status, response) = app.call(Method::POST, "/shared-stores", None).await;
    assert_eq!((status, response), (StatusCode::BAD_REQUEST, json!({ "error": "name is required" })));
    let (status, response) = app.call(Method::POST, "/shared-stores", Some(json!({ "name": 5 }))).await;
    assert_eq!((status, response), (StatusCode::BAD_REQUEST, json!({ "error": "name must be a string" })));
    let (status, response) = app.call(Method::POST, "/shared-stores", Some(json!({ "name": "n", "extra": 1 }))).await;
    assert_eq!((status, response), (StatusCode::BAD_REQUEST, json!({ "error": "unknown property: extra" })));
    let (status, _) = app.call(Method::POST, "/shared-stores", Some(json!({ "name": "n", "source_type": 3 }))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, body) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(body["stores"], json!([]), "refused creates wrote nothing");
}

async fn eleventh_store_is_refused_with_the_limit_body(backend: Backend) {
    let app = TestApp::new(backend).await;
    for i in 0..10 {
        app.create_store(&format!("s{i}")).await;
    }
    let (status, body) = app.call(Method::POST, "/shared-stores", Some(json!({ "name": "eleventh" }))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body,
        json!({ "error": "An organization may have at most 10 shared stores", "code": "shared_store_limit_reached", "limit": 10 })
    );
    let (_, body) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(body["stores"].as_array().unwrap().len(), 10);
}

async fn rename_store_changes_the_name_and_requires_one(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("old").await;
    let path = format!("/shared-stores/{store}");
    let (status, body) = app.call(Method::PATCH, &path, Some(json!({ "name": "  new " }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["store"]["name"], "new");
    assert_eq!(body["store"]["id"], store.as_str());
    let (status, body) = app.call(Method::PATCH, &path, Some(json!({ "name": "" }))).await;
    assert_eq!((status, body), (StatusCode::BAD_REQUEST, json!({ "error": "name is required" })));
    let missing = format!("/shared-stores/{}", uuid::Uuid::new_v4());
    let (status, body) = app.call(Method::PATCH, &missing, Some(json!({ "name": "x" }))).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "error": "Shared store not found" })));
    let (_, body) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(body["stores"][0]["name"], "new");
}

async fn delete_store_removes_its_entries_and_frees_its_slot(backend: Backend) {
    let app = TestApp::new(backend).await;
    let mut stores = Vec::new();
    for i in 0..10 {
        stores.push(app.create_store(&format!("s{i}")).await);
    }
    app.fill(&stores[0], "e", 30).await;
    let (status, body) = app.call(Method::DELETE, &format!("/shared-stores/{}", stores[0]), None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "success": true })));
    let (status, body) = app.call(Method::GET, &entries_path(&stores[0]), None).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "error": "Shared store not found" })));
    let (status, _) = app.call(Method::GET, &entry_path(&stores[0], "e1"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app.call(Method::DELETE, &format!("/shared-stores/{}", stores[0]), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    app.create_store("replacement").await;
}

async fn put_entry_creates_then_replace_keeps_created_at_and_slot(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    let path = entry_path(&store, "e1");
    let (status, created) =
        app.call(Method::PUT, &path, Some(json!({ "display_name": "  First  ", "metadata": { "a": 1 } }))).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let entry = &created["entry"];
    assert_eq!(entry["entry_id"], "e1");
    assert_eq!(entry["display_name"], "First");
    assert_eq!(entry["metadata"], json!({ "a": 1 }));
    assert_eq!(entry.as_object().unwrap().len(), 4, "exactly the four entry fields: {entry}");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (status, replaced) = app.call(Method::PUT, &path, Some(json!({ "display_name": "Second" }))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replaced["entry"]["created_at"], entry["created_at"]);
    assert_eq!(replaced["entry"]["display_name"], "Second");
    assert_eq!(replaced["entry"]["metadata"], json!({}), "omitted metadata on PUT is {{}}");
    let (_, fetched) = app.call(Method::GET, &path, None).await;
    assert_eq!(fetched, replaced);
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], 1, "a replace takes no new slot");
}

async fn put_entry_requires_entry_id_and_display_name(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    let required = json!({ "error": "entryId and display_name are required" });
    for body in
        [json!({}), json!({ "display_name": "" }), json!({ "display_name": "  " }), json!({ "display_name": null })]
    {
        let (status, response) = app.call(Method::PUT, &entry_path(&store, "e"), Some(body.clone())).await;
        assert_eq!((status, &response), (StatusCode::BAD_REQUEST, &required), "{body}");
    }
    let (status, response) = app.call(Method::PUT, &entry_path(&store, ""), Some(json!({ "display_name": "x" }))).await;
    assert_eq!((status, response), (StatusCode::BAD_REQUEST, required));
    assert!(list_entries(&app, &store).await.is_empty());
}

async fn metadata_is_an_object_of_at_most_256000_bytes(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    let path = entry_path(&store, "m");
    for bad in [json!([1, 2]), json!("text"), json!(12), json!(true)] {
        let (status, body) = app.call(Method::PUT, &path, Some(json!({ "display_name": "d", "metadata": bad }))).await;
        assert_eq!((status, body), (StatusCode::BAD_REQUEST, json!({ "detail": "metadata must be a JSON object" })));
    }
    // {"k":"…"} adds 8 bytes to the value; multi-byte characters count as their UTF-8 bytes.
    let fits = json!({ "k": "a".repeat(256_000 - 8) });
    let (status, body) = app.call(Method::PUT, &path, Some(json!({ "display_name": "d", "metadata": fits }))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["entry"]["metadata"], fits);
    let over = json!({ "k": "é".repeat(128_000) });
    let (status, body) = app.call(Method::PUT, &path, Some(json!({ "display_name": "d", "metadata": over }))).await;
    assert_eq!(
        (status, body),
        (StatusCode::PAYLOAD_TOO_LARGE, json!({ "detail": "metadata must be 256 KB or smaller" }))
    );
    let (status, body) = app.call(Method::PUT, &path, Some(json!({ "display_name": "d", "metadata": null }))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["entry"]["metadata"], json!({}));
    let nested = json!({ "list": [1, "two", null, { "x": [true] }], "n": 1.5, "unicode": "ünï" });
    let (_, body) = app.call(Method::PUT, &path, Some(json!({ "display_name": "d", "metadata": nested }))).await;
    assert_eq!(body["entry"]["metadata"], nested);
    let (_, fetched) = app.call(Method::GET, &path, None).await;
    assert_eq!(fetched["entry"]["metadata"], nested);
}

async fn entry_ids_with_reserved_characters_round_trip(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    let id = "folder/file name?x=1&y=#2%";
    let encoded = "folder%2Ffile%20name%3Fx%3D1%26y%3D%232%25";
    let (status, body) =
        app.call(Method::PUT, &entry_path(&store, encoded), Some(json!({ "display_name": "d" }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["entry"]["entry_id"], id);
    let (status, body) = app.call(Method::GET, &entry_path(&store, encoded), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["entry"]["entry_id"], id);
    assert_eq!(list_entries(&app, &store).await[0]["entry_id"], id);
    let (status, _) = app.call(Method::DELETE, &entry_path(&store, encoded), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(list_entries(&app, &store).await.is_empty());
}

async fn entries_are_listed_by_display_name_with_metadata(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    for (id, name) in [("1", "cherry"), ("2", "Apple"), ("3", "banana"), ("4", "apple")] {
        let body = json!({ "display_name": name, "metadata": { "id": id } });
        let (status, _) = app.call(Method::PUT, &entry_path(&store, id), Some(body)).await;
        assert_eq!(status, StatusCode::OK);
    }
    let entries = list_entries(&app, &store).await;
    let names: Vec<&str> = entries.iter().map(|e| e["display_name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Apple", "apple", "banana", "cherry"]);
    assert_eq!(entries[0]["metadata"], json!({ "id": "2" }));
}

async fn patch_entry_renames_and_follows_metadata_rules(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    let (_, created) = app
        .call(Method::PUT, &entry_path(&store, "old"), Some(json!({ "display_name": "d", "metadata": { "keep": 1 } })))
        .await;
    let (status, body) = app
        .call(Method::PATCH, &entry_path(&store, "old"), Some(json!({ "entry_id": "new", "display_name": " D2 " })))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["entry"]["entry_id"], "new");
    assert_eq!(body["entry"]["display_name"], "D2");
    assert_eq!(body["entry"]["metadata"], json!({ "keep": 1 }), "omitted metadata keeps the object");
    assert_eq!(body["entry"]["created_at"], created["entry"]["created_at"]);
    let (status, _) = app.call(Method::GET, &entry_path(&store, "old"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let patch = json!({ "entry_id": "new", "display_name": "D3", "metadata": { "other": true } });
    let (_, body) = app.call(Method::PATCH, &entry_path(&store, "new"), Some(patch)).await;
    assert_eq!(body["entry"]["metadata"], json!({ "other": true }));
    let patch = json!({ "entry_id": "new", "display_name": "D3", "metadata": null });
    let (_, body) = app.call(Method::PATCH, &entry_path(&store, "new"), Some(patch)).await;
    assert_eq!(body["entry"]["metadata"], json!({}), "null metadata replaces it with {{}}");
    let entries = list_entries(&app, &store).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["entry_id"], "new");
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], 1);
}

async fn patch_entry_errors_follow_the_contract(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    for id in ["a", "b"] {
        app.call(Method::PUT, &entry_path(&store, id), Some(json!({ "display_name": id }))).await;
    }
    let required = json!({ "error": "entry_id and display_name are required" });
    for body in
        [json!({ "display_name": "x" }), json!({ "entry_id": "", "display_name": "x" }), json!({ "entry_id": "z" })]
    {
        let (status, response) = app.call(Method::PATCH, &entry_path(&store, "a"), Some(body.clone())).await;
        assert_eq!((status, &response), (StatusCode::BAD_REQUEST, &required), "{body}");
    }
    let (status, body) =
        app.call(Method::PATCH, &entry_path(&store, "a"), Some(json!({ "entry_id": "b", "display_name": "x" }))).await;
    assert_eq!(
        (status, body),
        (StatusCode::CONFLICT, json!({ "error": "Entry ID already exists in this shared store" }))
    );
    let (status, body) =
        app.call(Method::PATCH, &entry_path(&store, "zz"), Some(json!({ "entry_id": "c", "display_name": "x" }))).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "error": "Shared store entry not found" })));
    let patch = json!({ "entry_id": "c", "display_name": "x", "metadata": [1] });
    let (status, body) = app.call(Method::PATCH, &entry_path(&store, "a"), Some(patch)).await;
    assert_eq!((status, body), (StatusCode::BAD_REQUEST, json!({ "detail": "metadata must be a JSON object" })));
    let names: Vec<Value> = list_entries(&app, &store).await.iter().map(|e| e["display_name"].clone()).collect();
    assert_eq!(names, [json!("a"), json!("b")], "refused patches changed nothing");
}

async fn delete_entry_frees_the_id_and_reports_missing_entries(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    app.call(Method::PUT, &entry_path(&store, "a"), Some(json!({ "display_name": "a" }))).await;
    let (status, body) = app.call(Method::DELETE, &entry_path(&store, "a"), None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "success": true })));
    let not_found = json!({ "error": "Shared store entry not found" });
    let (status, body) = app.call(Method::DELETE, &entry_path(&store, "a"), None).await;
    assert_eq!((status, &body), (StatusCode::NOT_FOUND, &not_found));
    let (status, body) = app.call(Method::GET, &entry_path(&store, "a"), None).await;
    assert_eq!((status, &body), (StatusCode::NOT_FOUND, &not_found));
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], 0);
}

async fn bulk_last_occurrence_wins_and_count_is_unique_ids(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    app.call(Method::PUT, &entry_path(&store, "x"), Some(json!({ "display_name": "before" }))).await;
    let (_, before) = app.call(Method::GET, &entry_path(&store, "x"), None).await;
    let entries = json!([
        { "entry_id": "x", "display_name": "first x", "metadata": { "v": 1 } },
        { "entry_id": "y", "display_name": " y " },
        { "entry_id": "x", "display_name": "last x", "metadata": { "v": 2 } },
    ]);
    let (status, body) =
        app.call(Method::POST, &format!("{}/bulk", entries_path(&store)), Some(json!({ "entries": entries }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["count"], 2);
    let written = body["entries"].as_array().unwrap();
    assert_eq!(written.len(), 2);
    let x = written.iter().find(|e| e["entry_id"] == "x").unwrap();
    assert_eq!(x["display_name"], "last x");
    assert_eq!(x["metadata"], json!({ "v": 2 }));
    assert_eq!(x["created_at"], before["entry"]["created_at"], "bulk replace keeps created_at");
    let listed = list_entries(&app, &store).await;
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1]["display_name"], "y");
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], 2);
}

async fn bulk_validation_errors_write_nothing(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    let path = format!("{}/bulk", entries_path(&store));
    let required = json!({ "error": "entries is required" });
    for body in [json!({}), json!({ "entries": [] }), json!({ "entries": "x" }), json!({ "entries": null })] {
        let (status, response) = app.call(Method::POST, &path, Some(body.clone())).await;
        assert_eq!((status, &response), (StatusCode::BAD_REQUEST, &required), "{body}");
    }
    let incomplete = json!({ "error": "entries must include entry_id and display_name" });
    for item in [
        json!({ "entry_id": "b" }),
        json!({ "display_name": "b" }),
        json!({ "entry_id": "", "display_name": "b" }),
        json!("b"),
    ] {
        let body = json!({ "entries": [{ "entry_id": "ok", "display_name": "ok" }, item] });
        let (status, response) = app.call(Method::POST, &path, Some(body)).await;
        assert_eq!((status, &response), (StatusCode::BAD_REQUEST, &incomplete), "{item}");
    }
    let body = json!({ "entries": [{ "entry_id": "ok", "display_name": "ok" }, { "entry_id": "b", "display_name": "b", "metadata": 1 }] });
    let (status, response) = app.call(Method::POST, &path, Some(body)).await;
    assert_eq!((status, response), (StatusCode::BAD_REQUEST, json!({ "detail": "metadata must be a JSON object" })));
    let too_many: Vec<Value> = (0..5001).map(|i| json!({ "entry_id": i.to_string(), "display_name": "d" })).collect();
    let (status, response) = app.call(Method::POST, &path, Some(json!({ "entries": too_many }))).await;
    assert_eq!(
        (status, response),
        (StatusCode::PAYLOAD_TOO_LARGE, json!({ "error": "A bulk request may contain at most 5000 entries" }))
    );
    assert!(list_entries(&app, &store).await.is_empty(), "failed bulk requests wrote nothing");
}

async fn bulk_over_the_entry_limit_writes_nothing(backend: Backend) {
    let _turn = alone_on_dynamodb(backend).await;
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    app.fill(&store, "a", 5000).await;
    app.fill(&store, "b", 4990).await;
    // 5 replacements and 11 new IDs: one new ID too many.
    let mut entries: Vec<Value> =
        (0..5).map(|i| json!({ "entry_id": format!("a{i}"), "display_name": "changed" })).collect();
    entries.extend((0..11).map(|i| json!({ "entry_id": format!("c{i}"), "display_name": "new" })));
    let path = format!("{}/bulk", entries_path(&store));
    let (status, body) = app.call(Method::POST, &path, Some(json!({ "entries": entries.clone() }))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body,
        json!({ "error": "A shared store may have at most 10000 entries", "code": "shared_store_entry_limit_reached", "limit": 10000 })
    );
    let (_, a0) = app.call(Method::GET, &entry_path(&store, "a0"), None).await;
    assert_eq!(a0["entry"]["display_name"], "a0", "the refused bulk replaced nothing");
    assert_eq!(list_entries(&app, &store).await.len(), 9990);
    // Exactly up to the limit is allowed.
    entries.pop();
    let (status, body) = app.call(Method::POST, &path, Some(json!({ "entries": entries }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["count"], 15);
    assert_eq!(list_entries(&app, &store).await.len(), 10_000);
}

async fn put_at_the_entry_limit_refuses_new_ids_but_replaces_existing(backend: Backend) {
    let _turn = alone_on_dynamodb(backend).await;
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    app.fill(&store, "a", 5000).await;
    app.fill(&store, "b", 5000).await;
    let (status, body) = app.call(Method::PUT, &entry_path(&store, "new"), Some(json!({ "display_name": "n" }))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["code"], "shared_store_entry_limit_reached");
    let (status, body) =
        app.call(Method::PUT, &entry_path(&store, "a1"), Some(json!({ "display_name": "again" }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], 10_000);
}

async fn another_organizations_store_is_not_found(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("mine").await;
    app.call(Method::PUT, &entry_path(&store, "e"), Some(json!({ "display_name": "d" }))).await;
    let (_, other) = app.add_organization(true).await;
    let not_found = json!({ "error": "Shared store not found" });
    let requests = [
        (Method::PATCH, format!("/shared-stores/{store}"), Some(json!({ "name": "stolen" }))),
        (Method::DELETE, format!("/shared-stores/{store}"), None),
        (Method::GET, entries_path(&store), None),
        (Method::GET, entry_path(&store, "e"), None),
        (Method::PUT, entry_path(&store, "e"), Some(json!({ "display_name": "stolen" }))),
        (Method::PATCH, entry_path(&store, "e"), Some(json!({ "entry_id": "f", "display_name": "stolen" }))),
        (Method::DELETE, entry_path(&store, "e"), None),
        (
            Method::POST,
            format!("{}/bulk", entries_path(&store)),
            Some(json!({ "entries": [{ "entry_id": "z", "display_name": "z" }] })),
        ),
    ];
    for (method, path, body) in requests {
        let (status, response) = app.call_as(&other, method.clone(), &path, body).await;
        assert_eq!((status, &response), (StatusCode::NOT_FOUND, &not_found), "{method} {path}");
    }
    let (_, listed) = app.call_as(&other, Method::GET, "/shared-stores", None).await;
    assert_eq!(listed["stores"], json!([]));
    let (_, mine) = app.call(Method::GET, &entry_path(&store, "e"), None).await;
    assert_eq!(mine["entry"]["display_name"], "d", "the other organization changed nothing");
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["name"], "mine");
}

async fn malformed_ids_and_bodies_are_client_errors(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    let not_found = json!({ "error": "Shared store not found" });
    for path in ["/shared-stores/not-a-uuid/entries", "/shared-stores/123/entries/e", "/shared-stores/%FF/entries"] {
        let (status, body) = app.call(Method::GET, path, None).await;
        assert_eq!(status.as_u16() / 100, 4, "{path}: {body}");
    }
    let (status, body) = app.call(Method::GET, "/shared-stores/not-a-uuid/entries", None).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, not_found));
    let authorization = format!("Bearer {}", app.key);
    for raw in ["{", "[1,2]", "null", "\"text\"", "{\"display_name\": }"] {
        let (status, body) = app
            .raw(Method::PUT, &entry_path(&store, "e"), &[("authorization", &authorization)], raw.as_bytes().to_vec())
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw}: {body}");
        assert!(body["error"].is_string(), "{raw}: {body}");
    }
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let raw = format!("{{\"display_name\": \"d\", \"metadata\": {{\"deep\": {deep}}}}}");
    let (status, _) =
        app.raw(Method::PUT, &entry_path(&store, "e"), &[("authorization", &authorization)], raw.into_bytes()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = app
        .raw(Method::PUT, &entry_path(&store, "e"), &[("authorization", &authorization)], vec![0xff, 0xfe, 0x00])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(list_entries(&app, &store).await.is_empty());
}

async fn stored_strings_are_bounded_alike_on_every_backend(backend: Backend) {
    let app = TestApp::new(backend).await;
    let store = app.create_store("s").await;
    let refused = |message: &str| (StatusCode::BAD_REQUEST, json!({ "error": message }));

    // A 200 KB display name with 250 KB of metadata is a 400 naming the field.
    let huge = json!({ "display_name": "d".repeat(200_000), "metadata": { "k": "x".repeat(250_000) } });
    let too_long_name = refused("display_name must be at most 1000 characters");
    assert_eq!(app.call(Method::PUT, &entry_path(&store, "e"), Some(huge.clone())).await, too_long_name);
    let mut item = huge.clone();
    item["entry_id"] = json!("e");
    let bulk_path = format!("{}/bulk", entries_path(&store));
    assert_eq!(app.call(Method::POST, &bulk_path, Some(json!({ "entries": [item] }))).await, too_long_name);

    // Entry IDs up to 1,024 bytes are kept exactly, also in DynamoDB keys.
    let longest = "é".repeat(512);
    let other = "ü".repeat(512);
    let (status, body) =
        app.call(Method::PUT, &entry_path(&store, &encode(&longest)), Some(json!({ "display_name": "d" }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = app.call(Method::GET, &entry_path(&store, &encode(&longest)), None).await;
    assert_eq!((status, body["entry"]["entry_id"].as_str()), (StatusCode::OK, Some(longest.as_str())));
    let rename = json!({ "entry_id": other, "display_name": "d" });
    let (status, body) = app.call(Method::PATCH, &entry_path(&store, &encode(&longest)), Some(rename)).await;
    assert_eq!((status, body["entry"]["entry_id"].as_str()), (StatusCode::OK, Some(other.as_str())));
    let bulk = json!({ "entries": [{ "entry_id": longest, "display_name": "b" }] });
    assert_eq!(app.call(Method::POST, &bulk_path, Some(bulk)).await.0, StatusCode::OK);

    // One byte more is refused everywhere, naming the field.
    let over = format!("{longest}x");
    let too_long_id = refused("entry_id must be at most 1024 bytes");
    let path = entry_path(&store, &encode(&over));
    assert_eq!(app.call(Method::PUT, &path, Some(json!({ "display_name": "d" }))).await, too_long_id);
    assert_eq!(app.call(Method::GET, &path, None).await, too_long_id);
    assert_eq!(app.call(Method::DELETE, &path, None).await, too_long_id);
    assert_eq!(
        app.call(Method::PATCH, &path, Some(json!({ "entry_id": "n", "display_name": "d" }))).await,
        too_long_id
    );
    let patch = json!({ "entry_id": over, "display_name": "d" });
    assert_eq!(app.call(Method::PATCH, &entry_path(&store, &encode(&other)), Some(patch)).await, too_long_id);
    let bulk = json!({ "entries": [{ "entry_id": over, "display_name": "d" }] });
    assert_eq!(app.call(Method::POST, &bulk_path, Some(bulk)).await, too_long_id);

    // Names and source types up to 1,000 characters (of any width).
    let widest = "𝄞".repeat(1000);
    let (status, body) =
        app.call(Method::POST, "/shared-stores", Some(json!({ "name": widest, "source_type": widest }))).await;
    assert_eq!((status, body["store"]["name"].as_str()), (StatusCode::OK, Some(widest.as_str())));
    let (status, _) = app
        .call(
            Method::PUT,
            &entry_path(&store, "wide"),
            Some(json!({ "display_name": widest, "metadata": { "k": "x".repeat(250_000) } })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "the largest entry fits an item");
    let over = "a".repeat(1001);
    let cases = [
        (Method::POST, "/shared-stores".to_owned(), json!({ "name": over }), "name must be at most 1000 characters"),
        (
            Method::PATCH,
            format!("/shared-stores/{store}"),
            json!({ "name": over }),
            "name must be at most 1000 characters",
        ),
        (
            Method::POST,
            "/shared-stores".to_owned(),
            json!({ "name": "n", "source_type": over }),
            "source_type must be at most 1000 characters",
        ),
    ];
    for (method, path, body, message) in cases {
        assert_eq!(app.call(method.clone(), &path, Some(body)).await, refused(message), "{method} {path}");
    }
    let entries = list_entries(&app, &store).await;
    let ids: Vec<&str> = entries.iter().map(|entry| entry["entry_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3, "nothing refused was written: {ids:?}");
}
