//! Triggers: the nodes that start runs on their own. A Schedule fires at the times of its
//! cron expression; a Channel Feed polls its feed and starts a run per new entry. The
//! trigger's ID is its node's `agent_node_id`; its parameters live in the agent's graph,
//! and what changes as it fires (next due time, last fire, last error, the feed's entries
//! seen) in a [`TriggerState`] saved with the graph ([`TriggerSaves`], through `agents::SaveChecks`) and moved by the
//! scheduler's tick ([`Triggers::tick`]) under a write count.
//!
//! Once only: a due time of a Schedule and an entry of a feed each start a run under a
//! claim written in the run's own atomic write (`RunRepo::create_run`), so two ticks at
//! once, or a tick after a process died between a run's start and the state's write,
//! start it once. A state's next due time moves by a conditional write: a tick that
//! loses that race does nothing more. After downtime a Schedule fires once for the
//! missed times (at the first of them) and then at its next time after now.

pub mod cron;
pub mod feed;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use self::cron::CronSchedule;
use super::agents::{AgentError, AgentRecord, AgentRepo, SaveChecks};
pub use super::agents::{TriggerState, TriggerWrite};
use super::graph::{AgentNode, Graph, OperationError};
use super::media::ports::{DownloadError, Downloader};
use super::nodes::{self, NodeKind, NodeTypeRef, TriggerSpec};
use super::runs::service::{self, BindPorts, RunError, RunPorts, StartRun, TriggerSource, Triggered};
use super::runs::start::{InputItem, InputRef, Inputs, StartRequest};
use super::time::Timestamp;
use crate::core::retry::TRIGGER_STATE_CONFLICTS;
use crate::core::versioned::{self, Edit};
use crate::domain::ids::AgentId;
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::NodeTypeId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::RunId;
use crate::domain::rejection::{DomainError, Rejection};

/// Largest feed document read.
const MAX_FEED_BYTES: u64 = 5 * 1024 * 1024;
/// Longest `last_error` kept.
const MAX_ERROR_CHARS: usize = 1_000;
/// Due triggers of one kind (Schedules, Channel Feeds: each kind has its own due index)
/// one tick takes at most; more wait for the next tick, a minute on, still due and first
/// in line. Also the size of a page of the due index.
pub const TICK_SCAN: usize = 1_000;
/// Pages of a kind's due index one tick reads at most: a page's triggers past their
/// organization's share are passed over and the next page read, so that one
/// organization's backlog (due before all others') does not fill the scan.
pub const TICK_PAGES: usize = 10;
/// One organization's share of a tick: its due Schedules fired, and (apart) its due
/// Channel Feeds polled, at most this many each; the rest wait for the next tick. With
/// the round-robin order of a phase, one organization's many (or slow) triggers never
/// hold up another's.
pub const ORG_SHARE_PER_TICK: usize = 50;
/// Due Schedules fired at once (a start reads the run's inputs: sites' pages, a few
/// seconds each).
const SCHEDULE_CONCURRENCY: usize = 8;
/// Feeds polled at once: a poll mostly waits on another site, within
/// [`FEED_READ_BUDGET`]; two organizations' full shares run side by side.
pub const FEED_CONCURRENCY: usize = 2 * ORG_SHARE_PER_TICK;
/// Due triggers' states read at once while a tick sorts them into its phases.
const STATE_READS: usize = 32;
/// Longest the Schedules' phase goes on starting fires (it runs first: no Schedule waits
/// behind a feed).
pub const SCHEDULE_PHASE_BUDGET: Duration = Duration::from_secs(60);
/// Longest a tick goes on starting fires (the feeds' phase stops starting polls then):
/// with a fire's [`FIRE_BUDGET`], well inside the `scheduler` function's 300-second
/// timeout, and the rest wait a minute.
pub const TICK_BUDGET: Duration = Duration::from_secs(150);
/// How long a Schedule's due time is tried again after a failure of ours (storage, a
/// site's page that could not be read): the next ticks within it try again.
const BACKEND_RETRY_WINDOW: Duration = Duration::from_secs(10 * 60);
/// `last_error` of a fire that failed for a reason of ours (the cause is logged).
const UNAVAILABLE: &str = "the run could not be started (the service or a site it reads was unavailable); it is \
                           tried again at the next ticks for 10 minutes";
/// Longest one due trigger's fire may take in a tick (a feed's read and its entries'
/// starts): a slow feed never holds the tick.
pub const FIRE_BUDGET: Duration = Duration::from_secs(60);
/// Longest a feed's connection may take to be made.
pub const FEED_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a feed's whole read may take (connection, answer and body): a feed document
/// is small, and a feed that trickles its bytes is given up at this deadline.
pub const FEED_READ_BUDGET: Duration = Duration::from_secs(10);
/// New entries of a feed started per poll; the others start at the next polls.
pub const MAX_RUNS_PER_POLL: usize = 10;

