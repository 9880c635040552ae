//! Implementations of the ports: SQLite, DynamoDB, S3, a local folder, ffprobe.

pub mod child;
pub mod dynamodb;
pub mod ffmpeg;
pub mod ffprobe;
pub mod fs;
pub mod http_download;
pub mod local_assets;
pub mod proxy;
pub mod s3;
pub mod sqlite;
pub mod sqs;
pub mod webhook_client;
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
