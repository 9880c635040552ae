//! Settings read once from the environment at cold start.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

/// Table name used when `TABLE_NAME` is not set.
pub const DEFAULT_TABLE_NAME: &str = "video-workflow";
/// Bucket used when `MEDIA_BUCKET` is not set (local runs against the emulator).
pub const DEFAULT_MEDIA_BUCKET: &str = "video-workflow-media";

/// Typed configuration of a Lambda function or of `serve --backend aws`.
#[derive(Clone, Debug)]
pub struct Config {
    /// The DynamoDB table holding every item.
    pub table_name: String,
    /// How long a verified API key is trusted without reading it again.
    pub auth_cache_ttl: Duration,
    /// The S3 bucket of uploads and outputs.
    pub media_bucket: String,
    /// The ffprobe program (on Lambda, from a layer: `/opt/bin/ffprobe`).
    pub ffprobe: PathBuf,
}

impl Config {
    /// Reads `TABLE_NAME`, `AUTH_CACHE_SECONDS` (default 30), `MEDIA_BUCKET` and
    /// `FFPROBE_PATH` (default `ffprobe` on the PATH).
    pub fn from_env() -> anyhow::Result<Self> {
        let variable = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
        let seconds = match std::env::var("AUTH_CACHE_SECONDS") {
            Ok(text) => text.parse().with_context(|| format!("AUTH_CACHE_SECONDS={text:?} is not a whole number"))?,
            Err(_) => 30,
        };
        Ok(Self {
            table_name: variable("TABLE_NAME", DEFAULT_TABLE_NAME),
            auth_cache_ttl: Duration::from_secs(seconds),
            media_bucket: variable("MEDIA_BUCKET", DEFAULT_MEDIA_BUCKET),
            ffprobe: PathBuf::from(variable("FFPROBE_PATH", "ffprobe")),
        })
    }
}
