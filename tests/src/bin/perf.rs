//! Measures the shared-store hot paths through `serve --backend aws` against raw SDK
//! calls to the same DynamoDB, from one process in one run:
//!   * GET entry through the API vs. GetItem of the same item (both strongly consistent);
//!   * bulk upsert of 5,000 new entries through the API, then of the same 5,000 again
//!     (all replacements, which reads the existing ones first), vs. BatchWriteItem of the
//!     same 5,000 items (200 requests of 25, as many in flight as the bulk path uses).
//!
//! Usage: perf --url http://127.0.0.1:3900 --key KEY [--gets 2000] [--bulk-runs 3]
//! (scripts/perf.sh starts DynamoDB Local and serve, then runs this.)

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use shared::adapters::dynamodb::{AttributeValue, DynamoDb};
use shared::config::Config;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

struct Api {
    client: HttpClient,
    url: String,
    key: String,
}

impl Api {
    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let body = body.map(|body| Bytes::from(body.to_string())).unwrap_or_default();
        let request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url))
            .header("authorization", format!("Bearer {}", self.key))
            .header("content-type", "application/json")
            .body(Full::new(body))?;
        let response = self.client.request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!("{method} {path}: {status} {}", String::from_utf8_lossy(&bytes));
        }
        Ok(serde_json::from_slice(&bytes)?)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

async fn timed<F, Fut>(count: usize, mut operation: F) -> anyhow::Result<Vec<Duration>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        operation().await?;
        samples.push(started.elapsed());
    }
    samples.sort();
    Ok(samples)
}

fn bulk_entries(prefix: &str) -> Vec<Value> {
    (0..5000)
        .map(|i| json!({ "entry_id": format!("{prefix}-{i:05}"), "display_name": format!("Entry {i}"), "metadata": { "i": i, "tag": "perf" } }))
        .collect()
}

