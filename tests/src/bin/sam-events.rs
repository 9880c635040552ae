//! `sam-events`: what `sam local invoke` and `sam local start-api` need to run the
//! functions of `template.yaml` on one machine, generated from the routes table and the
//! template so that a new route or function gets its event:
//!
//! - `events/<function>.json`: one event per function, in the shape Lambda delivers it:
//!   API Gateway HTTP API payload 2.0 for every route (path and query parameters,
//!   headers with the local API key, the route's example body), an SQS batch for
//!   `node-worker` and `webhook-sender`, EventBridge's scheduled event for `sweeper`
//!   and `scheduler`;
//! - `env.json` (`--env-vars`): each function's variables that name a resource of the
//!   stack, pointed at DynamoDB Local, the S3/SQS emulator (as a container reaches the
//!   host: `host.docker.internal`) and a local link secret;
//! - `infra/sam-local-seed.json`: the organization and API key the events carry, for
//!   `serve --backend aws --prepare-only --seed` (the seed step of `scripts/sam-local.sh`).
//!
//! ```sh
//! cargo run -q -p integration-tests --bin sam-events            # writes events/ and env.json
//! cargo run -q -p integration-tests --bin sam-events -- --out DIR
//! ```
//!
//! A route that takes a body and has no example here, a function whose event source has
//! no event here, or a variable with no local value is refused: nothing is invented.
//! `tests/tests/api/sam_local.rs` checks that the committed files are these, and
//! delivers every event to its compiled binary configured by `env.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::{json, Map, Value};
use serde_yaml::Value as Yaml;
use shared::api::ROUTES;
use shared::core::signing::UrlSigner;
use shared::domain::ids::{OrganizationId, RunId, TaskIndex};
use shared::domain::webhooks::WebhookMessage;
use shared::domain::work::{NodeTask, Work};

/// The organization and API key of the seed (`infra/sam-local-seed.json`), for local
/// use only: every event that needs a key carries this one.
const ORGANIZATION: &str = "5a3710ca-0000-4000-8000-000000000001";
const API_KEY: &str = "vw_10ca100000000000000000000000000000000000000000000000000000000001";
/// The link secret of `env.json`: media links made locally are signed with it.
const LINK_SECRET: &str = "local-only-link-secret-never-deployed-0000000000000000000000000001";
/// The account, API and region the events name (the placeholders `sam local
/// generate-event` uses).
const ACCOUNT: &str = "123456789012";
const API_ID: &str = "abcdef1234";
const REGION: &str = "us-east-1";
/// When every event happened: 2026-12-01T12:00:00Z.
const EPOCH_MS: i64 = 1_796_126_400_000;
const TIME_TEXT: &str = "01/Dec/2026:12:00:00 +0000";
const TIME_ISO: &str = "2026-12-01T12:00:00Z";
/// Where a container reaches the emulators on the host (`scripts/sam-local.sh`).
const HOST: &str = "host.docker.internal";
/// The names of the local stack's table, bucket and queues.
const STACK: &str = "video-workflow-local";

/// The value of each path parameter in the events: placeholders of things the seed does
/// not make. A make-then-address flow (`scripts/sam-local.sh`, the test) puts in the ID a
/// create event answered.
const PATH_VALUES: &[(&str, &str)] = &[
    ("store_id", "00000000-0000-4000-8000-000000000001"),
    ("entry_id", "intro-clip"),
    ("agent_id", "00000000-0000-4000-8000-000000000002"),
    ("kind", "video"),
    ("upload_id", "00000000-0000-4000-8000-000000000003"),
    ("connection_id", "00000000-0000-4000-8000-000000000004"),
    ("id", "00000000-0000-4000-8000-000000000005"),
    ("social_connection_id", "00000000-0000-4000-8000-000000000006"),
    ("post_id", "00000000-0000-4000-8000-000000000007"),
    ("run_id", "00000000-0000-4000-8000-000000000008"),
    ("trigger_id", "00000000-0000-4000-8000-000000000009"),
    ("delivery_id", "00000000-0000-4000-8000-00000000000a"),
    ("media_id", "00000000-0000-4000-8000-00000000000b"),
];

