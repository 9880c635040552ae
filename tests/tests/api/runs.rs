//! The run engine on the embedded backend: real uploads, real ffmpeg work by in-process
//! workers, outputs fetched through their signed links and probed with ffprobe.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::adapters::dynamodb::DynamoDb;
use shared::adapters::s3::S3BlobStore;
use shared::adapters::sqs::{SqsTaskQueue, SqsWebhookQueue};
use shared::app::{App, AppConfig, Media, SqsQueues, Storage};
use shared::config::{Settings, DEFAULT_TASK_BUDGET};
use shared::domain::nodes::{
    BACKGROUND_MUSIC, CAPTIONS, CLIP, CONCATENATE, DESTINATION, OVERLAY, REFRAME, SPEED, VIDEO_INPUT,
};
use shared::domain::runs::{RunId, TaskIndex};
use shared::domain::webhooks::WebhookSchedule;
use shared::domain::work::{NodeTask, Work};
use shared::serve::{self, workers::Workers};

use crate::conformance;
use crate::helpers::{dynamodb, http_get, http_get_range, local_media, s3_store, sqlite, Backend, TestApp};
use crate::uploads::{put, sample};

conformance!(
    a_chain_of_edits_makes_a_playable_video_reachable_by_its_signed_links,
    input_rules_are_refused_with_a_detail_and_create_no_run,
    failures_are_data_and_cancel_and_resume_keep_completed_work,
    another_organizations_runs_are_not_found_anywhere,
    a_task_message_delivered_twice_does_its_work_once,
    twenty_concurrent_runs_all_finish_with_their_outputs,
    a_run_reads_what_finalize_sealed_not_a_later_put_to_the_upload_url,
    a_worker_that_stops_between_recording_and_queueing_loses_no_task,
    a_run_whose_first_tasks_cannot_be_queued_fails_and_resumes,
);

/// DynamoDB Local, the S3 emulator and a new queue on the SQS emulator (so that tests
/// running at once never take each other's messages).
pub(crate) async fn aws_engine_queues() -> (DynamoDb, S3BlobStore, SqsTaskQueue, SqsWebhookQueue) {
    assert!(
        std::env::var("AWS_ENDPOINT_URL_SQS").is_ok(),
        "AWS_ENDPOINT_URL_SQS is not set: run the tests with ./scripts/test.sh, which starts the SQS emulator"
    );
    let config = shared::adapters::aws_env::load_defaults().await;
    let name = format!("tasks-{}", uuid::Uuid::new_v4());
    let url = SqsTaskQueue::ensure_queue(&config, &name, Duration::from_secs(60)).await.unwrap();
    let webhooks =
        SqsWebhookQueue::ensure_queue(&config, &format!("webhooks-{name}"), Duration::from_secs(60)).await.unwrap();
    (
        dynamodb().await,
        s3_store().await,
        SqsTaskQueue::from_config(&config, url),
        SqsWebhookQueue::from_config(&config, webhooks),
    )
}

/// An app with its engine, served (for media links and uploads) and worked: the
/// embedded backend (SQLite, its task table, a local media folder), or the AWS one
/// (DynamoDB Local, a queue of its own on the SQS emulator, the S3 emulator).
pub(crate) struct Harness {
    pub(crate) test: TestApp,
    /// Where tasks render (their ffmpeg children name paths under it).
    pub(crate) scratch: std::path::PathBuf,
    /// The SQLite database's file, on the embedded backend.
    pub(crate) database: Option<std::path::PathBuf>,
    _stop: tokio::sync::oneshot::Sender<()>,
    _workers: Option<Workers>,
}

impl Harness {
    pub(crate) async fn new(backend: Backend) -> Self {
        Self::with_workers(backend, 2).await
    }

    pub(crate) async fn with_workers(backend: Backend, count: usize) -> Self {
        Self::with(backend, count, DEFAULT_TASK_BUDGET).await
    }

    /// `count` workers whose tasks may take `budget` each.
    async fn with(backend: Backend, count: usize, budget: Duration) -> Self {
        Self::with_schedule(backend, count, budget, WebhookSchedule::default()).await
    }

    /// As [`Harness::with`], webhooks retried on `schedule`.
    pub(crate) async fn with_schedule(
        backend: Backend,
        count: usize,
        budget: Duration,
        schedule: WebhookSchedule,
    ) -> Self {
        Self::build(backend, count, budget, schedule, true, |settings| settings, |table| table).await
    }

    /// Two workers on `backend`, with `tune` applied to the settings of the harness.
    pub(crate) async fn tuned(backend: Backend, tune: impl FnOnce(Settings) -> Settings) -> Self {
        Self::build(backend, 2, DEFAULT_TASK_BUDGET, WebhookSchedule::default(), true, tune, |table| table).await
    }

    /// `count` workers, settings as `tune` makes them.
    pub(crate) async fn tuned_with(backend: Backend, count: usize, tune: impl FnOnce(Settings) -> Settings) -> Self {
        Self::build(backend, count, DEFAULT_TASK_BUDGET, WebhookSchedule::default(), true, tune, |table| table).await
    }

    /// Two workers on the AWS backend, whose DynamoDB client is `wrap`'s.
    pub(crate) async fn through_table(wrap: impl FnOnce(DynamoDb) -> DynamoDb) -> Self {
        let schedule = WebhookSchedule::default();
        Self::build(Backend::DynamoDb, 2, DEFAULT_TASK_BUDGET, schedule, true, |settings| settings, wrap).await
    }

    /// `count` workers on the AWS backend with a table no other test shares (for a test
    /// whose sweep or scheduler tick acts on everything of its table).
    pub(crate) async fn own_table(count: usize) -> Self {
        let table = DynamoDb::connect(format!("own-{}", uuid::Uuid::new_v4())).await;
        table.ensure_table().await.unwrap();
        let schedule = WebhookSchedule::default();
        Self::build(Backend::DynamoDb, count, DEFAULT_TASK_BUDGET, schedule, true, |settings| settings, move |_| table)
            .await
    }

    /// The embedded backend with the SSRF guard of a deployment: no private URLs.
    pub(crate) async fn guarded() -> Self {
        let schedule = WebhookSchedule::default();
        Self::build(Backend::Sqlite, 2, DEFAULT_TASK_BUDGET, schedule, false, |settings| settings, |table| table).await
    }

    async fn build(
        backend: Backend,
        count: usize,
        budget: Duration,
        schedule: WebhookSchedule,
        allow_private: bool,
        tune: impl FnOnce(Settings) -> Settings,
        wrap_table: impl FnOnce(DynamoDb) -> DynamoDb,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let public_url = format!("http://{}", listener.local_addr().unwrap());
        let scratch = tempfile::tempdir().unwrap().keep();
        let app_scratch = scratch.clone();
        let settings = Settings {
            scratch: app_scratch,
            task_budget: budget,
            webhook_schedule: schedule,
            // `localhost` is a video-sharing site here (tests of site URLs; 127.0.0.1 is not).
            video_site_hosts: vec!["localhost".to_owned()],
            allow_private_urls: allow_private,
            ..Settings::default()
        };
        let settings = tune(settings);
        let mut database = None;
        let config = match backend {
            Backend::Sqlite => {
                let (media, _) = local_media(&public_url);
                let state = sqlite();
                database = state.file().map(std::path::Path::to_path_buf);
                AppConfig { settings, ..AppConfig::sqlite(state, media) }
            }
            Backend::DynamoDb => {
                let (table, s3, tasks, webhooks) = aws_engine_queues().await;
                let table = wrap_table(table);
                let queues = SqsQueues { tasks, webhooks: Some(webhooks), take: true };
                AppConfig {
                    storage: Storage::DynamoDb { table, queues: Some(queues) },
                    media: Media::S3(s3),
                    links: Some((shared::core::signing::generate_secret(), public_url)),
                    settings: Settings { allow_private_urls: true, ..settings },
                    secrets: None,
                }
            }
        };
        let app = App::build(config);
        let test = TestApp::seeded(app).await;
        let (_, stop) = serve::spawn_on(test.app.clone(), listener).unwrap();
        let workers = if count > 0 { serve::workers::start(&test.app, count).await.unwrap() } else { None };
        Self { test, scratch, database, _stop: stop, _workers: workers }
    }

    pub(crate) async fn upload(&self, kind: &str, file: &str) -> String {
        self.upload_bytes(kind, sample(file)).await
    }

    pub(crate) async fn upload_bytes(&self, kind: &str, bytes: Vec<u8>) -> String {
        self.upload_then_put(kind, bytes, None).await
    }

    /// Uploads and finalizes `bytes`; then, when `later` is given, PUTs it to the same
    /// upload URL (still valid) as a client could.
    async fn upload_then_put(&self, kind: &str, bytes: Vec<u8>, later: Option<Vec<u8>>) -> String {
        upload(&self.test, kind, bytes, later).await
    }

    /// Creates an agent from nodes `(name, type, params)` and connections by name;
    /// returns its ID and the node IDs by name.
    pub(crate) async fn agent(
        &self,
        nodes: &[(&str, shared::domain::nodes::NodeTypeId, Value)],
        edges: &[(&str, &str)],
    ) -> (String, HashMap<String, String>) {
        create_agent(&self.test, nodes, edges).await
    }

