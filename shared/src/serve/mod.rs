//! The local server: every endpoint of the routes table in one process, over plain
//! HTTP/1.1, with the same handlers the Lambda functions run, plus the signed URLs of
//! the local media folder.

mod blobs;
mod sandbox;
mod social_sandbox;
pub mod workers;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::adapters::fs::BLOB_PATH_PREFIX;
use crate::api::{self, ApiError};
use crate::app::App;
use crate::config::Settings;
use crate::core::retry::{is_unavailable, while_unavailable, STARTUP};

/// Largest request body accepted, as API Gateway's payload limit.
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// Connections served at once; more wait in the listen backlog until one ends.
pub const MAX_CONNECTIONS: usize = 1_024;
/// Longest a connection may take to send a request's headers, and longest it may stay
/// idle between requests: a client that holds a connection open and silent is dropped.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Pauses after a failed `accept` (out of file descriptors, say): from the first,
/// doubling to the last, so that a failing accept does not spin a core.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// Serves requests from `listener` until `shutdown` completes, then lets requests in
/// flight finish (up to 10 s). At most [`MAX_CONNECTIONS`] connections at once, each
/// dropped when it is silent for [`HEADER_READ_TIMEOUT`].
pub async fn run(app: Arc<App>, listener: TcpListener, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = ACCEPT_BACKOFF.0;
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot?,
            () = &mut shutdown => break,
        };
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => {
                        backoff = ACCEPT_BACKOFF.0;
                        accepted
                    }
                    Err(error) => {
                        tracing::warn!(%error, pause_ms = backoff.as_millis() as u64, "accept failed");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
                        continue;
                    }
                };
                // Responses are written whole; don't let Nagle hold back the last segment.
                if let Err(error) = stream.set_nodelay(true) {
                    tracing::debug!(%error, "could not set TCP_NODELAY");
                }
                let app = app.clone();
                let service = hyper::service::service_fn(move |request| handle(app.clone(), request));
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, %peer, "connection ended with an error");
                    }
                    drop(slot);
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still running after 10 s were dropped");
    }
    Ok(())
}

/// Binds `addr` and serves in a background task; returns the bound address (useful
/// with port 0) and a handle that stops the server when dropped or triggered.
pub async fn spawn(app: Arc<App>, addr: SocketAddr) -> anyhow::Result<(SocketAddr, tokio::sync::oneshot::Sender<()>)> {
    spawn_on(app, TcpListener::bind(addr).await?)
}

/// As [`spawn`], on a listener bound already (so that its address can be put into the
/// application's media URLs first).
pub fn spawn_on(
    app: Arc<App>,
    listener: TcpListener,
) -> anyhow::Result<(SocketAddr, tokio::sync::oneshot::Sender<()>)> {
    let bound = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(error) = run(app, listener, shutdown).await {
            tracing::error!(error = %format!("{error:#}"), "server stopped");
        }
    });
    Ok((bound, stop))
}

