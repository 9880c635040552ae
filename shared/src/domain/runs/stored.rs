//! A run as both backends store it (ARCHITECTURE "Cost per task"): a *plan* written once
//! at start (graph, bound inputs, assets, each task's nodes and source), a small *head*
//! (status, version, timestamps, the inputs' clipped links, the stored sizes), the
//! tasks' changing state in *chunks* of consecutive tasks, and each output as a record
//! of its own. A change writes the head and only the chunks and outputs it changed.
//!
//! [`RunCache`] keeps, per process, the run as stored at its latest version: a change
//! whose run is cached reads the head's version only, and finds what it changed by
//! comparing with the cached run. So claiming a task or recording its result reads and
//! writes the same few records in a run of ten tasks or of thousands.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::ports::{RunTooLarge, MAX_RUN_BYTES};
use super::{
    AgentStateId, AssetFile, BoundInput, MediaFile, MediaLinkIds, NodeIndex, Resume, Run, RunId, RunOutput, RunStatus,
    RuntimeNode, Task, TaskSource, TaskStatus,
};
use crate::core::shared_list::SharedList;
use crate::domain::ids::AgentId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::UploadId;
use crate::domain::time::Timestamp;

/// Largest record of a run (its head, a chunk, an output), in bytes of JSON: below
/// DynamoDB's 400 KB item with room for the keys. The plan alone may be larger (stored
/// in parts where a backend needs them).
pub const MAX_RECORD_BYTES: usize = 350_000;

/// Most chunks a run has: a change that touches every task (cancel, resume) still writes
/// at most this many, with the head, in one DynamoDB transaction of 100 items.
pub const MAX_CHUNKS: usize = 64;

/// Tasks per chunk in a run of `tasks` tasks: at least 32, and enough that a run has at
/// most [`MAX_CHUNKS`] chunks. Fixed by the task count, which never changes.
pub fn chunk_size(tasks: usize) -> usize {
    32.max(tasks.div_ceil(MAX_CHUNKS))
}

/// How many chunks a run of `tasks` tasks has.
pub fn chunk_count(tasks: usize) -> usize {
    tasks.div_ceil(chunk_size(tasks))
}

/// The write-once part of a run.
#[derive(Serialize, Deserialize)]
struct Plan {
    id: RunId,
    organization_id: OrganizationId,
    agent_id: AgentId,
    started_at: Timestamp,
    triggered_by: Option<super::TriggeredBy>,
    callback_url: Option<String>,
    nodes: SharedList<RuntimeNode>,
    /// The bound inputs, without their clipped links (those are the head's).
    inputs: Vec<BoundInput>,
    tasks: Vec<PlannedTask>,
    assets: BTreeMap<UploadId, AssetFile>,
}

#[derive(Serialize, Deserialize)]
struct PlannedTask {
    nodes: Vec<NodeIndex>,
    source: TaskSource,
}

/// Bytes of JSON each record of a run takes as stored, kept in its head: the run's size
/// is their sum, bounded by [`MAX_RUN_BYTES`], without reading the records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizes {
    pub plan: usize,
    pub chunks: Vec<usize>,
    pub outputs: usize,
}

impl Sizes {
    pub fn total(&self, head: usize) -> usize {
        self.plan + self.chunks.iter().sum::<usize>() + self.outputs + head
    }
}

/// What changes of a run besides its tasks.
#[derive(Serialize, Deserialize)]
struct Head {
    status: RunStatus,
    status_message: Option<String>,
    needs_credits: bool,
    updated_at: Timestamp,
    finished_at: Option<Timestamp>,
    agent_state_id: AgentStateId,
    resumes: Vec<Resume>,
    version: u64,
    webhook_sequence: u64,
    /// Tasks whose refunds are owed ([`Run::owe_refund`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    refunds_owed: usize,
    /// Each bound input's clipped input and thumbnail, in input order.
    clipped: Vec<Option<MediaLinkIds>>,
    /// How many output records the run has (records beyond are not its yet).
    outputs: usize,
    sizes: Sizes,
}