fn path_value(name: &str) -> anyhow::Result<&'static str> {
    PATH_VALUES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, value)| *value)
        .with_context(|| format!("the path parameter {{{name}}} has no value in sam-events' PATH_VALUES: add one"))
}

/// The example body of each route that takes one: a realistic request.
/// `SAM_EVENTS_WITHOUT_EXAMPLE=<function>` leaves one out, for the test of the refusal.
fn example_body(function: &str) -> Option<Value> {
    if std::env::var("SAM_EVENTS_WITHOUT_EXAMPLE").is_ok_and(|left_out| left_out == function) {
        return None;
    }
    let upload = path_value("upload_id").ok()?;
    let connection = path_value("social_connection_id").ok()?;
    Some(match function {
        "create-shared-store" => json!({ "name": "Brand assets" }),
        "rename-shared-store" => json!({ "name": "Brand assets 2027" }),
        "bulk-upsert-shared-store-entries" => json!({ "entries": [
            { "entry_id": "intro-clip", "display_name": "Intro clip", "metadata": { "tone": "upbeat", "seconds": 4 } },
            { "entry_id": "outro-clip", "display_name": "Outro clip", "metadata": { "tone": "calm" } },
        ] }),
        "put-shared-store-entry" => {
            json!({ "display_name": "Intro clip", "metadata": { "tone": "upbeat", "seconds": 4 } })
        }
        "rename-shared-store-entry" => json!({ "entry_id": "intro-clip-v2", "display_name": "Intro clip (v2)" }),
        "create-agent" => json!({ "name": "Vertical highlights", "description": "Doubles the speed of a video" }),
        // Video Input → Speed (2×) → Destination, as the README's tour builds it.
        "update-agent" => json!({ "operations": [
            { "op": "create_node", "temp_ref_id": "in", "node_type_id": "87a28532-ca1d-4652-9a23-a5b9d452e79a" },
            { "op": "create_node", "temp_ref_id": "fast", "node_type_id": "47a6bc12-618b-47a6-b0ad-7b3983640b2d",
              "params_used": { "factor": 2 } },
            { "op": "create_node", "temp_ref_id": "out", "node_type_id": "96600cea-d346-4a43-a262-cc54579cfe1e" },
            { "op": "create_connection", "source_temp_ref_id": "in", "target_temp_ref_id": "fast" },
            { "op": "create_connection", "source_temp_ref_id": "fast", "target_temp_ref_id": "out" },
        ] }),
        "duplicate-agent" => json!({ "name": "Vertical highlights (copy)" }),
        "get-upload-url" => json!({ "content_type": "video/mp4" }),
        "finalize-upload" => json!({ "id": upload }),
        "create-asset-connection" => json!({ "name": "Team footage" }),
        "create-asset-item" => json!({ "name": "Launch keynote", "highres_video_id": upload }),
        "create-avatar-profile" => json!({ "name": "Presenter", "sources": { "video_id": upload } }),
        "create-social-connection" => json!({
            "platform": "youtube",
            "account_name": "Example Studio",
            "account_username": "examplestudio",
            "profile_url": "https://www.youtube.com/@examplestudio",
            "requires_approval": true,
            "publisher": "sandbox",
        }),
        "create-social-post" => json!({
            "description": "Our launch in 30 seconds",
            "destinations": [{ "social_connection_id": connection }],
            "media_urls": ["https://cdn.example.com/launch.mp4"],
        }),
        "upgrade-plan" => json!({
            "plan_id": "professional",
            "success_url": "https://app.example.com/billing/done",
            "cancel_url": "https://app.example.com/billing",
        }),
        "update-credit-settings" => json!({ "auto_topup": { "enabled": true, "threshold": 100, "quantity": 500 } }),
        "stripe-webhook" => json!({
            "id": "evt_1QaZ2bLocal0000000000001",
            "object": "event",
            "api_version": "2024-06-20",
            "created": EPOCH_MS / 1000,
            "type": "checkout.session.completed",
            "livemode": false,
            "data": { "object": {
                "id": "cs_test_local0000000000000001",
                "object": "checkout.session",
                "mode": "subscription",
                "status": "complete",
                "client_reference_id": ORGANIZATION,
                "metadata": { "organization_id": ORGANIZATION, "plan_id": "creator" },
            } },
        }),
        "start-run" => json!({
            "video_ids": [upload],
            "callback_url": "https://hooks.example.com/video-workflow",
        }),
        _ => return None,
    })
}