async fn handle(
    app: Arc<App>,
    request: hyper::Request<Incoming>,
) -> Result<hyper::Response<blobs::ResponseBody>, Infallible> {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let (method, path) = (parts.method.clone(), parts.uri.path().to_owned());
    if method == http::Method::GET
        && path.starts_with(crate::domain::media::MEDIA_PATH_PREFIX)
        && app.local_blobs.is_some()
    {
        let response = blobs::media(&app, &parts.uri, parts.headers.get(http::header::RANGE)).await;
        let status = response.status().as_u16();
        tracing::info!(%method, path, status, ms = started.elapsed().as_secs_f64() * 1000.0, "request");
        return Ok(response);
    }
    // The console's files, on the API's origin (no API key: the console asks for one).
    if let Some(rest) = api::console::path_of(&path) {
        let response = api::console::answer(&method, rest, api::console::Asked::of(&parts.headers));
        let status = response.status().as_u16();
        tracing::info!(%method, path, status, ms = started.elapsed().as_secs_f64() * 1000.0, "request");
        return Ok(to_hyper(response));
    }
    // The sandbox's pages, where it is the billing provider (a checkout of another
    // provider is paid there, never here).
    if path.starts_with(sandbox::PATH_PREFIX) && app.billing().serves_checkout_pages() {
        let response = sandbox::handle(&app, &method, &path).await;
        let status = response.status().as_u16();
        tracing::info!(%method, path, status, ms = started.elapsed().as_secs_f64() * 1000.0, "request");
        return Ok(response);
    }
    // The sandbox publisher's post pages (the URLs of its posts).
    if method == http::Method::GET && path.starts_with(crate::adapters::sandbox_social::SANDBOX_PATH_PREFIX) {
        let response = social_sandbox::handle(&app, &path).await;
        let status = response.status().as_u16();
        tracing::info!(%method, path, status, ms = started.elapsed().as_secs_f64() * 1000.0, "request");
        return Ok(response);
    }
    let local_blobs = app.local_blobs.clone().filter(|_| path.starts_with(BLOB_PATH_PREFIX));
    if let Some(store) = local_blobs {
        let response = blobs::handle(&store, &method, &parts.uri, &parts.headers, body).await;
        let status = response.status().as_u16();
        tracing::info!(%method, path, status, ms = started.elapsed().as_secs_f64() * 1000.0, "request");
        return Ok(response);
    }
    // The API logs its own line per request, with the request's ID and organization.
    let response = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => {
            let request = http::Request::from_parts(parts, lambda_http::Body::from(Vec::from(collected.to_bytes())));
            api::dispatch(app, request).await
        }
        Err(error) => {
            let refusal = if error.is::<http_body_util::LengthLimitError>() {
                ApiError::detail(StatusCode::PAYLOAD_TOO_LARGE, "request body must be 10 MB or smaller")
            } else {
                ApiError::detail(StatusCode::BAD_REQUEST, "request body could not be read")
            };
            tracing::info!(%method, path, status = refusal.status.as_u16(), "request");
            refusal.into_response()
        }
    };
    Ok(to_hyper(response))
}

/// An API response as hyper sends it.
fn to_hyper(response: api::Response) -> hyper::Response<blobs::ResponseBody> {
    let (parts, body) = response.into_parts();
    let body = match body {
        lambda_http::Body::Empty => Bytes::new(),
        lambda_http::Body::Text(text) => Bytes::from(text),
        lambda_http::Body::Binary(bytes) => Bytes::from(bytes),
        _ => Bytes::new(),
    };
    hyper::Response::from_parts(parts, blobs::full_body(body))
}

/// Where `serve` keeps its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// SQLite in the data folder (or in memory): no services needed.
    Embedded,
    /// DynamoDB and S3 at the standard AWS endpoint settings (e.g. `AWS_ENDPOINT_URL_DYNAMODB`).
    Aws,
}

/// The task queue `serve --backend aws` creates when `TASK_QUEUE_URL` is not set.
pub const LOCAL_TASK_QUEUE: &str = "video-workflow-tasks";

/// The webhook queue `serve --backend aws` creates when `WEBHOOK_QUEUE_URL` is not set.
pub const LOCAL_WEBHOOK_QUEUE: &str = "video-workflow-webhooks";

/// Name of the embedded backend's database in the data folder.
pub const STATE_FILE: &str = "state.sqlite";

/// Where `serve` keeps local state and media, and how clients reach it.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Folder for the state database and local media (embedded backend).
    pub data_dir: std::path::PathBuf,
    /// The address clients use to reach this server, for signed media URLs.
    pub public_url: String,
    /// Keep state in process memory (lost at exit) instead of `data_dir/state.sqlite`.
    pub in_memory: bool,
    /// Longest one node task's media work may take.
    pub task_budget: Duration,
    /// Length of a segment of a long edit's output (None: every output in one pass).
    pub segment: Option<Duration>,
    /// Whether URL inputs and callbacks may reach private addresses.
    pub allow_private_urls: bool,
    /// Webhook retries and answer time.
    pub webhook_schedule: crate::domain::webhooks::WebhookSchedule,
    /// With the AWS backend, also create the queues `TASK_QUEUE_URL` and
    /// `WEBHOOK_QUEUE_URL` name (by their URL's last segment) on the emulator: the seed
    /// step of `sam local` (`serve --prepare-only`), whose functions are given those URLs.
    pub create_named_queues: bool,
}