/// A task's changing state.
#[derive(Serialize, Deserialize)]
struct TaskState {
    attempt: u32,
    claims: u32,
    status: TaskStatus,
    lease_until: Option<Timestamp>,
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error_node: Option<NodeIndex>,
    result: Option<MediaFile>,
    detached_attempts: u32,
    sent: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queued_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    charged: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    credits: Option<super::CreditBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refund_owed: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts: Vec<super::Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    progress_event_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finished_at: Option<Timestamp>,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

impl TaskState {
    fn of(task: &Task) -> Self {
        Self {
            attempt: task.attempt,
            claims: task.claims,
            status: task.status,
            lease_until: task.lease_until,
            error: task.error.clone(),
            error_node: task.error_node,
            result: task.result.clone(),
            detached_attempts: task.detached_attempts,
            sent: task.sent,
            queued_at: task.queued_at,
            charged: task.charged.clone(),
            credits: task.credits.clone(),
            refund_owed: task.refund_owed.clone(),
            parts: task.parts.clone(),
            progress_event_at: task.progress_event_at,
            started_at: task.started_at,
            finished_at: task.finished_at,
        }
    }

    /// Gives `task` this state (its nodes and source are the plan's).
    fn set(self, task: &mut Task) {
        task.attempt = self.attempt;
        task.claims = self.claims;
        task.status = self.status;
        task.lease_until = self.lease_until;
        task.error = self.error;
        task.error_node = self.error_node;
        task.result = self.result;
        task.detached_attempts = self.detached_attempts;
        task.sent = self.sent;
        task.queued_at = self.queued_at;
        task.charged = self.charged;
        task.credits = self.credits;
        task.refund_owed = self.refund_owed;
        task.parts = self.parts;
        task.progress_event_at = self.progress_event_at;
        task.started_at = self.started_at;
        task.finished_at = self.finished_at;
    }

    fn into_task(self, planned: PlannedTask) -> Task {
        Task {
            nodes: planned.nodes,
            source: planned.source,
            attempt: self.attempt,
            claims: self.claims,
            status: self.status,
            lease_until: self.lease_until,
            error: self.error,
            error_node: self.error_node,
            result: self.result,
            detached_attempts: self.detached_attempts,
            sent: self.sent,
            queued_at: self.queued_at,
            charged: self.charged,
            credits: self.credits,
            refund_owed: self.refund_owed,
            parts: self.parts,
            progress_event_at: self.progress_event_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
        }
    }
}

/// A run as stored at one version, as a process keeps it: `sizes` is None for a run read
/// in the form before the split (its plan is not stored yet: its next write writes all).
#[derive(Clone, Debug)]
pub struct Stored {
    pub run: Run,
    pub sizes: Option<Sizes>,
}

/// The records a write of a run stores.
#[derive(Debug)]
pub struct Encoded {
    /// The plan, when it is not stored yet (a new run, or one stored before the split).
    pub plan: Option<Vec<u8>>,
    pub head: Vec<u8>,
    /// Chunks that changed, by number.
    pub chunks: Vec<(usize, Vec<u8>)>,
    /// How many chunks the run has.
    pub chunk_count: usize,
    /// Outputs new since `before`, by position.
    pub outputs: Vec<(usize, Vec<u8>)>,
    pub sizes: Sizes,
}

fn too_large(run: &Run, bytes: usize, limit: usize) -> anyhow::Error {
    RunTooLarge { run: run.id, bytes, limit }.into()
}

fn record(run: &Run, value: &impl Serialize) -> anyhow::Result<Vec<u8>> {
    let bytes = serde_json::to_vec(value)?;
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(too_large(run, bytes.len(), MAX_RECORD_BYTES));
    }
    Ok(bytes)
}

