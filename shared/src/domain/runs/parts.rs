//! Tasks rendered in parts (ARCHITECTURE "Long outputs in parts"). An edit task whose
//! output is longer than a segment is claimed and charged as any task; its worker then
//! plans the parts ([`Run::split`]): the pictures of its segments and its sound, each
//! queued as a message of its own. While they are made the task stays running without a
//! claim of its own; each part is claimed, leased, retried and recorded on its own
//! ([`Run::claim_part`], [`Run::complete_part`], [`Run::fail_part`]), so a part delivered
//! twice is made once. The last part made queues the task again, and its next claim joins
//! the parts. A part that fails fails its task; a cancel stops the parts with the run; a
//! resume keeps the parts made and queues the others.

use std::time::Duration;

use super::engine::Claim;
use super::{Fault, NodeIndex, Part, Run, RunStatus, TaskIndex, TaskStatus, MAX_CLAIMS};
use crate::domain::media::RenderPart;
use crate::domain::time::Timestamp;
use crate::domain::work::{NodeTask, Work};

/// Where the files of parts are stored until their task's join deletes them (the
/// bucket's lifecycle rule `expire-deleted-parts` removes the versions a deletion hides).
pub const PARTS_PREFIX: &str = "parts/";

impl Run {
    /// Whether task `index` is making its parts: running, with parts, and no claim of
    /// its own (its parts hold theirs).
    pub fn in_parts(&self, index: TaskIndex) -> bool {
        self.tasks.get(index.0).is_some_and(|task| {
            task.status == TaskStatus::Running && task.lease_until.is_none() && !task.parts.is_empty()
        })
    }

    /// The message that asks for part `number` of the current attempt of task `index`.
    pub fn part_message(&self, index: TaskIndex, number: u32) -> Work {
        Work::NodeTask(NodeTask {
            organization_id: self.organization_id,
            run_id: self.id,
            task: index,
            attempt: self.tasks[index].attempt,
            part: Some(number),
        })
    }

    /// Plans the parts of attempt `attempt` of task `index` (claimed: running), releasing
    /// its claim. Parts an earlier attempt made of the same windows are kept (a resume
    /// queues only the others). Returns the messages to send: the parts queued, or the
    /// task's own when every part is made already (it joins them). None (nothing changed)
    /// when the attempt is no longer running.
    pub fn split(&mut self, index: TaskIndex, attempt: u32, parts: &[RenderPart], now: Timestamp) -> Option<Vec<Work>> {
        if !self.still_running(index, attempt) || parts.is_empty() {
            return None;
        }
        let task = &mut self.tasks[index];
        if !task.parts.iter().map(|part| part.part).eq(parts.iter().copied()) {
            task.parts = parts
                .iter()
                .map(|part| Part {
                    part: *part,
                    status: TaskStatus::Queued,
                    claims: 0,
                    lease_until: None,
                    queued_at: None,
                    key: None,
                })
                .collect();
        }
        let mut queued = Vec::new();
        for (number, part) in task.parts.iter_mut().enumerate() {
            if part.status != TaskStatus::Completed {
                part.status = TaskStatus::Queued;
                part.claims = 0;
                part.lease_until = None;
                part.key = None;
                part.queued_at = Some(now);
                queued.push(number as u32);
            }
        }
        task.lease_until = None;
        // The parts' claims are counted on them; the join's claim starts afresh.
        task.claims = 0;
        self.touch(now);
        if queued.is_empty() {
            self.queue_join(index, now);
            return Some(vec![self.message(index)]);
        }
        Some(queued.into_iter().map(|number| self.part_message(index, number)).collect())
    }

