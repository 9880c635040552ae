//! The run endpoints' domain operations: start (validate everything, create nothing on
//! a refusal), read, cancel and resume (lists are [`super::list`]). Every change is a versioned write of the
//! run; task messages are sent after the write that queued them.

use async_trait::async_trait;

pub use super::bind::BindPorts;
use super::bind::{check_target, Binder};
use super::charges::REFUND_BATCH;
use super::engine::{Cancelled, Resumed};
pub use super::error::RunError;
use super::events::{Before, Notifier};
use super::plan::{plan_tasks, runtime_graph};
use super::ports::{RunRepo, RunTooLarge};
use super::start::StartRequest;
use super::{AgentStateId, BoundInput, InputSource, Run, RunId, RunStatus, TaskIndex, TriggeredBy};
use crate::core::blocking::off_runtime;
use crate::core::queue::Queue;
use crate::core::retry::{RetryPolicy, RUN_UPDATE_CONFLICTS};
use crate::core::versioned::{self, Changed, Edit};
use crate::domain::agents::{AgentRecord, AgentRepo};
use crate::domain::asset_manager::{AssetManager, AssetRepo};
use crate::domain::credits::{self, Account, AccountWrite};
use crate::domain::ids::AgentId;
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::OrganizationId;
use crate::domain::media::MediaRecord;
use crate::domain::sites::Sites;
use crate::domain::time::{Clock, Timestamp};
use crate::domain::uploads::UploadRepo;
use crate::domain::webhooks::WebhookDelivery;
use crate::domain::work::{NodeTask, Work};

/// The ports the run operations use.
pub struct RunPorts<'a> {
    pub runs: &'a dyn RunRepo,
    pub queue: &'a dyn Queue<Work>,
    pub clock: &'a dyn Clock,
    /// Records the runs' webhook events (with links for the caller's address).
    pub notifier: &'a Notifier,
    /// The agents runs are started from.
    pub agents: &'a dyn AgentRepo,
    /// The uploads runs read.
    pub uploads: &'a dyn UploadRepo,
    /// Video-sharing sites' pages among the URL inputs, read at start.
    pub sites: &'a Sites,
    /// Workspaces' asset-manager connections, and the managers' items.
    pub assets: &'a dyn AssetRepo,
    pub asset_manager: &'a dyn AssetManager,
    /// Avatar profiles, which AI Avatar nodes name.
    pub avatars: &'a dyn crate::domain::avatars::AvatarRepo,
    /// Whether URL inputs and `callback_url` may reach private addresses.
    pub allow_private_urls: bool,
}

impl RunPorts<'_> {
    /// The ports a start request is bound with.
    pub fn bind(&self) -> BindPorts<'_> {
        BindPorts {
            runs: self.runs,
            uploads: self.uploads,
            sites: self.sites,
            assets: self.assets,
            asset_manager: self.asset_manager,
            avatars: self.avatars,
            allow_private_urls: self.allow_private_urls,
        }
    }
}

/// A start of a run, as asked.
pub struct StartRun {
    pub organization: OrganizationId,
    pub agent_id: AgentId,
    pub request: StartRequest,
    /// The trigger starting it (None: the API).
    pub trigger: Option<Triggered>,
}

/// A run a trigger starts: what its `triggered_by` says, and the claim that lets it
/// start once only.
#[derive(Clone, Debug, PartialEq)]
pub struct Triggered {
    pub trigger_id: AgentNodeId,
    pub at: Timestamp,
    pub source: TriggerSource,
    /// One run only is ever started under a claim (None: a manual fire).
    pub claim: Option<String>,
}

/// What made a trigger start a run.
#[derive(Clone, Debug, PartialEq)]
pub enum TriggerSource {
    /// A Schedule's due time.
    Schedule,
    /// A fire by hand (`POST /trigger/{trigger_id}/fire`) of a Schedule.
    Manual,
    /// A feed's entry; the run's `type` is the site of the entry's link.
    Feed { channel_id: String, video_id: String, video_title: String, video_url: String },
}

impl Triggered {
    /// `triggered_by` of the run, whose inputs are `inputs`.
    fn describe(&self, inputs: &[BoundInput]) -> TriggeredBy {
        let (kind, channel_id, video_id, video_title, video_url) = match &self.source {
            TriggerSource::Schedule => ("schedule".to_owned(), None, None, None, None),
            TriggerSource::Manual => ("manual".to_owned(), None, None, None, None),
            TriggerSource::Feed { channel_id, video_id, video_title, video_url } => {
                let site = inputs.iter().find_map(|input| match &input.source {
                    InputSource::Site { video, .. } => Some(video.site.clone()),
                    _ => None,
                });
                (
                    site.unwrap_or_else(|| "generic".to_owned()),
                    Some(channel_id.clone()),
                    Some(video_id.clone()),
                    Some(video_title.clone()),
                    Some(video_url.clone()),
                )
            }
        };
        TriggeredBy {
            kind,
            channel_id,
            video_id,
            video_title,
            video_url,
            triggered_at: self.at,
            trigger_id: Some(self.trigger_id),
        }
    }
}