/// Removes what an earlier process on `data_dir` left half done: `scratch/` (task
/// folders) and the partial uploads in `blobs/.incoming/`.
async fn remove_leftovers(data_dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    for folder in [data_dir.join("scratch"), data_dir.join("blobs").join(crate::adapters::fs::INCOMING)] {
        match tokio::fs::remove_dir_all(&folder).await {
            Ok(()) => tracing::info!(folder = %folder.display(), "removed what an earlier process left"),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(error).with_context(|| format!("removing {}", folder.display())),
        }
    }
    Ok(())
}

/// The embedded backend in the data folder: its SQLite database and its media folder
/// (what a killed process left in it removed first).
async fn embedded_config(options: &ServeOptions) -> anyhow::Result<crate::app::AppConfig> {
    use anyhow::Context;

    use crate::adapters::fs::LocalBlobStore;
    use crate::adapters::sqlite::Sqlite;
    use crate::app::{AppConfig, Media};

    // What a killed process left: its tasks' scratch folders and partial uploads (its
    // children died with it). Nothing else uses this data folder.
    remove_leftovers(&options.data_dir).await?;
    let folder = options.data_dir.join("blobs");
    let local = LocalBlobStore::open(&folder, &options.public_url)
        .with_context(|| format!("opening the media folder {}", folder.display()))?;
    let database = if options.in_memory {
        Sqlite::in_memory()?
    } else {
        let path = options.data_dir.join(STATE_FILE);
        // Blocking file work before serving starts: nothing else runs yet.
        tokio::task::spawn_blocking(move || Sqlite::open(path)).await??
    };
    let mut config = AppConfig::sqlite(database, Media::Local(Arc::new(local)));
    config.settings = Settings {
        scratch: options.data_dir.join("scratch"),
        task_budget: options.task_budget,
        segment: options.segment,
        webhook_schedule: options.webhook_schedule.clone(),
        video_site_hosts: crate::config::video_site_hosts_from_env(),
        allow_private_urls: options.allow_private_urls,
        generation: crate::config::GenerationSettings::from_env()?,
        prices: crate::config::prices_from_env()?,
        billing: crate::config::BillingSettings::from_lookup(&|name| std::env::var(name).ok())?,
        ..Settings::default()
    };
    Ok(config)
}

/// The AWS backend as the environment configures it (emulators in tests): its table and
/// bucket checked, and the queues and link secret a deployment would give made here
/// when the environment names none.
async fn aws_config(options: &ServeOptions) -> anyhow::Result<crate::app::AppConfig> {
    use anyhow::Context;

    use crate::adapters::dynamodb::DynamoDb;
    use crate::adapters::s3::S3BlobStore;
    use crate::adapters::sqs::{SqsTaskQueue, SqsWebhookQueue};
    use crate::app::AppConfig;
    use crate::config::Config;

    let mut config = Config::from_env()?;
    let aws = crate::adapters::aws_env::load_defaults().await;
    let table = DynamoDb::from_config(&aws, &config.table_name);
    while_unavailable(STARTUP, || table.ensure_table()).await.map_err(|error| {
        let name = &config.table_name;
        if is_unavailable(&error) {
            error.context(format!("DynamoDB kept failing to check or make table {name}"))
        } else {
            error.context(format!("DynamoDB table {name} is not reachable (is AWS_ENDPOINT_URL_DYNAMODB set?)"))
        }
    })?;
    S3BlobStore::from_config(&aws, &config.media_bucket)
        .ensure_bucket()
        .await
        .with_context(|| format!("S3 bucket {} is not reachable (is AWS_ENDPOINT_URL_S3 set?)", config.media_bucket))?;
    if std::env::var("PUBLIC_URL").is_err() {
        config.public_url = options.public_url.clone();
    }
    config.settings.task_budget = options.task_budget;
    config.settings.segment = options.segment;
    config.settings.webhook_schedule = options.webhook_schedule.clone();
    config.settings.allow_private_urls = options.allow_private_urls;
    // The queues to make: serve's own when none is named, or those named when asked.
    let to_make = |url: &Option<String>, local: &str| match url {
        None => Ok(Some(local.to_owned())),
        Some(url) if options.create_named_queues => queue_name_of(url).map(|name| Some(name.to_owned())),
        Some(_) => Ok(None),
    };
    if let Some(name) = to_make(&config.webhook_queue_url, LOCAL_WEBHOOK_QUEUE)? {
        // Visible again after a sender's claim could have passed.
        let url = SqsWebhookQueue::ensure_queue(&aws, &name, Duration::from_secs(60))
            .await
            .with_context(|| format!("SQS queue {name} is not reachable (is AWS_ENDPOINT_URL_SQS set?)"))?;
        config.webhook_queue_url.get_or_insert(url);
    }
    if let Some(name) = to_make(&config.task_queue_url, LOCAL_TASK_QUEUE)? {
        // A queue on the emulator; a message's lease outlasts its task's work.
        let visibility = options.task_budget * 6;
        let url = SqsTaskQueue::ensure_queue(&aws, &name, visibility)
            .await
            .with_context(|| format!("SQS queue {name} is not reachable (is AWS_ENDPOINT_URL_SQS set?)"))?;
        config.task_queue_url.get_or_insert(url);
    }
    if config.media_link_secret.is_none() {
        let folder = options.data_dir.clone();
        let secret = tokio::task::spawn_blocking(move || crate::adapters::fs::load_or_create_secret(&folder)).await??;
        config.media_link_secret = Some(hex::encode(secret));
    }
    AppConfig::aws(&config, &aws, true)
}