/// Extra headers of a route's request: Stripe's signature (made when the event was, so a
/// Stripe-keyed deployment refuses it as too old; the local sandbox takes no Stripe
/// event at all).
fn extra_headers(function: &str, body: &str) -> Vec<(&'static str, String)> {
    match function {
        "stripe-webhook" => {
            let timestamp = EPOCH_MS / 1000;
            let signature = hmac_hex(b"whsec_local", format!("{timestamp}.{body}").as_bytes());
            vec![("stripe-signature", format!("t={timestamp},v1={signature}"))]
        }
        _ => Vec::new(),
    }
}

/// HMAC-SHA256 in hex, as Stripe signs `{timestamp}.{body}`.
fn hmac_hex(key: &[u8], message: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    mac.update(message);
    hex::encode(mac.finalize().into_bytes())
}

/// The operations of the OpenAPI document, by function (operation ID).
fn operations() -> anyhow::Result<BTreeMap<String, Value>> {
    let document: Value = serde_json::from_str(shared::api::openapi::json())?;
    let mut operations = BTreeMap::new();
    for methods in document["paths"].as_object().context("the document's paths")?.values() {
        for operation in methods.as_object().into_iter().flat_map(|methods| methods.values()) {
            if let Some(id) = operation["operationId"].as_str() {
                operations.insert(id.to_owned(), operation.clone());
            }
        }
    }
    Ok(operations)
}

/// An API Gateway HTTP API (payload 2.0) event for a request to `path` (a route
/// template's `{name}` filled from `parameters`).
fn http_event(
    method: &str,
    route_path: &str,
    parameters: &Map<String, Value>,
    query: &[(String, String)],
    headers: Vec<(&str, String)>,
    body: Option<String>,
) -> Value {
    let mut path = route_path.to_owned();
    for (name, value) in parameters {
        path = path.replace(&format!("{{{name}}}"), value.as_str().unwrap_or_default());
    }
    let raw_query: Vec<String> = query.iter().map(|(name, value)| format!("{name}={value}")).collect();
    let mut header_map = Map::new();
    header_map.insert("accept".into(), json!("application/json"));
    if let Some(body) = &body {
        header_map.insert("content-length".into(), json!(body.len().to_string()));
        header_map.insert("content-type".into(), json!("application/json"));
    }
    header_map.insert("host".into(), json!(format!("{API_ID}.execute-api.{REGION}.amazonaws.com")));
    header_map.insert("user-agent".into(), json!("curl/8.5.0"));
    header_map.insert("x-amzn-trace-id".into(), json!("Root=1-6b0eb6c0-0123456789abcdef01234567"));
    header_map.insert("x-forwarded-for".into(), json!("203.0.113.10"));
    header_map.insert("x-forwarded-port".into(), json!("443"));
    header_map.insert("x-forwarded-proto".into(), json!("https"));
    for (name, value) in headers {
        header_map.insert(name.to_owned(), json!(value));
    }
    let route_key = format!("{method} {route_path}");
    let mut event = json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": raw_query.join("&"),
        "headers": header_map,
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": API_ID,
            "domainName": format!("{API_ID}.execute-api.{REGION}.amazonaws.com"),
            "domainPrefix": API_ID,
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.10",
                "userAgent": "curl/8.5.0",
            },
            "requestId": "Cq2bFhXLIAMEbXw=",
            "routeKey": route_key,
            "stage": "$default",
            "time": TIME_TEXT,
            "timeEpoch": EPOCH_MS,
        },
        "isBase64Encoded": false,
    });
    if !query.is_empty() {
        let values: Map<String, Value> = query.iter().map(|(name, value)| (name.clone(), json!(value))).collect();
        event["queryStringParameters"] = Value::Object(values);
    }
    if !parameters.is_empty() {
        event["pathParameters"] = Value::Object(parameters.clone());
    }
    if let Some(body) = body {
        event["body"] = json!(body);
    }
    event
}

