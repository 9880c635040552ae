//! Test harness: a fresh organization per test on SQLite (a new database file per test)
//! or DynamoDB Local, and requests through the same router `serve` uses.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::adapters::dynamodb::DynamoDb;
use shared::adapters::fs::LocalBlobStore;
use shared::adapters::s3::S3BlobStore;
use shared::adapters::sqlite::Sqlite;
use shared::api::{self, Body};
use shared::app::{App, Media};
use shared::domain::identity::{apply_seed, OrganizationId, Seed, SeedOrganization};
use uuid::Uuid;

/// Which storage backend a conformance test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded backend: SQLite in a file of its own.
    Sqlite,
    DynamoDb,
}

/// Runs each listed test function once per backend.
#[macro_export]
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Sqlite).await
                }
            )*
        }
        mod dynamodb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::DynamoDb).await
                }
            )*
        }
    };
}

/// Sends the service's warnings and errors (or what `RUST_LOG` asks for) to the test's
/// captured output, so that a failing test shows why the service failed.
pub fn capture_logs() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    });
}

/// A turn of its own on DynamoDB Local for a test that loads it heavily: fills a store to
/// its 10,000-entry limit, or races many writers against the service's own deadlines
/// (bulk leases, a 64-task fan-out's conflicting transactions). DynamoDB Local is one
/// process on the test machine's cores, shared by every test running at once; two such
/// tests together on a slow machine made single calls outlast the SDK's 8 s budget, so
/// these take turns while lighter tests go on beside them. `None` on SQLite.
pub async fn alone_on_dynamodb(backend: Backend) -> Option<tokio::sync::MutexGuard<'static, ()>> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    match backend {
        Backend::DynamoDb => Some(TURN.lock().await),
        Backend::Sqlite => None,
    }
}

/// The DynamoDB Local table of this test run; the test script sets both variables.
pub async fn dynamodb() -> DynamoDb {
    assert!(
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_ok(),
        "AWS_ENDPOINT_URL_DYNAMODB is not set: run the tests with ./scripts/test.sh, which starts DynamoDB Local"
    );
    let table = std::env::var("TEST_TABLE_NAME").unwrap_or_else(|_| "tests".to_owned());
    let dynamodb = DynamoDb::connect(table).await;
    dynamodb.ensure_table().await.expect("creating the test table in DynamoDB Local");
    dynamodb
}

/// A new SQLite database in a file of its own (the folder is kept until the process
/// ends, so a test can reopen it).
pub fn sqlite() -> Sqlite {
    let folder = tempfile::tempdir().expect("temporary folder").keep();
    Sqlite::open(folder.join("state.sqlite")).expect("opening a test database")
}

/// Media in a new temporary folder (kept until the process ends), with URLs for a
/// server at `base_url`.
pub fn local_media(base_url: &str) -> (Media, Arc<LocalBlobStore>) {
    let folder = tempfile::tempdir().expect("temporary folder").keep();
    let store = Arc::new(LocalBlobStore::open(folder, base_url).expect("media folder"));
    (Media::Local(store.clone()), store)
}

/// Media in one temporary folder shared by the tests that do not fetch URLs (keys start
/// with each test's own organization, so they never meet).
pub fn temp_media() -> Media {
    static SHARED: std::sync::OnceLock<Media> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| local_media("http://127.0.0.1:9").0).clone()
}

/// Media in the S3 emulator's test bucket; the test script sets the endpoint.
pub async fn s3_media() -> Media {
    Media::S3(s3_store().await)
}

/// The S3 emulator's test bucket, created (versioned) when missing.
pub async fn s3_store() -> S3BlobStore {
    assert!(
        std::env::var("AWS_ENDPOINT_URL_S3").is_ok(),
        "AWS_ENDPOINT_URL_S3 is not set: run the tests with ./scripts/test.sh, which starts the S3 emulator"
    );
    let s3 = S3BlobStore::connect(test_bucket_name()).await;
    s3.ensure_bucket().await.expect("creating the test bucket in the S3 emulator");
    s3
}

/// The S3 emulator's bucket of this test run; the test script sets `TEST_BUCKET_NAME`.
pub fn test_bucket_name() -> String {
    std::env::var("TEST_BUCKET_NAME").unwrap_or_else(|_| "tests-media".to_owned())
}

/// An application with one organization (API access on) and its key.
#[derive(Clone)]
pub struct TestApp {
    pub app: Arc<App>,
    pub key: String,
    pub organization: OrganizationId,
}

impl TestApp {
    /// A fresh organization on `backend`, media in a temporary folder; keys are checked
    /// on every request.
    pub async fn new(backend: Backend) -> Self {
        Self::with_media(backend, temp_media()).await
    }