    /// A worker's claim on part `number` of attempt `attempt` of task `index`, held until
    /// `now + lease`; a part whose workers stopped [`MAX_CLAIMS`] times fails its task.
    pub fn claim_part(
        &mut self,
        index: TaskIndex,
        attempt: u32,
        number: u32,
        now: Timestamp,
        lease: Duration,
    ) -> Claim {
        if self.status != RunStatus::Running {
            return Claim::Refused(format!("the run is {}", self.status.as_str()));
        }
        let Some(task) = self.tasks.get(index.0) else { return Claim::Refused("no such task".into()) };
        if task.attempt != attempt {
            return Claim::Refused(format!("attempt {attempt} was replaced by attempt {}", task.attempt));
        }
        if !self.in_parts(index) {
            return Claim::Refused("the task is not making parts".into());
        }
        let count = task.parts.len();
        let Some(part) = task.parts.get(number as usize) else { return Claim::Refused("no such part".into()) };
        match (part.status, part.lease_until) {
            (TaskStatus::Running, Some(until)) if until >= now => return Claim::Held(until),
            (TaskStatus::Queued | TaskStatus::Running, _) => {}
            (other, _) => return Claim::Refused(format!("the part is {other:?}").to_lowercase()),
        }
        if part.claims >= MAX_CLAIMS {
            let message = format!(
                "{} was started {MAX_CLAIMS} times and its worker stopped each time",
                part_name(part.part, number, count)
            );
            self.tasks[index].parts[number as usize].status = TaskStatus::Failed;
            self.fail(index, attempt, message, (None, Fault::Ours), now);
            return Claim::GaveUp;
        }
        let task = &mut self.tasks[index];
        task.started_at = task.started_at.or(Some(now));
        let part = &mut task.parts[number as usize];
        part.status = TaskStatus::Running;
        part.claims += 1;
        part.lease_until = Some(now.after(lease));
        self.touch(now);
        Claim::Claimed
    }

    /// Whether part `number` of attempt `attempt` of task `index` is still running (its
    /// worker should go on).
    pub fn part_running(&self, index: TaskIndex, attempt: u32, number: u32) -> bool {
        self.status == RunStatus::Running
            && self.in_parts(index)
            && self.tasks[index].attempt == attempt
            && self.tasks[index].parts.get(number as usize).is_some_and(|part| part.status == TaskStatus::Running)
    }

    /// Records the file part `number` made; None (nothing changed) when the part is no
    /// longer running (a duplicate, or its run cancelled or resumed). The last part made
    /// queues its task to join them: its message is returned.
    pub fn complete_part(
        &mut self,
        index: TaskIndex,
        attempt: u32,
        number: u32,
        key: String,
        now: Timestamp,
    ) -> Option<Vec<Work>> {
        if !self.part_running(index, attempt, number) {
            return None;
        }
        let task = &mut self.tasks[index];
        let part = &mut task.parts[number as usize];
        part.status = TaskStatus::Completed;
        part.lease_until = None;
        part.key = Some(key);
        let all_made = task.parts.iter().all(|part| part.status == TaskStatus::Completed);
        self.touch(now);
        if !all_made {
            return Some(Vec::new());
        }
        self.queue_join(index, now);
        Some(vec![self.message(index)])
    }

    /// Records that part `number` failed: its task fails with the reason, naming the part
    /// (see [`Run::fail`]). None when the part is no longer running.
    pub fn fail_part(
        &mut self,
        index: TaskIndex,
        attempt: u32,
        number: u32,
        message: &str,
        (node, fault): (Option<NodeIndex>, Fault),
        now: Timestamp,
    ) -> Option<Vec<TaskIndex>> {
        if !self.part_running(index, attempt, number) {
            return None;
        }
        let count = self.tasks[index].parts.len();
        let part = &mut self.tasks[index].parts[number as usize];
        part.status = TaskStatus::Failed;
        part.lease_until = None;
        let message = format!("{}: {message}", part_name(part.part, number, count));
        self.fail(index, attempt, message, (node, fault), now)
    }

