//! Issue 17's hardening, each rule proven by doing what breaks it: hostile but valid
//! graphs, failures injected between the engine's steps, a killed process, hostile
//! pages and files.

use shared::domain::credits::{Account, AccountWrite, Checkout, CheckoutId, CreditRepo, LedgerEntry, Written};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::domain::nodes::{CLIP, CONCATENATE, DESTINATION, SPEED, VIDEO_INPUT};

use shared::adapters::dynamodb::DynamoDb;
use shared::core::queue::Queue;
use shared::domain::identity::OrganizationId;
use shared::domain::media::ports::MediaToolkit;
use shared::domain::media::MediaRecord;
use shared::domain::media::RenderJob;
use shared::domain::runs::events::Notifier;
use shared::domain::runs::ports::{RunQuery, RunRepo, RunTooLarge, RunningPage, MAX_RUN_BYTES};
use shared::domain::runs::sweep::{SweepSettings, Sweeper};
use shared::domain::runs::{MediaId, Run, RunId, RunStatus};
use shared::domain::webhooks::WebhookDelivery;
use shared::domain::webhooks::WebhookMessage;
use shared::domain::work::Work;
use shared::runtime::schedule::SWEEPER_DYNAMODB_ACTIONS;

use crate::helpers::Backend;
use crate::runs::Harness;
use crate::webhooks::{Mode, Receiver};

crate::conformance!(
    a_slow_start_keeps_its_idempotency_key_and_a_repeat_gets_its_run,
    one_sweep_sends_again_what_a_start_lost,
    a_start_whose_parameters_would_overgrow_the_run_is_refused,
    media_links_answer_with_their_media_type_whatever_the_upload_said,
    a_run_stored_whole_before_the_split_is_read_and_stored_as_records_by_its_next_change,
);

