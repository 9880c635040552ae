//! The DynamoDB bulk protocol when things fail: a bulk killed after reserving slots,
//! writes that fail part-way, journals that cannot be deleted, answers lost after their
//! update was applied. After each, the store's count equals its entries.

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::adapters::dynamodb::DynamoDb;
use shared::app::App;

use crate::faults::{self, kill_a_bulk_after_it_reserved};
use crate::helpers::{alone_on_dynamodb, dynamodb, temp_media, Backend, TestApp};

/// A fresh organization on DynamoDB Local, and a plain client of the same table.
async fn on_dynamodb() -> (TestApp, DynamoDb) {
    let plain = dynamodb().await;
    let test = TestApp::seeded(App::dynamodb(plain.clone(), temp_media())).await;
    (test, plain)
}

/// Asserts that the store's count equals its entries, and returns it.
async fn exact_count(test: &TestApp, store: &str) -> usize {
    let (_, stores) = test.call(Method::GET, "/shared-stores", None).await;
    let counted = stores["stores"]
        .as_array()
        .expect("stores")
        .iter()
        .find(|listed| listed["id"] == store)
        .expect("the store is listed")["entry_count"]
        .as_u64()
        .expect("a count") as usize;
    let (status, entries) = test.call(Method::GET, &format!("/shared-stores/{store}/entries"), None).await;
    assert_eq!(status, StatusCode::OK, "{entries}");
    let listed = entries["entries"].as_array().expect("entries").len();
    assert_eq!(counted, listed, "the store counts {counted} entries and holds {listed}");
    listed
}

fn bulk(prefix: &str, count: usize) -> Value {
    json!({ "entries": (0..count).map(|i| json!({ "entry_id": format!("{prefix}-{i}"), "display_name": "d" })).collect::<Vec<_>>() })
}

async fn post_bulk(test: &TestApp, store: &str, body: Value) -> (StatusCode, Value) {
    test.call(Method::POST, &format!("/shared-stores/{store}/entries/bulk"), Some(body)).await
}

