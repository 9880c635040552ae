//! Measures the shared-store hot paths through `serve` against the raw storage calls
//! that are their floor, from one process in one run:
//!   * GET entry through the API vs. a raw read of the same entry: GetItem (strongly
//!     consistent) on DynamoDB, or a SELECT on serve's own SQLite file;
//!   * bulk upsert of 5,000 new entries through the API, then of the same 5,000 again
//!     (all replacements, which reads the existing ones first), vs. a raw write of the
//!     same 5,000 items: BatchWriteItem (200 requests of 25, as many in flight as the
//!     bulk path uses), or one SQLite transaction of 5,000 INSERTs.
//!
//! Usage: perf --url http://127.0.0.1:3900 --key KEY [--gets 2000] [--bulk-runs 3]
//!             [--sqlite data/state.sqlite]
//! Without `--sqlite` the floor is DynamoDB at the standard AWS settings (`serve
//! --backend aws`); with it, the SQLite file `serve` (embedded backend) uses.
//! `scripts/perf.sh` starts the emulators and both servers, then runs this twice.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use shared::adapters::dynamodb::{keys, AttributeValue, DynamoDb};
use shared::config::Config;
use shared::domain::identity::OrganizationId;
use shared::domain::shared_stores::{EntryId, StoreId};
use shared::domain::time::Timestamp;

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

/// The raw storage calls the API is compared with.
enum Floor {
    DynamoDb(DynamoDb),
    Sqlite(rusqlite::Connection),
}

