//! `template.yaml` declares exactly the routes table: one function per route with a
//! real binary, the route's method and path, and only the route's DynamoDB actions.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::Value;
use shared::api::ROUTES;

fn repo_file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("reading {}: {error}", path.display()))
}

pub(crate) fn template() -> Value {
    serde_yaml::from_str(&repo_file("template.yaml")).expect("template.yaml is YAML")
}

/// `[[bin]]` names of the functions package.
fn binaries() -> BTreeSet<String> {
    let manifest = repo_file("functions/Cargo.toml");
    let mut names = BTreeSet::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin {
            if let Some(name) = line.strip_prefix("name = ") {
                names.insert(name.trim_matches('"').to_owned());
            }
        }
    }
    names
}

pub(crate) fn functions(template: &Value) -> BTreeMap<String, &Value> {
    template["Resources"]
        .as_mapping()
        .expect("Resources")
        .iter()
        .filter(|(_, resource)| resource["Type"] == "AWS::Serverless::Function")
        .map(|(name, resource)| (name.as_str().unwrap().to_owned(), resource))
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_sequence()
        .map(|items| items.iter().filter_map(|item| item.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The statements of a function's inline policy, checked against what it performs:
/// DynamoDB on the table, then S3 on the media bucket and SQS on `queues` when used.
fn check_policy(logical_id: &str, function: &Value, dynamodb: &[&str], s3: &[&str], sqs: &[&str], queues: &[&str]) {
    if dynamodb.is_empty() && s3.is_empty() && sqs.is_empty() {
        assert!(function["Properties"]["Policies"].is_null(), "{logical_id} performs nothing and is granted nothing");
        return;
    }
    let statements = function["Properties"]["Policies"][0]["Statement"].as_sequence().expect("one inline policy");
    let expected = 1 + usize::from(!s3.is_empty()) + usize::from(!sqs.is_empty());
    assert_eq!(statements.len(), expected, "{logical_id}: DynamoDB, then S3 and SQS if used");
    let actions = |statement: &Value| -> BTreeSet<String> { strings(&statement["Action"]).into_iter().collect() };
    let wanted = |list: &[&str]| -> BTreeSet<String> { list.iter().map(|action| (*action).to_owned()).collect() };
    assert_eq!(actions(&statements[0]), wanted(dynamodb), "{logical_id} grants its DynamoDB actions");
    assert!(format!("{:?}", statements[0]["Resource"]).contains("Table"), "{logical_id}: on the table only");
    let mut rest = statements[1..].iter();
    if !s3.is_empty() {
        let statement = rest.next().unwrap();
        assert_eq!(actions(statement), wanted(s3), "{logical_id} grants its S3 actions");
        let resources = format!("{:?}", statement["Resource"]);
        assert!(resources.contains("MediaBucket"), "{logical_id}: S3 actions apply to the media bucket only");
    }
    if !sqs.is_empty() {
        let statement = rest.next().unwrap();
        assert_eq!(actions(statement), wanted(sqs), "{logical_id} grants its SQS actions");
        let resources = format!("{:?}", statement["Resource"]);
        for queue in ["TaskQueue", "WebhookQueue"] {
            assert_eq!(
                resources.contains(&format!("\"{queue}")),
                queues.contains(&queue),
                "{logical_id}: SQS actions apply to {queues:?} only: {resources}"
            );
        }
        let variables = &function["Properties"]["Environment"]["Variables"];
        for (queue, variable) in [("TaskQueue", "TASK_QUEUE_URL"), ("WebhookQueue", "WEBHOOK_QUEUE_URL")] {
            if queues.contains(&queue) {
                assert!(format!("{:?}", variables[variable]).contains(queue), "{logical_id}: {variable} names {queue}");
            }
        }
    }
}

#[test]
fn every_route_has_exactly_one_function_with_its_binary_event_and_actions() {
    let template = template();
    let functions = functions(&template);
    let binaries = binaries();
    // Every route's function, node-worker, webhook-sender, sweeper, scheduler and console.
    assert_eq!(functions.len(), ROUTES.len() + 5, "one function per route: {:?}", functions.keys());
    for route in ROUTES.iter() {
        let (logical_id, function) = functions
            .iter()
            .find(|(_, function)| function["Metadata"]["BuildProperties"]["Binary"] == route.function)
            .unwrap_or_else(|| panic!("no function builds binary {}", route.function));
        assert!(binaries.contains(route.function), "{} is not a [[bin]] of functions/Cargo.toml", route.function);
        assert_eq!(function["Metadata"]["BuildMethod"], "rust-cargolambda", "{logical_id}");
        let events: Vec<&Value> = function["Properties"]["Events"].as_mapping().expect("Events").values().collect();
        assert_eq!(events.len(), 1, "{logical_id} has one event");
        let event = &events[0];
        assert_eq!(event["Type"], "HttpApi", "{logical_id}");
        assert_eq!(event["Properties"]["Method"], route.method.as_str(), "{logical_id}");
        assert_eq!(event["Properties"]["Path"], route.path, "{logical_id}");
        check_policy(logical_id, function, route.dynamodb_actions, route.s3_actions, route.sqs_actions, route.queues);
        let main = std::fs::read_to_string(format!(
            "{}/../functions/src/bin/{}.rs",
            env!("CARGO_MANIFEST_DIR"),
            route.function
        ))
        .unwrap_or_else(|error| panic!("{}: {error}", route.function));
        assert_eq!(
            main.contains("shared::runtime::http::run_parking("),
            route.large_responses,
            "{}: a binary parks large responses (run_parking) exactly when its route may answer them",
            route.function
        );
        if route.large_responses {
            let resources = format!("{:?}", function["Properties"]["Policies"][0]["Statement"][1]["Resource"]);
            assert!(
                resources.contains("/responses/*"),
                "{logical_id}: large responses are written under responses/ only: {resources}"
            );
        }
        let engine_routes = [
            "start-run",
            "get-run",
            "get-run-nodes",
            "cancel-run",
            "resume-run",
            "list-agent-runs",
            "list-runs",
            "get-media",
            "list-run-webhooks",
            "redeliver-run-webhook",
            "fire-trigger",
            "list-trigger-runs",
        ];
        if engine_routes.contains(&route.function) {
            let variables = &function["Properties"]["Environment"]["Variables"];
            for name in ["TASK_QUEUE_URL", "MEDIA_LINK_SECRET", "PUBLIC_URL"] {
                assert!(!variables[name].is_null(), "{logical_id} has the engine's {name}");
            }
        }
    }
    assert_eq!(
        binaries.len(),
        ROUTES.len() + 7,
        "every binary but serve, openapi, node-worker, webhook-sender, sweeper, scheduler and console is a route's \
         function"
    );
}

#[test]
fn the_console_function_answers_its_paths_with_no_key_no_state_and_no_policy() {
    let template = template();
    let functions = functions(&template);
    assert!(binaries().contains("console"));
    let (logical_id, console) = functions
        .iter()
        .find(|(_, function)| function["Metadata"]["BuildProperties"]["Binary"] == "console")
        .expect("a function builds console");
    check_policy(logical_id, console, &[], &[], &[], &[]);
    let mut routes: Vec<(String, String)> = console["Properties"]["Events"]
        .as_mapping()
        .expect("Events")
        .values()
        .map(|event| {
            assert_eq!(event["Type"], "HttpApi", "{logical_id}");
            assert!(event["Properties"]["Auth"].is_null(), "{logical_id}: the console's files take no key");
            let text = |field: &str| event["Properties"][field].as_str().unwrap().to_owned();
            (text("Method"), text("Path"))
        })
        .collect();
    routes.sort();
    assert_eq!(routes, [("GET".to_owned(), "/console".to_owned()), ("GET".to_owned(), "/console/{proxy+}".to_owned())]);
    // No route of the API is the console's: `serve` answers `/console` before the API.
    assert!(ROUTES.iter().all(|route| shared::api::console::path_of(route.path).is_none()));
    assert!(format!("{:?}", template["Outputs"]["ConsoleUrl"]).contains("/console"));
}

#[test]
fn node_worker_takes_the_task_queue_with_partial_failures_a_dlq_and_room_for_ffmpeg() {
    use shared::runtime::sqs::{
        NODE_WORKER, NODE_WORKER_DYNAMODB_ACTIONS, NODE_WORKER_PART_ACTIONS, NODE_WORKER_QUEUES,
        NODE_WORKER_S3_ACTIONS, NODE_WORKER_SQS_ACTIONS,
    };
    let template = template();
    let functions = functions(&template);
    assert!(binaries().contains(NODE_WORKER));
    let (logical_id, worker) = functions
        .iter()
        .find(|(_, function)| function["Metadata"]["BuildProperties"]["Binary"] == NODE_WORKER)
        .expect("a function builds node-worker");
    let properties = &worker["Properties"];
    check_policy(
        logical_id,
        worker,
        NODE_WORKER_DYNAMODB_ACTIONS,
        NODE_WORKER_S3_ACTIONS,
        NODE_WORKER_SQS_ACTIONS,
        NODE_WORKER_QUEUES,
    );
    assert!(
        format!("{:?}", properties_of(worker)["Environment"]["Variables"]["PUBLIC_URL"]).contains("execute-api"),
        "webhook payloads built here carry links to the API even without a PublicUrl"
    );
    let events: Vec<&Value> = properties["Events"].as_mapping().expect("Events").values().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["Type"], "SQS");
    assert!(format!("{:?}", events[0]["Properties"]["Queue"]).contains("TaskQueue"));
    assert_eq!(strings(&events[0]["Properties"]["FunctionResponseTypes"]), ["ReportBatchItemFailures"]);
    // Parts of long edits: their length and how many are made at once are parameters.
    assert!(format!("{:?}", events[0]["Properties"]["ScalingConfig"]["MaximumConcurrency"])
        .contains("NodeWorkerConcurrency"));
    let parameters = &template["Parameters"];
    assert_eq!(parameters["NodeWorkerConcurrency"]["Default"].as_u64(), Some(30));
    assert!(parameters["NodeWorkerConcurrency"]["MinValue"].as_u64() >= Some(2), "SQS's least MaximumConcurrency");
    assert!(format!("{:?}", properties_of(worker)["Environment"]["Variables"]["SEGMENT_SECONDS"])
        .contains("SegmentSeconds"));
    assert_eq!(parameters["SegmentSeconds"]["Default"].as_u64(), Some(shared::config::DEFAULT_SEGMENT_SECONDS));
    let timeout = properties["Timeout"].as_u64().expect("Timeout");
    assert!(properties["MemorySize"].as_u64().unwrap() >= 2048, "ffmpeg needs memory and the CPU that comes with it");
    assert!(properties["EphemeralStorage"]["Size"].as_u64().unwrap() >= 4096, "scratch room for media");
    assert!(format!("{:?}", properties["Layers"]).contains("FfmpegLayerArn"), "the ffmpeg layer");
    let variables = &properties["Environment"]["Variables"];
    let task_budget = variables["TASK_TIMEOUT_SECONDS"].as_u64().expect("TASK_TIMEOUT_SECONDS");
    assert!(task_budget + 30 <= timeout, "a task's media work is stopped before the function times out");
    let queue = &template["Resources"]["TaskQueue"]["Properties"];
    assert!(queue["VisibilityTimeout"].as_u64().unwrap() >= 6 * timeout, "visibility ≥ 6× the function's timeout");
    assert!(format!("{:?}", queue["RedrivePolicy"]["deadLetterTargetArn"]).contains("TaskDeadLetterQueue"));
    assert!(queue["RedrivePolicy"]["maxReceiveCount"].as_u64().unwrap() >= 1);
    assert_eq!(template["Resources"]["LinkSecret"]["Type"], "AWS::SecretsManager::Secret");
    assert!(format!("{:?}", variables["MEDIA_LINK_SECRET"]).contains("resolve:secretsmanager"));
    // The local generation providers' font and speech come from the layer.
    for (name, path) in [("GENERATION_FONT", "/opt/fonts/DejaVuSans.ttf"), ("ESPEAK_PATH", "/opt/bin/espeak-ng")] {
        assert_eq!(variables[name].as_str(), Some(path), "{name}");
    }
    // The providers' keys: read from one secret, by a policy of its own granting that
    // alone; never a variable of any function.
    assert!(format!("{:?}", variables["PROVIDER_KEYS_SECRET"]).contains("ProviderKeysSecret"));
    assert_eq!(template["Resources"]["ProviderKeysSecret"]["Type"], "AWS::SecretsManager::Secret");
    let policies = properties["Policies"].as_sequence().unwrap();
    assert_eq!(policies.len(), 5, "the table, bucket and queues' policy, each secret's and the parts'");
    // The files of parts: deleted after their join, by a policy granting that on their
    // prefix alone; the bucket's lifecycle removes the versions a deletion hides.
    let parts = policies[3]["Statement"].as_sequence().unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(strings(&parts[0]["Action"]), NODE_WORKER_PART_ACTIONS);
    let prefix = shared::domain::runs::parts::PARTS_PREFIX;
    let resource = format!("{:?}", parts[0]["Resource"]);
    assert!(resource.contains(&format!("\"${{MediaBucket.Arn}}/{prefix}*\"")), "on the parts' prefix only: {resource}");
    let rules = template["Resources"]["MediaBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
        .as_sequence()
        .expect("lifecycle rules");
    let rule = rules.iter().find(|rule| rule["Id"].as_str() == Some("expire-deleted-parts")).expect("the parts' rule");
    assert_eq!(rule["Prefix"].as_str(), Some(prefix));
    assert_eq!(rule["NoncurrentVersionExpiration"]["NoncurrentDays"].as_u64(), Some(1));
    assert!(rule["ExpirationInDays"].is_null(), "the parts of a run left for a resume stay");
    let secret = policies[1]["Statement"].as_sequence().unwrap();
    assert_eq!(secret.len(), 1);
    assert_eq!(strings(&secret[0]["Action"]), ["secretsmanager:GetSecretValue"]);
    assert_eq!(
        format!("{:?}", secret[0]["Resource"]),
        format!("{:?}", properties["Environment"]["Variables"]["PROVIDER_KEYS_SECRET"])
    );
    // The billing provider's keys: the functions that pay or take payments' events read
    // them from their secret, by a policy granting that alone.
    assert_eq!(template["Resources"]["BillingKeysSecret"]["Type"], "AWS::SecretsManager::Secret");
    for name in ["NodeWorkerFunction", "UpgradePlanFunction", "StripeWebhookFunction"] {
        let properties = &functions[name]["Properties"];
        let variables = &properties["Environment"]["Variables"];
        assert!(format!("{:?}", variables["BILLING_KEYS_SECRET"]).contains("BillingKeysSecret"), "{name}");
        assert!(format!("{:?}", variables["BILLING_PROVIDER"]).contains("BillingProvider"), "{name}");
        let policies = properties["Policies"].as_sequence().unwrap();
        let secret = policies.last().unwrap()["Statement"].as_sequence().unwrap();
        assert_eq!(secret.len(), 1, "{name}");
        assert_eq!(strings(&secret[0]["Action"]), ["secretsmanager:GetSecretValue"], "{name}");
        assert_eq!(format!("{:?}", secret[0]["Resource"]), format!("{:?}", variables["BILLING_KEYS_SECRET"]), "{name}");
    }
    // The social connections' credentials: one secret each under the stack's social/
    // prefix; made by the connection's create, read by what publishes or refreshes posts.
    let social = |name: &str, actions: &[&str]| {
        let properties = &functions[name]["Properties"];
        let granted = properties["Policies"].as_sequence().unwrap().iter().any(|policy| {
            let statements = policy["Statement"].as_sequence().unwrap();
            statements.len() == 1
                && strings(&statements[0]["Action"]) == actions
                && format!("{:?}", statements[0]["Resource"]).contains("${AWS::StackName}/social/*")
        });
        assert!(granted, "{name} is granted {actions:?} on the social secrets alone");
        if name != "GetSocialPostFunction" {
            let prefix = format!("{:?}", properties["Environment"]["Variables"]["SOCIAL_SECRET_PREFIX"]);
            assert!(prefix.contains("${AWS::StackName}/social"), "{name}: {prefix}");
        }
    };
    // node-worker keeps a refreshed access token; a create refused past the cap deletes
    // the secret it made; a delete deletes the connection's.
    social("NodeWorkerFunction", &["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"]);
    social("GetSocialPostFunction", &["secretsmanager:GetSecretValue"]);
    social("CreateSocialConnectionFunction", &["secretsmanager:CreateSecret", "secretsmanager:DeleteSecret"]);
    social("DeleteSocialConnectionFunction", &["secretsmanager:DeleteSecret"]);
    for (name, function) in &functions {
        let variables = &function["Properties"]["Environment"]["Variables"];
        for key in ["OPENAI_API_KEY", "GEMINI_API_KEY", "STRIPE_API_KEY", "STRIPE_WEBHOOK_SECRET"] {
            assert!(variables[key].is_null(), "{name} has {key} as a plain variable");
        }
    }
}

fn properties_of(function: &Value) -> &Value {
    &function["Properties"]
}

#[test]
fn webhook_sender_takes_the_webhook_queue_with_partial_failures_a_dlq_and_room_for_its_retries() {
    use shared::domain::webhooks::WebhookSchedule;
    use shared::runtime::sqs::{WEBHOOK_SENDER, WEBHOOK_SENDER_DYNAMODB_ACTIONS, WEBHOOK_SENDER_SQS_ACTIONS};
    let template = template();
    let functions = functions(&template);
    assert!(binaries().contains(WEBHOOK_SENDER));
    let (logical_id, sender) = functions
        .iter()
        .find(|(_, function)| function["Metadata"]["BuildProperties"]["Binary"] == WEBHOOK_SENDER)
        .expect("a function builds webhook-sender");
    check_policy(
        logical_id,
        sender,
        WEBHOOK_SENDER_DYNAMODB_ACTIONS,
        &[],
        WEBHOOK_SENDER_SQS_ACTIONS,
        &["WebhookQueue"],
    );
    let properties = properties_of(sender);
    let events: Vec<&Value> = properties["Events"].as_mapping().expect("Events").values().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["Type"], "SQS");
    assert!(format!("{:?}", events[0]["Properties"]["Queue"]).contains("WebhookQueue"));
    assert_eq!(strings(&events[0]["Properties"]["FunctionResponseTypes"]), ["ReportBatchItemFailures"]);
    let timeout = properties["Timeout"].as_u64().expect("Timeout");
    let schedule = WebhookSchedule::default();
    assert!(schedule.timeout.as_secs() + 10 <= timeout, "an attempt's 10 s fit the function's timeout");
    let variables = &properties["Environment"]["Variables"];
    assert!(format!("{:?}", variables["WEBHOOK_QUEUE_URL"]).contains("WebhookQueue"));
    assert!(format!("{:?}", variables["PUBLIC_URL"]).contains("execute-api"));
    let queue = &template["Resources"]["WebhookQueue"]["Properties"];
    assert!(queue["VisibilityTimeout"].as_u64().unwrap() >= 6 * timeout, "visibility ≥ 6× the function's timeout");
    assert!(format!("{:?}", queue["RedrivePolicy"]["deadLetterTargetArn"]).contains("WebhookDeadLetterQueue"));
    // Every scheduled retry is a receive: the DLQ is for messages the sender cannot handle.
    let receives = queue["RedrivePolicy"]["maxReceiveCount"].as_u64().unwrap();
    assert!(receives > 2 * (schedule.retries.len() as u64 + 1), "maxReceiveCount {receives}");
    // SQS hides a message at most 12 hours: every retry delay fits.
    assert!(schedule.retries.iter().all(|delay| delay.as_secs() <= 12 * 3600));
}

#[test]
fn a_bulk_lease_and_its_writes_fit_inside_the_function_timeout() {
    use shared::adapters::dynamodb::{LEASE, WRITE_WINDOW};
    use shared::core::retry::{AWS_SDK_CALLS, FUNCTION_BUDGET, REQUEST_BUDGET};
    let template = template();
    let timeout = std::time::Duration::from_secs(template["Globals"]["Function"]["Timeout"].as_u64().expect("Timeout"));
    // A store left by a killed function is free again before a waiter's function times out.
    assert!(LEASE + std::time::Duration::from_secs(3) <= timeout, "lease {LEASE:?}, timeout {timeout:?}");
    // The last write starts inside the window and ends within one SDK call's budget,
    // inside the lease.
    assert!(WRITE_WINDOW + AWS_SDK_CALLS.budget < LEASE);
    // Every request gives up retrying well before the function times out, and a large
    // answer is stored (or refused) before it does too.
    assert!(REQUEST_BUDGET + std::time::Duration::from_secs(5) <= timeout);
    assert!(REQUEST_BUDGET < FUNCTION_BUDGET && FUNCTION_BUDGET < timeout);
    let lifecycle = format!("{:?}", template["Resources"]["MediaBucket"]["Properties"]["LifecycleConfiguration"]);
    assert!(lifecycle.contains("responses/"), "large responses expire: {lifecycle}");
}

#[test]
fn functions_run_on_arm64_al2023_and_every_reference_resolves() {
    let template = template();
    let globals = &template["Globals"]["Function"];
    assert_eq!(globals["Runtime"], "provided.al2023");
    assert_eq!(strings(&globals["Architectures"]), ["arm64"]);
    assert_eq!(globals["Handler"], "bootstrap");
    let mut known: BTreeSet<String> =
        ["AWS::Region", "AWS::URLSuffix", "AWS::AccountId", "AWS::StackName", "AWS::Partition", "AWS::NoValue"]
            .into_iter()
            .map(str::to_owned)
            .collect();
    for section in ["Resources", "Parameters", "Conditions"] {
        known.extend(template[section].as_mapping().unwrap().keys().map(|key| key.as_str().unwrap().to_owned()));
    }
    let mut references = Vec::new();
    collect_references(&template, &mut references);
    assert!(references.len() > ROUTES.len(), "references were found: {references:?}");
    for reference in references {
        assert!(known.contains(&reference), "reference to unknown {reference}");
    }
}

fn collect_references(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Tagged(tagged) => {
            let text = tagged.value.as_str().unwrap_or_default();
            match tagged.tag.to_string().as_str() {
                "!Ref" => found.push(text.to_owned()),
                "!GetAtt" => found.push(text.split('.').next().unwrap_or_default().to_owned()),
                "!Sub" => {
                    for piece in text.split("${").skip(1) {
                        found.push(
                            piece
                                .split('}')
                                .next()
                                .unwrap_or_default()
                                .split('.')
                                .next()
                                .unwrap_or_default()
                                .to_owned(),
                        );
                    }
                }
                // The first argument of `!If` names a condition.
                "!If" => found.extend(
                    tagged
                        .value
                        .as_sequence()
                        .and_then(|items| items.first())
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                ),
                // Arguments are references and literals, collected below.
                "!Not" | "!Equals" => {}
                other => panic!("unexpected tag {other}"),
            }
            collect_references(&tagged.value, found);
        }
        Value::Mapping(mapping) => mapping.values().for_each(|value| collect_references(value, found)),
        Value::Sequence(items) => items.iter().for_each(|value| collect_references(value, found)),
        _ => {}
    }
}

#[test]
fn the_sweeper_runs_every_minute_with_the_sweep_index_and_least_privilege() {
    use shared::runtime::schedule::{SWEEPER, SWEEPER_DYNAMODB_ACTIONS, SWEEPER_QUEUES, SWEEPER_SQS_ACTIONS};
    let template = template();
    let functions = functions(&template);
    assert!(binaries().contains(SWEEPER));
    let (logical_id, sweeper) = functions
        .iter()
        .find(|(_, function)| function["Metadata"]["BuildProperties"]["Binary"] == SWEEPER)
        .expect("a function builds sweeper");
    check_policy(logical_id, sweeper, SWEEPER_DYNAMODB_ACTIONS, &[], SWEEPER_SQS_ACTIONS, SWEEPER_QUEUES);
    let resources = format!("{:?}", sweeper["Properties"]["Policies"][0]["Statement"][0]["Resource"]);
    assert!(resources.contains("/index/sweep"), "the sweep index may be queried: {resources}");
    let events: Vec<&Value> = sweeper["Properties"]["Events"].as_mapping().expect("Events").values().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["Type"], "Schedule");
    assert_eq!(events[0]["Properties"]["Schedule"], "rate(1 minute)");
    let index = &template["Resources"]["Table"]["Properties"]["GlobalSecondaryIndexes"][0];
    assert_eq!(index["IndexName"], shared::adapters::dynamodb::keys::SWEEP_INDEX);
    assert_eq!(index["Projection"]["ProjectionType"], "KEYS_ONLY");
    let variables = &sweeper["Properties"]["Environment"]["Variables"];
    for name in ["TASK_QUEUE_URL", "MEDIA_LINK_SECRET", "PUBLIC_URL"] {
        assert!(!variables[name].is_null(), "{logical_id} has the engine's {name}");
    }
}

