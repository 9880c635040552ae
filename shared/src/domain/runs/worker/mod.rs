//! Running one task message, in three steps, each idempotent: [`Worker::claim`] the
//! attempt, [`Worker::execute`] its media work in a scratch folder (storing the files it
//! makes), then [`Worker::record`] the outcome. A duplicate message does nothing, and a
//! worker that dies leaves a task that runs again.

mod execute;
mod generate;
mod inputs;
mod parts;

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;

use super::charges::Prices;
use super::engine::{Claim, Delivered};
use super::events::Notifier;
use super::ports::{RunRepo, RunTooLarge};
use super::service::{change_run, send_tasks, Change, RunError};
use super::{CreditBlock, Fault, MediaFile, NodeIndex, Run, RunStatus, TaskIndex, TaskStatus};
use crate::core::queue::Queue;
use crate::core::retry::RUN_UPDATE_CONFLICTS;
use crate::domain::avatars::AvatarRepo;
use crate::domain::credits::billing::BillingProvider;
use crate::domain::credits::service::{self as credit_service, CreditPorts, ToppedUp};
use crate::domain::generation::Generators;
use crate::domain::ids::OrganizationId;
use crate::domain::media::ports::{BlobStore, Downloader, MediaProbe, MediaToolkit};
use crate::domain::media::{Edit, MediaRecord, MediaType, RenderInput};
use crate::domain::sites::Sites;
use crate::domain::time::{Clock, Timestamp};
use crate::domain::uploads::UploadRepo;
use crate::domain::webhooks::ports::WebhookRepo;
use crate::domain::webhooks::{DeliveryState, WebhookMessage};
pub use crate::domain::work::Processed;
use crate::domain::work::{NodeTask, Work};

/// Largest URL input (the contract's limit).
pub const MAX_DOWNLOAD_BYTES: u64 = 5 * 1024 * 1024 * 1024;
/// Longest input video (the contract's limit).
pub const MAX_INPUT_MS: u64 = 5 * 60 * 60 * 1000;

// When a task's media work must stop (its run was cancelled, or its time is up).
use crate::domain::generation::Stop;

/// What a task's media work produced.
enum TaskOutput {
    /// A new file at the task's output path.
    Rendered,
    /// A new file stored at this key as it was written (a join of parts).
    Stored(String),
    /// An existing file, passed on.
    Existing(MediaFile),
    /// A file a generation provider made at `path`.
    Generated {
        path: PathBuf,
        media: MediaType,
        provider: String,
    },
    /// Failed for a reason of ours (a render, a provider, a time limit): its credits
    /// are given back.
    Failed(String),
    /// Failed because of this node (for a reason of ours).
    FailedAt(String, NodeIndex),
    /// Refused because of what the caller gave (media that is not media, a profile
    /// that failed, parameters an edit cannot use), at the node when one is named: its
    /// credits are kept.
    Refused(String, Option<NodeIndex>),
    Cancelled,
    /// Waits for something not ready yet.
    Blocked,
    /// Made in these parts (an output longer than a segment).
    Split(Vec<crate::domain::media::RenderPart>),
}

/// What an edit task renders: its videos, its chain's edits, and the run's node of each
/// edit (none for a Video Input's window).
struct EditPlan {
    inputs: Vec<RenderInput>,
    edits: Vec<Edit>,
    edit_nodes: Vec<NodeIndex>,
}

/// How often a running task checks whether its run was cancelled.
pub const CANCEL_POLL: Duration = Duration::from_millis(500);

