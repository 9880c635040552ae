//! The compiled function binaries run as AWS Lambda runs them: each is a child process
//! of the Runtime API emulator (`runtime_emulator`), fed the published events (API
//! Gateway HTTP API v2, SQS batches) on DynamoDB Local and the SQS/S3 emulator. Seeding
//! (organization, upload, agent, webhook secret) goes through the in-process app on the
//! same table; the run itself only through the binaries.

use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};
use shared::adapters::sqs::{SqsTaskQueue, SqsWebhookQueue};
use shared::app::{App, Media};
use shared::runtime::CONFIG_INVALID;

use crate::arm64;
use crate::helpers::{dynamodb, s3_store, test_bucket_name, TestApp};
use crate::lambda_events::{api_gateway_event, batch_answer, http_answer, sqs_event, sqs_record};
use crate::runs::{chain, create_agent, fetch_and_probe, upload, CHAIN_EDGES};
use crate::runtime_emulator::{aws_environment, binary_path, debug_binary, Function, InvokeError, RunningFunction};
use crate::uploads::sample;
use crate::webhooks::{assert_sequences, flags, verify_with_standardwebhooks, Mode, Receiver};

/// The address callers reach the API at: media links start with it (never fetched here).
const PUBLIC_URL: &str = "https://api.example.test";
/// How long a function may take to start and answer (debug builds, 2 cores).
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(60);
/// node-worker's timeout here; its tasks' budget (TASK_TIMEOUT_SECONDS) stays under it,
/// as in the template.
const NODE_WORKER_TIMEOUT: Duration = Duration::from_secs(120);

/// An SQS queue of the deployment.
struct Queue {
    url: String,
    arn: String,
}

/// A deployment on the emulators: the test run's table and bucket, queues of its own, a
/// link secret, and the environment its functions get; `test` seeds it in process.
struct Deployment {
    test: TestApp,
    env: Vec<(String, String)>,
    sqs: aws_sdk_sqs::Client,
    tasks: Queue,
    webhooks: Queue,
}

impl Deployment {
    async fn new() -> Self {
        assert!(
            std::env::var("AWS_ENDPOINT_URL_SQS").is_ok(),
            "AWS_ENDPOINT_URL_SQS is not set: run the tests with ./scripts/test.sh, which starts the SQS emulator"
        );
        let config = shared::adapters::aws_env::load_defaults().await;
        let name = format!("lambda-{}", uuid::Uuid::new_v4());
        let queue = |name: String, url: String| {
            let region = config.region().map(ToString::to_string).unwrap_or_else(|| "us-east-1".to_owned());
            Queue { url, arn: format!("arn:aws:sqs:{region}:123456789012:{name}") }
        };
        let tasks_url = SqsTaskQueue::ensure_queue(&config, &name, NODE_WORKER_TIMEOUT).await.unwrap();
        let webhooks_name = format!("webhooks-{name}");
        let webhooks_url = SqsWebhookQueue::ensure_queue(&config, &webhooks_name, FUNCTION_TIMEOUT).await.unwrap();
        let table = dynamodb().await;
        let table_name = table.table().to_owned();
        let test = TestApp::seeded(App::dynamodb(table, Media::S3(s3_store().await))).await;
        let secret = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        let mut env = aws_environment();
        env.extend(
            [
                ("TABLE_NAME", table_name.as_str()),
                ("MEDIA_BUCKET", &test_bucket_name()),
                ("TASK_QUEUE_URL", &tasks_url),
                ("WEBHOOK_QUEUE_URL", &webhooks_url),
                ("MEDIA_LINK_SECRET", &secret),
                ("PUBLIC_URL", PUBLIC_URL),
                ("TASK_TIMEOUT_SECONDS", "100"),
                ("WEBHOOK_RETRY_DELAYS_MS", "100,200,400"),
                ("WEBHOOK_TIMEOUT_MS", "5000"),
                // The webhook receiver is on this machine (the SSRF guard refuses it).
                ("ALLOW_PRIVATE_URLS", "true"),
            ]
            .map(|(name, value)| (name.to_owned(), value.to_owned())),
        );
        Self {
            test,
            env,
            sqs: aws_sdk_sqs::Client::new(&config),
            tasks: queue(name, tasks_url),
            webhooks: queue(webhooks_name, webhooks_url),
        }
    }