fn plan_of(run: &Run) -> anyhow::Result<Vec<u8>> {
    let plan = Plan {
        id: run.id,
        organization_id: run.organization_id,
        agent_id: run.agent_id,
        started_at: run.started_at,
        triggered_by: run.triggered_by.clone(),
        callback_url: run.callback_url.clone(),
        nodes: run.nodes.clone(),
        inputs: run.inputs.iter().map(|input| BoundInput { clipped: None, ..input.clone() }).collect(),
        tasks: run
            .tasks
            .iter()
            .map(|task| PlannedTask { nodes: task.nodes.clone(), source: task.source.clone() })
            .collect(),
        assets: run.assets.clone(),
    };
    let bytes = serde_json::to_vec(&plan)?;
    if bytes.len() > MAX_RUN_BYTES {
        return Err(too_large(run, bytes.len(), MAX_RUN_BYTES));
    }
    Ok(bytes)
}

fn chunk_of(run: &Run, chunk: usize) -> anyhow::Result<Vec<u8>> {
    let size = chunk_size(run.tasks.len());
    let end = ((chunk + 1) * size).min(run.tasks.len());
    let states: Vec<TaskState> = (chunk * size..end).map(|index| TaskState::of(&run.tasks[index])).collect();
    record(run, &states)
}

/// The records to write for `run`, changed from `before` (the run as stored at the
/// version before; None writes every record). Refused with [`RunTooLarge`] when a record
/// or the whole run would be over its bound.
pub fn encode(before: Option<&Stored>, run: &Run) -> anyhow::Result<Encoded> {
    let before = before.and_then(|stored| stored.sizes.as_ref().map(|sizes| (&stored.run, sizes)));
    let count = chunk_count(run.tasks.len());
    let size = chunk_size(run.tasks.len());
    let plan = match before {
        Some(_) => None,
        None => Some(plan_of(run)?),
    };
    let mut sizes = match before {
        Some((_, sizes)) => sizes.clone(),
        None => Sizes { plan: plan.as_ref().map_or(0, Vec::len), chunks: vec![0; count], outputs: 0 },
    };
    let mut chunks = Vec::new();
    for chunk in 0..count {
        let range = chunk * size..((chunk + 1) * size).min(run.tasks.len());
        // A task the change did not touch is still the cached run's (shared, not
        // copied): comparing it is one pointer comparison.
        let changed = match before {
            Some((was, _)) => !was.tasks.same_in(&run.tasks, range),
            None => true,
        };
        if changed {
            let bytes = chunk_of(run, chunk)?;
            sizes.chunks[chunk] = bytes.len();
            chunks.push((chunk, bytes));
        }
    }
    let stored_outputs = before.map_or(0, |(was, _)| was.outputs.len());
    debug_assert!(before.is_none_or(|(was, _)| run.outputs.starts_with(&was.outputs)), "outputs are only added");
    let mut outputs = Vec::new();
    for (position, output) in run.outputs.iter().enumerate().skip(stored_outputs) {
        let bytes = record(run, output)?;
        sizes.outputs += bytes.len();
        outputs.push((position, bytes));
    }
    let head = Head {
        status: run.status,
        status_message: run.status_message.clone(),
        needs_credits: run.needs_credits,
        updated_at: run.updated_at,
        finished_at: run.finished_at,
        agent_state_id: run.agent_state_id,
        resumes: run.resumes.clone(),
        version: run.version,
        webhook_sequence: run.webhook_sequence,
        refunds_owed: run.refunds_owed,
        clipped: run.inputs.iter().map(|input| input.clipped).collect(),
        outputs: run.outputs.len(),
        sizes: sizes.clone(),
    };
    let head = record(run, &head)?;
    let total = sizes.total(head.len());
    if total > MAX_RUN_BYTES {
        return Err(too_large(run, total, MAX_RUN_BYTES));
    }
    Ok(Encoded { plan, head, chunks, chunk_count: count, outputs, sizes })
}

/// How many output records a stored head counts.
pub fn head_outputs(head: &[u8]) -> anyhow::Result<usize> {
    #[derive(Deserialize)]
    struct Outputs {
        outputs: usize,
    }
    Ok(serde_json::from_slice::<Outputs>(head).map_err(unreadable)?.outputs)
}

fn unreadable(error: serde_json::Error) -> anyhow::Error {
    anyhow::anyhow!("a stored run could not be read: {error}")
}

