//! `Idempotency-Key` on every POST that creates something: a repeat within 24 hours gets
//! the first answer and creates nothing, another request with the key is a 422, a
//! refused request does not spend its key, concurrent repeats make one thing, and keys
//! belong to one organization.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::api::ROUTES;
use shared::domain::idempotency::{self, Begun, IdempotencyRepo, KeptAnswer, KeyRecord, KeyState};
use shared::domain::ids::OrganizationId;
use shared::domain::time::{SystemClock, Timestamp};

use crate::conformance;
use crate::helpers::{Backend, TestApp};
use crate::runs::{chain, Harness, CHAIN_EDGES};

conformance!(
    ten_concurrent_identical_starts_with_one_key_make_one_run,
    every_creating_post_answers_a_repeat_with_its_first_answer,
    a_key_used_with_another_request_is_refused_and_keys_belong_to_one_organization,
    an_expired_key_or_a_lapsed_claim_is_claimed_again,
    a_claim_whose_write_was_done_but_whose_answer_was_lost_is_the_requests_own,
);

/// A POST with an `Idempotency-Key`, as `test`'s organization.
pub(crate) async fn post(test: &TestApp, key: &str, path: &str, body: Option<&Value>) -> (StatusCode, Value) {
    let authorization = format!("Bearer {}", test.key);
    let bytes = body.map(|body| body.to_string().into_bytes()).unwrap_or_default();
    let headers =
        [("authorization", authorization.as_str()), ("content-type", "application/json"), ("idempotency-key", key)];
    test.raw(Method::POST, path, &headers, bytes).await
}

fn new_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn ten_concurrent_identical_starts_with_one_key_make_one_run(backend: Backend) {
    // No workers: the run stays as it was created.
    let harness = Harness::with_workers(backend, 0).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let path = format!("/agent/{agent}/run");
    let body = json!({ "video_ids": [video] });
    let key = new_key();
    let answers = join_all((0..10).map(|_| post(&harness.test, &key, &path, Some(&body)))).await;
    let first = &answers[0];
    assert_eq!(first.0, StatusCode::OK, "{}", first.1);
    assert!(answers.iter().all(|answer| answer == first), "every repeat gets the first answer: {answers:?}");
    let (status, runs) = harness.test.call(Method::GET, &format!("/agent/{agent}/runs"), None).await;
    assert_eq!(status, StatusCode::OK, "{runs}");
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    assert_eq!(runs[0]["run_id"], first.1["run_id"]);
    // Without the key, the same body starts another run.
    harness.start(&agent, body).await;
    let (_, runs) = harness.test.call(Method::GET, &format!("/agent/{agent}/runs"), None).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2);
}

/// Which POSTs honour the key: those that create something. The others are safe to
/// repeat as they are (finalize, cancel, resume, delete, redeliver) or upsert by the
/// caller's IDs (bulk entries).
#[test]
fn exactly_the_creating_posts_honour_the_key() {
    let honouring: Vec<&str> = ROUTES.iter().filter(|route| route.idempotent).map(|route| route.function).collect();
    assert_eq!(
        honouring,
        [
            "create-shared-store",
            "create-agent",
            "update-agent",
            "duplicate-agent",
            "get-upload-url",
            "create-asset-connection",
            "create-asset-item",
            "create-avatar-profile",
            "create-social-connection",
            "create-social-post",
            "upgrade-plan",
            "start-run",
            "fire-trigger",
            "rotate-webhook-secret"
        ]
    );
    let repeatable = [
        "bulk-upsert-shared-store-entries",
        "delete-agent",
        "finalize-upload",
        "update-credit-settings",
        "stripe-webhook",
        "cancel-run",
        "resume-run",
        "redeliver-run-webhook",
        // A repeat finds the post no longer pending: a 409 that changes nothing.
        "approve-social-post",
        "reject-social-post",
    ];
    for route in ROUTES.iter().filter(|route| route.method == Method::POST) {
        assert!(
            route.idempotent != repeatable.contains(&route.function),
            "{}: a POST either creates (and honours Idempotency-Key) or is listed as repeatable",
            route.function
        );
    }
}