impl Floor {
    fn name(&self) -> &'static str {
        match self {
            Self::DynamoDb(_) => "raw SDK",
            Self::Sqlite(_) => "raw rusqlite",
        }
    }

    /// Reads one entry the way the backend stores it.
    async fn get(&self, organization: OrganizationId, store: StoreId, entry: &EntryId) -> anyhow::Result<()> {
        match self {
            Self::DynamoDb(dynamodb) => {
                dynamodb
                    .client()
                    .get_item()
                    .table_name(dynamodb.table())
                    .set_key(Some(keys::entry(organization, store, entry)))
                    .consistent_read(true)
                    .send()
                    .await?
                    .item
                    .context("the raw read found the entry")?;
            }
            Self::Sqlite(connection) => {
                let mut statement = connection.prepare_cached(
                    "SELECT entry_id, display_name, metadata, created_at FROM store_entries
                     WHERE organization_id = ?1 AND store_id = ?2 AND entry_id = ?3",
                )?;
                let row: (String, String, String, String) = statement
                    .query_row([organization.to_string(), store.to_string(), entry.as_str().to_owned()], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                    })?;
                anyhow::ensure!(row.0 == entry.as_str(), "the raw read found the entry");
            }
        }
        Ok(())
    }

    /// Writes the same 5,000 items a bulk upsert writes, and returns how long it took.
    async fn bulk(&self, entries: &[Value]) -> anyhow::Result<Duration> {
        let now = Timestamp::now().to_string();
        let text = |entry: &Value, name: &str| entry[name].as_str().unwrap_or_default().to_owned();
        match self {
            Self::DynamoDb(dynamodb) => {
                let partition = format!("PERF#{}", uuid::Uuid::new_v4());
                let requests: Vec<Vec<aws_sdk_dynamodb::types::WriteRequest>> = entries
                    .iter()
                    .map(|entry| {
                        let item = [
                            ("pk", AttributeValue::S(partition.clone())),
                            ("sk", AttributeValue::S(text(entry, "entry_id"))),
                            ("entry_id", AttributeValue::S(text(entry, "entry_id"))),
                            ("display_name", AttributeValue::S(text(entry, "display_name"))),
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
                let (sdk, table) = (dynamodb.client(), dynamodb.table());
                let started = Instant::now();
                stream::iter(requests)
                    .map(|mut chunk| async move {
                        while !chunk.is_empty() {
                            let output = sdk.batch_write_item().request_items(table, chunk).send().await?;
                            chunk = output
                                .unprocessed_items
                                .and_then(|mut tables| tables.remove(table))
                                .unwrap_or_default();
                        }
                        anyhow::Ok(())
                    })
                    .buffer_unordered(8)
                    .try_collect::<Vec<()>>()
                    .await?;
                Ok(started.elapsed())
            }
            Self::Sqlite(connection) => {
                // A store of its own (entries need their store row), written in one
                // transaction as a bulk is, then removed with its entries.
                let (organization, store) = (OrganizationId::new_v4().to_string(), StoreId::new_v4().to_string());
                connection.execute(
                    "INSERT INTO shared_stores (organization_id, id, name, source_type, entry_count, created_at, updated_at)
                     VALUES (?1, ?2, 'perf', 'perf', 0, ?3, ?3)",
                    [&organization, &store, &now],
                )?;
                let started = Instant::now();
                let transaction =
                    rusqlite::Transaction::new_unchecked(connection, rusqlite::TransactionBehavior::Immediate)?;
                {
                    let mut insert = transaction.prepare_cached(
                        "INSERT INTO store_entries (organization_id, store_id, entry_id, display_name, metadata, created_at, updated_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
                    )?;
                    for entry in entries {
                        insert.execute([
                            &organization,
                            &store,
                            &text(entry, "entry_id"),
                            &text(entry, "display_name"),
                            &entry["metadata"].to_string(),
                            &now,
                        ])?;
                    }
                }
                transaction.execute(
                    "UPDATE shared_stores SET entry_count = ?3 WHERE organization_id = ?1 AND id = ?2",
                    rusqlite::params![organization, store, entries.len() as i64],
                )?;
                transaction.commit()?;
                let took = started.elapsed();
                connection.execute(
                    "DELETE FROM shared_stores WHERE organization_id = ?1 AND id = ?2",
                    [&organization, &store],
                )?;
                Ok(took)
            }
        }
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
    let (mut url, mut key, mut gets, mut bulk_runs, mut sqlite) =
        (String::new(), String::new(), 2000usize, 3usize, None::<String>);
    while let Some(flag) = args.next() {
        let value = args.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => url = value,
            "--key" => key = value,
            "--gets" => gets = value.parse()?,
            "--bulk-runs" => bulk_runs = value.parse()?,
            "--sqlite" => sqlite = Some(value),
            other => bail!("unknown flag {other}"),
        }
    }
    anyhow::ensure!(!url.is_empty() && !key.is_empty(), "usage: perf --url URL --key KEY [--sqlite FILE]");
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let api = Api { client: Client::builder(TokioExecutor::new()).build(connector), url, key };
    let floor = match &sqlite {
        Some(path) => {
            let connection = rusqlite::Connection::open(path).with_context(|| format!("opening {path}"))?;
            connection.busy_timeout(Duration::from_secs(10))?;
            Floor::Sqlite(connection)
        }
        None => Floor::DynamoDb(DynamoDb::connect(Config::from_env()?.table_name).await),
    };

    let whoami = api.call("GET", "/whoami", None).await?;
    let organization: OrganizationId = whoami["organization_id"].as_str().context("organization_id")?.parse()?;
    let store = api.call("POST", "/shared-stores", Some(&json!({ "name": "perf-get" }))).await?;
    let store: StoreId = store["store"]["id"].as_str().context("store id")?.parse()?;
    let metadata =
        json!({ "title": "A typical entry", "tags": ["a", "b", "c"], "score": 0.87, "note": "x".repeat(200) });
    let entry = EntryId::parse("item-1").map_err(|error| anyhow::anyhow!("{error:?}"))?;
    let entry_path = format!("/shared-stores/{store}/entries/{entry}");
    api.call("PUT", &entry_path, Some(&json!({ "display_name": "Item", "metadata": metadata }))).await?;

    // Warm both paths (connections, caches, JIT of DynamoDB Local) before measuring.
    let api_get = || async { api.call("GET", &entry_path, None).await.map(|_| ()) };
    let raw_get = || floor.get(organization, store, &entry);
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

    let (mut bulk_api, mut bulk_raw, mut bulk_replace) = (Vec::new(), Vec::new(), Vec::new());
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
        bulk_raw.push(floor.bulk(&bulk_entries("raw")).await?);
    }
    bulk_api.sort();
    bulk_raw.sort();
    bulk_replace.sort();
    let median = |samples: &[Duration]| samples[samples.len() / 2];

    let (api_p50, api_p99) = (percentile(&api_samples, 0.50), percentile(&api_samples, 0.99));
    let (raw_p50, raw_p99) = (percentile(&raw_samples, 0.50), percentile(&raw_samples, 0.99));
    let (hop_p50, hop_p99) = (percentile(&hop_samples, 0.50), percentile(&hop_samples, 0.99));
    let raw = floor.name();
    println!("| measurement | through serve | {raw} | ratio |");
    println!("|---|---|---|---|");
    let row = |what: String, api: Duration, raw: Duration| {
        println!("| {what} | {:.3} ms | {:.3} ms | {:.2}× |", ms(api), ms(raw), ms(api) / ms(raw));
    };
    row(format!("GET entry p50 ({} requests)", api_samples.len()), api_p50, raw_p50);
    row("GET entry p99".to_owned(), api_p99, raw_p99);
    println!(
        "| HTTP round trip to serve without storage (404), p50 / p99 | {:.3} / {:.3} ms | | |",
        ms(hop_p50),
        ms(hop_p99)
    );
    row(format!("GET entry p50 against the HTTP round trip plus the {raw} read"), api_p50, hop_p50 + raw_p50);
    row(format!("bulk upsert of 5,000 new entries, median of {bulk_runs}"), median(&bulk_api), median(&bulk_raw));
    row(
        format!("bulk upsert replacing those 5,000 entries, median of {bulk_runs}"),
        median(&bulk_replace),
        median(&bulk_raw),
    );
    Ok(())
}