/// The queue name at the end of an SQS queue URL (`https://host/<account>/<name>`).
fn queue_name_of(url: &str) -> anyhow::Result<&str> {
    let path = url.split_once("://").map(|(_, rest)| rest).unwrap_or_default();
    match path.trim_end_matches('/').split('/').collect::<Vec<_>>()[..] {
        [host, account, name] if !host.is_empty() && !account.is_empty() && !name.is_empty() => Ok(name),
        _ => anyhow::bail!("{url:?} is no SQS queue URL (https://<host>/<account>/<name>)"),
    }
}

/// Builds the application for `serve`: the backend (opening or creating its database,
/// or the DynamoDB table and S3 bucket), then the seed file, or the development
/// organization, whose new key is returned so that it can be printed.
pub async fn build_app(
    backend: Backend,
    seed: Option<&std::path::Path>,
    options: &ServeOptions,
) -> anyhow::Result<(App, Option<String>)> {
    use anyhow::Context;

    use crate::domain::identity::{apply_seed, bind_development_key, generate_api_key, Seed};

    let config = match backend {
        Backend::Embedded => embedded_config(options).await?,
        Backend::Aws => aws_config(options).await?,
    };
    let app = App::build(config);
    let (identity, credits, clock) = (app.identity(), app.credits(), app.clock.as_ref());
    // Both may be done again (the seed is applied at every start): a write DynamoDB
    // throttled or failed past the SDK's retries is, rather than ending the process.
    let development_key = match seed {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading seed file {}", path.display()))?;
            let seed = Seed::from_json(&text).with_context(|| format!("seed file {}", path.display()))?;
            while_unavailable(STARTUP, || apply_seed(identity.as_ref(), credits.as_ref(), clock, &seed)).await?;
            None
        }
        None => {
            let key = generate_api_key();
            while_unavailable(STARTUP, || bind_development_key(identity.as_ref(), credits.as_ref(), clock, &key))
                .await?;
            Some(key)
        }
    };
    Ok((app, development_key))
}

#[cfg(test)]
mod tests {
    use super::queue_name_of;

    #[test]
    fn a_queue_is_named_by_its_url_last_segment_and_anything_else_is_refused() {
        let name = |url: &'static str| queue_name_of(url).ok();
        assert_eq!(
            name("http://127.0.0.1:15000/123456789012/video-workflow-local-tasks"),
            Some("video-workflow-local-tasks")
        );
        assert_eq!(name("https://sqs.eu-west-1.amazonaws.com/123456789012/tasks/"), Some("tasks"));
        for url in
            ["http://host", "http://host/", "http://host/123456789012", "tasks", "http://host//tasks", "http://h/a/b/c"]
        {
            assert_eq!(name(url), None, "{url}");
        }
    }
}