/// Where triggers' states are kept.
#[async_trait]
pub trait TriggerRepo: Send + Sync {
    /// A trigger's state.
    async fn trigger(&self, organization: OrganizationId, id: AgentNodeId) -> anyhow::Result<Option<TriggerState>>;
    /// Stores `state` if the stored one is still at `state.version - 1` (1: none is
    /// stored); false when another write came first.
    async fn put_trigger(&self, state: &TriggerState) -> anyhow::Result<bool>;
    /// Removes a state if it is at `version`; false otherwise.
    async fn delete_trigger(&self, organization: OrganizationId, id: AgentNodeId, version: u64)
        -> anyhow::Result<bool>;
    /// Triggers of `kind` due at or before `now`, earliest first, after the position
    /// `after` (a page's `next`; None: from the earliest), at most `limit` (one indexed
    /// query; the states are read again before they are acted on).
    async fn due_triggers(
        &self,
        kind: TriggerKind,
        now: Timestamp,
        after: Option<&str>,
        limit: usize,
    ) -> anyhow::Result<DuePage>;
}

/// The kinds of triggers, each with its own due index (the scheduler reads each with
/// its own bound, so one kind's backlog never hides the other's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TriggerKind {
    /// Fires at the times of a cron expression.
    Schedule,
    /// Polls a feed.
    Feed,
}

impl TriggerKind {
    /// The kind of a trigger node of type `id`.
    pub fn of(id: NodeTypeId) -> Self {
        if nodes::polls_a_feed(id) {
            Self::Feed
        } else {
            Self::Schedule
        }
    }

    /// Its name in storage (a due index's partition, a column's value).
    pub fn name(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Feed => "feed",
        }
    }
}

/// A page of a kind's due index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DuePage {
    /// The due triggers, earliest first.
    pub due: Vec<(OrganizationId, AgentNodeId)>,
    /// Where the next page starts; None when this one was the last due.
    pub next: Option<String>,
}

/// How much one tick reads and fires (the constants; tests pass smaller ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickLimits {
    /// Due triggers of a kind taken at most, and a page's size ([`TICK_SCAN`]).
    pub scan: usize,
    /// Pages of a kind's due index read at most ([`TICK_PAGES`]).
    pub pages: usize,
    /// One organization's share of a kind ([`ORG_SHARE_PER_TICK`]).
    pub share: usize,
}

impl Default for TickLimits {
    fn default() -> Self {
        Self { scan: TICK_SCAN, pages: TICK_PAGES, share: ORG_SHARE_PER_TICK }
    }
}

/// Why a trigger request failed.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    #[error("Trigger not found")]
    NotFound,
    /// A disabled trigger was fired (409).
    #[error("the trigger is disabled; enable it (params_used.enabled) to fire it")]
    Disabled,
    /// The fire could not start a run; the text says why (400).
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

impl DomainError for TriggerError {
    fn rejection(self) -> Result<Rejection, anyhow::Error> {
        match self {
            TriggerError::NotFound => Ok(Rejection::NotFound),
            TriggerError::Disabled => Ok(Rejection::Conflict),
            TriggerError::Failed(_) => Ok(Rejection::Invalid),
            TriggerError::Run(error) => error.rejection(),
            TriggerError::Backend(cause) => Err(cause),
        }
    }
}

/// What a trigger node's parameters say, if `node` is a trigger.
pub fn spec_of(node: &AgentNode) -> Option<TriggerSpec> {
    nodes::settings_of(node.node_type_id, &node.params_used).trigger()
}

fn is_trigger(node: &AgentNode) -> bool {
    nodes::find(node.node_type_id).is_some_and(|node_type| node_type.kind == NodeKind::Trigger)
}

// ---------------------------------------------------------------------------------------
// Saving: the states that go with a new version of a graph.

/// The checks and writes of an agent's save that concern its triggers.
pub struct TriggerSaves<'a> {
    pub repo: &'a dyn TriggerRepo,
    pub bind: &'a BindPorts<'a>,
}

#[async_trait]
impl SaveChecks for TriggerSaves<'_> {
    /// The trigger writes that go with saving `after` (an agent's new graph) over `before`
    /// (None: a new agent): every trigger node created or changed is checked (its cron,
    /// time zone, feed address and run request, the last against the whole new graph) and
    /// gets its state; a deleted one loses it. `touched` gives the index of the operation
    /// that last created or changed a node, which a refusal names.
    async fn on_save(
        &self,
        organization: OrganizationId,
        before: Option<&Graph>,
        after: &AgentRecord,
        touched: &HashMap<AgentNodeId, usize>,
        now: Timestamp,
    ) -> Result<Vec<TriggerWrite>, AgentError> {
        let mut writes = Vec::new();
        for node in after.graph.nodes.iter().filter(|node| is_trigger(node)) {
            let Some(spec) = spec_of(node) else { continue };
            // Only a trigger created or changed is saved (checked): one saved before triggers
            // had states, or copied by a duplicate (whose run request names the source's
            // nodes), has none, and does not fire, until its node is saved.
            let unchanged = before.and_then(|graph| graph.node(node.agent_node_id)).is_some_and(|old| old == node);
            if unchanged {
                continue;
            }
            let index = touched.get(&node.agent_node_id).copied().unwrap_or(0);
            if let Err(message) = check(self.bind, organization, after, &spec, now).await? {
                return Err(OperationError { index, message }.into());
            }
            let current = self.repo.trigger(organization, node.agent_node_id).await?;
            writes.push(TriggerWrite::Put(saved_state(organization, after.agent.id, node, &spec, current, now)));
        }
        if let Some(before) = before {
            for node in
                before.nodes.iter().filter(|node| is_trigger(node) && after.graph.node(node.agent_node_id).is_none())
            {
                if let Some(state) = self.repo.trigger(organization, node.agent_node_id).await? {
                    writes.push(TriggerWrite::Delete {
                        organization,
                        trigger_id: node.agent_node_id,
                        version: state.version,
                    });
                }
            }
        }
        Ok(writes)
    }
}

