//! What `sam local invoke` and `sam local start-api` consume, proven without Docker
//! (issue 38): the committed events (`events/`), the environment (`env.json`) and the
//! seed (`infra/sam-local-seed.json`) are what `sam-events` generates; each event has
//! the fields `sam local generate-event` gives its source; and every event, delivered
//! to its compiled function binary under the Runtime API emulator with the environment
//! `sam local` would give it (the template's variables, `env.json` over them, with
//! `host.docker.internal` as loopback), against the emulators seeded by `serve
//! --prepare-only`, gets the answer its route documents.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use http::StatusCode;
use serde_json::{json, Value};
use shared::api::ROUTES;

use crate::lambda_events::{batch_answer, http_answer, sqs_event, sqs_record};
use crate::openapi::conforms;
use crate::runs::fetch_and_probe;
use crate::runtime_emulator::{binary_path, debug_binary, Function, RunningFunction};
use crate::template::template;
use crate::uploads::{put, sample};
use crate::webhooks::{Mode, Receiver};

/// The names of the local stack's table, bucket and queues in `env.json`.
const STACK: &str = "video-workflow-local";
/// Where `env.json` says a container reaches the emulators.
const DOCKER_HOST: &str = "host.docker.internal";
/// The placeholders of things the seed does not make, as the events carry them.
const PLACEHOLDER: &str = "00000000-0000-4000-8000-0000000000";
/// How long a function may take to answer (debug builds, 2 cores, beside other tests).
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(60);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The committed event of `function`.
fn event(function: &str) -> Value {
    read_json(&workspace().join("events").join(format!("{function}.json")))
}

/// The template's functions: logical ID → (binary, resource).
fn functions(template: &serde_yaml::Value) -> BTreeMap<String, (String, &serde_yaml::Value)> {
    crate::template::functions(template)
        .into_iter()
        .map(|(id, resource)| {
            let binary = resource["Metadata"]["BuildProperties"]["Binary"].as_str().unwrap().to_owned();
            (id, (binary, resource))
        })
        .collect()
}

#[test]
fn the_committed_events_env_json_and_seed_are_the_generated_ones() {
    let out = tempfile::tempdir().unwrap();
    let generator = binary_path("sam-events", "debug");
    assert!(generator.is_file(), "{} is missing: cargo build --workspace --bins", generator.display());
    let run = Command::new(&generator).arg("--out").arg(out.path()).output().unwrap();
    assert!(run.status.success(), "sam-events failed: {}", String::from_utf8_lossy(&run.stderr));
    let names = |folder: &Path| -> BTreeSet<String> {
        std::fs::read_dir(folder)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let generated = names(&out.path().join("events"));
    assert_eq!(names(&workspace().join("events")), generated, "events/ holds exactly the generated events");
    let template = template();
    let binaries: BTreeSet<String> =
        functions(&template).values().map(|(binary, _)| format!("{binary}.json")).collect();
    assert_eq!(generated, binaries, "one event per function of template.yaml");
    let mut stale = Vec::new();
    let files = generated
        .iter()
        .map(|name| format!("events/{name}"))
        .chain(["env.json".into(), "infra/sam-local-seed.json".into()]);
    for file in files {
        let committed = std::fs::read(workspace().join(&file)).unwrap_or_default();
        if committed != std::fs::read(out.path().join(&file)).unwrap() {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "stale: {stale:?}; refresh with `cargo run -q -p integration-tests --bin sam-events` and commit"
    );
    // Every function has its variables in env.json, under its logical ID.
    let env = read_json(&workspace().join("env.json"));
    let ids: BTreeSet<&String> = env.as_object().unwrap().keys().collect();
    let template_functions = functions(&template);
    assert_eq!(ids, template_functions.keys().collect::<BTreeSet<_>>());
}

/// A route that takes a body and has no example is refused, by name, and nothing is
/// written (`SAM_EVENTS_WITHOUT_EXAMPLE` leaves one example out).
#[test]
fn the_generator_refuses_a_route_without_an_example_body() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(binary_path("sam-events", "debug"))
        .arg("--out")
        .arg(out.path())
        .env("SAM_EVENTS_WITHOUT_EXAMPLE", "create-agent")
        .output()
        .unwrap();
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("POST /agent/create (create-agent) takes a body and sam-events has no example of it"),
        "{stderr}"
    );
    assert!(!out.path().join("events").exists(), "nothing written");
}

