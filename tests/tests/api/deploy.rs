//! `scripts/deploy.sh`, as far as a machine without AWS goes: its dry run against moto,
//! which takes CloudFormation change sets, Lambda layers and S3 as AWS does (SAM's
//! transform it does not run), with the arm64 layer and every function built as the test
//! script builds them; and its refusals, each before anything is built or sent.
//! Ignored in the main run, with the arm64 tests (`arm64` in its name): it needs their
//! artifacts.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::arm64::{functions_folder, output_within, workspace};

/// Longest a dry run may take (it zips and sends 62 functions and the layer to moto).
const DEPLOY_LIMIT: Duration = Duration::from_secs(600);

/// The emulator's address as AWS_ENDPOINT_URL for every service. `localhost`, not
/// 127.0.0.1: moto reads the bucket of a change set's template URL from a path-style URL
/// only on a host named so.
fn moto_endpoint() -> String {
    let s3 = std::env::var("AWS_ENDPOINT_URL_S3")
        .expect("AWS_ENDPOINT_URL_S3 is not set: run the tests with ./scripts/test.sh, which starts moto");
    s3.replace("127.0.0.1", "localhost")
}

/// A command with this test run's credentials and region, moto as every service's
/// endpoint, and no key of the environment.
fn with_moto(mut command: Command) -> Command {
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("AWS_ENDPOINT_URL")) {
        command.env_remove(name);
    }
    command.env("AWS_ENDPOINT_URL", moto_endpoint()).env("AWS_DEFAULT_REGION", "us-east-1");
    for key in ["STRIPE_API_KEY", "STRIPE_WEBHOOK_SECRET", "OPENAI_API_KEY", "GEMINI_API_KEY"] {
        command.env_remove(key);
    }
    command.current_dir(workspace());
    command
}

/// `scripts/deploy.sh --dry-run --no-build --functions <functions>` with `args`.
fn deploy(args: &[&str], functions: &Path) -> Output {
    let mut command = with_moto(Command::new(workspace().join("scripts/deploy.sh")));
    command.args(["--dry-run", "--no-build", "--functions"]).arg(functions).args(args);
    output_within(command, DEPLOY_LIMIT)
}

/// Runs Python (the venv with boto3) on moto: `script` gets `sys.argv[1:]` = `args` and
/// prints JSON.
fn python(script: &str, args: &[&str]) -> Value {
    let mut command = with_moto(Command::new(workspace().join(".local/venv/bin/python")));
    command.arg("-c").arg(script).args(args);
    let output = output_within(command, Duration::from_secs(120));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("JSON: {}", String::from_utf8_lossy(&output.stdout)))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// What moto holds of a dry run: the stack's status, its change set's, the parameters
/// the change set has, the functions it adds, the code objects under the stack's prefix,
/// and the layer's versions with their SHA-256.
const DESCRIBE: &str = r#"
import boto3, json, sys
stack, bucket, layer = sys.argv[1:]
cf = boto3.client("cloudformation")
# moto lists every stack's change sets.
summary = [s for s in cf.list_change_sets(StackName=stack)["Summaries"] if s["StackName"] == stack]
change_set = cf.describe_change_set(StackName=stack, ChangeSetName=summary[0]["ChangeSetId"])
lam = boto3.client("lambda")
versions = lam.list_layer_versions(LayerName=layer)["LayerVersions"]
objects = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=stack + "/").get("Contents", [])
print(json.dumps({
    "stack": cf.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"],
    "change_sets": len(summary),
    "status": change_set["Status"],
    "execution": change_set["ExecutionStatus"],
    "parameters": {p["ParameterKey"]: p["ParameterValue"] for p in change_set["Parameters"]},
    "functions": sorted(c["ResourceChange"]["LogicalResourceId"] for c in change_set["Changes"]
                        if c["ResourceChange"]["ResourceType"] == "AWS::Serverless::Function"),
    "code_objects": len(objects),
    "layers": [{"arn": v["LayerVersionArn"], "sha": lam.get_layer_version(LayerName=layer, VersionNumber=v["Version"])["Content"]["CodeSha256"]} for v in versions],
}))
"#;

