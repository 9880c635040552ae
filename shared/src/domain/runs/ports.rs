//! What runs need from the outside world: where runs and their media records are
//! stored, and the message that asks a worker to run a task (sent on a
//! [`Queue`](crate::core::queue::Queue)).

use async_trait::async_trait;

use super::{Run, RunId, RunStatus};
use crate::domain::credits::{AccountWrite, CreditRepo};
use crate::domain::ids::OrganizationId;
use crate::domain::media::ports::MediaRecords;
use crate::domain::media::MediaRecord;
use crate::domain::time::Timestamp;
use crate::domain::webhooks::WebhookDelivery;

/// Which runs a list returns: newest first, `limit + 1` of them (so the caller can tell
/// whether a page follows), all of one organization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunQuery {
    pub agent_id: Option<crate::domain::agents::AgentId>,
    /// Only the runs this trigger started.
    pub trigger_id: Option<crate::domain::graph::AgentNodeId>,
    /// Empty: every status.
    pub statuses: Vec<RunStatus>,
    /// `started_at` at or after.
    pub from: Option<Timestamp>,
    /// `started_at` at or before.
    pub to: Option<Timestamp>,
    /// Only runs after this one in the order (started_at descending, then ID descending).
    pub after: Option<(Timestamp, RunId)>,
    pub limit: usize,
}

/// Runs and the media records of the files they made. Runs are paid from the
/// organization's credit account, which a run's change may write in the same atomic
/// write (a task's charge in its claim): so a run repository is also the account's.
#[async_trait]
pub trait RunRepo: CreditRepo + MediaRecords + Send + Sync {
    /// Stores a new run (version 0), the media records it starts with and the webhook
    /// deliveries of its first events, in one atomic write, as the records of
    /// [`super::stored`]. A run over its bounds is refused with [`RunTooLarge`] (here
    /// and on update). With a `claim`, the run is stored only if no run of the
    /// organization was stored under that claim before (a trigger's due time, a feed's
    /// entry): false when one was (or when a run of that ID exists), and nothing is written.
    async fn create_run(
        &self,
        run: &Run,
        media: &[MediaRecord],
        deliveries: &[WebhookDelivery],
        claim: Option<&str>,
    ) -> anyhow::Result<bool>;
    /// A run of the organization.
    async fn get_run(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<Run>>;
    /// Only the status of a run of the organization (what a running task checks for
    /// cancellation, twice a second: a projection, not the document).
    async fn run_status(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<RunStatus>>;
    /// Stores `run` if the stored one is still at `run.version - 1`, with new media
    /// records, the webhook deliveries of the change's events and the credit account's
    /// change (if the account is still at the count it names), in one atomic write;
    /// false when another writer (of the run or the account) came first. Writes the head and the records that
    /// changed since the version before, when this process read or wrote that one.
    async fn update_run(
        &self,
        run: &Run,
        media: &[MediaRecord],
        deliveries: &[WebhookDelivery],
        account: Option<&AccountWrite>,
    ) -> anyhow::Result<bool>;
    /// One page of the organization's runs (see [`RunQuery`]); one query.
    async fn list_runs(&self, organization: OrganizationId, query: &RunQuery) -> anyhow::Result<Vec<Run>>;
    /// A page of the runs of every organization that are `running`: at most `limit`,
    /// after the opaque `cursor` of the page before, with the cursor of the next page
    /// (None after the last). The sweeper's walk: one query of an index per page, never
    /// a scan.
    async fn running_runs(&self, cursor: Option<String>, limit: usize) -> anyhow::Result<RunningPage>;
}

/// Largest a run may be as stored, in bytes of JSON over all its records (see
/// [`super::stored`]): what one DynamoDB transaction may carry, alike on every backend.
pub const MAX_RUN_BYTES: usize = 3_000_000;

/// A run's change refused because the run, or one of its records, would exceed its
/// bound ([`MAX_RUN_BYTES`], [`super::stored::MAX_RECORD_BYTES`]).
#[derive(Debug, thiserror::Error)]
#[error("run {run} would be {bytes} bytes of state, over the {limit} it may store")]
pub struct RunTooLarge {
    pub run: RunId,
    pub bytes: usize,
    pub limit: usize,
}

/// A run from its document as stored before the split into records (one document per
/// run), counted ([`Run::recount`]).
pub fn read_run_document(document: &[u8]) -> anyhow::Result<Run> {
    let mut run: Run =
        serde_json::from_slice(document).map_err(|error| anyhow::anyhow!("a stored run could not be read: {error}"))?;
    run.recount();
    Ok(run)
}

/// A page of running runs, and the cursor of the next one.
pub type RunningPage = (Vec<(OrganizationId, RunId)>, Option<String>);
