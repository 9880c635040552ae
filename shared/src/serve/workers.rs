//! The in-process workers of `serve`: they take task messages from the engine's inbox
//! (the durable task table, or SQS with `--backend aws`) and run them. With the task
//! table, runs left `running` by an earlier process are picked up again at start: the
//! tasks it was running are queued again and every queued task's message is sent again
//! (a duplicate is refused by the claim). On SQS a stopped worker's message reappears
//! after its visibility timeout.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use std::time::Duration;

use crate::adapters::fs::{LocalBlobStore, UNFINALIZED_KEPT_FOR};
use crate::adapters::sqlite::tasks::SqliteTaskQueue;
use crate::app::{App, Engine};
use crate::core::queue::{Delivery, Inbox};
use crate::core::retry::RUN_UPDATE_CONFLICTS;
use crate::domain::runs::service::{change_run, send_tasks, Change};
use crate::domain::runs::worker::{panic_text, Processed};
use crate::domain::webhooks::sender::Sent;
use crate::domain::work::Work;

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

/// Webhook senders of a `serve` process: deliveries of different runs go out
/// concurrently, so a receiver that hangs holds up only its own run's events.
pub const WEBHOOK_SENDERS: usize = 8;

/// Recovers runs an earlier process left in the local task table, then starts `count`
/// workers on the engine's inbox, and the webhook senders. Nothing to do when the app
/// has no inbox.
pub async fn start(app: &App, count: usize) -> anyhow::Result<Option<Workers>> {
    start_engine(app.engine(), app.local_blobs.clone(), count).await
}

/// As [`start`], for an engine (tests give theirs a toolkit of their own) and the local
/// media folder, if any.
pub async fn start_engine(
    engine: &Engine,
    local_blobs: Option<Arc<LocalBlobStore>>,
    count: usize,
) -> anyhow::Result<Option<Workers>> {
    let engine = engine.clone();
    let Some(inbox) = engine.inbox.clone() else { return Ok(None) };
    if let Some(local) = &engine.local {
        local.webhooks().release_all().await?;
        local.tasks().release_all().await?;
        recover(&engine, local.tasks()).await?;
    }
    let mut handles = senders(&engine, WEBHOOK_SENDERS);
    handles.push(sweeps(&engine, local_blobs));
    let engine = Arc::new(engine);
    handles.extend((0..count.max(1)).map(|_| {
        let (engine, inbox) = (engine.clone(), inbox.clone());
        tokio::spawn(async move {
            let lease = engine.worker.lease();
            loop {
                let deliveries = match inbox.receive(1, lease).await {
                    Ok(deliveries) => deliveries,
                    Err(error) => {
                        tracing::warn!(error = %format!("{error:#}"), "could not read the task queue");
                        tokio::time::sleep(IDLE_POLL).await;
                        continue;
                    }
                };
                for delivery in deliveries {
                    settle(&engine, inbox.as_ref(), &delivery).await;
                }
            }
        })
    }));
    Ok(Some(Workers { handles }))
}

/// How often `serve` sweeps (the `sweeper` function's schedule on AWS).
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The sweeper's loop: a sweep every [`SWEEP_EVERY`], the first one after it.
/// Locally, each sweep also removes uploads never finalized after a day.
fn sweeps(engine: &Engine, local_blobs: Option<Arc<LocalBlobStore>>) -> tokio::task::JoinHandle<()> {
    let sweeper = engine.sweeper.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            if let Err(error) = sweeper.sweep().await {
                tracing::warn!(error = %format!("{error:#}"), "sweep failed; the next one tries again");
            }
            if let Some(local) = &local_blobs {
                match local.remove_unfinalized(UNFINALIZED_KEPT_FOR).await {
                    Ok(0) => {}
                    Ok(removed) => tracing::info!(removed, "sweep: removed uploads never finalized"),
                    Err(error) => tracing::warn!(error = %format!("{error:#}"), "sweep: could not remove old uploads"),
                }
            }
        }
    })
}