/// Sends the messages of queued tasks.
pub async fn send_tasks(queue: &dyn Queue<Work>, run: &Run, tasks: &[TaskIndex]) -> anyhow::Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let messages: Vec<Work> = tasks
        .iter()
        .map(|task| {
            Work::NodeTask(NodeTask {
                organization_id: run.organization_id,
                run_id: run.id,
                task: *task,
                attempt: run.tasks[*task].attempt,
                part: None,
            })
        })
        .collect();
    queue.send(&messages).await
}

/// Starts a run of an agent: validates the request against the agent's graph and the
/// organization's media, plans the tasks, stores the run and queues its first tasks.
pub async fn start_run(ports: &RunPorts<'_>, start: StartRun) -> Result<RunId, RunError> {
    let record = ports.agents.get_agent(start.organization, start.agent_id).await?.ok_or(RunError::AgentNotFound)?;
    start_run_of(ports, &record, start).await
}

/// [`start_run`] of an agent already read (`record`: a trigger's, read to find it).
pub async fn start_run_of(ports: &RunPorts<'_>, record: &AgentRecord, start: StartRun) -> Result<RunId, RunError> {
    let StartRun { organization, request, trigger, .. } = start;
    let now = ports.clock.now();
    let (mut run, media) = prepare(&ports.bind(), organization, record, request, trigger.as_ref(), now).await?;
    let queued = run.settle(now);
    let deliveries = ports.notifier.started(&mut run, now);
    let claim = trigger.as_ref().and_then(|trigger| trigger.claim.as_deref());
    if !ports.runs.create_run(&run, &media, &deliveries, claim).await? {
        return Err(RunError::AlreadyStarted);
    }
    ports.notifier.send(&deliveries).await;
    if let Err(error) = send_tasks(ports.queue, &run, &queued).await {
        // Stored but never queued: fail those tasks rather than leave the run `running`.
        let message = "the task could not be queued when the run started; resume the run to try again";
        unqueued(ports, &run, &queued, message).await;
        return Err(RunError::Backend(error.context("queueing the run's first tasks")));
    }
    tracing::info!(run_id = %run.id, tasks = run.tasks.len(), "run started");
    Ok(run.id)
}

/// Checks a start request of the agent `record` (its graph as given, stored or not) as
/// [`start_run`] checks it, and creates nothing.
pub async fn check_start(
    ports: &BindPorts<'_>,
    organization: OrganizationId,
    record: &AgentRecord,
    request: StartRequest,
    now: Timestamp,
) -> Result<(), RunError> {
    prepare(ports, organization, record, request, None, now).await.map(|_| ())
}

/// Checks what a start request says beside its inputs (`update_params`, `ignore_nodes`,
/// `callback_url`) against the agent `record`, as [`start_run`] checks them.
pub async fn check_parameters(
    ports: &BindPorts<'_>,
    record: &AgentRecord,
    request: &StartRequest,
) -> Result<(), RunError> {
    if let Some(url) = &request.callback_url {
        check_target(url, "callback_url", ports.allow_private_urls).await?;
    }
    let (graph, ignore, overrides) =
        (record.graph.clone(), request.ignore_nodes.clone(), request.update_params.clone());
    off_runtime(move || runtime_graph(&graph, &ignore, &overrides)).await?.map_err(RunError::Invalid).map(drop)
}

/// Checks that `text` is an http(s) URL whose host the deployment may reach.
pub async fn check_url_allowed(text: &str, field: &str, allow_private: bool) -> Result<(), RunError> {
    let scheme = text.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) {
        return Err(RunError::Invalid(format!("{field}: must be an http(s) URL")));
    }
    check_target(text, field, allow_private).await
}

