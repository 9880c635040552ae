//! The application state every handler receives: the ports, wired to one backend.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::adapters::dynamodb::DynamoDb;
use crate::adapters::ffprobe::Ffprobe;
use crate::adapters::fs::LocalBlobStore;
use crate::adapters::s3::S3BlobStore;
use crate::adapters::sqlite::Sqlite;
use crate::config::Config;
use crate::domain::identity::Authenticator;
use crate::ports::{AgentRepo, BlobStore, Clock, IdentityRepo, MediaProbe, SharedStoreRepo, SystemClock, UploadRepo};

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
        }
    }

    /// State in a new in-memory SQLite database, media in a new temporary folder; keys
    /// are checked on every request. For tests and benchmarks.
    pub fn embedded() -> anyhow::Result<Self> {
        let folder = std::env::temp_dir().join(format!("video-workflow-{}", uuid::Uuid::new_v4()));
        let local = LocalBlobStore::open(folder, "http://127.0.0.1:3000")?;
        Ok(Self::sqlite(Sqlite::in_memory()?, Media::Local(Arc::new(local))))
    }

    /// State in SQLite, media where given; keys are checked on every request.
    pub fn sqlite(database: Sqlite, media: Media) -> Self {
        Self::wire(Arc::new(database), media, Arc::new(Ffprobe::new("ffprobe")), Duration::ZERO)
    }

    /// State in DynamoDB, media where given.
    pub fn dynamodb(backend: DynamoDb, media: Media, ffprobe: impl Into<PathBuf>, auth_cache_ttl: Duration) -> Self {
        Self::wire(Arc::new(backend), media, Arc::new(Ffprobe::new(ffprobe)), auth_cache_ttl)
    }

    /// The state of a Lambda function: DynamoDB and S3, configured from the environment.
    pub async fn from_env() -> anyhow::Result<Self> {
        let config = Config::from_env()?;
        let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let media = Media::S3(S3BlobStore::from_config(&aws, &config.media_bucket));
        Ok(Self::dynamodb(DynamoDb::from_config(&aws, config.table_name), media, config.ffprobe, config.auth_cache_ttl))
    }
}