/// Webhook sender loops on the engine's webhook inbox.
fn senders(engine: &Engine, count: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let Some(inbox) = engine.webhook_inbox.clone() else { return Vec::new() };
    (0..count)
        .map(|_| {
            let (sender, inbox) = (engine.sender.clone(), inbox.clone());
            tokio::spawn(async move {
                loop {
                    let deliveries = match inbox.receive(1, sender.lease()).await {
                        Ok(deliveries) => deliveries,
                        Err(error) => {
                            tracing::warn!(error = %format!("{error:#}"), "could not read the webhook queue");
                            tokio::time::sleep(IDLE_POLL).await;
                            continue;
                        }
                    };
                    for delivery in deliveries {
                        let settled = match sender.process(&delivery.message, &delivery.handle).await {
                            Ok(Sent::Done) => inbox.acknowledge(&delivery).await,
                            Ok(Sent::RetryIn(delay)) => inbox.retry_later(&delivery, delay).await,
                            Err(error) => {
                                tracing::warn!(error = %format!("{error:#}"), "webhook delivery will be retried");
                                inbox.retry_later(&delivery, RETRY_DELAY).await
                            }
                        };
                        if let Err(error) = settled {
                            tracing::warn!(error = %format!("{error:#}"), "could not settle a webhook message");
                        }
                    }
                }
            })
        })
        .collect()
}

/// Runs one delivered message and acknowledges it, or leaves it for a later delivery.
async fn settle(engine: &Engine, inbox: &dyn Inbox<Work>, delivery: &Delivery<Work>) {
    let processed = AssertUnwindSafe(engine.dispatch().process(delivery.message))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(anyhow::anyhow!("the worker stopped unexpectedly: {}", panic_text(&*panic))));
    let later = match processed {
        Ok(Processed::Done) => None,
        Ok(Processed::Later(delay)) => Some(delay),
        Err(error) => {
            tracing::warn!(error = %format!("{error:#}"), receives = delivery.receives, "task message will be retried");
            (delivery.receives < MAX_RECEIVES).then_some(RETRY_DELAY)
        }
    };
    let settled = match later {
        None => inbox.acknowledge(delivery).await,
        Some(delay) => inbox.retry_later(delivery, delay).await,
    };
    if let Err(error) = settled {
        tracing::warn!(error = %format!("{error:#}"), "could not settle a task message");
    }
}

/// Queues again the work of every run left running.
async fn recover(engine: &Engine, queue: &SqliteTaskQueue) -> anyhow::Result<()> {
    for (organization, run_id) in queue.running_runs().await? {
        let now = engine.worker.clock.now();
        let changed = change_run(
            engine.runs.as_ref(),
            &engine.worker.notifier,
            organization,
            run_id,
            &RUN_UPDATE_CONFLICTS,
            |run, _| Ok(Change::Store(run.recover(now), Vec::new())),
        )
        .await
        .map_err(|error| anyhow::anyhow!("recovering run {run_id}: {error}"))?;
        if let (Some(run), queued) = changed {
            tracing::info!(%run_id, tasks = queued.len(), "run picked up again");
            send_tasks(engine.queue.as_ref(), &run, &queued).await?;
            let parts = run.queued_parts();
            if !parts.is_empty() {
                engine.queue.send(&parts).await?;
            }
        }
    }
    Ok(())
}

/// How often `serve`'s scheduler ticks (the `scheduler` function's schedule on AWS).
pub const SCHEDULER_EVERY: Duration = Duration::from_secs(60);

/// The scheduler's loop (the `scheduler` function's schedule on AWS): a tick at the
/// start of every period `every` ([`SCHEDULER_EVERY`]: each minute's start). A tick that
/// fails is logged; the next one tries again (what was due is still due). Stopped when
/// the handle is aborted or dropped with the task.
pub fn scheduler(app: Arc<App>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let period = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
            let millis = crate::domain::time::Timestamp::now().unix_millis();
            tokio::time::sleep(Duration::from_millis(period - millis % period + 5)).await;
            let now = app.clock.now();
            match crate::runtime::schedule::scheduler_tick(&app, now).await {
                Ok(report) => tracing::debug!(%report, "scheduler tick"),
                Err(error) => {
                    tracing::warn!(error = %format!("{error:#}"), "scheduler tick failed; the next one tries again")
                }
            }
        }
    })
}