/// The state of a trigger saved with `spec` over its `current` one.
fn saved_state(
    organization: OrganizationId,
    agent_id: AgentId,
    node: &AgentNode,
    spec: &TriggerSpec,
    current: Option<TriggerState>,
    now: Timestamp,
) -> TriggerState {
    let mut state = current.unwrap_or(TriggerState {
        organization_id: organization,
        trigger_id: node.agent_node_id,
        agent_id,
        node_type_id: node.node_type_id,
        enabled: true,
        next_at: None,
        last_fired_at: None,
        last_error: None,
        saved_at: now,
        feed_url: None,
        polled: false,
        seen: Vec::new(),
        version: 0,
    });
    let was_enabled = state.enabled;
    state.version += 1;
    state.enabled = spec.enabled();
    state.next_at = match spec {
        TriggerSpec::Schedule { cron: Some(cron), timezone, .. } if spec.enabled() => {
            CronSchedule::parse(cron, timezone).ok().and_then(|schedule| schedule.next_after(now))
        }
        TriggerSpec::Feed { feed_url: Some(url), poll_minutes, .. } if spec.enabled() => {
            if state.feed_url.as_deref() != Some(url) || !was_enabled {
                // A new address, or one enabled again: its entries are recorded anew
                // from its first poll (nothing published while it was off starts runs).
                (state.feed_url, state.polled, state.seen, state.saved_at) =
                    (Some(url.clone()), false, Vec::new(), now);
                Some(now)
            } else {
                let interval = now.after(Duration::from_secs(poll_minutes * 60));
                Some(state.next_at.map_or(now, |next| next.min(interval)))
            }
        }
        _ => None,
    };
    state
}