    /// Starts the debug binary of `function` with this deployment's environment.
    async fn start(&self, function: &str, timeout: Duration) -> RunningFunction {
        Function::new(function).envs(&self.env).timeout(timeout).start().await
    }

    /// Starts the arm64 build of `function` under qemu with this deployment's
    /// environment, Lambda's and the media layer's (`arm64`); answers it once it asked
    /// for its first event, with the time that took.
    async fn start_arm64(&self, function: &str, timeout: Duration) -> (RunningFunction, Duration) {
        let layer = arm64::layer();
        let running = Function::new_built(function, arm64::function_binary(function))
            .envs(&self.env)
            .envs(&layer.lambda_environment(true))
            .envs(&layer.tool_environment())
            .timeout(timeout)
            .start()
            .await;
        let init = running
            .ready(FUNCTION_TIMEOUT)
            .await
            .unwrap_or_else(|error| panic!("the arm64 {function} did not start: {error:?}\n{}", running.log_tail()));
        (running, init)
    }

    /// Receives up to ten messages of `queue` as an event source mapping does (leased
    /// for `lease`), waiting up to a second for the first.
    async fn receive(&self, queue: &Queue, lease: Duration) -> Vec<aws_sdk_sqs::types::Message> {
        let received = self
            .sqs
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(lease.as_secs() as i32)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receiving from the SQS emulator");
        received.messages.unwrap_or_default()
    }

    /// Deletes the messages a function handled, as the event source mapping does with
    /// those its batch response did not name.
    async fn delete(&self, queue: &Queue, messages: &[&aws_sdk_sqs::types::Message]) {
        for message in messages {
            let handle = message.receipt_handle().expect("a receipt handle");
            self.sqs.delete_message().queue_url(&queue.url).receipt_handle(handle).send().await.unwrap();
        }
    }
}

/// The test environment's AWS settings, a table name and a bucket name: enough for a
/// function to start (it reads neither before a request needs it).
fn table_and_bucket_environment() -> Vec<(String, String)> {
    aws_environment()
        .into_iter()
        .chain([("TABLE_NAME", "t"), ("MEDIA_BUCKET", "b")].map(|(name, value)| (name.to_owned(), value.to_owned())))
        .collect()
}

/// Sends a request to an HTTP function as API Gateway does, with the bearer `key` when
/// given; answers what API Gateway would return.
async fn request(
    function: &RunningFunction,
    method: Method,
    path_and_query: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> (StatusCode, HeaderMap, Bytes) {
    let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
    let authorization = key.map(|key| format!("Bearer {key}"));
    let mut headers = vec![("content-type", "application/json")];
    headers.extend(authorization.as_deref().map(|value| ("authorization", value)));
    let body = body.map(Value::to_string);
    let event = api_gateway_event(&method, path, query, &headers, body.as_deref());
    http_answer(function.call(&event).await)
}

fn json_body(bytes: &Bytes) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|_| panic!("a JSON body: {}", String::from_utf8_lossy(bytes)))
}

/// The run as `get-run` answers it.
async fn get_run(deployment: &Deployment, function: &RunningFunction, run: &str) -> Value {
    let (status, _, body) =
        request(function, Method::GET, &format!("/agent_run/{run}"), Some(&deployment.test.key), None).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    json_body(&body)
}

/// A record the task worker cannot read, as SQS could deliver it; `body` as given.
fn unreadable_record(body: &str, queue: &Queue) -> (String, Value) {
    let id = uuid::Uuid::new_v4().to_string();
    let record = json!({
        "messageId": id,
        "receiptHandle": format!("bogus-{id}"),
        "body": body,
        "attributes": { "ApproximateReceiveCount": "1", "SentTimestamp": "1767225600000" },
        "messageAttributes": {},
        "md5OfBody": "00000000000000000000000000000000",
        "eventSource": "aws:sqs",
        "eventSourceARN": queue.arn,
        "awsRegion": "us-east-1",
    });
    (id, record)
}