/// What a worker needs.
#[derive(Clone)]
pub struct Worker {
    pub runs: Arc<dyn RunRepo>,
    pub queue: Arc<dyn Queue<Work>>,
    pub blobs: Arc<dyn BlobStore>,
    pub toolkit: Arc<dyn MediaToolkit>,
    pub probe: Arc<dyn MediaProbe>,
    pub downloader: Arc<dyn Downloader>,
    /// Video-sharing sites' videos (yt-dlp).
    pub sites: Sites,
    /// The providers of generation nodes.
    pub generators: Generators,
    /// Avatar profiles: read by AI Avatar tasks (and processed with this worker's tools).
    pub avatars: Arc<dyn AvatarRepo>,
    /// Uploads (an avatar's sources, and the URL sources it stores as uploads).
    pub uploads: Arc<dyn UploadRepo>,
    /// How long a task blocked on an avatar profile waits before it looks again.
    pub blocked_retry: Duration,
    pub clock: Arc<dyn Clock>,
    /// Records the runs' webhook events.
    pub notifier: Notifier,
    /// The delivery log, to queue again deliveries a stopped worker recorded but never queued.
    pub deliveries: Arc<dyn WebhookRepo>,
    /// Longest one task's media work may take.
    pub task_budget: Duration,
    /// An edit whose output is longer is made in parts of this length (None: one pass).
    pub segment: Option<Duration>,
    /// Which prices tasks pay.
    pub prices: Prices,
    /// Where auto top-ups are bought.
    pub billing: Arc<dyn BillingProvider>,
    /// How long a task blocked for credits waits for an auto top-up to be paid.
    pub top_up_wait: Duration,
    /// How long a claim holds beyond the budget: time to store the task's files and
    /// record its result.
    pub claim_margin: Duration,
    /// Folder for scratch files (a folder per task inside it).
    pub scratch: PathBuf,
}

/// How a task's work ended.
pub(super) enum Outcome {
    Done {
        file: MediaFile,
        delivered: Option<Delivered>,
        media: Vec<MediaRecord>,
    },
    /// Failed, with the message, the node it is about (if one) and whose fault it is.
    Failed(String, Option<NodeIndex>, Fault),
    Cancelled,
    /// Waits for something not ready yet (an avatar profile being processed).
    Blocked,
    /// To be made in these parts, each a message of its own.
    Split(Vec<crate::domain::media::RenderPart>),
}

/// What the claim's change of the run decided, and what a refused claim leaves to do.
enum ClaimDecision {
    /// Claimed; true when the charge left the balance under the auto top-up threshold.
    Claimed(bool),
    GaveUp,
    Held(Timestamp),
    /// The task is blocked on this (nothing written).
    Waiting(WaitFor),
    /// The task, queued, waits for this before it can run: looked at before it is
    /// claimed (nothing written).
    Unclaimed(WaitFor),
    /// Blocked for credits: `shortfall` more are needed; true when it waits for an auto
    /// top-up (its message comes back to look again).
    Short {
        shortfall: u64,
        waits: bool,
    },
    /// Refused: what the task queued, to send again (the tasks an ended task queued, or
    /// the parts of one making them), and whether the run records webhook events.
    Refused {
        resend: Vec<Work>,
        has_events: bool,
    },
}

/// Whether a task's outcome was stored as its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Recorded {
    Completed,
    Other,
}

/// One line per task worked: its nodes, how it ended and how long it took.
fn log_task(run: &Run, message: NodeTask, outcome: &Outcome, started: Instant) {
    let nodes: Vec<&str> = run.tasks[message.task].nodes.iter().map(|node| run.nodes[*node].type_name()).collect();
    let status = match outcome {
        Outcome::Done { .. } => "completed",
        Outcome::Failed(..) => "failed",
        Outcome::Cancelled => "cancelled",
        Outcome::Blocked => "blocked",
        Outcome::Split(_) => "in parts",
    };
    tracing::info!(
        run_id = %message.run_id,
        task = message.task.0,
        attempt = message.attempt,
        nodes = nodes.join(" → "),
        status,
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "node task"
    );
}

impl Worker {
    /// A claim is held this long: the work's budget and time to store its files.
    pub fn lease(&self) -> Duration {
        self.task_budget + self.claim_margin
    }

