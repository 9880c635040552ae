//! The parts of a task made in parts (see [`crate::domain::runs::parts`]): a part's
//! message is claimed, rendered and recorded as a task's is, each step idempotent.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;

use super::execute::TaskFiles;
use super::{panic_text, queued_tasks, watch_cancel, Stop, TaskOutput, Worker};
use crate::core::retry::RUN_UPDATE_CONFLICTS;
use crate::domain::media::RenderPart;
use crate::domain::runs::engine::Claim;
use crate::domain::runs::service::{change_run, send_tasks, Change, RunError};
use crate::domain::runs::{Fault, NodeIndex, Run, TaskSource, TaskStatus};
use crate::domain::time::Timestamp;
use crate::domain::work::{NodeTask, Processed, Work};

/// How a part's claim went.
enum PartClaim {
    Claimed,
    GaveUp,
    Held(Timestamp),
    /// Nothing to do; the task's own message, when it is queued (its join), is sent
    /// again in case the worker that queued it stopped before sending it.
    Refused(Option<Work>),
}

/// How a part's work ended.
enum PartOutcome {
    Made(String),
    Failed(String, Option<NodeIndex>, Fault),
    Cancelled,
}

impl Worker {
    /// Works part `number` of the message's task: claims it, renders it, stores its file
    /// and records it (the last part made queues the task's join).
    pub(super) async fn process_part(&self, message: NodeTask, number: u32) -> anyhow::Result<Processed> {
        let NodeTask { organization_id: organization, run_id, task, attempt, .. } = message;
        let (now, lease) = (self.clock.now(), self.lease());
        let claimed =
            change_run(self.runs.as_ref(), &self.notifier, organization, run_id, &RUN_UPDATE_CONFLICTS, |run, _| {
                Ok(match run.claim_part(task, attempt, number, now, lease) {
                    Claim::Claimed => Change::Store(PartClaim::Claimed, Vec::new()),
                    Claim::GaveUp => Change::Store(PartClaim::GaveUp, Vec::new()),
                    Claim::Held(until) => Change::Keep(PartClaim::Held(until)),
                    Claim::Refused(why) => {
                        tracing::info!(%run_id, task = task.0, part = number, why, "part message needs no work");
                        let join = run.tasks.get(task.0).filter(|task| task.status == TaskStatus::Queued);
                        Change::Keep(PartClaim::Refused(join.map(|_| run.message(task))))
                    }
                })
            })
            .await;
        let run = match claimed {
            Ok((Some(run), PartClaim::Claimed)) => run,
            Ok((Some(run), PartClaim::GaveUp)) => {
                send_tasks(self.queue.as_ref(), &run, &queued_tasks(&run)).await?;
                return Ok(Processed::Done);
            }
            Ok((_, PartClaim::Held(until))) => {
                let wait = until.unix_millis().saturating_sub(self.clock.now().unix_millis()) + 1_000;
                return Ok(Processed::Later(Duration::from_millis(wait)));
            }
            Ok((_, PartClaim::Refused(join))) => {
                if let Some(join) = join {
                    self.queue.send(&[join]).await?;
                }
                return Ok(Processed::Done);
            }
            Ok((None, _)) | Err(RunError::NotFound) => return Ok(Processed::Done),
            Err(error) => return Err(anyhow::anyhow!("{error}")),
        };
        let run: Arc<Run> = Arc::from(run);
        let started = Instant::now();
        let (cancel, cancelled) = tokio::sync::watch::channel(false);
        let watcher = tokio::spawn(watch_cancel(self.runs.clone(), message, cancel));
        let executed = AssertUnwindSafe(self.execute_part(&run, message, number, cancelled))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| Err(anyhow::anyhow!("the part stopped unexpectedly: {}", panic_text(&*panic))));
        watcher.abort();
        let outcome = executed.unwrap_or_else(|error| {
            PartOutcome::Failed(format!("internal error while making the part: {error:#}"), None, Fault::Ours)
        });
        tracing::info!(
            %run_id,
            task = task.0,
            part = number,
            attempt,
            made = matches!(outcome, PartOutcome::Made(_)),
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "task part"
        );
        self.record_part(message, number, outcome).await?;
        Ok(Processed::Done)
    }

    /// Renders part `number` of the message's task and stores it.
    async fn execute_part(
        &self,
        run: &Run,
        message: NodeTask,
        number: u32,
        cancelled: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<PartOutcome> {
        let NodeTask { task: index, attempt, .. } = message;
        let task = &run.tasks[index];
        let (TaskSource::Tasks { tasks: sources }, Some(part)) = (&task.source, task.parts.get(number as usize)) else {
            return Ok(PartOutcome::Failed("the part is not an edit's".into(), None, Fault::Ours));
        };
        let workspace = TaskFiles::part(&self.scratch, run, format!("{index}-{attempt}-part-{number}")).await?;
        let stop = Stop { cancelled, deadline: tokio::time::Instant::now() + self.task_budget };
        let scratch = workspace.scratch.path();
        let (extension, content_type) = match part.part {
            RenderPart::Sound => ("m4a", "audio/mp4"),
            RenderPart::Picture { .. } | RenderPart::Whole => ("mp4", "video/mp4"),
        };
        let output = scratch.join(format!("part.{extension}"));
        let plan = match self.edit_plan(run, index, sources, scratch).await? {
            Ok(plan) => plan,
            Err(TaskOutput::Refused(message, node)) => return Ok(PartOutcome::Failed(message, node, Fault::Caller)),
            Err(_) => return Ok(PartOutcome::Failed("the part has nothing to render".into(), None, Fault::Ours)),
        };
        match self.render(plan, &output, &stop, part.part).await? {
            TaskOutput::Rendered => {}
            TaskOutput::Cancelled => return Ok(PartOutcome::Cancelled),
            TaskOutput::FailedAt(message, node) => return Ok(PartOutcome::Failed(message, Some(node), Fault::Ours)),
            TaskOutput::Refused(message, node) => return Ok(PartOutcome::Failed(message, node, Fault::Caller)),
            TaskOutput::Failed(message) => return Ok(PartOutcome::Failed(message, None, Fault::Ours)),
            _ => return Ok(PartOutcome::Failed("the part's render made nothing".into(), None, Fault::Ours)),
        }
        let key = format!("{}.{extension}", workspace.base);
        let bytes = tokio::fs::metadata(&output).await?.len();
        self.blobs.put_file(&key, &output, content_type).await?;
        tracing::info!(run_id = %run.id, task = index.0, part = number, bytes, "part stored");
        Ok(PartOutcome::Made(key))
    }

    /// Records how part `number` ended (once: a duplicate finds it no longer running)
    /// and sends what that queued: the task's join after its last part, or what its
    /// failure queued downstream.
    async fn record_part(&self, message: NodeTask, number: u32, outcome: PartOutcome) -> anyhow::Result<()> {
        let NodeTask { organization_id: organization, run_id, task, attempt, .. } = message;
        if matches!(outcome, PartOutcome::Cancelled) {
            return Ok(());
        }
        let now = self.clock.now();
        let changed =
            change_run(self.runs.as_ref(), &self.notifier, organization, run_id, &RUN_UPDATE_CONFLICTS, |run, _| {
                let messages = match &outcome {
                    PartOutcome::Made(key) => run.complete_part(task, attempt, number, key.clone(), now),
                    PartOutcome::Failed(problem, node, fault) => run
                        .fail_part(task, attempt, number, problem, (*node, *fault), now)
                        .map(|queued| queued.into_iter().map(|index| run.message(index)).collect()),
                    PartOutcome::Cancelled => None,
                };
                Ok(match messages {
                    Some(messages) => Change::Store(messages, Vec::new()),
                    None => Change::Keep(Vec::new()),
                })
            })
            .await;
        match changed {
            Ok((Some(_), messages)) if !messages.is_empty() => self.queue.send(&messages).await,
            Ok(_) | Err(RunError::NotFound) => Ok(()),
            Err(error) => Err(anyhow::anyhow!("{error}")),
        }
    }

    /// Records that the message's task is made in `parts`, and sends their messages.
    pub(super) async fn record_split(&self, message: NodeTask, parts: &[RenderPart]) -> Result<(), RunError> {
        let NodeTask { organization_id: organization, run_id, task, attempt, .. } = message;
        let now = self.clock.now();
        let changed =
            change_run(self.runs.as_ref(), &self.notifier, organization, run_id, &RUN_UPDATE_CONFLICTS, |run, _| {
                Ok(match run.split(task, attempt, parts, now) {
                    Some(messages) => Change::Store(messages, Vec::new()),
                    None => Change::Keep(Vec::new()),
                })
            })
            .await;
        match changed {
            Ok((Some(_), messages)) => {
                tracing::info!(%run_id, task = task.0, messages = messages.len(), "task made in parts");
                Ok(self.queue.send(&messages).await?)
            }
            Ok((None, _)) | Err(RunError::NotFound) => Ok(()),
            Err(error) => Err(error),
        }
    }
}
