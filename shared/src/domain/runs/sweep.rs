//! The sweeper: what a crash or a failed send leaves behind, repaired on a schedule (the
//! `sweeper` function every minute on AWS, a loop in `serve`). Each repair is idempotent
//! and logged:
//! - a webhook delivery still pending with no attempt after [`SweepSettings::stale_after`]
//!   has its message sent again (a send that failed after the run's write lost it);
//! - a task of a running run queued longer than that has its message sent again (a start
//!   or worker stopped between its write and its sends); the task is stamped, so a
//!   backlog costs one copy per period, and a copy is refused by the claim;
//! - a task whose claim ran out more than [`SweepSettings::lost_claim_after`] ago is
//!   failed: its worker stopped and no message of it is left to run it again;
//! - refunds a run owes (a cancel's or a sweep's, paid in batches) are paid: a payer that
//!   stopped between batches is followed (a run owing any is among those swept).

use std::sync::Arc;
use std::time::Duration;

use super::events::Notifier;
use super::ports::RunRepo;
use super::service::{change_run, pay_owed_refunds, send_tasks, Change, RunError};
use crate::core::queue::Queue;
use crate::core::retry::RUN_UPDATE_CONFLICTS;
use crate::domain::time::{Clock, Timestamp};
use crate::domain::webhooks::ports::WebhookRepo;
use crate::domain::webhooks::WebhookMessage;
use crate::domain::work::Work;

/// When the sweeper takes something as lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepSettings {
    /// A queued task or an unattempted delivery older than this has its message sent again.
    pub stale_after: Duration,
    /// A claim that ran out longer ago than this is given up: its task fails.
    pub lost_claim_after: Duration,
}

impl Default for SweepSettings {
    /// 5 minutes; 2 hours (beyond the task queue's 90-minute visibility timeout, after
    /// which SQS would have delivered the message again).
    fn default() -> Self {
        Self { stale_after: Duration::from_secs(5 * 60), lost_claim_after: Duration::from_secs(2 * 60 * 60) }
    }
}

/// Running runs one sweep looks at, and unsent deliveries it sends again, at most.
const MAX_RUNS: usize = 10_000;
const MAX_DELIVERIES: usize = 1_000;
/// Running runs read per page.
const PAGE: usize = 100;

/// What one sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SweepReport {
    pub runs_checked: usize,
    pub tasks_resent: usize,
    pub tasks_failed: usize,
    pub deliveries_resent: usize,
    /// Tasks whose owed refunds the sweep paid.
    pub refunds_paid: usize,
}

/// What a sweep needs.
#[derive(Clone)]
pub struct Sweeper {
    pub runs: Arc<dyn RunRepo>,
    pub deliveries: Arc<dyn WebhookRepo>,
    pub tasks: Arc<dyn Queue<Work>>,
    /// Records the events of runs the sweep changes (and sends deliveries again).
    pub notifier: Notifier,
    pub clock: Arc<dyn Clock>,
    pub settings: SweepSettings,
}

fn before(now: Timestamp, duration: Duration) -> Timestamp {
    Timestamp::from_unix_millis(now.unix_millis().saturating_sub(duration.as_millis() as u64))
}

impl Sweeper {
    /// One sweep: unsent deliveries, then every running run (bounded). A run that cannot
    /// be repaired now is logged and left for the next sweep.
    pub async fn sweep(&self) -> anyhow::Result<SweepReport> {
        let mut report = SweepReport { deliveries_resent: self.resend_deliveries().await?, ..SweepReport::default() };
        let mut cursor = None;
        loop {
            let (page, next) = self.runs.running_runs(cursor, PAGE).await?;
            for (organization, run_id) in page {
                report.runs_checked += 1;
                let now = self.clock.now();
                let (queued_before, claim_before) =
                    (before(now, self.settings.stale_after), before(now, self.settings.lost_claim_after));
                let changed = change_run(
                    self.runs.as_ref(),
                    &self.notifier,
                    organization,
                    run_id,
                    &RUN_UPDATE_CONFLICTS,
                    |run, _| {
                        let swept = run.sweep(now, queued_before, claim_before);
                        let unchanged = swept.resend.is_empty() && swept.resend_parts.is_empty() && swept.failed == 0;
                        Ok(match unchanged {
                            true => Change::Keep((swept, run.refunds_owed)),
                            false => Change::Store((swept, run.refunds_owed), Vec::new()),
                        })
                    },
                )
                .await;
                if let Ok((_, (_, owed))) = &changed {
                    if *owed > 0 {
                        let paid =
                            pay_owed_refunds(self.runs.as_ref(), &self.notifier, organization, run_id, *owed).await;
                        match paid {
                            Ok(paid) => report.refunds_paid += paid,
                            Err(error) => tracing::warn!(%run_id, error = %error, "sweep: refunds are left owed"),
                        }
                    }
                }
                match changed.map(|(run, (swept, _))| (run, swept)) {
                    Ok((Some(run), swept)) => {
                        if swept.failed > 0 {
                            tracing::warn!(%run_id, tasks = swept.failed, "sweep: failed tasks whose worker stopped long ago");
                        }
                        if !swept.resend.is_empty() {
                            tracing::warn!(%run_id, tasks = swept.resend.len(), "sweep: sending again the messages of tasks queued long ago");
                            send_tasks(self.tasks.as_ref(), &run, &swept.resend).await?;
                        }
                        if !swept.resend_parts.is_empty() {
                            tracing::warn!(%run_id, parts = swept.resend_parts.len(), "sweep: sending again the messages of parts queued long ago");
                            let parts: Vec<_> =
                                swept.resend_parts.iter().map(|(task, part)| run.part_message(*task, *part)).collect();
                            self.tasks.send(&parts).await?;
                        }
                        report.tasks_failed += swept.failed;
                        report.tasks_resent += swept.resend.len() + swept.resend_parts.len();
                    }
                    Ok((None, _)) | Err(RunError::NotFound) => {}
                    Err(error) => tracing::warn!(%run_id, error = %error, "sweep: a run could not be checked"),
                }
            }
            match next {
                Some(next) if report.runs_checked < MAX_RUNS => cursor = Some(next),
                _ => break,
            }
        }
        if report.tasks_resent + report.tasks_failed + report.deliveries_resent + report.refunds_paid > 0 {
            tracing::info!(?report, "sweep");
        }
        Ok(report)
    }

    /// Sends again the messages of deliveries pending with no attempt for too long.
    async fn resend_deliveries(&self) -> anyhow::Result<usize> {
        let now = self.clock.now();
        let unsent = self.deliveries.unsent_deliveries(before(now, self.settings.stale_after), MAX_DELIVERIES).await?;
        if unsent.is_empty() {
            return Ok(0);
        }
        let messages: Vec<WebhookMessage> = unsent.iter().map(|delivery| delivery.message()).collect();
        for delivery in &unsent {
            tracing::warn!(run_id = %delivery.run_id, sequence = delivery.sequence, "sweep: sending again a webhook delivery never attempted");
        }
        self.notifier.queue.send(&messages).await?;
        Ok(messages.len())
    }
}
