//! Settings read once from the environment at cold start.

use std::time::Duration;

use anyhow::Context;

/// Table name used when `TABLE_NAME` is not set.
pub const DEFAULT_TABLE_NAME: &str = "video-workflow";

/// Typed configuration of a Lambda function or of `serve --backend aws`.
#[derive(Clone, Debug)]
pub struct Config {
    /// The DynamoDB table holding every item.
    pub table_name: String,
    /// How long a verified API key is trusted without reading it again.
    pub auth_cache_ttl: Duration,
}

impl Config {
    /// Reads `TABLE_NAME` and `AUTH_CACHE_SECONDS` (default 30).
    pub fn from_env() -> anyhow::Result<Self> {
        let table_name = std::env::var("TABLE_NAME").unwrap_or_else(|_| DEFAULT_TABLE_NAME.to_owned());
        let seconds = match std::env::var("AUTH_CACHE_SECONDS") {
            Ok(text) => text.parse().with_context(|| format!("AUTH_CACHE_SECONDS={text:?} is not a whole number"))?,
            Err(_) => 30,
        };
        Ok(Self { table_name, auth_cache_ttl: Duration::from_secs(seconds) })
    }
}
