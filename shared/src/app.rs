//! Wiring: [`App::build`] takes an [`AppConfig`], and the app builds each adapter of the
//! process the first time a part of the service asks for its port.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::adapters::dynamodb::DynamoDb;
use crate::adapters::ffmpeg::Ffmpeg;
use crate::adapters::ffprobe::Ffprobe;
use crate::adapters::fs::LocalBlobStore;
use crate::adapters::http_download::HttpDownloader;
use crate::adapters::inline_vault::InlineVault;
use crate::adapters::local_assets::LocalAssetManager;
use crate::adapters::s3::S3BlobStore;
use crate::adapters::sandbox_billing::SandboxBilling;
use crate::adapters::sandbox_social::SandboxPublisher;
use crate::adapters::secrets::SecretsManager;
use crate::adapters::sqlite::tasks::SqliteTaskQueue;
use crate::adapters::sqlite::webhooks::SqliteWebhookQueue;
use crate::adapters::sqlite::Sqlite;
use crate::adapters::sqs::SqsQueue;
use crate::adapters::stripe::StripeBilling;
use crate::adapters::webhook_client::HttpWebhookClient;
use crate::adapters::ytdlp::YtDlp;
use crate::config::{BillingSettings, Config, Settings};
use crate::core::queue::{Inbox, Queue};
use crate::domain::agents::AgentRepo;
use crate::domain::asset_manager::{AssetManager, AssetRepo};
use crate::domain::avatars::AvatarRepo;
use crate::domain::credits::billing::BillingProvider;
use crate::domain::credits::CreditRepo;
use crate::domain::dispatch::Dispatch;
use crate::domain::idempotency::IdempotencyRepo;
use crate::domain::identity::{Authenticator, IdentityRepo};
use crate::domain::media::ports::{BlobStore, Downloader, MediaProbe, MediaRecords, MediaToolkit};
use crate::domain::media::MediaLinks;
use crate::domain::runs::events::Notifier;
use crate::domain::runs::ports::RunRepo;
use crate::domain::runs::sweep::Sweeper;
use crate::domain::runs::worker::Worker;
use crate::domain::shared_stores::SharedStoreRepo;
use crate::domain::sites::Sites;
use crate::domain::social::publisher::{CredentialVault, Publishers};
use crate::domain::social::service::Social;
use crate::domain::social::SocialRepo;
use crate::domain::time::{Clock, SystemClock};
use crate::domain::triggers::TriggerRepo;
use crate::domain::uploads::UploadRepo;
use crate::domain::webhooks::ports::WebhookRepo;
use crate::domain::webhooks::sender::WebhookSender;
use crate::domain::webhooks::WebhookMessage;
use crate::domain::work::Work;
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
    pub tasks: SqsQueue<Work>,
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
    /// Where the generation providers' keys are kept (a deployment's Secrets Manager).
    pub secrets: Option<SecretsManager>,
}

impl AppConfig {
    /// SQLite storage with its own task tables, media where given, default settings.
    pub fn sqlite(database: Sqlite, media: Media) -> Self {
        Self { storage: Storage::Sqlite(database), media, links: None, settings: Settings::default(), secrets: None }
    }

    /// DynamoDB storage without task queues, media where given, default settings.
    pub fn dynamodb(table: DynamoDb, media: Media) -> Self {
        let storage = Storage::DynamoDb { table, queues: None };
        Self { storage, media, links: None, settings: Settings::default(), secrets: None }
    }

