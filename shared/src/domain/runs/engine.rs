//! The state machine of a run. Every function changes a [`Run`] in memory and says what
//! the caller must do next (which task messages to send); the caller stores the run
//! under its version, so each change is applied by exactly one writer.

use std::time::Duration;

use super::{
    AgentStateId, Fault, MediaId, NodeIndex, NodeStatus, Resume, Run, RunOutput, RunStatus, TaskIndex, TaskSource,
    TaskStatus, MAX_CLAIMS,
};
use crate::domain::time::Timestamp;

/// What a worker's claim on a task message found.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// The task is now running under this worker.
    Claimed,
    /// Nothing to do: a duplicate or stale message, or the run is not running.
    Refused(String),
    /// Another claim on this attempt is still held, until then: the message must come
    /// back after it (should that claim's worker have stopped, the task runs again).
    Held(Timestamp),
    /// Workers stopped on this task too often; it was failed (store the run).
    GaveUp,
}

/// Links made for a finished task.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivered {
    pub video: MediaId,
    pub thumbnail: Option<MediaId>,
    /// An output's timeline project.
    pub timeline: Option<MediaId>,
    /// An output's edit decisions.
    pub placements: Vec<super::edits::Placement>,
    /// The input's own media record, when the task that made a bound input's copy
    /// delivers it as an output too: a URL input's downloaded copy is then still an
    /// asset of its own (its citations' `render_asset_id`), not the output's ID.
    pub input_copy: Option<MediaId>,
}

/// What a cancel did.
#[derive(Debug, PartialEq, Eq)]
pub struct Cancelled {
    pub tasks_cancelled: usize,
    pub nodes_reset: usize,
}

/// What a resume did.
#[derive(Debug, PartialEq, Eq)]
pub struct Resumed {
    pub agent_state_id: AgentStateId,
    pub nodes_queued: usize,
    pub nodes_considered: usize,
    pub requeued_nodes: usize,
    pub requeued_node_tasks_detached: usize,
    pub requeued_node_active_tasks_cancelled: usize,
    pub requeued_node_active_tasks_total: usize,
}

/// What a sweep of a run changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Tasks whose messages to send (again).
    pub resend: Vec<TaskIndex>,
    /// Parts (of tasks making them) whose messages to send again.
    pub resend_parts: Vec<(TaskIndex, u32)>,
    /// Tasks failed because their claim ran out long ago.
    pub failed: usize,
}

/// Why a cancel or resume is refused (409).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WrongStatus(pub String);

/// Most bytes of a task's error kept: a chunk of task state stays far below its bound
/// whatever its tasks' errors say (ffmpeg's output can be long).
pub const MAX_ERROR_BYTES: usize = 2_048;

