//! Run webhooks against a real receiver on a local port: events of real runs in order
//! with both signature schemes (checked by the `standardwebhooks` package from PyPI),
//! retries with one `webhook-id`, failure and redelivery, a receiver that hangs, cancel
//! and resume cycles, the SSRF guard at run start, the secret and delivery-log endpoints.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::config::DEFAULT_TASK_BUDGET;
use shared::domain::identity::OrganizationId;
use shared::domain::runs::RunId;
use shared::domain::time::Timestamp;
use shared::domain::webhooks::ports::WebhookRepo;
use shared::domain::webhooks::sender::{Sent, WebhookSender};
use shared::domain::webhooks::{DeliveryId, WebhookDelivery, WebhookMessage, WebhookSchedule, WebhookSecret};

use crate::conformance;
use crate::helpers::Backend;
use crate::runs::{chain, Harness, CHAIN_EDGES};

conformance!(
    a_receiver_gets_the_events_of_a_run_in_order_with_both_signatures,
    a_receiver_that_fails_three_times_gets_each_event_on_the_fourth_attempt_with_one_id,
    a_delivery_whose_retries_all_fail_is_failed_and_redeliver_sends_it_again,
    cancel_and_resume_send_their_own_started_and_finished_events,
    the_secret_and_the_delivery_log_belong_to_one_organization,
    a_sender_that_finds_its_delivery_not_due_under_its_claim_lets_the_claim_go,
);

/// How the receiver answers.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    /// 200 to everything.
    Accept,
    /// 500 to the first `n` requests of each `webhook-id`, then 200.
    FailFirst(usize),
    /// 500 to everything.
    Refuse,
    /// Reads the request and never answers.
    Hang,
}

/// One request the receiver got.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) raw: Vec<u8>,
    pub(crate) body: Value,
    pub(crate) at: std::time::SystemTime,
    pub(crate) answered: Option<u16>,
}

/// A webhook receiver on a local port that records every request.
#[derive(Clone)]
pub(crate) struct Receiver {
    pub(crate) url: String,
    received: Arc<Mutex<Vec<Received>>>,
    mode: Arc<Mutex<Mode>>,
}

impl Receiver {
    pub(crate) async fn start(mode: Mode) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Self {
            url: format!("http://{}/hooks", listener.local_addr().unwrap()),
            received: Arc::default(),
            mode: Arc::new(Mutex::new(mode)),
        };
        let shared = receiver.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let mut data = Vec::new();
                    let mut buffer = [0u8; 8192];
                    let (head_end, length) = loop {
                        let Ok(read) = socket.read(&mut buffer).await else { return };
                        if read == 0 {
                            return;
                        }
                        data.extend_from_slice(&buffer[..read]);
                        if let Some(end) = data.windows(4).position(|window| window == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
                            let length = head
                                .lines()
                                .find_map(|line| line.strip_prefix("content-length:"))
                                .and_then(|value| value.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            break (end + 4, length);
                        }
                    };
                    while data.len() < head_end + length {
                        let Ok(read) = socket.read(&mut buffer).await else { return };
                        if read == 0 {
                            break;
                        }
                        data.extend_from_slice(&buffer[..read]);
                    }
                    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
                    let headers: BTreeMap<String, String> = head
                        .lines()
                        .skip(1)
                        .filter_map(|line| line.split_once(':'))
                        .map(|(name, value)| (name.trim().to_lowercase(), value.trim().to_owned()))
                        .collect();
                    let raw = data[head_end..].to_vec();
                    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
                    let mode = *shared.mode.lock().unwrap();
                    let id = headers.get("webhook-id").cloned().unwrap_or_default();
                    let answer = {
                        let mut received = shared.received.lock().unwrap();
                        let earlier =
                            received.iter().filter(|other| other.headers.get("webhook-id") == Some(&id)).count();
                        let answer = match mode {
                            Mode::Accept => Some(200),
                            Mode::FailFirst(n) if earlier < n => Some(500),
                            Mode::FailFirst(_) => Some(200),
                            Mode::Refuse => Some(500),
                            Mode::Hang => None,
                        };
                        let at = std::time::SystemTime::now();
                        received.push(Received { headers, raw, body, at, answered: answer });
                        answer
                    };
                    let Some(status) = answer else {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    };
                    let response = format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        receiver
    }

