//! Implementations of the ports: SQLite, DynamoDB, S3, a local folder, ffprobe.

pub mod aws_env;
pub mod child;
pub mod dynamodb;
pub mod ffmpeg;
pub mod ffprobe;
pub mod fs;
pub mod gemini;
pub mod growing;
pub mod http_download;
pub mod inline_vault;
pub mod local_assets;
pub mod local_generation;
pub mod openai;
pub mod providers;
pub mod proxy;
pub mod s3;
pub mod sandbox_billing;
pub mod sandbox_social;
pub mod secrets;
pub mod sqlite;
pub mod sqs;
pub mod stripe;
pub mod webhook_client;
pub mod youtube;
pub mod ytdlp;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// The IAM actions a client has performed, collected by the adapters' `recording_actions`
/// so that tests can hold each function's least-privilege policy to what it really does.
#[derive(Clone, Debug, Default)]
pub struct ActionLog(Arc<Mutex<BTreeSet<String>>>);

impl ActionLog {
    /// The actions recorded since the last call, e.g. `dynamodb:GetItem`.
    pub fn take(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    fn record(&self, actions: impl IntoIterator<Item = String>) {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).extend(actions);
    }
}

/// An AWS SDK client made on first use from the settings a process loaded at start, so
/// that a function whose handler never calls the service links none of its client code
/// (building a client pulls in its endpoint rules and interceptors). Clones share it.
pub(crate) struct LazyClient<C> {
    settings: Option<Arc<aws_config::SdkConfig>>,
    client: Arc<std::sync::OnceLock<C>>,
}

impl<C> Clone for LazyClient<C> {
    fn clone(&self) -> Self {
        Self { settings: self.settings.clone(), client: self.client.clone() }
    }
}

impl<C> LazyClient<C> {
    /// A client to be made from `settings`.
    pub(crate) fn new(settings: &aws_config::SdkConfig) -> Self {
        Self { settings: Some(Arc::new(settings.clone())), client: Default::default() }
    }

    /// A client made already.
    pub(crate) fn ready(client: C) -> Self {
        Self { settings: None, client: Arc::new(std::sync::OnceLock::from(client)) }
    }

    /// The client, made by `make` on first use. `make` is named at the call site, the
    /// adapter's own `client()`, so only code that calls the service reaches it.
    pub(crate) fn get(&self, make: fn(&aws_config::SdkConfig) -> C) -> &C {
        self.client.get_or_init(|| match &self.settings {
            Some(settings) => make(settings),
            None => unreachable!("a ready client is set when it is made"),
        })
    }
}