/// Checks a trigger's parameters as a fire would use them: Ok(Err(message)) names the
/// parameter refused.
async fn check(
    ports: &BindPorts<'_>,
    organization: OrganizationId,
    agent: &AgentRecord,
    spec: &TriggerSpec,
    now: Timestamp,
) -> anyhow::Result<Result<(), String>> {
    let named = |field: &str, message: String| format!("params_used.{field}: {message}");
    match spec {
        TriggerSpec::Schedule { cron, timezone, run_request, .. } => {
            let parsed = match cron {
                Some(cron) => CronSchedule::parse_firing(cron, timezone, now),
                None => CronSchedule::parse("* * * * *", timezone),
            };
            if let Err(message) = parsed {
                return Ok(Err(format!("params_used.{message}")));
            }
            if cron.is_none() {
                // Not complete yet: the run request is checked once the schedule is.
                return Ok(Ok(()));
            }
            let request = match StartRequest::parse(run_request) {
                Ok(request) => request,
                Err(message) => return Ok(Err(named("run_request", message))),
            };
            match service::check_start(ports, organization, agent, request, now).await {
                Ok(()) => Ok(Ok(())),
                Err(RunError::Invalid(message)) => Ok(Err(named("run_request", message))),
                Err(RunError::Backend(error)) => Err(error),
                Err(other) => Ok(Err(named("run_request", other.to_string()))),
            }
        }
        TriggerSpec::Feed { feed_url, run_request, .. } => {
            if let Some(url) = feed_url {
                if let Err(RunError::Invalid(message)) =
                    service::check_url_allowed(url, "feed_url", ports.allow_private_urls).await
                {
                    return Ok(Err(format!("params_used.{message}")));
                }
            }
            let request = match StartRequest::parse(run_request) {
                Ok(request) => request,
                Err(message) => return Ok(Err(named("run_request", message))),
            };
            match service::check_parameters(ports, agent, &request).await {
                Ok(()) => Ok(Ok(())),
                Err(RunError::Backend(error)) => Err(error),
                Err(other) => Ok(Err(named("run_request", other.to_string()))),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Firing.

/// What one tick did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TickReport {
    /// Due triggers looked at (the keys read from the due indexes).
    pub due: usize,
    /// Runs started.
    pub started: usize,
    /// Fires or polls that recorded an error.
    pub failed: usize,
    /// Organizations with due triggers.
    pub organizations: usize,
    /// Schedules fired (their due time dealt with, a run started or not).
    pub schedules: usize,
    /// Channel Feeds polled.
    pub feeds: usize,
    /// Polls whose feed gave no whole answer within [`FEED_READ_BUDGET`].
    pub feeds_timed_out: usize,
    /// Due triggers read and left for the next tick: past their organization's share of
    /// this one ([`ORG_SHARE_PER_TICK`]), or past the tick's budget.
    pub deferred: usize,
}

/// A trigger as `GET /trigger/{trigger_id}` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TriggerView {
    pub trigger_id: AgentNodeId,
    pub agent_id: AgentId,
    pub node_type: NodeTypeRef,
    pub enabled: bool,
    pub next_fire_at: Option<Timestamp>,
    pub last_fired_at: Option<Timestamp>,
    pub last_error: Option<String>,
}

/// What firing and reading triggers use.
pub struct Triggers<'a> {
    pub repo: &'a dyn TriggerRepo,
    pub agents: &'a dyn AgentRepo,
    /// Where the runs they start go.
    pub runs: &'a RunPorts<'a>,
    /// Reads feeds (through the SSRF guard).
    pub downloader: &'a dyn Downloader,
}

/// A trigger found for a request: its state, agent and node.
struct TriggerInAgent {
    state: TriggerState,
    agent: AgentRecord,
    spec: TriggerSpec,
}

impl Triggers<'_> {
    /// Fires the triggers due at `now` (see the module's notes on once-only) fairly, in
    /// two phases: first the Schedules, then the Channel Feeds (whose reads wait on other
    /// sites), so no Schedule waits behind a feed. Each kind is read from its own due
    /// index with its own bound ([`TICK_SCAN`]); an organization's triggers past its
    /// share ([`ORG_SHARE_PER_TICK`]) are passed over and the next page of the index read
    /// (at most [`TICK_PAGES`]), so another organization's due triggers are reached
    /// behind a backlog. Within a phase the organizations take turns (round-robin, in
    /// the order of their earliest due trigger); a feed's read is given up after
    /// [`FEED_READ_BUDGET`], and no fire is started after the phase's budget. What is
    /// left stays due for the next tick, and the report counts it as `deferred`.
    pub async fn tick(&self, now: Timestamp) -> anyhow::Result<TickReport> {
        self.tick_within(now, TickLimits::default()).await
    }

    /// [`Triggers::tick`] within `limits`.
    pub async fn tick_within(&self, now: Timestamp, limits: TickLimits) -> anyhow::Result<TickReport> {
        let started = tokio::time::Instant::now();
        let mut report = TickReport::default();
        let mut organizations = HashSet::new();
        let schedules = self.due_of(TriggerKind::Schedule, now, limits, &mut report, &mut organizations).await?;
        let feeds = self.due_of(TriggerKind::Feed, now, limits, &mut report, &mut organizations).await?;
        report.organizations = organizations.len();
        let (schedules, over_share) = fair_order(schedules, limits.share);
        report.deferred += over_share;
        let phase_end = started + SCHEDULE_PHASE_BUDGET;
        self.fire_phase(schedules, SCHEDULE_CONCURRENCY, phase_end, now, &mut report).await;
        let (feeds, over_share) = fair_order(feeds, limits.share);
        report.deferred += over_share;
        self.fire_phase(feeds, FEED_CONCURRENCY, started + TICK_BUDGET, now, &mut report).await;
        Ok(report)
    }

    /// The due triggers of `kind` a tick fires, earliest first: read page by page from
    /// the kind's due index, each organization's past its share passed over (counted
    /// deferred), until `limits.scan` are taken, the due ones are all read, or
    /// `limits.pages` pages were read. Their states are read again (the index is
    /// eventually consistent): those no longer due are left out.
    async fn due_of(
        &self,
        kind: TriggerKind,
        now: Timestamp,
        limits: TickLimits,
        report: &mut TickReport,
        organizations: &mut HashSet<OrganizationId>,
    ) -> anyhow::Result<Vec<TriggerState>> {
        let mut taken: HashMap<OrganizationId, usize> = HashMap::new();
        let mut keys = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..limits.pages.max(1) {
            let page = self.repo.due_triggers(kind, now, after.as_deref(), limits.scan).await?;
            report.due += page.due.len();
            for (organization, id) in page.due {
                let count = taken.entry(organization).or_default();
                if *count < limits.share {
                    *count += 1;
                    keys.push((organization, id));
                } else {
                    report.deferred += 1;
                }
            }
            match page.next {
                Some(next) if keys.len() < limits.scan => after = Some(next),
                _ => break,
            }
        }
        // Each due trigger's state, read a few at once.
        let states: Vec<(AgentNodeId, anyhow::Result<Option<TriggerState>>)> = futures::stream::iter(keys)
            .map(|(organization, id)| async move { (id, self.repo.trigger(organization, id).await) })
            .buffered(STATE_READS)
            .collect()
            .await;
        let mut due = Vec::new();
        for (id, state) in states {
            match state {
                Ok(Some(state))
                    if state.next_at.is_some_and(|due| due <= now) && TriggerKind::of(state.node_type_id) == kind =>
                {
                    organizations.insert(state.organization_id);
                    due.push(state);
                }
                Ok(_) => {}
                Err(error) => {
                    report.failed += 1;
                    tracing::warn!(trigger_id = %id, error = %format!("{error:#}"), "a due trigger could not be read");
                }
            }
        }
        Ok(due)
    }

    /// Fires `states` in their order, `concurrency` at once, none started after `end`
    /// (those are counted deferred), each within [`FIRE_BUDGET`].
    async fn fire_phase(
        &self,
        states: Vec<TriggerState>,
        concurrency: usize,
        end: tokio::time::Instant,
        now: Timestamp,
        report: &mut TickReport,
    ) {
        let count = states.len();
        let fired: Vec<(AgentNodeId, bool, anyhow::Result<Fired>)> = futures::stream::iter(states)
            .take_while(|_| std::future::ready(tokio::time::Instant::now() < end))
            .map(|state| async move {
                let (id, feed) = (state.trigger_id, nodes::polls_a_feed(state.node_type_id));
                let fired = tokio::time::timeout(FIRE_BUDGET, self.fire_due(state, now)).await;
                (id, feed, fired.unwrap_or_else(|_| Err(anyhow::anyhow!("the fire took over {FIRE_BUDGET:?}"))))
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        report.deferred += count - fired.len();
        for (id, feed, outcome) in fired {
            if feed {
                report.feeds += 1;
            } else {
                report.schedules += 1;
            }
            match outcome {
                Ok(fired) => {
                    report.started += fired.started;
                    report.failed += usize::from(fired.failed);
                    report.feeds_timed_out += usize::from(fired.timed_out);
                }
                Err(error) => {
                    report.failed += 1;
                    tracing::warn!(trigger_id = %id, error = %format!("{error:#}"), "a due trigger was not fired");
                }
            }
        }
    }

    /// Fires one due trigger, from its `state` as just read.
    async fn fire_due(&self, state: TriggerState, now: Timestamp) -> anyhow::Result<Fired> {
        let (organization, id) = (state.organization_id, state.trigger_id);
        let Some(due) = state.next_at.filter(|due| *due <= now) else { return Ok(Fired::default()) };
        let Some(found) = find_state(self.repo, self.agents, state, true).await? else {
            return Ok(Fired::default());
        };
        let TriggerInAgent { state, agent, spec } = found;
        match &spec {
            TriggerSpec::Schedule { cron, timezone, run_request, .. } => {
                if !spec.enabled() {
                    return Ok(Fired::default());
                }
                let claim = claim_of(&[b"schedule", id.to_string().as_bytes(), due.to_string().as_bytes()]);
                let triggered =
                    Triggered { trigger_id: id, at: due, source: TriggerSource::Schedule, claim: Some(claim) };
                let outcome = self.start_schedule(organization, &agent, run_request, triggered).await;
                let (started, error, retry) = match outcome {
                    Ok(_) => (1, None, false),
                    Err(RunError::AlreadyStarted) => (0, None, false),
                    Err(RunError::Backend(cause)) => {
                        tracing::warn!(trigger_id = %id, error = %format!("{cause:#}"), "a scheduled run could not start");
                        // Tried again at the next ticks while the due time is recent (the
                        // claim keeps it to one run); then this time is given up.
                        let recent = due.after(BACKEND_RETRY_WINDOW) > now;
                        (0, Some(UNAVAILABLE.to_owned()), recent)
                    }
                    Err(other) => (0, Some(other.to_string()), false),
                };
                let failed = error.is_some();
                let mut written = state.clone();
                written.version += 1;
                if !retry {
                    // Missed times (downtime) were this one fire: the next is after now.
                    written.next_at = cron
                        .as_deref()
                        .and_then(|cron| CronSchedule::parse(cron, timezone).ok())
                        .and_then(|schedule| schedule.next_after(due.max(now)));
                }
                if started == 1 || error.is_none() {
                    written.last_fired_at = Some(due);
                }
                written.last_error = match error {
                    Some(error) => Some(bounded_error(error)),
                    None if started == 1 => None,
                    None => state.last_error.clone(),
                };
                // False: another tick moved it first, which is the same move.
                self.repo.put_trigger(&written).await?;
                Ok(Fired { started, failed, timed_out: false })
            }
            TriggerSpec::Feed { poll_minutes, .. } => {
                // The poll is claimed by moving the next one on; a tick that loses does nothing.
                let mut claimed = state.clone();
                claimed.version += 1;
                claimed.next_at = Some(now.after(Duration::from_secs(poll_minutes * 60)));
                if !self.repo.put_trigger(&claimed).await? {
                    return Ok(Fired::default());
                }
                let polled = self.poll(claimed, &agent, &spec, now).await?;
                Ok(Fired { started: polled.runs.len(), failed: polled.error.is_some(), timed_out: polled.timed_out })
            }
        }
    }

    /// `POST /trigger/{trigger_id}/fire`: a Schedule starts its run now (`manual`), a
    /// Channel Feed polls now.
    pub async fn fire(
        &self,
        organization: OrganizationId,
        id: AgentNodeId,
        now: Timestamp,
    ) -> Result<Vec<RunId>, TriggerError> {
        let TriggerInAgent { state, agent, spec } = find(self.repo, self.agents, organization, id).await?;
        if !spec.enabled() {
            return Err(TriggerError::Disabled);
        }
        match &spec {
            TriggerSpec::Schedule { run_request, .. } => {
                let triggered = Triggered { trigger_id: id, at: now, source: TriggerSource::Manual, claim: None };
                let outcome = self.start_schedule(organization, &agent, run_request, triggered).await;
                let error = match &outcome {
                    Ok(_) => None,
                    Err(RunError::Backend(_)) => None,
                    Err(other) => Some(other.to_string()),
                };
                self.record(state, |state| {
                    if outcome.is_ok() {
                        state.last_fired_at = Some(now);
                        state.last_error = None;
                    } else if let Some(error) = &error {
                        state.last_error = Some(bounded_error(error.clone()));
                    }
                })
                .await?;
                match outcome {
                    Ok(run) => Ok(vec![run]),
                    Err(RunError::Backend(error)) => Err(TriggerError::Backend(error)),
                    Err(other) => Err(TriggerError::Failed(other.to_string())),
                }
            }
            TriggerSpec::Feed { .. } => {
                let Polled { runs, error, .. } = self.poll(state, &agent, &spec, now).await?;
                match error {
                    Some(error) if runs.is_empty() => Err(TriggerError::Failed(error)),
                    _ => Ok(runs),
                }
            }
        }
    }

    async fn start_schedule(
        &self,
        organization: OrganizationId,
        agent: &AgentRecord,
        run_request: &Map<String, Value>,
        triggered: Triggered,
    ) -> Result<RunId, RunError> {
        let request =
            StartRequest::parse(run_request).map_err(|message| RunError::Invalid(format!("run_request: {message}")))?;
        let start = StartRun { organization, agent_id: agent.agent.id, request, trigger: Some(triggered) };
        service::start_run_of(self.runs, agent, start).await
    }

    /// Polls a feed: a run for each new entry (once ever), the entries recorded, and the
    /// first problem kept as `last_error`.
    async fn poll(
        &self,
        state: TriggerState,
        agent: &AgentRecord,
        spec: &TriggerSpec,
        now: Timestamp,
    ) -> anyhow::Result<Polled> {
        let TriggerSpec::Feed { feed_url: Some(url), run_request, .. } = spec else {
            let error = "params_used.feed_url is not set".to_owned();
            self.record(state, |state| state.last_error = Some(error.clone())).await?;
            return Ok(Polled { runs: Vec::new(), error: Some(error), timed_out: false });
        };
        // What the poll is of: a save of another address (or a re-enable) in between
        // starts the record anew, which this poll's result must not overwrite.
        let polled_feed = (state.feed_url.clone(), state.saved_at);
        let unread = |error: String| FeedPass {
            runs: Vec::new(),
            seen: state.seen.clone(),
            keys: HashSet::new(),
            error: Some(error),
        };
        let (pass, timed_out) = match self.read_feed(url).await? {
            Err(FeedProblem::TimedOut) => {
                let budget = FEED_READ_BUDGET.as_secs();
                (unread(format!("feed_url: the feed gave no whole answer within {budget} s")), true)
            }
            Err(FeedProblem::Other(problem)) => (unread(format!("feed_url: {problem}")), false),
            Ok(feed) => (self.start_new_entries(&state, agent, run_request, &feed, now).await, false),
        };
        let FeedPass { runs, seen, keys, error } = pass;
        let read = error.is_none() || !keys.is_empty();
        let fired = !runs.is_empty();
        self.record(state, |state| {
            if fired {
                state.last_fired_at = Some(now);
            }
            if (state.feed_url.clone(), state.saved_at) != polled_feed {
                return;
            }
            if read {
                state.polled = true;
                state.seen = seen.clone();
            }
            state.last_error = error.clone().map(bounded_error);
        })
        .await?;
        Ok(Polled { runs, error, timed_out })
    }

    /// Starts a run for each new entry of the feed read (at most [`MAX_RUNS_PER_POLL`]
    /// a poll: the others at the next polls), and what the trigger has seen of it.
    async fn start_new_entries(
        &self,
        state: &TriggerState,
        agent: &AgentRecord,
        run_request: &Map<String, Value>,
        feed: &feed::Feed,
        now: Timestamp,
    ) -> FeedPass {
        let mut pass = FeedPass { runs: Vec::new(), seen: state.seen.clone(), keys: HashSet::new(), error: None };
        let first = !state.polled;
        for entry in &feed.entries {
            pass.keys.insert(entry.key.clone());
            if pass.seen.contains(&entry.key) {
                continue;
            }
            let new = match entry.published {
                Some(published) => published > state.saved_at,
                None => !first,
            };
            if !new {
                pass.seen.push(entry.key.clone());
                continue;
            }
            if pass.runs.len() >= MAX_RUNS_PER_POLL {
                // Not recorded: the next poll starts it.
                continue;
            }
            let trigger = (state.organization_id, state.trigger_id);
            match self.start_entry(trigger, agent, run_request, feed, entry, now).await {
                Ok(run) => {
                    pass.runs.push(run);
                    pass.seen.push(entry.key.clone());
                }
                Err(RunError::AlreadyStarted) => pass.seen.push(entry.key.clone()),
                Err(RunError::Backend(cause)) => {
                    tracing::warn!(error = %format!("{cause:#}"), "a feed entry's run could not be started");
                    pass.error.get_or_insert_with(|| format!("entry {:?}: {UNAVAILABLE}", entry.title));
                }
                Err(refused) => {
                    pass.error.get_or_insert_with(|| format!("entry {:?}: {refused}", entry.title));
                }
            }
        }
        // Entries no longer in the feed are forgotten (their claims remain).
        let keys = &pass.keys;
        pass.seen.retain(|key| keys.contains(key));
        pass
    }

    /// Reads the feed: a connection within [`FEED_CONNECT_TIMEOUT`], the whole answer
    /// within [`FEED_READ_BUDGET`]; Ok(Err(problem)) when it cannot be read or parsed.
    async fn read_feed(&self, url: &str) -> anyhow::Result<Result<feed::Feed, FeedProblem>> {
        let folder = tempfile::tempdir()?;
        let path = folder.path().join("feed.xml");
        let download = self.downloader.download_connecting_within(url, &path, MAX_FEED_BYTES, FEED_CONNECT_TIMEOUT);
        match tokio::time::timeout(FEED_READ_BUDGET, download).await {
            Ok(Ok(_)) => {}
            Ok(Err(DownloadError::Refused(problem))) => return Ok(Err(FeedProblem::Other(problem))),
            Ok(Err(DownloadError::Failed(cause))) => {
                tracing::info!(url, error = %format!("{cause:#}"), "a feed could not be read");
                let problem = "the feed could not be read (no answer, or the connection failed)";
                return Ok(Err(FeedProblem::Other(problem.into())));
            }
            Err(_) => return Ok(Err(FeedProblem::TimedOut)),
        }
        let bytes = tokio::fs::read(&path).await?;
        Ok(feed::parse(&bytes).map_err(FeedProblem::Other))
    }

    /// Starts the run of a feed's entry: its link bound to every Video Input.
    async fn start_entry(
        &self,
        (organization, trigger_id): (OrganizationId, AgentNodeId),
        agent: &AgentRecord,
        run_request: &Map<String, Value>,
        feed: &feed::Feed,
        entry: &feed::Entry,
        now: Timestamp,
    ) -> Result<RunId, RunError> {
        let link = entry.link.clone().ok_or_else(|| RunError::Invalid("the entry has no link".into()))?;
        let mut request =
            StartRequest::parse(run_request).map_err(|message| RunError::Invalid(format!("run_request: {message}")))?;
        let tiles: Vec<(AgentNodeId, Vec<InputItem>)> = agent
            .graph
            .nodes
            .iter()
            .filter(|node| nodes::find(node.node_type_id).is_some_and(|node_type| node_type.kind == NodeKind::Input))
            .map(|node| {
                let item = InputItem {
                    reference: InputRef::Site(link.clone()),
                    clip_start_ms: None,
                    clip_end_ms: None,
                    field: "the feed entry's link".into(),
                };
                (node.agent_node_id, vec![item])
            })
            .collect();
        request.inputs = if tiles.is_empty() { Inputs::None } else { Inputs::PerTile(tiles) };
        let claim = claim_of(&[b"entry", trigger_id.to_string().as_bytes(), entry.key.as_bytes()]);
        let triggered = Triggered {
            trigger_id,
            at: now,
            source: TriggerSource::Feed {
                channel_id: feed.channel_id.clone(),
                video_id: entry.video_id.clone(),
                video_title: entry.title.clone(),
                video_url: link,
            },
            claim: Some(claim),
        };
        let start = StartRun { organization, agent_id: agent.agent.id, request, trigger: Some(triggered) };
        service::start_run_of(self.runs, agent, start).await
    }

    /// Writes a change of a trigger's state, made again on a newer state when another
    /// write came first ([`TRIGGER_STATE_CONFLICTS`]); a deleted trigger is left so.
    async fn record(&self, state: TriggerState, change: impl Fn(&mut TriggerState) + Send) -> anyhow::Result<()> {
        let what = format!("the state of trigger {}", state.trigger_id);
        let (organization, trigger) = (state.organization_id, state.trigger_id);
        let mut record = RecordState { repo: self.repo, organization, trigger, first: Some(state), change };
        versioned::change(&TRIGGER_STATE_CONFLICTS, what, &mut record).await?;
        Ok(())
    }
}

/// A change of a trigger's state: made first on the state given, then on the state
/// stored.
struct RecordState<'a, F> {
    repo: &'a dyn TriggerRepo,
    organization: OrganizationId,
    trigger: AgentNodeId,
    first: Option<TriggerState>,
    change: F,
}

#[async_trait]
impl<F: Fn(&mut TriggerState) + Send> versioned::Change for RecordState<'_, F> {
    type Record = TriggerState;
    type Write = TriggerState;
    type Landed = ();
    type Kept = ();
    type Error = anyhow::Error;

    async fn read(&mut self) -> anyhow::Result<Option<TriggerState>> {
        match self.first.take() {
            Some(first) => Ok(Some(first)),
            None => self.repo.trigger(self.organization, self.trigger).await,
        }
    }

    async fn edit(&mut self, mut state: TriggerState) -> anyhow::Result<Edit<TriggerState, ()>> {
        (self.change)(&mut state);
        state.version += 1;
        Ok(Edit::Write(state))
    }

    async fn write(&mut self, state: &mut TriggerState) -> anyhow::Result<Option<()>> {
        Ok(self.repo.put_trigger(state).await?.then_some(()))
    }
}