    pub(crate) fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The requests answered 2xx, in arrival order.
    pub(crate) fn accepted(&self) -> Vec<Received> {
        self.received().into_iter().filter(|received| received.answered.is_some_and(|status| status < 300)).collect()
    }

    /// Waits (bounded) until `done` holds for what was received.
    pub(crate) async fn wait_until(&self, what: &str, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        for _ in 0..600 {
            let received = self.received();
            if done(&received) {
                return received;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{what}: not received within 30 s; got {:#?}",
            self.received().iter().map(|r| &r.body).collect::<Vec<_>>()
        );
    }

    /// Waits until a `RUN_FINISHED` was accepted `cycles` times; returns the accepted
    /// requests sorted by sequence.
    pub(crate) async fn finished_cycles(&self, cycles: usize) -> Vec<Received> {
        // On SQS events may arrive out of order: wait for every sequence up to the last.
        self.wait_until("RUN_FINISHED", |received| {
            let accepted: Vec<&Received> =
                received.iter().filter(|r| r.answered.is_some_and(|status| status < 300)).collect();
            let finished = accepted.iter().filter(|r| r.body["flag"] == "RUN_FINISHED").count();
            let mut sequences: Vec<u64> = accepted.iter().filter_map(|r| r.body["sequence"].as_u64()).collect();
            sequences.sort_unstable();
            sequences.dedup();
            finished >= cycles && sequences.last() == Some(&(sequences.len() as u64))
        })
        .await;
        let mut accepted = self.accepted();
        accepted.sort_by_key(|received| received.body["sequence"].as_u64());
        accepted
    }
}

fn short_schedule() -> WebhookSchedule {
    WebhookSchedule {
        retries: [100, 200, 400, 800, 1600].into_iter().map(Duration::from_millis).collect(),
        timeout: Duration::from_secs(5),
    }
}

async fn harness(backend: Backend, schedule: WebhookSchedule) -> Harness {
    Harness::with_schedule(backend, 2, DEFAULT_TASK_BUDGET, schedule).await
}

async fn rotate_secret(harness: &Harness) -> String {
    let (status, body) = harness.test.call(Method::POST, "/webhooks/secret", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["secret"].as_str().unwrap().to_owned()
}

/// The flags of accepted events in sequence order.
pub(crate) fn flags(events: &[Received]) -> Vec<String> {
    events.iter().map(|event| event.body["flag"].as_str().unwrap_or_default().to_owned()).collect()
}

/// Sequences are 1.. without a gap or a repeat.
pub(crate) fn assert_sequences(events: &[Received]) {
    let sequences: Vec<u64> = events.iter().map(|event| event.body["sequence"].as_u64().unwrap()).collect();
    assert_eq!(sequences, (1..=events.len() as u64).collect::<Vec<_>>(), "{:?}", flags(events));
}

/// Every request verifies with the Python `standardwebhooks` package under `secret`.
pub(crate) fn verify_with_standardwebhooks(secret: &str, events: &[Received]) {
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.local/venv/bin/python");
    let cases: Vec<Value> = events
        .iter()
        .map(|event| json!({ "headers": event.headers, "body": String::from_utf8(event.raw.clone()).unwrap() }))
        .collect();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), json!({ "secret": secret, "cases": cases }).to_string()).unwrap();
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
data = json.load(open(sys.argv[1]))
hook = Webhook(data["secret"])
for case in data["cases"]:
    hook.verify(case["body"], case["headers"])
bad = dict(data["cases"][0]["headers"])
bad["webhook-signature"] = "v1,AAAA" + bad["webhook-signature"][7:]
try:
    hook.verify(data["cases"][0]["body"], bad)
except Exception:
    print("verified", len(data["cases"]))
    sys.exit(0)
sys.exit("a tampered signature was accepted")
"#;
    let output = std::process::Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(file.path())
        .output()
        .unwrap_or_else(|error| panic!("{} runs (installed by ./scripts/test.sh): {error}", python.display()));
    assert!(
        output.status.success(),
        "standardwebhooks verifies every webhook: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn a_receiver_gets_the_events_of_a_run_in_order_with_both_signatures(backend: Backend) {
    let harness = harness(backend, short_schedule()).await;
    let secret = rotate_secret(&harness).await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    let receiver = Receiver::start(Mode::Accept).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, nodes) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let events = receiver.finished_cycles(1).await;
    assert_sequences(&events);
    let flags = flags(&events);
    assert_eq!(flags.first().map(String::as_str), Some("RUN_STARTED"), "{flags:?}");
    assert_eq!(flags.last().map(String::as_str), Some("RUN_FINISHED"), "{flags:?}");
    assert!(flags[1..flags.len() - 1].iter().all(|flag| flag == "RUN_PROGRESS"), "{flags:?}");
    assert!(flags.len() >= 4, "progress events between start and finish: {flags:?}");
    if backend == Backend::Sqlite {
        // The local queue sends a run's first attempts in sequence order.
        let arrival: Vec<u64> =
            receiver.accepted().iter().map(|event| event.body["sequence"].as_u64().unwrap()).collect();
        assert_eq!(arrival, (1..=events.len() as u64).collect::<Vec<_>>(), "arrival order");
    }
    for event in &events {
        let body = &event.body;
        assert_eq!(body["run_id"], run.as_str());
        assert_eq!(body["agent_id"], agent.as_str());
        assert!(body["triggered_by"].is_null(), "an API run: {body}");
        for count in ["completed", "in_progress", "failed"] {
            assert!(body["node_status_counts"][count].is_u64(), "{body}");
        }
        assert_eq!(event.headers["x-service-signature"], secret, "the plain scheme carries the secret");
        assert_eq!(event.headers["content-type"], "application/json");
        assert!(event.headers["webhook-signature"].starts_with("v1,"));
        let timestamp: i64 = event.headers["webhook-timestamp"].parse().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        assert!((now - timestamp).abs() < 120, "{timestamp}");
    }
    let started = &events[0].body;
    assert_eq!(started["status"], "running");
    assert_eq!(started["inputs"].as_array().unwrap().len(), 1, "{started}");
    for progress in &events[1..events.len() - 1] {
        for node in progress.body["updated_nodes"].as_array().unwrap() {
            for field in ["original_node_id", "status", "status_message", "errors", "outputs"] {
                assert!(node.get(field).is_some(), "{field} in {node}");
            }
        }
    }
    // The destination's completion is reported with its output.
    let last_progress = &events[events.len() - 2].body;
    let destination = last_progress["updated_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["original_node_id"] == nodes["out"].as_str())
        .expect("the destination's change");
    assert_eq!(destination["status"], "completed");
    assert_eq!(destination["outputs"].as_array().unwrap().len(), 1);
    let finished = &events.last().unwrap().body;
    assert_eq!(finished["status"], "completed");
    assert!(finished["status_message"].is_null());
    assert_eq!(finished["needs_credits"], false);
    assert_eq!(finished["errors"], json!([]));
    assert_eq!(finished["inputs"].as_array().unwrap().len(), 1);
    let output = &finished["outputs"][0];
    assert_eq!(output["id"], record["outputs"][0]["id"]);
    assert!(output["sources"].is_array() && output.get("timeline_prproj_url").is_some(), "{output}");
    let (status, _) = crate::helpers::http_get(output["video_url"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::OK, "the output link in the webhook works");
    verify_with_standardwebhooks(&secret, &events);

    // The delivery log: every event delivered on its first attempt, `webhook-id` = its ID.
    // The receiver answers before the sender records the answer: wait for the records.
    let deliveries = loop_until_log(&harness, &run, all_delivered).await;
    assert_eq!(deliveries.len(), events.len(), "{deliveries:?}");
    for (delivery, event) in deliveries.iter().zip(&events) {
        assert_eq!(delivery["sequence"], event.body["sequence"]);
        assert_eq!(delivery["event"], event.body["flag"]);
        assert_eq!(delivery["delivery_id"], event.headers["webhook-id"].as_str());
        assert_eq!(delivery["state"], "delivered", "{delivery}");
        assert!(delivery["next_attempt_at"].is_null());
        let attempts = delivery["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "{delivery}");
        assert_eq!(attempts[0]["status_code"], 200);
        assert!(attempts[0]["duration_ms"].is_u64() && attempts[0]["at"].is_string());
    }
    let (status, page) = harness.test.call(Method::GET, &format!("/agent_run/{run}/webhooks?limit=2"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["deliveries"].as_array().unwrap().len(), 2);
    let cursor = page["next_cursor"].as_str().expect("a next page").to_owned();
    let (_, next) =
        harness.test.call(Method::GET, &format!("/agent_run/{run}/webhooks?limit=2&cursor={cursor}"), None).await;
    assert_eq!(next["deliveries"][0]["sequence"], 3, "{next}");
    for query in ["limit=0", "limit=101", "cursor=nope"] {
        let (status, body) = harness.test.call(Method::GET, &format!("/agent_run/{run}/webhooks?{query}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(body["detail"].is_string());
    }
}

async fn a_receiver_that_fails_three_times_gets_each_event_on_the_fourth_attempt_with_one_id(backend: Backend) {
    let harness = harness(backend, short_schedule()).await;
    let receiver = Receiver::start(Mode::FailFirst(3)).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    assert_eq!(harness.finished(&run).await["status"], "completed");
    let events = receiver.finished_cycles(1).await;
    assert_sequences(&events);
    let all = receiver.received();
    for event in &events {
        let id = &event.headers["webhook-id"];
        let tries: Vec<&Received> = all.iter().filter(|other| &other.headers["webhook-id"] == id).collect();
        assert_eq!(tries.len(), 4, "three refusals, then the accepted one");
        assert_eq!(tries.iter().map(|t| t.answered).collect::<Vec<_>>(), [Some(500), Some(500), Some(500), Some(200)]);
        assert!(tries.iter().all(|t| t.raw == event.raw), "every attempt sends the same body");
        // The schedule's delays (100, 200, 400 ms) separate the attempts.
        for (pair, least) in tries.windows(2).zip([100, 200, 400]) {
            let gap = pair[1].at.duration_since(pair[0].at).unwrap();
            assert!(gap >= Duration::from_millis(least), "{gap:?} < {least} ms");
        }
    }
    for delivery in &loop_until_log(&harness, &run, all_delivered).await {
        let codes: Vec<&Value> = delivery["attempts"].as_array().unwrap().iter().map(|a| &a["status_code"]).collect();
        assert_eq!(codes, [&json!(500), &json!(500), &json!(500), &json!(200)], "{delivery}");
        assert_eq!(delivery["state"], "delivered");
    }
}

async fn a_delivery_whose_retries_all_fail_is_failed_and_redeliver_sends_it_again(backend: Backend) {
    let schedule = WebhookSchedule { retries: vec![Duration::from_millis(50); 2], timeout: Duration::from_secs(5) };
    let harness = harness(backend, schedule).await;
    let receiver = Receiver::start(Mode::Refuse).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    assert_eq!(harness.finished(&run).await["status"], "completed");
    let log = loop_until_log(&harness, &run, |deliveries| {
        !deliveries.is_empty() && deliveries.iter().all(|delivery| delivery["state"] == "failed")
    })
    .await;
    let first = &log[0];
    assert_eq!(first["attempts"].as_array().unwrap().len(), 3, "the first attempt and 2 retries: {first}");
    assert!(first["next_attempt_at"].is_null());
    receiver.set_mode(Mode::Accept);
    let id = first["delivery_id"].as_str().unwrap();
    let path = format!("/agent_run/{run}/webhooks/{id}/redeliver");
    let (status, body) = harness.test.call(Method::POST, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["delivery"]["state"], "pending");
    receiver.wait_until("the redelivery", |received| received.iter().any(|r| r.answered == Some(200))).await;
    let accepted = receiver.accepted();
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0].headers["webhook-id"], id, "the same webhook-id");
    assert_eq!(accepted[0].body["flag"], "RUN_STARTED");
    let log = loop_until_log(&harness, &run, |deliveries| deliveries[0]["state"] == "delivered").await;
    assert_eq!(log[0]["attempts"].as_array().unwrap().len(), 4);
    let unknown = format!("/agent_run/{run}/webhooks/{}/redeliver", uuid::Uuid::new_v4());
    let (status, body) = harness.test.call(Method::POST, &unknown, None).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "detail": "Webhook delivery not found" })));
}

pub(crate) fn all_delivered(deliveries: &[Value]) -> bool {
    !deliveries.is_empty() && deliveries.iter().all(|delivery| delivery["state"] == "delivered")
}

/// Polls the delivery log until `done` (bounded); returns its deliveries.
pub(crate) async fn loop_until_log(harness: &Harness, run: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    for _ in 0..300 {
        let (status, log) = harness.test.call(Method::GET, &format!("/agent_run/{run}/webhooks"), None).await;
        assert_eq!(status, StatusCode::OK, "{log}");
        let deliveries = log["deliveries"].as_array().unwrap().clone();
        if done(&deliveries) {
            return deliveries;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the delivery log of {run} did not get there within 30 s");
}

async fn cancel_and_resume_send_their_own_started_and_finished_events(backend: Backend) {
    // No workers yet: the run waits, and is cancelled before any task runs.
    let harness = Harness::with_schedule(backend, 0, DEFAULT_TASK_BUDGET, short_schedule()).await;
    let receiver = Receiver::start(Mode::Accept).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let _workers = shared::serve::workers::start(&harness.test.app, 2).await.unwrap();
    let events = receiver.finished_cycles(1).await;
    assert_eq!(flags(&events), ["RUN_STARTED", "RUN_PROGRESS", "RUN_FINISHED"]);
    assert_eq!(events[2].body["status"], "cancelled");
    assert_eq!(events[2].body["status_message"], "Cancelled by the caller");
    assert!(events[1].body["updated_nodes"].as_array().unwrap().iter().all(|node| node["status"] == "cancelled"));
    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{run}/resume"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(harness.finished(&run).await["status"], "completed");
    let events = receiver.finished_cycles(2).await;
    assert_sequences(&events);
    let flags = flags(&events);
    assert_eq!(&flags[..4], ["RUN_STARTED", "RUN_PROGRESS", "RUN_FINISHED", "RUN_STARTED"], "{flags:?}");
    assert_eq!(flags.last().unwrap(), "RUN_FINISHED");
    assert_eq!(flags.iter().filter(|flag| *flag == "RUN_FINISHED").count(), 2, "{flags:?}");
    assert_eq!(events.last().unwrap().body["status"], "completed");
}

async fn the_secret_and_the_delivery_log_belong_to_one_organization(backend: Backend) {
    let harness = harness(backend, short_schedule()).await;
    let (status, body) = harness.test.call(Method::DELETE, "/webhooks/secret", None).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "detail": "No webhook secret is set" })));
    let first = rotate_secret(&harness).await;
    let second = rotate_secret(&harness).await;
    assert_ne!(first, second, "rotating makes a new secret");
    let receiver = Receiver::start(Mode::Accept).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let (_, other_key) = harness.test.add_organization(true).await;
    let run = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    let events = receiver.finished_cycles(1).await;
    assert!(events.iter().all(|event| event.headers["x-service-signature"] == second), "the current secret signs");
    for (method, path) in [
        (Method::GET, format!("/agent_run/{run}/webhooks")),
        (Method::POST, format!("/agent_run/{run}/webhooks/{}/redeliver", events[0].headers["webhook-id"])),
    ] {
        let (status, body) = harness.test.call_as(&other_key, method, &path, None).await;
        assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "detail": "Run not found" })), "{path}");
    }
    // Another organization's secret is its own: deleting it leaves this one's.
    let (status, _) = harness.test.call_as(&other_key, Method::POST, "/webhooks/secret", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = harness.test.call_as(&other_key, Method::DELETE, "/webhooks/secret", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "success": true })));
    let (status, body) = harness.test.call(Method::DELETE, "/webhooks/secret", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "success": true })));
    // Without a secret, only the Standard Webhooks id and timestamp headers are sent.
    let again = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    receiver.finished_cycles(2).await;
    let unsigned: Vec<Received> =
        receiver.accepted().into_iter().filter(|event| event.body["run_id"] == again.as_str()).collect();
    assert!(!unsigned.is_empty());
    for event in unsigned {
        assert!(!event.headers.contains_key("x-service-signature") && !event.headers.contains_key("webhook-signature"));
        assert!(event.headers.contains_key("webhook-id") && event.headers.contains_key("webhook-timestamp"));
    }
    let (status, _) = harness.test.raw(Method::POST, "/webhooks/secret", &[], Vec::new()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A receiver that never answers does not hold up the run: it completes while the
/// first delivery's attempt is still waiting for an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_that_hangs_does_not_delay_the_run() {
    let schedule = WebhookSchedule { retries: vec![Duration::from_secs(60)], timeout: Duration::from_secs(60) };
    let harness = harness(Backend::Sqlite, schedule).await;
    let receiver = Receiver::start(Mode::Hang).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    assert_eq!(harness.finished(&run).await["status"], "completed");
    let (_, log) = harness.test.call(Method::GET, &format!("/agent_run/{run}/webhooks"), None).await;
    let deliveries = log["deliveries"].as_array().unwrap();
    assert!(deliveries.len() >= 4, "every event is recorded: {log}");
    assert_eq!(deliveries.last().unwrap()["event"], "RUN_FINISHED");
    assert!(deliveries.iter().all(|delivery| delivery["state"] == "pending"), "{log}");
    assert!(deliveries[0]["attempts"].as_array().unwrap().is_empty(), "the first attempt still waits: {log}");
    assert_eq!(receiver.received().len(), 1, "one request in flight; later events wait their turn");
}

