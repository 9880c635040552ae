//! Limits under concurrent writers, on both backends.

use std::sync::Arc;

use futures::future::join_all;
use http::{Method, StatusCode};
use serde_json::json;

use crate::conformance;
use crate::helpers::{alone_on_dynamodb, Backend, TestApp};

conformance!(
    forty_concurrent_new_entries_at_9990_give_exactly_ten,
    concurrent_store_creates_stop_at_ten,
    concurrent_bulk_upserts_never_exceed_the_entry_limit,
    concurrent_replaces_of_one_entry_take_one_slot,
    a_bulk_racing_puts_and_deletes_of_the_same_ids_keeps_the_counter_exact,
    deleting_a_store_while_entries_are_written_leaves_nothing_behind,
);

async fn forty_concurrent_new_entries_at_9990_give_exactly_ten(backend: Backend) {
    let _turn = alone_on_dynamodb(backend).await;
    let app = Arc::new(TestApp::new(backend).await);
    let store = app.create_store("s").await;
    app.fill(&store, "a", 5000).await;
    app.fill(&store, "b", 4990).await;
    let puts = (0..40).map(|i| {
        let app = app.clone();
        let path = format!("/shared-stores/{store}/entries/new-{i}");
        tokio::spawn(async move { app.call(Method::PUT, &path, Some(json!({ "display_name": "n" }))).await })
    });
    let results: Vec<_> = join_all(puts).await.into_iter().map(|joined| joined.expect("task")).collect();
    let ok = results.iter().filter(|(status, _)| *status == StatusCode::OK).count();
    let conflicts = results
        .iter()
        .filter(|(status, body)| *status == StatusCode::CONFLICT && body["code"] == "shared_store_entry_limit_reached")
        .count();
    assert_eq!((ok, conflicts), (10, 30), "{results:?}");
    let (_, listed) = app.call(Method::GET, &format!("/shared-stores/{store}/entries"), None).await;
    assert_eq!(listed["entries"].as_array().unwrap().len(), 10_000);
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], 10_000);
}

async fn concurrent_store_creates_stop_at_ten(backend: Backend) {
    let app = Arc::new(TestApp::new(backend).await);
    let creates = (0..25).map(|i| {
        let app = app.clone();
        tokio::spawn(
            async move { app.call(Method::POST, "/shared-stores", Some(json!({ "name": format!("s{i}") }))).await },
        )
    });
    let statuses: Vec<StatusCode> = join_all(creates).await.into_iter().map(|joined| joined.expect("task").0).collect();
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::OK).count(), 10, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::CONFLICT).count(), 15, "{statuses:?}");
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"].as_array().unwrap().len(), 10);
}

async fn concurrent_bulk_upserts_never_exceed_the_entry_limit(backend: Backend) {
    let _turn = alone_on_dynamodb(backend).await;
    let app = Arc::new(TestApp::new(backend).await);
    let store = app.create_store("s").await;
    app.fill(&store, "base", 9970).await;
    // Six requests of 10 new IDs each compete for 30 free slots: three fit. What races is
    // the reservation of slots, whatever a bulk's size; small bulks keep each request,
    // its wait for the others' lease included, far inside its deadline on a slow machine.
    let bulks = (0..6).map(|request| {
        let app = app.clone();
        let path = format!("/shared-stores/{store}/entries/bulk");
        let entries: Vec<_> =
            (0..10).map(|i| json!({ "entry_id": format!("r{request}-{i}"), "display_name": "d" })).collect();
        tokio::spawn(async move { app.call(Method::POST, &path, Some(json!({ "entries": entries }))).await })
    });
    let statuses: Vec<StatusCode> = join_all(bulks).await.into_iter().map(|joined| joined.expect("task").0).collect();
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(ok, 3, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::CONFLICT).count(), 3, "{statuses:?}");
    let (_, listed) = app.call(Method::GET, &format!("/shared-stores/{store}/entries"), None).await;
    assert_eq!(listed["entries"].as_array().unwrap().len(), 9970 + 10 * ok);
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], 9970 + 10 * ok, "the counter matches the entries");
}

