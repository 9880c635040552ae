//! The application state every handler receives: the ports, wired to one backend.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::adapters::dynamodb::DynamoDb;
use crate::adapters::ffmpeg::Ffmpeg;
use crate::adapters::ffprobe::Ffprobe;
use crate::adapters::fs::LocalBlobStore;
use crate::adapters::http_download::HttpDownloader;
use crate::adapters::local_assets::LocalAssetManager;
use crate::adapters::s3::S3BlobStore;
use crate::adapters::sqlite::tasks::SqliteTaskQueue;
use crate::adapters::sqlite::webhooks::SqliteWebhookQueue;
use crate::adapters::sqlite::Sqlite;
use crate::adapters::sqs::{SqsTaskQueue, SqsWebhookQueue};
use crate::adapters::webhook_client::HttpWebhookClient;
use crate::adapters::ytdlp::YtDlp;
use crate::config::Config;
use crate::domain::identity::Authenticator;
use crate::domain::runs::views::MediaLinks;
use crate::domain::runs::worker::Worker;
use crate::domain::sites::Sites;
use crate::domain::webhooks::{Notifier, WebhookMessage, WebhookSchedule, WebhookSender};
use crate::ports::{
    AgentRepo, AssetManager, AssetRepo, BlobStore, Clock, IdempotencyRepo, IdentityRepo, MediaProbe, RunRepo,
    SharedStoreRepo, SystemClock, TaskInbox, TaskQueue, UploadRepo, WebhookInbox, WebhookQueue, WebhookRepo,
};

/// Default time budget of one node task's media work.
pub const DEFAULT_TASK_BUDGET: Duration = Duration::from_secs(15 * 60);

/// The run engine's ports: where runs are stored, where task messages go, and the worker
/// that executes them.
#[derive(Clone)]
pub struct Engine {
    pub runs: Arc<dyn RunRepo>,
    pub queue: Arc<dyn TaskQueue>,
    pub worker: Worker,
    /// Where this process's workers take task messages from (`serve`); None where
    /// something else delivers them (the `node-worker` event source) or nothing runs them.
    pub inbox: Option<Arc<dyn TaskInbox>>,
    /// The local task table, when tasks are queued in the state database: workers
    /// release and recover its work at start.
    pub local_queue: Option<SqliteTaskQueue>,
    /// Where webhook delivery messages go.
    pub webhooks: Arc<dyn WebhookQueue>,
    /// Where this process's senders take them from (`serve`); None where the
    /// `webhook-sender` event source delivers them.
    pub webhook_inbox: Option<Arc<dyn WebhookInbox>>,
    /// The local delivery table, when it is the webhook queue: senders release its
    /// claims at start.
    pub local_webhooks: Option<SqliteWebhookQueue>,
    /// Attempts deliveries.
    pub sender: WebhookSender,
}

impl Engine {
    /// Records run events with media links signed by `links`.
    pub fn notifier(&self, links: MediaLinks) -> Notifier {
        Notifier { links, queue: self.webhooks.clone() }
    }
}

/// Where an engine's webhook messages go and come from.
#[derive(Clone)]
pub struct WebhookPorts {
    pub queue: Arc<dyn WebhookQueue>,
    pub inbox: Option<Arc<dyn WebhookInbox>>,
}

/// The webhook queue of a deployment that configured none: events are recorded in the
/// delivery log, and sending them is an error that says what is missing.
struct UnconfiguredWebhookQueue;

#[async_trait::async_trait]
impl WebhookQueue for UnconfiguredWebhookQueue {
    async fn send(&self, _messages: &[WebhookMessage]) -> anyhow::Result<()> {
        anyhow::bail!("WEBHOOK_QUEUE_URL is not set: webhook deliveries stay pending in the delivery log")
    }
}