// One thread: the client is not under test, and cross-thread wake-ups on a 2-core
// machine would add noise to both sides.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut url, mut key, mut gets, mut bulk_runs) = (String::new(), String::new(), 2000usize, 3usize);
    while let Some(flag) = args.next() {
        let value = args.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => url = value,
            "--key" => key = value,
            "--gets" => gets = value.parse()?,
            "--bulk-runs" => bulk_runs = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    anyhow::ensure!(!url.is_empty() && !key.is_empty(), "usage: perf --url URL --key KEY");
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let api = Api { client: Client::builder(TokioExecutor::new()).build(connector), url, key };
    let dynamodb = DynamoDb::connect(Config::from_env()?.table_name).await;
    let (sdk, table) = (dynamodb.client().clone(), dynamodb.table().to_owned());

    let whoami = api.call("GET", "/whoami", None).await?;
    let organization = whoami["organization_id"].as_str().context("organization_id")?.to_owned();
    let store = api.call("POST", "/shared-stores", Some(&json!({ "name": "perf-get" }))).await?;
    let store = store["store"]["id"].as_str().context("store id")?.to_owned();
    let metadata =
        json!({ "title": "A typical entry", "tags": ["a", "b", "c"], "score": 0.87, "note": "x".repeat(200) });
    let entry_path = format!("/shared-stores/{store}/entries/item-1");
    api.call("PUT", &entry_path, Some(&json!({ "display_name": "Item", "metadata": metadata }))).await?;

    // Warm both paths (connections, JIT of DynamoDB Local, auth cache) before measuring.
    let api_get = || async { api.call("GET", &entry_path, None).await.map(|_| ()) };
    let raw_get = || async {
        sdk.get_item()
            .table_name(&table)
            .key("pk", AttributeValue::S(format!("ORG#{organization}#STORE#{store}")))
            .key("sk", AttributeValue::S("ENTRY#item-1".into()))
            .consistent_read(true)
            .send()
            .await?
            .item
            .context("the raw read found the entry")?;
        Ok(())
    };
    timed(300, api_get).await?;
    timed(300, raw_get).await?;
    // Alternate one request of each kind, so drift on the machine affects both alike.
    let (mut api_samples, mut raw_samples) = (Vec::with_capacity(gets), Vec::with_capacity(gets));
    for _ in 0..gets {
        api_samples.extend(timed(1, api_get).await?);
        raw_samples.extend(timed(1, raw_get).await?);
    }
    api_samples.sort();
    raw_samples.sort();
    // The floor of any request through serve: authentication and routing, no storage.
    let hop = || async {
        let request = http::Request::builder()
            .uri(format!("{}/no-such-route", api.url))
            .header("authorization", format!("Bearer {}", api.key))
            .body(Full::new(Bytes::new()))?;
        api.client.request(request).await?.into_body().collect().await?;
        Ok(())
    };
    let hop_samples = timed(gets, hop).await?;

    let mut bulk_api = Vec::new();
    let mut bulk_raw = Vec::new();
    let mut bulk_replace = Vec::new();
    for run in 0..bulk_runs {
        let created = api.call("POST", "/shared-stores", Some(&json!({ "name": format!("perf-bulk-{run}") }))).await?;
        let bulk_store = created["store"]["id"].as_str().context("store id")?.to_owned();
        let body = json!({ "entries": bulk_entries("api") });
        let started = Instant::now();
        let result = api.call("POST", &format!("/shared-stores/{bulk_store}/entries/bulk"), Some(&body)).await?;
        bulk_api.push(started.elapsed());
        anyhow::ensure!(result["count"] == 5000, "bulk wrote {}", result["count"]);
        // The same IDs again: every entry is replaced, so the existing ones are read first.
        let started = Instant::now();
        let result = api.call("POST", &format!("/shared-stores/{bulk_store}/entries/bulk"), Some(&body)).await?;
        bulk_replace.push(started.elapsed());
        anyhow::ensure!(result["count"] == 5000, "bulk replaced {}", result["count"]);
        api.call("DELETE", &format!("/shared-stores/{bulk_store}"), None).await?;

        let partition = format!("PERF#{run}#{}", uuid::Uuid::new_v4());
        let now = shared::domain::time::Timestamp::now().to_string();
        let requests: Vec<Vec<aws_sdk_dynamodb::types::WriteRequest>> = bulk_entries("raw")
            .iter()
            .map(|entry| {
                let item = [
                    ("pk", AttributeValue::S(partition.clone())),
                    ("sk", AttributeValue::S(format!("ENTRY#{}", entry["entry_id"].as_str().unwrap_or_default()))),
                    ("entry_id", AttributeValue::S(entry["entry_id"].as_str().unwrap_or_default().to_owned())),
                    ("display_name", AttributeValue::S(entry["display_name"].as_str().unwrap_or_default().to_owned())),
                    ("metadata", AttributeValue::S(entry["metadata"].to_string())),
                    ("created_at", AttributeValue::S(now.clone())),
                    ("updated_at", AttributeValue::S(now.clone())),
                ];
                let put = aws_sdk_dynamodb::types::PutRequest::builder()
                    .set_item(Some(item.into_iter().map(|(name, value)| (name.to_owned(), value)).collect()))
                    .build()?;
                Ok(aws_sdk_dynamodb::types::WriteRequest::builder().put_request(put).build())
            })
            .collect::<anyhow::Result<Vec<_>>>()?
            .chunks(25)
            .map(<[_]>::to_vec)
            .collect();
        let started = Instant::now();
        stream::iter(requests)
            .map(|mut chunk| {
                let (sdk, table) = (&sdk, &table);
                async move {
                    while !chunk.is_empty() {
                        let output = sdk.batch_write_item().request_items(table.as_str(), chunk).send().await?;
                        chunk = output
                            .unprocessed_items
                            .and_then(|mut tables| tables.remove(table.as_str()))
                            .unwrap_or_default();
                    }
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(8)
            .try_collect::<Vec<()>>()
            .await?;
        bulk_raw.push(started.elapsed());
    }
    bulk_api.sort();
    bulk_raw.sort();
    bulk_replace.sort();
    let median = |samples: &[Duration]| samples[samples.len() / 2];

    let (api_p50, api_p99) = (percentile(&api_samples, 0.50), percentile(&api_samples, 0.99));
    let (raw_p50, raw_p99) = (percentile(&raw_samples, 0.50), percentile(&raw_samples, 0.99));
    println!("| measurement | through serve | raw SDK | ratio | goal |");
    println!("|---|---|---|---|---|");
    println!(
        "| GET entry p50 ({} requests) | {:.3} ms | {:.3} ms | {:.2}× | ≤ 1.2× |",
        api_samples.len(),
        ms(api_p50),
        ms(raw_p50),
        ms(api_p50) / ms(raw_p50)
    );
    println!(
        "| GET entry p99 | {:.3} ms | {:.3} ms | {:.2}× | ≤ 1.2× |",
        ms(api_p99),
        ms(raw_p99),
        ms(api_p99) / ms(raw_p99)
    );
    println!(
        "| HTTP round trip to serve without storage (404), p50 / p99 | {:.3} / {:.3} ms | | | |",
        ms(percentile(&hop_samples, 0.50)),
        ms(percentile(&hop_samples, 0.99))
    );
    println!(
        "| bulk upsert of 5,000 new entries, median of {bulk_runs} | {:.0} ms | {:.0} ms | {:.2}× | ≤ 1.5× |",
        ms(median(&bulk_api)),
        ms(median(&bulk_raw)),
        ms(median(&bulk_api)) / ms(median(&bulk_raw))
    );
    println!(
        "| bulk upsert replacing those 5,000 entries, median of {bulk_runs} | {:.0} ms | {:.0} ms | {:.2}× | ≤ 1.5× |",
        ms(median(&bulk_replace)),
        ms(median(&bulk_raw)),
        ms(median(&bulk_replace)) / ms(median(&bulk_raw))
    );
    Ok(())
}