async fn every_creating_post_answers_a_repeat_with_its_first_answer(backend: Backend) {
    let test = TestApp::new(backend).await;
    let (status, created) = test.call(Method::POST, "/agent/create", Some(json!({ "name": "base" }))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let speed = shared::domain::nodes::SPEED.to_string();
    let requests: Vec<(&str, String, Option<Value>, &str)> = vec![
        ("create-shared-store", "/shared-stores".into(), Some(json!({ "name": "once" })), "/shared-stores"),
        ("create-agent", "/agent/create".into(), Some(json!({ "name": "once" })), "/agents"),
        (
            "update-agent",
            format!("/agent/{agent}/update"),
            Some(json!({ "operations": [{ "op": "create_node", "node_type_id": speed }] })),
            "",
        ),
        ("duplicate-agent", format!("/agent/{agent}/duplicate"), None, "/agents"),
        ("get-upload-url", "/uploads/image/get_upload_url".into(), None, ""),
        ("rotate-webhook-secret", "/webhooks/secret".into(), None, ""),
        // A workspace has one connection: the repeat replays, another key is a 409.
        ("create-asset-connection", "/asset_connections".into(), Some(json!({ "name": "dam" })), ""),
        // A social account; a repeat answers the first connection (create-social-post's
        // repeats are checked in social.rs, where its media are served).
        (
            "create-social-connection",
            "/social/connections".into(),
            Some(
                json!({ "platform": "x", "account_name": "a", "account_username": "a", "profile_url": "https://x.test/a" }),
            ),
            "",
        ),
        // From free: one checkout per key.
        ("upgrade-plan", "/plan/upgrade".into(), Some(json!({ "plan_id": "creator" })), ""),
    ];
    for (function, path, body, _) in &requests {
        let key = new_key();
        let first = post(&test, &key, path, body.as_ref()).await;
        assert!(first.0.is_success(), "{function}: {first:?}");
        let again = post(&test, &key, path, body.as_ref()).await;
        assert_eq!(again, first, "{function}: a repeat gets the first answer");
        let other = post(&test, &new_key(), path, body.as_ref()).await;
        assert_ne!(other.1, first.1, "{function}: another key creates again");
    }
    // What the repeats did not create: one store and two agents (plus `base`) from three
    // requests each, and one node from the three updates with two keys.
    let (_, stores) = test.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"].as_array().map(Vec::len), Some(2), "{stores}");
    let (_, agents) = test.call(Method::GET, "/agents", None).await;
    // base, 2 creates, 2 duplicates.
    assert_eq!(agents["agents"].as_array().map(Vec::len), Some(5), "{agents}");
    let (_, graph) = test.call(Method::GET, &format!("/agent/{agent}"), None).await;
    assert_eq!(graph["agent_nodes"].as_array().map(Vec::len), Some(2), "{graph}");
    let (_, connections) = test.call(Method::GET, "/social/connections", None).await;
    assert_eq!(connections["social_connections"].as_array().map(Vec::len), Some(2), "{connections}");
}

async fn a_key_used_with_another_request_is_refused_and_keys_belong_to_one_organization(backend: Backend) {
    let test = TestApp::new(backend).await;
    let key = new_key();
    let (status, first) = post(&test, &key, "/agent/create", Some(&json!({ "name": "a" }))).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, body) = post(&test, &key, "/agent/create", Some(&json!({ "name": "b" }))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body.as_object().unwrap().keys().collect::<Vec<_>>(), ["detail"], "{body}");
    assert!(body["detail"].as_str().unwrap().contains("different request"), "{body}");
    let (status, body) = post(&test, &key, "/shared-stores", Some(&json!({ "name": "a" }))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "another path is another request: {body}");

    // Another organization's use of the same key is its own.
    let (organization, other_key) = test.add_organization(true).await;
    let other = TestApp { app: test.app.clone(), key: other_key, organization };
    let (status, theirs) = post(&other, &key, "/agent/create", Some(&json!({ "name": "b" }))).await;
    assert_eq!(status, StatusCode::CREATED, "{theirs}");
    assert_ne!(theirs["agent_id"], first["agent_id"]);

    // A refusal does not spend the key: the corrected request runs.
    let refused_key = new_key();
    let (status, body) = post(&test, &refused_key, "/agent/create", Some(&json!({ "name": "" }))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = post(&test, &refused_key, "/agent/create", Some(&json!({ "name": "fixed" }))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // A malformed key is a 400 `{detail}`; without credentials the key changes nothing.
    for bad in ["", &"k".repeat(256), "naïve"] {
        let authorization = format!("Bearer {}", test.key);
        let headers = [("authorization", authorization.as_str()), ("idempotency-key", bad)];
        let (status, body) = test.raw(Method::POST, "/agent/create", &headers, Vec::new()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad:?}: {body}");
        assert!(body["detail"].as_str().unwrap().contains("Idempotency-Key"), "{body}");
    }
    let (status, _) = test.raw(Method::POST, "/agent/create", &[("idempotency-key", "k")], Vec::new()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

async fn an_expired_key_or_a_lapsed_claim_is_claimed_again(backend: Backend) {
    let test = TestApp::new(backend).await;
    let repo = test.app.idempotency().clone();
    let now = Timestamp::now();
    let claim = |token: &str, at: Timestamp| KeyRecord {
        organization: test.organization,
        key: "k".into(),
        fingerprint: "f".into(),
        state: KeyState::Claimed { token: token.into(), lease_until: at.after(Duration::from_secs(60)) },
        expires_at: at.after(Duration::from_secs(24 * 60 * 60)),
    };
    let first = claim("first", now);
    assert_eq!(repo.claim_key(&first, now).await.unwrap(), None);
    let holder = repo.claim_key(&claim("second", now), now).await.unwrap().expect("held by the first");
    assert_eq!(holder.state, first.state);
    // 61 s later the first claim has lapsed (its process died): another takes the key.
    let later = now.after(Duration::from_secs(61));
    let second = claim("second", later);
    assert_eq!(repo.claim_key(&second, later).await.unwrap(), None);
    // The first one's late answer changes nothing; the second one's is kept.
    let answer = KeptAnswer { status: 201, body: "{\"n\":1}".into() };
    repo.settle_key(&first, Some(&KeptAnswer { status: 201, body: "late".into() })).await.unwrap();
    repo.settle_key(&second, Some(&answer)).await.unwrap();
    let kept = repo.claim_key(&claim("third", later), later).await.unwrap().expect("answered");
    assert_eq!(kept.state, KeyState::Answered(answer));
    // 24 hours after the claim the answer is forgotten.
    let next_day = later.after(Duration::from_secs(24 * 60 * 60));
    assert_eq!(repo.claim_key(&claim("fourth", next_day), next_day).await.unwrap(), None);
    // A released claim frees the key at once.
    let fourth = claim("fourth", next_day);
    repo.settle_key(&fourth, None).await.unwrap();
    assert_eq!(repo.claim_key(&claim("fifth", next_day), next_day).await.unwrap(), None);
}

/// The store as DynamoDB can be: a claim is written, its answer is lost (a 500 after the
/// write), and the SDK's retry of the same write finds the key held, by this claim.
struct AnswerLostAfterTheWrite(Arc<dyn IdempotencyRepo>);

#[async_trait]
impl IdempotencyRepo for AnswerLostAfterTheWrite {
    async fn claim_key(&self, record: &KeyRecord, now: Timestamp) -> anyhow::Result<Option<KeyRecord>> {
        match self.0.claim_key(record, now).await? {
            None => self.0.claim_key(record, now).await,
            held => Ok(held),
        }
    }
    async fn get_key(&self, organization: OrganizationId, key: &str) -> anyhow::Result<Option<KeyRecord>> {
        self.0.get_key(organization, key).await
    }
    async fn settle_key(&self, claim: &KeyRecord, answer: Option<&KeptAnswer>) -> anyhow::Result<()> {
        self.0.settle_key(claim, answer).await
    }
    async fn renew_key(&self, claim: &KeyRecord, lease_until: Timestamp) -> anyhow::Result<bool> {
        self.0.renew_key(claim, lease_until).await
    }
}

async fn a_claim_whose_write_was_done_but_whose_answer_was_lost_is_the_requests_own(backend: Backend) {
    let test = TestApp::new(backend).await;
    let repo = AnswerLostAfterTheWrite(test.app.idempotency().clone());
    let lease = Duration::from_secs(60);
    let begin = || idempotency::begin(&repo, &SystemClock, lease, test.organization, "lost", "f");
    // Not "still running" (a 409 after waiting 10 s): the key is this request's.
    let Begun::Run(claim) = begin().await.unwrap() else { panic!("the request's own claim held its key") };
    let answer = KeptAnswer { status: 201, body: "{\"n\":1}".into() };
    idempotency::finish(&repo, &claim, answer.clone()).await.unwrap();
    assert_eq!(begin().await.unwrap(), Begun::Replay(answer));
    // Another request's claim is still another's: a repeat waits for it, then is told so.
    let other = KeyRecord {
        organization: test.organization,
        key: "held".into(),
        fingerprint: "f".into(),
        state: KeyState::Claimed { token: "other".into(), lease_until: Timestamp::now().after(lease) },
        expires_at: Timestamp::now().after(Duration::from_secs(24 * 60 * 60)),
    };
    assert_eq!(repo.0.claim_key(&other, Timestamp::now()).await.unwrap(), None);
    let started = std::time::Instant::now();
    let repeat = idempotency::begin(&repo, &SystemClock, lease, test.organization, "held", "f").await.unwrap();
    assert_eq!(repeat, Begun::StillRunning);
    assert!(started.elapsed() >= idempotency::MAX_WAIT / 2, "it waited for the holder first");
}