/// Calls `GET /whoami` every 100 ms while it lives and counts the answers slower than a
/// second (or not 200): the API must keep answering while a hostile graph is planned
/// and worked.
struct Heartbeat {
    slow: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Heartbeat {
    fn start(harness: &Harness) -> Self {
        let (slow, answered, stop) =
            (Arc::<AtomicUsize>::default(), Arc::<AtomicUsize>::default(), Arc::<AtomicBool>::default());
        let test = harness.test.clone();
        let (slow_, answered_, stop_) = (Arc::clone(&slow), Arc::clone(&answered), Arc::clone(&stop));
        let task = tokio::spawn(async move {
            while !stop_.load(Ordering::SeqCst) {
                let asked = Instant::now();
                let answer =
                    tokio::time::timeout(Duration::from_secs(1), test.call(Method::GET, "/whoami", None)).await;
                match answer {
                    Ok((StatusCode::OK, _)) if asked.elapsed() < Duration::from_secs(1) => {
                        answered_.fetch_add(1, Ordering::SeqCst);
                    }
                    _ => {
                        slow_.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self { slow, answered, stop, task }
    }

    /// Stops, and checks every call was answered within a second.
    async fn check(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        assert!(self.answered.load(Ordering::SeqCst) > 0, "whoami was called");
        assert_eq!(self.slow.load(Ordering::SeqCst), 0, "every whoami answered within a second");
    }
}

/// Starts a run and answers how long the start took.
async fn timed_start(harness: &Harness, agent: &str, body: Value) -> (String, Duration) {
    let asked = Instant::now();
    let run = tokio::time::timeout(Duration::from_secs(10), harness.start(agent, body))
        .await
        .expect("the start answers (planning is linear in the graph)");
    (run, asked.elapsed())
}

/// 149 layers of two Speed nodes, each connected to both of the layer before (298
/// nodes, 596 connections, 2^149 paths), run with every Speed node ignored: the
/// planner rewires each node once, so the start answers at once and the input reaches
/// the Destination as one output.
#[tokio::test]
async fn a_graph_of_fully_connected_layers_with_every_layer_ignored_plans_at_once() {
    let harness = Harness::new(Backend::Sqlite).await;
    let video = harness.upload("video", "video.mp4").await;
    let layers = 149;
    let names: Vec<[String; 2]> = (0..layers).map(|layer| [format!("a{layer}"), format!("b{layer}")]).collect();
    let mut nodes = vec![("in".to_owned(), VIDEO_INPUT, json!({}))];
    nodes.extend(names.iter().flatten().map(|name| (name.clone(), SPEED, json!({ "factor": 1 }))));
    nodes.push(("out".to_owned(), DESTINATION, json!({})));
    let mut edges: Vec<(String, String)> = names[0].iter().map(|first| ("in".to_owned(), first.clone())).collect();
    for pair in names.windows(2) {
        for from in &pair[0] {
            for to in &pair[1] {
                edges.push((from.clone(), to.clone()));
            }
        }
    }
    edges.extend(names[layers - 1].iter().map(|last| (last.clone(), "out".to_owned())));
    assert_eq!((nodes.len(), edges.len()), (300, 596));
    let nodes: Vec<_> = nodes.iter().map(|(name, kind, params)| (name.as_str(), *kind, params.clone())).collect();
    let edges: Vec<_> = edges.iter().map(|(from, to)| (from.as_str(), to.as_str())).collect();
    let (agent, ids) = harness.agent(&nodes, &edges).await;
    let ignored: Vec<&String> = names.iter().flatten().map(|name| &ids[name]).collect();

    let heartbeat = Heartbeat::start(&harness);
    let (run, took) = timed_start(&harness, &agent, json!({ "video_ids": [video], "ignore_nodes": ignored })).await;
    assert!(took < Duration::from_secs(1), "the start took {took:?}");
    let record = harness.finished(&run).await;
    heartbeat.check().await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1, "{record}");
    assert_eq!(record["node_status_counts"], json!({ "completed": 2, "in_progress": 0, "failed": 0 }));
}

/// 30 layers of Clip → two Speed 1 nodes → Concatenate, each layer's Concatenate the
/// next layer's source (2^30 paths from the output back to its input): every task's
/// edit decisions are placed once, so the run completes with one output while the API
/// keeps answering.
#[tokio::test]
async fn layers_that_each_join_two_copies_of_the_layer_before_complete_with_one_output() {
    let harness = Harness::new(Backend::Sqlite).await;
    let video = harness.upload("video", "video.mp4").await;
    let layers = 30;
    let mut nodes = vec![("in".to_owned(), VIDEO_INPUT, json!({}))];
    let mut edges = Vec::new();
    let mut last = "in".to_owned();
    for layer in 0..layers {
        let [clip, a, b, join] = ["clip", "a", "b", "join"].map(|name| format!("{name}{layer}"));
        nodes.push((clip.clone(), CLIP, json!({ "start_ms": 0, "end_ms": 500 })));
        nodes.push((a.clone(), SPEED, json!({ "factor": 1 })));
        nodes.push((b.clone(), SPEED, json!({ "factor": 1 })));
        nodes.push((join.clone(), CONCATENATE, json!({})));
        edges.extend([
            (last.clone(), clip.clone()),
            (clip.clone(), a.clone()),
            (clip, b.clone()),
            (a, join.clone()),
            (b, join.clone()),
        ]);
        last = join;
    }
    nodes.push(("out".to_owned(), DESTINATION, json!({})));
    edges.push((last, "out".to_owned()));
    let nodes: Vec<_> = nodes.iter().map(|(name, kind, params)| (name.as_str(), *kind, params.clone())).collect();
    let edges: Vec<_> = edges.iter().map(|(from, to)| (from.as_str(), to.as_str())).collect();
    let (agent, _) = harness.agent(&nodes, &edges).await;

    let heartbeat = Heartbeat::start(&harness);
    let (run, took) = timed_start(&harness, &agent, json!({ "video_ids": [video] })).await;
    assert!(took < Duration::from_secs(1), "the start took {took:?}");
    let record = harness.finished(&run).await;
    heartbeat.check().await;
    assert_eq!(record["status"], "completed", "{record}");
    let outputs = record["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "{record}");
    let probed = crate::runs::fetch_and_probe(outputs[0]["video_url"].as_str().unwrap()).await;
    assert!((probed.duration - 1.0).abs() <= 0.15, "two 0.5 s copies joined: {probed:?}");
}

/// A start whose site page answers slowly outlives its key's claim lease (1 s here, 3 s
/// for the page): the running request renews its claim, so a repeat with the same key
/// waits for it and gets its answer, and one run is made. A key with a space is refused.
async fn a_slow_start_keeps_its_idempotency_key_and_a_repeat_gets_its_run(backend: Backend) {
    let harness = Harness::tuned(backend, |settings| shared::config::Settings {
        idempotency_lease: Duration::from_secs(1),
        ..settings
    })
    .await;
    let site = crate::sites::slow_site_server(crate::uploads::sample("video.mp4"), Duration::from_secs(3))
        .await
        .replace("127.0.0.1", "localhost");
    let (agent, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let body = json!({ "youtube_url_inputs": [{ "url": format!("{site}/watch") }] });
    let key = uuid::Uuid::new_v4().to_string();
    let path = format!("/agent/{agent}/run");
    let first = {
        let (test, path, key, body) = (harness.test.clone(), path.clone(), key.clone(), body.clone());
        tokio::spawn(async move { crate::idempotency::post(&test, &key, &path, Some(&body)).await })
    };
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // The repeat waits for the first answer up to `MAX_WAIT`; on a machine slow enough
    // for the first to take longer, it is told to send again (409), as a client would.
    let mut repeats = 0;
    let (status, repeat) = loop {
        let (status, repeat) = crate::idempotency::post(&harness.test, &key, &path, Some(&body)).await;
        if status != StatusCode::CONFLICT || repeats == 5 {
            break (status, repeat);
        }
        assert!(repeat["detail"].as_str().unwrap().contains("is still running"), "{repeat}");
        repeats += 1;
    };
    let (first_status, first) = first.await.unwrap();
    assert_eq!((first_status, status), (StatusCode::OK, StatusCode::OK), "{first} {repeat}");
    assert_eq!(repeat["run_id"], first["run_id"], "the repeat gets the first answer");
    let (_, runs) = harness.test.call(Method::GET, &format!("/agent/{agent}/runs"), None).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "one run: {runs}");

    let (status, refused) = crate::idempotency::post(&harness.test, "order 17", &path, Some(&body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(refused["detail"].as_str().unwrap().contains("visible ASCII"), "{refused}");
}

/// Serves `bytes` at `/video.mp4`; the first request is held until `go` is notified,
/// after telling `asked`.
async fn gated_server(bytes: Vec<u8>) -> (String, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/video.mp4", listener.local_addr().unwrap());
    let (asked, go) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let (asked_, go_) = (asked.clone(), go.clone());
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = vec![0u8; 8192];
            let _ = socket.read(&mut request).await;
            if std::mem::take(&mut first) {
                asked_.notify_one();
                go_.notified().await;
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                bytes.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&bytes).await;
            let _ = socket.shutdown().await;
        }
    });
    (url, asked, go)
}

/// Recording a task's result fails while another process holds SQLite's write lock past
/// the 10 s lock wait; the message, delivered again, meets its own task's live claim:
/// it comes back when that claim runs out (the task then runs again) instead of being
/// dropped, and the run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_that_cannot_be_recorded_under_a_held_write_lock_is_worked_again_after_its_claim() {
    let harness = Harness::tuned(Backend::Sqlite, |settings| shared::config::Settings {
        task_budget: Duration::from_secs(25),
        claim_margin: Duration::ZERO,
        ..settings
    })
    .await;
    let (url, asked, go) = gated_server(crate::uploads::sample("video.mp4")).await;
    let (agent, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let run = harness.start(&agent, json!({ "video_urls": [url] })).await;
    asked.notified().await;
    // The task has claimed its attempt and is downloading: take the write lock, then let
    // the download finish, so that the task records its result while the lock is held.
    let file = harness.database.clone().unwrap();
    let (locked, unlock) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let (locked_, unlock_) = (locked.clone(), unlock.clone());
    let holder = std::thread::spawn(move || {
        let connection = rusqlite::Connection::open(file).unwrap();
        connection.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked_.notify_one();
        futures::executor::block_on(unlock_.notified());
        connection.execute_batch("COMMIT").unwrap();
    });
    locked.notified().await;
    go.notify_one();
    tokio::time::sleep(Duration::from_secs(12)).await;
    unlock.notify_one();
    holder.join().unwrap();
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1, "{record}");
}

/// Every run write's first answer is lost after DynamoDB applied it (the SDK retries
/// into a failed version condition): each writer recognises its own write by its token,
/// so claims hold, completions send their downstream tasks, and the run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_writes_whose_answers_are_lost_are_recognised_as_done() {
    let fault = crate::faults::lost_run_write_answers();
    let refused = fault.refused();
    let harness = Harness::through_table(|table| table.with_interceptor(fault)).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&crate::runs::chain(), &crate::runs::CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1, "{record}");
    let lost = refused.load(Ordering::SeqCst);
    assert!(lost >= 2, "both tasks' claims lost their answers: {lost}");
}

/// Every create, replace and deletion whose first answer is lost after DynamoDB applied
/// it (the SDK retries into its own item) is answered as done: an agent created, its
/// graph updated, a video uploaded, an asset connection made, a run completed and the
/// agent deleted, each once, with no 409, 404 or 500 from a write that landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_whose_answers_are_lost_are_answered_as_done() {
    let fault = crate::faults::lost_conditional_write_answers();
    let refused = fault.refused();
    let harness = Harness::through_table(|table| table.with_interceptor(fault)).await;
    let test = &harness.test;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&crate::runs::chain(), &crate::runs::CHAIN_EDGES).await;
    let (status, body) = test.call(Method::POST, "/asset_connections", Some(json!({ "name": "Archive" }))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1, "{record}");
    let (status, body) = test.call(Method::POST, &format!("/agent/{agent}/delete"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(test.call(Method::GET, &format!("/agent/{agent}"), None).await.0, StatusCode::NOT_FOUND);
    // The upload's record, the agent's creation and update, the connection, the run's
    // head writes and the deletion: each lost its first answer.
    let lost = refused.load(Ordering::SeqCst);
    assert!(lost >= 6, "the writes lost their first answers: {lost}");
}

/// A task queue that takes every message and loses it, as a start killed between its
/// write and its sends.
struct LosesSends;

#[async_trait::async_trait]
impl Queue<Work> for LosesSends {
    async fn send(&self, _: &[Work]) -> anyhow::Result<()> {
        Ok(())
    }
}

/// A webhook queue whose first send fails; later ones go to `inner`.
struct FailsFirstSend {
    inner: Arc<dyn Queue<WebhookMessage>>,
    failed: AtomicBool,
}

#[async_trait::async_trait]
impl Queue<WebhookMessage> for FailsFirstSend {
    async fn send(&self, messages: &[WebhookMessage]) -> anyhow::Result<()> {
        if !self.failed.swap(true, Ordering::SeqCst) {
            anyhow::bail!("the webhook queue cannot be reached");
        }
        self.inner.send(messages).await
    }
}

/// A start whose task messages are lost and whose first webhook send fails leaves a
/// `running` run with a queued task and a RUN_STARTED delivery never attempted; one
/// sweep sends both again: the run completes and the receiver gets every event. On
/// DynamoDB the sweep performs exactly the actions the `sweeper` function is granted.
async fn one_sweep_sends_again_what_a_start_lost(backend: Backend) {
    use shared::domain::runs::service;
    let own_table = match backend {
        // A table of its own: the sweep walks every running run of its table.
        Backend::DynamoDb => {
            let table = DynamoDb::connect(format!("sweep-{}", uuid::Uuid::new_v4())).await;
            table.ensure_table().await.unwrap();
            Some(table)
        }
        Backend::Sqlite => None,
    };
    let harness = match own_table.clone() {
        Some(table) => Harness::through_table(move |_| table).await,
        None => Harness::new(backend).await,
    };
    let receiver = Receiver::start(Mode::Accept).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&crate::runs::chain(), &crate::runs::CHAIN_EDGES).await;
    let app = &harness.test.app;
    let engine = app.engine().clone();
    let webhooks: Arc<dyn Queue<WebhookMessage>> =
        Arc::new(FailsFirstSend { inner: engine.webhooks.clone(), failed: AtomicBool::new(false) });
    let notifier = Notifier { links: app.links.clone(), queue: webhooks };
    let ports = harness.run_ports(&LosesSends, &notifier);
    let body = json!({ "video_ids": [video], "callback_url": receiver.url });
    let start = harness.start_of(&agent, body);
    let run = service::start_run(&ports, start).await.expect("the start stored its run").to_string();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, record) = harness.test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
    assert_eq!(record["status"], "running", "nothing runs it: {record}");
    // On SQLite the delivery row is the webhook queue's message: it cannot be lost.
    let lost_deliveries = usize::from(backend == Backend::DynamoDb);
    if lost_deliveries == 1 {
        assert!(receiver.received().is_empty(), "RUN_STARTED was never queued");
    }