    /// Works one task. Ok says whether its message is done with or should come back
    /// (after another worker's claim, or to look again at what the task waits for); an
    /// error means it should be delivered again later.
    pub async fn process(&self, message: NodeTask) -> anyhow::Result<Processed> {
        if let Some(number) = message.part {
            return self.process_part(message, number).await;
        }
        let mut claimed = self.claim(message, false).await?;
        if let ClaimOutcome::Waiting { wait, blocked } = &claimed {
            // Blocked on an avatar profile or for credits: looked at without a write,
            // claimed once it is ready (or failed, or gone: the task then fails saying
            // so), or once the balance covers it (or its wait for a top-up is over). An
            // AI Avatar task not blocked yet is looked at before its claim: while its
            // profile is processed it goes straight to `blocked`, never `running`.
            if self.still_waiting(message.organization_id, wait).await? {
                if !blocked {
                    self.block_unclaimed(message).await?;
                }
                return Ok(Processed::Later(self.blocked_retry));
            }
            claimed = self.claim(message, true).await?;
        }
        if let ClaimOutcome::Short { shortfall, waits } = claimed {
            if !waits {
                return Ok(Processed::Done);
            }
            // Auto top-up is on: buy, and when the credits arrived, claim again now.
            if self.top_up(message.organization_id, shortfall).await == Some(ToppedUp::Granted) {
                claimed = self.claim(message, true).await?;
            }
        }
        let run = match claimed {
            ClaimOutcome::Run(run, low) => {
                if low {
                    self.top_up(message.organization_id, 0).await;
                }
                run
            }
            ClaimOutcome::Nothing => return Ok(Processed::Done),
            ClaimOutcome::Waiting { .. } => return Ok(Processed::Later(self.blocked_retry)),
            ClaimOutcome::Short { waits, .. } => {
                return Ok(if waits { Processed::Later(self.blocked_retry) } else { Processed::Done })
            }
            ClaimOutcome::Held(until) => {
                let wait = until.unix_millis().saturating_sub(self.clock.now().unix_millis()) + 1_000;
                tracing::info!(run_id = %message.run_id, task = message.task.0, "task message waits for the claim it met");
                return Ok(Processed::Later(Duration::from_millis(wait)));
            }
        };
        let run: Arc<Run> = Arc::from(run);
        let started = Instant::now();
        let (cancel, cancelled) = tokio::sync::watch::channel(false);
        let watcher = tokio::spawn(watch_cancel(self.runs.clone(), message, cancel));
        // A panic in the task's work fails the task (with what it said); the worker goes on.
        let executed = AssertUnwindSafe(self.execute(&run, message.task, message.attempt, cancelled))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| Err(anyhow::anyhow!("the task stopped unexpectedly: {}", panic_text(&*panic))));
        watcher.abort();
        let outcome = executed.unwrap_or_else(|error| {
            // Ours, not the media's: say so plainly in the task's error.
            Outcome::Failed(format!("internal error while running the task: {error:#}"), None, Fault::Ours)
        });
        log_task(&run, message, &outcome, started);
        let blocked = matches!(outcome, Outcome::Blocked);
        if self.record(message, outcome).await? == Recorded::Completed {
            self.delete_parts(&run, message).await;
        }
        // A blocked task's message comes back to look again.
        Ok(if blocked { Processed::Later(self.blocked_retry) } else { Processed::Done })
    }

    /// Takes the message's attempt for this worker: the run to work on, or None when
    /// there is nothing to do. A refused message (a duplicate, or
    /// its task ended) sends again what its task queued and the run's never-attempted
    /// webhook deliveries, in case the worker that ended it stopped before sending them.
    async fn claim(&self, message: NodeTask, take_blocked: bool) -> anyhow::Result<ClaimOutcome> {
        let NodeTask { organization_id: organization, run_id, task, attempt, .. } = message;
        let (now, lease) = (self.clock.now(), self.lease());
        let changed = change_run(
            self.runs.as_ref(),
            &self.notifier,
            organization,
            run_id,
            &RUN_UPDATE_CONFLICTS,
            |run, funds| {
                if !take_blocked {
                    if let Some(wait) = waited_for(run, task, attempt) {
                        return Ok(Change::Keep(ClaimDecision::Waiting(wait)));
                    }
                    if let Some(wait) = avatar_to_check(run, task, attempt) {
                        return Ok(Change::Keep(ClaimDecision::Unclaimed(wait)));
                    }
                }
                let block = run.tasks.get(task.0).and_then(|task| task.credits.clone());
                Ok(match run.claim(task, attempt, now, lease) {
                    Claim::Claimed => self.pay(run, (task, attempt), block, funds, now),
                    Claim::GaveUp => Change::Store(ClaimDecision::GaveUp, Vec::new()),
                    Claim::Held(until) => Change::Keep(ClaimDecision::Held(until)),
                    Claim::Refused(why) => {
                        tracing::info!(%run_id, task = task.0, attempt, why, "task message needs no work");
                        let mut resend: Vec<Work> =
                            run.queued_after(task, attempt).into_iter().map(|index| run.message(index)).collect();
                        resend.extend(run.queued_parts_of(task, attempt));
                        Change::Keep(ClaimDecision::Refused { resend, has_events: run.webhook_sequence > 0 })
                    }
                })
            },
        )
        .await;
        match changed {
            Ok((Some(run), ClaimDecision::Claimed(low))) => Ok(ClaimOutcome::Run(Box::new(run), low)),
            Ok((Some(_), ClaimDecision::Short { shortfall, waits })) => Ok(ClaimOutcome::Short { shortfall, waits }),
            Ok((Some(run), _)) => {
                send_tasks(self.queue.as_ref(), &run, &queued_tasks(&run)).await?;
                Ok(ClaimOutcome::Nothing)
            }
            Ok((_, ClaimDecision::Held(until))) => Ok(ClaimOutcome::Held(until)),
            Ok((_, ClaimDecision::Waiting(wait))) => Ok(ClaimOutcome::Waiting { wait, blocked: true }),
            Ok((_, ClaimDecision::Unclaimed(wait))) => Ok(ClaimOutcome::Waiting { wait, blocked: false }),
            Ok((_, ClaimDecision::Refused { resend, has_events })) => {
                if has_events {
                    self.queue_unsent_events(organization, run_id).await?;
                }
                if !resend.is_empty() {
                    tracing::info!(%run_id, task = task.0, messages = resend.len(), "queueing again what this task queued (the tasks after it, or its parts)");
                    self.queue.send(&resend).await?;
                }
                Ok(ClaimOutcome::Nothing)
            }
            Ok((None, _)) | Err(RunError::NotFound) => Ok(ClaimOutcome::Nothing),
            Err(error) => Err(anyhow::anyhow!("{error}")),
        }
    }

    /// The claim's payment for the task it just claimed: nothing for an attempt paid
    /// already (claimed again after its worker stopped) or priced at nothing; otherwise
    /// the price, taken in the claim's write when the balance covers it, else the task is
    /// blocked for credits (waiting for an auto top-up when one is on, until
    /// [`Worker::top_up_wait`] has passed since it was first blocked).
    fn pay(
        &self,
        run: &mut Run,
        (task, attempt): (TaskIndex, u32),
        block: Option<CreditBlock>,
        funds: Option<&crate::domain::credits::Account>,
        now: Timestamp,
    ) -> Change<ClaimDecision> {
        if run.tasks[task].charged.is_some() {
            return Change::Store(ClaimDecision::Claimed(false), Vec::new());
        }
        let prices = run.task_prices(task, None, self.prices);
        let price: u64 = prices.iter().sum();
        if price == 0 {
            run.charge(task, prices);
            return Change::Store(ClaimDecision::Claimed(false), Vec::new());
        }
        let Some(account) = funds else { return Change::NeedsAccount };
        let price_credits = i64::try_from(price).unwrap_or(i64::MAX);
        if account.balance >= price_credits {
            run.charge(task, prices);
            let auto = account.auto_topup;
            let left = account.balance - price_credits;
            let low = auto.enabled
                && account.plan.allows_top_ups()
                && left < i64::try_from(auto.threshold).unwrap_or(i64::MAX);
            return Change::Store(ClaimDecision::Claimed(low), Vec::new());
        }
        let top_ups = account.auto_topup.enabled && account.plan.allows_top_ups();
        let top_up_until = match block {
            // Looked again: the first block's deadline holds.
            Some(block) => block.top_up_until.filter(|until| *until > now),
            None => top_ups.then(|| now.after(self.top_up_wait)),
        };
        let waits = top_up_until.is_some();
        let block = CreditBlock { price, balance: account.balance, top_up_until };
        run.block_for_credits(task, attempt, block, now);
        let shortfall = price.saturating_sub(account.balance.max(0) as u64);
        tracing::info!(run_id = %run.id, task = task.0, price, balance = account.balance, waits, "task blocked for credits");
        Change::Store(ClaimDecision::Short { shortfall, waits }, Vec::new())
    }

    /// Buys credits when the organization's auto top-up is on (see
    /// [`credit_service::auto_top_up`]); a failure is logged (the task stays blocked).
    pub(super) async fn top_up(&self, organization: OrganizationId, shortfall: u64) -> Option<ToppedUp> {
        let ports =
            CreditPorts { credits: self.runs.as_ref(), billing: self.billing.as_ref(), clock: self.clock.as_ref() };
        match credit_service::auto_top_up(&ports, organization, shortfall, self.top_up_wait).await {
            Ok(done) => Some(done),
            Err(error) => {
                tracing::warn!(%organization, error = %error, "an auto top-up failed");
                None
            }
        }
    }

    /// Stores the outcome of the attempt (once: a duplicate finds it no longer running)
    /// and sends the tasks it queued.
    async fn record(&self, message: NodeTask, outcome: Outcome) -> anyhow::Result<Recorded> {
        match self.record_once(message, &outcome).await {
            Err(RunError::Backend(error)) if matches!(outcome, Outcome::Done { .. }) => {
                match error.downcast_ref::<RunTooLarge>() {
                    // The result does not fit the run: the task fails saying so, and the
                    // run goes on (or ends) within its bound.
                    Some(too_large) => {
                        let problem = format!(
                            "the task's output could not be recorded: {too_large}; use fewer inputs or a smaller graph"
                        );
                        let failed = Outcome::Failed(problem, None, Fault::Ours);
                        self.record_once(message, &failed).await.map(|_| Recorded::Other).map_err(anyhow_of)
                    }
                    None => Err(anyhow::anyhow!("{}", RunError::Backend(error))),
                }
            }
            recorded => recorded.map_err(anyhow_of),
        }
    }

    /// [`Self::record`]'s one attempt at storing the outcome.
    async fn record_once(&self, message: NodeTask, outcome: &Outcome) -> Result<Recorded, RunError> {
        let NodeTask { organization_id: organization, run_id, task, attempt, .. } = message;
        if matches!(outcome, Outcome::Cancelled) {
            // The cancel recorded the task's end already.
            return Ok(Recorded::Other);
        }
        if matches!(outcome, Outcome::Blocked) {
            let now = self.clock.now();
            let changed = change_run(
                self.runs.as_ref(),
                &self.notifier,
                organization,
                run_id,
                &RUN_UPDATE_CONFLICTS,
                |run, _| {
                    Ok(match run.block(task, attempt, now) {
                        true => Change::Store((), Vec::new()),
                        false => Change::Keep(()),
                    })
                },
            )
            .await;
            return match changed {
                Ok(_) | Err(RunError::NotFound) => Ok(Recorded::Other),
                Err(error) => Err(error),
            };
        }
        if let Outcome::Split(parts) = outcome {
            return self.record_split(message, parts).await.map(|()| Recorded::Other);
        }
        let now = self.clock.now();
        let changed =
            change_run(self.runs.as_ref(), &self.notifier, organization, run_id, &RUN_UPDATE_CONFLICTS, |run, _| {
                let recorded = match &outcome {
                    Outcome::Cancelled | Outcome::Blocked | Outcome::Split(_) => None,
                    Outcome::Done { file, delivered, media } => {
                        let real = run.task_prices(task, Some(file.duration_ms as f64 / 1000.0), self.prices);
                        let completed = run.complete(task, attempt, file.clone(), delivered.clone(), now);
                        if completed.is_some() {
                            run.settle_charge(task, &real);
                        }
                        completed.map(|queued| (queued, media.clone()))
                    }
                    Outcome::Failed(problem, node, fault) => run
                        .fail(task, attempt, problem.clone(), (*node, *fault), now)
                        .map(|queued| (queued, Vec::new())),
                };
                Ok(match recorded {
                    Some((queued, media)) => Change::Store(queued, media),
                    None => Change::Keep(Vec::new()),
                })
            })
            .await;
        match changed {
            Ok((Some(run), queued)) => {
                if run.status != RunStatus::Running {
                    tracing::info!(%run_id, status = run.status.as_str(), "run finished");
                }
                send_tasks(self.queue.as_ref(), &run, &queued).await?;
                Ok(match outcome {
                    Outcome::Done { .. } => Recorded::Completed,
                    _ => Recorded::Other,
                })
            }
            Ok((None, _)) | Err(RunError::NotFound) => Ok(Recorded::Other),
            Err(error) => Err(error),
        }
    }

    /// Deletes the files of the parts task `message.task` was joined from (as `run`, its
    /// claim, knew them), once its completion is stored: nothing reads them again. One
    /// that cannot be deleted is logged and left (the join is done).
    async fn delete_parts(&self, run: &Run, message: NodeTask) {
        for key in run.tasks[message.task].parts.iter().filter_map(|part| part.key.as_deref()) {
            if let Err(error) = self.blobs.delete(key).await {
                tracing::warn!(run_id = %message.run_id, task = message.task.0, key, error = %error, "a part's file was left");
            }
        }
    }

    /// Blocks a queued task that waits (an AI Avatar task whose profile is processed)
    /// without claiming it; nothing changes when it is no longer queued (another
    /// worker's claim came first).
    async fn block_unclaimed(&self, message: NodeTask) -> anyhow::Result<()> {
        let NodeTask { organization_id: organization, run_id, task, attempt, .. } = message;
        let now = self.clock.now();
        let changed =
            change_run(self.runs.as_ref(), &self.notifier, organization, run_id, &RUN_UPDATE_CONFLICTS, |run, _| {
                Ok(match run.block_queued(task, attempt, now) {
                    true => Change::Store((), Vec::new()),
                    false => Change::Keep(()),
                })
            })
            .await;
        match changed {
            Ok(_) | Err(RunError::NotFound) => Ok(()),
            Err(error) => Err(anyhow_of(error)),
        }
    }

    /// Queues again the run's deliveries never attempted: a worker that stopped between
    /// recording a change and queueing its events leaves them so (a copy of a message
    /// already queued is taken as early or already done by the sender).
    async fn queue_unsent_events(&self, organization: OrganizationId, run_id: super::RunId) -> anyhow::Result<()> {
        const PAGE: usize = 100;
        let mut unsent: Vec<WebhookMessage> = Vec::new();
        let mut after = None;
        loop {
            let page = self.deliveries.list_deliveries(organization, run_id, after, PAGE).await?;
            unsent.extend(
                page.iter()
                    .take(PAGE)
                    .filter(|delivery| delivery.state == DeliveryState::Pending && delivery.attempts.is_empty())
                    .map(|delivery| delivery.message()),
            );
            if page.len() <= PAGE {
                break;
            }
            after = page.get(PAGE - 1).map(|delivery| delivery.sequence);
        }
        if !unsent.is_empty() {
            tracing::info!(%run_id, deliveries = unsent.len(), "queueing again webhook deliveries never attempted");
            self.notifier.queue.send(&unsent).await?;
        }
        Ok(())
    }
}