    /// What an AWS deployment's process is built from: DynamoDB and S3, and the SQS
    /// queues when a task queue is configured (taken from by this process when `take`:
    /// `serve --backend aws`), media links signed with the configured secret.
    pub fn aws(config: &Config, aws: &aws_config::SdkConfig, take: bool) -> anyhow::Result<Self> {
        let AwsParts { table, queues, media, links } = AwsParts::of(config, aws, take)?;
        let storage = Storage::DynamoDb { table, queues };
        let secrets = Some(SecretsManager::from_config(aws));
        Ok(Self { storage, media, links, settings: config.settings.clone(), secrets })
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
    pub queue: Arc<dyn Queue<Work>>,
    pub worker: Worker,
    /// Publishes social posts (the work queue carries their messages too).
    pub social: Arc<SocialAdapters>,
    /// Where this process's workers take task messages from (`serve`); None where the
    /// `node-worker` event source delivers them.
    pub inbox: Option<Arc<dyn Inbox<Work>>>,
    /// Where webhook delivery messages go.
    pub webhooks: Arc<dyn Queue<WebhookMessage>>,
    /// Where this process's senders take them from (`serve`); None where the
    /// `webhook-sender` event source delivers them.
    pub webhook_inbox: Option<Arc<dyn Inbox<WebhookMessage>>>,
    /// The local tables, when they are the queues: workers release and recover their
    /// work at start. A trait object, so that a process without them links no SQLite
    /// code, not even the code that would drop them.
    pub local: Option<Arc<dyn LocalTables>>,
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

/// The task and delivery tables of a local database.
pub trait LocalTables: Send + Sync {
    fn tasks(&self) -> &SqliteTaskQueue;
    fn webhooks(&self) -> &SqliteWebhookQueue;
}

impl LocalTables for LocalQueues {
    fn tasks(&self) -> &SqliteTaskQueue {
        &self.tasks
    }
    fn webhooks(&self) -> &SqliteWebhookQueue {
        &self.webhooks
    }
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
///
/// Each port is built the first time a handler asks for it ([`App::stores`],
/// [`App::blobs`], [`App::engine`] …), from adapters named concretely where AWS provides
/// them. A Lambda function's binary therefore links the adapters its handler reaches and
/// no others: `whoami` reads API keys from DynamoDB and carries no S3, SQS, run or
/// SQLite code. SQLite sits behind trait objects ([`BackendPorts`], [`LocalTables`]),
/// which only `serve` and the tests create.
pub struct App {
    repos: Repos,
    ports: Ports,
    media: Media,
    blobs: OnceLock<Arc<dyn BlobStore>>,
    probe: OnceLock<Arc<dyn MediaProbe>>,
    asset_manager: OnceLock<Arc<dyn AssetManager>>,
    queue_source: QueueSource,
    queues: OnceLock<Queues>,
    sites: OnceLock<Sites>,
    downloader: OnceLock<Arc<dyn Downloader>>,
    settings: Settings,
    /// Where the generation providers' keys are kept, on AWS.
    secrets: Option<SecretsManager>,
    pub clock: Arc<dyn Clock>,
    auth: OnceLock<Authenticator>,
    /// How long a key's claim holds without renewal.
    pub idempotency_lease: std::time::Duration,
    /// The local folder behind `blobs`, when media is local: `serve` answers its URLs.
    pub local_blobs: Option<Arc<LocalBlobStore>>,
    /// Signs the 7-day media links of runs.
    pub links: MediaLinks,
    /// Whether URL inputs and callbacks may reach private addresses (local `serve`).
    pub allow_private_urls: bool,
    /// The run engine, built when first used ([`App::engine`]).
    engine: OnceLock<Engine>,
    /// Where plans and credits are paid for.
    billing: OnceLock<Arc<dyn BillingProvider>>,
    /// What the social operations borrow, built when first used ([`App::social`]).
    social: OnceLock<Arc<SocialAdapters>>,
}

/// Where the repositories are kept: a DynamoDB table, named concretely so that each
/// port's code is linked only where it is asked for; or any backend behind the trait
/// object of all its ports (SQLite).
enum Repos {
    DynamoDb(DynamoDb),
    Backend(Arc<dyn BackendPorts>),
}

/// Where the run engine's messages go: the SQS queues of a deployment (none: runs are
/// unavailable), built when an endpoint first sends a message ([`App::queues`]); or
/// queues made already (SQLite's tables).
enum QueueSource {
    Sqs(Option<SqsQueues>),
    Made(Queues),
}

macro_rules! ports {
    ($($(#[$doc:meta])* $name:ident: $port:ident,)*) => {
        /// The repositories, each built on first use.
        #[derive(Default)]
        struct Ports {
            $($name: OnceLock<Arc<dyn $port>>,)*
        }

        impl App {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> &Arc<dyn $port> {
                    self.ports.$name.get_or_init(|| match &self.repos {
                        Repos::DynamoDb(table) => Arc::new(table.clone()),
                        Repos::Backend(backend) => backend.clone().$name(),
                    })
                }
            )*
        }
    };
}

ports! {
    /// Organizations and their API keys.
    identity: IdentityRepo,
    stores: SharedStoreRepo,
    agents: AgentRepo,
    uploads: UploadRepo,
    /// Runs with their nodes, tasks and outputs.
    runs: RunRepo,
    /// Webhook deliveries and secrets.
    webhooks: WebhookRepo,
    /// Idempotency keys of the creating POSTs.
    idempotency: IdempotencyRepo,
    /// Workspaces' asset-manager connections and the `local` provider's items.
    assets: AssetRepo,
    /// Avatar profiles.
    avatars: AvatarRepo,
    /// Credit accounts, their ledgers and checkouts.
    credits: CreditRepo,
    /// Triggers' states.
    triggers: TriggerRepo,
    /// Social connections and posts.
    social_posts: SocialRepo,
}

/// The adapters the social operations borrow, owned by the wiring: [`SocialAdapters::lend`]
/// gives the domain's [`Social`] for one request, task or tick.
pub struct SocialAdapters {
    pub repo: Arc<dyn SocialRepo>,
    pub media: Arc<dyn MediaRecords>,
    pub blobs: Arc<dyn BlobStore>,
    pub probe: Arc<dyn MediaProbe>,
    pub toolkit: Arc<dyn MediaToolkit>,
    pub downloader: Arc<dyn Downloader>,
    pub publishers: Publishers,
    pub vault: Arc<dyn CredentialVault>,
    pub queue: Arc<dyn Queue<Work>>,
    pub clock: Arc<dyn Clock>,
    pub scratch: PathBuf,
    pub lease: Duration,
}

impl SocialAdapters {
    /// The social operations on these adapters, with the default time budgets.
    pub fn lend(&self) -> Social<'_> {
        Social {
            repo: self.repo.as_ref(),
            media: self.media.as_ref(),
            blobs: self.blobs.as_ref(),
            probe: self.probe.as_ref(),
            toolkit: self.toolkit.as_ref(),
            downloader: self.downloader.as_ref(),
            publishers: &self.publishers,
            vault: self.vault.as_ref(),
            queue: self.queue.as_ref(),
            clock: self.clock.as_ref(),
            scratch: &self.scratch,
            lease: self.lease,
            inline_media: crate::domain::social::service::INLINE_MEDIA_BUDGET,
            delete_budget: crate::domain::social::service::DELETE_BUDGET,
        }
    }
}

impl Engine {
    /// Hands a message of the work queue to the context it is for.
    pub fn dispatch(&self) -> Dispatch<'_> {
        Dispatch { runs: &self.worker, social: self.social.lend() }
    }

    /// Builds the engine: its queues, its worker (ffmpeg, downloads, video sites), webhook
    /// sender and sweeper. Only [`App::engine`] calls it, so a function binary whose
    /// handler never touches runs links none of them.
    fn build(app: &App) -> Self {
        let queues = app.queues().clone();
        let settings = &app.settings;
        let clock = &app.clock;
        let notifier = queues.notifier(app.links.clone());
        let allow_private = settings.allow_private_urls;
        let worker = Worker {
            runs: app.runs().clone(),
            queue: queues.tasks.clone(),
            blobs: app.blobs().clone(),
            toolkit: Arc::new(Ffmpeg::new(settings.ffmpeg.clone())),
            probe: app.probe().clone(),
            downloader: Arc::new(HttpDownloader::new(allow_private)),
            sites: app.sites().clone(),
            generators: crate::adapters::providers::generators(
                &settings.generation,
                &settings.ffmpeg,
                app.secrets.clone(),
            ),
            avatars: app.avatars().clone(),
            uploads: app.uploads().clone(),
            blocked_retry: settings.blocked_retry,
            clock: clock.clone(),
            notifier,
            deliveries: app.webhooks().clone(),
            task_budget: settings.task_budget,
            segment: settings.segment,
            prices: settings.prices,
            billing: app.billing().clone(),
            top_up_wait: settings.top_up_wait,
            claim_margin: settings.claim_margin,
            scratch: settings.scratch.clone(),
        };
        let sender = WebhookSender {
            repo: app.webhooks().clone(),
            client: Arc::new(HttpWebhookClient::new(allow_private)),
            clock: clock.clone(),
            schedule: settings.webhook_schedule.clone(),
        };
        let sweeper = Sweeper {
            runs: app.runs().clone(),
            deliveries: app.webhooks().clone(),
            tasks: queues.tasks.clone(),
            notifier: worker.notifier.clone(),
            clock: clock.clone(),
            settings: settings.sweep,
        };
        Engine {
            sweeper,
            runs: app.runs().clone(),
            queue: queues.tasks,
            worker,
            social: app.social_adapters().clone(),
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
    /// Wires each part of the service to the adapters `config` names; each port is built
    /// when first used.
    pub fn build(config: AppConfig) -> Self {
        let AppConfig { storage, media, links, settings, secrets } = config;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        match storage {
            Storage::Sqlite(database) => {
                let queues = QueueSource::Made(Queues::sqlite(database.clone(), &clock));
                Self::assemble(Repos::Backend(Arc::new(database)), queues, clock, media, links, (settings, secrets))
            }
            Storage::DynamoDb { table, queues } => {
                let queues = QueueSource::Sqs(queues);
                Self::assemble(Repos::DynamoDb(table), queues, clock, media, links, (settings, secrets))
            }
        }
    }

    fn assemble(
        repos: Repos,
        queues: QueueSource,
        clock: Arc<dyn Clock>,
        media: Media,
        links: Option<(Vec<u8>, String)>,
        (settings, secrets): (Settings, Option<SecretsManager>),
    ) -> Self {
        let local_blobs = match &media {
            Media::Local(local) => Some(local.clone()),
            Media::S3(_) => None,
        };
        let links = match (links, &local_blobs) {
            (Some((secret, public_url)), _) => MediaLinks::new(&secret, &public_url),
            (None, Some(local)) => MediaLinks::new(local.secret(), local.base_url()),
            (None, None) => MediaLinks::new(&crate::core::signing::generate_secret(), "http://127.0.0.1:3000"),
        };
        Self {
            repos,
            ports: Ports::default(),
            media,
            blobs: OnceLock::new(),
            probe: OnceLock::new(),
            asset_manager: OnceLock::new(),
            queue_source: queues,
            queues: OnceLock::new(),
            sites: OnceLock::new(),
            downloader: OnceLock::new(),
            clock,
            auth: OnceLock::new(),
            idempotency_lease: settings.idempotency_lease,
            local_blobs,
            links,
            allow_private_urls: settings.allow_private_urls,
            settings,
            secrets,
            engine: OnceLock::new(),
            billing: OnceLock::new(),
            social: OnceLock::new(),
        }
    }

    /// Where plans and credits are paid for: the local sandbox (whose checkout pages
    /// `serve` answers), or Stripe.
    pub fn billing(&self) -> &Arc<dyn BillingProvider> {
        self.billing.get_or_init(|| {
            let public_url = self.links.public_url().to_owned();
            match &self.settings.billing {
                BillingSettings::Sandbox => Arc::new(SandboxBilling::new(&public_url)),
                BillingSettings::Stripe(stripe) => {
                    Arc::new(StripeBilling::new(stripe.clone(), self.secrets.clone(), &public_url))
                }
            }
        })
    }

    /// The social operations: connections, posts, publishing (the sandbox publisher,
    /// whose post pages `serve` answers, and YouTube) and the scheduler's
    /// [`Social::publish_due`]. Credentials are kept in Secrets Manager on AWS.
    pub fn social(&self) -> Social<'_> {
        self.social_adapters().lend()
    }

    /// The adapters [`App::social`] lends, built on first use.
    pub fn social_adapters(&self) -> &Arc<SocialAdapters> {
        self.social.get_or_init(|| {
            let settings = &self.settings;
            let sandbox =
                SandboxPublisher { public_url: self.links.public_url().to_owned(), blobs: self.blobs().clone() };
            let youtube = crate::adapters::youtube::YoutubePublisher::new(&settings.youtube_api_url)
                .with_token_url(&settings.youtube_token_url);
            let vault: Arc<dyn CredentialVault> = match &self.secrets {
                Some(secrets) => Arc::new(secrets.vault(&settings.social_secret_prefix)),
                None => Arc::new(InlineVault),
            };
            Arc::new(SocialAdapters {
                repo: self.social_posts().clone(),
                media: self.runs().clone(),
                blobs: self.blobs().clone(),
                probe: self.probe().clone(),
                toolkit: Arc::new(Ffmpeg::new(settings.ffmpeg.clone())),
                downloader: Arc::new(HttpDownloader::new(settings.allow_private_urls)),
                publishers: Publishers { sandbox: Arc::new(sandbox), youtube: Arc::new(youtube) },
                vault,
                queue: self.queues().tasks.clone(),
                clock: self.clock.clone(),
                scratch: settings.scratch.clone(),
                lease: settings.task_budget + settings.claim_margin,
            })
        })
    }

    /// Replaces the billing provider (tests give an app one that fails).
    pub fn replace_billing(&mut self, billing: Arc<dyn BillingProvider>) {
        assert!(self.engine.get().is_none(), "replace the billing provider before the engine is built");
        self.billing = OnceLock::from(billing);
    }

    /// Reads the caller's key (cached for `AUTH_CACHE_TTL`).
    pub fn auth(&self) -> &Authenticator {
        self.auth.get_or_init(|| Authenticator::new(self.identity().clone(), self.settings.auth_cache_ttl))
    }

    /// Where media files are kept.
    pub fn blobs(&self) -> &Arc<dyn BlobStore> {
        self.blobs.get_or_init(|| match &self.media {
            Media::Local(local) => local.clone(),
            Media::S3(s3) => Arc::new(s3.clone()),
        })
    }

    /// Reads the streams and duration of media files (ffprobe).
    pub fn probe(&self) -> &Arc<dyn MediaProbe> {
        self.probe.get_or_init(|| Arc::new(Ffprobe::new(self.settings.ffprobe.clone())))
    }

    /// Reads asset-manager items (the `local` provider).
    pub fn asset_manager(&self) -> &Arc<dyn AssetManager> {
        self.asset_manager.get_or_init(|| Arc::new(LocalAssetManager::new(self.assets().clone())))
    }

    /// Replaces where media is kept (tests give an app a fake).
    pub fn replace_blobs(&mut self, blobs: Arc<dyn BlobStore>) {
        assert!(self.engine.get().is_none(), "replace the blob store before the engine is built");
        self.blobs = OnceLock::from(blobs);
    }

    /// Replaces how media is probed (tests give an app a fake).
    pub fn replace_probe(&mut self, probe: Arc<dyn MediaProbe>) {
        assert!(self.engine.get().is_none(), "replace the probe before the engine is built");
        self.probe = OnceLock::from(probe);
    }

    /// Replaces the shared-store repository (tests give an app one that fails).
    pub fn replace_stores(&mut self, stores: Arc<dyn SharedStoreRepo>) {
        assert!(self.engine.get().is_none(), "replace the store repository before the engine is built");
        self.ports.stores = OnceLock::from(stores);
    }

    /// Where run messages go (and, locally, come from), built on first use.
    pub fn queues(&self) -> &Queues {
        self.queues.get_or_init(|| match &self.queue_source {
            QueueSource::Sqs(queues) => Queues::sqs(queues.clone()),
            QueueSource::Made(queues) => queues.clone(),
        })
    }

    /// What this deployment lacks for runs, when it cannot run any (known without
    /// building the queues).
    pub fn runs_missing(&self) -> Option<&'static str> {
        match &self.queue_source {
            QueueSource::Sqs(None) => Some(NO_TASK_QUEUE),
            QueueSource::Sqs(Some(_)) => None,
            QueueSource::Made(queues) => queues.missing,
        }
    }

    /// The video-sharing sites URL inputs may name, read with yt-dlp.
    pub fn sites(&self) -> &Sites {
        self.sites.get_or_init(|| {
            let settings = &self.settings;
            let yt_dlp =
                YtDlp::new(settings.yt_dlp.clone(), settings.allow_private_urls).with_ffmpeg(settings.ffmpeg.clone());
            Sites::new(Arc::new(yt_dlp), &settings.video_site_hosts)
        })
    }

    /// Fetches what URLs name (feeds) through the SSRF guard.
    pub fn downloader(&self) -> &Arc<dyn Downloader> {
        self.downloader.get_or_init(|| Arc::new(HttpDownloader::new(self.settings.allow_private_urls)))
    }

    /// The run engine (worker, webhook sender, sweeper), built on first use: what the
    /// queue-fed functions, the sweeper and `serve`'s workers run.
    pub fn engine(&self) -> &Engine {
        self.engine.get_or_init(|| Engine::build(self))
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
        Self::from_env_with(&crate::adapters::aws_env::lambda_settings()?)
    }

    /// As [`App::from_env`], with AWS settings the function loaded already (its other
    /// clients then share their HTTP connections).
    pub fn from_env_with(aws: &aws_config::SdkConfig) -> anyhow::Result<Self> {
        let config = Config::from_env()?;
        if config.settings.allow_private_urls {
            tracing::warn!("ALLOW_PRIVATE_URLS is on: URL inputs and callbacks may reach private addresses");
        }
        let AwsParts { table, queues, media, links } = AwsParts::of(&config, aws, false)?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let secrets = Some(SecretsManager::from_config(aws));
        let queues = QueueSource::Sqs(queues);
        Ok(Self::assemble(Repos::DynamoDb(table), queues, clock, media, links, (config.settings, secrets)))
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
    fn avatars(self: Arc<Self>) -> Arc<dyn AvatarRepo>;
    fn credits(self: Arc<Self>) -> Arc<dyn CreditRepo>;
    fn triggers(self: Arc<Self>) -> Arc<dyn TriggerRepo>;
    fn social_posts(self: Arc<Self>) -> Arc<dyn SocialRepo>;
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
    fn avatars(self: Arc<Self>) -> Arc<dyn AvatarRepo> {
        self
    }
    fn credits(self: Arc<Self>) -> Arc<dyn CreditRepo> {
        self
    }
    fn triggers(self: Arc<Self>) -> Arc<dyn TriggerRepo> {
        self
    }
    fn social_posts(self: Arc<Self>) -> Arc<dyn SocialRepo> {
        self
    }
}

/// The queues of one transport, both sides.
#[derive(Clone)]
pub struct Queues {
    /// Where node-task messages go.
    pub tasks: Arc<dyn Queue<Work>>,
    /// Where this process's workers take them from (`serve`); None where the
    /// `node-worker` event source delivers them.
    pub inbox: Option<Arc<dyn Inbox<Work>>>,
    /// Where webhook delivery messages go.
    pub webhooks: Arc<dyn Queue<WebhookMessage>>,
    /// Where this process's senders take them from (`serve`).
    pub webhook_inbox: Option<Arc<dyn Inbox<WebhookMessage>>>,
    /// The local tables, when they are the queues.
    pub local: Option<Arc<dyn LocalTables>>,
    /// What the deployment lacks for runs, when it cannot run any.
    pub missing: Option<&'static str>,
}

impl Queues {
    /// Records run events with media links signed by `links`.
    pub fn notifier(&self, links: MediaLinks) -> Notifier {
        Notifier { links, queue: self.webhooks.clone() }
    }

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
            local: Some(Arc::new(local)),
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
            inbox: take.then(|| Arc::new(tasks) as Arc<dyn Inbox<Work>>),
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