/// Hands the task queue's messages to `node-worker` in SQS batches, as its event source
/// does, until `get-run` says the run ended (bounded). The first batch carries two
/// records that are no task messages: they, and only they, come back as batch item
/// failures. Answers the number of task messages handled.
async fn work_tasks(
    deployment: &Deployment,
    node_worker: &RunningFunction,
    get_run_function: &RunningFunction,
    run: &str,
) -> usize {
    let mut handled = 0;
    let mut bogus_sent = false;
    for _ in 0..200 {
        let messages = deployment.receive(&deployment.tasks, NODE_WORKER_TIMEOUT).await;
        if messages.is_empty() {
            if get_run(deployment, get_run_function, run).await["status"] != "running" {
                assert!(bogus_sent, "the run ended without a task batch");
                return handled;
            }
            continue;
        }
        let mut records: Vec<Value> =
            messages.iter().map(|message| sqs_record(message, &deployment.tasks.arn)).collect();
        let mut bogus = Vec::new();
        if !bogus_sent {
            bogus_sent = true;
            for body in ["\u{1}not JSON at all", r#"{"kind":"not a task message"}"#] {
                let (id, record) = unreadable_record(body, &deployment.tasks);
                bogus.push(id);
                records.push(record);
            }
        }
        let answer = batch_answer(node_worker.call(&sqs_event(records)).await);
        let mut failed: Vec<String> =
            answer.batch_item_failures.iter().map(|failure| failure.item_identifier.clone()).collect();
        failed.sort();
        bogus.sort();
        assert_eq!(failed, bogus, "only the unreadable records fail; every task message succeeds");
        let done: Vec<&aws_sdk_sqs::types::Message> = messages.iter().collect();
        deployment.delete(&deployment.tasks, &done).await;
        handled += messages.len();
    }
    panic!("run {run} did not end\n{}", node_worker.log_tail());
}

/// Hands the webhook queue's messages to `webhook-sender` in SQS batches until the
/// receiver accepted every event up to a RUN_FINISHED (bounded); messages the sender
/// names as failures stay on the queue for their retry.
async fn send_webhooks(deployment: &Deployment, sender: &RunningFunction, receiver: &Receiver) {
    for _ in 0..60 {
        let accepted = receiver.accepted();
        let mut sequences: Vec<u64> = accepted.iter().filter_map(|event| event.body["sequence"].as_u64()).collect();
        sequences.sort_unstable();
        sequences.dedup();
        let finished = accepted.iter().any(|event| event.body["flag"] == "RUN_FINISHED");
        if finished && sequences.last() == Some(&(sequences.len() as u64)) {
            return;
        }
        let messages = deployment.receive(&deployment.webhooks, FUNCTION_TIMEOUT).await;
        if messages.is_empty() {
            continue;
        }
        let records = messages.iter().map(|message| sqs_record(message, &deployment.webhooks.arn)).collect();
        let answer = batch_answer(sender.call(&sqs_event(records)).await);
        let delivered: Vec<&aws_sdk_sqs::types::Message> = messages
            .iter()
            .filter(|message| {
                let id = message.message_id().unwrap_or_default();
                !answer.batch_item_failures.iter().any(|failure| failure.item_identifier == id)
            })
            .collect();
        deployment.delete(&deployment.webhooks, &delivered).await;
    }
    panic!("the webhooks were not all delivered: {:?}\n{}", receiver.accepted().len(), sender.log_tail());
}

/// A whole run through the compiled functions: `start-run` takes the POST, its task
/// messages go to SQS and from there, in batches, to `node-worker` (a partial batch
/// failure names only the unreadable records), the webhook queue's messages to
/// `webhook-sender`, which delivers signed events to a receiver on this machine;
/// `get-run` answers the completed run and `get-media` its output's link, a 302 to the
/// S3 emulator, where ffprobe finds the video the graph makes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_goes_through_the_compiled_functions_as_lambda_runs_them() {
    let deployment = Deployment::new().await;
    let (start_run, node_worker, webhook_sender) = tokio::join!(
        deployment.start("start-run", FUNCTION_TIMEOUT),
        deployment.start("node-worker", NODE_WORKER_TIMEOUT),
        deployment.start("webhook-sender", FUNCTION_TIMEOUT),
    );
    a_run_through(&deployment, &start_run, &node_worker, &webhook_sender).await;
}