/// What the run engine runs media work with.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    /// The ffmpeg program.
    pub ffmpeg: PathBuf,
    /// Folder for tasks' scratch files.
    pub scratch: PathBuf,
    /// Longest one task's media work may take.
    pub task_budget: Duration,
    /// When webhook deliveries are retried and how long receivers have to answer.
    pub webhook_schedule: WebhookSchedule,
    /// The yt-dlp program (video-sharing sites' videos).
    pub yt_dlp: PathBuf,
    /// Hosts whose `video_urls` are video-sharing sites' pages, beyond the known ones.
    pub video_site_hosts: Vec<String>,
}

/// The yt-dlp program when none is configured: `$YT_DLP_PATH`, else the one the README
/// commands install into `.local/venv`, else `yt-dlp` on the PATH.
pub fn default_yt_dlp() -> PathBuf {
    if let Some(path) = std::env::var_os("YT_DLP_PATH").filter(|path| !path.is_empty()) {
        return PathBuf::from(path);
    }
    let installed = PathBuf::from(".local/venv/bin/yt-dlp");
    match installed.canonicalize() {
        Ok(path) => path,
        Err(_) => PathBuf::from("yt-dlp"),
    }
}

/// Where media files live.
#[derive(Clone)]
pub enum Media {
    /// A local folder that `serve` answers signed URLs for.
    Local(Arc<LocalBlobStore>),
    /// An S3 bucket (or the emulator).
    S3(S3BlobStore),
}

/// Ports and services shared by all requests of a process.
pub struct App {
    pub identity: Arc<dyn IdentityRepo>,
    pub stores: Arc<dyn SharedStoreRepo>,
    pub agents: Arc<dyn AgentRepo>,
    pub uploads: Arc<dyn UploadRepo>,
    /// Webhook deliveries and secrets.
    pub webhooks: Arc<dyn WebhookRepo>,
    /// Idempotency keys of the creating POSTs.
    pub idempotency: Arc<dyn IdempotencyRepo>,
    /// Workspaces' asset-manager connections and the `local` provider's items.
    pub assets: Arc<dyn AssetRepo>,
    /// Reads asset-manager items (the `local` provider).
    pub asset_manager: Arc<dyn AssetManager>,
    pub blobs: Arc<dyn BlobStore>,
    pub probe: Arc<dyn MediaProbe>,
    pub clock: Arc<dyn Clock>,
    pub auth: Authenticator,
    /// The local folder behind `blobs`, when media is local: `serve` answers its URLs.
    pub local_blobs: Option<Arc<LocalBlobStore>>,
    /// Signs the 7-day media links of runs.
    pub links: MediaLinks,
    /// Whether URL inputs and callbacks may reach private addresses (local `serve`).
    pub allow_private_urls: bool,
    /// The run engine; None where no task queue is configured.
    pub engine: Option<Engine>,
}

impl App {
    /// Wires one storage backend, which implements every repository, to the media ports.
    fn wire<B>(backend: Arc<B>, media: Media, probe: Arc<dyn MediaProbe>, auth_cache_ttl: Duration) -> Self
    where
        B: IdentityRepo
            + SharedStoreRepo
            + AgentRepo
            + UploadRepo
            + WebhookRepo
            + IdempotencyRepo
            + AssetRepo
            + 'static,
    {
        let (blobs, local_blobs): (Arc<dyn BlobStore>, _) = match media {
            Media::Local(local) => (local.clone(), Some(local)),
            Media::S3(s3) => (Arc::new(s3), None),
        };
        let links = match &local_blobs {
            Some(local) => MediaLinks::new(local.secret(), local.base_url()),
            None => MediaLinks::new(&crate::core::signing::generate_secret(), "http://127.0.0.1:3000"),
        };
        Self {
            auth: Authenticator::new(backend.clone(), auth_cache_ttl),
            identity: backend.clone(),
            stores: backend.clone(),
            agents: backend.clone(),
            uploads: backend.clone(),
            idempotency: backend.clone(),
            assets: backend.clone(),
            asset_manager: Arc::new(LocalAssetManager::new(backend.clone())),
            webhooks: backend,
            blobs,
            probe,
            clock: Arc::new(SystemClock),
            local_blobs,
            links,
            allow_private_urls: false,
            engine: None,
        }
    }