/// `callback_url` must be an http(s) URL of at most 2,048 characters that resolves to
/// public addresses only (unless private URLs are allowed): every refusal is a 400
/// `{detail}` and creates no run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callback_urls_the_guard_refuses_create_no_run() {
    let harness = Harness::guarded().await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let long = format!("https://example.com/{}", "a".repeat(2100));
    let refused = [
        ("not a URL", "callback_url must be an http:// or https:// URL"),
        (long.as_str(), "callback_url"),
        ("ftp://example.com/hook", "callback_url must be an http:// or https:// URL"),
        ("http://127.0.0.1:8080/hook", "private or reserved"),
        ("http://localhost:8080/hook", "private or reserved"),
        ("http://10.1.2.3/hook", "private or reserved"),
        ("http://172.16.0.1/hook", "private or reserved"),
        ("http://192.168.1.1/hook", "private or reserved"),
        ("http://169.254.169.254/latest/meta-data", "private or reserved"),
        ("http://100.64.0.1/hook", "private or reserved"),
        ("http://192.0.2.1/hook", "private or reserved"),
        ("http://224.0.0.1/hook", "private or reserved"),
        ("http://0.0.0.0/hook", "private or reserved"),
        ("http://[::1]/hook", "private or reserved"),
        ("http://[::ffff:127.0.0.1]/hook", "private or reserved"),
        ("http://[fe80::1]/hook", "private or reserved"),
        ("http://[fd00::1]/hook", "private or reserved"),
    ];
    for (url, problem) in refused {
        let body = json!({ "video_ids": [video], "callback_url": url });
        let (status, answer) = harness.test.call(Method::POST, &format!("/agent/{agent}/run"), Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {answer}");
        let detail = answer["detail"].as_str().unwrap_or_else(|| panic!("{url}: {answer}"));
        assert!(detail.contains(problem), "{url}: {detail}");
        assert_eq!(answer.as_object().unwrap().len(), 1, "only detail: {answer}");
    }
    let (_, runs) = harness.test.call(Method::GET, "/agent_runs", None).await;
    assert_eq!(runs["runs"], json!([]), "no run was created");
}