async fn concurrent_replaces_of_one_entry_take_one_slot(backend: Backend) {
    let app = Arc::new(TestApp::new(backend).await);
    let store = app.create_store("s").await;
    let puts = (0..20).map(|i| {
        let app = app.clone();
        let path = format!("/shared-stores/{store}/entries/same");
        tokio::spawn(
            async move { app.call(Method::PUT, &path, Some(json!({ "display_name": format!("v{i}") }))).await },
        )
    });
    let results: Vec<_> = join_all(puts).await.into_iter().map(|joined| joined.expect("task")).collect();
    assert!(results.iter().all(|(status, _)| *status == StatusCode::OK), "{results:?}");
    let created: std::collections::HashSet<_> =
        results.iter().map(|(_, body)| body["entry"]["created_at"].clone()).collect();
    assert_eq!(created.len(), 1, "every write reports the first creation time");
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], 1);
}

async fn a_bulk_racing_puts_and_deletes_of_the_same_ids_keeps_the_counter_exact(backend: Backend) {
    let _turn = alone_on_dynamodb(backend).await;
    let app = Arc::new(TestApp::new(backend).await);
    let store = app.create_store("s").await;
    app.fill(&store, "x", 100).await;
    // The bulk replaces x50..x99 and creates x100..x199 while single requests delete
    // some of the IDs it replaces and create some of the IDs it creates. (Sized so that
    // the bulk, and the singles' wait for its lease, end far inside their requests'
    // deadlines on a slow machine: the race is in its reads, its reservation and its
    // writes, whatever their number.)
    let bulk = {
        let app = app.clone();
        let path = format!("/shared-stores/{store}/entries/bulk");
        let entries: Vec<_> =
            (50..200).map(|i| json!({ "entry_id": format!("x{i}"), "display_name": "bulk" })).collect();
        tokio::spawn(async move { app.call(Method::POST, &path, Some(json!({ "entries": entries }))).await })
    };
    let singles = (0..30).map(|i| {
        let app = app.clone();
        let (method, id, body) = match i % 3 {
            0 => (Method::DELETE, format!("x{}", 50 + i), None),
            1 => (Method::PUT, format!("x{}", 170 + i), Some(json!({ "display_name": "single" }))),
            _ => (Method::PUT, format!("y{i}"), Some(json!({ "display_name": "single" }))),
        };
        let path = format!("/shared-stores/{store}/entries/{id}");
        // Spread over the bulk's whole run: its reads, its reservation and its writes.
        let delay = std::time::Duration::from_millis(10 * i as u64);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            app.call(method, &path, body).await
        })
    });
    let singles: Vec<_> = join_all(singles).await.into_iter().map(|joined| joined.expect("task")).collect();
    let (status, body) = bulk.await.expect("task");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(singles.iter().all(|(status, _)| status.is_success()), "{singles:?}");
    let (_, listed) = app.call(Method::GET, &format!("/shared-stores/{store}/entries"), None).await;
    let listed = listed["entries"].as_array().unwrap().len();
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["entry_count"], listed, "the counter matches the entries");
    // 200 IDs from fill and bulk and 10 y-IDs, less the 10 deletes that ran after the
    // bulk (those before it were undone by it).
    assert!((200..=210).contains(&listed), "{listed}");
}

async fn deleting_a_store_while_entries_are_written_leaves_nothing_behind(backend: Backend) {
    let _turn = alone_on_dynamodb(backend).await;
    let app = Arc::new(TestApp::new(backend).await);
    let store = app.create_store("s").await;
    app.fill(&store, "x", 1500).await;
    let delete = {
        let app = app.clone();
        let path = format!("/shared-stores/{store}");
        tokio::spawn(async move { app.call(Method::DELETE, &path, None).await })
    };
    let puts = (0..30).map(|i| {
        let app = app.clone();
        let path = format!("/shared-stores/{store}/entries/late-{i}");
        let delay = std::time::Duration::from_millis(10 * i as u64);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            app.call(Method::PUT, &path, Some(json!({ "display_name": "late" }))).await
        })
    });
    let puts: Vec<_> = join_all(puts).await.into_iter().map(|joined| joined.expect("task")).collect();
    let (status, body) = delete.await.expect("task");
    assert_eq!(status, StatusCode::OK, "{body}");
    for (status, body) in &puts {
        assert!(
            *status == StatusCode::OK
                || (*status == StatusCode::NOT_FOUND && body["error"] == "Shared store not found"),
            "{status} {body}"
        );
    }
    for id in ["x0", "x1499", "late-0", "late-29"] {
        let (status, body) = app.call(Method::GET, &format!("/shared-stores/{store}/entries/{id}"), None).await;
        assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "error": "Shared store not found" })), "{id}");
    }
    let (_, stores) = app.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"], json!([]));
}