/// The same run through the arm64 builds of `start-run`, `node-worker` and
/// `webhook-sender`, as `sam build` makes them (`scripts/build-lambda.sh`), under qemu
/// with Lambda's environment (`arm64`): node-worker probes and renders with the media
/// layer's ffprobe and ffmpeg. The arm64 `whoami` answers the organization's key.
/// Prints each arm64 function's init time (process start to its first
/// `invocation/next`) under qemu, for comparison only: qemu is not a Lambda.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the arm64 functions, the layer and qemu: ./scripts/test.sh builds and runs it (arm64)"]
async fn arm64_functions_make_a_run_with_the_layers_ffmpeg() {
    let deployment = Deployment::new().await;
    let (start_run, node_worker, webhook_sender, whoami) = tokio::join!(
        deployment.start_arm64("start-run", FUNCTION_TIMEOUT),
        deployment.start_arm64("node-worker", NODE_WORKER_TIMEOUT),
        deployment.start_arm64("webhook-sender", FUNCTION_TIMEOUT),
        deployment.start_arm64("whoami", FUNCTION_TIMEOUT),
    );
    for (function, (running, init)) in [
        ("start-run", &start_run),
        ("node-worker", &node_worker),
        ("webhook-sender", &webhook_sender),
        ("whoami", &whoami),
    ] {
        let bytes = std::fs::metadata(arm64::function_binary(function)).map(|metadata| metadata.len()).unwrap_or(0);
        println!(
            "arm64 {function} ({:.1} MB): init {:.0} ms under qemu ({})",
            bytes as f64 / 1e6,
            init.as_secs_f64() * 1000.0,
            running.pid()
        );
    }
    let (status, _, body) = request(&whoami.0, Method::GET, "/whoami", Some(&deployment.test.key), None).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(json_body(&body)["organization_id"], deployment.test.organization.to_string());
    let (status, _, _) = request(&whoami.0, Method::GET, "/whoami", Some("not-a-key"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    a_run_through(&deployment, &start_run.0, &node_worker.0, &webhook_sender.0).await;
}

/// A run of the chain (clip, reframe, speed) started through `start_run`, its tasks
/// worked by `node_worker` and its webhooks sent by `webhook_sender`; `get-run` and
/// `get-media` (this machine's builds) answer the run and its output's link.
async fn a_run_through(
    deployment: &Deployment,
    start_run: &RunningFunction,
    node_worker: &RunningFunction,
    webhook_sender: &RunningFunction,
) {
    let test = &deployment.test;
    let (get_run_function, get_media) =
        tokio::join!(deployment.start("get-run", FUNCTION_TIMEOUT), deployment.start("get-media", FUNCTION_TIMEOUT),);
    let (status, body) = test.call(Method::POST, "/webhooks/secret", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let secret = body["secret"].as_str().unwrap().to_owned();
    let receiver = Receiver::start(Mode::Accept).await;
    let video = upload(test, "video", sample("video.mp4"), None).await;
    let (agent, nodes) = create_agent(test, &chain(), &CHAIN_EDGES).await;

    let start = json!({ "video_ids": [video], "callback_url": receiver.url });
    let (status, _, body) =
        request(start_run, Method::POST, &format!("/agent/{agent}/run"), Some(&test.key), Some(&start)).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let run = json_body(&body)["run_id"].as_str().expect("a run ID").to_owned();

    let handled = work_tasks(deployment, node_worker, &get_run_function, &run).await;
    assert!(handled > 0, "task messages went through node-worker");
    let record = get_run(deployment, &get_run_function, &run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["node_status_counts"], json!({ "completed": 5, "in_progress": 0, "failed": 0 }));
    let outputs = record["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "{record}");
    assert_eq!(outputs[0]["original_node_id"], nodes["out"].as_str());

    send_webhooks(deployment, webhook_sender, &receiver).await;
    let events = receiver.finished_cycles(1).await;
    assert_sequences(&events);
    let flags = flags(&events);
    assert_eq!(flags.first().map(String::as_str), Some("RUN_STARTED"), "{flags:?}");
    assert_eq!(flags.last().map(String::as_str), Some("RUN_FINISHED"), "{flags:?}");
    for event in &events {
        assert_eq!(event.body["run_id"], run.as_str());
        assert_eq!(event.headers["x-service-signature"], secret);
    }
    assert_eq!(events.last().unwrap().body["outputs"][0]["id"], outputs[0]["id"]);
    verify_with_standardwebhooks(&secret, &events);

    // The output's link, signed by get-run and checked by get-media with the secret of
    // their environment: a 302 to a presigned GET of the S3 emulator.
    let link = outputs[0]["video_url"].as_str().unwrap();
    let path = link.strip_prefix(PUBLIC_URL).unwrap_or_else(|| panic!("{link} starts with PUBLIC_URL"));
    let (status, headers, body) = request(&get_media, Method::GET, path, None, None).await;
    assert_eq!(status, StatusCode::FOUND, "{}", String::from_utf8_lossy(&body));
    let location = headers[http::header::LOCATION].to_str().unwrap();
    let probed = fetch_and_probe(location).await;
    assert!((probed.duration - 0.5).abs() <= 0.1, "1 s clip at double speed: {} s", probed.duration);
    assert_eq!((probed.width, probed.height), (136, 240), "9:16 crop of 320x240");
    let tampered = format!("{}{}", &path[..path.len() - 1], if path.ends_with('0') { '1' } else { '0' });
    let (status, _, _) = request(&get_media, Method::GET, &tampered, None, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a changed signature");
}

/// A function that cannot start reports an init error to the Runtime API as Lambda
/// expects (`Lambda-Runtime-Function-Error-Type` and an `errorMessage`/`errorType`
/// body) and exits with a failure code, never asking for an event: without its table
/// name; without a region (functions read their AWS settings from the environment
/// Lambda gives them); with a link secret that is still an unresolved `{{resolve:...}}` reference (its
/// text is in the template: links signed with it could be forged); with a task queue but
/// no link secret; webhook-sender without its queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_that_cannot_start_reports_an_init_error_and_exits() {
    let base = table_and_bucket_environment();
    let queue = "http://127.0.0.1:9/123456789012/tasks";
    let unresolved = "{{resolve:secretsmanager:LinkSecret:SecretString}}";
    // (function, variables set, variables unset, what the error message says)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str], &'a str);
    let cases: [Case; 6] = [
        ("whoami", &[], &["TABLE_NAME"], "TABLE_NAME must be set in a Lambda function"),
        ("whoami", &[], &["AWS_REGION"], "AWS_REGION is not set"),
        ("node-worker", &[("TASK_QUEUE_URL", queue)], &["TABLE_NAME"], "TABLE_NAME must be set in a Lambda function"),
        (
            "get-run",
            &[("TASK_QUEUE_URL", queue), ("MEDIA_LINK_SECRET", unresolved)],
            &[],
            "MEDIA_LINK_SECRET is an unresolved dynamic reference",
        ),
        ("node-worker", &[("TASK_QUEUE_URL", queue)], &[], "MEDIA_LINK_SECRET must be set when TASK_QUEUE_URL is"),
        ("webhook-sender", &[("TASK_QUEUE_URL", queue)], &[], "webhook-sender needs WEBHOOK_QUEUE_URL"),
    ];
    for (function, set, unset, reason) in cases {
        let env: Vec<(String, String)> = base
            .iter()
            .filter(|(name, _)| !unset.contains(&name.as_str()))
            .cloned()
            .chain(set.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())))
            .collect();
        let running = Function::new(function).envs(&env).start().await;
        let (report, status) = running.init_failure(Duration::from_secs(20)).await;
        assert_eq!(report.error_type.as_deref(), Some(CONFIG_INVALID), "{function}: the error type header");
        assert_eq!(report.body["errorType"], CONFIG_INVALID, "{function}: {}", report.body);
        let message = report.body["errorMessage"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{function}: {message}");
        assert!(!message.contains(unresolved), "{function}: the setting's value is not repeated: {message}");
        assert_eq!(status.code(), Some(1), "{function} exits with 1");
        let after = running.invoke(&json!({})).await;
        assert!(matches!(after, Err(InvokeError::Exited { .. })), "{function}: {after:?}");
    }
}

/// The `scheduler` binary, invoked with the event an EventBridge schedule sends, fires
/// the trigger that is due (its state put due a minute ago): one run, started with its
/// first task on the deployment's queue; a second invocation finds nothing due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_binary_fires_a_due_trigger_as_an_eventbridge_schedule_invokes_it() {
    use shared::domain::nodes::{DESTINATION, SCHEDULE_TRIGGER, VIDEO_INPUT};
    let deployment = Deployment::new().await;
    let test = &deployment.test;
    let scheduler = deployment.start("scheduler", FUNCTION_TIMEOUT).await;
    let video = upload(test, "video", sample("video.mp4"), None).await;
    // Yearly: the table is shared with other tests' ticks, which must not find it due.
    let schedule = json!({ "cron": "0 0 1 1 *", "run_request": { "video_ids": [video] } });
    let (_, nodes) = create_agent(
        test,
        &[("tick", SCHEDULE_TRIGGER, schedule), ("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))],
        &[("in", "out")],
    )
    .await;
    let id = shared::domain::graph::AgentNodeId::parse(&nodes["tick"]).unwrap();
    let triggers = test.app.triggers();
    let mut state = triggers.trigger(test.organization, id).await.unwrap().expect("saved with the graph");
    let due = shared::domain::time::Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap();
    (state.next_at, state.version) = (Some(due), state.version + 1);
    assert!(triggers.put_trigger(&state).await.unwrap());

    let event = json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-11-27T00:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/scheduler"],
        "detail": {}
    });
    let answer = scheduler.invoke(&event).await.unwrap_or_else(|error| panic!("{error:?}\n{}", scheduler.log_tail()));
    assert_eq!(answer["triggers"]["started"], 1, "{answer}");
    let fired = triggers.trigger(test.organization, id).await.unwrap().unwrap();
    assert_eq!(fired.last_fired_at, Some(due), "{fired:?}");
    assert!(fired.next_at.is_some_and(|next| next > shared::domain::time::Timestamp::now()), "{fired:?}");
    let messages = deployment.receive(&deployment.tasks, Duration::from_secs(30)).await;
    assert!(!messages.is_empty(), "the run's first task was queued");
    let answer = scheduler.invoke(&event).await.unwrap();
    assert_eq!(answer["triggers"]["due"], 0, "{answer}");
}

/// An event a function cannot read is answered on `invocation/{id}/error` and the
/// function goes on serving; its process ends when the emulator is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_event_is_an_invocation_error_and_the_function_keeps_serving() {
    let env = table_and_bucket_environment();
    let whoami = Function::new("whoami").envs(&env).start().await;
    let answer = whoami.invoke(&json!({ "Records": "not an API Gateway request" })).await;
    let Err(InvokeError::Function { error_type, body }) = answer else {
        panic!("an invocation error: {answer:?}\n{}", whoami.log_tail());
    };
    assert!(error_type.is_some(), "an error type header");
    assert!(body["errorMessage"].is_string(), "{body}");
    let event = api_gateway_event(&Method::GET, "/whoami", "", &[], None);
    let (status, _, body) = http_answer(whoami.call(&event).await);
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{}", String::from_utf8_lossy(&body));
    let process = std::path::PathBuf::from(format!("/proc/{}", whoami.pid()));
    assert!(process.exists());
    drop(whoami);
    assert!(!process.exists(), "the process ended with its emulator");
}

/// The `console` binary answers the console's files with nothing in its environment but
/// what Lambda sets: no table, no bucket, no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_binary_answers_the_embedded_files_with_no_state() {
    let console = Function::new("console").start().await;
    for (path, file) in [("/console", 0), ("/console/console.js", 1), ("/console/console.css", 2)] {
        let event = api_gateway_event(&Method::GET, path, "", &[], None);
        let (status, headers, body) = http_answer(console.call(&event).await);
        assert_eq!(status, StatusCode::OK, "{path}: {}", console.log_tail());
        let expected = &shared::api::console::FILES[file];
        assert_eq!(headers["content-type"], expected.content_type, "{path}");
        assert_eq!(body, expected.body.as_bytes(), "{path}");
    }
    // Gzipped for a browser that takes it: the copy's bytes, base64 in Lambda's answer.
    let event = api_gateway_event(&Method::GET, "/console/console.js", "", &[("accept-encoding", "gzip")], None);
    let (status, headers, body) = http_answer(console.call(&event).await);
    assert_eq!((status, &headers["content-encoding"]), (StatusCode::OK, &"gzip".parse().unwrap()));
    assert_eq!(body, shared::api::console::FILES[1].gzip);
    let event = api_gateway_event(&Method::GET, "/console/missing.js", "", &[], None);
    let (status, _, body) = http_answer(console.call(&event).await);
    assert_eq!((status, json_body(&body)), (StatusCode::NOT_FOUND, json!({ "detail": "Not Found" })));
}