/// The seed step: `serve --backend aws --prepare-only --seed infra/sam-local-seed.json`
/// with `environment` alone.
fn seed_step(environment: Vec<(String, String)>) -> std::process::Output {
    let data = tempfile::tempdir().unwrap();
    Command::new(debug_binary("serve"))
        .args(["--backend", "aws", "--prepare-only", "--addr", "127.0.0.1:0", "--seed"])
        .arg(workspace().join("infra/sam-local-seed.json"))
        .arg("--data-dir")
        .arg(data.path())
        .env_clear()
        .envs(environment)
        .output()
        .unwrap()
}

/// `serve --prepare-only` prepares emulators only: without an endpoint variable it
/// would make a table and store the repository's key in an AWS account, and refuses.
#[test]
fn the_seed_step_refuses_to_run_against_aws() {
    let environment = [("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL_DYNAMODB", "")];
    let output = seed_step(environment.map(|(name, value)| (name.to_owned(), value.to_owned())).to_vec());
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--prepare-only prepares emulators"), "{stderr}");
}

/// The key paths of a JSON value (`a.b`, arrays by their first item as `a[]`), not
/// descending into maps whose keys are data (headers, parameters).
fn key_paths(value: &Value, prefix: &str, paths: &mut BTreeSet<String>) {
    const DATA_MAPS: [&str; 5] = ["headers", "pathParameters", "queryStringParameters", "stageVariables", "detail"];
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                paths.insert(path.clone());
                if !DATA_MAPS.contains(&key.as_str()) {
                    key_paths(item, &path, paths);
                }
            }
        }
        Value::Array(items) => {
            if let Some(first) = items.first() {
                key_paths(first, &format!("{prefix}[]"), paths);
            }
        }
        _ => {}
    }
}

fn paths_of(value: &Value) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    key_paths(value, "", &mut paths);
    paths
}