/// The run a start request makes (not yet settled or stored), and the media records it
/// starts with; every refusal of the request.
async fn prepare(
    ports: &BindPorts<'_>,
    organization: OrganizationId,
    record: &AgentRecord,
    request: StartRequest,
    trigger: Option<&Triggered>,
    now: Timestamp,
) -> Result<(Run, Vec<MediaRecord>), RunError> {
    if let Some(url) = &request.callback_url {
        check_target(url, "callback_url", ports.allow_private_urls).await?;
    }
    let request_sizes =
        RequestSizes { update_params: serde_json::to_vec(&request.update_params).map_or(0, |bytes| bytes.len()) };
    // Planning is CPU work that grows with the graph: off the runtime's threads.
    let (graph, ignore, overrides) =
        (record.graph.clone(), request.ignore_nodes.clone(), request.update_params.clone());
    let nodes = off_runtime(move || runtime_graph(&graph, &ignore, &overrides)).await?.map_err(RunError::Invalid)?;
    // The ID carries the start time, so that ordering by ID is ordering by start.
    let run_id = RunId::v7_at(now.unix_millis());
    let mut binder = Binder::new(ports, organization, record.agent.workspace_id, run_id, now);
    let inputs = binder.inputs(&nodes, request.inputs).await?;
    let triggered_by = match trigger {
        Some(trigger) => Some(trigger.describe(&inputs)),
        None => site_trigger(&inputs, now),
    };
    let mut run = Run {
        id: run_id,
        organization_id: organization,
        agent_id: record.agent.id,
        status: RunStatus::Running,
        status_message: None,
        needs_credits: false,
        started_at: now,
        updated_at: now,
        finished_at: None,
        triggered_by,
        callback_url: request.callback_url,
        agent_state_id: AgentStateId::new_v4(),
        resumes: Vec::new(),
        version: 0,
        nodes: nodes.into(),
        inputs,
        tasks: Default::default(),
        outputs: Default::default(),
        assets: Default::default(),
        webhook_sequence: 0,
        refunds_owed: 0,
        counts: Default::default(),
        dependents: Default::default(),
        credit_moves: Vec::new(),
    };
    let outputs: Vec<bool> = run.node_indexes().map(|index| run.is_output_node(index)).collect();
    let (nodes, inputs) = (run.nodes.clone(), run.inputs.clone());
    let tasks = off_runtime(move || plan_tasks(&nodes, &inputs, |index| outputs[index.0])).await?;
    run.tasks = tasks.map_err(RunError::Invalid)?.into();
    // After the plan, whose refusals (what connects to what) explain more than a
    // parameter a connection would have replaced.
    let nodes: Vec<super::RuntimeNode> = run.nodes.iter().cloned().collect();
    run.assets = binder.node_uploads(&nodes).await?;
    let media = binder.media;
    run.recount();
    if run.output_tasks().next().is_none() {
        return Err(RunError::Invalid(
            "nothing to run: no input reaches a Destination (or, without one, a node with no outgoing connection)"
                .into(),
        ));
    }
    check_size(&run, &request_sizes)?;
    Ok((run, media))
}

/// What parts of a start request weigh in the run's document.
struct RequestSizes {
    update_params: usize,
}

/// Refuses (400) a run whose document would be over [`MAX_RUN_BYTES`], naming what
/// makes it large.
fn check_size(run: &Run, request: &RequestSizes) -> Result<(), RunError> {
    let (bytes, limit) = match super::stored::encode(None, run) {
        Ok(_) => return Ok(()),
        Err(error) => match error.downcast_ref::<RunTooLarge>() {
            Some(too_large) => (too_large.bytes, too_large.limit),
            None => return Err(RunError::Backend(error)),
        },
    };
    let inputs = serde_json::to_vec(&run.inputs).map_or(0, |bytes| bytes.len());
    let field = if request.update_params >= inputs { "update_params" } else { "inputs" };
    Err(RunError::Invalid(format!(
        "{field}: this run would store {bytes} bytes of state, over the {limit} a run may store \
         (update_params: {} bytes, inputs: {inputs} bytes, {} tasks); send smaller parameters or fewer inputs",
        request.update_params,
        run.tasks.len()
    )))
}

/// `triggered_by` of a run started from a video-sharing site's URL: its first such
/// input's video.
fn site_trigger(inputs: &[BoundInput], now: Timestamp) -> Option<TriggeredBy> {
    inputs.iter().find_map(|input| match &input.source {
        InputSource::Site { video, .. } => Some(TriggeredBy {
            kind: video.site.clone(),
            channel_id: video.channel_id.clone(),
            video_id: Some(video.video_id.clone()),
            video_title: Some(video.title.clone()),
            video_url: Some(video.page_url.clone()),
            triggered_at: now,
            trigger_id: None,
        }),
        _ => None,
    })
}

/// A run of the organization.
pub async fn get_run(runs: &dyn RunRepo, organization: OrganizationId, id: RunId) -> Result<Run, RunError> {
    runs.get_run(organization, id).await?.ok_or(RunError::NotFound)
}