/// Cold starts: for three functions, the time from starting the process to its first
/// `invocation/next`, median of 20 starts, release binaries when built
/// (`cargo build --release -p functions --bin whoami --bin get-run --bin node-worker`;
/// `INIT_TIME_PROFILE=debug` measures the debug ones).
/// A measurement, not a check: `./scripts/test.sh init_time -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run it with --ignored --nocapture"]
async fn init_time_from_process_start_to_first_next() {
    let env: Vec<(String, String)> = aws_environment()
        .into_iter()
        .chain(
            [
                ("TABLE_NAME", "t"),
                ("MEDIA_BUCKET", "b"),
                ("TASK_QUEUE_URL", "http://127.0.0.1:9/123456789012/tasks"),
                ("WEBHOOK_QUEUE_URL", "http://127.0.0.1:9/123456789012/webhooks"),
                ("MEDIA_LINK_SECRET", "a-secret-of-the-measurement"),
                ("PUBLIC_URL", PUBLIC_URL),
            ]
            .map(|(name, value)| (name.to_owned(), value.to_owned())),
        )
        .collect();
    for function in ["whoami", "get-run", "node-worker"] {
        let release = binary_path(function, "release");
        let (binary, profile) = match std::env::var("INIT_TIME_PROFILE").as_deref() {
            Ok("debug") => (debug_binary(function), "debug"),
            _ if release.is_file() => (release, "release"),
            _ => (debug_binary(function), "debug"),
        };
        let mut times = Vec::new();
        for _ in 0..20 {
            let running = Function::new_built(function, binary.clone()).envs(&env).start().await;
            times.push(running.ready(Duration::from_secs(20)).await.expect("the function starts"));
        }
        times.sort();
        let median = (times[9] + times[10]) / 2;
        println!(
            "{function} ({profile}, {} bytes): median {:.1} ms, min {:.1} ms, max {:.1} ms (20 starts)",
            std::fs::metadata(&binary).map(|metadata| metadata.len()).unwrap_or(0),
            median.as_secs_f64() * 1000.0,
            times[0].as_secs_f64() * 1000.0,
            times[19].as_secs_f64() * 1000.0
        );
    }
}