/// `GET /trigger/{trigger_id}`: 404 unless it is a trigger node of an agent of the
/// organization.
pub async fn view(
    repo: &dyn TriggerRepo,
    agents: &dyn AgentRepo,
    organization: OrganizationId,
    id: AgentNodeId,
) -> Result<TriggerView, TriggerError> {
    let TriggerInAgent { state, .. } = find(repo, agents, organization, id).await?;
    let node_type = nodes::find(state.node_type_id).ok_or(TriggerError::NotFound)?;
    Ok(TriggerView {
        trigger_id: id,
        agent_id: state.agent_id,
        node_type: NodeTypeRef { node_type_id: node_type.id, node_type_name: node_type.name },
        enabled: state.enabled,
        next_fire_at: state.next_at.filter(|_| state.enabled),
        last_fired_at: state.last_fired_at,
        last_error: state.last_error,
    })
}

async fn find(
    repo: &dyn TriggerRepo,
    agents: &dyn AgentRepo,
    organization: OrganizationId,
    id: AgentNodeId,
) -> Result<TriggerInAgent, TriggerError> {
    let state = repo.trigger(organization, id).await?.ok_or(TriggerError::NotFound)?;
    find_state(repo, agents, state, false).await?.ok_or(TriggerError::NotFound)
}