    /// A fresh organization on `backend` with the given media storage.
    pub async fn with_media(backend: Backend, media: Media) -> Self {
        let app = match backend {
            Backend::Sqlite => App::sqlite(sqlite(), media),
            Backend::DynamoDb => App::dynamodb(dynamodb().await, media),
        };
        Self::seeded(app).await
    }

    /// A fresh organization in an application built already.
    pub async fn seeded(app: App) -> Self {
        capture_logs();
        let mut test = Self { app: Arc::new(app), key: String::new(), organization: OrganizationId::new_v4() };
        let (organization, key) = test.add_organization(true).await;
        test.organization = organization;
        test.key = key;
        test
    }

    /// The same organization, served through another DynamoDB client of the same table
    /// (e.g. one whose calls fail on purpose).
    pub fn through(&self, dynamodb: DynamoDb) -> TestApp {
        let app = App::dynamodb(dynamodb, temp_media());
        TestApp { app: Arc::new(app), key: self.key.clone(), organization: self.organization }
    }

    /// Seeds another organization in the same backend and returns its ID and key (with
    /// credits enough for any test's runs).
    pub async fn add_organization(&self, api_access: bool) -> (OrganizationId, String) {
        self.add_organization_with(api_access, "free", 1_000_000, None).await
    }

    /// Seeds another organization on `plan` (since `started`) with `credits`.
    pub async fn add_organization_with(
        &self,
        api_access: bool,
        plan: &str,
        credits: i64,
        started: Option<shared::domain::time::Timestamp>,
    ) -> (OrganizationId, String) {
        let id = OrganizationId::new_v4();
        let key = format!("test-key-{}", Uuid::new_v4());
        let seed = Seed {
            organizations: vec![SeedOrganization {
                id,
                name: format!("Org {id}"),
                slug: format!("org-{id}"),
                api_access,
                plan: plan.into(),
                credits,
                plan_started_at: started,
                api_keys: vec![key.clone()],
                workspaces: None,
            }],
            unbound_api_keys: vec![],
        };
        apply_seed(self.app.identity().as_ref(), self.app.credits().as_ref(), self.app.clock.as_ref(), &seed)
            .await
            .expect("seeding");
        (id, key)
    }

    /// Seeds a key that belongs to no organization.
    pub async fn add_unbound_key(&self) -> String {
        let key = format!("unbound-{}", Uuid::new_v4());
        let seed = Seed { organizations: vec![], unbound_api_keys: vec![key.clone()] };
        apply_seed(self.app.identity().as_ref(), self.app.credits().as_ref(), self.app.clock.as_ref(), &seed)
            .await
            .expect("seeding");
        key
    }

    /// Sends a request with arbitrary headers and a raw body.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let mut builder = http::Request::builder().method(method).uri(path);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Body::from(body)).expect("request");
        let response = api::dispatch(self.app.clone(), request).await;
        let status = response.status();
        let bytes: &[u8] = response.body();
        let value =
            if bytes.is_empty() { Value::Null } else { serde_json::from_slice(bytes).expect("JSON response body") };
        (status, value)
    }

    /// Sends a request as this organization, with a JSON body when given.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call_as(&self.key.clone(), method, path, body).await
    }

    /// Sends a request with another bearer key.
    pub async fn call_as(&self, key: &str, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let authorization = format!("Bearer {key}");
        let bytes = body.map(|body| body.to_string().into_bytes()).unwrap_or_default();
        self.raw(method, path, &[("authorization", &authorization), ("content-type", "application/json")], bytes).await
    }

    /// Creates a store and returns its ID.
    pub async fn create_store(&self, name: &str) -> String {
        let (status, body) = self.call(Method::POST, "/shared-stores", Some(json!({ "name": name }))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["store"]["id"].as_str().expect("store id").to_owned()
    }

    /// Bulk-writes `count` entries named `{prefix}{i}` into a store, 5,000 at a time.
    /// Stores `count` entries `<prefix><i>` in `store`, in bulks of at most [`FILL_BULK`].
    ///
    /// This is a test's setup, not what it tests, so it must not depend on the machine's
    /// speed. A bulk answers 500 when its writes could not start within its write window
    /// (DynamoDB Local shared by several tests on a slow machine); what it wrote stays and
    /// the slots of what it did not are given back, and a bulk is an upsert, so the same
    /// entries are sent again in bulks half the size, at most [`FILL_RETRIES`] times.
    pub async fn fill(&self, store: &str, prefix: &str, count: usize) {
        let path = format!("/shared-stores/{store}/entries/bulk");
        let (mut next, mut size, mut retries) = (0, FILL_BULK, 0);
        while next < count {
            let end = count.min(next + size);
            let entries: Vec<Value> = (next..end)
                .map(|i| json!({ "entry_id": format!("{prefix}{i}"), "display_name": format!("{prefix}{i}") }))
                .collect();
            let (status, body) = self.call(Method::POST, &path, Some(json!({ "entries": entries }))).await;
            if status == StatusCode::INTERNAL_SERVER_ERROR && retries < FILL_RETRIES {
                retries += 1;
                size = (size / 2).max(1);
                continue;
            }
            assert_eq!(status, StatusCode::OK, "{body}");
            next = end;
        }
    }
}