/// A list larger than Lambda returns (6 MB, which the emulator enforces on what the
/// process posts) comes back from the compiled function as a 303 to the whole list in
/// the S3 emulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_larger_than_a_lambda_response_comes_back_from_the_binary_as_a_link() {
    let deployment = Deployment::new().await;
    let test = &deployment.test;
    let list = deployment.start("list-shared-store-entries", FUNCTION_TIMEOUT).await;
    let store = test.create_store("big").await;
    // 26 entries of 255,000 bytes of metadata: 6.6 MB.
    let entries = crate::helpers::large_entries("e", 26, 255_000);
    let path = format!("/shared-stores/{store}/entries");
    let (status, body) = test.call(Method::POST, &format!("{path}/bulk"), Some(json!({ "entries": entries }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, headers, body) = request(&list, Method::GET, &path, Some(&test.key), None).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{}", String::from_utf8_lossy(&body));
    let location = headers[http::header::LOCATION].to_str().unwrap();
    let (status, whole) = crate::helpers::http_get(location).await;
    assert_eq!(status, StatusCode::OK);
    assert!(whole.len() > crate::runtime_emulator::MAX_RESPONSE_BYTES, "{} bytes", whole.len());
    let listed = json_body(&whole);
    assert_eq!(listed["entries"].as_array().unwrap().len(), 26);
}

/// An HTTPS endpoint that answers DynamoDB calls with `{}` (a GetItem that finds nothing)
/// and prints the `X-Amz-Target` and `X-Amz-Security-Token` of each; the first call it
/// reads gets no answer (its connection is closed), as a connection reset mid-call. A
/// Python child process, with a certificate for `localhost` signed by a CA of its own
/// (made with openssl).
struct HttpsEndpoint {
    _child: tokio::process::Child,
    port: u16,
    /// The `X-Amz-Target` and session token of each call received.
    targets: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    ca: std::path::PathBuf,
    _folder: tempfile::TempDir,
}

const HTTPS_ENDPOINT: &str = r#"
import http.server, ssl, sys
calls = []
class Answer(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        print(self.headers.get("x-amz-target"), self.headers.get("x-amz-security-token"), flush=True)
        calls.append(1)
        if len(calls) == 1:
            self.close_connection = True
            return
        body = b"{}"
        self.send_response(200)
        self.send_header("content-type", "application/x-amz-json-1.0")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

impl HttpsEndpoint {
    async fn start() -> Self {
        use tokio::io::AsyncBufReadExt;
        let folder = tempfile::tempdir().unwrap();
        let path = |name: &str| folder.path().join(name).to_str().unwrap().to_owned();
        let openssl = |args: &[&str]| {
            let output = std::process::Command::new("openssl").args(args).output().expect("openssl runs");
            assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        };
        let (ca_key, ca, key, request, certificate, extensions) =
            (path("ca.key"), path("ca.pem"), path("key.pem"), path("req.pem"), path("cert.pem"), path("ext.cnf"));
        std::fs::write(&extensions, "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n").unwrap();
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &ca_key,
            "-out",
            &ca,
            "-days",
            "1",
            "-subj",
            "/CN=test CA",
        ]);
        openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &request, "-subj", "/CN=localhost"]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &request,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &certificate,
            "-days",
            "1",
            "-extfile",
            &extensions,
        ]);
        let mut child = tokio::process::Command::new("python3")
            .args(["-c", HTTPS_ENDPOINT, &certificate, &key])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let port = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await.unwrap().unwrap().unwrap();
        let targets = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = targets.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                seen.lock().unwrap().push(line);
            }
        });
        let port = port.trim().parse().unwrap();
        Self { _child: child, port, targets, ca: folder.path().join("ca.pem"), _folder: folder }
    }
}