/// `message` cut to [`MAX_ERROR_BYTES`] (at a character boundary, marked with "…").
fn capped(mut message: String) -> String {
    if message.len() > MAX_ERROR_BYTES {
        let mut end = MAX_ERROR_BYTES - '…'.len_utf8();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

impl Run {
    pub(super) fn touch(&mut self, now: Timestamp) {
        self.updated_at = now;
    }

    /// Moves waiting tasks whose inputs are all there to `queued`, and fails (as skipped)
    /// those with an input that failed or was cancelled; then ends the run when every
    /// task is final. Returns the tasks queued now, whose messages the caller sends.
    pub fn settle(&mut self, now: Timestamp) -> Vec<TaskIndex> {
        let mut queued = Vec::new();
        if self.status != RunStatus::Running {
            return queued;
        }
        // Tasks only depend on earlier tasks, so one pass in order settles everything.
        for index in self.task_indexes() {
            if self.settle_one(index, now) == Some(TaskStatus::Queued) {
                queued.push(index);
            }
        }
        self.finish_if_done(now);
        queued
    }

    /// What [`Run::settle`] does, for what task `ended` (just completed or failed)
    /// decides: its waiting dependents are queued or skipped, and the dependents of each
    /// one skipped in turn; then the run ends if no task is left. Reads those tasks only,
    /// so recording a result costs the same in a run of ten tasks or of thousands.
    fn settle_after(&mut self, ended: TaskIndex, now: Timestamp) -> Vec<TaskIndex> {
        let mut queued = Vec::new();
        if self.status != RunStatus::Running {
            return queued;
        }
        let dependents = self.dependents();
        let mut decided = vec![ended];
        while let Some(done) = decided.pop() {
            for &index in dependents.get(done.0).map(Vec::as_slice).unwrap_or_default() {
                match self.settle_one(index, now) {
                    Some(TaskStatus::Queued) => queued.push(index),
                    Some(_) => decided.push(index),
                    None => {}
                }
            }
        }
        queued.sort_unstable();
        self.finish_if_done(now);
        queued
    }

    /// Settles one waiting task: queued when its sources are all completed, failed (as
    /// skipped) when one failed or was cancelled. Returns its new status, if it moved.
    fn settle_one(&mut self, index: TaskIndex, now: Timestamp) -> Option<TaskStatus> {
        if self.tasks[index].status != TaskStatus::Waiting {
            return None;
        }
        let (mut all_completed, mut any_failed) = (true, false);
        if let TaskSource::Tasks { tasks } = &self.tasks[index].source {
            for source in tasks {
                let status = self.tasks[*source].status;
                all_completed &= status == TaskStatus::Completed;
                any_failed |= matches!(status, TaskStatus::Failed | TaskStatus::Cancelled);
            }
        }
        if all_completed {
            self.set_status(index, TaskStatus::Queued, now);
            let task = &mut self.tasks[index];
            task.sent = true;
            task.queued_at = Some(now);
            Some(TaskStatus::Queued)
        } else if any_failed {
            self.set_status(index, TaskStatus::Failed, now);
            let task = &mut self.tasks[index];
            task.error = None;
            task.error_node = None;
            Some(TaskStatus::Failed)
        } else {
            None
        }
    }

    /// Ends the run once every task is final: completed when every expected output was
    /// produced, partially when some were, failed when none was.
    pub(super) fn finish_if_done(&mut self, now: Timestamp) {
        if self.status != RunStatus::Running {
            return;
        }
        let for_credits = self.counts.unfinished() > 0;
        if for_credits && !self.only_credit_blocked_left() {
            return;
        }
        let expected = self.output_tasks().count();
        let produced = self.outputs.len();
        self.refresh_needs_credits();
        let (status, message) = if for_credits {
            let credits = self.credits_message();
            match produced {
                0 => (RunStatus::Failed, Some(format!("No output was produced: {credits}"))),
                _ => (
                    RunStatus::PartialComplete,
                    Some(format!("{produced} of {expected} outputs were produced; {credits}")),
                ),
            }
        } else if produced >= expected {
            (RunStatus::Completed, None)
        } else if produced > 0 {
            (RunStatus::PartialComplete, Some(format!("{produced} of {expected} outputs were produced; see errors")))
        } else {
            let first = self.tasks.iter().find_map(|task| task.error.clone());
            let reason = first.unwrap_or_else(|| "every task failed".to_owned());
            (RunStatus::Failed, Some(format!("No output was produced: {reason}")))
        };
        self.status = status;
        self.status_message = message;
        self.finished_at = Some(now);
        self.touch(now);
    }

    /// A worker's claim on attempt `attempt` of task `index`, held until `now + lease`.
    pub fn claim(&mut self, index: TaskIndex, attempt: u32, now: Timestamp, lease: Duration) -> Claim {
        if self.status != RunStatus::Running {
            return Claim::Refused(format!("the run is {}", self.status.as_str()));
        }
        let Some(task) = self.tasks.get(index.0) else { return Claim::Refused("no such task".into()) };
        if task.attempt != attempt {
            return Claim::Refused(format!("attempt {attempt} was replaced by attempt {}", task.attempt));
        }
        if let (TaskStatus::Running, Some(until)) = (task.status, task.lease_until) {
            if until >= now {
                return Claim::Held(until);
            }
        }
        if self.in_parts(index) {
            return Claim::Refused("its parts are being made".into());
        }
        let abandoned = task.status == TaskStatus::Running;
        // A blocked task's message comes back to look again at what it waits for.
        let waiting = task.status == TaskStatus::Blocked;
        if task.status != TaskStatus::Queued && !abandoned && !waiting {
            return Claim::Refused(format!("the task is {:?}", task.status).to_lowercase());
        }
        if task.claims >= MAX_CLAIMS {
            self.set_status(index, TaskStatus::Failed, now);
            let task = &mut self.tasks[index];
            task.error = Some(format!("the task was started {MAX_CLAIMS} times and its worker stopped each time"));
            task.lease_until = None;
            self.refund(index);
            self.touch(now);
            self.settle_after(index, now);
            return Claim::GaveUp;
        }
        self.set_status(index, TaskStatus::Running, now);
        let task = &mut self.tasks[index];
        task.claims += 1;
        task.lease_until = Some(now.after(lease));
        self.touch(now);
        Claim::Claimed
    }

    /// The queued tasks that wait on attempt `attempt` of task `index` once it has ended:
    /// what its worker queued when it recorded the result. A delivery of a message whose
    /// task has ended sends them again, in case that worker died (or its queue failed)
    /// between recording and sending; a second message is refused by the claim.
    pub fn queued_after(&self, index: TaskIndex, attempt: u32) -> Vec<TaskIndex> {
        let ended = self.tasks.get(index.0).is_some_and(|task| {
            task.attempt == attempt && matches!(task.status, TaskStatus::Completed | TaskStatus::Failed)
        });
        if self.status != RunStatus::Running || !ended {
            return Vec::new();
        }
        self.task_indexes()
            .filter(|other| {
                let task = &self.tasks[*other];
                task.status == TaskStatus::Queued
                    && matches!(&task.source, super::TaskSource::Tasks { tasks } if tasks.contains(&index))
            })
            .collect()
    }

    /// Whether attempt `attempt` of task `index` is still running (its worker should go on).
    pub fn still_running(&self, index: TaskIndex, attempt: u32) -> bool {
        self.status == RunStatus::Running
            && self.tasks.get(index.0).is_some_and(|task| task.attempt == attempt && task.status == TaskStatus::Running)
    }

    /// Records a task's result; false (and nothing changed) when the attempt is no longer
    /// running (a duplicate, cancelled or superseded), so a result is recorded once.
    /// Returns the tasks queued now.
    pub fn complete(
        &mut self,
        index: TaskIndex,
        attempt: u32,
        result: super::MediaFile,
        delivered: Option<Delivered>,
        now: Timestamp,
    ) -> Option<Vec<TaskIndex>> {
        if !self.still_running(index, attempt) {
            return None;
        }
        self.set_status(index, TaskStatus::Completed, now);
        let task = &mut self.tasks[index];
        task.result = Some(result);
        task.lease_until = None;
        // A task made in parts is joined: nothing reads its parts' files again (the
        // worker that joined them deletes them), and the record forgets them.
        for part in &mut task.parts {
            part.key = None;
        }
        let (source, last) = (task.source.clone(), *task.nodes.last().unwrap_or(&NodeIndex(0)));
        if let (Some(delivered), TaskSource::Input { input }) = (&delivered, &source) {
            if let Some(bound) = self.inputs.get_mut(*input) {
                let video = delivered.input_copy.unwrap_or(delivered.video);
                bound.clipped = Some(super::MediaLinkIds { video, thumbnail: delivered.thumbnail });
            }
        }
        if let Some(delivered) = delivered.filter(|_| self.is_output_node(last)) {
            self.outputs.push(RunOutput {
                id: delivered.video,
                thumbnail: delivered.thumbnail,
                node: self.nodes[last].agent_node_id,
                original_node_id: self.nodes[last].original_node_id,
                task: index,
                completed_at: now,
                timeline: delivered.timeline,
                placements: delivered.placements,
            });
        }
        self.touch(now);
        Some(self.settle_after(index, now))
    }

    /// Records that a task waits for something not ready yet (an avatar profile being
    /// processed): `blocked`, its claims forgotten (waiting is not a worker stopping);
    /// its message comes back to claim it again. False when the attempt is no longer
    /// running.
    pub fn block(&mut self, index: TaskIndex, attempt: u32, now: Timestamp) -> bool {
        if !self.still_running(index, attempt) {
            return false;
        }
        self.set_status(index, TaskStatus::Blocked, now);
        let task = &mut self.tasks[index];
        task.lease_until = None;
        task.claims = 0;
        self.touch(now);
        true
    }

    /// Blocks a queued task before it is claimed (an AI Avatar task whose profile is still
    /// processed: it never shows `running`); false (nothing changed) unless the attempt
    /// is queued in a running run.
    pub fn block_queued(&mut self, index: TaskIndex, attempt: u32, now: Timestamp) -> bool {
        let queued =
            self.tasks.get(index.0).is_some_and(|task| task.attempt == attempt && task.status == TaskStatus::Queued);
        if self.status != RunStatus::Running || !queued {
            return false;
        }
        self.set_status(index, TaskStatus::Blocked, now);
        let task = &mut self.tasks[index];
        task.lease_until = None;
        task.claims = 0;
        self.touch(now);
        true
    }

    /// Records a task's failure (see [`Run::complete`] for when nothing changes); its
    /// credits are given back when the fault is ours.
    pub fn fail(
        &mut self,
        index: TaskIndex,
        attempt: u32,
        message: String,
        (node, fault): (Option<NodeIndex>, Fault),
        now: Timestamp,
    ) -> Option<Vec<TaskIndex>> {
        if !self.still_running(index, attempt) {
            return None;
        }
        self.set_status(index, TaskStatus::Failed, now);
        let task = &mut self.tasks[index];
        task.error = Some(capped(message));
        task.error_node = node.filter(|node| task.nodes.contains(node));
        task.lease_until = None;
        if fault == Fault::Ours {
            self.refund(index);
        }
        self.touch(now);
        Some(self.settle_after(index, now))
    }

    /// Fails the still-queued tasks among `tasks`, whose messages could not be sent, with
    /// `message`: the run ends (or goes on without them) instead of waiting for work that
    /// never comes, and resume can queue them again. Returns whether anything changed.
    pub fn unqueued(&mut self, tasks: &[TaskIndex], message: &str, now: Timestamp) -> bool {
        if self.status != RunStatus::Running {
            return false;
        }
        let mut changed = false;
        for index in tasks {
            if self.tasks.get(index.0).is_some_and(|task| task.status == TaskStatus::Queued) {
                self.set_status(*index, TaskStatus::Failed, now);
                let task = &mut self.tasks[*index];
                task.error = Some(message.to_owned());
                // No message of it went out: nothing for a resume to detach.
                task.sent = false;
                changed = true;
            }
        }
        if changed {
            self.touch(now);
            self.settle(now);
        }
        changed
    }

    /// Puts a running task back in the queue for the same attempt (its worker is shutting
    /// down), returning it to be sent again.
    pub fn release(&mut self, index: TaskIndex, attempt: u32, now: Timestamp) -> bool {
        if !self.still_running(index, attempt) {
            return false;
        }
        self.set_status(index, TaskStatus::Queued, now);
        let task = &mut self.tasks[index];
        task.lease_until = None;
        task.queued_at = Some(now);
        task.claims = task.claims.saturating_sub(1);
        self.touch(now);
        true
    }

    /// After the only process that runs this run's tasks restarted: tasks it was running
    /// are queued again (same attempt; they run again from their inputs). Returns every
    /// queued task, whose messages the caller sends again (duplicates are refused by the
    /// claim).
    pub fn recover(&mut self, now: Timestamp) -> Vec<TaskIndex> {
        if self.status != RunStatus::Running {
            return Vec::new();
        }
        for index in self.task_indexes() {
            if self.in_parts(index) {
                // Its parts are queued again instead ([`Run::queued_parts`]).
                for part in self.tasks[index].parts.iter_mut().filter(|part| part.status == TaskStatus::Running) {
                    part.status = TaskStatus::Queued;
                    part.lease_until = None;
                    part.queued_at = Some(now);
                }
            } else if self.tasks[index].status == TaskStatus::Running {
                self.set_status(index, TaskStatus::Queued, now);
                let task = &mut self.tasks[index];
                task.lease_until = None;
                task.queued_at = Some(now);
            }
        }
        let mut queued = self.settle(now);
        queued.extend(self.task_indexes().filter(|index| self.tasks[*index].status == TaskStatus::Queued));
        queued.sort_unstable();
        queued.dedup();
        queued
    }

    /// The sweeper's repair of a running run at `now`: tasks queued before
    /// `queued_before` are stamped as queued again now and returned (their messages may
    /// have been lost: send them again; a copy of one still queued is refused by the
    /// claim), and running tasks whose claim ran out before `claim_before` are failed
    /// (their worker stopped and no message of theirs is left to run them again).
    pub fn sweep(&mut self, now: Timestamp, queued_before: Timestamp, claim_before: Timestamp) -> Swept {
        let mut swept = Swept::default();
        if self.status != RunStatus::Running {
            return swept;
        }
        for index in self.task_indexes() {
            let task = &self.tasks[index];
            match task.status {
                TaskStatus::Queued if task.queued_at.is_none_or(|at| at < queued_before) => {
                    self.tasks[index].queued_at = Some(now);
                    swept.resend.push(index);
                }
                TaskStatus::Running if task.lease_until.is_some_and(|until| until < claim_before) => {
                    self.set_status(index, TaskStatus::Failed, now);
                    let task = &mut self.tasks[index];
                    task.error = Some(
                        "the task's worker stopped and the task was not run again; resume the run to try again".into(),
                    );
                    task.lease_until = None;
                    // Owed, not given back here: a sweep may fail many tasks at once.
                    self.owe_refund(index);
                    swept.failed += 1;
                }
                TaskStatus::Running if self.in_parts(index) => {
                    let (resend, failed) = self.sweep_parts(index, now, queued_before, claim_before);
                    swept.resend_parts.extend(resend.into_iter().map(|number| (index, number)));
                    swept.failed += usize::from(failed);
                }
                _ => {}
            }
        }
        if swept.failed > 0 || !swept.resend.is_empty() || !swept.resend_parts.is_empty() {
            self.touch(now);
            swept.resend.extend(self.settle(now));
        }
        swept
    }

    /// Cancels a running run: unfinished tasks stop, nothing downstream starts.
    pub fn cancel(&mut self, now: Timestamp) -> Result<Cancelled, WrongStatus> {
        match self.status {
            RunStatus::Cancelled => return Ok(Cancelled { tasks_cancelled: 0, nodes_reset: 0 }),
            RunStatus::Running => {}
            finished => {
                return Err(WrongStatus(format!(
                    "run {} is already {} and cannot be cancelled",
                    self.id,
                    finished.as_str()
                )))
            }
        }
        let before = self.node_statuses();
        let mut tasks_cancelled = 0;
        for index in self.task_indexes() {
            let status = self.tasks[index].status;
            if status.is_active() {
                tasks_cancelled += 1;
            }
            if !status.is_final() {
                self.set_status(index, TaskStatus::Cancelled, now);
                self.tasks[index].lease_until = None;
                // Nothing was delivered: what its attempt took is owed back (a resume
                // charges the next attempt), paid in batches after this change.
                self.owe_refund(index);
            }
        }
        self.refresh_needs_credits();
        let after = self.node_statuses();
        let nodes_reset = before
            .iter()
            .zip(&after)
            .filter(|(was, is)| **was != NodeStatus::Cancelled && **is == NodeStatus::Cancelled)
            .count();
        self.status = RunStatus::Cancelled;
        self.status_message = Some("Cancelled by the caller".into());
        self.finished_at = Some(now);
        self.touch(now);
        Ok(Cancelled { tasks_cancelled, nodes_reset })
    }

    /// Resumes a failed or cancelled run (or a partially complete one that ended for
    /// credits): nodes that are not started, blocked, cancelled or failed are reset (their completed tasks are kept) and queued as their inputs
    /// allow. Returns the counts and the tasks to send.
    pub fn resume(&mut self, now: Timestamp) -> Result<(Resumed, Vec<TaskIndex>), WrongStatus> {
        // A run that ended `partial_complete` for credits is resumed like a failed one:
        // its blocked nodes are what the credit-blocked flow resumes.
        let for_credits = self.status == RunStatus::PartialComplete && self.needs_credits;
        if !matches!(self.status, RunStatus::Failed | RunStatus::Cancelled) && !for_credits {
            return Err(WrongStatus(format!(
                "only a failed or cancelled run (or one that ended waiting for credits) can be resumed; run {} is {}",
                self.id,
                self.status.as_str()
            )));
        }
        let work: Vec<NodeIndex> = self.work_nodes().collect();
        let statuses = self.node_statuses();
        let requeued: Vec<NodeIndex> = work
            .iter()
            .copied()
            .filter(|index| {
                matches!(
                    statuses[index.0],
                    NodeStatus::NotStarted | NodeStatus::Blocked | NodeStatus::Cancelled | NodeStatus::Failed
                )
            })
            .collect();
        let (mut detached, mut active_total) = (0, 0);
        for index in self.task_indexes() {
            let task = &self.tasks[index];
            if task.status == TaskStatus::Completed || !task.nodes.iter().any(|node| requeued.contains(node)) {
                continue;
            }
            if task.status.is_active() {
                active_total += 1;
            }
            self.set_status(index, TaskStatus::Waiting, now);
            let task = &mut self.tasks[index];
            if task.sent {
                detached += 1;
                task.detached_attempts += 1;
            }
            task.sent = false;
            task.attempt += 1;
            task.claims = 0;
            task.error = None;
            task.error_node = None;
            task.result = None;
            task.lease_until = None;
            task.charged = None;
            task.credits = None;
            // A new attempt: its times start over.
            (task.started_at, task.finished_at) = (None, None);
        }
        self.refresh_needs_credits();
        self.status = RunStatus::Running;
        self.status_message = None;
        self.finished_at = None;
        self.agent_state_id = AgentStateId::new_v4();
        self.touch(now);
        let queued = self.settle(now);
        let nodes_queued =
            requeued.iter().filter(|node| queued.iter().any(|task| self.tasks[*task].nodes.contains(node))).count();
        self.resumes.push(Resume { at: now, agent_state_id: self.agent_state_id, nodes_queued });
        let resumed = Resumed {
            agent_state_id: self.agent_state_id,
            nodes_queued,
            nodes_considered: work.len(),
            requeued_nodes: requeued.len(),
            requeued_node_tasks_detached: detached,
            // Every task of a failed or cancelled run is final: none is left to stop.
            requeued_node_active_tasks_cancelled: active_total,
            requeued_node_active_tasks_total: active_total,
        };
        Ok((resumed, queued))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{json, Map};

    use super::*;
    use crate::domain::ids::AgentId;
    use crate::domain::ids::AgentNodeId;
    use crate::domain::ids::NodeTypeId;
    use crate::domain::ids::OrganizationId;
    use crate::domain::ids::RunId;
    use crate::domain::nodes::{CLIP, CONCATENATE, DESTINATION, SPEED, VIDEO_INPUT};
    use crate::domain::runs::plan::plan_tasks;
    use crate::domain::runs::{BoundInput, InputSource, MediaFile, NodeStatusCounts, RuntimeNode};

    /// A run of `nodes` (type, upstream positions) with `items` URL inputs on node 0,
    /// planned and settled as a start would.
    pub(crate) fn run_of(nodes: &[(NodeTypeId, &[usize])], items: usize) -> Run {
        let ids: Vec<AgentNodeId> = nodes.iter().map(|_| AgentNodeId::new_v4()).collect();
        let params = |kind: NodeTypeId| -> Map<String, serde_json::Value> {
            let params = if kind == CLIP { json!({ "start_ms": 0, "end_ms": 500 }) } else { json!({}) };
            params.as_object().cloned().unwrap_or_default()
        };
        let nodes: Vec<RuntimeNode> = nodes
            .iter()
            .enumerate()
            .map(|(at, (kind, upstream))| {
                RuntimeNode::new(ids[at], ids[at], *kind, params(*kind), upstream.iter().map(|up| ids[*up]).collect())
            })
            .collect();
        let inputs: Vec<BoundInput> = (0..items)
            .map(|item| BoundInput {
                node: ids[0],
                source: InputSource::Url { url: format!("https://example.com/{item}.mp4") },
                clip_start_ms: None,
                clip_end_ms: None,
                clipped: None,
            })
            .collect();
        let now = Timestamp::now();
        let mut run = Run {
            id: RunId::new_v4(),
            organization_id: OrganizationId::new_v4(),
            agent_id: AgentId::new_v4(),
            status: RunStatus::Running,
            status_message: None,
            needs_credits: false,
            started_at: now,
            updated_at: now,
            finished_at: None,
            triggered_by: None,
            callback_url: None,
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
        run.tasks = plan_tasks(&run.nodes, &run.inputs, |index| outputs[index.0]).unwrap().into();
        run.recount();
        run.settle(now);
        run
    }

    fn file() -> MediaFile {
        MediaFile {
            key: "k".into(),
            version: None,
            duration_ms: 500,
            width: 320,
            height: 240,
            has_audio: true,
            media: Default::default(),
            generated: None,
        }
    }

    /// Claims and ends task `index`: completed (with an output when it delivers one) or failed.
    pub(in crate::domain::runs) fn end(run: &mut Run, index: TaskIndex, completed: bool) -> Vec<TaskIndex> {
        let now = Timestamp::now();
        assert_eq!(run.claim(index, run.tasks[index].attempt, now, Duration::from_secs(60)), Claim::Claimed);
        let attempt = run.tasks[index].attempt;
        let queued = if completed {
            let delivered = Delivered {
                video: MediaId::new_v4(),
                thumbnail: None,
                timeline: None,
                placements: Vec::new(),
                input_copy: None,
            };
            run.complete(index, attempt, file(), Some(delivered), now).unwrap()
        } else {
            run.fail(index, attempt, "broken".into(), (None, Fault::Ours), now).unwrap()
        };
        assert_eq!(run.counts, run.recounted(), "the counts follow every status change");
        let mut whole = run.clone();
        assert_eq!(whole.settle(now), Vec::<TaskIndex>::new(), "what the result decided was all settled");
        assert_eq!(whole.tasks, run.tasks);
        queued
    }

    #[test]
    fn a_node_nothing_reaches_is_not_started_and_not_counted_completed() {
        // Input → Clip → Destination, and a Speed node connected to nothing.
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (CLIP, &[0]), (DESTINATION, &[1]), (SPEED, &[])], 1);
        assert_eq!(run.node_status(NodeIndex(3)), NodeStatus::NotStarted);
        let queued = end(&mut run, TaskIndex(0), true);
        end(&mut run, queued[0], true);
        assert_eq!(run.status, RunStatus::Completed);
        assert_eq!(run.node_statuses()[3], NodeStatus::NotStarted);
        assert_eq!(run.node_status_counts(), NodeStatusCounts { completed: 3, in_progress: 0, failed: 0 });
    }

    /// Resume re-queues only `not_started`, `blocked`, `cancelled` and `failed` nodes
    /// (the contract): a `partial_complete` node keeps its completed and its failed tasks,
    /// and the tasks downstream of its failed items stay failed.
    #[test]
    fn resume_leaves_a_partially_complete_node_as_it_is() {
        // Input (two items) → Clip → Speed → Destination; tasks: 2 inputs, 2 clip chains
        // (Clip, Speed and Destination joined into one task per item).
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (CLIP, &[0]), (SPEED, &[1]), (DESTINATION, &[2])], 2);
        let inputs: Vec<TaskIndex> =
            run.task_indexes().filter(|index| run.tasks[*index].nodes == [NodeIndex(0)]).collect();
        assert_eq!(inputs.len(), 2);
        end(&mut run, inputs[0], true);
        end(&mut run, inputs[1], false);
        let chains: Vec<TaskIndex> =
            run.task_indexes().filter(|index| run.tasks[*index].status == TaskStatus::Queued).collect();
        assert_eq!(chains.len(), 1, "the item that was read goes on");
        end(&mut run, chains[0], false);
        assert_eq!(run.status, RunStatus::Failed);
        let statuses = run.node_statuses();
        assert_eq!(statuses[0], NodeStatus::PartialComplete, "one input read, one failed");
        assert_eq!(statuses[1], NodeStatus::Failed);

        let (resumed, queued) = run.resume(Timestamp::now()).unwrap();
        assert_eq!(resumed.requeued_nodes, 3, "Clip, Speed and Destination; not the partially complete input");
        assert_eq!(queued, chains, "only the item whose input was read runs again");
        assert_eq!(resumed.nodes_queued, 3);
        assert_eq!(run.tasks[inputs[0]].status, TaskStatus::Completed, "completed work is kept");
        assert_eq!(run.tasks[inputs[1]].status, TaskStatus::Failed, "the partial node's failed item stays failed");
        let skipped = run
            .task_indexes()
            .find(|index| run.tasks[*index].source == TaskSource::Tasks { tasks: vec![inputs[1]] })
            .unwrap();
        assert_eq!(run.tasks[skipped].status, TaskStatus::Failed, "and so does the work that waits on it");
        end(&mut run, chains[0], true);
        assert_eq!(run.status, RunStatus::PartialComplete);
        assert_eq!(run.node_status_counts(), NodeStatusCounts { completed: 4, in_progress: 0, failed: 0 });
    }

    /// A failure reaches everything downstream of it, however deep, the way a whole
    /// settle would (the `end` helper checks that): two Speed branches and the
    /// Concatenate that joins them are skipped when the input that feeds them fails,
    /// while the other item goes on.
    #[test]
    fn a_failed_input_skips_every_task_downstream_of_it() {
        // Input → Clip → two Speed nodes → Concatenate → Destination, on two items.
        let nodes: &[(NodeTypeId, &[usize])] = &[
            (VIDEO_INPUT, &[]),
            (CLIP, &[0]),
            (SPEED, &[1]),
            (SPEED, &[1]),
            (CONCATENATE, &[2, 3]),
            (DESTINATION, &[4]),
        ];
        let mut run = run_of(nodes, 2);
        let dependents = run.dependents();
        assert!(!dependents[0].is_empty() && dependents.iter().flatten().all(|d| d.0 < run.tasks.len()));
        end(&mut run, TaskIndex(0), false);
        let skipped: Vec<TaskIndex> = run
            .task_indexes()
            .filter(|index| run.tasks[*index].status == TaskStatus::Failed && run.tasks[*index].error.is_none())
            .collect();
        assert!(skipped.len() >= 4, "the first item's Clip and Speed tasks, and the Concatenate: {skipped:?}");
        assert_eq!(run.status, RunStatus::Running, "the second item goes on");
    }

    /// Claims, releases, recovery, unqueued sends, cancel, resume and sweeps each move
    /// the counts exactly as a recount of the tasks would.
    #[test]
    fn the_counts_follow_every_change_of_a_run() {
        let check = |run: &Run, after: &str| assert_eq!(run.counts, run.recounted(), "after {after}");
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (CLIP, &[0]), (SPEED, &[1]), (DESTINATION, &[2])], 3);
        check(&run, "planning");
        assert_eq!(run.counts.of(TaskStatus::Queued), 3, "the three inputs");
        let (now, lease) = (Timestamp::now(), Duration::from_secs(60));
        assert_eq!(run.claim(TaskIndex(0), 0, now, lease), Claim::Claimed);
        check(&run, "a claim");
        assert!(run.release(TaskIndex(0), 0, now));
        check(&run, "a release");
        assert_eq!(run.claim(TaskIndex(0), 0, now, lease), Claim::Claimed);
        assert!(!run.recover(now).is_empty());
        check(&run, "a recovery");
        let chains = end(&mut run, TaskIndex(0), true);
        end(&mut run, TaskIndex(1), false);
        assert!(run.unqueued(&chains, "the queue was down", now));
        check(&run, "an unqueued send");
        let later = now.after(Duration::from_secs(600));
        run.sweep(later, later, later);
        check(&run, "a sweep");
        run.cancel(later).unwrap();
        check(&run, "a cancel");
        assert_eq!(run.counts.unfinished(), 0);
        run.resume(later).unwrap();
        check(&run, "a resume");
        assert!(run.counts.unfinished() > 0);
    }

    /// The sweeper's repair: a task queued long ago is sent again (and stamped, so the
    /// next sweep leaves it), a claim that ran out long ago fails its task.
    #[test]
    fn a_sweep_sends_old_queued_tasks_again_and_fails_claims_lost_long_ago() {
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (DESTINATION, &[0])], 2);
        let start = run.tasks[0].queued_at.unwrap();
        let later = start.after(Duration::from_secs(600));
        assert_eq!(run.sweep(start, start, start), Swept::default(), "nothing is old yet");
        let swept = run.sweep(later, later, later);
        assert_eq!(swept, Swept { resend: vec![TaskIndex(0), TaskIndex(1)], failed: 0, resend_parts: Vec::new() });
        assert_eq!(run.sweep(later, later, later), Swept::default(), "stamped: sent again once per period");
        assert_eq!(run.claim(TaskIndex(0), 0, later, Duration::from_secs(60)), Claim::Claimed);
        let much_later = later.after(Duration::from_secs(3600));
        let swept = run.sweep(much_later, later, much_later);
        assert_eq!(swept, Swept { resend: Vec::new(), failed: 1, resend_parts: Vec::new() });
        assert_eq!(run.tasks[0].status, TaskStatus::Failed);
        assert!(run.tasks[0].error.as_deref().unwrap().contains("worker stopped"));
    }

    #[test]
    fn a_task_error_is_kept_to_its_bound() {
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (DESTINATION, &[0])], 1);
        let now = Timestamp::now();
        assert_eq!(run.claim(TaskIndex(0), 0, now, Duration::from_secs(60)), Claim::Claimed);
        run.fail(TaskIndex(0), 0, "é".repeat(5_000), (None, Fault::Ours), now).unwrap();
        let error = run.tasks[0].error.as_deref().unwrap();
        assert!(error.len() <= MAX_ERROR_BYTES && error.len() > MAX_ERROR_BYTES - 8, "{}", error.len());
        assert!(error.ends_with('…') && error.starts_with("éé"));
        assert_eq!(capped("short".into()), "short");
    }
}