fn anyhow_of(error: RunError) -> anyhow::Error {
    match error {
        RunError::Backend(error) => error,
        other => anyhow::anyhow!("{other}"),
    }
}

/// What a panic said, when it said it with text.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic")
}

/// What a claim on a task message found.
enum ClaimOutcome {
    /// This worker holds the task: the run to work on, and whether its charge left the
    /// balance under the auto top-up threshold.
    Run(Box<Run>, bool),
    /// Nothing to do.
    Nothing,
    /// Another claim holds the task until then.
    Held(Timestamp),
    /// The task waits for this: blocked already, or (an AI Avatar task) still queued.
    Waiting { wait: WaitFor, blocked: bool },
    /// The task was blocked for credits (see [`ClaimDecision::Short`]).
    Short { shortfall: u64, waits: bool },
}

/// What a blocked task waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum WaitFor {
    /// An avatar profile being processed.
    Avatar(String),
    /// A balance of `price` credits, until the auto top-up's wait ends.
    Credits { price: u64, until: Timestamp },
}

/// What attempt `attempt` of task `task` is blocked on, if it is and looking again may
/// change it: an avatar profile, or credits an auto top-up is buying.
fn waited_for(run: &Run, task: TaskIndex, attempt: u32) -> Option<WaitFor> {
    let waiting = run.tasks.get(task.0).filter(|t| t.status == TaskStatus::Blocked && t.attempt == attempt)?;
    if let Some(block) = &waiting.credits {
        return block.top_up_until.map(|until| WaitFor::Credits { price: block.price, until });
    }
    match run.nodes[*waiting.nodes.first()?].settings().generation()? {
        crate::domain::nodes::Generation::Avatar { profile, .. } => Some(WaitFor::Avatar(profile)),
        _ => None,
    }
}