/// The agent and node of a state; None when the node or its agent is gone (and, with
/// `clean`, the state is removed: the scheduler's cleaning of deleted agents' triggers).
async fn find_state(
    repo: &dyn TriggerRepo,
    agents: &dyn AgentRepo,
    state: TriggerState,
    clean: bool,
) -> anyhow::Result<Option<TriggerInAgent>> {
    let agent = agents.get_agent(state.organization_id, state.agent_id).await?;
    let spec = agent.as_ref().and_then(|agent| agent.graph.node(state.trigger_id)).and_then(spec_of);
    match (agent, spec) {
        (Some(agent), Some(spec)) => Ok(Some(TriggerInAgent { state, agent, spec })),
        _ => {
            if clean {
                // False: a later write removed or changed it already.
                repo.delete_trigger(state.organization_id, state.trigger_id, state.version).await?;
            }
            Ok(None)
        }
    }
}

/// What one due trigger's fire did.
#[derive(Debug, Default)]
struct Fired {
    /// Runs started.
    started: usize,
    /// Whether it recorded an error.
    failed: bool,
    /// Whether its feed gave no whole answer within [`FEED_READ_BUDGET`].
    timed_out: bool,
}

/// What a feed's poll did.
struct Polled {
    runs: Vec<RunId>,
    /// The first problem, kept as `last_error`.
    error: Option<String>,
    /// Whether the feed gave no whole answer within [`FEED_READ_BUDGET`].
    timed_out: bool,
}