/// Entries of one bulk request of [`TestApp::fill`]: each request's writes end well inside
/// the bulk's 10 s write window on DynamoDB Local on a quiet machine (about 1,000 entries
/// a second); a bulk of the 5,000 allowed did not end in time on a 2-3x slower machine.
pub const FILL_BULK: usize = 500;

/// How many times [`TestApp::fill`] sends again, in smaller bulks, entries whose bulk
/// answered 500.
pub const FILL_RETRIES: usize = 6;

/// An API Gateway HTTP API (v2) event as a Lambda function receives it.
pub fn lambda_event(method: &str, raw_path: &str, query: &str, key: &str, body: Option<&str>) -> lambda_http::Request {
    let authorization = format!("Bearer {key}");
    let headers = [("authorization", authorization.as_str()), ("content-type", "application/json")];
    let event = api_gateway_event_json(method, raw_path, query, &headers, body);
    lambda_http::request::from_str(&event.to_string()).expect("an API Gateway event")
}

/// The JSON of an API Gateway HTTP API (v2) event on its `$default` route.
pub fn api_gateway_event_json(
    method: &str,
    raw_path: &str,
    query: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Value {
    let headers: serde_json::Map<String, Value> =
        headers.iter().map(|(name, value)| (name.to_lowercase(), json!(value))).collect();
    json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api",
            "domainName": "api.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "api",
            "http": { "method": method, "path": raw_path, "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1", "userAgent": "test" },
            "requestId": "request",
            "routeKey": "$default",
            "stage": "$default",
            "time": "22/Nov/2026:00:00:00 +0000",
            "timeEpoch": 0
        },
        "body": body,
        "isBase64Encoded": false
    })
}

/// Sends a request to the Lambda function of `function` as the runtime would, and
/// returns its status, headers and JSON body.
pub async fn call_function(
    app: &TestApp,
    function: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (StatusCode, http::HeaderMap, Value) {
    let endpoint = api::Endpoint::of(function).expect("a function of the routes table");
    let body = body.map(Value::to_string);
    let request = lambda_event(method, path, "", &app.key, body.as_deref());
    let response = shared::runtime::http::handle(endpoint, app.app.clone(), request).await;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes: &[u8] = response.body();
    (status, headers, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(bytes).expect("JSON") })
}

/// Runs ffmpeg with `args` in `folder` (test media are made there at test time).
pub fn ffmpeg_in(folder: &std::path::Path, args: &[&str]) {
    let status = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-y"])
        .args(args)
        .current_dir(folder)
        .status()
        .expect("ffmpeg is installed (./scripts/test.sh installs it)");
    assert!(status.success(), "ffmpeg {args:?}");
}

/// GETs a URL over plain HTTP and returns the status and body.
pub async fn http_get(url: &str) -> (StatusCode, bytes::Bytes) {
    let (status, _, body) = http_fetch(url).await;
    (status, body)
}

/// GETs a URL over plain HTTP, following one redirect (a media link on S3 answers 302 to
/// a presigned GET): the answer's status, headers and body.
pub async fn http_fetch(url: &str) -> (StatusCode, http::HeaderMap, bytes::Bytes) {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut url = url.to_owned();
    for _ in 0..2 {
        let response = client.get(url.parse().expect("a URL")).await.expect("the URL answers");
        let status = response.status();
        if status == StatusCode::FOUND {
            url = response.headers()[http::header::LOCATION].to_str().unwrap().to_owned();
            continue;
        }
        let headers = response.headers().clone();
        return (status, headers, response.into_body().collect().await.expect("a body").to_bytes());
    }
    panic!("{url} redirected more than once")
}

/// A GET of `url` with a `Range` header (following one redirect, which keeps the header):
/// status, `Content-Range` and body.
pub async fn http_get_range(url: &str, range: &str) -> (StatusCode, Option<String>, bytes::Bytes) {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut url = url.to_owned();
    for _ in 0..2 {
        let request = http::Request::get(url.as_str())
            .header(http::header::RANGE, range)
            .body(http_body_util::Full::default())
            .unwrap();
        let response = client.request(request).await.expect("the URL answers");
        let status = response.status();
        if status == StatusCode::FOUND {
            url = response.headers()[http::header::LOCATION].to_str().unwrap().to_owned();
            continue;
        }
        let content_range =
            response.headers().get(http::header::CONTENT_RANGE).map(|value| value.to_str().unwrap().to_owned());
        return (status, content_range, response.into_body().collect().await.expect("a body").to_bytes());
    }
    panic!("{url} redirected more than once")
}

