"""The AWS calls and template work of scripts/deploy.sh, on boto3 and SAM CLI's own
modules (both in the venv that holds `sam`).

  deploy.py template FUNCTIONS OUT       template.yaml with each function's code the folder
                                         its binary was built in, as `sam build` writes it
  deploy.py check STACK [Name=Value ...] the keys the parameters need are given or stored
  deploy.py layer ZIP NAME [BUCKET]      publishes the layer from BUCKET (default: SAM's
                                         managed bucket), or finds the version with the same
                                         content, and prints its ARN
  deploy.py secrets STACK                puts the keys given in the environment into the
                                         stack's secrets

Credentials, region and endpoints come from the environment as boto3 reads them
(AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL, ...). Keys are read from the environment only,
never from arguments (which shells keep in their history).
"""

import base64
import hashlib
import json
import os
import sys
from pathlib import Path

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError
from samcli.commands.exceptions import UserException
from samcli.lib.bootstrap.bootstrap import manage_stack
from samcli.yamlhelper import yaml_dump, yaml_parse

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"

# The keys each secret holds, and the parameter values that need them. A parameter's
# default is the template's.
SECRETS = {
    "BillingKeysSecret": [
        ("STRIPE_API_KEY", "BillingProvider", "stripe"),
        ("STRIPE_WEBHOOK_SECRET", "BillingProvider", "stripe"),
    ],
    "ProviderKeysSecret": [
        ("OPENAI_API_KEY", "ImageProvider", "openai"),
        ("OPENAI_API_KEY", "SpeechProvider", "openai"),
        ("GEMINI_API_KEY", "VideoProvider", "gemini"),
    ],
}


def fail(message):
    print(f"[deploy] {message}", file=sys.stderr)
    sys.exit(1)


def log(message):
    print(f"[deploy] {message}", file=sys.stderr)


def template():
    return yaml_parse(TEMPLATE.read_text())


def functions_template(functions, out):
    """template.yaml as `sam build` leaves it: each cargo-lambda function's code is the
    folder holding its `bootstrap`, and its build metadata is gone."""
    document = template()
    missing = []
    for name, resource in document["Resources"].items():
        metadata = resource.get("Metadata") or {}
        if metadata.get("BuildMethod") != "rust-cargolambda":
            continue
        binary = metadata["BuildProperties"]["Binary"]
        folder = Path(functions) / binary
        if not (folder / "bootstrap").is_file():
            missing.append(binary)
            continue
        resource["Properties"]["CodeUri"] = str(folder.resolve())
        del resource["Metadata"]
    if missing:
        fail(f"not built: {', '.join(missing)} (scripts/build-lambda.sh builds every function)")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(yaml_dump(document))


def parameters(stack, overrides):
    """The parameter values the deploy will have: the template's defaults, the stack's
    values (`sam deploy` keeps a parameter not given), then `Name=Value` overrides."""
    values = {name: str(spec.get("Default", "")) for name, spec in template()["Parameters"].items()}
    try:
        found = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    except ClientError as error:
        if "does not exist" not in str(error):
            raise
        found = {}
    # A stack still in review (a dry run's) was never deployed: `sam deploy` makes it anew.
    held = found.get("Parameters", []) if found.get("StackStatus") != "REVIEW_IN_PROGRESS" else []
    values.update({p["ParameterKey"]: p["ParameterValue"] for p in held if p["ParameterKey"] in values})
    for override in overrides:
        name, _, value = override.partition("=")
        if name not in values:
            fail(f"{name} is no parameter of template.yaml: {', '.join(sorted(values))}")
        values[name] = value
    return values


def stored(stack, secret):
    """The keys the stack's secret holds now (none when the stack does not exist yet)."""
    try:
        resource = boto3.client("cloudformation").describe_stack_resource(StackName=stack, LogicalResourceId=secret)
    except ClientError as error:
        if "does not exist" in str(error):
            return {}
        raise
    arn = resource["StackResourceDetail"]["PhysicalResourceId"]
    value = boto3.client("secretsmanager").get_secret_value(SecretId=arn).get("SecretString") or "{}"
    return {key for key, held in json.loads(value).items() if held}