/// The delivery log, except that a claim first lets another sender attempt and record
/// the delivery: what happens when two copies of its message are handled at once.
struct AnotherSenderFirst {
    log: Arc<dyn WebhookRepo>,
    other: WebhookSender,
}

#[async_trait::async_trait]
impl WebhookRepo for AnotherSenderFirst {
    async fn get_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        sequence: u64,
    ) -> anyhow::Result<Option<WebhookDelivery>> {
        self.log.get_delivery(organization, run, sequence).await
    }
    async fn find_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        id: DeliveryId,
    ) -> anyhow::Result<Option<WebhookDelivery>> {
        self.log.find_delivery(organization, run, id).await
    }
    async fn list_deliveries(
        &self,
        organization: OrganizationId,
        run: RunId,
        after: Option<u64>,
        limit: usize,
    ) -> anyhow::Result<Vec<WebhookDelivery>> {
        self.log.list_deliveries(organization, run, after, limit).await
    }
    async fn claim_delivery(
        &self,
        organization: OrganizationId,
        run: RunId,
        sequence: u64,
        token: &str,
        until: Timestamp,
        now: Timestamp,
    ) -> anyhow::Result<bool> {
        // The other copy's attempt fails (the receiver answers 500 once) and is recorded
        // with its retry due shortly.
        let message = WebhookMessage { organization_id: organization, run_id: run, sequence };
        let other = self.other.process(&message, "the-other-sender").await?;
        assert!(matches!(other, Sent::RetryIn(_)), "{other:?}");
        self.log.claim_delivery(organization, run, sequence, token, until, now).await
    }
    async fn record_delivery(&self, delivery: &WebhookDelivery, token: &str) -> anyhow::Result<bool> {
        self.log.record_delivery(delivery, token).await
    }
    async fn redeliver(&self, delivery: &WebhookDelivery, now: Timestamp) -> anyhow::Result<bool> {
        self.log.redeliver(delivery, now).await
    }
    async fn unsent_deliveries(&self, before: Timestamp, limit: usize) -> anyhow::Result<Vec<WebhookDelivery>> {
        self.log.unsent_deliveries(before, limit).await
    }
    async fn webhook_secret(&self, organization: OrganizationId) -> anyhow::Result<Option<WebhookSecret>> {
        self.log.webhook_secret(organization).await
    }
    async fn put_webhook_secret(
        &self,
        organization: OrganizationId,
        secret: Option<&WebhookSecret>,
    ) -> anyhow::Result<()> {
        self.log.put_webhook_secret(organization, secret).await
    }
}

