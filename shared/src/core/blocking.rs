//! CPU-bound work off the async runtime's threads, so that a long computation (a large
//! graph planned, an output's edit decisions walked) never stops other requests and
//! tasks from being served.

/// Runs `work` on the blocking pool and answers its result; a panic in it is an error.
pub async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|error| anyhow::anyhow!("a computation stopped: {error}"))
}