    /// Adds the run engine: runs stored in `runs`, task messages sent to `queue` (and
    /// taken from `inbox` by this process's workers, when given).
    pub fn with_engine(
        mut self,
        runs: Arc<dyn RunRepo>,
        queue: Arc<dyn TaskQueue>,
        inbox: Option<Arc<dyn TaskInbox>>,
        webhooks: WebhookPorts,
        settings: EngineSettings,
    ) -> Self {
        let notifier = Notifier { links: self.links.clone(), queue: webhooks.queue.clone() };
        let sender = WebhookSender {
            repo: self.webhooks.clone(),
            client: Arc::new(HttpWebhookClient::new(self.allow_private_urls)),
            clock: self.clock.clone(),
            schedule: settings.webhook_schedule.clone(),
        };
        let ffmpeg = settings.ffmpeg.clone();
        let worker = Worker {
            runs: runs.clone(),
            queue: queue.clone(),
            blobs: self.blobs.clone(),
            toolkit: Arc::new(Ffmpeg::new(settings.ffmpeg.clone())),
            probe: self.probe.clone(),
            downloader: Arc::new(HttpDownloader::new(self.allow_private_urls)),
            sites: Sites::new(
                Arc::new(YtDlp::new(settings.yt_dlp, self.allow_private_urls).with_ffmpeg(ffmpeg)),
                &settings.video_site_hosts,
            ),
            clock: self.clock.clone(),
            notifier,
            deliveries: self.webhooks.clone(),
            task_budget: settings.task_budget,
            scratch: settings.scratch,
        };
        self.engine = Some(Engine {
            runs,
            queue,
            worker,
            inbox,
            local_queue: None,
            webhooks: webhooks.queue,
            webhook_inbox: webhooks.inbox,
            local_webhooks: None,
            sender,
        });
        self
    }

    /// Adds the embedded run engine: runs in `database`, tasks in its durable task table,
    /// executed by workers of this process with ffmpeg, scratch files under `scratch`.
    pub fn with_embedded_engine(
        self,
        database: Sqlite,
        scratch: PathBuf,
        task_budget: Duration,
        webhook_schedule: WebhookSchedule,
    ) -> Self {
        let queue = SqliteTaskQueue::new(database.clone());
        let webhooks = SqliteWebhookQueue::new(database.clone());
        let settings = EngineSettings {
            ffmpeg: "ffmpeg".into(),
            scratch,
            task_budget,
            webhook_schedule,
            yt_dlp: default_yt_dlp(),
            video_site_hosts: crate::config::video_site_hosts_from_env(),
        };
        let ports = WebhookPorts { queue: Arc::new(webhooks.clone()), inbox: Some(Arc::new(webhooks.clone())) };
        let mut app = self.with_engine(
            Arc::new(database),
            Arc::new(queue.clone()),
            Some(Arc::new(queue.clone())),
            ports,
            settings,
        );
        if let Some(engine) = app.engine.as_mut() {
            engine.local_queue = Some(queue);
            engine.local_webhooks = Some(webhooks);
        }
        app
    }

    /// Reads `video_urls` and `youtube_url_inputs` of `hosts` (and their subdomains) as
    /// video-sharing sites' pages too; call after adding the engine.
    pub fn with_video_site_hosts(mut self, hosts: &[String]) -> Self {
        if let Some(engine) = self.engine.as_mut() {
            engine.worker.sites = Sites::new(engine.worker.sites.videos.clone(), hosts);
        }
        self
    }

    /// Signs media links with `secret` for callers who reach the service at `public_url`.
    pub fn with_links(mut self, secret: &[u8], public_url: &str) -> Self {
        self.links = MediaLinks::new(secret, public_url);
        self
    }

    /// Lets URL inputs and callbacks reach private addresses (a local `serve`); call
    /// before adding the engine.
    pub fn allowing_private_urls(mut self) -> Self {
        self.allow_private_urls = true;
        self
    }

