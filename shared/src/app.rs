//! Wiring: [`App::build`] constructs every adapter of a process once, from an
//! [`AppConfig`], and hands each part of the service the ports it uses.

use std::sync::{Arc, OnceLock};

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
use crate::adapters::sqs::SqsQueue;
use crate::adapters::webhook_client::HttpWebhookClient;
use crate::adapters::ytdlp::YtDlp;
use crate::config::{Config, Settings};
use crate::core::queue::{Inbox, Queue};
use crate::domain::agents::AgentRepo;
use crate::domain::asset_manager::{AssetManager, AssetRepo};
use crate::domain::idempotency::IdempotencyRepo;
use crate::domain::identity::{Authenticator, IdentityRepo};
use crate::domain::media::ports::{BlobStore, MediaProbe};
use crate::domain::runs::events::Notifier;
use crate::domain::runs::ports::{RunRepo, TaskMessage};
use crate::domain::runs::sweep::Sweeper;
use crate::domain::runs::views::MediaLinks;
use crate::domain::runs::worker::Worker;
use crate::domain::shared_stores::SharedStoreRepo;
use crate::domain::sites::Sites;
use crate::domain::time::{Clock, SystemClock};
use crate::domain::uploads::UploadRepo;
use crate::domain::webhooks::ports::WebhookRepo;
use crate::domain::webhooks::sender::WebhookSender;
use crate::domain::webhooks::WebhookMessage;
use crate::domain::Backend;

/// Where state is kept, and with it where node tasks and webhook deliveries are queued.
#[derive(Clone)]
pub enum Storage {
    /// A SQLite database (a file in the data folder, or memory); its task and delivery
    /// tables are the queues, worked by this process.
    Sqlite(Sqlite),
    /// A DynamoDB table (or DynamoDB Local) and the SQS queues of its runs; without
    /// queues the run endpoints answer 503 saying what is missing.
    DynamoDb { table: DynamoDb, queues: Option<SqsQueues> },
}

/// Where media files live.
#[derive(Clone)]
pub enum Media {
    /// A local folder that `serve` answers signed URLs for.
    Local(Arc<LocalBlobStore>),
    /// An S3 bucket (or the emulator).
    S3(S3BlobStore),
}

/// The SQS queues of a deployment.
#[derive(Clone)]
pub struct SqsQueues {
    pub tasks: SqsQueue<TaskMessage>,
    /// None: deliveries are recorded and stay pending (no webhook queue configured).
    pub webhooks: Option<SqsQueue<WebhookMessage>>,
    /// Whether this process's workers and senders poll them (`serve --backend aws`);
    /// otherwise the Lambda event sources deliver their messages.
    pub take: bool,
}

/// Everything a process is built from.
pub struct AppConfig {
    pub storage: Storage,
    pub media: Media,
    /// The secret that signs media links and the address callers reach the service at;
    /// None: the local media folder's (a new random secret with S3).
    pub links: Option<(Vec<u8>, String)>,
    pub settings: Settings,
}

impl AppConfig {
    /// SQLite storage with its own task tables, media where given, default settings.
    pub fn sqlite(database: Sqlite, media: Media) -> Self {
        Self { storage: Storage::Sqlite(database), media, links: None, settings: Settings::default() }
    }

    /// DynamoDB storage without task queues, media where given, default settings.
    pub fn dynamodb(table: DynamoDb, media: Media) -> Self {
        Self { storage: Storage::DynamoDb { table, queues: None }, media, links: None, settings: Settings::default() }
    }

    /// What an AWS deployment's process is built from: DynamoDB and S3, and the SQS
    /// queues when a task queue is configured (taken from by this process when `take`:
    /// `serve --backend aws`), media links signed with the configured secret.
    pub fn aws(config: &Config, aws: &aws_config::SdkConfig, take: bool) -> anyhow::Result<Self> {
        let AwsParts { table, queues, media, links } = AwsParts::of(config, aws, take)?;
        let storage = Storage::DynamoDb { table, queues };
        Ok(Self { storage, media, links, settings: config.settings.clone() })
    }
}

/// What an AWS deployment's process is built from, without naming the embedded
/// backend: a Lambda binary built from these links no SQLite.
struct AwsParts {
    table: DynamoDb,
    queues: Option<SqsQueues>,
    media: Media,
    links: Option<(Vec<u8>, String)>,
}