/// What a poll made of the feed it read: the runs started, the entries seen (those no
/// longer in the feed forgotten), the feed's entries, and the first problem.
struct FeedPass {
    runs: Vec<RunId>,
    seen: Vec<String>,
    keys: HashSet<String>,
    error: Option<String>,
}

/// Why a feed was not read.
enum FeedProblem {
    /// No whole answer within [`FEED_READ_BUDGET`].
    TimedOut,
    /// Refused, failed or not a feed; the text says why.
    Other(String),
}

/// The due triggers `states` (earliest due first) in a fair order: the organizations
/// take turns, in the order of their earliest, one trigger each a turn, each at most
/// `share` in all. Returns that order and how many were left out (past a share).
fn fair_order(states: Vec<TriggerState>, share: usize) -> (Vec<TriggerState>, usize) {
    let total = states.len();
    let mut queues: Vec<std::collections::VecDeque<TriggerState>> = Vec::new();
    let mut queue_of: HashMap<OrganizationId, usize> = HashMap::new();
    for state in states {
        let index = *queue_of.entry(state.organization_id).or_insert_with(|| {
            queues.push(std::collections::VecDeque::new());
            queues.len() - 1
        });
        queues[index].push_back(state);
    }
    let mut order = Vec::new();
    for _ in 0..share {
        let before = order.len();
        order.extend(queues.iter_mut().filter_map(std::collections::VecDeque::pop_front));
        if order.len() == before {
            break;
        }
    }
    let left = total - order.len();
    (order, left)
}