/// The avatar profile that queued attempt `attempt` of task `task` is an AI Avatar of:
/// looked at before the claim, so that a task whose profile is still processed is
/// blocked without ever being marked running.
fn avatar_to_check(run: &Run, task: TaskIndex, attempt: u32) -> Option<WaitFor> {
    let queued = run.tasks.get(task.0).filter(|t| t.status == TaskStatus::Queued && t.attempt == attempt)?;
    if run.status != RunStatus::Running {
        return None;
    }
    match run.nodes[*queued.nodes.first()?].settings().generation()? {
        crate::domain::nodes::Generation::Avatar { profile, .. } => Some(WaitFor::Avatar(profile)),
        _ => None,
    }
}

impl Run {
    /// The message that asks for the current attempt of task `index`.
    pub fn message(&self, index: TaskIndex) -> Work {
        Work::NodeTask(NodeTask {
            organization_id: self.organization_id,
            run_id: self.id,
            task: index,
            attempt: self.tasks[index].attempt,
            part: None,
        })
    }
}

/// The tasks of a run that are queued.
fn queued_tasks(run: &Run) -> Vec<TaskIndex> {
    run.task_indexes().filter(|index| run.tasks[*index].status == TaskStatus::Queued).collect()
}

/// Sets `cancel` once the message's run is no longer running (cancelled); checks its
/// status (only) every [`CANCEL_POLL`]. (A task superseded by a resume finds out when
/// it records its result, which is then not kept.)
async fn watch_cancel(runs: Arc<dyn RunRepo>, message: NodeTask, cancel: tokio::sync::watch::Sender<bool>) {
    let NodeTask { organization_id: organization, run_id, .. } = message;
    loop {
        tokio::time::sleep(CANCEL_POLL).await;
        match runs.run_status(organization, run_id).await {
            Ok(Some(RunStatus::Running)) => {}
            Ok(_) => {
                let _ = cancel.send(true);
                return;
            }
            Err(error) => tracing::warn!(%run_id, error = %format!("{error:#}"), "could not check for cancellation"),
        }
    }
}