impl AwsParts {
    fn of(config: &Config, aws: &aws_config::SdkConfig, take: bool) -> anyhow::Result<Self> {
        let table = DynamoDb::from_config(aws, &config.table_name);
        let media = Media::S3(S3BlobStore::from_config(aws, &config.media_bucket));
        let (queues, links) = match &config.task_queue_url {
            None => (None, None),
            Some(url) => {
                let secret = config
                    .media_link_secret
                    .as_deref()
                    .ok_or_else(|| anyhow::anyhow!("MEDIA_LINK_SECRET must be set when TASK_QUEUE_URL is"))?;
                let queues = SqsQueues {
                    tasks: SqsQueue::from_config(aws, url),
                    webhooks: config.webhook_queue_url.as_ref().map(|url| SqsQueue::from_config(aws, url)),
                    take,
                };
                (Some(queues), Some((secret.as_bytes().to_vec(), config.public_url.clone())))
            }
        };
        Ok(Self { table, queues, media, links })
    }
}

/// The run engine: where runs are stored, where their messages go and come from, and
/// what works on them.
#[derive(Clone)]
pub struct Engine {
    pub runs: Arc<dyn RunRepo>,
    pub queue: Arc<dyn Queue<TaskMessage>>,
    pub worker: Worker,
    /// Where this process's workers take task messages from (`serve`); None where the
    /// `node-worker` event source delivers them.
    pub inbox: Option<Arc<dyn Inbox<TaskMessage>>>,
    /// Where webhook delivery messages go.
    pub webhooks: Arc<dyn Queue<WebhookMessage>>,
    /// Where this process's senders take them from (`serve`); None where the
    /// `webhook-sender` event source delivers them.
    pub webhook_inbox: Option<Arc<dyn Inbox<WebhookMessage>>>,
    /// The local tables, when they are the queues: workers release and recover their
    /// work at start.
    pub local: Option<LocalQueues>,
    /// Attempts deliveries.
    pub sender: WebhookSender,
    /// What the deployment lacks for runs, when it cannot run any.
    pub missing: Option<&'static str>,
    /// Repairs what crashes and failed sends leave behind (run on a schedule).
    pub sweeper: Sweeper,
}

/// The queues of an embedded backend: tables of its database.
#[derive(Clone)]
pub struct LocalQueues {
    pub tasks: SqliteTaskQueue,
    pub webhooks: SqliteWebhookQueue,
}

impl Engine {
    /// Records run events with media links signed by `links`.
    pub fn notifier(&self, links: MediaLinks) -> Notifier {
        Notifier { links, queue: self.webhooks.clone() }
    }
}