/// The dry run builds the deploy template from the built functions, publishes the layer
/// from the named bucket, packages every function and creates the stack's change set
/// with the layer's ARN and the parameters given, and executes nothing: the stack stays
/// in review. A second publish of the same layer is the same version. Refused, each before anything is published: a payment provider without its
/// keys, a parameter the template does not have, a function not built.
#[test]
#[ignore = "needs the arm64 functions and layer: ./scripts/test.sh builds and runs it (arm64)"]
fn arm64_deploy_dry_run_publishes_the_layer_once_and_executes_nothing() {
    let functions = functions_folder();
    let layer_zip = workspace().join(".local/layer/ffmpeg-layer-arm64.zip");
    assert!(layer_zip.is_file(), "{} is missing: scripts/build-layer.sh", layer_zip.display());
    let stack = format!("dry-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let bucket = format!("{stack}-artifacts");
    python("import boto3, sys; boto3.client('s3').create_bucket(Bucket=sys.argv[1]); print('{}')", &[&bucket]);

    let refused = deploy(&["--stack", &stack, "--bucket", &bucket], &functions);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains(
            "STRIPE_API_KEY (for BillingProvider=stripe), STRIPE_WEBHOOK_SECRET (for BillingProvider=stripe)"
        ),
        "{}",
        stderr(&refused)
    );
    let refused = deploy(&["--stack", &stack, "Segments=3"], &functions);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("Segments is no parameter of template.yaml"), "{}", stderr(&refused));
    let empty = tempfile::tempdir().unwrap();
    let none_built = empty.path().join("lambda");
    std::fs::create_dir_all(none_built.join("whoami")).unwrap();
    let refused = deploy(&["--stack", &stack, "--bucket", &bucket, "BillingProvider=sandbox"], &none_built);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("not built: ") && stderr(&refused).contains("whoami"), "{}", stderr(&refused));
    let layer = format!("{stack}-media-tools");
    let nothing = python(
        "import boto3, json, sys; print(json.dumps(boto3.client('lambda').list_layer_versions(LayerName=sys.argv[1])['LayerVersions']))",
        &[&layer],
    );
    assert_eq!(nothing, serde_json::json!([]), "a refused deploy published nothing");

    let dry =
        deploy(&["--stack", &stack, "--bucket", &bucket, "BillingProvider=sandbox", "SegmentSeconds=90"], &functions);
    let log = format!("{}{}", String::from_utf8_lossy(&dry.stdout), stderr(&dry));
    assert!(dry.status.success(), "{log}");
    assert!(log.contains("Changeset created successfully"), "{log}");
    let held = python(DESCRIBE, &[&stack, &bucket, &layer]);
    assert_eq!(held["stack"], "REVIEW_IN_PROGRESS", "nothing executed: {held}");
    assert_eq!((held["change_sets"].as_u64(), held["status"].as_str()), (Some(1), Some("CREATE_COMPLETE")), "{held}");
    assert_eq!(held["execution"], "AVAILABLE", "{held}");
    let layers = held["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{held}");
    let parameters = &held["parameters"];
    assert_eq!(parameters["FfmpegLayerArn"], layers[0]["arn"], "{held}");
    assert_eq!(
        (parameters["BillingProvider"].as_str(), parameters["SegmentSeconds"].as_str()),
        (Some("sandbox"), Some("90"))
    );
    let template = std::fs::read_to_string(workspace().join("template.yaml")).unwrap();
    let declared = template.matches("BuildMethod: rust-cargolambda").count();
    assert_eq!(held["functions"].as_array().unwrap().len(), declared, "every function is in the change set: {held}");
    // Each function's code is its own object (the binaries differ), and the template.
    assert!(held["code_objects"].as_u64().unwrap() as usize > declared, "{held}");
    let sha = Command::new("sha256sum").arg(&layer_zip).output().unwrap();
    let hex = String::from_utf8_lossy(&sha.stdout).split_whitespace().next().unwrap().to_owned();
    let expected =
        python("import base64, sys; print('\"%s\"' % base64.b64encode(bytes.fromhex(sys.argv[1])).decode())", &[&hex]);
    assert_eq!(layers[0]["sha"], expected, "the published layer is the zip");

    // The same layer again: the version published above, nothing new.
    let mut again = with_moto(Command::new(workspace().join(".local/venv/bin/python")));
    again.arg("scripts/deploy.py").arg("layer").arg(&layer_zip).arg(&layer).arg(&bucket);
    let again = output_within(again, Duration::from_secs(120));
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), layers[0]["arn"].as_str().unwrap());
    assert_eq!(python(DESCRIBE, &[&stack, &bucket, &layer])["layers"].as_array().unwrap().len(), 1);
}
