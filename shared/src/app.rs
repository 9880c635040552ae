//! The application state every handler receives: the ports, wired to one backend.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::adapters::dynamodb::DynamoDb;
use crate::adapters::ffmpeg::Ffmpeg;
use crate::adapters::ffprobe::Ffprobe;
use crate::adapters::fs::LocalBlobStore;
use crate::adapters::http_download::HttpDownloader;
use crate::adapters::s3::S3BlobStore;
use crate::adapters::sqlite::tasks::SqliteTaskQueue;
use crate::adapters::sqlite::Sqlite;
use crate::adapters::sqs::SqsTaskQueue;
use crate::config::Config;
use crate::domain::identity::Authenticator;
use crate::domain::runs::views::MediaLinks;
use crate::domain::runs::worker::Worker;
use crate::ports::{
    AgentRepo, BlobStore, Clock, IdentityRepo, MediaProbe, RunRepo, SharedStoreRepo, SystemClock, TaskInbox, TaskQueue,
    UploadRepo,
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
        B: IdentityRepo + SharedStoreRepo + AgentRepo + UploadRepo + 'static,
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
            uploads: backend,
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
        settings: EngineSettings,
    ) -> Self {
        let worker = Worker {
            runs: runs.clone(),
            queue: queue.clone(),
            blobs: self.blobs.clone(),
            toolkit: Arc::new(Ffmpeg::new(settings.ffmpeg)),
            probe: self.probe.clone(),
            downloader: Arc::new(HttpDownloader::new(self.allow_private_urls)),
            clock: self.clock.clone(),
            task_budget: settings.task_budget,
            scratch: settings.scratch,
        };
        self.engine = Some(Engine { runs, queue, worker, inbox, local_queue: None });
        self
    }

    /// Adds the embedded run engine: runs in `database`, tasks in its durable task table,
    /// executed by workers of this process with ffmpeg, scratch files under `scratch`.
    pub fn with_embedded_engine(self, database: Sqlite, scratch: PathBuf, task_budget: Duration) -> Self {
        let queue = SqliteTaskQueue::new(database.clone());
        let settings = EngineSettings { ffmpeg: "ffmpeg".into(), scratch, task_budget };
        let mut app =
            self.with_engine(Arc::new(database), Arc::new(queue.clone()), Some(Arc::new(queue.clone())), settings);
        if let Some(engine) = app.engine.as_mut() {
            engine.local_queue = Some(queue);
        }
        app
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
        };
        let inbox = take_tasks.then(|| Arc::new(queue.clone()) as Arc<dyn TaskInbox>);
        Ok(self.with_links(secret.as_bytes(), &config.public_url).with_engine(
            Arc::new(dynamodb),
            Arc::new(queue),
            inbox,
            settings,
        ))
    }
}