/// The event of a route of the routes table.
fn route_event(route: &shared::api::routes::Route, operation: &Value) -> anyhow::Result<Value> {
    let function = route.function;
    let mut parameters = Map::new();
    for segment in route.path.split('/') {
        if let Some(name) = segment.strip_prefix('{').and_then(|name| name.strip_suffix('}')) {
            parameters.insert(name.to_owned(), json!(path_value(name)?));
        }
    }
    let takes = |name: &str| {
        operation["parameters"].as_array().into_iter().flatten().any(|p| p["in"] == "query" && p["name"] == name)
    };
    let mut query = Vec::new();
    if takes("limit") {
        query.push(("limit".to_owned(), "20".to_owned()));
    }
    if takes("signature") {
        // A link signed with env.json's secret, good until 2100.
        let path = route.path.replace("{media_id}", path_value("media_id")?);
        let signed = UrlSigner::new(LINK_SECRET.as_bytes()).query("GET", &path, 4_102_444_800);
        for pair in signed.split('&') {
            let (name, value) = pair.split_once('=').context("a signed query")?;
            query.push((name.to_owned(), value.to_owned()));
        }
    }
    let body = match (&operation["requestBody"], example_body(function)) {
        (Value::Null, None) => None,
        (Value::Null, Some(_)) => bail!("{function} takes no body, but sam-events has an example for it"),
        (_, None) => bail!(
            "{} {} ({function}) takes a body and sam-events has no example of it: add one to example_body",
            route.method,
            route.path
        ),
        (_, Some(example)) => Some(serde_json::to_string(&example)?),
    };
    let public = operation["security"].is_null();
    let mut headers = Vec::new();
    if !public {
        headers.push(("authorization", format!("Bearer {API_KEY}")));
    }
    headers.extend(extra_headers(function, body.as_deref().unwrap_or_default()));
    Ok(http_event(route.method.as_str(), route.path, &parameters, &query, headers, body))
}

/// An SQS event of one record with `body`, from the queue `queue` of the stack.
fn sqs_event(queue: &str, body: String) -> Value {
    json!({ "Records": [{
        "messageId": "059f36b4-87a3-44ab-83d2-661975830a7d",
        "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": EPOCH_MS.to_string(),
            "SenderId": "AROAEXAMPLE:start-run",
            "ApproximateFirstReceiveTimestamp": (EPOCH_MS + 2).to_string(),
        },
        "messageAttributes": {},
        "md5OfBody": hex::encode(<md5::Md5 as md5::Digest>::digest(body.as_bytes())),
        "eventSource": "aws:sqs",
        "eventSourceARN": format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}"),
        "awsRegion": REGION,
    }] })
}

/// EventBridge's scheduled event for the rule of `function`.
fn scheduled_event(logical_id: &str) -> Value {
    json!({
        "version": "0",
        "id": "cdc73f9d-aea9-11e3-9d5a-835b769c0d9c",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": TIME_ISO,
        "region": REGION,
        "resources": [format!("arn:aws:events:{REGION}:{ACCOUNT}:rule/{STACK}-{logical_id}")],
        "detail": {},
    })
}

