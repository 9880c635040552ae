//! The in-process workers of the embedded engine: they take task messages from the
//! durable task table and run them. At start, runs left `running` by an earlier process
//! are picked up again: the tasks it was running are queued again and every queued
//! task's message is sent again (a duplicate is refused by the claim).

use std::sync::Arc;
use std::time::Duration;

use crate::app::{App, Engine};
use crate::core::retry::RUN_UPDATE_CONFLICTS;
use crate::domain::runs::service::{change_run, send_tasks};

/// How long an idle worker sleeps when no message wakes it.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// Delay before a message whose handling failed (storage trouble) is tried again.
const RETRY_DELAY: Duration = Duration::from_secs(5);
/// Deliveries of one message before it is dropped (its task is then failed by the claim
/// limit, or was finished).
const MAX_RECEIVES: u32 = 20;

/// Running workers; dropping this stops them (their ffmpeg children are killed, and the
/// tasks they held run again at the next start).
pub struct Workers {
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Workers {
    fn drop(&mut self) {
        for handle in &self.handles {
            handle.abort();
        }
    }
}

/// Number of workers by default: one per core.
pub fn default_count() -> usize {
    std::thread::available_parallelism().map_or(2, |cores| cores.get())
}

/// Recovers runs an earlier process left, then starts `count` workers. Nothing to do
/// when the app has no embedded engine.
pub async fn start(app: &App, count: usize) -> anyhow::Result<Option<Workers>> {
    let Some(engine) = app.engine.clone() else { return Ok(None) };
    let Some(queue) = engine.local_queue.clone() else { return Ok(None) };
    queue.release_all().await?;
    recover(&engine).await?;
    let engine = Arc::new(engine);
    let handles = (0..count.max(1))
        .map(|_| {
            let (engine, queue) = (engine.clone(), queue.clone());
            tokio::spawn(async move {
                let lease = engine.worker.lease();
                loop {
                    let received = match queue.receive(lease).await {
                        Ok(Some(received)) => received,
                        Ok(None) => {
                            queue.wait(IDLE_POLL).await;
                            continue;
                        }
                        Err(error) => {
                            tracing::warn!(error = %format!("{error:#}"), "could not read the task queue");
                            tokio::time::sleep(IDLE_POLL).await;
                            continue;
                        }
                    };
                    let done = match engine.worker.process(received.message).await {
                        Ok(()) => true,
                        Err(error) => {
                            tracing::warn!(error = %format!("{error:#}"), receives = received.receives, "task message will be retried");
                            received.receives >= MAX_RECEIVES
                        }
                    };
                    let settled = if done {
                        queue.acknowledge(received.id).await
                    } else {
                        queue.retry_later(received.id, RETRY_DELAY).await
                    };
                    if let Err(error) = settled {
                        tracing::warn!(error = %format!("{error:#}"), "could not settle a task message");
                    }
                }
            })
        })
        .collect();
    Ok(Some(Workers { handles }))
}

/// Queues again the work of every run left running.
async fn recover(engine: &Engine) -> anyhow::Result<()> {
    for (organization, run_id) in engine.runs.running_runs().await? {
        let now = engine.worker.clock.now();
        let changed = change_run(engine.runs.as_ref(), organization, run_id, &RUN_UPDATE_CONFLICTS, |run| {
            let queued = run.recover(now);
            Ok(Some((queued, Vec::new())))
        })
        .await
        .map_err(|error| anyhow::anyhow!("recovering run {run_id}: {error}"))?;
        if let Some((run, queued)) = changed {
            tracing::info!(%run_id, tasks = queued.len(), "run picked up again");
            send_tasks(engine.queue.as_ref(), &run, &queued).await?;
        }
    }
    Ok(())
}