def check(stack, overrides):
    """Fails, naming them, when keys the parameters need are neither in the environment
    nor already in the stack's secrets; says which account and region the deploy goes to."""
    region = boto3.session.Session().region_name
    if not region:
        fail("no region: give --region, or set AWS_REGION or a profile's region")
    account = boto3.client("sts").get_caller_identity()["Account"]
    log(f"stack {stack} in account {account}, region {region}")
    values = parameters(stack, overrides)
    missing = []
    for secret, keys in SECRETS.items():
        needed = {key: f"{name}={value}" for key, name, value in keys if values[name] == value}
        absent = [key for key in needed if not os.environ.get(key)]
        if absent:
            held = stored(stack, secret)
            missing += [f"{key} (for {needed[key]})" for key in absent if key not in held]
    if missing:
        fail(
            "set in the environment: "
            + ", ".join(missing)
            + ". For a trial without payments or providers: BillingProvider=sandbox (and the local providers, the default)."
        )


def layer(zip_path, name, bucket=None):
    """Publishes the layer from `bucket` (SAM's managed artifacts bucket when none is
    named), once per content: a version whose code has the same SHA-256 is used again."""
    data = Path(zip_path).read_bytes()
    digest = hashlib.sha256(data)
    code_sha = base64.b64encode(digest.digest()).decode()
    client = boto3.client("lambda")
    pages = client.get_paginator("list_layer_versions").paginate(LayerName=name, CompatibleArchitecture="arm64")
    for version in (version for page in pages for version in page.get("LayerVersions", [])):
        held = client.get_layer_version(LayerName=name, VersionNumber=version["Version"])
        if held["Content"].get("CodeSha256") == code_sha:
            log(f"layer {name} version {version['Version']} has this content")
            print(version["LayerVersionArn"])
            return
    bucket = bucket or manage_stack(profile=None, region=boto3.session.Session().region_name)
    key = f"layers/{name}/{digest.hexdigest()}.zip"
    log(f"uploading the layer ({len(data) / 1e6:.1f} MB) to s3://{bucket}/{key}")
    boto3.client("s3").upload_file(str(zip_path), bucket, key)
    published = client.publish_layer_version(
        LayerName=name,
        Description="ffmpeg, ffprobe, espeak-ng and yt-dlp (scripts/build-layer.sh)",
        Content={"S3Bucket": bucket, "S3Key": key},
        CompatibleArchitectures=["arm64"],
        CompatibleRuntimes=["provided.al2023"],
    )
    if published["Content"].get("CodeSha256") != code_sha:
        fail(f"the published layer's SHA-256 is {published['Content'].get('CodeSha256')}, the zip's {code_sha}")
    log(f"published layer {name} version {published['Version']}")
    print(published["LayerVersionArn"])


def secrets(stack):
    """Puts the keys given in the environment into the stack's secrets, keeping the
    others they hold."""
    cloudformation = boto3.client("cloudformation")
    manager = boto3.client("secretsmanager")
    for secret, keys in SECRETS.items():
        given = {key: os.environ[key] for key, _, _ in keys if os.environ.get(key)}
        if not given:
            continue
        resource = cloudformation.describe_stack_resource(StackName=stack, LogicalResourceId=secret)
        arn = resource["StackResourceDetail"]["PhysicalResourceId"]
        value = json.loads(manager.get_secret_value(SecretId=arn).get("SecretString") or "{}")
        value.update(given)
        manager.put_secret_value(SecretId=arn, SecretString=json.dumps(value))
        log(f"{secret}: {', '.join(sorted(given))} stored")


def main(args):
    commands = {
        "template": (2, lambda a: functions_template(a[0], a[1])),
        "check": (1, lambda a: check(a[0], a[1:])),
        "layer": (2, lambda a: layer(*a[:3])),
        "secrets": (1, lambda a: secrets(a[0])),
    }
    if not args or args[0] not in commands or len(args) - 1 < commands[args[0]][0]:
        fail(__doc__)
    try:
        commands[args[0]][1](args[1:])
    except (BotoCoreError, ClientError, ResponseParserError, UserException) as error:
        fail(f"{args[0]}: {error}")


if __name__ == "__main__":
    main(sys.argv[1:])