fn lost(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("lost-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_killed_after_reserving_slots_is_repaired_by_the_next_bulk() {
    let _turn = alone_on_dynamodb(Backend::DynamoDb).await;
    let (test, plain) = on_dynamodb().await;
    let store = test.create_store("s").await;
    test.fill(&store, "kept", 5).await;
    kill_a_bulk_after_it_reserved(&test, &plain, &store, &lost(7)).await;
    let (_, stores) = test.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(
        stores["stores"][0]["entry_count"], 12,
        "the killed bulk left 7 slots reserved for entries that never came"
    );

    let next = json!({ "entries": [{ "entry_id": "next-0", "display_name": "n" }, { "entry_id": "kept0", "display_name": "n" }] });
    let (status, body) = post_bulk(&test, &store, next).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(exact_count(&test, &store).await, 6, "the next bulk gave the slots back");
    // The store is writable up to its limit again.
    test.fill(&store, "more", 9_994).await;
    let path = format!("/shared-stores/{store}/entries/one-too-many");
    assert_eq!(test.call(Method::PUT, &path, Some(json!({ "display_name": "x" }))).await.0, StatusCode::CONFLICT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_left_by_a_killed_bulk_can_be_deleted_and_frees_its_slot() {
    let (test, plain) = on_dynamodb().await;
    let store = test.create_store("s").await;
    kill_a_bulk_after_it_reserved(&test, &plain, &store, &lost(4)).await;
    let deleted = test.call(Method::DELETE, &format!("/shared-stores/{store}"), None).await;
    assert_eq!(deleted, (StatusCode::OK, json!({ "success": true })));
    for i in 0..10 {
        assert_eq!(
            test.call(Method::POST, "/shared-stores", Some(json!({ "name": format!("s{i}") }))).await.0,
            StatusCode::OK
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_writes_to_a_store_a_killed_bulk_left_repair_it_first() {
    let (test, plain) = on_dynamodb().await;
    let store = test.create_store("s").await;
    test.fill(&store, "kept", 3).await;
    kill_a_bulk_after_it_reserved(&test, &plain, &store, &lost(4)).await;
    // A PUT of one of the dead bulk's own IDs, before any bulk comes along.
    let put = json!({ "display_name": "came after all" });
    assert_eq!(
        test.call(Method::PUT, &format!("/shared-stores/{store}/entries/lost-0"), Some(put)).await.0,
        StatusCode::OK
    );
    assert_eq!(exact_count(&test, &store).await, 4);
    let rename = json!({ "entry_id": "lost-1", "display_name": "renamed" });
    assert_eq!(
        test.call(Method::PATCH, &format!("/shared-stores/{store}/entries/kept0"), Some(rename)).await.0,
        StatusCode::OK
    );
    assert_eq!(
        test.call(Method::DELETE, &format!("/shared-stores/{store}/entries/lost-0"), None).await.0,
        StatusCode::OK
    );
    assert_eq!(exact_count(&test, &store).await, 3);
    assert_eq!(post_bulk(&test, &store, bulk("lost", 4)).await.0, StatusCode::OK);
    assert_eq!(exact_count(&test, &store).await, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_whose_last_writes_fail_gives_back_exactly_the_slots_of_entries_not_written() {
    let (test, plain) = on_dynamodb().await;
    let store = test.create_store("s").await;
    test.fill(&store, "kept", 1).await;
    for round in 0..3 {
        let fault = faults::throttled_entry_writes(&[&format!("r{round}-199")]);
        let refused = fault.refused();
        let failing = test.through(plain.with_interceptor(fault));
        let (status, body) = post_bulk(&failing, &store, bulk(&format!("r{round}"), 200)).await;
        assert_eq!(
            (status, body),
            (StatusCode::INTERNAL_SERVER_ERROR, json!({ "error": "Failed to upsert shared store entries" }))
        );
        assert!(refused.load(Ordering::SeqCst) > 0, "the writes were refused");
        let count = exact_count(&test, &store).await;
        assert!(count < 1 + 200 * (round + 1), "some writes failed: {count}");
    }
    assert_eq!(post_bulk(&test, &store, bulk("after", 10)).await.0, StatusCode::OK);
    exact_count(&test, &store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_whose_journal_cannot_be_deleted_still_settles_its_reservation() {
    let (test, plain) = on_dynamodb().await;
    let store = test.create_store("s").await;
    // It succeeds, but its journal stays behind.
    let fault = faults::failing_batch_deletes();
    let refused = fault.refused();
    let no_deletes = test.through(plain.with_interceptor(fault));
    assert_eq!(post_bulk(&no_deletes, &store, bulk("ok", 3)).await.0, StatusCode::OK);
    assert!(refused.load(Ordering::SeqCst) > 0, "the journal's deletion failed");
    for i in 0..3 {
        assert_eq!(
            test.call(Method::DELETE, &format!("/shared-stores/{store}/entries/ok-{i}"), None).await.0,
            StatusCode::OK
        );
    }
    assert_eq!(exact_count(&test, &store).await, 0);
    assert_eq!(post_bulk(&test, &store, bulk("next", 2)).await.0, StatusCode::OK);
    assert_eq!(exact_count(&test, &store).await, 2);

    // It fails part-way, gives its slots back, and its journal stays behind too.
    let failing = test.through(
        plain
            .with_interceptor(faults::failing_batch_deletes())
            .with_interceptor(faults::throttled_entry_writes(&["half-30", "half-31", "half-32"])),
    );
    assert_eq!(post_bulk(&failing, &store, bulk("half", 40)).await.0, StatusCode::INTERNAL_SERVER_ERROR);
    let after_failure = exact_count(&test, &store).await;
    assert_eq!(post_bulk(&test, &store, bulk("last", 5)).await.0, StatusCode::OK);
    assert_eq!(exact_count(&test, &store).await, after_failure + 5, "no slot was given back twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_whose_answers_are_lost_and_retried_are_applied_once() {
    let (test, plain) = on_dynamodb().await;
    let store = test.create_store("s").await;
    test.fill(&store, "kept", 10).await;
    // The reservation is applied, its answer lost, and the SDK sends it again.
    let lost_reservation = faults::lost_update_answers("reserved_by = :lease").times(1);
    let refused = lost_reservation.refused();
    let retried = test.through(plain.with_interceptor(lost_reservation));
    assert_eq!(post_bulk(&retried, &store, bulk("new", 5)).await.0, StatusCode::OK);
    assert_eq!(refused.load(Ordering::SeqCst), 1, "one answer was lost");
    assert_eq!(exact_count(&test, &store).await, 15);

    // Slots are given back after failed writes, and that answer is lost once too.
    let lost_give_back = faults::lost_update_answers("entry_count - :count REMOVE reserved_by").times(1);
    let refused = lost_give_back.refused();
    let retried = test
        .through(plain.with_interceptor(lost_give_back).with_interceptor(faults::throttled_entry_writes(&["part-7"])));
    assert_eq!(post_bulk(&retried, &store, bulk("part", 8)).await.0, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(refused.load(Ordering::SeqCst), 1, "one answer was lost");
    exact_count(&test, &store).await;

    // A lease taken, its answer lost: the retry finds its own lease and goes on.
    let lost_lease = faults::lost_update_answers("SET lease_id = :lease").times(1);
    let refused = lost_lease.refused();
    let retried = test.through(plain.with_interceptor(lost_lease));
    let started = std::time::Instant::now();
    assert_eq!(post_bulk(&retried, &store, bulk("leased", 2)).await.0, StatusCode::OK);
    assert_eq!(refused.load(Ordering::SeqCst), 1, "one answer was lost");
    assert!(started.elapsed() < Duration::from_secs(5), "it did not wait for its own lease");
    exact_count(&test, &store).await;
}