    let settings = SweepSettings { stale_after: Duration::ZERO, lost_claim_after: Duration::from_secs(86_400) };
    let (sweeper, log) = match &own_table {
        Some(table) => {
            let (recording, log) = table.recording_actions();
            let recording = Arc::new(recording);
            (Sweeper { runs: recording.clone(), deliveries: recording, settings, ..engine.sweeper.clone() }, Some(log))
        }
        None => (Sweeper { settings, ..engine.sweeper.clone() }, None),
    };
    let report = sweeper.sweep().await.unwrap();
    assert_eq!(
        (report.tasks_resent, report.deliveries_resent, report.tasks_failed),
        (1, lost_deliveries, 0),
        "{report:?}"
    );
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let events =
        receiver.wait_until("RUN_FINISHED", |events| events.iter().any(|e| e.body["flag"] == "RUN_FINISHED")).await;
    assert_eq!(events[0].body["flag"], "RUN_STARTED", "the lost RUN_STARTED was sent");
    if let Some(log) = log {
        let granted: std::collections::BTreeSet<String> =
            SWEEPER_DYNAMODB_ACTIONS.iter().map(|action| (*action).to_owned()).collect();
        assert_eq!(log.take(), granted, "sweeper performs exactly what its policy grants");
    }
    // A second sweep finds nothing lost, once the sender has recorded its attempts (the
    // receiver has the events before the sender records their answers; a delivery not
    // yet recorded as attempted is what a sweep with `stale_after: 0` sends again).
    crate::webhooks::loop_until_log(&harness, &run, crate::webhooks::all_delivered).await;
    let report = sweeper.sweep().await.unwrap();
    assert_eq!((report.tasks_resent, report.deliveries_resent, report.tasks_failed), (0, 0, 0), "{report:?}");
}