#[test]
fn the_scheduler_ticks_every_minute_with_the_sweep_index_and_least_privilege() {
    use shared::runtime::schedule::{SCHEDULER, SCHEDULER_DYNAMODB_ACTIONS, SCHEDULER_QUEUES, SCHEDULER_SQS_ACTIONS};
    let template = template();
    let functions = functions(&template);
    assert!(binaries().contains(SCHEDULER));
    let (logical_id, scheduler) = functions
        .iter()
        .find(|(_, function)| function["Metadata"]["BuildProperties"]["Binary"] == SCHEDULER)
        .expect("a function builds scheduler");
    check_policy(logical_id, scheduler, SCHEDULER_DYNAMODB_ACTIONS, &[], SCHEDULER_SQS_ACTIONS, SCHEDULER_QUEUES);
    let resources = format!("{:?}", scheduler["Properties"]["Policies"][0]["Statement"][0]["Resource"]);
    assert!(resources.contains("/index/sweep"), "the due items of the sweep index may be queried: {resources}");
    let events: Vec<&Value> = scheduler["Properties"]["Events"].as_mapping().expect("Events").values().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["Type"], "Schedule");
    assert_eq!(events[0]["Properties"]["Schedule"], "rate(1 minute)");
    assert_eq!(scheduler["Properties"]["ReservedConcurrentExecutions"], 1, "ticks never overlap");
    assert!(scheduler["Properties"]["Timeout"].as_u64().unwrap() > 150 + 100, "a tick's budget and a last fire fit");
    let variables = &scheduler["Properties"]["Environment"]["Variables"];
    for name in ["TASK_QUEUE_URL", "WEBHOOK_QUEUE_URL", "MEDIA_LINK_SECRET", "PUBLIC_URL", "YT_DLP_PATH"] {
        assert!(!variables[name].is_null(), "{logical_id} has the engine's {name}");
    }
    // A fire, and a trigger's check when saved, read video sites' pages as a start does.
    for binary in ["fire-trigger", "update-agent", "start-run"] {
        let (_, function) = functions
            .iter()
            .find(|(_, function)| function["Metadata"]["BuildProperties"]["Binary"] == binary)
            .unwrap_or_else(|| panic!("a function builds {binary}"));
        assert_eq!(function["Properties"]["Environment"]["Variables"]["YT_DLP_PATH"], "/opt/bin/yt-dlp", "{binary}");
    }
}