/// The body of a message of the queue `queue_logical_id`.
fn queue_message(function: &str) -> anyhow::Result<(String, &'static str)> {
    let organization = OrganizationId::parse(ORGANIZATION).context("the organization")?;
    let run = RunId::parse(path_value("run_id")?).context("the run")?;
    Ok(match function {
        "node-worker" => (
            serde_json::to_string(&Work::NodeTask(NodeTask {
                organization_id: organization,
                run_id: run,
                task: TaskIndex(0),
                attempt: 1,
                part: None,
            }))?,
            "tasks",
        ),
        "webhook-sender" => (
            serde_json::to_string(&WebhookMessage { organization_id: organization, run_id: run, sequence: 1 })?,
            "webhooks",
        ),
        other => bail!("{other} reads an SQS queue and sam-events has no message for it: add one to queue_message"),
    })
}

/// The local value of a variable the template gives from the stack (a resource, a
/// secret, an address), or one `sam local` needs to reach the emulators.
fn local_value(name: &str) -> Option<String> {
    let emulator = format!("http://{HOST}:15000");
    Some(match name {
        "TABLE_NAME" => STACK.to_owned(),
        "MEDIA_BUCKET" => format!("{STACK}-media"),
        "TASK_QUEUE_URL" => format!("{emulator}/{ACCOUNT}/{STACK}-tasks"),
        "WEBHOOK_QUEUE_URL" => format!("{emulator}/{ACCOUNT}/{STACK}-webhooks"),
        "MEDIA_LINK_SECRET" => LINK_SECRET.to_owned(),
        // `sam local start-api`'s address: media links start with it.
        "PUBLIC_URL" => "http://127.0.0.1:3000".to_owned(),
        "AWS_ENDPOINT_URL" => emulator,
        "AWS_ENDPOINT_URL_DYNAMODB" => format!("http://{HOST}:18000"),
        // Webhooks and URL inputs may reach a receiver on the developer's machine.
        "ALLOW_PRIVATE_URLS" => "true".to_owned(),
        // No Stripe locally: plans and top-ups through the sandbox, and no keys to read.
        "BILLING_PROVIDER" => "sandbox".to_owned(),
        "BILLING_KEYS_SECRET" | "PROVIDER_KEYS_SECRET" => String::new(),
        "SOCIAL_SECRET_PREFIX" => format!("{STACK}/social"),
        _ => return None,
    })
}

/// True for a template value `sam local` can give as it is: text, a number, or a `!Ref`
/// of a parameter (its default).
fn resolvable(value: &Yaml, parameters: &serde_yaml::Mapping) -> bool {
    match value {
        Yaml::String(_) | Yaml::Number(_) | Yaml::Bool(_) => true,
        Yaml::Tagged(tagged) if tagged.tag == "!Ref" => {
            tagged.value.as_str().is_some_and(|name| parameters.contains_key(name))
        }
        _ => false,
    }
}

/// The event of the function `function` (`logical_id` in the template).
fn function_event(
    function: &str,
    logical_id: &str,
    resource: &Yaml,
    operations: &BTreeMap<String, Value>,
) -> anyhow::Result<Value> {
    if let Some(route) = ROUTES.iter().find(|route| route.function == function) {
        let operation = operations.get(function).with_context(|| format!("{function} has no OpenAPI operation"))?;
        return route_event(route, operation);
    }
    let events = resource["Properties"]["Events"].as_mapping().context("Events")?;
    let first = events.values().next().with_context(|| format!("{function} has no event source"))?;
    Ok(match first["Type"].as_str() {
        Some("HttpApi") => {
            let method = first["Properties"]["Method"].as_str().context("Method")?.to_uppercase();
            let path = first["Properties"]["Path"].as_str().context("Path")?;
            if path.contains('{') {
                bail!("{function}'s first path {path} has parameters outside the routes table");
            }
            let headers = vec![("accept", "text/html".to_owned())];
            let mut event = http_event(&method, path, &Map::new(), &[], headers, None);
            event["headers"]["accept-encoding"] = json!("gzip, deflate, br");
            event
        }
        Some("SQS") => {
            let (body, queue) = queue_message(function)?;
            sqs_event(&format!("{STACK}-{queue}"), body)
        }
        Some("Schedule" | "ScheduleV2") => scheduled_event(logical_id),
        other => bail!("{function} ({logical_id}): no event for its source {other:?}"),
    })
}