/// Captions whose text is an HLS playlist naming a local listener: the captions are read
/// as SubRip (never probed), so nothing connects to the listener, and the Captions node
/// fails saying the text is not SubRip.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn captions_that_look_like_a_playlist_are_read_as_subrip_and_open_nothing() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let harness = Harness::new(Backend::Sqlite).await;
    let video = harness.upload("video", "video.mp4").await;
    let playlist = format!(
        "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nhttp://{address}/segment.ts\nfile:///etc/passwd\n#EXT-X-ENDLIST\n"
    );
    let (agent, nodes) = harness
        .agent(
            &[
                ("in", VIDEO_INPUT, json!({})),
                ("captions", shared::domain::nodes::CAPTIONS, json!({ "srt": playlist })),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "captions"), ("captions", "out")],
        )
        .await;
    let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    let errors = &record["errors"];
    assert_eq!(errors[0]["original_node_id"], nodes["captions"].as_str(), "{record}");
    assert!(errors[0]["messages"][0].as_str().unwrap().contains("SubRip"), "{record}");
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing was fetched");

    // Real SubRip still burns in.
    let srt = "1\n00:00:00,000 --> 00:00:01,000\nHello\n";
    let (agent, _) = harness
        .agent(
            &[
                ("in", VIDEO_INPUT, json!({})),
                ("captions", shared::domain::nodes::CAPTIONS, json!({ "srt": srt })),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "captions"), ("captions", "out")],
        )
        .await;
    let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
}

/// A toolkit whose first render panics (a fault hook); later ones are `inner`'s.
fn panics_once(inner: Arc<dyn MediaToolkit>) -> crate::helpers::RendersBy {
    let panicked = Arc::new(AtomicBool::new(false));
    let render: crate::helpers::RenderHook =
        Box::new(move |job: RenderJob, cancelled, inner: Arc<dyn MediaToolkit>| {
            let first = !panicked.swap(true, Ordering::SeqCst);
            Box::pin(async move {
                if first {
                    panic!("an injected fault in the render");
                }
                inner.render(&job, cancelled).await
            })
        });
    crate::helpers::RendersBy { inner, render }
}