/// A run from its records: the plan, the head, every chunk (by number) and at least the
/// head's count of outputs (by position; any beyond are ignored), counted.
pub fn decode(
    plan: &[u8],
    head: &[u8],
    chunks: &[(usize, &[u8])],
    outputs: &[(usize, &[u8])],
) -> anyhow::Result<Stored> {
    let plan: Plan = serde_json::from_slice(plan).map_err(unreadable)?;
    let head: Head = serde_json::from_slice(head).map_err(unreadable)?;
    let count = chunk_count(plan.tasks.len());
    let mut states: Vec<Option<Vec<TaskState>>> = (0..count).map(|_| None).collect();
    for (chunk, bytes) in chunks {
        let slot =
            states.get_mut(*chunk).ok_or_else(|| anyhow::anyhow!("a stored run has an unknown chunk {chunk}"))?;
        *slot = Some(serde_json::from_slice(bytes).map_err(unreadable)?);
    }
    let mut planned = plan.tasks.into_iter();
    let mut tasks = SharedList::new();
    for (chunk, states) in states.into_iter().enumerate() {
        let states = states.ok_or_else(|| anyhow::anyhow!("a stored run is missing its chunk {chunk}"))?;
        for state in states {
            let planned =
                planned.next().ok_or_else(|| anyhow::anyhow!("a stored run has more task states than tasks"))?;
            tasks.push(state.into_task(planned));
        }
    }
    anyhow::ensure!(planned.next().is_none(), "a stored run has tasks without state");
    let mut found: Vec<Option<RunOutput>> = vec![None; head.outputs];
    for (position, bytes) in outputs {
        if let Some(slot) = found.get_mut(*position) {
            *slot = Some(serde_json::from_slice(bytes).map_err(unreadable)?);
        }
    }
    let outputs = found
        .into_iter()
        .enumerate()
        .map(|(position, output)| {
            output.ok_or_else(|| anyhow::anyhow!("a stored run is missing its output {position}"))
        })
        .collect::<anyhow::Result<SharedList<_>>>()?;
    let mut inputs = plan.inputs;
    for (input, clipped) in inputs.iter_mut().zip(head.clipped) {
        input.clipped = clipped;
    }
    let mut run = Run {
        id: plan.id,
        organization_id: plan.organization_id,
        agent_id: plan.agent_id,
        status: head.status,
        status_message: head.status_message,
        needs_credits: head.needs_credits,
        started_at: plan.started_at,
        updated_at: head.updated_at,
        finished_at: head.finished_at,
        triggered_by: plan.triggered_by,
        callback_url: plan.callback_url,
        agent_state_id: head.agent_state_id,
        resumes: head.resumes,
        version: head.version,
        nodes: plan.nodes,
        inputs,
        tasks,
        outputs,
        assets: plan.assets,
        webhook_sequence: head.webhook_sequence,
        refunds_owed: head.refunds_owed,
        counts: Default::default(),
        dependents: Default::default(),
        credit_moves: Vec::new(),
    };
    run.recount();
    Ok(Stored { run, sizes: Some(head.sizes) })
}