/// What a change of a run decided.
pub enum Change<T> {
    /// Store the changed run, with the media records it made; `T` is the change's answer.
    Store(T, Vec<MediaRecord>),
    /// Leave the stored run as it is, answering `T`.
    Keep(T),
    /// Make the change again, given the organization's credit account (a claim that
    /// must know whether the balance covers its task).
    NeedsAccount,
}

/// Applies `change` to the stored run until a write wins (another writer may store the
/// run in between; the change is then made again on what it stored). The change's
/// webhook events are stored in the same write, then queued, and so are the credit
/// movements it asked for ([`Run::credit_moves`]), as a change of the account it read
/// (a writer of the account in between makes the change start again). Answers the run
/// as stored (None when the change kept it) and the change's answer.
pub async fn change_run<T: Send>(
    runs: &dyn RunRepo,
    notifier: &Notifier,
    organization: OrganizationId,
    id: RunId,
    policy: &RetryPolicy,
    change: impl FnMut(&mut Run, Option<&Account>) -> Result<Change<T>, RunError> + Send,
) -> Result<(Option<Run>, T), RunError> {
    let mut change = ChangeRun { runs, notifier, organization, id, change };
    match versioned::change(policy, format!("run {id}"), &mut change).await? {
        Changed::Written(made, ()) => {
            notifier.send(&made.deliveries).await;
            Ok((Some(made.run), made.answer))
        }
        Changed::Kept(answer) => Ok((None, answer)),
        Changed::Missing => Err(RunError::NotFound),
    }
}

/// A change of one run, by `change`.
struct ChangeRun<'a, F> {
    runs: &'a dyn RunRepo,
    notifier: &'a Notifier,
    organization: OrganizationId,
    id: RunId,
    change: F,
}

/// A run's change, ready to write: the run, the media records it made, its webhook
/// deliveries and its credit movements' account write.
struct RunWrite<T> {
    run: Run,
    answer: T,
    media: Vec<MediaRecord>,
    deliveries: Vec<WebhookDelivery>,
    account: Option<AccountWrite>,
}

#[async_trait]
impl<T, F> versioned::Change for ChangeRun<'_, F>
where
    T: Send,
    F: FnMut(&mut Run, Option<&Account>) -> Result<Change<T>, RunError> + Send,
{
    type Record = Run;
    type Write = RunWrite<T>;
    type Landed = ();
    type Kept = T;
    type Error = RunError;

    async fn read(&mut self) -> Result<Option<Run>, RunError> {
        Ok(self.runs.get_run(self.organization, self.id).await?)
    }

    /// The change made on the stored run, given the organization's account when it asks
    /// for it; then its webhook events and its credit movements.
    async fn edit(&mut self, stored: Run) -> Result<Edit<RunWrite<T>, T>, RunError> {
        let (organization, id) = (self.organization, self.id);
        let mut account: Option<Account> = None;
        let (mut run, answer, media) = loop {
            let mut run = stored.clone();
            match (self.change)(&mut run, account.as_ref())? {
                Change::Store(answer, media) => break (run, answer, media),
                Change::Keep(answer) => return Ok(Edit::Keep(answer)),
                Change::NeedsAccount if account.is_none() => {
                    account = Some(credits::service::current(self.runs, organization, run.updated_at).await?);
                }
                Change::NeedsAccount => {
                    return Err(RunError::Backend(anyhow::anyhow!("a change of run {id} asked for the account twice")))
                }
            }
        };
        // Every status change moved the counts with it (tests and debug builds check).
        debug_assert_eq!(run.counts, run.recounted(), "run {id}: counts moved apart from the tasks");
        let before = run.callback_url.is_some().then(|| Before::of(&stored));
        let deliveries = match &before {
            Some(before) => {
                let at = run.updated_at;
                self.notifier.events(Some(before), &mut run, at)
            }
            None => Vec::new(),
        };
        let moves = std::mem::take(&mut run.credit_moves);
        // One movement per change, or a batch of refunds: never more than a
        // transaction's share ([`MAX_CREDIT_MOVES`]).
        debug_assert!(moves.len() <= MAX_CREDIT_MOVES, "run {id}: a change of {} credit movements", moves.len());
        let account = match moves.is_empty() {
            true => None,
            false => {
                let account = match account {
                    Some(account) => account,
                    None => credits::service::current(self.runs, organization, run.updated_at).await?,
                };
                let mut write = account.write();
                for movement in &moves {
                    write.apply(movement, run.updated_at);
                }
                Some(write)
            }
        };
        run.version += 1;
        Ok(Edit::Write(RunWrite { run, answer, media, deliveries, account }))
    }

    async fn write(&mut self, made: &mut RunWrite<T>) -> Result<Option<()>, RunError> {
        let written = self.runs.update_run(&made.run, &made.media, &made.deliveries, made.account.as_ref()).await?;
        Ok(written.then_some(()))
    }
}