/// A claim's key: a digest of its parts.
fn claim_of(parts: &[&[u8]]) -> String {
    let mut digest = Sha256::new();
    for part in parts {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part);
    }
    hex::encode(digest.finalize())
}

fn bounded_error(message: String) -> String {
    message.chars().take(MAX_ERROR_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(organization: OrganizationId, minute: u64) -> TriggerState {
        TriggerState {
            organization_id: organization,
            trigger_id: AgentNodeId::new_v4(),
            agent_id: AgentId::new_v4(),
            node_type_id: nodes::CHANNEL_FEED_TRIGGER,
            enabled: true,
            next_at: Some(Timestamp::from_unix_millis(minute * 60_000)),
            last_fired_at: None,
            last_error: None,
            saved_at: Timestamp::from_unix_millis(0),
            feed_url: None,
            polled: false,
            seen: Vec::new(),
            version: 1,
        }
    }

    #[test]
    fn organizations_take_turns_each_within_its_share() {
        let (a, b, c) = (OrganizationId::new_v4(), OrganizationId::new_v4(), OrganizationId::new_v4());
        // A's many triggers are due first; B's and C's come after.
        let mut states: Vec<TriggerState> = (0..5).map(|minute| due(a, minute)).collect();
        states.extend([due(b, 10), due(c, 11), due(b, 12)]);
        let (order, left) = fair_order(states.clone(), 3);
        let owners: Vec<OrganizationId> = order.iter().map(|state| state.organization_id).collect();
        assert_eq!(owners, [a, b, c, a, b, a], "one each a turn, in the order of their earliest");
        assert_eq!(left, 2, "A's two past its share wait for the next tick");
        let firsts: Vec<AgentNodeId> = order.iter().filter(|s| s.organization_id == a).map(|s| s.trigger_id).collect();
        let earliest: Vec<AgentNodeId> = states[..3].iter().map(|state| state.trigger_id).collect();
        assert_eq!(firsts, earliest, "an organization's earliest go first");
        assert_eq!(fair_order(Vec::new(), 3).0.len(), 0);
        assert_eq!(fair_order(states, 100).1, 0, "within the share nothing waits");
    }
}