    pub(crate) async fn start(&self, agent: &str, body: Value) -> String {
        let (status, answer) = self.test.call(Method::POST, &format!("/agent/{agent}/run"), Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answer["run_id"].as_str().unwrap().to_owned()
    }

    /// The run operations' ports of this harness's app, with `queue` and `notifier` given
    /// (tests put failing ones in).
    pub(crate) fn run_ports<'a>(
        &'a self,
        queue: &'a dyn shared::core::queue::Queue<Work>,
        notifier: &'a shared::domain::runs::events::Notifier,
    ) -> shared::domain::runs::service::RunPorts<'a> {
        let app = &self.test.app;
        shared::domain::runs::service::RunPorts {
            runs: app.engine().runs.as_ref(),
            queue,
            clock: app.clock.as_ref(),
            notifier,
            agents: app.agents().as_ref(),
            uploads: app.uploads().as_ref(),
            sites: &app.engine().worker.sites,
            assets: app.assets().as_ref(),
            asset_manager: app.asset_manager().as_ref(),
            avatars: app.avatars().as_ref(),
            allow_private_urls: true,
        }
    }

    /// A start of `agent` with the request `body`, as the domain takes it.
    pub(crate) fn start_of(&self, agent: &str, body: Value) -> shared::domain::runs::service::StartRun {
        let request = shared::domain::runs::start::StartRequest::parse(body.as_object().unwrap()).unwrap();
        let agent_id = shared::domain::agents::AgentId::parse(agent).unwrap();
        shared::domain::runs::service::StartRun {
            organization: self.test.organization,
            agent_id,
            request,
            trigger: None,
        }
    }

    /// Polls a run until it leaves `running` (bounded).
    pub(crate) async fn finished(&self, run: &str) -> Value {
        for _ in 0..1200 {
            let (status, body) = self.test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            if body["status"] != "running" {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("run {run} still running after 120 s");
    }
}

/// Uploads and finalizes `bytes` as `test`'s organization; then, when `later` is
/// given, PUTs it to the same upload URL (still valid) as a client could.
pub(crate) async fn upload(test: &TestApp, kind: &str, bytes: Vec<u8>, later: Option<Vec<u8>>) -> String {
    let (status, body) = test.call(Method::POST, &format!("/uploads/{kind}/get_upload_url"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    assert_eq!(put(&body, bytes).await, StatusCode::OK);
    let ticket = body;
    let (status, body) =
        test.call(Method::POST, &format!("/uploads/{kind}/finalize_upload"), Some(json!({ "id": id }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    if let Some(later) = later {
        assert_eq!(put(&ticket, later).await, StatusCode::OK, "the upload URL still takes a PUT");
    }
    id
}

/// Creates an agent of `test`'s organization from nodes `(name, type, params)` and
/// connections by name; returns its ID and the node IDs by name.
pub(crate) async fn create_agent(
    test: &TestApp,
    nodes: &[(&str, shared::domain::nodes::NodeTypeId, Value)],
    edges: &[(&str, &str)],
) -> (String, HashMap<String, String>) {
    let (status, body) = test.call(Method::POST, "/agent/create", Some(json!({ "name": "runs" }))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let agent = body["agent_id"].as_str().unwrap().to_owned();
    let mut operations: Vec<Value> = nodes
        .iter()
        .map(|(name, kind, params)| json!({ "op": "create_node", "node_type_id": kind.to_string(), "temp_ref_id": name, "params_used": params }))
        .collect();
    operations.extend(
        edges.iter().map(
            |(from, to)| json!({ "op": "create_connection", "source_temp_ref_id": from, "target_temp_ref_id": to }),
        ),
    );
    let (status, body) =
        test.call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let ids = body["created_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            (node["temp_ref_id"].as_str().unwrap().to_owned(), node["agent_node_id"].as_str().unwrap().to_owned())
        })
        .collect();
    (agent, ids)
}

/// What ffprobe says about a fetched file.
#[derive(Debug)]
pub(crate) struct Probed {
    pub(crate) duration: f64,
    pub(crate) width: u64,
    pub(crate) height: u64,
    video_codec: String,
    audio_codec: Option<String>,
}

pub(crate) async fn fetch_and_probe(url: &str) -> Probed {
    let (status, bytes) = http_get(url).await;
    assert_eq!(status, StatusCode::OK, "{url}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &bytes).unwrap();
    probe_file(file.path())
}

/// What ffprobe finds in a video file (an MP4 with a yuv420p picture).
pub(crate) fn probe_file(path: &std::path::Path) -> Probed {
    let output = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-print_format", "json", "-show_format", "-show_streams"])
        .arg(path)
        .output()
        .unwrap();
    assert!(output.status.success(), "ffprobe reads the output: {}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let streams = report["streams"].as_array().unwrap();
    let video = streams.iter().find(|stream| stream["codec_type"] == "video").expect("a video stream");
    assert_eq!(video["pix_fmt"], "yuv420p");
    assert!(report["format"]["format_name"].as_str().unwrap().contains("mp4"));
    Probed {
        duration: report["format"]["duration"].as_str().unwrap().parse().unwrap(),
        width: video["width"].as_u64().unwrap(),
        height: video["height"].as_u64().unwrap(),
        video_codec: video["codec_name"].as_str().unwrap().to_owned(),
        audio_codec: streams
            .iter()
            .find(|stream| stream["codec_type"] == "audio")
            .map(|audio| audio["codec_name"].as_str().unwrap().to_owned()),
    }
}

fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!((actual - expected).abs() <= 0.1, "{what}: {actual} s, expected {expected} ± 0.1 s");
}

pub(crate) fn chain() -> Vec<(&'static str, shared::domain::nodes::NodeTypeId, Value)> {
    vec![
        ("in", VIDEO_INPUT, json!({})),
        ("clip", CLIP, json!({ "start_ms": 500, "end_ms": 1500 })),
        ("reframe", REFRAME, json!({ "aspect_ratio": "9:16", "mode": "crop" })),
        ("speed", SPEED, json!({ "factor": 2 })),
        ("out", DESTINATION, json!({})),
    ]
}

pub(crate) const CHAIN_EDGES: [(&str, &str); 4] =
    [("in", "clip"), ("clip", "reframe"), ("reframe", "speed"), ("speed", "out")];

async fn a_chain_of_edits_makes_a_playable_video_reachable_by_its_signed_links(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, nodes) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["run_id"], run.as_str());
    assert_eq!(record["node_status_counts"], json!({ "completed": 5, "in_progress": 0, "failed": 0 }));
    assert_eq!(record["errors"], json!([]));
    assert_eq!(record["needs_credits"], false);
    let outputs = record["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "{record}");
    let output = &outputs[0];
    assert_eq!(output["original_node_id"], nodes["out"].as_str());
    assert_eq!(output["sources"], json!([]));
    let probed = fetch_and_probe(output["video_url"].as_str().unwrap()).await;
    assert_close(probed.duration, 0.5, "1 s clip at double speed");
    // Players seek with byte ranges.
    let link = output["video_url"].as_str().unwrap();
    let (_, whole) = http_get(link).await;
    let size = whole.len();
    let (status, content_range, part) = http_get_range(link, "bytes=0-99").await;
    assert_eq!((status, content_range), (StatusCode::PARTIAL_CONTENT, Some(format!("bytes 0-99/{size}"))));
    assert_eq!(part, whole.slice(..100));
    let (status, content_range, part) = http_get_range(link, &format!("bytes={}-", size - 10)).await;
    assert_eq!(
        (status, content_range),
        (StatusCode::PARTIAL_CONTENT, Some(format!("bytes {}-{}/{size}", size - 10, size - 1)))
    );
    assert_eq!(part, whole.slice(size - 10..));
    let (status, _, _) = http_get_range(link, &format!("bytes={size}-")).await;
    assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "a range past the end");
    assert_eq!((probed.width, probed.height), (136, 240), "9:16 crop of 320x240");
    assert_eq!((probed.video_codec.as_str(), probed.audio_codec.as_deref()), ("h264", Some("aac")));
    let (status, thumbnail) = http_get(output["thumbnail_url"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&thumbnail[..3], &[0xFF, 0xD8, 0xFF], "a JPEG thumbnail");
    // Inputs show the clipped input and its thumbnail once the Video Input task ran.
    let inputs = record["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 1);
    assert!(inputs[0]["thumbnail_url"].is_string(), "{record}");

    // The link expires in 7 days; a changed signature or path is refused.
    let link = output["video_url"].as_str().unwrap();
    let expires: i64 = link.split("expires=").nth(1).unwrap().split('&').next().unwrap().parse().unwrap();
    let from_now = expires - shared::domain::time::Timestamp::now().unix_seconds();
    assert!((7 * 86_400 - 60..=7 * 86_400).contains(&from_now), "{from_now}");
    let last = if link.ends_with('0') { '1' } else { '0' };
    let tampered = format!("{}{last}", &link[..link.len() - 1]);
    assert_eq!(http_get(&tampered).await.0, StatusCode::FORBIDDEN);
    let other = link.replace(output["id"].as_str().unwrap(), &RunId::new_v4().to_string());
    assert_eq!(http_get(&other).await.0, StatusCode::FORBIDDEN);
    let expired = format!(
        "{}/media/{}?expires=1&signature=00",
        link.split("/media/").next().unwrap(),
        output["id"].as_str().unwrap()
    );
    assert_eq!(http_get(&expired).await.0, StatusCode::FORBIDDEN);

    // The nodes view: every node completed, the destination with its output.
    let (status, view) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    assert_eq!(status, StatusCode::OK);
    let views = view["nodes"].as_array().unwrap();
    assert_eq!(views.len(), 5);
    // Each node's times: when a worker took its task and when the task ended, inside
    // the run's own (RFC 3339 UTC strings with one precision sort as times).
    let time = |value: &Value| value.as_str().unwrap_or_else(|| panic!("a time: {value}")).to_owned();
    let (run_started, run_finished) = (time(&record["started_at"]), time(&record["finished_at"]));
    for node in views {
        assert_eq!(node["status"], "completed", "{node}");
        assert_ne!(node["agent_node_id"], node["original_node_id"], "runtime nodes have IDs of their own");
        let (started, finished) = (time(&node["started_at"]), time(&node["finished_at"]));
        assert!(run_started <= started && started <= finished && finished <= run_finished, "{record}\n{node}");
    }
    let destination = views.iter().find(|node| node["original_node_id"] == nodes["out"].as_str()).unwrap();
    assert_eq!(destination["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(destination["node_type"]["node_type_name"], "Destination");

    // The output is an input of a later run.
    let (second_agent, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let second = harness.start(&second_agent, json!({ "node_render_ids": [output["id"]] })).await;
    let record = harness.finished(&second).await;
    assert_eq!(record["status"], "completed", "{record}");
    let probed = fetch_and_probe(record["outputs"][0]["video_url"].as_str().unwrap()).await;
    assert_close(probed.duration, 0.5, "the earlier output, passed through");

    // A URL input is downloaded, probed and cut; it is cited in the output's sources.
    let url = output["video_url"].as_str().unwrap();
    let third =
        harness.start(&second_agent, json!({ "video_url_inputs": [{ "url": url, "input_clip_start_ms": 100 }] })).await;
    let record = harness.finished(&third).await;
    assert_eq!(record["status"], "completed", "{record}");
    let probed = fetch_and_probe(record["outputs"][0]["video_url"].as_str().unwrap()).await;
    assert_close(probed.duration, 0.4, "the downloaded 0.5 s from 100 ms on");
    let sources = record["outputs"][0]["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 1, "{record}");
    assert_eq!(sources[0]["query"], url);
    // A URL that is not media, or answers an error, fails its task with the reason.
    for (bad, reason) in
        [(output["thumbnail_url"].as_str().unwrap().to_owned(), "not usable"), (tampered.clone(), "403")]
    {
        let run = harness.start(&second_agent, json!({ "video_urls": [bad] })).await;
        let record = harness.finished(&run).await;
        assert_eq!(record["status"], "failed", "{record}");
        let message = record["errors"][0]["messages"][0].as_str().unwrap();
        assert!(message.contains(reason), "{message}");
    }

    // Lists: newest first, filtered by agent and status, paged by cursor.
    let (status, list) = harness.test.call(Method::GET, "/agent_runs?limit=2&status=completed", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let ids: Vec<&str> = list["runs"].as_array().unwrap().iter().map(|run| run["run_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [third.as_str(), second.as_str()], "newest first");
    let cursor = list["next_cursor"].as_str().expect("a second page");
    let (_, page) =
        harness.test.call(Method::GET, &format!("/agent_runs?limit=2&status=completed&cursor={cursor}"), None).await;
    assert_eq!(page["runs"][0]["run_id"], run.as_str());
    assert_eq!(page["runs"].as_array().unwrap().len(), 1);
    assert_eq!(page["next_cursor"], Value::Null);
    let (_, failed) = harness.test.call(Method::GET, "/agent_runs?status=failed", None).await;
    assert_eq!(failed["runs"].as_array().unwrap().len(), 2);
    let (_, by_agent) = harness.test.call(Method::GET, &format!("/agent/{agent}/runs"), None).await;
    assert_eq!(by_agent["runs"].as_array().unwrap().len(), 1);
    let (_, filtered) =
        harness.test.call(Method::GET, &format!("/agent_runs?agent_id={agent}&status=failed,cancelled"), None).await;
    assert_eq!(filtered["runs"], json!([]));
    let (status, _) = harness.test.call(Method::GET, "/agent_runs?status=done", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, future) = harness.test.call(Method::GET, "/agent_runs?from=2999-01-01T00:00:00Z", None).await;
    assert_eq!(future["runs"], json!([]), "from filters on started_at");
    let (_, past) = harness.test.call(Method::GET, "/agent_runs?to=2000-01-01T00:00:00Z", None).await;
    assert_eq!(past["runs"], json!([]), "to filters on started_at");
    let (_, all) = harness.test.call(Method::GET, "/agent_runs?from=2000-01-01T00:00:00Z&limit=100", None).await;
    assert_eq!(all["runs"].as_array().unwrap().len(), 5);
    for bad in ["limit=0", "limit=101", "from=yesterday", "cursor=nope", "agent_id=x"] {
        let (status, body) = harness.test.call(Method::GET, &format!("/agent_runs?{bad}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_executor_makes_the_size_duration_and_streams_the_graph_asks_for() {
    let harness = Harness::new(Backend::Sqlite).await;
    let video = harness.upload("video", "video.mp4").await;
    let short = harness.upload("video", "short.mp4").await;
    let audio = harness.upload("audio", "audio.mp3").await;
    let image = harness.upload("image", "image.png").await;
    let srt = "1\n00:00:00,000 --> 00:00:02,000\nHello\n";
    let (agent, nodes) = harness
        .agent(
            &[
                ("a", VIDEO_INPUT, json!({})),
                ("b", VIDEO_INPUT, json!({})),
                ("join", CONCATENATE, json!({})),
                ("captions", CAPTIONS, json!({ "srt": srt, "style": { "font_size": 30, "position": "top" } })),
                ("music", BACKGROUND_MUSIC, json!({ "audio_id": audio, "volume": 0.5, "ducking": true })),
                ("logo", OVERLAY, json!({ "image_id": image, "position": "top_right", "opacity": 0.5, "scale": 0.25 })),
                ("joined", DESTINATION, json!({})),
                ("square", REFRAME, json!({ "aspect_ratio": "1:1", "mode": "pad", "pad_color": "#102030" })),
                ("square_out", DESTINATION, json!({})),
                ("portrait", REFRAME, json!({ "aspect_ratio": "4:5", "mode": "crop" })),
                ("slow", SPEED, json!({ "factor": 0.5 })),
                ("portrait_out", DESTINATION, json!({})),
                ("wide", REFRAME, json!({ "aspect_ratio": "16:9" })),
                ("wide_out", DESTINATION, json!({})),
            ],
            &[
                ("a", "join"),
                ("b", "join"),
                ("join", "captions"),
                ("captions", "music"),
                ("music", "logo"),
                ("logo", "joined"),
                ("b", "square"),
                ("square", "square_out"),
                ("a", "portrait"),
                ("portrait", "slow"),
                ("slow", "portrait_out"),
                ("a", "wide"),
                ("wide", "wide_out"),
            ],
        )
        .await;
    let body = json!({ "video_inputs": [
        { "agent_node_id": nodes["a"], "video_ids": [video] },
        { "agent_node_id": nodes["b"], "video_id_inputs": [{ "id": short, "input_clip_end_ms": 800 }] },
    ]});
    let run = harness.start(&agent, body).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let outputs = record["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 4, "{record}");
    let by_node =
        |name: &str| outputs.iter().find(|output| output["original_node_id"] == nodes[name].as_str()).unwrap();

    let joined = fetch_and_probe(by_node("joined")["video_url"].as_str().unwrap()).await;
    assert_close(joined.duration, 2.8, "2 s joined with the first 0.8 s of the second");
    assert_eq!((joined.width, joined.height), (320, 240), "joined at the first input's size");
    assert_eq!(joined.audio_codec.as_deref(), Some("aac"), "silence for the input without sound, music over all");

    let square = fetch_and_probe(by_node("square_out")["video_url"].as_str().unwrap()).await;
    assert_close(square.duration, 0.8, "the clipped second input");
    assert_eq!((square.width, square.height), (160, 160), "1:1 pad of 160x120");
    assert_eq!(square.audio_codec, None, "a video without sound stays without");

    let portrait = fetch_and_probe(by_node("portrait_out")["video_url"].as_str().unwrap()).await;
    assert_close(portrait.duration, 4.0, "2 s at half speed");
    assert_eq!((portrait.width, portrait.height), (192, 240), "4:5 crop of 320x240");
    assert_eq!(portrait.audio_codec.as_deref(), Some("aac"));

    let wide = fetch_and_probe(by_node("wide_out")["video_url"].as_str().unwrap()).await;
    assert_eq!((wide.width, wide.height), (320, 180), "16:9 crop of 320x240");
}

/// The upload URL stays valid for an hour after finalize: whatever is PUT to it then
/// must not change a run's input, music or image, nor what their links serve.
async fn a_run_reads_what_finalize_sealed_not_a_later_put_to_the_upload_url(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = harness.upload_then_put("video", sample("video.mp4"), Some(sample("short.mp4"))).await;
    let music = harness.upload_then_put("audio", sample("audio.mp3"), Some(sample("notes.txt"))).await;
    let image = harness.upload_then_put("image", sample("image.png"), Some(sample("notes.txt"))).await;
    // Passed through untouched: the output is the sealed upload itself.
    let (plain, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let (edited, _) = harness
        .agent(
            &[
                ("in", VIDEO_INPUT, json!({})),
                ("music", BACKGROUND_MUSIC, json!({ "audio_id": music, "volume": 0.5 })),
                ("logo", OVERLAY, json!({ "image_id": image })),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "music"), ("music", "logo"), ("logo", "out")],
        )
        .await;
    let mut passed_through = None;
    for agent in [plain.clone(), edited] {
        let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
        let (status, started) = harness.test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
        assert_eq!(status, StatusCode::OK);
        let record = harness.finished(&run).await;
        assert_eq!(record["status"], "completed", "{record}");
        for link in
            [&record["outputs"][0]["video_url"], &record["inputs"][0]["video_url"], &started["inputs"][0]["video_url"]]
        {
            let probed = fetch_and_probe(link.as_str().unwrap()).await;
            assert_eq!((probed.width, probed.height), (320, 240), "the sealed 320x240 video, not the later 160x120");
            assert_close(probed.duration, 2.0, "the sealed video");
        }
        passed_through.get_or_insert(record["outputs"][0]["id"].clone());
    }
    // The plain run's output is the sealed upload itself; as a later run's input too.
    let run = harness.start(&plain, json!({ "node_render_ids": [passed_through] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let probed = fetch_and_probe(record["outputs"][0]["video_url"].as_str().unwrap()).await;
    assert_eq!((probed.width, probed.height), (320, 240), "the sealed video, through node_render_ids");
}

async fn input_rules_are_refused_with_a_detail_and_create_no_run(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = harness.upload("video", "video.mp4").await;
    let audio = harness.upload("audio", "audio.mp3").await;
    let (agent, nodes) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let (two_inputs, two) = harness
        .agent(
            &[
                ("a", VIDEO_INPUT, json!({})),
                ("b", VIDEO_INPUT, json!({})),
                ("j", CONCATENATE, json!({})),
                ("o", DESTINATION, json!({})),
            ],
            &[("a", "j"), ("b", "j"), ("j", "o")],
        )
        .await;
    let (other, key) = harness.test.add_organization(true).await;
    let _ = other;
    let missing = uuid::Uuid::new_v4().to_string();
    let cases: Vec<(&str, Value, &str)> = vec![
        (&agent, json!({ "video_ids": [video], "video_inputs": [] }), "not both"),
        (&agent, json!({}), "Video Input"),
        (&agent, json!({ "video_ids": [missing] }), "was not found"),
        (&agent, json!({ "video_ids": [audio] }), "is not a video"),
        (&agent, json!({ "video_ids": ["not-a-uuid"] }), "must be a video UUID"),
        (&agent, json!({ "node_render_ids": [missing] }), "render"),
        (&agent, json!({ "video_ids": [video], "input_clip_start_ms": 2000 }), "after the end of the video"),
        (&agent, json!({ "video_ids": [video], "input_clip_start_ms": 900, "input_clip_end_ms": 100 }), "greater than"),
        (&agent, json!({ "video_urls": ["file:///etc/passwd"] }), "http"),
        (
            &agent,
            json!({ "video_ids": [video], "update_params": { missing.clone(): { "factor": 2 } } }),
            "not a node of this agent",
        ),
        (
            &agent,
            json!({ "video_ids": [video], "update_params": { nodes["speed"].clone(): { "factor": 9 } } }),
            "factor",
        ),
        (&agent, json!({ "video_ids": [video], "update_params": { nodes["in"].clone(): {} } }), "cannot be changed"),
        (&agent, json!({ "video_ids": [video], "ignore_nodes": [missing] }), "ignore_nodes"),
        (&agent, json!({ "video_ids": [video], "surprise": true }), "unknown property: surprise"),
        (&agent, json!({ "youtube_url_inputs": [{ "url": "ftp://example.com/v" }] }), "must be an http"),
        (&agent, json!({ "asset_manager_assets": [{ "id": "nope" }] }), "UUID of the external item"),
        (&agent, json!({ "video_ids": video }), "video_ids must be an array"),
        (&agent, json!({ "video_ids": [video], "input_clip_start_ms": "0" }), "input_clip_start_ms"),
        (&agent, json!({ "video_ids": vec![video.clone(); 10_000] }), "at most 100"),
        (
            &agent,
            json!({ "video_ids": [video], "callback_url": format!("https://example.com/{}", "x".repeat(9 << 20)) }),
            "callback_url must be at most 2048",
        ),
        (
            &agent,
            json!({ "video_ids": [video], "update_params": { nodes["speed"].clone(): { "factor": "fast" } } }),
            "factor",
        ),
        (&two_inputs, json!({ "video_ids": [video] }), "one entry per tile"),
        (
            &two_inputs,
            json!({ "video_inputs": [{ "agent_node_id": two["a"], "video_ids": [video] }] }),
            "no entry for the Video Input tile",
        ),
    ];
    for (agent, body, expected) in cases {
        let (status, answer) =
            harness.test.call(Method::POST, &format!("/agent/{agent}/run"), Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let detail = answer["detail"].as_str().unwrap_or_else(|| panic!("{answer}"));
        assert!(detail.contains(expected), "{body}: {detail}");
    }
    let (status, answer) = harness.test.call(Method::POST, &format!("/agent/{agent}/run"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (status, _) = harness
        .test
        .raw(
            Method::POST,
            &format!("/agent/{agent}/run"),
            &[("authorization", &format!("Bearer {}", harness.test.key))],
            b"{".to_vec(),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Another organization's upload is not found, and its agent is a 404.
    let (status, answer) = harness
        .test
        .call_as(&key, Method::POST, &format!("/agent/{agent}/run"), Some(json!({ "video_ids": [video] })))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    let (_, list) = harness.test.call(Method::GET, "/agent_runs", None).await;
    assert_eq!(list["runs"], json!([]), "no refused request created a run");

    // ignore_nodes rewires: without Reframe and Speed, the clip goes straight out.
    let run = harness
        .start(&agent, json!({ "video_ids": [video], "ignore_nodes": [nodes["reframe"], nodes["speed"]], "update_params": { nodes["clip"].clone(): { "end_ms": 1700 } } }))
        .await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let probed = fetch_and_probe(record["outputs"][0]["video_url"].as_str().unwrap()).await;
    assert_close(probed.duration, 1.2, "500..1700 ms, not reframed or sped up");
    assert_eq!((probed.width, probed.height), (320, 240));
    let (_, template) = harness.test.call(Method::GET, &format!("/agent/{agent}"), None).await;
    assert_eq!(template["agent_nodes"].as_array().unwrap().len(), 5, "the template is unchanged");
}

async fn failures_are_data_and_cancel_and_resume_keep_completed_work(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, nodes) = harness.agent(&chain(), &CHAIN_EDGES).await;
    // A clip past the end of the media fails its task: the run fails with the message.
    let run = harness
        .start(&agent, json!({ "video_ids": [video], "update_params": { nodes["clip"].clone(): { "start_ms": 5000, "end_ms": 6000 } } }))
        .await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    assert!(record["status_message"].as_str().unwrap().contains("No output"), "{record}");
    let errors = record["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{record}");
    assert_eq!(
        errors[0]["original_node_id"],
        nodes["clip"].as_str(),
        "reported at the node at fault, not the chain's end"
    );
    assert!(errors[0]["messages"][0].as_str().unwrap().contains("start_ms"), "{record}");
    assert_eq!(record["outputs"], json!([]));
    let (status, answer) = harness.test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "a finished run cannot be cancelled: {answer}");
    assert!(answer["detail"].is_string());

    // Cancel a run, then resume it: the same output as an uninterrupted run.
    let uninterrupted = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let expected = harness.finished(&uninterrupted).await;
    let slow = Harness::with_workers(backend, 0).await;
    let video = slow.upload("video", "video.mp4").await;
    let (agent, _) = slow.agent(&chain(), &CHAIN_EDGES).await;
    let run = slow.start(&agent, json!({ "video_ids": [video] })).await;
    let (status, cancelled) = slow.test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["success"], true);
    assert_eq!(cancelled["tasks_cancelled"], 1, "the queued Video Input task: {cancelled}");
    assert_eq!(cancelled["nodes_reset"], 5, "{cancelled}");
    let (_, again) = slow.test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    assert_eq!((again["tasks_cancelled"].as_u64(), again["nodes_reset"].as_u64()), (Some(0), Some(0)));
    let record = slow.finished(&run).await;
    assert_eq!(record["status"], "cancelled");
    let (status, resumed) = slow.test.call(Method::POST, &format!("/agent_run/{run}/resume"), None).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["nodes_considered"], 5);
    assert_eq!(resumed["requeued_nodes"], 5);
    assert_eq!(resumed["nodes_queued"], 1, "only the Video Input can start now");
    assert_eq!(resumed["requeued_node_tasks_detached"], 1, "the cancelled Video Input task");
    assert_eq!(resumed["requeued_node_active_tasks_total"], 0);
    assert!(resumed["agent_state_id"].is_string());
    let (status, refused) = slow.test.call(Method::POST, &format!("/agent_run/{run}/resume"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "a running run cannot be resumed: {refused}");
    let workers = serve::workers::start(&slow.test.app, 2).await.unwrap();
    let record = slow.finished(&run).await;
    drop(workers);
    assert_eq!(record["status"], "completed", "{record}");
    let resumed_output = fetch_and_probe(record["outputs"][0]["video_url"].as_str().unwrap()).await;
    let expected_output = fetch_and_probe(expected["outputs"][0]["video_url"].as_str().unwrap()).await;
    assert_close(resumed_output.duration, expected_output.duration, "resumed output");
    assert_eq!((resumed_output.width, resumed_output.height), (expected_output.width, expected_output.height));
}

async fn another_organizations_runs_are_not_found_anywhere(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let record = harness.finished(&run).await;
    let (_, key) = harness.test.add_organization(true).await;
    for (method, path) in [
        (Method::GET, format!("/agent_run/{run}")),
        (Method::GET, format!("/agent_run/{run}/nodes")),
        (Method::POST, format!("/agent_run/{run}/cancel")),
        (Method::POST, format!("/agent_run/{run}/resume")),
        (Method::GET, format!("/agent/{agent}/runs")),
        (Method::GET, format!("/agent_runs?agent_id={agent}")),
    ] {
        let (status, body) = harness.test.call_as(&key, method.clone(), &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
        assert!(body["detail"].is_string(), "{body}");
    }
    let (_, list) = harness.test.call_as(&key, Method::GET, "/agent_runs", None).await;
    assert_eq!(list["runs"], json!([]));
    // Its render ID is not an input of the other organization's runs.
    let (other_agent, _) = {
        let other =
            TestApp { app: harness.test.app.clone(), key: key.clone(), organization: harness.test.organization };
        let (status, body) = other.call(Method::POST, "/agent/create", Some(json!({ "name": "x" }))).await;
        assert_eq!(status, StatusCode::CREATED);
        (body["agent_id"].as_str().unwrap().to_owned(), ())
    };
    let (status, body) = harness
        .test
        .call_as(
            &key,
            Method::POST,
            &format!("/agent/{other_agent}/run"),
            Some(json!({ "node_render_ids": [record["outputs"][0]["id"]] })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

/// A chain run started with no worker: its harness, ID, engine and first task's message.
async fn chain_run_without_workers(backend: Backend) -> (Harness, String, shared::app::Engine, NodeTask) {
    let harness = Harness::with_workers(backend, 0).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
    let engine = harness.test.app.engine().clone();
    let run_id = RunId::parse(&run).unwrap();
    let message =
        NodeTask { organization_id: harness.test.organization, run_id, task: TaskIndex(0), attempt: 0, part: None };
    (harness, run, engine, message)
}

async fn a_task_message_delivered_twice_does_its_work_once(backend: Backend) {
    let (harness, run, engine, message) = chain_run_without_workers(backend).await;
    // Not taken by a worker yet: no times.
    let (_, view) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    for node in view["nodes"].as_array().unwrap() {
        assert_eq!((&node["started_at"], &node["finished_at"]), (&Value::Null, &Value::Null), "{node}");
    }
    let (organization, run_id) = (message.organization_id, message.run_id);
    // Both deliveries at once: one claims, the other is acknowledged without work.
    let (first, second) = tokio::join!(engine.worker.process(message), engine.worker.process(message));
    first.unwrap();
    second.unwrap();
    engine.worker.process(message).await.unwrap();
    let stored = engine.runs.get_run(organization, run_id).await.unwrap().unwrap();
    assert_eq!(stored.tasks[0].claims, 1, "claimed once");
    assert_eq!(stored.tasks[0].status, shared::domain::runs::TaskStatus::Completed);
    let workers = serve::workers::start(&harness.test.app, 2).await.unwrap();
    let record = harness.finished(&run).await;
    if let Some(local) = engine.local.as_ref() {
        // The last message is acknowledged after its work is recorded, so the run may
        // read finished a moment before: its worker is given a bounded while to do it.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while local.tasks().len().await.unwrap() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    drop(workers);
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1);
    let stored = engine.runs.get_run(organization, run_id).await.unwrap().unwrap();
    assert!(stored.tasks.iter().all(|task| task.claims == 1), "{:?}", stored.tasks);
    if let Some(local) = engine.local.as_ref() {
        assert_eq!(local.tasks().len().await.unwrap(), 0, "every message acknowledged");
    }
}

/// A queue whose sends fail: a worker that records its task's result and then cannot
/// queue what follows, as one killed between the two steps.
pub(crate) struct Unreachable;

#[async_trait::async_trait]
impl shared::core::queue::Queue<Work> for Unreachable {
    async fn send(&self, _: &[Work]) -> anyhow::Result<()> {
        anyhow::bail!("the queue cannot be reached")
    }
}

/// A queue that keeps what it is sent.
#[derive(Default)]
pub(crate) struct Recording(pub(crate) std::sync::Mutex<Vec<Work>>);

#[async_trait::async_trait]
impl shared::core::queue::Queue<Work> for Recording {
    async fn send(&self, messages: &[Work]) -> anyhow::Result<()> {
        self.0.lock().unwrap().extend_from_slice(messages);
        Ok(())
    }
}

/// The task's result is recorded but the next task is never sent; the message, not
/// acknowledged, is delivered again: that delivery queues the next task again instead
/// of being dropped as a duplicate, and the run finishes.
async fn a_worker_that_stops_between_recording_and_queueing_loses_no_task(backend: Backend) {
    let (harness, run, engine, message) = chain_run_without_workers(backend).await;
    let (organization, run_id) = (message.organization_id, message.run_id);
    let cut_off = shared::domain::runs::worker::Worker { queue: Arc::new(Unreachable), ..engine.worker.clone() };
    let error = cut_off.process(message).await.expect_err("the next task could not be queued");
    assert!(format!("{error:#}").contains("cannot be reached"), "{error:#}");
    let stored = engine.runs.get_run(organization, run_id).await.unwrap().unwrap();
    assert_eq!(stored.tasks[0].status, shared::domain::runs::TaskStatus::Completed);
    assert_eq!(stored.tasks[1].status, shared::domain::runs::TaskStatus::Queued, "queued, but never sent");
    // The message delivered again (it was not acknowledged) sends the next task again.
    let recording = Arc::new(Recording::default());
    let redelivered = shared::domain::runs::worker::Worker { queue: recording.clone(), ..engine.worker.clone() };
    redelivered.process(message).await.unwrap();
    let sent = recording.0.lock().unwrap().clone();
    assert_eq!(
        sent,
        [Work::NodeTask(NodeTask {
            organization_id: organization,
            run_id,
            task: TaskIndex(1),
            attempt: 0,
            part: None
        })]
    );
    engine.queue.send(&sent).await.unwrap();
    let workers = serve::workers::start(&harness.test.app, 1).await.unwrap();
    let record = harness.finished(&run).await;
    drop(workers);
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1);
    let stored = engine.runs.get_run(organization, run_id).await.unwrap().unwrap();
    assert!(stored.tasks.iter().all(|task| task.claims == 1), "no task ran twice: {:?}", stored.tasks);
}

/// A start whose first tasks cannot be sent answers an error, and the run it stored is
/// `failed` with the reason rather than `running` for ever; so is a resume whose tasks
/// cannot be sent; a resume that can send them completes the run.
async fn a_run_whose_first_tasks_cannot_be_queued_fails_and_resumes(backend: Backend) {
    use shared::domain::runs::service;
    let harness = Harness::new(backend).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let app = &harness.test.app;
    let notifier = app.engine().notifier(app.links.clone());
    let ports = harness.run_ports(&Unreachable, &notifier);
    let started = service::start_run(&ports, harness.start_of(&agent, json!({ "video_ids": [video] }))).await;
    let error = started.expect_err("the first task could not be queued");
    assert!(format!("{error}").contains("cannot be reached"), "{error}");
    let (_, list) = harness.test.call(Method::GET, "/agent_runs", None).await;
    let runs = list["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{list}");
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    let message = record["errors"][0]["messages"][0].as_str().unwrap();
    assert!(message.contains("could not be queued"), "{message}");
    // A resume whose tasks cannot be sent either: the run is failed again, not left
    // `running` with nothing queued.
    let run_id = RunId::parse(&run).unwrap();
    let resumed = service::resume_run(&ports, harness.test.organization, run_id).await;
    let error = resumed.expect_err("the resumed task could not be queued");
    assert!(format!("{error}").contains("cannot be reached"), "{error}");
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    let message = record["errors"][0]["messages"][0].as_str().unwrap();
    assert!(message.contains("could not be queued when the run was resumed"), "{message}");
    let (status, resumed) = harness.test.call(Method::POST, &format!("/agent_run/{run}/resume"), None).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1);
}

async fn twenty_concurrent_runs_all_finish_with_their_outputs(backend: Backend) {
    let harness = Arc::new(Harness::new(backend).await);
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;
    let runs = futures::future::join_all((0..20).map(|index| {
        let (harness, agent, video) = (harness.clone(), agent.clone(), video.clone());
        async move {
            let start = index * 10;
            harness.start(&agent, json!({ "video_id_inputs": [{ "id": video, "input_clip_start_ms": start }] })).await
        }
    }))
    .await;
    for run in &runs {
        let record = harness.finished(run).await;
        assert_eq!(record["status"], "completed", "{record}");
        assert_eq!(record["outputs"].as_array().unwrap().len(), 1, "{record}");
    }
    let probed = fetch_and_probe(harness.finished(&runs[19]).await["outputs"][0]["video_url"].as_str().unwrap()).await;
    assert_close(probed.duration, 0.5, "the last run's output");
}

/// Takes the queue's messages as node-worker's event source would, hands them to the
/// function's handler in SQS events, and deletes the ones it did not report as failed;
/// until `run` leaves `running` (bounded).
async fn work_as_node_worker(worker: &App, queue: &SqsTaskQueue, runs: &DynamoDb, test: &TestApp, run: &str) {
    use shared::core::queue::Inbox;
    use shared::domain::runs::ports::RunRepo;
    let run_id = RunId::parse(run).unwrap();
    for _ in 0..300 {
        let deliveries = queue.receive(10, Duration::from_secs(60)).await.unwrap();
        if !deliveries.is_empty() {
            let records: Vec<Value> = deliveries
                .iter()
                .map(|delivery| json!({ "messageId": delivery.handle, "body": serde_json::to_string(&delivery.message).unwrap(), "eventSource": "aws:sqs" }))
                .collect();
            let event = serde_json::from_value(json!({ "Records": records })).unwrap();
            let answer = shared::runtime::sqs::handle_batch(worker, event).await;
            assert!(answer.batch_item_failures.is_empty(), "every task message was handled: {answer:?}");
            for delivery in &deliveries {
                queue.acknowledge(delivery).await.unwrap();
            }
        }
        let stored = runs.get_run(test.organization, run_id).await.unwrap().unwrap();
        if stored.status != shared::domain::runs::RunStatus::Running {
            return;
        }
    }
    panic!("run {run} did not finish");
}

/// Each run function and node-worker are granted exactly the DynamoDB, S3 and SQS
/// actions they perform: the API and the worker each on clients that record the action
/// of every call, the worker driven through its Lambda handler with SQS events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_functions_node_worker_and_webhook_sender_are_granted_exactly_the_actions_they_perform() {
    use shared::api::ROUTES;
    use shared::runtime::schedule::{SCHEDULER, SCHEDULER_DYNAMODB_ACTIONS, SCHEDULER_SQS_ACTIONS};
    use shared::runtime::sqs::{
        NODE_WORKER, NODE_WORKER_DYNAMODB_ACTIONS, NODE_WORKER_PART_ACTIONS, NODE_WORKER_S3_ACTIONS,
        NODE_WORKER_SQS_ACTIONS, WEBHOOK_SENDER, WEBHOOK_SENDER_DYNAMODB_ACTIONS, WEBHOOK_SENDER_SQS_ACTIONS,
    };
    use std::collections::{BTreeMap, BTreeSet};

    let (_, s3, queue, webhook_queue) = aws_engine_queues().await;
    // A table of its own: the scheduler's tick acts on every due trigger of its table.
    let dynamodb = DynamoDb::connect(format!("iam-runs-{}", uuid::Uuid::new_v4())).await;
    dynamodb.ensure_table().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let public_url = format!("http://{}", listener.local_addr().unwrap());
    let secret = shared::core::signing::generate_secret();
    let recorded = |dynamodb: &DynamoDb, s3: &S3BlobStore, queue: &SqsTaskQueue| {
        let (dynamodb, dynamodb_log) = dynamodb.recording_actions();
        let runs = dynamodb.clone();
        let (s3, s3_log) = s3.recording_actions();
        let (queue, queue_log) = queue.recording_actions();
        let (webhook_queue, webhook_log) = webhook_queue.recording_actions();
        let settings = Settings {
            scratch: tempfile::tempdir().unwrap().keep(),
            task_budget: DEFAULT_TASK_BUDGET,
            webhook_schedule: WebhookSchedule {
                retries: vec![Duration::from_millis(100)],
                timeout: Duration::from_secs(5),
            },
            video_site_hosts: Vec::new(),
            allow_private_urls: true,
            // The chain's half second is made in parts, joined, and their files deleted.
            segment: Some(Duration::from_millis(200)),
            ..Settings::default()
        };
        let queues = SqsQueues { tasks: queue, webhooks: Some(webhook_queue.clone()), take: false };
        let app = App::build(AppConfig {
            storage: Storage::DynamoDb { table: dynamodb, queues: Some(queues) },
            media: Media::S3(s3),
            links: Some((secret.clone(), public_url.clone())),
            settings,
            secrets: None,
        });
        (app, [dynamodb_log, s3_log, queue_log, webhook_log], webhook_queue, runs)
    };
    // Each call below reads runs as a new process would (`api_runs.forget_runs()`): what
    // a Lambda function does whenever the run changed since it last read it.
    let (api, api_logs, _, api_runs) = recorded(&dynamodb, &s3, &queue);
    let (worker, worker_logs, worker_webhooks, _) = recorded(&dynamodb, &s3, &queue);
    let test = TestApp::seeded(api).await;
    let (_, stop) = serve::spawn_on(test.app.clone(), listener).unwrap();
    let harness = Harness { test, scratch: std::path::PathBuf::new(), database: None, _stop: stop, _workers: None };
    let video = harness.upload("video", "video.mp4").await;
    let (agent, _) = harness.agent(&chain(), &CHAIN_EDGES).await;

    let mut performed: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let take = |logs: &[shared::adapters::ActionLog; 4]| -> BTreeSet<String> {
        logs.iter().flat_map(|log| log.take()).collect()
    };
    take(&api_logs);
    take(&worker_logs);
    let (status, _) = harness.test.call(Method::POST, "/webhooks/secret", None).await;
    assert_eq!(status, StatusCode::OK);
    performed.entry("rotate-webhook-secret").or_default().extend(take(&api_logs));
    // Each delivery fails once: the sender hides its message until the retry.
    let receiver = crate::webhooks::Receiver::start(crate::webhooks::Mode::FailFirst(1)).await;
    let run = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    performed.entry("start-run").or_default().extend(take(&api_logs));
    // Asset-manager inputs read the organization's connections (a Query) first.
    let item = json!({ "asset_manager_assets": [{ "id": uuid::Uuid::new_v4().to_string() }] });
    let (status, _) = harness.test.call(Method::POST, &format!("/agent/{agent}/run"), Some(item)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    performed.entry("start-run").or_default().extend(take(&api_logs));
    work_as_node_worker(&worker, &queue, &dynamodb, &harness.test, &run).await;
    // A copy of the first task's message: its task ended, so the worker looks for events
    // it may have recorded without queueing them.
    let copy = Work::NodeTask(NodeTask {
        organization_id: harness.test.organization,
        run_id: RunId::parse(&run).unwrap(),
        task: TaskIndex(0),
        attempt: 0,
        part: None,
    });
    shared::core::queue::Queue::<Work>::send(&queue, &[copy]).await.unwrap();
    work_off_queue(&worker, &queue).await;
    performed.entry(NODE_WORKER).or_default().extend(take(&worker_logs));
    send_webhooks_as_webhook_sender(&worker, &webhook_queue, &worker_webhooks, &receiver).await;
    performed.entry(WEBHOOK_SENDER).or_default().extend(take(&worker_logs));
    let (status, log) = harness.test.call(Method::GET, &format!("/agent_run/{run}/webhooks"), None).await;
    assert_eq!(status, StatusCode::OK, "{log}");
    performed.entry("list-run-webhooks").or_default().extend(take(&api_logs));
    let delivery = log["deliveries"][0]["delivery_id"].as_str().unwrap().to_owned();
    let (status, body) =
        harness.test.call(Method::POST, &format!("/agent_run/{run}/webhooks/{delivery}/redeliver"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    performed.entry("redeliver-run-webhook").or_default().extend(take(&api_logs));
    let (status, _) = harness.test.call(Method::DELETE, "/webhooks/secret", None).await;
    assert_eq!(status, StatusCode::OK);
    performed.entry("delete-webhook-secret").or_default().extend(take(&api_logs));
    // Avatar profiles: a create, whose processing node-worker does (the 2 s video fails
    // it), a read and a list.
    let avatar = json!({ "name": "iam", "sources": { "video_id": video } });
    let (status, created) = harness.test.call(Method::POST, "/avatar-profiles/create", Some(avatar)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    performed.entry("create-avatar-profile").or_default().extend(take(&api_logs));
    work_off_queue(&worker, &queue).await;
    performed.entry(NODE_WORKER).or_default().extend(take(&worker_logs));
    let path = format!("/avatar-profiles/{}", created["id"].as_str().unwrap());
    let (status, profile) = harness.test.call(Method::GET, &path, None).await;
    assert_eq!((status, &profile["status"]), (StatusCode::OK, &json!("failed")), "{profile}");
    performed.entry("get-avatar-profile").or_default().extend(take(&api_logs));
    let (status, listed) = harness.test.call(Method::GET, "/avatar-profiles", None).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    performed.entry("list-avatar-profiles").or_default().extend(take(&api_logs));
    // Every profile, past what a Lambda response holds: parked in the bucket, a 303.
    crate::avatars::stored_profiles(&harness.test, 100, 64 * 1024).await;
    take(&api_logs);
    let (status, _, _) =
        crate::helpers::call_function(&harness.test, "list-avatar-profiles", "GET", "/avatar-profiles", None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    performed.entry("list-avatar-profiles").or_default().extend(take(&api_logs));
    // Triggers: a Schedule saved on the agent is fired by hand, read and listed; the
    // scheduler's tick fires it when due, and removes the state of a deleted agent's.
    // Its run request names an asset-manager item: a fire reads the connections (Query).
    let (status, created) =
        harness.test.call(Method::POST, "/asset_connections", Some(json!({ "name": "Archive" }))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let items = format!("/asset_connections/{}/items", created["connection"]["id"].as_str().unwrap());
    let (status, item) =
        harness.test.call(Method::POST, &items, Some(json!({ "name": "master", "highres_video_id": video }))).await;
    assert_eq!(status, StatusCode::CREATED, "{item}");
    let assets = json!({ "asset_manager_assets": [{ "id": item["item"]["id"] }] });
    let schedule = json!({ "cron": "* * * * *", "run_request": assets });
    let operations = json!({ "operations": [
        { "op": "create_node", "node_type_id": shared::domain::nodes::SCHEDULE_TRIGGER, "params_used": schedule }
    ] });
    let (status, body) = harness.test.call(Method::POST, &format!("/agent/{agent}/update"), Some(operations)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tick = body["created_nodes"][0]["agent_node_id"].as_str().unwrap().to_owned();
    let (gone, _) = harness
        .agent(
            &[
                (
                    "tick",
                    shared::domain::nodes::SCHEDULE_TRIGGER,
                    json!({ "cron": "* * * * *", "run_request": { "video_ids": [video] } }),
                ),
                ("in", VIDEO_INPUT, json!({})),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "out")],
        )
        .await;
    let (status, _) = harness.test.call(Method::POST, &format!("/agent/{gone}/delete"), None).await;
    assert_eq!(status, StatusCode::OK);
    take(&api_logs);
    let trigger_calls = [
        ("fire-trigger", Method::POST, format!("/trigger/{tick}/fire")),
        ("get-trigger", Method::GET, format!("/trigger/{tick}")),
        ("list-trigger-runs", Method::GET, format!("/trigger/{tick}/runs")),
    ];
    for (function, method, path) in trigger_calls {
        api_runs.forget_runs();
        let (status, body) = harness.test.call(method, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{function}: {body}");
        performed.entry(function).or_default().extend(take(&api_logs));
    }
    let due = shared::domain::time::Timestamp::now().after(Duration::from_secs(120));
    let report = shared::runtime::schedule::scheduler_tick(&harness.test.app, due).await.unwrap();
    assert_eq!(report["triggers"]["due"], 2, "{report}");
    assert_eq!(report["triggers"]["started"], 1, "{report}");
    performed.entry(SCHEDULER).or_default().extend(take(&api_logs));
    let report = shared::runtime::schedule::scheduler_tick(&harness.test.app, due).await.unwrap();
    assert_eq!(report["triggers"]["due"], 0, "fired, and the deleted agent's trigger removed: {report}");
    take(&api_logs);
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    take(&api_logs);
    let link = record["outputs"][0]["video_url"].as_str().unwrap().to_owned();
    // The input passed through untouched: the upload at its sealed version.
    let input_link = record["inputs"][0]["video_url"].as_str().unwrap().to_owned();
    // Social posts: connections, a post of the run's output and input (read from the
    // bucket: the output by key, the input at its version) to a sandbox account that posts
    // at once and one that finishes when read again (the read records it), published by
    // node-worker; then two posts pending approval, one approved (queued) and one rejected.
    let connect = |extra: Value| {
        let mut body = json!({"platform": "x", "account_name": "a", "account_username": "a",
            "profile_url": "https://x.test/a"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        harness.test.call(Method::POST, "/social/connections", Some(body))
    };
    let mut accounts = Vec::new();
    for extra in [json!({}), json!({"sandbox_behavior": "async"}), json!({"requires_approval": true})] {
        let (status, created) = connect(extra).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        accounts.push(created["social_connection_id"].as_str().unwrap().to_owned());
    }
    performed.entry("create-social-connection").or_default().extend(take(&api_logs));
    let (status, _) = harness.test.call(Method::GET, "/social/connections", None).await;
    assert_eq!(status, StatusCode::OK);
    performed.entry("list-social-connections").or_default().extend(take(&api_logs));
    let social_post = |to: &[&String]| {
        let destinations: Vec<Value> = to.iter().map(|id| json!({"social_connection_id": id})).collect();
        let body = json!({"description": "iam", "destinations": destinations, "media_urls": [link, input_link]});
        harness.test.call(Method::POST, "/social/post", Some(body))
    };
    let (status, posted) = social_post(&[&accounts[0], &accounts[1]]).await;
    assert_eq!(status, StatusCode::CREATED, "{posted}");
    performed.entry("create-social-post").or_default().extend(take(&api_logs));
    work_off_queue(&worker, &queue).await;
    performed.entry(NODE_WORKER).or_default().extend(take(&worker_logs));
    let path = format!("/social/post/{}", posted["post_id"].as_str().unwrap());
    let (status, read) = harness.test.call(Method::GET, &path, None).await;
    assert_eq!((status, &read["status"]), (StatusCode::OK, &json!("posted")), "{read}");
    performed.entry("get-social-post").or_default().extend(take(&api_logs));
    let (status, _) = harness.test.call(Method::GET, "/social/posts?platform=x", None).await;
    assert_eq!(status, StatusCode::OK);
    performed.entry("list-social-posts").or_default().extend(take(&api_logs));
    for what in ["approve", "reject"] {
        let (status, pending) = social_post(&[&accounts[2]]).await;
        assert_eq!((status, &pending["status"]), (StatusCode::CREATED, &json!("pending_approval")), "{pending}");
        take(&api_logs);
        let path = format!("/social/post/{}/{what}", pending["post_id"].as_str().unwrap());
        let (status, body) = harness.test.call(Method::POST, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        performed
            .entry(if what == "approve" { "approve-social-post" } else { "reject-social-post" })
            .or_default()
            .extend(take(&api_logs));
    }
    // A connection deleted with a post pending to it: the post's destination fails (its
    // transaction), then the connection and its count go (one transaction).
    let (status, doomed) = connect(json!({"requires_approval": true})).await;
    assert_eq!(status, StatusCode::CREATED, "{doomed}");
    let doomed = doomed["social_connection_id"].as_str().unwrap().to_owned();
    let (status, pending) = social_post(&[&doomed]).await;
    assert_eq!((status, &pending["status"]), (StatusCode::CREATED, &json!("pending_approval")), "{pending}");
    take(&api_logs);
    let (status, body) = harness.test.call(Method::DELETE, &format!("/social/connections/{doomed}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    performed.entry("delete-social-connection").or_default().extend(take(&api_logs));
    work_off_queue(&worker, &queue).await;
    performed.entry(NODE_WORKER).or_default().extend(take(&worker_logs));
    let calls = [
        ("get-run", Method::GET, format!("/agent_run/{run}"), StatusCode::OK),
        ("get-run-nodes", Method::GET, format!("/agent_run/{run}/nodes"), StatusCode::OK),
        ("list-agent-runs", Method::GET, format!("/agent/{agent}/runs"), StatusCode::OK),
        ("list-runs", Method::GET, "/agent_runs?status=completed".to_owned(), StatusCode::OK),
        ("get-media", Method::GET, link.strip_prefix(public_url.as_str()).unwrap().to_owned(), StatusCode::FOUND),
        ("get-media", Method::GET, input_link.strip_prefix(public_url.as_str()).unwrap().to_owned(), StatusCode::FOUND),
    ];
    for (function, method, path, expected) in calls {
        api_runs.forget_runs();
        let (status, body) = harness.test.call(method, &path, None).await;
        assert_eq!(status, expected, "{function}: {body}");
        performed.entry(function).or_default().extend(take(&api_logs));
    }
    // Cancel a run no worker took, then resume it.
    let second = harness.start(&agent, json!({ "video_ids": [video], "callback_url": receiver.url })).await;
    take(&api_logs);
    api_runs.forget_runs();
    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{second}/cancel"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    performed.entry("cancel-run").or_default().extend(take(&api_logs));
    api_runs.forget_runs();
    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{second}/resume"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    performed.entry("resume-run").or_default().extend(take(&api_logs));
    work_as_node_worker(&worker, &queue, &dynamodb, &harness.test, &second).await;
    performed.entry(NODE_WORKER).or_default().extend(take(&worker_logs));

    let wanted = |lists: &[&[&str]]| -> BTreeSet<String> {
        lists.iter().flat_map(|list| list.iter().map(|action| (*action).to_owned())).collect()
    };
    let mut checked = 0;
    for route in ROUTES.iter().filter(|route| crate::iam::RUN_ROUTES.contains(&route.function)) {
        let granted = wanted(&[route.dynamodb_actions, route.s3_actions, route.sqs_actions]);
        assert_eq!(performed[route.function], granted, "{} performs exactly what its policy grants", route.function);
        checked += 1;
    }
    assert_eq!(checked, crate::iam::RUN_ROUTES.len());
    let granted = wanted(&[
        NODE_WORKER_DYNAMODB_ACTIONS,
        NODE_WORKER_S3_ACTIONS,
        NODE_WORKER_SQS_ACTIONS,
        NODE_WORKER_PART_ACTIONS,
    ]);
    assert_eq!(performed[NODE_WORKER], granted, "node-worker performs exactly what its policy grants");
    let granted = wanted(&[WEBHOOK_SENDER_DYNAMODB_ACTIONS, WEBHOOK_SENDER_SQS_ACTIONS]);
    assert_eq!(performed[WEBHOOK_SENDER], granted, "webhook-sender performs exactly what its policy grants");
    let granted = wanted(&[SCHEDULER_DYNAMODB_ACTIONS, SCHEDULER_SQS_ACTIONS]);
    assert_eq!(performed[SCHEDULER], granted, "scheduler performs exactly what its policy grants");
}

/// Hands every message of the task queue to node-worker's handler (bounded).
async fn work_off_queue(worker: &App, queue: &SqsTaskQueue) {
    use shared::core::queue::Inbox;
    for _ in 0..5 {
        let deliveries = queue.receive(10, Duration::from_secs(60)).await.unwrap();
        if deliveries.is_empty() {
            return;
        }
        let records: Vec<Value> = deliveries
            .iter()
            .map(|delivery| json!({ "messageId": delivery.handle, "body": serde_json::to_string(&delivery.message).unwrap(), "eventSource": "aws:sqs" }))
            .collect();
        let answer =
            shared::runtime::sqs::handle_batch(worker, serde_json::from_value(json!({ "Records": records })).unwrap())
                .await;
        assert!(answer.batch_item_failures.is_empty(), "{answer:?}");
        for delivery in &deliveries {
            queue.acknowledge(delivery).await.unwrap();
        }
    }
}

/// Takes the webhook queue's messages as webhook-sender's event source would (through
/// `source`) and hands them to its handler (which delays retries through `queue`),
/// deleting the ones it did not report as failed; until the receiver accepted a
/// RUN_FINISHED (bounded).
async fn send_webhooks_as_webhook_sender(
    worker: &App,
    source: &SqsWebhookQueue,
    queue: &SqsWebhookQueue,
    receiver: &crate::webhooks::Receiver,
) {
    use shared::core::queue::Inbox;
    for _ in 0..200 {
        if receiver.accepted().iter().any(|event| event.body["flag"] == "RUN_FINISHED") {
            return;
        }
        let deliveries = source.receive(10, Duration::from_secs(30)).await.unwrap();
        if deliveries.is_empty() {
            continue;
        }
        let records: Vec<Value> = deliveries
            .iter()
            .map(|delivery| json!({ "messageId": uuid::Uuid::new_v4().to_string(), "receiptHandle": delivery.handle, "body": serde_json::to_string(&delivery.message).unwrap(), "eventSource": "aws:sqs" }))
            .collect();
        let event = serde_json::from_value(json!({ "Records": records.clone() })).unwrap();
        let answer = shared::runtime::sqs::handle_webhook_batch(worker, queue, event).await;
        for (delivery, record) in deliveries.iter().zip(&records) {
            let failed =
                answer.batch_item_failures.iter().any(|failure| failure.item_identifier == record["messageId"]);
            if !failed {
                source.acknowledge(delivery).await.unwrap();
            }
        }
    }
    panic!("the webhooks were not delivered");
}

/// ffmpeg processes whose arguments name a path under `folder`.
pub(crate) fn ffmpeg_under(folder: &std::path::Path) -> usize {
    let output = std::process::Command::new("pgrep").arg("-f").arg(format!("ffmpeg.*{}", folder.display())).output();
    output.map(|output| String::from_utf8_lossy(&output.stdout).lines().count()).unwrap_or(0)
}

/// Cancel stops the ffmpeg child of a running task within a second and nothing runs
/// after it: the run ends `cancelled` with no output.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_stops_running_ffmpeg_within_a_second() {
    let harness = Harness::with_workers(Backend::Sqlite, 1).await;
    let folder = tempfile::tempdir().unwrap();
    let video = folder.path().join("long.mp4");
    let made = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=60", "-f", "lavfi", "-i"])
        .args(["sine=duration=60", "-shortest", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(&video)
        .status()
        .unwrap();
    assert!(made.success());
    let upload = harness.upload_bytes("video", std::fs::read(&video).unwrap()).await;
    // Slowed down 4×: four minutes of output, many seconds of work.
    let (agent, _) = harness
        .agent(
            &[
                ("in", VIDEO_INPUT, json!({})),
                ("slow", SPEED, json!({ "factor": 0.25 })),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "slow"), ("slow", "out")],
        )
        .await;
    let run = harness.start(&agent, json!({ "video_ids": [upload] })).await;
    let mut waited = 0;
    while ffmpeg_under(&harness.scratch) == 0 {
        waited += 1;
        assert!(waited < 600, "ffmpeg never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    let cancelled_at = std::time::Instant::now();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["tasks_cancelled"], 1, "the running task: {body}");
    while ffmpeg_under(&harness.scratch) > 0 {
        assert!(cancelled_at.elapsed() < Duration::from_secs(1), "ffmpeg still runs 1 s after cancel");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "cancelled", "{record}");
    assert_eq!(record["outputs"], json!([]));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ffmpeg_under(&harness.scratch), 0, "nothing started after the cancel");
}

/// A server that announces a 100 MB file and sends a byte every 100 ms; it reports
/// when each connection was closed by the client.
async fn dripping_server() -> (String, tokio::sync::mpsc::UnboundedReceiver<std::time::Instant>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/video.mp4", listener.local_addr().unwrap());
    let (closed, closes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let closed = closed.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: 100000000\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                // Bounded: a test that forgot the connection ends it after 10 minutes.
                for _ in 0..6000 {
                    if socket.write_all(b"x").await.is_err() || socket.flush().await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let _ = closed.send(std::time::Instant::now());
            });
        }
    });
    (url, closes)
}

/// A URL input that never finishes fails its Video Input task at the task's time
/// limit, with the reason; cancel stops a download at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_download_that_never_ends_fails_at_the_time_limit_and_cancel_stops_it() {
    let (url, mut closes) = dripping_server().await;
    let (budget, short) = (Duration::from_secs(2), Harness::with(Backend::Sqlite, 1, Duration::from_secs(2)).await);
    let (agent, _) =
        short.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let started = std::time::Instant::now();
    let run = short.start(&agent, json!({ "video_urls": [url] })).await;
    let record = short.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    let message = record["errors"][0]["messages"][0].as_str().unwrap();
    assert!(message.contains("could not be downloaded within the task's time limit of 2 s"), "{message}");
    assert!(started.elapsed() < budget * 5, "failed at the limit, not later: {:?}", started.elapsed());

    let harness = Harness::with_workers(Backend::Sqlite, 1).await;
    let (agent, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let run = harness.start(&agent, json!({ "video_urls": [url] })).await;
    let mut waited = 0;
    loop {
        let (_, nodes) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
        if nodes["nodes"].as_array().unwrap().iter().any(|node| node["status"] == "running") {
            break;
        }
        waited += 1;
        assert!(waited < 200, "the download never started: {nodes}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    while closes.try_recv().is_ok() {}
    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    let cancelled_at = std::time::Instant::now();
    assert_eq!((status, &body["tasks_cancelled"]), (StatusCode::OK, &json!(1)), "{body}");
    let closed = tokio::time::timeout(Duration::from_secs(5), closes.recv()).await.expect("the download stopped");
    let after = closed.unwrap().saturating_duration_since(cancelled_at);
    // The running task checks its run every 500 ms.
    assert!(after < Duration::from_secs(2), "the download ran on for {after:?} after cancel");
    assert_eq!(harness.finished(&run).await["status"], "cancelled");
}

/// A server that answers every request with `bytes` as an MP4 file.
pub(crate) async fn file_server(bytes: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/video.mp4", listener.local_addr().unwrap());
    let bytes = Arc::new(bytes);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let bytes = bytes.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    bytes.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&bytes).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    url
}

/// A video of 5 hours and a minute: a few small frames ten minutes apart (a few KB).
pub(crate) fn video_over_5_hours() -> Vec<u8> {
    let folder = tempfile::tempdir().unwrap();
    let video = folder.path().join("long.mp4");
    let made = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i", "color=black:size=64x48:rate=1/600:duration=18060"])
        .args(["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(&video)
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::read(&video).unwrap()
}

/// A URL input longer than 5 hours (a few frames ten minutes apart) fails its Video
/// Input task with the limit in the message; the run does not stay `running`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_url_video_over_5_hours_fails_its_video_input_task() {
    let url = file_server(video_over_5_hours()).await;
    let harness = Harness::new(Backend::Sqlite).await;
    let (agent, nodes) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let run = harness.start(&agent, json!({ "video_urls": [url] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(record["errors"][0]["original_node_id"], nodes["in"].as_str());
    let message = record["errors"][0]["messages"][0].as_str().unwrap();
    assert!(message.contains("at most 5 hours (18000 s) are accepted"), "{message}");
}