/// Most credit movements one change of a run writes: a claim's charge, a result's
/// settlement and a failure's refund are one movement each (one ledger entry carrying
/// its nodes' lines, whatever the chain), and refunds of many tasks (a cancel, a sweep)
/// are owed and paid in batches of [`REFUND_BATCH`]. So a change's items are bounded by
/// construction: the head, at most [`super::stored::MAX_CHUNKS`] chunks, its webhook
/// deliveries (at most three events), the account and these entries.
pub const MAX_CREDIT_MOVES: usize = REFUND_BATCH;

/// `POST /agent_run/{id}/cancel`: the run is cancelled in one change; what its tasks'
/// attempts took is then given back in batches (what a failure leaves owed, the sweep
/// pays).
pub async fn cancel_run(ports: &RunPorts<'_>, organization: OrganizationId, id: RunId) -> Result<Cancelled, RunError> {
    let now = ports.clock.now();
    let (run, cancelled) = change_run(ports.runs, ports.notifier, organization, id, &RUN_UPDATE_CONFLICTS, |run, _| {
        Ok(match run.status {
            RunStatus::Cancelled => Change::Keep(Cancelled { tasks_cancelled: 0, nodes_reset: 0 }),
            _ => Change::Store(run.cancel(now)?, Vec::new()),
        })
    })
    .await?;
    if let Some(run) = run.filter(|run| run.refunds_owed > 0) {
        if let Err(error) = pay_owed_refunds(ports.runs, ports.notifier, organization, id, run.refunds_owed).await {
            tracing::warn!(run_id = %id, error = %error, "a cancel's refunds are left owed for the sweep");
        }
    }
    Ok(cancelled)
}

/// Gives back the refunds run `id` owes (about `owed` tasks' worth), in changes of at most
/// [`REFUND_BATCH`] each. Each batch marks its tasks paid in the same atomic write as
/// their ledger entries, so a stop between batches loses and repeats nothing: the next
/// payer goes on from what is stored. Bounded by the batches `owed` needs, and a few
/// more for debts added meanwhile. Returns how many were paid.
pub async fn pay_owed_refunds(
    runs: &dyn RunRepo,
    notifier: &Notifier,
    organization: OrganizationId,
    id: RunId,
    owed: usize,
) -> Result<usize, RunError> {
    let mut paid = 0;
    for _ in 0..owed.div_ceil(REFUND_BATCH) + 2 {
        let (_, count) = change_run(runs, notifier, organization, id, &RUN_UPDATE_CONFLICTS, |run, _| {
            Ok(match run.refunds_owed {
                0 => Change::Keep(0),
                _ => Change::Store(run.pay_refunds(REFUND_BATCH), Vec::new()),
            })
        })
        .await?;
        if count == 0 {
            break;
        }
        paid += count;
    }
    Ok(paid)
}

/// `POST /agent_run/{id}/resume`.
pub async fn resume_run(ports: &RunPorts<'_>, organization: OrganizationId, id: RunId) -> Result<Resumed, RunError> {
    let now = ports.clock.now();
    let (run, (resumed, queued)) =
        change_run(ports.runs, ports.notifier, organization, id, &RUN_UPDATE_CONFLICTS, |run, _| {
            Ok(Change::Store(run.resume(now)?, Vec::new()))
        })
        .await?;
    let run = run.ok_or(RunError::NotFound)?;
    if let Err(error) = send_tasks(ports.queue, &run, &queued).await {
        let message = "the task could not be queued when the run was resumed; resume the run to try again";
        unqueued(ports, &run, &queued, message).await;
        return Err(RunError::Backend(error.context("queueing the resumed run's tasks")));
    }
    Ok(resumed)
}

/// Fails the tasks of `run` that were stored as queued but whose messages could not be
/// sent, rather than leave the run `running` with nothing queued behind it.
async fn unqueued(ports: &RunPorts<'_>, run: &Run, queued: &[TaskIndex], message: &str) {
    let failed =
        change_run(ports.runs, ports.notifier, run.organization_id, run.id, &RUN_UPDATE_CONFLICTS, |run, _| {
            Ok(match run.unqueued(queued, message, ports.clock.now()) {
                true => Change::Store((), Vec::new()),
                false => Change::Keep(()),
            })
        })
        .await;
    if let Err(also) = failed {
        tracing::error!(run_id = %run.id, error = %also, "a run whose tasks could not be queued stays running");
    }
}