/// A task whose work panics fails with what the panic said, and the one worker goes on:
/// the next run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_that_panics_fails_and_its_worker_goes_on() {
    let harness = Harness::with_workers(Backend::Sqlite, 0).await;
    let mut engine = harness.test.app.engine().clone();
    engine.worker.toolkit = Arc::new(panics_once(engine.worker.toolkit.clone()));
    let _workers = shared::serve::workers::start_engine(&engine, None, 1).await.unwrap();
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&crate::runs::chain(), &crate::runs::CHAIN_EDGES).await;
    let first = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let record = harness.finished(&first).await;
    assert_eq!(record["status"], "failed", "{record}");
    let message = record["errors"][0]["messages"][0].as_str().unwrap();
    assert!(message.contains("an injected fault in the render"), "{message}");
    let second = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let record = harness.finished(&second).await;
    assert_eq!(record["status"], "completed", "the same worker ran it: {record}");
}

/// CPU time (user + system) of process `pid` so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// 2,000 connections opened and left silent (over the connection cap, and over serve's
/// descriptor limit), then dropped: `GET /whoami` still answers within a second and the
/// server idles near 0% CPU (no spinning on failed accepts, no connection kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_neither_block_nor_spin_the_server() {
    let data = tempfile::tempdir().unwrap();
    // A descriptor limit below the connections: accept fails with EMFILE on the way.
    let serve = crate::crashes::ServeProcess::start_limited(data.path(), &["--workers", "1"], 1_500).await;
    // Opened 100 at a time; on a loaded machine a connect may wait (the backlog fills
    // past the connection cap), so each has 5 s and a failed one does not stop the rest.
    let mut idle = Vec::new();
    for _ in 0..20 {
        let batch =
            (0..100).map(|_| tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(serve.addr)));
        idle.extend(futures::future::join_all(batch).await.into_iter().filter_map(|opened| opened.ok()?.ok()));
    }
    assert!(idle.len() >= 1_100, "connections opened: {}", idle.len());
    let pid = serve.child.id();
    let before = cpu_time(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_time(pid) - before;
    assert!(used < Duration::from_millis(300), "serve used {used:?} of CPU in 2 s while the connections were held");
    drop(idle);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = Instant::now();
    let (status, _) = tokio::time::timeout(Duration::from_secs(1), serve.call(Method::GET, "/whoami", None))
        .await
        .expect("whoami answers within a second");
    assert_eq!(status, StatusCode::OK);
    assert!(asked.elapsed() < Duration::from_secs(1));
    let before = cpu_time(pid);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = cpu_time(pid) - before;
    assert!(used < Duration::from_millis(300), "serve used {used:?} of CPU in 3 idle seconds");
}