/// Uploads never finalized expire after a day: the lifecycle rule matches what the
/// presigned PUT tags (`upload=pending`, under `uploads/`), and finalize retags the sealed
/// version out of it.
#[test]
fn uploads_never_finalized_expire_after_a_day() {
    use shared::adapters::s3::{PENDING_UPLOAD_TAG, UPLOAD_TAG_KEY};
    use shared::domain::identity::OrganizationId;
    use shared::domain::uploads::UploadId;
    let template = template();
    let rules = template["Resources"]["MediaBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
        .as_sequence()
        .expect("lifecycle rules");
    let rule = rules.iter().find(|rule| rule["Id"].as_str() == Some("expire-unfinalized-uploads")).expect("the rule");
    assert_eq!(rule["Status"].as_str(), Some("Enabled"));
    assert_eq!(rule["Prefix"].as_str(), Some("uploads/"));
    assert_eq!(
        shared::domain::uploads::Upload::object_key(OrganizationId::new_v4(), UploadId::new_v4()).split('/').next(),
        Some("uploads"),
        "uploads are PUT under the rule's prefix"
    );
    let tags = rule["TagFilters"].as_sequence().expect("tag filters");
    assert_eq!(tags.len(), 1);
    let (key, value) = PENDING_UPLOAD_TAG.split_once('=').unwrap();
    assert_eq!((tags[0]["Key"].as_str(), tags[0]["Value"].as_str()), (Some(key), Some(value)));
    assert_eq!(key, UPLOAD_TAG_KEY);
    assert_eq!(rule["ExpirationInDays"].as_u64(), Some(1));
    assert_eq!(rule["NoncurrentVersionExpiration"]["NoncurrentDays"].as_u64(), Some(1));
}

#[test]
fn no_deployed_function_lifts_the_ssrf_guard() {
    let template = template();
    // Declared "false" in Globals, for sam local's env.json to override, and nowhere else.
    let globals = &template["Globals"]["Function"]["Environment"]["Variables"];
    assert_eq!(globals["ALLOW_PRIVATE_URLS"].as_str(), Some("false"));
    for name in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"] {
        assert_eq!(globals[name].as_str(), Some(""), "{name} is empty (unset) on AWS");
    }
    for (logical_id, function) in functions(&template) {
        let variables = &function["Properties"]["Environment"]["Variables"];
        assert!(variables["ALLOW_PRIVATE_URLS"].is_null(), "{logical_id} lets URLs reach private addresses");
        for name in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"] {
            assert!(variables[name].is_null(), "{logical_id} sets {name}: only env.json does, for sam local");
        }
    }
}
