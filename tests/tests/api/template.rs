//! `template.yaml` declares exactly the routes table: one function per route with a
//! real binary, the route's method and path, and only the route's DynamoDB actions.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::Value;
use shared::api::ROUTES;

fn repo_file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("reading {}: {error}", path.display()))
}

fn template() -> Value {
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

fn functions(template: &Value) -> BTreeMap<String, &Value> {
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

#[test]
fn every_route_has_exactly_one_function_with_its_binary_event_and_actions() {
    let template = template();
    let functions = functions(&template);
    let binaries = binaries();
    let deployed: Vec<_> = ROUTES.iter().filter(|route| !route.embedded_only).collect();
    assert_eq!(functions.len(), deployed.len(), "one function per route: {:?}", functions.keys());
    for route in deployed.iter().copied() {
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
        let statements = function["Properties"]["Policies"][0]["Statement"].as_sequence().expect("one inline policy");
        let expected_statements = if route.s3_actions.is_empty() { 1 } else { 2 };
        assert_eq!(statements.len(), expected_statements, "{logical_id}: DynamoDB, then S3 if the route uses media");
        let actions = |statement: &Value| -> BTreeSet<String> { strings(&statement["Action"]).into_iter().collect() };
        let wanted = |list: &[&str]| -> BTreeSet<String> { list.iter().map(|action| (*action).to_owned()).collect() };
        assert_eq!(actions(&statements[0]), wanted(route.dynamodb_actions), "{logical_id} grants its DynamoDB actions");
        if let Some(s3) = statements.get(1) {
            assert_eq!(actions(s3), wanted(route.s3_actions), "{logical_id} grants its S3 actions");
            let resources = format!("{:?}", s3["Resource"]);
            assert!(resources.contains("MediaBucket"), "{logical_id}: S3 actions apply to the media bucket only");
            if route.large_responses {
                assert!(
                    resources.contains("/responses/*"),
                    "{logical_id}: large responses are written under responses/ only: {resources}"
                );
            }
        }
    }
    assert_eq!(binaries.len(), deployed.len() + 1, "every binary but serve is a route's function");
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