/// The env.json entry of a function: its variables (Globals', then its own) that need a
/// local value; a variable from the stack without one is refused.
fn local_variables(template: &Yaml, logical_id: &str, resource: &Yaml) -> anyhow::Result<Value> {
    let parameters = template["Parameters"].as_mapping().cloned().unwrap_or_default();
    let globals = template["Globals"]["Function"]["Environment"]["Variables"].as_mapping().cloned().unwrap_or_default();
    let own = resource["Properties"]["Environment"]["Variables"].as_mapping().cloned().unwrap_or_default();
    let mut names: Vec<(String, Yaml)> = Vec::new();
    for (name, value) in globals.iter().chain(own.iter()) {
        let name = name.as_str().context("a variable's name")?.to_owned();
        names.retain(|(known, _)| *known != name);
        names.push((name, value.clone()));
    }
    let mut variables = Map::new();
    for (name, value) in names {
        match local_value(&name) {
            Some(local) => {
                variables.insert(name, json!(local));
            }
            None if resolvable(&value, &parameters) => {}
            None => bail!("{logical_id}'s {name} comes from the stack and sam-events has no local value for it"),
        }
    }
    variables.sort_keys();
    Ok(Value::Object(variables))
}

/// Everything the generator writes: file name (under the output folder) → JSON.
fn generate(root: &Path) -> anyhow::Result<BTreeMap<String, Value>> {
    let text = std::fs::read_to_string(root.join("template.yaml")).context("reading template.yaml")?;
    let template: Yaml = serde_yaml::from_str(&text).context("template.yaml")?;
    let operations = operations()?;
    let mut files = BTreeMap::new();
    let mut env = Map::new();
    for (logical_id, resource) in template["Resources"].as_mapping().context("Resources")? {
        if resource["Type"] != "AWS::Serverless::Function" {
            continue;
        }
        let logical_id = logical_id.as_str().context("a logical ID")?;
        let function = resource["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .with_context(|| format!("{logical_id} has no Metadata.BuildProperties.Binary"))?;
        files.insert(format!("events/{function}.json"), function_event(function, logical_id, resource, &operations)?);
        env.insert(logical_id.to_owned(), local_variables(&template, logical_id, resource)?);
    }
    files.insert("env.json".to_owned(), Value::Object(env));
    files.insert(
        "infra/sam-local-seed.json".to_owned(),
        json!({ "organizations": [{
            "id": ORGANIZATION,
            "name": "Local",
            "slug": "local",
            // A paid plan: auto top-up (update-credit-settings) is one of its features.
            "plan": "creator",
            "credits": 1000,
            "api_keys": [API_KEY],
        }] }),
    );
    Ok(files)
}

fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize()?;
    let mut args = std::env::args().skip(1);
    let out = match (args.next().as_deref(), args.next()) {
        (None, _) => root.clone(),
        (Some("--out"), Some(folder)) => PathBuf::from(folder),
        _ => bail!("usage: sam-events [--out FOLDER]"),
    };
    let files = generate(&root)?;
    let events = out.join("events");
    std::fs::create_dir_all(&events)?;
    // Events of functions that are gone go with them.
    for entry in std::fs::read_dir(&events)? {
        let path = entry?.path();
        let name = format!("events/{}", path.file_name().unwrap_or_default().to_string_lossy());
        if path.extension().is_some_and(|extension| extension == "json") && !files.contains_key(&name) {
            std::fs::remove_file(&path)?;
        }
    }
    for (name, value) in &files {
        if let Some(folder) = out.join(name).parent() {
            std::fs::create_dir_all(folder)?;
        }
        std::fs::write(out.join(name), format!("{}\n", serde_json::to_string_pretty(value)?))?;
    }
    eprintln!("sam-events: wrote {} events, env.json and the seed under {}", files.len() - 2, out.display());
    Ok(())
}