/// `count` entries whose metadata holds `bytes` bytes each.
pub fn large_entries(prefix: &str, count: usize, bytes: usize) -> Vec<Value> {
    (0..count)
        .map(|i| json!({ "entry_id": format!("{prefix}{i}"), "display_name": format!("{prefix}{i}"), "metadata": { "blob": "x".repeat(bytes) } }))
        .collect()
}

/// Sends a request over TCP to a server at `addr`, with a bearer key, and returns its
/// status and JSON body (null when the body is not JSON); None when the connection fails.
pub async fn try_send(
    addr: std::net::SocketAddr,
    method: Method,
    path: &str,
    key: &str,
    body: Vec<u8>,
) -> Option<(StatusCode, Value)> {
    try_send_with(addr, method, path, key, None, body).await
}

/// As [`try_send`], with an `Idempotency-Key` when given one.
pub async fn try_send_with(
    addr: std::net::SocketAddr,
    method: Method,
    path: &str,
    key: &str,
    idempotency_key: Option<&str>,
    body: Vec<u8>,
) -> Option<(StatusCode, Value)> {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("authorization", format!("Bearer {key}"));
    if let Some(idempotency_key) = idempotency_key {
        request = request.header("idempotency-key", idempotency_key);
    }
    let request = request.body(http_body_util::Full::new(bytes::Bytes::from(body))).expect("request");
    let response = client.request(request).await.ok()?;
    let status = response.status();
    let bytes = response.into_body().collect().await.ok()?.to_bytes();
    Some((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
}

/// As [`try_send`], for a server that must answer.
pub async fn send(
    addr: std::net::SocketAddr,
    method: Method,
    path: &str,
    key: &str,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    try_send(addr, method, path, key, body).await.expect("the server answers")
}

/// A server that answers `/{name}` with the file of that name in `folder` (after
/// `delay`), and 404 for anything else.
pub async fn folder_server(folder: &'static std::path::Path, delay: std::time::Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let read = socket.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..read]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_owned();
                tokio::time::sleep(delay).await;
                let (status, body) = match std::fs::read(folder.join(&path)) {
                    Ok(body) if !path.is_empty() && !path.contains("..") => ("200 OK", body),
                    _ => ("404 Not Found", b"not found".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    base
}

/// How a [`RendersBy`] toolkit renders: given the job, its cancel signal and the real
/// toolkit (for the renders it lets through).
pub type RenderHook = Box<
    dyn Fn(
            shared::domain::media::RenderJob,
            tokio::sync::watch::Receiver<bool>,
            Arc<dyn shared::domain::media::ports::MediaToolkit>,
        ) -> futures::future::BoxFuture<'static, Result<(), shared::domain::media::MediaError>>
        + Send
        + Sync,
>;

/// A media toolkit that is `inner` but for its renders, which `render` does (a fault or a
/// hold a test injects).
pub struct RendersBy {
    pub inner: Arc<dyn shared::domain::media::ports::MediaToolkit>,
    pub render: RenderHook,
}

#[async_trait::async_trait]
impl shared::domain::media::ports::MediaToolkit for RendersBy {
    async fn render(
        &self,
        job: &shared::domain::media::RenderJob,
        cancelled: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), shared::domain::media::MediaError> {
        (self.render)(job.clone(), cancelled, self.inner.clone()).await
    }

    async fn join(
        &self,
        job: &shared::domain::media::JoinJob,
        cancelled: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), shared::domain::media::MediaError> {
        self.inner.join(job, cancelled).await
    }

    async fn thumbnail(
        &self,
        location: &str,
        duration_ms: u64,
        output: &std::path::Path,
    ) -> Result<(), shared::domain::media::MediaError> {
        self.inner.thumbnail(location, duration_ms, output).await
    }

    async fn waveform(
        &self,
        location: &str,
        output: &std::path::Path,
    ) -> Result<(), shared::domain::media::MediaError> {
        self.inner.waveform(location, output).await
    }

    async fn loudness(
        &self,
        location: &str,
    ) -> Result<shared::domain::media::Loudness, shared::domain::media::MediaError> {
        self.inner.loudness(location).await
    }

    async fn preview(
        &self,
        job: &shared::domain::media::PreviewJob,
        output: &std::path::Path,
    ) -> Result<(), shared::domain::media::MediaError> {
        self.inner.preview(job, output).await
    }
}