fn generate_event(source: &[&str]) -> Value {
    let sam = workspace().join(".local/venv/bin/sam");
    assert!(sam.is_file(), "{} is missing: infra/emulators.sh install (./scripts/test.sh does)", sam.display());
    let output = Command::new(sam)
        .args(["local", "generate-event"])
        .args(source)
        .env("SAM_CLI_TELEMETRY", "0")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn each_event_has_the_fields_sam_local_generate_event_gives_its_source() {
    let http = paths_of(&generate_event(&["apigateway", "http-api-proxy"]));
    let sqs = paths_of(&generate_event(&["sqs", "receive-message"]));
    let scheduled = paths_of(&generate_event(&["cloudwatch", "scheduled-event"]));
    // What API Gateway leaves out of a request without them: no cookies, no stage
    // variables, no authorizer (the functions check the key), no client certificate.
    let optional_http = |path: &String| {
        ["cookies", "stageVariables", "requestContext.authentication", "requestContext.authorizer"]
            .iter()
            .any(|optional| path == optional || path.starts_with(&format!("{optional}.")))
    };
    let template = template();
    for (logical_id, (binary, resource)) in functions(&template) {
        let ours = paths_of(&event(&binary));
        let source = resource["Properties"]["Events"].as_mapping().unwrap().values().next().unwrap()["Type"].clone();
        match source.as_str().unwrap() {
            "HttpApi" => {
                let extra: Vec<&String> = ours.difference(&http).collect();
                assert!(extra.is_empty(), "{binary}: fields API Gateway does not send: {extra:?}");
                let event = event(&binary);
                let mut expected: BTreeSet<String> = http.iter().filter(|path| !optional_http(path)).cloned().collect();
                // Present exactly when the request has them.
                for (field, present) in [
                    ("pathParameters", event["routeKey"].as_str().unwrap().contains('{')),
                    ("queryStringParameters", !event["rawQueryString"].as_str().unwrap().is_empty()),
                    ("body", event["headers"]["content-type"].is_string()),
                ] {
                    if !present {
                        expected.remove(field);
                    }
                }
                let missing: Vec<&String> = expected.difference(&ours).collect();
                assert!(missing.is_empty(), "{binary} ({logical_id}): missing {missing:?}");
            }
            "SQS" => assert_eq!(ours, sqs, "{binary}: an SQS event's fields"),
            "Schedule" => {
                // EventBridge sends `version` ("0"), which SAM's sample leaves out.
                let extra: Vec<&String> = ours.difference(&scheduled).collect();
                assert_eq!(extra, ["version"], "{binary}");
                assert!(scheduled.is_subset(&ours), "{binary}: {scheduled:?}");
            }
            other => panic!("{binary}: an event source without a sample: {other}"),
        }
    }
}

/// The success the route of `function` documents (its first 2xx).
fn success(function: &str) -> StatusCode {
    let document: Value = serde_json::from_str(shared::api::openapi::json()).unwrap();
    let route = ROUTES.iter().find(|route| route.function == function).unwrap();
    let responses = &document["paths"][route.path][route.method.as_str().to_lowercase()]["responses"];
    let code = responses.as_object().unwrap().keys().find(|code| code.starts_with('2')).unwrap();
    StatusCode::from_bytes(code.as_bytes()).unwrap()
}

/// The emulators seeded as `scripts/sam-local.sh` seeds them, and the functions run
/// with the environment `sam local` gives them.
struct Local {
    /// Makes the stack's names this test run's own: `video-workflow-local-<suffix>`.
    stack: String,
    env_json: Value,
    template: serde_yaml::Value,
    running: tokio::sync::Mutex<HashMap<String, Arc<RunningFunction>>>,
    sqs: aws_sdk_sqs::Client,
}

impl Local {
    /// This run's own stack on the emulators, seeded.
    async fn new() -> Self {
        let local = Self::named(format!("{STACK}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])).await;
        local.seed();
        local
    }

    /// The functions as env.json configures them, with the stack's names `stack`.
    async fn named(stack: String) -> Self {
        assert!(
            std::env::var("AWS_ENDPOINT_URL_SQS").is_ok(),
            "AWS_ENDPOINT_URL_SQS is not set: run the tests with ./scripts/test.sh, which starts the emulators"
        );
        let config = shared::adapters::aws_env::load_defaults().await;
        Self {
            stack,
            env_json: read_json(&workspace().join("env.json")),
            template: template(),
            running: Default::default(),
            sqs: aws_sdk_sqs::Client::new(&config),
        }
    }

    /// A variable's value as this machine reaches it: the emulators on loopback, this
    /// run's names, the host's tools for the media layer's.
    fn here(&self, value: &str) -> String {
        let value = value.replace(DOCKER_HOST, "127.0.0.1").replace(STACK, &self.stack);
        match value.strip_prefix("/opt/bin/") {
            Some(tool) => tool.to_owned(),
            None if value.starts_with("/opt/fonts/") => "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf".to_owned(),
            None => value,
        }
    }

    /// The environment `sam local` gives the function `binary`: the template's
    /// variables (Globals, then its own), parameters at their defaults, `env.json` over
    /// them; a variable neither gives is a failure. Then, as a container of this machine
    /// would see them (`here`), with the region and credentials of the developer.
    fn environment(&self, binary: &str) -> Vec<(String, String)> {
        let functions = functions(&self.template);
        let (logical_id, (_, resource)) =
            functions.iter().find(|(_, (name, _))| name == binary).unwrap_or_else(|| panic!("{binary} in template"));
        let globals = self.template["Globals"]["Function"]["Environment"]["Variables"].as_mapping().unwrap().clone();
        let own = resource["Properties"]["Environment"]["Variables"].as_mapping().cloned().unwrap_or_default();
        let mut variables: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in globals.iter().chain(own.iter()) {
            let name = name.as_str().unwrap().to_owned();
            let overridden = &self.env_json[logical_id][&name];
            let value = match (overridden.as_str(), value) {
                (Some(local), _) => local.to_owned(),
                (None, serde_yaml::Value::String(text)) => text.clone(),
                (None, serde_yaml::Value::Number(number)) => number.to_string(),
                (None, serde_yaml::Value::Tagged(tagged)) if tagged.tag == "!Ref" => {
                    let parameter = tagged.value.as_str().unwrap();
                    let default = &self.template["Parameters"][parameter]["Default"];
                    match default {
                        serde_yaml::Value::String(text) => text.clone(),
                        serde_yaml::Value::Number(number) => number.to_string(),
                        other => panic!("{logical_id}'s {name}: !Ref {parameter} has no default ({other:?})"),
                    }
                }
                (None, other) => panic!("{logical_id}'s {name} is {other:?} and env.json gives it no local value"),
            };
            variables.insert(name, value);
        }
        let mut env: Vec<(String, String)> =
            variables.into_iter().map(|(name, value)| (name, self.here(&value))).collect();
        env.extend(
            ["AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
                .iter()
                .filter_map(|name| std::env::var(name).ok().map(|value| ((*name).to_owned(), value))),
        );
        env
    }

    /// `serve --backend aws --prepare-only --seed infra/sam-local-seed.json` with
    /// start-run's environment (it names every resource): the table, the bucket, the
    /// queues of env.json and the organization of the events' key.
    fn seed(&self) {
        let mut environment = self.environment("start-run");
        // The endpoints env.json gives, reached here, are the emulators of this run.
        let endpoint = |name: &str| environment.iter().find(|(known, _)| known == name).unwrap().1.clone();
        let dynamodb = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap();
        assert_eq!(endpoint("AWS_ENDPOINT_URL_DYNAMODB").trim_end_matches('/'), dynamodb.trim_end_matches('/'));
        let sqs = std::env::var("AWS_ENDPOINT_URL_SQS").unwrap();
        assert_eq!(endpoint("AWS_ENDPOINT_URL").trim_end_matches('/'), sqs.trim_end_matches('/'));
        environment.push(("PATH".into(), std::env::var("PATH").unwrap_or_default()));
        let output = seed_step(environment);
        let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "the seed step failed: {log}");
        assert!(log.contains("Prepared:"), "{log}");
    }

    /// The running binary of `function` (started on first use).
    async fn function(&self, function: &str) -> Arc<RunningFunction> {
        let mut running = self.running.lock().await;
        if let Some(started) = running.get(function) {
            return started.clone();
        }
        let timeout = if function == "node-worker" { FUNCTION_TIMEOUT * 2 } else { FUNCTION_TIMEOUT };
        let started =
            Arc::new(Function::new(function).envs(&self.environment(function)).timeout(timeout).start().await);
        running.insert(function.to_owned(), started.clone());
        started
    }

    /// Delivers an HTTP event to `function` and checks the answer: `status`, and a JSON
    /// body as the route documents it for that status. Answers the body.
    async fn expect(&self, function: &str, event: &Value, status: StatusCode) -> Value {
        let running = self.function(function).await;
        let (answered, headers, bytes) = http_answer(running.call(event).await);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        assert_eq!(answered, status, "{function}: {text}\n{}", running.log_tail());
        let json_answer = headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|value| value.to_str().unwrap_or_default().starts_with("application/json"));
        if !json_answer || bytes.is_empty() {
            return Value::String(text);
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("{function}: JSON: {text}"));
        if function != "get-openapi" && ROUTES.iter().any(|route| route.function == function) {
            conforms(function, answered, &body);
        }
        body
    }

    /// Receives up to ten messages of the queue `name` (env.json's, this run's).
    async fn receive(&self, queue: &str) -> (String, Vec<aws_sdk_sqs::types::Message>) {
        let url = format!("{}/123456789012/{}-{queue}", std::env::var("AWS_ENDPOINT_URL_SQS").unwrap(), self.stack);
        let received = self
            .sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(120)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receiving from the SQS emulator");
        (url, received.messages.unwrap_or_default())
    }

    async fn delete(&self, url: &str, messages: &[aws_sdk_sqs::types::Message]) {
        for message in messages {
            self.sqs
                .delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }

    /// Hands the queue's messages to `function` in SQS batches until `done` (bounded).
    /// The first message goes in the committed event, with its body and receipt
    /// (their fields checked to be the committed body's); the rest as the event source
    /// sends them. Answers the number of messages handled.
    async fn drain(&self, function: &str, queue: &str, done: impl AsyncFn() -> bool) -> usize {
        let arn = format!("arn:aws:sqs:us-east-1:123456789012:{}-{queue}", self.stack);
        let mut first = true;
        let mut handled = 0;
        for _ in 0..120 {
            if done().await {
                assert!(!first, "{function}: nothing was queued");
                return handled;
            }
            let (url, messages) = self.receive(queue).await;
            if messages.is_empty() {
                continue;
            }
            let mut records: Vec<Value> = messages.iter().map(|message| sqs_record(message, &arn)).collect();
            // The committed event carries the first message of its kind (a node task for
            // node-worker), whose fields must be the committed message's.
            let committed = event(function);
            let body = |record: &Value| -> Value { serde_json::from_str(record["body"].as_str().unwrap()).unwrap() };
            let template = body(&committed["Records"][0]);
            let same_kind = records.iter().position(|record| body(record)["work"] == template["work"]);
            let batch = if let (true, Some(at)) = (first, same_kind) {
                first = false;
                let fields = |value: &Value| value.as_object().unwrap().keys().cloned().collect::<BTreeSet<_>>();
                let real = body(&records[at]);
                assert_eq!(fields(&template), fields(&real), "{function}: the committed message is one it is sent");
                let mut record = committed["Records"][0].clone();
                for field in ["messageId", "receiptHandle", "body", "md5OfBody", "eventSourceARN"] {
                    record[field] = records[at][field].clone();
                }
                records[at] = record;
                let mut committed = committed;
                committed["Records"] = Value::Array(records);
                committed
            } else {
                sqs_event(records)
            };
            // A message the function names as failed stays for its retry (a webhook not
            // due yet, a task waiting for another), as the event source leaves it.
            let answer = batch_answer(self.function(function).await.call(&batch).await);
            let failed = |message: &&aws_sdk_sqs::types::Message| {
                let id = message.message_id().unwrap_or_default();
                answer.batch_item_failures.iter().any(|failure| failure.item_identifier == id)
            };
            let done: Vec<_> = messages.iter().filter(|message| !failed(message)).cloned().collect();
            self.delete(&url, &done).await;
            handled += done.len();
        }
        panic!(
            "{function}: the queue {queue} did not bring it to the end\n{}",
            self.function(function).await.log_tail()
        );
    }
}

/// The event with path parameters replaced (its path made again from the route key).
fn with_path(mut event: Value, values: &[(&str, &str)]) -> Value {
    for (name, value) in values {
        assert!(event["pathParameters"][name].is_string(), "the event has the path parameter {name}");
        event["pathParameters"][name] = json!(value);
    }
    let route = event["routeKey"].as_str().unwrap().split_once(' ').unwrap().1.to_owned();
    let mut path = route;
    for (name, value) in event["pathParameters"].as_object().cloned().unwrap_or_default() {
        path = path.replace(&format!("{{{name}}}"), value.as_str().unwrap());
    }
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event
}

/// The event with its JSON body's placeholders (or whole fields) replaced.
fn with_body(mut event: Value, change: impl FnOnce(&mut Value)) -> Value {
    let mut body: Value = serde_json::from_str(event["body"].as_str().unwrap()).unwrap();
    change(&mut body);
    let text = body.to_string();
    event["headers"]["content-length"] = json!(text.len().to_string());
    event["body"] = json!(text);
    event
}

fn with_query(mut event: Value, query: &str) -> Value {
    event["rawQueryString"] = json!(query);
    let values: serde_json::Map<String, Value> = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_owned(), json!(value)))
        .collect();
    event["queryStringParameters"] = Value::Object(values);
    event
}

/// Every committed event through its binary, configured by env.json, against the seeded
/// emulators: first each as it is (the routes' documented answers: a thing named by a
/// placeholder is not found; the rest succeed), then, made then addressed as a user of
/// `sam local` does, each event that names something with the IDs the create events
/// answered: a run goes through start-run, node-worker (the first task in the
/// committed event) and webhook-sender (to a receiver here), its output plays through
/// get-media, and every route answers its documented success.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_committed_event_gets_its_documented_answer_from_its_binary_configured_by_env_json() {
    let local = Local::new().await;
    let ok = StatusCode::OK;

    // 1. Each event as committed, in the routes table's order.
    let mut answers: HashMap<&str, Value> = HashMap::new();
    for route in ROUTES.iter() {
        let function = route.function;
        let event = event(function);
        let status = match function {
            // The local billing provider is the sandbox, which takes no Stripe event.
            "stripe-webhook" => StatusCode::BAD_REQUEST,
            // A path (or finalize's body: the upload it finalizes) naming nothing is not
            // found; a body naming nothing else is refused.
            "finalize-upload" => StatusCode::NOT_FOUND,
            _ if event["rawPath"].as_str().unwrap().contains(PLACEHOLDER) => StatusCode::NOT_FOUND,
            _ if event["body"].as_str().is_some_and(|body| body.contains(PLACEHOLDER)) => StatusCode::BAD_REQUEST,
            _ => success(function),
        };
        let body = local.expect(function, &event, status).await;
        answers.insert(function, body);
    }
    assert!(
        answers["stripe-webhook"]["detail"].as_str().unwrap().contains("billing provider is the local sandbox"),
        "{}",
        answers["stripe-webhook"]
    );
    assert_eq!(answers["whoami"]["organization_slug"], "local", "{}", answers["whoami"]);
    for function in ["node-worker", "webhook-sender"] {
        let answer = batch_answer(local.function(function).await.call(&event(function)).await);
        assert!(answer.batch_item_failures.is_empty(), "{function}: a message of no run is done with");
    }
    for function in ["sweeper", "scheduler"] {
        local.function(function).await.call(&event(function)).await;
    }
    let (status, headers, page) = http_answer(local.function("console").await.call(&event("console")).await);
    assert_eq!((status, headers[http::header::CONTENT_ENCODING].to_str().unwrap()), (ok, "gzip"));
    assert!(!page.is_empty());

    // 2. Made, then addressed. Shared stores.
    let store = answers["create-shared-store"]["store"]["id"].as_str().unwrap().to_owned();
    let at_store = |function: &str| with_path(event(function), &[("store_id", &store)]);
    local.expect("rename-shared-store", &at_store("rename-shared-store"), success("rename-shared-store")).await;
    local
        .expect(
            "bulk-upsert-shared-store-entries",
            &at_store("bulk-upsert-shared-store-entries"),
            success("bulk-upsert-shared-store-entries"),
        )
        .await;
    let listed = local
        .expect(
            "list-shared-store-entries",
            &at_store("list-shared-store-entries"),
            success("list-shared-store-entries"),
        )
        .await;
    assert_eq!(listed["entries"].as_array().unwrap().len(), 2, "{listed}");
    local
        .expect("get-shared-store-entry", &at_store("get-shared-store-entry"), success("get-shared-store-entry"))
        .await;
    local
        .expect("put-shared-store-entry", &at_store("put-shared-store-entry"), success("put-shared-store-entry"))
        .await;
    local
        .expect(
            "rename-shared-store-entry",
            &at_store("rename-shared-store-entry"),
            success("rename-shared-store-entry"),
        )
        .await;
    let outro = with_path(at_store("delete-shared-store-entry"), &[("entry_id", "outro-clip")]);
    local.expect("delete-shared-store-entry", &outro, success("delete-shared-store-entry")).await;

    // An upload: its URL answered, the video PUT there, finalized (ffprobe).
    let upload = answers["get-upload-url"].clone();
    let video = upload["id"].as_str().unwrap().to_owned();
    assert_eq!(put(&upload, sample("video.mp4")).await, ok, "the upload URL takes the video");
    let finalize = with_body(event("finalize-upload"), |body| body["id"] = json!(video));
    let finalized = local.expect("finalize-upload", &finalize, success("finalize-upload")).await;
    assert_eq!(finalized["status"], "ready", "{finalized}");
    local.expect("get-upload", &with_path(event("get-upload"), &[("upload_id", &video)]), success("get-upload")).await;
    let uses_video = |event: Value| {
        with_body(event, |body| {
            let text = body.to_string().replace(&format!("{PLACEHOLDER}03"), &video);
            *body = serde_json::from_str(&text).unwrap();
        })
    };

    // Assets, avatars.
    let connection = answers["create-asset-connection"]["connection"]["id"].as_str().unwrap().to_owned();
    let item = with_path(uses_video(event("create-asset-item")), &[("connection_id", &connection)]);
    local.expect("create-asset-item", &item, success("create-asset-item")).await;
    let avatar = local
        .expect("create-avatar-profile", &uses_video(event("create-avatar-profile")), success("create-avatar-profile"))
        .await;
    let avatar = avatar["id"].as_str().unwrap().to_owned();
    local
        .expect(
            "get-avatar-profile",
            &with_path(event("get-avatar-profile"), &[("id", &avatar)]),
            success("get-avatar-profile"),
        )
        .await;

    // Social posts: two, one approved, one rejected.
    let social = answers["create-social-connection"]["social_connection_id"].as_str().unwrap().to_owned();
    // Its media on this machine (a post's media URLs are checked when it is made).
    let folder: &'static Path = Box::leak(tempfile::tempdir().unwrap().keep().into_boxed_path());
    std::fs::write(folder.join("launch.mp4"), sample("video.mp4")).unwrap();
    let media_url = format!("{}/launch.mp4", crate::helpers::folder_server(folder, Duration::ZERO).await);
    let post_event = with_body(event("create-social-post"), |body| {
        body["destinations"][0]["social_connection_id"] = json!(social);
        body["media_urls"] = json!([media_url]);
    });
    let mut posts = Vec::new();
    for _ in 0..2 {
        let post = local.expect("create-social-post", &post_event, success("create-social-post")).await;
        posts.push(post["post_id"].as_str().unwrap().to_owned());
    }
    let at_post = |function: &str, post: &str| with_path(event(function), &[("post_id", post)]);
    let read =
        local.expect("get-social-post", &at_post("get-social-post", &posts[0]), success("get-social-post")).await;
    assert_eq!(read["status"], "pending_approval", "{read}");
    local
        .expect("approve-social-post", &at_post("approve-social-post", &posts[0]), success("approve-social-post"))
        .await;
    local.expect("reject-social-post", &at_post("reject-social-post", &posts[1]), success("reject-social-post")).await;

    // Agents: the graph of the committed update (Video Input → Speed → Destination).
    let agent = answers["create-agent"]["agent_id"].as_str().unwrap().to_owned();
    let at_agent = |function: &str| with_path(event(function), &[("agent_id", &agent)]);
    let updated = local.expect("update-agent", &at_agent("update-agent"), success("update-agent")).await;
    assert_eq!(updated["operations_applied"], 5, "{updated}");
    local.expect("get-agent", &at_agent("get-agent"), success("get-agent")).await;
    local.expect("duplicate-agent", &at_agent("duplicate-agent"), success("duplicate-agent")).await;

    // Runs: one to the end with its webhooks to a receiver here; one cancelled and
    // resumed.
    let receiver = Receiver::start(Mode::Accept).await;
    let start = with_body(uses_video(at_agent("start-run")), |body| body["callback_url"] = json!(receiver.url));
    let mut runs = Vec::new();
    for _ in 0..2 {
        runs.push(local.expect("start-run", &start, success("start-run")).await["run_id"].as_str().unwrap().to_owned());
    }
    let (run, other) = (runs[0].clone(), runs[1].clone());
    let at_run = |function: &str, run: &str| with_path(event(function), &[("run_id", run)]);
    let cancelled = local.expect("cancel-run", &at_run("cancel-run", &other), success("cancel-run")).await;
    assert_eq!(cancelled["success"], true, "{cancelled}");
    local.expect("resume-run", &at_run("resume-run", &other), success("resume-run")).await;
    local.expect("get-run-nodes", &at_run("get-run-nodes", &run), success("get-run-nodes")).await;
    let ended = async |run: &str| {
        let record = local.expect("get-run", &at_run("get-run", run), success("get-run")).await;
        record["status"] != "running"
    };
    let tasks = local.drain("node-worker", "tasks", async || ended(&run).await && ended(&other).await).await;
    assert!(tasks >= 2, "{tasks} task messages");
    let record = local.expect("get-run", &at_run("get-run", &run), success("get-run")).await;
    assert_eq!(record["status"], "completed", "{record}");
    let listed = local.expect("list-agent-runs", &at_agent("list-agent-runs"), success("list-agent-runs")).await;
    assert!(listed.to_string().contains(&run), "{listed}");

    // Its output through get-media: the link get-run signed, a 302 to the S3 emulator.
    let link = record["outputs"][0]["video_url"].as_str().unwrap();
    let (path, query) = link.strip_prefix("http://127.0.0.1:3000").unwrap().split_once('?').unwrap();
    let media = path.strip_prefix("/media/").unwrap();
    let get_media = with_query(with_path(event("get-media"), &[("media_id", media)]), query);
    let (status, headers, _) = http_answer(local.function("get-media").await.call(&get_media).await);
    assert_eq!(status, StatusCode::FOUND);
    let probed = fetch_and_probe(headers[http::header::LOCATION].to_str().unwrap()).await;
    assert!((probed.duration - 1.0).abs() <= 0.15, "2 s at double speed: {} s", probed.duration);

    // Its webhooks: the first message in the committed event, all delivered here.
    local
        .drain("webhook-sender", "webhooks", async || {
            receiver
                .accepted()
                .iter()
                .any(|event| event.body["flag"] == "RUN_FINISHED" && event.body["run_id"] == run.as_str())
        })
        .await;
    let deliveries =
        local.expect("list-run-webhooks", &at_run("list-run-webhooks", &run), success("list-run-webhooks")).await;
    let delivery = deliveries["deliveries"][0]["delivery_id"].as_str().unwrap().to_owned();
    let redeliver = with_path(event("redeliver-run-webhook"), &[("run_id", &run), ("delivery_id", &delivery)]);
    local.expect("redeliver-run-webhook", &redeliver, success("redeliver-run-webhook")).await;

    // Triggers: an agent of a Schedule (its run request the upload) fired by hand.
    let scheduled = local.expect("create-agent", &event("create-agent"), success("create-agent")).await["agent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let graph = with_body(with_path(event("update-agent"), &[("agent_id", &scheduled)]), |body| {
        *body = json!({ "operations": [
            { "op": "create_node", "temp_ref_id": "tick", "node_type_id": shared::domain::nodes::SCHEDULE_TRIGGER.to_string(),
              "params_used": { "cron": "0 0 1 1 *", "run_request": { "video_ids": [video] } } },
            { "op": "create_node", "temp_ref_id": "in", "node_type_id": shared::domain::nodes::VIDEO_INPUT.to_string() },
            { "op": "create_node", "temp_ref_id": "out", "node_type_id": shared::domain::nodes::DESTINATION.to_string() },
            { "op": "create_connection", "source_temp_ref_id": "in", "target_temp_ref_id": "out" },
        ] });
    });
    let made = local.expect("update-agent", &graph, success("update-agent")).await;
    let trigger = made["created_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["temp_ref_id"] == "tick")
        .map(|node| node["agent_node_id"].as_str().unwrap().to_owned())
        .unwrap();
    let at_trigger = |function: &str| with_path(event(function), &[("trigger_id", &trigger)]);
    local.expect("get-trigger", &at_trigger("get-trigger"), success("get-trigger")).await;
    local.expect("fire-trigger", &at_trigger("fire-trigger"), success("fire-trigger")).await;
    local.expect("list-trigger-runs", &at_trigger("list-trigger-runs"), success("list-trigger-runs")).await;

    // What was made, deleted.
    local.expect("delete-agent", &at_agent("delete-agent"), success("delete-agent")).await;
    let social_event = with_path(event("delete-social-connection"), &[("social_connection_id", &social)]);
    local.expect("delete-social-connection", &social_event, success("delete-social-connection")).await;
    local.expect("delete-shared-store", &at_store("delete-shared-store"), success("delete-shared-store")).await;
}