    /// The sweeper's repair of the parts of task `index` (making them): parts queued
    /// before `queued_before` are stamped queued now and returned (send them again), and
    /// a part whose claim ran out before `claim_before` fails its task. Returns the parts
    /// to send and whether the task failed.
    pub(super) fn sweep_parts(
        &mut self,
        index: TaskIndex,
        now: Timestamp,
        queued_before: Timestamp,
        claim_before: Timestamp,
    ) -> (Vec<u32>, bool) {
        let mut resend = Vec::new();
        let count = self.tasks[index].parts.len();
        for number in 0..count {
            let part = &self.tasks[index].parts[number];
            match part.status {
                TaskStatus::Queued if part.queued_at.is_none_or(|at| at < queued_before) => {
                    self.tasks[index].parts[number].queued_at = Some(now);
                    resend.push(number as u32);
                }
                TaskStatus::Running if part.lease_until.is_some_and(|until| until < claim_before) => {
                    let name = part_name(part.part, number as u32, count);
                    self.set_status(index, TaskStatus::Failed, now);
                    let task = &mut self.tasks[index];
                    task.parts[number].status = TaskStatus::Failed;
                    task.parts[number].lease_until = None;
                    task.error = Some(format!(
                        "{name}: its worker stopped and it was not made again; resume the run to try again"
                    ));
                    // Owed, not given back here: a sweep may fail many tasks at once.
                    self.owe_refund(index);
                    return (Vec::new(), true);
                }
                _ => {}
            }
        }
        (resend, false)
    }

    /// Progress of node `index`'s tasks made in parts: parts made, of how many; None
    /// when none of its tasks is.
    pub fn progress(&self, index: NodeIndex) -> Option<(usize, usize)> {
        parts_made(self.tasks_of(index).map(|(_, task)| task))
    }

    /// The messages of every queued part of the tasks making their parts: what a
    /// restarted process sends again after [`Run::recover`].
    pub fn queued_parts(&self) -> Vec<Work> {
        self.task_indexes().flat_map(|index| self.queued_parts_of(index, self.tasks[index].attempt)).collect()
    }

    /// The messages of the queued parts of attempt `attempt` of task `index`, while it
    /// makes them: what a delivery of the task's own message sends again, in case the
    /// worker that split it stopped (or its queue failed) between recording the parts
    /// and sending them. A part sent twice is made once: its claim holds or refuses the
    /// copy.
    pub fn queued_parts_of(&self, index: TaskIndex, attempt: u32) -> Vec<Work> {
        if !self.in_parts(index) || self.tasks[index].attempt != attempt {
            return Vec::new();
        }
        let parts = self.tasks[index].parts.iter().enumerate();
        parts
            .filter(|(_, part)| part.status == TaskStatus::Queued)
            .map(|(number, _)| self.part_message(index, number as u32))
            .collect()
    }

    /// Progress of every task made in parts: parts made, of how many; None when none is.
    pub fn parts_progress(&self) -> Option<(usize, usize)> {
        parts_made(self.tasks.iter())
    }

    /// Queues task `index` again, to join its parts.
    fn queue_join(&mut self, index: TaskIndex, now: Timestamp) {
        self.set_status(index, TaskStatus::Queued, now);
        let task = &mut self.tasks[index];
        task.lease_until = None;
        task.queued_at = Some(now);
        task.sent = true;
    }
}

/// Parts made, of how many, over the tasks made in parts among `tasks`; None when none is.
fn parts_made<'a>(tasks: impl Iterator<Item = &'a super::Task>) -> Option<(usize, usize)> {
    let mut progress = None;
    for task in tasks.filter(|task| !task.parts.is_empty()) {
        let (done, total) = progress.get_or_insert((0, 0));
        *done += task.parts.iter().filter(|part| part.status == TaskStatus::Completed).count();
        *total += task.parts.len();
    }
    progress
}