/// The run at the version of `head`, from `older` (the same run as stored, in records, at
/// an earlier version) and the records written since: at least every chunk written after
/// `older`'s version (by number; others are ignored unless given) and the outputs past
/// `older`'s count (by position). The plan and earlier outputs are write-once, so they
/// are `older`'s: a process that has read a run once reads only what changed since.
pub fn refresh(
    older: &Stored,
    head: &[u8],
    chunks: &[(usize, &[u8])],
    outputs: &[(usize, &[u8])],
) -> anyhow::Result<Stored> {
    anyhow::ensure!(older.sizes.is_some(), "a run stored whole is read whole");
    let head: Head = serde_json::from_slice(head).map_err(unreadable)?;
    let mut run = older.run.clone();
    anyhow::ensure!(head.version >= run.version, "a stored run went back to version {}", head.version);
    let (tasks, size) = (run.tasks.len(), chunk_size(run.tasks.len()));
    for (chunk, bytes) in chunks {
        anyhow::ensure!(*chunk < chunk_count(tasks), "a stored run has an unknown chunk {chunk}");
        let states: Vec<TaskState> = serde_json::from_slice(bytes).map_err(unreadable)?;
        let range = chunk * size..((chunk + 1) * size).min(tasks);
        anyhow::ensure!(states.len() == range.len(), "a stored run's chunk {chunk} does not hold its tasks");
        for (index, state) in range.zip(states) {
            state.set(&mut run.tasks[index]);
        }
    }
    let known = run.outputs.len();
    anyhow::ensure!(head.outputs >= known, "a stored run lost outputs");
    let mut found: Vec<Option<RunOutput>> = vec![None; head.outputs - known];
    for (position, bytes) in outputs {
        if let Some(slot) = position.checked_sub(known).and_then(|at| found.get_mut(at)) {
            *slot = Some(serde_json::from_slice(bytes).map_err(unreadable)?);
        }
    }
    for (at, output) in found.into_iter().enumerate() {
        run.outputs.push(output.ok_or_else(|| anyhow::anyhow!("a stored run is missing its output {}", known + at))?);
    }
    for (at, input) in run.inputs.iter_mut().enumerate() {
        input.clipped = head.clipped.get(at).copied().flatten();
    }
    (run.status, run.status_message, run.needs_credits) = (head.status, head.status_message, head.needs_credits);
    (run.updated_at, run.finished_at, run.agent_state_id) = (head.updated_at, head.finished_at, head.agent_state_id);
    (run.resumes, run.version, run.webhook_sequence) = (head.resumes, head.version, head.webhook_sequence);
    run.refunds_owed = head.refunds_owed;
    run.recount();
    Ok(Stored { run, sizes: Some(head.sizes) })
}

/// Runs most recently read or written by this process, each at its version: at most
/// [`CACHED_RUNS`] of them, the least recently used leaving first.
#[derive(Default)]
pub struct RunCache {
    entries: Mutex<HashMap<(OrganizationId, RunId), Entry>>,
}

struct Entry {
    stored: Arc<Stored>,
    used: u64,
}

/// Runs a [`RunCache`] keeps.
pub const CACHED_RUNS: usize = 32;