/// `scripts/sam-local.sh --no-build` after the arm64 build: it makes the template of the
/// built functions and seeds env.json's stack (the whoami event then answers the seed's
/// organization); without a Docker daemon it says so and exits 0, with one it goes on
/// through `sam local invoke` and `start-api` (not exercised here: no daemon).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the arm64 functions: ./scripts/test.sh builds them and runs it (arm64)"]
async fn arm64_sam_local_script_seeds_env_json_stack_and_says_when_docker_is_missing() {
    let output = Command::new(workspace().join("scripts/sam-local.sh"))
        .arg("--no-build")
        .env("SERVE", debug_binary("serve"))
        .current_dir(workspace())
        .output()
        .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{log}");
    assert!(log.contains("Prepared:"), "{log}");
    let docker = Command::new("docker").arg("info").output().is_ok_and(|info| info.status.success());
    if docker {
        assert!(log.contains("sam local start-api answered GET /whoami"), "{log}");
    } else {
        assert!(log.contains("no Docker daemon answers here"), "{log}");
        assert!(!log.contains("[sam-local] sam local invoke"), "nothing run without Docker: {log}");
    }
    let made = std::fs::read_to_string(workspace().join(".local/sam-local/template.yaml")).unwrap();
    assert!(made.contains("functions-lambda-test/whoami"), "each function's code is its built folder");
    let local = Local::named(STACK.to_owned()).await;
    let whoami = local.expect("whoami", &event("whoami"), success("whoami")).await;
    assert_eq!(whoami["organization_slug"], "local", "{whoami}");
}