/// The SDK clients of a function speak TLS as deployed (reqwest, rustls on ring, the
/// system's root certificates, which `SSL_CERT_FILE` names here): the compiled `whoami`
/// reads an API key from an HTTPS endpoint whose certificate a local CA signed, signing
/// with the session token Lambda gives it. Trusting that CA, the read arrives, its first
/// attempt meets a closed connection and is retried, and the key is not found (401);
/// without it the handshake is refused and the function answers 503, as for any
/// unreachable table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_binaries_reach_aws_over_tls() {
    let endpoint = HttpsEndpoint::start().await;
    let env: Vec<(String, String)> = [
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "local"),
        ("AWS_SECRET_ACCESS_KEY", "local"),
        ("AWS_SESSION_TOKEN", "session-of-the-role"),
        ("TABLE_NAME", "t"),
        ("MEDIA_BUCKET", "b"),
    ]
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .into_iter()
    .chain([("AWS_ENDPOINT_URL_DYNAMODB".to_owned(), format!("https://localhost:{}", endpoint.port))])
    .collect();
    let calls = || endpoint.targets.lock().unwrap().clone();
    let trusted = [("SSL_CERT_FILE".to_owned(), endpoint.ca.to_str().unwrap().to_owned())];
    let whoami = Function::new("whoami").envs(&env).envs(&trusted).timeout(FUNCTION_TIMEOUT).start().await;
    let (status, _, body) = request(&whoami, Method::GET, "/whoami", Some("vw_not_a_key"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{}", String::from_utf8_lossy(&body));
    // The endpoint's output is read by another task: wait for its lines.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while calls().len() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = calls();
    assert_eq!(seen.len(), 2, "a call whose connection closed, then its retry: {seen:?}");
    for call in &seen {
        assert!(call.ends_with(".GetItem session-of-the-role"), "a signed GetItem with the session token: {call}");
    }
    let untrusting = Function::new("whoami").envs(&env).timeout(FUNCTION_TIMEOUT).start().await;
    let (status, _, body) = request(&untrusting, Method::GET, "/whoami", Some("vw_not_a_key"), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{}", String::from_utf8_lossy(&body));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(calls().len(), 2, "no call got through an untrusted handshake");
}

/// `whoami` links what its handler reaches and nothing else: its compiled binary's
/// symbols (read with `nm`) hold DynamoDB's GetItem and no S3 or SQS client code, no
/// SQLite, no STS credential chain, no run worker and no JSON Schema compiler — only,
/// at most, the code that would drop the lazily made clients it never makes.
#[test]
fn whoami_links_only_the_adapters_its_handler_uses() {
    let output = std::process::Command::new("nm")
        .arg("--demangle")
        .arg(debug_binary("whoami"))
        .output()
        .expect("nm (binutils) runs");
    assert!(output.status.success(), "nm: {}", String::from_utf8_lossy(&output.stderr));
    let symbols = String::from_utf8_lossy(&output.stdout);
    let code: Vec<&str> = symbols.lines().filter(|line| !line.contains("drop_in_place")).collect();
    assert!(code.iter().any(|line| line.contains("aws_sdk_dynamodb::operation::get_item")), "the key lookup is there");
    for absent in [
        "aws_sdk_s3::",
        "aws_sdk_sqs::",
        "aws_sdk_sts::",
        "rusqlite::",
        "sqlite3",
        "shared::domain::runs::worker::",
        "jsonschema::",
    ] {
        let found: Vec<&&str> = code.iter().filter(|line| line.contains(absent)).take(3).collect();
        assert!(found.is_empty(), "whoami links {absent}: {found:?}");
    }
}