/// A part as messages name it: `segment 3 of 12`, or `the sound`.
pub fn part_name(part: RenderPart, number: u32, count: usize) -> String {
    match part {
        RenderPart::Sound => "the sound".to_owned(),
        // The sound, when there is one, is the last part.
        _ => format!("segment {} of {}", number + 1, count),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::nodes::{CLIP, DESTINATION, VIDEO_INPUT};
    use crate::domain::runs::engine::tests::{end, run_of};
    use crate::domain::runs::NodeStatus;

    const LEASE: Duration = Duration::from_secs(60);

    fn windows() -> Vec<RenderPart> {
        vec![
            RenderPart::Picture { start_ms: 0, end_ms: 3000 },
            RenderPart::Picture { start_ms: 3000, end_ms: 5000 },
            RenderPart::Sound,
        ]
    }

    /// Input → Clip → Destination, its input done and its edit claimed and split.
    fn split_run() -> (Run, TaskIndex, Timestamp) {
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (CLIP, &[0]), (DESTINATION, &[1])], 1);
        let edit = end(&mut run, TaskIndex(0), true)[0];
        let now = Timestamp::now();
        assert_eq!(run.claim(edit, 0, now, LEASE), Claim::Claimed);
        let sent = run.split(edit, 0, &windows(), now).unwrap();
        assert_eq!(sent, (0..3).map(|number| run.part_message(edit, number)).collect::<Vec<_>>());
        (run, edit, now)
    }

    #[test]
    fn parts_are_claimed_once_and_the_last_one_queues_the_join() {
        let (mut run, edit, now) = split_run();
        assert_eq!(run.node_status(NodeIndex(1)), NodeStatus::Running);
        assert_eq!(run.progress(NodeIndex(1)), Some((0, 3)));
        // The task's own message is refused while its parts are made.
        assert!(matches!(run.claim(edit, 0, now, LEASE), Claim::Refused(_)));
        for number in 0..3 {
            assert_eq!(run.claim_part(edit, 0, number, now, LEASE), Claim::Claimed);
            assert!(matches!(run.claim_part(edit, 0, number, now, LEASE), Claim::Held(_)), "a duplicate waits");
        }
        assert_eq!(run.complete_part(edit, 0, 0, "a".into(), now), Some(Vec::new()));
        assert_eq!(run.complete_part(edit, 0, 0, "again".into(), now), None, "recorded once");
        assert_eq!(run.complete_part(edit, 0, 2, "s".into(), now), Some(Vec::new()));
        assert_eq!(run.progress(NodeIndex(1)), Some((2, 3)));
        assert_eq!(run.complete_part(edit, 0, 1, "b".into(), now), Some(vec![run.message(edit)]));
        assert_eq!(run.tasks[edit].status, TaskStatus::Queued);
        assert!(matches!(run.claim_part(edit, 0, 1, now, LEASE), Claim::Refused(_)));
        assert_eq!(run.claim(edit, 0, now, LEASE), Claim::Claimed, "the join");
        assert_eq!(run.counts, run.recounted());
    }

    #[test]
    fn a_task_made_in_parts_is_timed_from_its_first_claim_to_its_join_and_a_resume_starts_over() {
        let (mut run, edit, start) = split_run();
        let at = |seconds| start.after(Duration::from_secs(seconds));
        assert_eq!(run.tasks[edit].started_at, Some(start), "the claim that split it");
        for number in 0..3 {
            assert_eq!(run.claim_part(edit, 0, number, at(1), LEASE), Claim::Claimed);
            run.complete_part(edit, 0, number, format!("p{number}"), at(10)).unwrap();
        }
        assert_eq!(run.tasks[edit].status, TaskStatus::Queued, "the join is queued");
        assert_eq!(run.tasks[edit].started_at, Some(start), "the parts' time stays the task's");
        assert_eq!(run.claim(edit, 0, at(11), LEASE), Claim::Claimed, "the join");
        assert_eq!((run.tasks[edit].started_at, run.tasks[edit].finished_at), (Some(start), None));
        run.cancel(at(12)).unwrap();
        assert_eq!(run.tasks[edit].finished_at, Some(at(12)));
        let view = run.nodes_view(&crate::domain::media::MediaLinks::new(b"secret", "http://test"), at(12));
        assert_eq!((view.nodes[1].started_at, view.nodes[1].finished_at), (Some(start), Some(at(12))));
        // A resume's new attempt has no times until a worker takes it.
        run.resume(at(13)).unwrap();
        assert_eq!((run.tasks[edit].started_at, run.tasks[edit].finished_at), (None, None));
        assert_eq!(run.claim(edit, 1, at(14), LEASE), Claim::Claimed);
        assert_eq!(run.tasks[edit].started_at, Some(at(14)));
    }

    #[test]
    fn a_failed_part_fails_its_task_naming_the_part() {
        let (mut run, edit, now) = split_run();
        assert_eq!(run.claim_part(edit, 0, 1, now, LEASE), Claim::Claimed);
        run.fail_part(edit, 0, 1, "the encoder stopped", (None, Fault::Ours), now).unwrap();
        assert_eq!(run.tasks[edit].status, TaskStatus::Failed);
        assert_eq!(run.tasks[edit].error.as_deref(), Some("segment 2 of 3: the encoder stopped"));
        assert_eq!(run.status, RunStatus::Failed, "nothing else was left");
        assert!(matches!(run.claim_part(edit, 0, 0, now, LEASE), Claim::Refused(_)), "the other parts stop");
    }

    #[test]
    fn a_part_whose_workers_stop_gives_up_and_a_sweep_resends_lost_parts() {
        let (mut run, edit, now) = split_run();
        let mut at = now;
        for _ in 0..MAX_CLAIMS {
            assert_eq!(run.claim_part(edit, 0, 2, at, LEASE), Claim::Claimed);
            at = at.after(LEASE * 2);
        }
        assert_eq!(run.claim_part(edit, 0, 2, at, LEASE), Claim::GaveUp);
        assert_eq!(
            run.tasks[edit].error.as_deref(),
            Some("the sound was started 3 times and its worker stopped each time")
        );

        let (mut run, edit, now) = split_run();
        let later = now.after(Duration::from_secs(600));
        let swept = run.sweep(later, now.after(Duration::from_secs(1)), now);
        assert_eq!(swept.resend_parts, vec![(edit, 0), (edit, 1), (edit, 2)]);
        assert_eq!(run.claim_part(edit, 0, 0, later, LEASE), Claim::Claimed);
        let swept = run.sweep(later.after(LEASE * 3), later, later.after(LEASE * 2));
        assert_eq!(swept.failed, 1, "a part's claim ran out long ago: {swept:?}");
        assert_eq!(run.tasks[edit].status, TaskStatus::Failed);
    }

    #[test]
    fn a_resume_keeps_the_parts_made_and_queues_the_others() {
        let (mut run, edit, now) = split_run();
        assert_eq!(run.claim_part(edit, 0, 0, now, LEASE), Claim::Claimed);
        run.complete_part(edit, 0, 0, "a".into(), now).unwrap();
        run.cancel(now).unwrap();
        let (_, queued) = run.resume(now).unwrap();
        assert_eq!(queued, vec![edit]);
        assert_eq!(run.claim(edit, 1, now, LEASE), Claim::Claimed);
        let sent = run.split(edit, 1, &windows(), now).unwrap();
        assert_eq!(sent, vec![run.part_message(edit, 1), run.part_message(edit, 2)]);
        assert_eq!(run.tasks[edit].parts[0].key.as_deref(), Some("a"));
        assert!(matches!(run.claim_part(edit, 0, 1, now, LEASE), Claim::Refused(_)), "an old attempt's part");
    }

    #[test]
    fn a_restart_queues_again_the_parts_it_was_making_and_keeps_the_task_making_them() {
        let (mut run, edit, now) = split_run();
        assert_eq!(run.claim_part(edit, 0, 0, now, LEASE), Claim::Claimed);
        assert_eq!(run.claim_part(edit, 0, 1, now, LEASE), Claim::Claimed);
        run.complete_part(edit, 0, 1, "b".into(), now).unwrap();
        assert_eq!(run.recover(now), Vec::<TaskIndex>::new());
        assert!(run.in_parts(edit));
        assert_eq!(run.queued_parts(), vec![run.part_message(edit, 0), run.part_message(edit, 2)]);
        // A delivery of the task's own message sends the same; one of another attempt, none.
        assert_eq!(run.queued_parts_of(edit, 0), run.queued_parts());
        assert_eq!(run.queued_parts_of(edit, 1), Vec::new());
    }
}