impl RunCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(OrganizationId, RunId), Entry>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tick(entries: &HashMap<(OrganizationId, RunId), Entry>) -> u64 {
        entries.values().map(|entry| entry.used).max().unwrap_or(0) + 1
    }

    /// The run of the organization as stored at `version`, if this process has it.
    pub fn get(&self, organization: OrganizationId, id: RunId, version: u64) -> Option<Arc<Stored>> {
        let mut entries = self.lock();
        let tick = Self::tick(&entries);
        let entry = entries.get_mut(&(organization, id)).filter(|entry| entry.stored.run.version == version)?;
        entry.used = tick;
        Some(entry.stored.clone())
    }

    /// The latest version of the organization's run that this process has, if any.
    pub fn latest(&self, organization: OrganizationId, id: RunId) -> Option<Arc<Stored>> {
        self.lock().get(&(organization, id)).map(|entry| entry.stored.clone())
    }

    /// Forgets every run.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Keeps `stored` (the run as stored at its version) unless a later version is kept.
    pub fn put(&self, stored: Stored) {
        let key = (stored.run.organization_id, stored.run.id);
        let mut entries = self.lock();
        if entries.get(&key).is_some_and(|entry| entry.stored.run.version > stored.run.version) {
            return;
        }
        let used = Self::tick(&entries);
        entries.insert(key, Entry { stored: Arc::new(stored), used });
        if entries.len() > CACHED_RUNS {
            if let Some(oldest) = entries.iter().min_by_key(|(_, entry)| entry.used).map(|(key, _)| *key) {
                entries.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::ids::NodeTypeId;
    use crate::domain::nodes::{CLIP, DESTINATION, VIDEO_INPUT};
    use crate::domain::runs::engine::tests::{end, run_of};
    use crate::domain::runs::engine::Claim;
    use crate::domain::runs::TaskIndex;

    /// Video Input on `items` items → `branches` × (Clip → Destination): `items` input
    /// tasks and `items × branches` branch tasks.
    fn wide(items: usize, branches: usize) -> Run {
        let mut nodes: Vec<(NodeTypeId, Vec<usize>)> = vec![(VIDEO_INPUT, vec![])];
        for branch in 0..branches {
            nodes.push((CLIP, vec![0]));
            nodes.push((DESTINATION, vec![1 + 2 * branch]));
        }
        let nodes: Vec<(NodeTypeId, &[usize])> = nodes.iter().map(|(kind, up)| (*kind, up.as_slice())).collect();
        run_of(&nodes, items)
    }

    /// What a delivering task hands over: a new video, nothing else.
    fn delivered() -> crate::domain::runs::engine::Delivered {
        crate::domain::runs::engine::Delivered {
            video: crate::domain::runs::MediaId::new_v4(),
            thumbnail: None,
            timeline: None,
            placements: Vec::new(),
            input_copy: None,
        }
    }

    /// A run's records as a backend holds them: plan, head, chunks, outputs.
    type Records = (Vec<u8>, Vec<u8>, BTreeMap<usize, Vec<u8>>, BTreeMap<usize, Vec<u8>>);

    /// Writes `encoded` over `records` as a backend would.
    fn store(records: &mut Records, encoded: Encoded) {
        if let Some(plan) = encoded.plan {
            records.0 = plan;
        }
        records.1 = encoded.head;
        records.2.extend(encoded.chunks);
        records.3.extend(encoded.outputs);
    }

    fn read(records: &Records) -> Stored {
        let chunks: Vec<(usize, &[u8])> = records.2.iter().map(|(n, bytes)| (*n, bytes.as_slice())).collect();
        let outputs: Vec<(usize, &[u8])> = records.3.iter().map(|(n, bytes)| (*n, bytes.as_slice())).collect();
        decode(&records.0, &records.1, &chunks, &outputs).unwrap()
    }

    #[test]
    fn chunks_hold_at_least_32_tasks_and_a_run_has_at_most_64() {
        assert_eq!((chunk_size(1), chunk_count(1)), (32, 1));
        assert_eq!((chunk_size(1_000), chunk_count(1_000)), (32, 32));
        assert_eq!((chunk_size(2_048), chunk_count(2_048)), (32, 64));
        assert_eq!((chunk_size(2_049), chunk_count(2_049)), (33, 63));
        for tasks in [0, 31, 33, 2_047, 2_049, 4_999, crate::domain::runs::MAX_TASKS] {
            assert!(chunk_count(tasks) <= MAX_CHUNKS && chunk_size(tasks) >= 32, "{tasks}");
            assert!(chunk_count(tasks) * chunk_size(tasks) >= tasks, "{tasks}");
        }
    }

    /// A change writes the head and the chunks and outputs it changed, nothing else, and
    /// what is read back from the records is the run that was written, at every step.
    #[test]
    fn a_change_writes_only_what_it_changed_and_reads_back_whole() {
        let mut run = wide(10, 99);
        assert_eq!(run.tasks.len(), 1_000);
        let first = encode(None, &run).unwrap();
        assert!(first.plan.is_some());
        assert_eq!((first.chunks.len(), first.chunk_count, first.outputs.len()), (32, 32, 0));
        let mut records = Default::default();
        store(&mut records, first);
        let mut before = read(&records);
        assert_eq!(before.run, run);

        // The input tasks are 0..10; each readies its 99 branch tasks.
        for input in 0..10 {
            let queued = end(&mut run, TaskIndex(input), true);
            assert_eq!(queued.len(), 99);
            let encoded = encode(Some(&before), &run).unwrap();
            assert!(encoded.plan.is_none(), "the plan is written once");
            let touched: std::collections::BTreeSet<usize> =
                std::iter::once(input).chain(queued.iter().map(|task| task.0)).map(|task| task / 32).collect();
            let written: std::collections::BTreeSet<usize> = encoded.chunks.iter().map(|(n, _)| *n).collect();
            assert_eq!(written, touched, "only the chunks of the tasks that changed");
            store(&mut records, encoded);
            before = read(&records);
            assert_eq!(before.run, run);
        }
        // A branch task's claim, then its result (an output): one chunk, then one chunk
        // and one output record.
        let task = TaskIndex(500);
        let now = Timestamp::now();
        assert_eq!(run.claim(task, run.tasks[task].attempt, now, Duration::from_secs(60)), Claim::Claimed);
        let claimed = encode(Some(&before), &run).unwrap();
        assert_eq!((claimed.chunks.len(), claimed.outputs.len()), (1, 0));
        assert!(claimed.head.len() < 2_000, "the head stays small: {} bytes", claimed.head.len());
        store(&mut records, claimed);
        before = read(&records);
        let file = run.tasks[0].result.clone().unwrap();
        run.complete(task, run.tasks[task].attempt, file, Some(delivered()), now).unwrap();
        let completed = encode(Some(&before), &run).unwrap();
        assert_eq!(completed.chunks.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![500 / 32]);
        assert_eq!(completed.outputs.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![0]);
        store(&mut records, completed);
        assert_eq!(read(&records).run, run);
        // A cancel touches every task that is not final: at most every chunk.
        let cancelled = {
            let mut run = run.clone();
            run.cancel(now).unwrap();
            encode(Some(&read(&records)), &run).unwrap()
        };
        assert!(cancelled.chunks.len() <= MAX_CHUNKS);
    }

    /// What a change costs in memory does not grow with the run: the copy it starts from
    /// (the cached run) shares every task, node and output, and the change copies only
    /// the task it touches.
    #[test]
    fn a_change_copies_only_the_tasks_it_changes() {
        let mut run = wide(10, 99);
        for input in 0..10 {
            end(&mut run, TaskIndex(input), true);
        }
        let task = TaskIndex(500);
        let now = Timestamp::now();
        assert_eq!(run.claim(task, run.tasks[task].attempt, now, Duration::from_secs(60)), Claim::Claimed);
        let file = run.tasks[0].result.clone().unwrap();
        run.complete(task, run.tasks[task].attempt, file, Some(delivered()), now).unwrap();
        let (organization, id) = (run.organization_id, run.id);
        let sizes = encode(None, &run).unwrap().sizes;
        let cache = RunCache::default();
        cache.put(Stored { run, sizes: Some(sizes) });
        let cached = cache.get(organization, id, 0).unwrap();

        let mut changed = cached.run.clone();
        let claimed = TaskIndex(600);
        let attempt = changed.tasks[claimed].attempt;
        assert_eq!(changed.claim(claimed, attempt, now, Duration::from_secs(60)), Claim::Claimed);
        let shared = |list: fn(&Run, usize) -> Option<*const ()>| {
            (0..1_000)
                .filter(|at| list(&cached.run, *at).is_some() && list(&cached.run, *at) == list(&changed, *at))
                .count()
        };
        assert_eq!(
            shared(|run, at| run.tasks.get(at).map(|task| task as *const _ as *const ())),
            999,
            "one task copied"
        );
        assert_eq!(
            shared(|run, at| run.nodes.get(at).map(|node| node as *const _ as *const ())),
            199,
            "no node copied"
        );
        assert_eq!(shared(|run, at| run.outputs.get(at).map(|output| output as *const _ as *const ())), 1);
        assert_eq!(
            encode(Some(&cached), &changed).unwrap().chunks.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![600 / 32]
        );
    }

    /// A process that read a run at an earlier version reads it again from the chunks
    /// written since and the new outputs, and gets what a whole read gets.
    #[test]
    fn a_run_read_before_is_brought_up_to_date_from_what_was_written_since() {
        let mut run = wide(10, 99);
        let mut records = Default::default();
        store(&mut records, encode(None, &run).unwrap());
        let mut before = read(&records);
        let (mut written, mut older) = (std::collections::BTreeSet::new(), None);
        let now = Timestamp::now();
        for step in 0..10 {
            let queued = end(&mut run, TaskIndex(step), true);
            for task in queued.into_iter().step_by(40) {
                assert_eq!(run.claim(task, run.tasks[task].attempt, now, Duration::from_secs(60)), Claim::Claimed);
                let file = run.tasks[0].result.clone().unwrap();
                run.complete(task, run.tasks[task].attempt, file, Some(delivered()), now).unwrap();
            }
            run.version += 1;
            let encoded = encode(Some(&before), &run).unwrap();
            written.extend(encoded.chunks.iter().map(|(n, _)| *n));
            store(&mut records, encoded);
            before = read(&records);
            if step == 3 {
                (older, written) = (Some(before.clone()), Default::default());
            }
        }
        let older = older.unwrap();
        assert!(older.run.outputs.len() < run.outputs.len());
        let outputs: Vec<(usize, &[u8])> = records.3.iter().map(|(n, bytes)| (*n, bytes.as_slice())).collect();
        let changed: Vec<(usize, &[u8])> = written.iter().map(|n| (*n, records.2[n].as_slice())).collect();
        let refreshed = refresh(&older, &records.1, &changed, &outputs[older.run.outputs.len()..]).unwrap();
        assert_eq!(refreshed.run, run);
        assert_eq!((refreshed.run.counts.clone(), refreshed.sizes), (run.recounted(), before.sizes.clone()));
        let every: Vec<(usize, &[u8])> = records.2.iter().map(|(n, bytes)| (*n, bytes.as_slice())).collect();
        assert_eq!(refresh(&older, &records.1, &every, &outputs).unwrap().run, run, "records it has are read again");
        let missing = refresh(&older, &records.1, &changed, &outputs[older.run.outputs.len() + 1..]);
        assert!(missing.unwrap_err().to_string().contains("missing its output"));

        // A claim writes one chunk: that chunk and the head are all a refresh needs.
        let task = run.task_indexes().find(|index| run.tasks[*index].status == TaskStatus::Queued).unwrap();
        assert_eq!(run.claim(task, run.tasks[task].attempt, now, Duration::from_secs(60)), Claim::Claimed);
        run.version += 1;
        let encoded = encode(Some(&before), &run).unwrap();
        assert_eq!(encoded.chunks.len(), 1);
        let (chunk, bytes) = &encoded.chunks[0];
        assert_eq!(refresh(&before, &encoded.head, &[(*chunk, bytes)], &[]).unwrap().run, run);
    }

    #[test]
    fn a_record_over_its_bound_refuses_the_write() {
        let mut run = wide(1, 1);
        let before = Stored { run: run.clone(), sizes: Some(encode(None, &run).unwrap().sizes) };
        run.status_message = Some("x".repeat(MAX_RECORD_BYTES));
        let error = encode(Some(&before), &run).unwrap_err();
        let too_large = error.downcast_ref::<RunTooLarge>().expect("RunTooLarge");
        assert_eq!(too_large.limit, MAX_RECORD_BYTES);
        assert!(too_large.bytes > MAX_RECORD_BYTES);
    }

    #[test]
    fn the_cache_keeps_the_latest_version_of_the_most_recent_runs() {
        let cache = RunCache::default();
        let mut run = wide(1, 1);
        let (organization, id) = (run.organization_id, run.id);
        run.version = 3;
        cache.put(Stored { run: run.clone(), sizes: None });
        assert!(cache.get(organization, id, 3).is_some());
        assert!(cache.get(organization, id, 2).is_none(), "only the version asked for");
        assert!(cache.get(crate::domain::identity::OrganizationId::new_v4(), id, 3).is_none(), "only its organization");
        run.version = 2;
        cache.put(Stored { run: run.clone(), sizes: None });
        assert!(cache.get(organization, id, 3).is_some(), "an older version does not replace a newer one");
        let others: Vec<Run> = (0..CACHED_RUNS)
            .map(|_| {
                let mut other = run.clone();
                other.id = RunId::new_v4();
                other
            })
            .collect();
        for other in &others {
            cache.put(Stored { run: other.clone(), sizes: None });
        }
        assert!(cache.get(organization, id, 3).is_none(), "the least recently used left first");
        assert!(others.iter().all(|other| cache.get(other.organization_id, other.id, 2).is_some()));
    }
}