/// A start whose `update_params` would make the run's document larger than a run may
/// store (30 Captions nodes given 100,000 characters of SubRip each: 3 MB) is a 400
/// naming `update_params`, and creates no run.
async fn a_start_whose_parameters_would_overgrow_the_run_is_refused(backend: Backend) {
    let harness = Harness::with_workers(backend, 0).await;
    let video = harness.upload("video", "video.mp4").await;
    let mut nodes = vec![("in".to_owned(), VIDEO_INPUT, json!({}))];
    let mut edges = Vec::new();
    let mut last = "in".to_owned();
    for index in 0..30 {
        let name = format!("captions{index}");
        nodes.push((
            name.clone(),
            shared::domain::nodes::CAPTIONS,
            json!({ "srt": "1\n00:00:00,000 --> 00:00:01,000\nHi\n" }),
        ));
        edges.push((last, name.clone()));
        last = name;
    }
    nodes.push(("out".to_owned(), DESTINATION, json!({})));
    edges.push((last, "out".to_owned()));
    let nodes: Vec<_> = nodes.iter().map(|(name, kind, params)| (name.as_str(), *kind, params.clone())).collect();
    let edges: Vec<_> = edges.iter().map(|(from, to)| (from.as_str(), to.as_str())).collect();
    let (agent, ids) = harness.agent(&nodes, &edges).await;
    let cue = "1\n00:00:00,000 --> 00:00:01,000\n";
    let long = format!("{cue}{}", "x".repeat(100_000 - cue.len()));
    let params: serde_json::Map<String, Value> =
        (0..30).map(|index| (ids[&format!("captions{index}")].clone(), json!({ "srt": long }))).collect();
    let (status, body) = harness
        .test
        .call(
            Method::POST,
            &format!("/agent/{agent}/run"),
            Some(json!({ "video_ids": [video], "update_params": params })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.starts_with("update_params:") && detail.contains("3000000"), "{detail}");
    let (_, runs) = harness.test.call(Method::GET, &format!("/agent/{agent}/runs"), None).await;
    assert_eq!(runs["runs"], json!([]), "no run was created");
}

/// A local "public" page (let through the guard by the test-only exception, the guard
/// otherwise on) that redirects to a private listener, and one whose video is hosted
/// there: both starts are a 400 with the generic refusal, and nothing connects to the
/// private listener (yt-dlp's every connection goes through the guarded proxy).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn site_pages_that_lead_to_a_private_address_are_refused_without_reaching_it() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let private = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let private_address = private.local_addr().unwrap();
    let reached = Arc::new(AtomicUsize::new(0));
    let counted = reached.clone();
    tokio::spawn(async move {
        while private.accept().await.is_ok() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let public = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = public.local_addr().unwrap().port();
    shared::core::ssrf::except_for_tests(([127, 0, 0, 1], port).into());
    shared::core::ssrf::except_for_tests((std::net::Ipv6Addr::LOCALHOST, port).into());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = public.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0u8; 8192];
                let Ok(read) = socket.read(&mut request).await else { return };
                let head = String::from_utf8_lossy(&request[..read]).into_owned();
                let answer = if head.contains(" /redirect") {
                    format!("HTTP/1.1 302 Found\r\nLocation: http://{private_address}/watch\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                } else {
                    let page = format!(
                        "<html><head><title>Elsewhere</title></head><body><video src=\"http://{private_address}/clip.mp4\"></video></body></html>"
                    );
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                        page.len()
                    )
                };
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    let harness = Harness::guarded().await;
    let (agent, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    for path in ["redirect", "hosted"] {
        let page = format!("http://localhost:{port}/{path}");
        let (status, body) = harness
            .test
            .call(
                Method::POST,
                &format!("/agent/{agent}/run"),
                Some(json!({ "youtube_url_inputs": [{ "url": page }] })),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("an address this service does not connect to"), "{path}: {detail}");
        assert!(
            !detail.contains(&private_address.port().to_string()),
            "nothing of the private listener is told: {detail}"
        );
    }
    assert_eq!(reached.load(Ordering::SeqCst), 0, "no connection reached the private listener");
    let (_, runs) = harness.test.call(Method::GET, &format!("/agent/{agent}/runs"), None).await;
    assert_eq!(runs["runs"], json!([]));
}

/// An upload URL pins the Content-Type of its kind (a page is refused where the server
/// is ours; S3 refuses any change to the signed headers, which include it), and a media
/// link answers with the media's type (`video/mp4`, and `nosniff` where the server is
/// ours), never as a page.
async fn media_links_answer_with_their_media_type_whatever_the_upload_said(backend: Backend) {
    let harness = Harness::with_workers(backend, 0).await;
    let (_, ticket) = harness.test.call(Method::POST, "/uploads/video/get_upload_url", None).await;
    let id = ticket["id"].as_str().unwrap().to_owned();
    assert_eq!(ticket["upload_headers"]["Content-Type"], "video/mp4");
    let url = ticket["upload_url"].as_str().unwrap();
    let page = [("Content-Type".to_owned(), "text/html".to_owned())];
    if backend == Backend::Sqlite {
        let refused = crate::uploads::put_to(url, &page, crate::uploads::sample("video.mp4")).await;
        assert_eq!(refused, StatusCode::FORBIDDEN, "a PUT as a page is refused");
    } else {
        assert!(url.contains("content-type"), "the type is among the signed headers: {url}");
    }
    assert_eq!(crate::uploads::put(&ticket, crate::uploads::sample("video.mp4")).await, StatusCode::OK);
    let (status, body) =
        harness.test.call(Method::POST, "/uploads/video/finalize_upload", Some(json!({ "id": id }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (agent, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let run = harness.start(&agent, json!({ "video_ids": [id] })).await;
    let (_, record) = harness.test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
    let link = record["inputs"][0]["video_url"].as_str().expect("the upload's link");
    let (status, headers, _) = crate::helpers::http_fetch(link).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[http::header::CONTENT_TYPE], "video/mp4");
    if backend == Backend::Sqlite {
        assert_eq!(headers[http::header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
}

/// A run repository whose writes refuse any run with an output as over the size bound,
/// as a run would be whose output pushed its document past `MAX_RUN_BYTES`.
struct OutputsOverflow(Arc<dyn RunRepo>);

#[async_trait::async_trait]
impl CreditRepo for OutputsOverflow {
    async fn account(&self, organization: OrganizationId) -> anyhow::Result<Account> {
        self.0.account(organization).await
    }
    async fn write_account(&self, write: &AccountWrite) -> anyhow::Result<Written> {
        self.0.write_account(write).await
    }
    async fn ledger(
        &self,
        organization: OrganizationId,
        after: Option<(u64, u32)>,
        limit: usize,
    ) -> anyhow::Result<Vec<LedgerEntry>> {
        self.0.ledger(organization, after, limit).await
    }
    async fn put_checkout(&self, checkout: &Checkout) -> anyhow::Result<()> {
        self.0.put_checkout(checkout).await
    }
    async fn checkout(&self, id: CheckoutId) -> anyhow::Result<Option<Checkout>> {
        self.0.checkout(id).await
    }
}

#[async_trait::async_trait]
impl RunRepo for OutputsOverflow {
    async fn create_run(
        &self,
        run: &Run,
        media: &[MediaRecord],
        deliveries: &[WebhookDelivery],
        claim: Option<&str>,
    ) -> anyhow::Result<bool> {
        self.0.create_run(run, media, deliveries, claim).await
    }
    async fn get_run(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<Run>> {
        self.0.get_run(organization, id).await
    }
    async fn run_status(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<RunStatus>> {
        self.0.run_status(organization, id).await
    }
    async fn update_run(
        &self,
        run: &Run,
        media: &[MediaRecord],
        deliveries: &[WebhookDelivery],
        account: Option<&AccountWrite>,
    ) -> anyhow::Result<bool> {
        if !run.outputs.is_empty() {
            return Err(RunTooLarge { run: run.id, bytes: MAX_RUN_BYTES + 1, limit: MAX_RUN_BYTES }.into());
        }
        self.0.update_run(run, media, deliveries, account).await
    }
    async fn list_runs(&self, organization: OrganizationId, query: &RunQuery) -> anyhow::Result<Vec<Run>> {
        self.0.list_runs(organization, query).await
    }
    async fn running_runs(&self, cursor: Option<String>, limit: usize) -> anyhow::Result<RunningPage> {
        self.0.running_runs(cursor, limit).await
    }
}

#[async_trait::async_trait]
impl shared::domain::media::ports::MediaRecords for OutputsOverflow {
    async fn get_media(&self, id: MediaId) -> anyhow::Result<Option<MediaRecord>> {
        self.0.get_media(id).await
    }
}

/// A task whose output would grow its run past the bound fails saying so, and the run
/// ends (here `failed`: its only output could not be kept) instead of staying stuck with
/// every change refused; a cancel of the finished run is its plain 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_output_that_would_overgrow_its_run_fails_its_task_and_the_run_ends() {
    let harness = Harness::with_workers(Backend::Sqlite, 0).await;
    let mut engine = harness.test.app.engine().clone();
    engine.worker.runs = Arc::new(OutputsOverflow(engine.worker.runs.clone()));
    let _workers = shared::serve::workers::start_engine(&engine, None, 1).await.unwrap();
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&crate::runs::chain(), &crate::runs::CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    let message = record["errors"][0]["messages"][0].as_str().unwrap();
    assert!(message.contains("could not be recorded") && message.contains("3000000"), "{message}");
    let (status, _) = harness.test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "a finished run, not a 503");
}

/// A run stored whole (one document, as before runs were split into records) is read as
/// it was, and its next change stores it as records (plan, head, chunks), which a new
/// process then reads. No worker runs: the run stays as stored until the cancel.
async fn a_run_stored_whole_before_the_split_is_read_and_stored_as_records_by_its_next_change(backend: Backend) {
    use aws_sdk_dynamodb::primitives::Blob;
    use aws_sdk_dynamodb::types::AttributeValue;

    let harness = Harness::with_workers(backend, 0).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&crate::runs::chain(), &crate::runs::CHAIN_EDGES).await;
    let run_id = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let (organization, id) = (harness.test.organization, RunId::parse(&run_id).unwrap());
    let mut whole = harness.test.app.engine().runs.get_run(organization, id).await.unwrap().unwrap();
    // Stored again whole, one version on (so that no process has that version cached).
    whole.version += 1;
    let document = serde_json::to_string(&whole).unwrap();
    let fresh: Arc<dyn RunRepo> = match backend {
        Backend::Sqlite => {
            let file = harness.database.clone().unwrap();
            let connection = rusqlite::Connection::open(&file).unwrap();
            connection
                .execute(
                    "UPDATE runs SET plan = NULL, version = ?3, document = ?4 WHERE organization_id = ?1 AND id = ?2",
                    rusqlite::params![organization.to_string(), run_id, whole.version as i64, document],
                )
                .unwrap();
            connection.execute("DELETE FROM run_chunks WHERE run_id = ?1", [&run_id]).unwrap();
            Arc::new(shared::adapters::sqlite::Sqlite::open(file).unwrap())
        }
        Backend::DynamoDb => {
            let table = crate::helpers::dynamodb().await;
            let text = |value: &str| AttributeValue::S(value.to_owned());
            table
                .client()
                .put_item()
                .table_name(table.table())
                .item("pk", text(&format!("ORG#{organization}")))
                .item("sk", text(&format!("RUN#{run_id}")))
                .item("id", text(&run_id))
                .item("agent_id", text(&whole.agent_id.to_string()))
                .item("status", text("running"))
                .item("started_at", text(&whole.started_at.to_string()))
                .item("version", AttributeValue::N(whole.version.to_string()))
                .item("parts", AttributeValue::N("1".into()))
                .item("document", AttributeValue::B(Blob::new(document.into_bytes())))
                .send()
                .await
                .unwrap();
            Arc::new(table)
        }
    };
    assert_eq!(fresh.get_run(organization, id).await.unwrap().unwrap(), whole, "read as stored whole");
    let (status, record) = harness.test.call(Method::GET, &format!("/agent_run/{run_id}"), None).await;
    assert_eq!((status, record["status"].as_str()), (StatusCode::OK, Some("running")), "{record}");

    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{run_id}/cancel"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stored_as_records = match backend {
        Backend::Sqlite => {
            let connection = rusqlite::Connection::open(harness.database.clone().unwrap()).unwrap();
            let plan: Option<String> =
                connection.query_row("SELECT plan FROM runs WHERE id = ?1", [&run_id], |row| row.get(0)).unwrap();
            let chunks: i64 = connection
                .query_row("SELECT count(*) FROM run_chunks WHERE run_id = ?1", [&run_id], |row| row.get(0))
                .unwrap();
            plan.is_some() && chunks == 1
        }
        Backend::DynamoDb => {
            let table = crate::helpers::dynamodb().await;
            let head = table
                .client()
                .get_item()
                .table_name(table.table())
                .key("pk", AttributeValue::S(format!("ORG#{organization}")))
                .key("sk", AttributeValue::S(format!("RUN#{run_id}")))
                .consistent_read(true)
                .send()
                .await
                .unwrap();
            head.item().is_some_and(|head| head.contains_key("form"))
        }
    };
    assert!(stored_as_records, "the change stored the run as records");
    // A new process reads the records: the run as the change left it.
    let fresh: Arc<dyn RunRepo> = match backend {
        Backend::Sqlite => Arc::new(shared::adapters::sqlite::Sqlite::open(harness.database.clone().unwrap()).unwrap()),
        Backend::DynamoDb => Arc::new(crate::helpers::dynamodb().await),
    };
    let cancelled = fresh.get_run(organization, id).await.unwrap().unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert_eq!(cancelled.version, whole.version + 1);
    assert_eq!(cancelled.tasks.len(), whole.tasks.len());
    assert_eq!(cancelled.nodes, whole.nodes);
    assert_eq!(cancelled, harness.test.app.engine().runs.get_run(organization, id).await.unwrap().unwrap());
}

/// On Lambda each change of a run may land on another instance. An instance that read a
/// run at an earlier version reads only what was written since (the head, the chunks
/// stamped after its version, the outputs past its count) and gets the run a whole read
/// of its records gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_read_a_run_before_brings_it_up_to_date_from_what_was_written_since() {
    let harness = Harness::with_workers(Backend::DynamoDb, 1).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&crate::runs::chain(), &crate::runs::CHAIN_EDGES).await;
    let run_id = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let (organization, id) = (harness.test.organization, RunId::parse(&run_id).unwrap());
    let other = crate::helpers::dynamodb().await;
    let early = other.get_run(organization, id).await.unwrap().unwrap();
    let record = harness.finished(&run_id).await;
    assert_eq!(record["status"], "completed", "{record}");
    let refreshed = other.get_run(organization, id).await.unwrap().unwrap();
    let whole = crate::helpers::dynamodb().await.get_run(organization, id).await.unwrap().unwrap();
    assert!(early.version < whole.version && early.outputs.is_empty() && !whole.outputs.is_empty(), "{early:?}");
    assert_eq!(refreshed, whole);
}

/// A change whose version left the process's cache between its read and its write (more
/// runs touched in between than the cache keeps) reads that version again and writes only
/// what it changed; when another writer came first, it writes nothing and is made again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_version_left_the_cache_writes_only_what_changed_or_nothing() {
    use shared::domain::runs::engine::Claim;
    use shared::domain::runs::TaskIndex;
    use shared::domain::time::Timestamp;

    let harness = Harness::with_workers(Backend::DynamoDb, 0).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&crate::runs::chain(), &crate::runs::CHAIN_EDGES).await;
    let run_id = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let (organization, id) = (harness.test.organization, RunId::parse(&run_id).unwrap());
    let claim = |run: &mut Run| {
        let attempt = run.tasks[TaskIndex(0)].attempt;
        assert_eq!(run.claim(TaskIndex(0), attempt, Timestamp::now(), Duration::from_secs(60)), Claim::Claimed);
        run.version += 1;
    };

    let puts = CountPuts::default();
    let this = crate::helpers::dynamodb().await.with_interceptor(puts.clone());
    let mut changed = this.get_run(organization, id).await.unwrap().unwrap();
    let mut raced = changed.clone();
    claim(&mut changed);
    this.forget_runs();
    puts.0.store(0, Ordering::SeqCst);
    assert!(this.update_run(&changed, &[], &[], None).await.unwrap(), "written after reading its version again");
    assert_eq!(puts.0.load(Ordering::SeqCst), 2, "the head and the claimed task's chunk, not the plan again");
    let other = crate::helpers::dynamodb().await;
    assert_eq!(other.get_run(organization, id).await.unwrap().unwrap(), changed);

    // A change made on the version before: another writer came first.
    claim(&mut raced);
    raced.tasks[TaskIndex(0)].claims += 1;
    this.forget_runs();
    assert!(!this.update_run(&raced, &[], &[], None).await.unwrap(), "nothing written over the other writer's version");
    crate::helpers::dynamodb().await.forget_runs();
    assert_eq!(crate::helpers::dynamodb().await.get_run(organization, id).await.unwrap().unwrap(), changed);
}

/// Counts the items a DynamoDB client puts (alone or in transactions).
#[derive(Clone, Debug, Default)]
struct CountPuts(Arc<AtomicUsize>);

impl aws_sdk_dynamodb::config::Intercept for CountPuts {
    fn name(&self) -> &'static str {
        "CountPuts"
    }

    fn read_before_execution(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        use aws_sdk_dynamodb::operation as op;
        let input = context.input();
        let puts = match input.downcast_ref::<op::transact_write_items::TransactWriteItemsInput>() {
            Some(transaction) => transaction.transact_items().iter().filter(|item| item.put().is_some()).count(),
            None => usize::from(input.downcast_ref::<op::put_item::PutItemInput>().is_some()),
        };
        self.0.fetch_add(puts, Ordering::SeqCst);
        Ok(())
    }
}