/// A queue that refuses every message, saying which setting is missing.
struct Unconfigured(&'static str);

#[async_trait::async_trait]
impl<M: Sync> Queue<M> for Unconfigured {
    async fn send(&self, _messages: &[M]) -> anyhow::Result<()> {
        anyhow::bail!("{}", self.0)
    }
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
    /// How long a key's claim holds without renewal.
    pub idempotency_lease: std::time::Duration,
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
    /// The run engine, built when first used ([`App::engine`]).
    engine: OnceLock<Engine>,
    engine_parts: EngineParts,
}

/// What the run engine is built from, kept until a handler first needs the engine.
struct EngineParts {
    backend: Arc<dyn BackendPorts>,
    queues: Queues,
    blobs: Arc<dyn BlobStore>,
    probe: Arc<dyn MediaProbe>,
    clock: Arc<dyn Clock>,
    links: MediaLinks,
    settings: Settings,
}

impl Engine {
    /// Builds the engine: its worker (ffmpeg, downloads, video sites), webhook sender
    /// and sweeper. Only [`App::engine`] calls it, so a function binary whose handler
    /// never touches runs links none of them.
    fn build(parts: &EngineParts) -> Self {
        let EngineParts { backend, queues, blobs, probe, clock, links, settings } = parts;
        let queues = queues.clone();
        let notifier = Notifier { links: links.clone(), queue: queues.webhooks.clone() };
        let allow_private = settings.allow_private_urls;
        let yt_dlp = YtDlp::new(settings.yt_dlp.clone(), allow_private).with_ffmpeg(settings.ffmpeg.clone());
        let worker = Worker {
            runs: backend.clone().runs(),
            queue: queues.tasks.clone(),
            blobs: blobs.clone(),
            toolkit: Arc::new(Ffmpeg::new(settings.ffmpeg.clone())),
            probe: probe.clone(),
            downloader: Arc::new(HttpDownloader::new(allow_private)),
            sites: Sites::new(Arc::new(yt_dlp), &settings.video_site_hosts),
            clock: clock.clone(),
            notifier,
            deliveries: backend.clone().webhooks(),
            task_budget: settings.task_budget,
            claim_margin: settings.claim_margin,
            scratch: settings.scratch.clone(),
        };
        let sender = WebhookSender {
            repo: backend.clone().webhooks(),
            client: Arc::new(HttpWebhookClient::new(allow_private)),
            clock: clock.clone(),
            schedule: settings.webhook_schedule.clone(),
        };
        let sweeper = Sweeper {
            runs: backend.clone().runs(),
            deliveries: backend.clone().webhooks(),
            tasks: queues.tasks.clone(),
            notifier: worker.notifier.clone(),
            clock: clock.clone(),
            settings: settings.sweep,
        };
        Engine {
            sweeper,
            runs: backend.clone().runs(),
            queue: queues.tasks,
            worker,
            inbox: queues.inbox,
            webhooks: queues.webhooks,
            webhook_inbox: queues.webhook_inbox,
            local: queues.local,
            sender,
            missing: queues.missing,
        }
    }
}

impl App {
    /// Builds every adapter once and wires each part of the service to its ports.
    pub fn build(config: AppConfig) -> Self {
        let AppConfig { storage, media, links, settings } = config;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        match storage {
            Storage::Sqlite(database) => {
                let queues = Queues::sqlite(database.clone(), &clock);
                Self::assemble(Arc::new(database), queues, clock, media, links, settings)
            }
            Storage::DynamoDb { table, queues } => {
                Self::assemble(Arc::new(table), Queues::sqs(queues), clock, media, links, settings)
            }
        }
    }

    /// Wires each part of the service to the ports of `backend` and `queues`.
    fn assemble(
        backend: Arc<dyn BackendPorts>,
        queues: Queues,
        clock: Arc<dyn Clock>,
        media: Media,
        links: Option<(Vec<u8>, String)>,
        settings: Settings,
    ) -> Self {
        let (blobs, local_blobs): (Arc<dyn BlobStore>, _) = match media {
            Media::Local(local) => (local.clone(), Some(local)),
            Media::S3(s3) => (Arc::new(s3), None),
        };
        let links = match (links, &local_blobs) {
            (Some((secret, public_url)), _) => MediaLinks::new(&secret, &public_url),
            (None, Some(local)) => MediaLinks::new(local.secret(), local.base_url()),
            (None, None) => MediaLinks::new(&crate::core::signing::generate_secret(), "http://127.0.0.1:3000"),
        };
        let probe: Arc<dyn MediaProbe> = Arc::new(Ffprobe::new(settings.ffprobe.clone()));
        let engine_parts = EngineParts {
            backend: backend.clone(),
            queues,
            blobs: blobs.clone(),
            probe: probe.clone(),
            clock: clock.clone(),
            links: links.clone(),
            settings: settings.clone(),
        };
        Self {
            auth: Authenticator::new(backend.clone().identity(), settings.auth_cache_ttl),
            identity: backend.clone().identity(),
            stores: backend.clone().stores(),
            agents: backend.clone().agents(),
            uploads: backend.clone().uploads(),
            webhooks: backend.clone().webhooks(),
            idempotency: backend.clone().idempotency(),
            idempotency_lease: settings.idempotency_lease,
            assets: backend.clone().assets(),
            asset_manager: Arc::new(LocalAssetManager::new(backend.assets())),
            blobs,
            probe,
            clock,
            local_blobs,
            links,
            allow_private_urls: settings.allow_private_urls,
            engine: OnceLock::new(),
            engine_parts,
        }
    }

    /// The run engine, built on first use.
    pub fn engine(&self) -> &Engine {
        self.engine.get_or_init(|| Engine::build(&self.engine_parts))
    }

    /// State in SQLite (runs and their queues included), media where given, default
    /// settings; keys are checked on every request.
    pub fn sqlite(database: Sqlite, media: Media) -> Self {
        Self::build(AppConfig::sqlite(database, media))
    }

    /// State in DynamoDB, media where given, no task queue, default settings.
    pub fn dynamodb(backend: DynamoDb, media: Media) -> Self {
        Self::build(AppConfig::dynamodb(backend, media))
    }

    /// State in a new in-memory SQLite database, media in a new temporary folder; keys
    /// are checked on every request. For tests and benchmarks.
    pub fn embedded() -> anyhow::Result<Self> {
        let folder = std::env::temp_dir().join(format!("video-workflow-{}", uuid::Uuid::new_v4()));
        let local = LocalBlobStore::open(&folder, "http://127.0.0.1:3000")?;
        let mut config = AppConfig::sqlite(Sqlite::in_memory()?, Media::Local(Arc::new(local)));
        config.settings.scratch = folder.join("scratch");
        Ok(Self::build(config))
    }

    /// The state of a Lambda function: DynamoDB and S3, configured from the environment;
    /// its runs' tasks go to the SQS queue configured (the `node-worker` function's event
    /// source), when one is.
    pub async fn from_env() -> anyhow::Result<Self> {
        let config = Config::from_env()?;
        if config.settings.allow_private_urls {
            tracing::warn!("ALLOW_PRIVATE_URLS is on: URL inputs and callbacks may reach private addresses");
        }
        let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let AwsParts { table, queues, media, links } = AwsParts::of(&config, &aws, false)?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        Ok(Self::assemble(Arc::new(table), Queues::sqs(queues), clock, media, links, config.settings))
    }
}

/// The ports a storage backend implements, each as the narrow trait object a part of
/// the service takes.
trait BackendPorts: Send + Sync {
    fn identity(self: Arc<Self>) -> Arc<dyn IdentityRepo>;
    fn stores(self: Arc<Self>) -> Arc<dyn SharedStoreRepo>;
    fn agents(self: Arc<Self>) -> Arc<dyn AgentRepo>;
    fn uploads(self: Arc<Self>) -> Arc<dyn UploadRepo>;
    fn runs(self: Arc<Self>) -> Arc<dyn RunRepo>;
    fn webhooks(self: Arc<Self>) -> Arc<dyn WebhookRepo>;
    fn idempotency(self: Arc<Self>) -> Arc<dyn IdempotencyRepo>;
    fn assets(self: Arc<Self>) -> Arc<dyn AssetRepo>;
}

impl<B: Backend> BackendPorts for B {
    fn identity(self: Arc<Self>) -> Arc<dyn IdentityRepo> {
        self
    }
    fn stores(self: Arc<Self>) -> Arc<dyn SharedStoreRepo> {
        self
    }
    fn agents(self: Arc<Self>) -> Arc<dyn AgentRepo> {
        self
    }
    fn uploads(self: Arc<Self>) -> Arc<dyn UploadRepo> {
        self
    }
    fn runs(self: Arc<Self>) -> Arc<dyn RunRepo> {
        self
    }
    fn webhooks(self: Arc<Self>) -> Arc<dyn WebhookRepo> {
        self
    }
    fn idempotency(self: Arc<Self>) -> Arc<dyn IdempotencyRepo> {
        self
    }
    fn assets(self: Arc<Self>) -> Arc<dyn AssetRepo> {
        self
    }
}

/// The queues of one transport, both sides.
#[derive(Clone)]
struct Queues {
    tasks: Arc<dyn Queue<TaskMessage>>,
    inbox: Option<Arc<dyn Inbox<TaskMessage>>>,
    webhooks: Arc<dyn Queue<WebhookMessage>>,
    webhook_inbox: Option<Arc<dyn Inbox<WebhookMessage>>>,
    local: Option<LocalQueues>,
    missing: Option<&'static str>,
}

impl Queues {
    /// The task and delivery tables of a SQLite database, worked by this process.
    fn sqlite(database: Sqlite, clock: &Arc<dyn Clock>) -> Self {
        let local = LocalQueues {
            tasks: SqliteTaskQueue::new(database.clone(), clock.clone()),
            webhooks: SqliteWebhookQueue::new(database, clock.clone()),
        };
        Self {
            tasks: Arc::new(local.tasks.clone()),
            inbox: Some(Arc::new(local.tasks.clone())),
            webhooks: Arc::new(local.webhooks.clone()),
            webhook_inbox: Some(Arc::new(local.webhooks.clone())),
            local: Some(local),
            missing: None,
        }
    }

    /// The SQS queues of a deployment; without them runs are unavailable, saying why.
    fn sqs(queues: Option<SqsQueues>) -> Self {
        let Some(SqsQueues { tasks, webhooks, take }) = queues else {
            return Self {
                tasks: Arc::new(Unconfigured(NO_TASK_QUEUE)),
                inbox: None,
                webhooks: Arc::new(Unconfigured(NO_WEBHOOK_QUEUE)),
                webhook_inbox: None,
                local: None,
                missing: Some(NO_TASK_QUEUE),
            };
        };
        let (webhooks, webhook_inbox): (Arc<dyn Queue<WebhookMessage>>, _) = match webhooks {
            Some(queue) => (Arc::new(queue.clone()), take.then(|| Arc::new(queue) as Arc<dyn Inbox<WebhookMessage>>)),
            None => (Arc::new(Unconfigured(NO_WEBHOOK_QUEUE)), None),
        };
        Self {
            tasks: Arc::new(tasks.clone()),
            inbox: take.then(|| Arc::new(tasks) as Arc<dyn Inbox<TaskMessage>>),
            webhooks,
            webhook_inbox,
            local: None,
            missing: None,
        }
    }
}

/// What a deployment without a task queue lacks.
const NO_TASK_QUEUE: &str =
    "runs are not available: this deployment has no task queue (set TASK_QUEUE_URL and MEDIA_LINK_SECRET)";
/// What a deployment without a webhook queue lacks.
const NO_WEBHOOK_QUEUE: &str = "WEBHOOK_QUEUE_URL is not set: webhook deliveries stay pending in the delivery log";