/// Two copies of one delivery's message at once: the first is attempted and fails; the
/// second claims the delivery after that was recorded, finds its retry not yet due, and
/// lets its claim go. The retry is then not held up for a whole lease, and a redelivery
/// asked for right away is not refused as "being attempted".
async fn a_sender_that_finds_its_delivery_not_due_under_its_claim_lets_the_claim_go(backend: Backend) {
    let harness = Harness::with_schedule(backend, 0, DEFAULT_TASK_BUDGET, short_schedule()).await;
    let receiver = Receiver::start(Mode::FailFirst(1)).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    let app = &harness.test.app;
    let sender = app.engine().sender.clone();
    let racing = WebhookSender {
        repo: Arc::new(AnotherSenderFirst { log: app.webhooks().clone(), other: sender.clone() }),
        ..sender.clone()
    };
    let run_id = RunId::parse(&run).unwrap();
    let message = WebhookMessage { organization_id: harness.test.organization, run_id, sequence: 1 };
    let second = racing.process(&message, "the-second-sender").await.unwrap();
    assert!(matches!(second, Sent::RetryIn(delay) if delay < Duration::from_secs(1)), "{second:?}");
    // The retry, once due, is attempted: no claim of the second sender is in its way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sender.process(&message, "the-retry").await.unwrap(), Sent::Done);
    assert_eq!(receiver.accepted().len(), 1, "delivered on its retry");
    let log = harness.test.call(Method::GET, &format!("/agent_run/{run}/webhooks"), None).await.1;
    let delivery = log["deliveries"][0]["delivery_id"].as_str().unwrap().to_owned();
    let (status, body) =
        harness.test.call(Method::POST, &format!("/agent_run/{run}/webhooks/{delivery}/redeliver"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
