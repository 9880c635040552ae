//! The application state every handler receives: the ports, wired to one backend.

use std::sync::Arc;
use std::time::Duration;

use crate::adapters::dynamodb::DynamoDb;
use crate::adapters::memory::MemoryBackend;
use crate::config::Config;
use crate::domain::identity::Authenticator;
use crate::ports::{Clock, IdentityRepo, SharedStoreRepo, SystemClock};

/// Ports and services shared by all requests of a process.
pub struct App {
    pub identity: Arc<dyn IdentityRepo>,
    pub stores: Arc<dyn SharedStoreRepo>,
    pub clock: Arc<dyn Clock>,
    pub auth: Authenticator,
}

impl App {
    /// Wires the given ports together.
    pub fn new(
        identity: Arc<dyn IdentityRepo>,
        stores: Arc<dyn SharedStoreRepo>,
        clock: Arc<dyn Clock>,
        auth_cache_ttl: Duration,
    ) -> Self {
        let auth = Authenticator::new(identity.clone(), auth_cache_ttl);
        Self { identity, stores, clock, auth }
    }

    /// Everything in process memory; keys are checked on every request.
    pub fn embedded() -> Self {
        let backend = Arc::new(MemoryBackend::new());
        Self::new(backend.clone(), backend, Arc::new(SystemClock), Duration::ZERO)
    }

    /// Everything in DynamoDB.
    pub fn dynamodb(backend: DynamoDb, auth_cache_ttl: Duration) -> Self {
        let backend = Arc::new(backend);
        Self::new(backend.clone(), backend, Arc::new(SystemClock), auth_cache_ttl)
    }

    /// The state of a Lambda function: DynamoDB, configured from the environment.
    pub async fn from_env() -> anyhow::Result<Self> {
        let config = Config::from_env()?;
        Ok(Self::dynamodb(DynamoDb::connect(config.table_name).await, config.auth_cache_ttl))
    }
}