    /// State in a new in-memory SQLite database, media in a new temporary folder; keys
    /// are checked on every request. For tests and benchmarks.
    pub fn embedded() -> anyhow::Result<Self> {
        let folder = std::env::temp_dir().join(format!("video-workflow-{}", uuid::Uuid::new_v4()));
        let local = LocalBlobStore::open(&folder, "http://127.0.0.1:3000")?;
        let database = Sqlite::in_memory()?;
        Ok(Self::sqlite(database.clone(), Media::Local(Arc::new(local))).with_embedded_engine(
            database,
            folder.join("scratch"),
            DEFAULT_TASK_BUDGET,
            WebhookSchedule::default(),
        ))
    }

    /// State in SQLite, media where given; keys are checked on every request.
    pub fn sqlite(database: Sqlite, media: Media) -> Self {
        Self::wire(Arc::new(database), media, Arc::new(Ffprobe::new("ffprobe")), Duration::ZERO)
    }

    /// State in DynamoDB, media where given.
    pub fn dynamodb(backend: DynamoDb, media: Media, ffprobe: impl Into<PathBuf>, auth_cache_ttl: Duration) -> Self {
        Self::wire(Arc::new(backend), media, Arc::new(Ffprobe::new(ffprobe)), auth_cache_ttl)
    }

    /// The state of a Lambda function: DynamoDB and S3, configured from the environment,
    /// with the run engine when a task queue is configured (its workers are the
    /// `node-worker` function's invocations, fed by SQS).
    pub async fn from_env() -> anyhow::Result<Self> {
        let config = Config::from_env()?;
        let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let media = Media::S3(S3BlobStore::from_config(&aws, &config.media_bucket));
        let dynamodb = DynamoDb::from_config(&aws, &config.table_name);
        let app = Self::dynamodb(dynamodb.clone(), media, &config.ffprobe, config.auth_cache_ttl);
        app.with_aws_engine(&config, &aws, dynamodb, false)
    }

    /// Adds the engine of an AWS deployment: runs in DynamoDB, tasks on the SQS queue of
    /// `config` (also taken from it by this process's workers when `take_tasks`: `serve
    /// --backend aws`),
    /// links signed with the configured secret. Without a queue the app has no engine.
    pub fn with_aws_engine(
        self,
        config: &Config,
        aws: &aws_config::SdkConfig,
        dynamodb: DynamoDb,
        take_tasks: bool,
    ) -> anyhow::Result<Self> {
        let Some(queue_url) = &config.task_queue_url else { return Ok(self) };
        let secret = config
            .media_link_secret
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("MEDIA_LINK_SECRET must be set when TASK_QUEUE_URL is"))?;
        let queue = SqsTaskQueue::from_config(aws, queue_url);
        let settings = EngineSettings {
            ffmpeg: config.ffmpeg.clone(),
            scratch: std::env::temp_dir().join("video-workflow-tasks"),
            task_budget: config.task_budget,
            webhook_schedule: config.webhook_schedule.clone(),
            yt_dlp: config.yt_dlp.clone(),
            video_site_hosts: config.video_site_hosts.clone(),
        };
        let inbox = take_tasks.then(|| Arc::new(queue.clone()) as Arc<dyn TaskInbox>);
        let webhooks = match &config.webhook_queue_url {
            Some(url) => {
                let webhooks = SqsWebhookQueue::from_config(aws, url);
                WebhookPorts {
                    queue: Arc::new(webhooks.clone()),
                    inbox: take_tasks.then(|| Arc::new(webhooks) as Arc<dyn WebhookInbox>),
                }
            }
            None => WebhookPorts { queue: Arc::new(UnconfiguredWebhookQueue), inbox: None },
        };
        Ok(self.with_links(secret.as_bytes(), &config.public_url).with_engine(
            Arc::new(dynamodb),
            Arc::new(queue),
            inbox,
            webhooks,
            settings,
        ))
    }
}
