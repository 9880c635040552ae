//! What a run's tasks cost and the credit movements their changes ask for (ARCHITECTURE
//! §6): a task's price is the sum of its chain's nodes' catalog prices, taken when the
//! task is claimed (per-output-second prices reserved from the requested or known
//! duration), settled on the output's real duration, and given back when the task fails
//! for a reason of ours. A task the balance does not cover is blocked for credits.

use super::{CreditBlock, NodeIndex, Run, RunStatus, TaskIndex, TaskSource, TaskStatus};
use crate::domain::credits::{Cover, CreditMove, LedgerLine, Reason};
use crate::domain::media::MediaType;
use crate::domain::nodes::ItemFlow;
use crate::domain::time::Timestamp;

/// Which prices tasks pay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Prices {
    /// The catalog's `credit_cost`.
    #[default]
    Catalog,
    /// Nothing (a deployment that charges nothing; the benchmarks' floor).
    Free,
}

/// Most refunds one change gives back ([`Run::pay_refunds`]): with the head, the chunks
/// of their tasks, the account and their entries, a batch is a fraction of a DynamoDB
/// transaction (see [`super::service::MAX_CREDIT_MOVES`]).
pub const REFUND_BATCH: usize = 16;

/// A price as a count of credits that a movement may carry.
fn credits(price: u64) -> i64 {
    i64::try_from(price).unwrap_or(i64::MAX)
}

impl Run {
    /// The price of each node of task `index`'s chain for an output of `seconds`, or
    /// (None) the reserve before it runs: from the requested duration of a generation,
    /// or the duration of the task's video sources (their sum for Concatenate).
    pub fn task_prices(&self, index: TaskIndex, seconds: Option<f64>, prices: Prices) -> Vec<u64> {
        let task = &self.tasks[index];
        let seconds = seconds.unwrap_or_else(|| self.expected_seconds(index));
        task.nodes
            .iter()
            .map(|node| match (prices, self.nodes[*node].node_type()) {
                (Prices::Catalog, Some(node_type)) => node_type.credits_for(&self.nodes[*node].params, seconds),
                _ => 0,
            })
            .collect()
    }

    /// How long task `index`'s output is expected to be, in seconds.
    fn expected_seconds(&self, index: TaskIndex) -> f64 {
        let task = &self.tasks[index];
        match &task.source {
            TaskSource::Input { .. } => 0.0,
            TaskSource::Generate => {
                let first = task.nodes.first().copied().unwrap_or(NodeIndex(0));
                self.nodes[first].settings().generation().map_or(0.0, |generation| generation.expected_seconds())
            }
            TaskSource::Tasks { tasks } => {
                let videos = tasks
                    .iter()
                    .filter_map(|source| self.tasks[*source].result.as_ref())
                    .filter(|file| file.media == MediaType::Video);
                let joins = task.nodes.iter().any(|node| {
                    self.nodes[*node].node_type().is_some_and(|node_type| node_type.flow == ItemFlow::AllItems)
                });
                let millis: Vec<u64> = videos.map(|file| file.duration_ms).collect();
                let input = if joins { millis.iter().sum() } else { millis.into_iter().max().unwrap_or(0) };
                // Through the chain's nodes as they change the length (a Clip's window, a
                // Speed's factor: slowed down, a video is longer).
                let output = task
                    .nodes
                    .iter()
                    .fold(input, |length, node| self.nodes[*node].settings().place(Vec::new(), length).1);
                output as f64 / 1000.0
            }
        }
    }

    /// One movement of task `index`: `amounts` per node of its chain, as one ledger
    /// entry with a line per node that moves (None when none does).
    fn task_move(&self, index: TaskIndex, amounts: &[i64], reason: Reason, cover: Cover) -> Option<CreditMove> {
        let chain = &self.tasks[index].nodes;
        let lines: Vec<LedgerLine> = amounts
            .iter()
            .zip(chain)
            .filter(|(amount, _)| **amount != 0)
            .map(|(amount, node)| LedgerLine { agent_node_id: self.nodes[*node].agent_node_id, amount: *amount })
            .collect();
        let amount: i64 = lines.iter().map(|line| line.amount).sum();
        (amount != 0).then(|| CreditMove {
            amount,
            reason,
            run_id: Some(self.id),
            agent_node_id: lines.first().map(|line| line.agent_node_id),
            task: Some(index.0),
            cover,
            lines,
        })
    }

    /// Takes `prices` (per node of the chain; the balance was seen to cover them) for
    /// task `index`'s attempt: one movement, whatever the chain's length.
    pub fn charge(&mut self, index: TaskIndex, prices: Vec<u64>) {
        let amounts: Vec<i64> = prices.iter().map(|price| -credits(*price)).collect();
        if let Some(movement) = self.task_move(index, &amounts, Reason::TaskCharge, Cover::Required) {
            self.credit_moves.push(movement);
        }
        let was_blocked = self.tasks[index].credits.take().is_some();
        self.tasks[index].charged = Some(prices);
        if was_blocked {
            self.refresh_needs_credits();
        }
    }

    /// Settles task `index`'s reserve on the prices of its real output: the difference
    /// is taken (up to the balance) or given back, in one movement.
    pub fn settle_charge(&mut self, index: TaskIndex, real: &[u64]) {
        let Some(reserved) = self.tasks[index].charged.clone() else { return };
        let differences: Vec<i64> =
            reserved.iter().zip(real).map(|(reserved, real)| credits(*reserved) - credits(*real)).collect();
        if let Some(movement) = self.task_move(index, &differences, Reason::TaskSettlement, Cover::UpToBalance) {
            self.credit_moves.push(movement);
        }
        self.tasks[index].charged = Some(real.to_vec());
    }

    /// Gives back what task `index`'s attempt took (it failed for a reason of ours), in
    /// this change: one movement.
    pub fn refund(&mut self, index: TaskIndex) {
        if let Some(charged) = self.take_charge(index) {
            let amounts: Vec<i64> = charged.iter().map(|price| credits(*price)).collect();
            if let Some(movement) = self.task_move(index, &amounts, Reason::Refund, Cover::Required) {
                self.credit_moves.push(movement);
            }
        }
    }

    /// Records that what task `index`'s attempt took is owed back, for a change that
    /// gives back many tasks' credits at once (a cancel, a sweep): the refunds are then
    /// written by [`Run::pay_refunds`] in batches of at most [`REFUND_BATCH`], each in a
    /// change of its own, so that no change writes more than a transaction holds. The
    /// debt is part of the task's stored state: a crash between batches leaves it for
    /// the next payer (the sweep finds a run that owes refunds).
    pub fn owe_refund(&mut self, index: TaskIndex) {
        let Some(charged) = self.take_charge(index) else { return };
        let task = &mut self.tasks[index];
        let owed = match task.refund_owed.take() {
            // A debt of an earlier attempt not paid yet (the same chain): this adds to it.
            Some(earlier) => earlier.iter().zip(&charged).map(|(earlier, now)| earlier.saturating_add(*now)).collect(),
            None => {
                self.refunds_owed += 1;
                charged
            }
        };
        self.tasks[index].refund_owed = Some(owed);
    }

    /// What task `index`'s attempt took (None when nothing), marked given back.
    fn take_charge(&mut self, index: TaskIndex) -> Option<Vec<u64>> {
        let charged = self.tasks[index].charged.clone()?;
        self.tasks[index].charged = Some(vec![0; charged.len()]);
        charged.iter().any(|credits| *credits > 0).then_some(charged)
    }

    /// Pays at most `limit` (at most [`REFUND_BATCH`]) of the refunds the run owes, in
    /// task order, as movements of this change; returns how many it paid.
    pub fn pay_refunds(&mut self, limit: usize) -> usize {
        let limit = limit.min(REFUND_BATCH);
        let owing: Vec<TaskIndex> =
            self.task_indexes().filter(|index| self.tasks[*index].refund_owed.is_some()).take(limit).collect();
        for index in &owing {
            let Some(owed) = self.tasks[*index].refund_owed.take() else { continue };
            let amounts: Vec<i64> = owed.iter().map(|price| credits(*price)).collect();
            if let Some(movement) = self.task_move(*index, &amounts, Reason::Refund, Cover::Required) {
                self.credit_moves.push(movement);
            }
            self.refunds_owed = self.refunds_owed.saturating_sub(1);
        }
        if owing.len() < limit {
            // None is left: the count follows the tasks (so a run never stays swept for a
            // count that disagrees with them).
            self.refunds_owed = 0;
        }
        owing.len()
    }

    /// Blocks the claimed attempt `attempt` of task `index` for credits: its `price` is
    /// more than `balance`. It waits for an auto top-up until `top_up_until` (None: for
    /// a resume); the run ends once only such tasks are left.
    pub fn block_for_credits(&mut self, index: TaskIndex, attempt: u32, block: CreditBlock, now: Timestamp) -> bool {
        let claimable = self.tasks.get(index.0).is_some_and(|task| {
            task.attempt == attempt && matches!(task.status, TaskStatus::Running | TaskStatus::Blocked)
        });
        if self.status != RunStatus::Running || !claimable {
            return false;
        }
        self.set_status(index, TaskStatus::Blocked, now);
        let task = &mut self.tasks[index];
        task.lease_until = None;
        task.claims = 0;
        task.credits = Some(block);
        self.needs_credits = true;
        self.updated_at = now;
        self.finish_if_done(now);
        true
    }

    /// `needs_credits` from the tasks: some task is blocked for credits.
    pub fn refresh_needs_credits(&mut self) {
        self.needs_credits = self.tasks.iter().any(|task| task.status == TaskStatus::Blocked && task.credits.is_some());
    }

    /// Whether every unfinished task is blocked for credits and waits for no top-up (or
    /// waits on such a task): nothing more can happen until credits are added and the run
    /// is resumed.
    pub(super) fn only_credit_blocked_left(&self) -> bool {
        let counts = &self.counts;
        if counts.of(TaskStatus::Blocked) == 0 || counts.of(TaskStatus::Queued) + counts.of(TaskStatus::Running) > 0 {
            return false;
        }
        self.tasks
            .iter()
            .filter(|task| task.status == TaskStatus::Blocked)
            .all(|task| task.credits.as_ref().is_some_and(|block| block.top_up_until.is_none()))
    }

    /// The `status_message` of a run ended for credits: how many are missing.
    pub(super) fn credits_message(&self) -> String {
        let blocked: Vec<&CreditBlock> = self
            .tasks
            .iter()
            .filter(|task| task.status == TaskStatus::Blocked)
            .filter_map(|task| task.credits.as_ref())
            .collect();
        let price: u64 = blocked.iter().map(|block| block.price).sum();
        let balance = blocked.iter().map(|block| block.balance).min().unwrap_or(0).max(0);
        let missing = price.saturating_sub(balance as u64);
        format!(
            "{missing} more credits are needed: {} blocked tasks cost {price} credits and the balance is {balance}; \
             add credits (POST /plan/upgrade, or auto top-up with POST /credits/settings) and resume the run",
            blocked.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::ids::NodeTypeId;
    use crate::domain::nodes::{DESTINATION, SPEED, VIDEO_INPUT};
    use crate::domain::runs::engine::tests::run_of;
    use crate::domain::runs::engine::Claim;
    use crate::domain::runs::{Fault, MediaFile};

    fn file(duration_ms: u64) -> MediaFile {
        MediaFile {
            key: "k".into(),
            version: None,
            duration_ms,
            width: 320,
            height: 240,
            has_audio: true,
            media: MediaType::Video,
            generated: None,
        }
    }

    /// A run of Input → Speed → Destination whose input task completed with a 2.5 s
    /// video, and the Speed task claimed: its reserve is 3 credits (1 a started second).
    fn claimed_speed() -> (Run, TaskIndex) {
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (SPEED, &[0]), (DESTINATION, &[1])], 1);
        let now = Timestamp::now();
        assert_eq!(run.claim(TaskIndex(0), 0, now, Duration::from_secs(60)), Claim::Claimed);
        let queued = run.complete(TaskIndex(0), 0, file(2_500), None, now).unwrap();
        let speed = queued[0];
        assert_eq!(run.claim(speed, 0, now, Duration::from_secs(60)), Claim::Claimed);
        let prices = run.task_prices(speed, None, Prices::Catalog);
        assert_eq!(prices, [3, 0], "Speed reserves 3 started seconds; the Destination is free");
        assert_eq!(run.task_prices(speed, None, Prices::Free), [0, 0]);
        run.charge(speed, prices);
        assert_eq!(run.credit_moves.len(), 1);
        assert_eq!((run.credit_moves[0].amount, run.credit_moves[0].reason), (-3, Reason::TaskCharge));
        run.credit_moves.clear();
        (run, speed)
    }

    #[test]
    fn our_failure_gives_the_price_back_and_the_callers_keeps_it() {
        let (mut run, speed) = claimed_speed();
        run.fail(speed, 0, "ffmpeg broke".into(), (None, Fault::Ours), Timestamp::now()).unwrap();
        assert_eq!(run.credit_moves.len(), 1);
        assert_eq!((run.credit_moves[0].amount, run.credit_moves[0].reason), (3, Reason::Refund));
        let (mut run, speed) = claimed_speed();
        run.fail(speed, 0, "not media".into(), (None, Fault::Caller), Timestamp::now()).unwrap();
        assert!(run.credit_moves.is_empty(), "the caller's fault keeps the charge");
    }

    #[test]
    fn a_completed_task_settles_on_its_output_and_a_claim_again_pays_nothing_more() {
        let (mut run, speed) = claimed_speed();
        // A worker stopped: the attempt is released and claimed again; it was paid.
        assert!(run.release(speed, 0, Timestamp::now()));
        assert_eq!(run.claim(speed, 0, Timestamp::now(), Duration::from_secs(60)), Claim::Claimed);
        assert!(run.tasks[speed].charged.is_some(), "paid already: the claim charges nothing");
        // Sped up ×2: 1.25 s of output costs 2, so 1 comes back.
        let real = run.task_prices(speed, Some(1.25), Prices::Catalog);
        run.complete(speed, 0, file(1_250), None, Timestamp::now()).unwrap();
        run.settle_charge(speed, &real);
        assert_eq!(run.credit_moves.len(), 1);
        assert_eq!((run.credit_moves[0].amount, run.credit_moves[0].reason), (1, Reason::TaskSettlement));
        assert_eq!(run.credit_moves[0].cover, Cover::UpToBalance);
    }

    #[test]
    fn a_cancel_owes_what_undelivered_attempts_took_and_a_batch_pays_it_once() {
        let (mut run, speed) = claimed_speed();
        run.cancel(Timestamp::now()).unwrap();
        assert!(run.credit_moves.is_empty(), "a cancel writes no movement: it owes them");
        assert_eq!((run.refunds_owed, run.tasks[speed].refund_owed.clone()), (1, Some(vec![3, 0])));
        assert_eq!(run.tasks[speed].charged, Some(vec![0, 0]));
        assert!(!run.needs_credits);
        assert_eq!(run.pay_refunds(REFUND_BATCH), 1);
        assert_eq!(run.credit_moves.len(), 1);
        assert_eq!((run.credit_moves[0].amount, run.credit_moves[0].reason), (3, Reason::Refund));
        assert_eq!((run.refunds_owed, run.tasks[speed].refund_owed.clone()), (0, None));
        assert_eq!(run.pay_refunds(REFUND_BATCH), 0, "paid once");
        // A count that disagrees with the tasks is set right by the next batch.
        run.refunds_owed = 3;
        assert_eq!((run.pay_refunds(REFUND_BATCH), run.refunds_owed), (0, 0));
    }

    #[test]
    fn a_chain_of_priced_edits_is_charged_in_one_movement_with_a_line_per_node() {
        // Video Input → 196 Speed → Destination: one task whose chain has 197 nodes.
        let mut graph: Vec<(NodeTypeId, Vec<usize>)> = vec![(VIDEO_INPUT, vec![])];
        graph.extend((0..196).map(|at| (SPEED, vec![at])));
        graph.push((DESTINATION, vec![196]));
        let graph: Vec<(NodeTypeId, &[usize])> = graph.iter().map(|(kind, up)| (*kind, up.as_slice())).collect();
        let mut run = run_of(&graph, 1);
        let now = Timestamp::now();
        assert_eq!(run.claim(TaskIndex(0), 0, now, Duration::from_secs(60)), Claim::Claimed);
        let chain = run.complete(TaskIndex(0), 0, file(2_500), None, now).unwrap()[0];
        assert_eq!(run.tasks[chain].nodes.len(), 197);
        assert_eq!(run.claim(chain, 0, now, Duration::from_secs(60)), Claim::Claimed);
        let prices = run.task_prices(chain, None, Prices::Catalog);
        run.charge(chain, prices.clone());
        assert_eq!(run.credit_moves.len(), 1, "one entry whatever the chain");
        let movement = &run.credit_moves[0];
        assert_eq!(movement.lines.len(), 196, "a line per priced node");
        assert_eq!(movement.amount, -(prices.iter().sum::<u64>() as i64));
        assert_eq!(movement.lines.iter().map(|line| line.amount).sum::<i64>(), movement.amount);
        assert_eq!(movement.agent_node_id, Some(run.nodes[run.tasks[chain].nodes[0]].agent_node_id));
    }

    #[test]
    fn a_cancel_of_a_wide_fan_out_is_refunded_in_batches_each_task_once() {
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (SPEED, &[0]), (DESTINATION, &[1])], 64);
        let now = Timestamp::now();
        let mut speeds = Vec::new();
        for input in 0..64 {
            assert_eq!(run.claim(TaskIndex(input), 0, now, Duration::from_secs(60)), Claim::Claimed);
            speeds.extend(run.complete(TaskIndex(input), 0, file(2_500), None, now).unwrap());
        }
        assert_eq!(speeds.len(), 64);
        for speed in &speeds {
            assert_eq!(run.claim(*speed, 0, now, Duration::from_secs(60)), Claim::Claimed);
            let prices = run.task_prices(*speed, None, Prices::Catalog);
            run.charge(*speed, prices);
        }
        run.credit_moves.clear();
        let cancelled = run.cancel(now).unwrap();
        assert_eq!(cancelled.tasks_cancelled, 64);
        assert!(run.credit_moves.is_empty());
        assert_eq!(run.refunds_owed, 64);
        let mut refunded = std::collections::BTreeMap::new();
        let mut batches = 0;
        while run.pay_refunds(usize::MAX) > 0 {
            batches += 1;
            assert!(run.credit_moves.len() <= REFUND_BATCH, "a batch is bounded");
            for movement in run.credit_moves.drain(..) {
                assert_eq!((movement.reason, movement.amount), (Reason::Refund, 3));
                *refunded.entry(movement.task.unwrap()).or_insert(0) += 1;
            }
        }
        assert_eq!(batches, 64 / REFUND_BATCH);
        assert_eq!(refunded.len(), 64);
        assert!(refunded.values().all(|times| *times == 1), "each task refunded once");
        assert_eq!(run.refunds_owed, 0);
    }

    #[test]
    fn reserves_follow_the_chain_and_the_script() {
        // Slowed to half speed, a 2.5 s input makes 5 s: 5 credits reserved, not 3.
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (SPEED, &[0]), (DESTINATION, &[1])], 1);
        let mut nodes: Vec<crate::domain::runs::RuntimeNode> = run.nodes.iter().cloned().collect();
        let node = nodes[1].clone();
        let params = serde_json::json!({"factor": 0.5}).as_object().cloned().unwrap();
        nodes[1] = crate::domain::runs::RuntimeNode::new(
            node.agent_node_id,
            node.original_node_id,
            node.node_type_id,
            params,
            node.upstream.clone(),
        );
        run.nodes = nodes.into();
        let now = Timestamp::now();
        assert_eq!(run.claim(TaskIndex(0), 0, now, Duration::from_secs(60)), Claim::Claimed);
        let task = run.complete(TaskIndex(0), 0, file(2_500), None, now).unwrap()[0];
        assert_eq!(run.task_prices(task, None, Prices::Catalog), [5, 0]);
    }

    #[test]
    fn a_task_blocked_for_credits_ends_the_run_unless_it_waits_for_a_top_up() {
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (SPEED, &[0]), (DESTINATION, &[1])], 1);
        let now = Timestamp::now();
        assert_eq!(run.claim(TaskIndex(0), 0, now, Duration::from_secs(60)), Claim::Claimed);
        let speed = run.complete(TaskIndex(0), 0, file(2_500), None, now).unwrap()[0];
        let mut waiting = run.clone();
        assert_eq!(waiting.claim(speed, 0, now, Duration::from_secs(60)), Claim::Claimed);
        let until = Some(now.after(Duration::from_secs(60)));
        assert!(waiting.block_for_credits(speed, 0, CreditBlock { price: 3, balance: 1, top_up_until: until }, now));
        assert_eq!(waiting.status, RunStatus::Running, "a top-up is on its way");
        assert!(waiting.needs_credits);
        assert_eq!(run.claim(speed, 0, now, Duration::from_secs(60)), Claim::Claimed);
        assert!(run.block_for_credits(speed, 0, CreditBlock { price: 3, balance: 1, top_up_until: None }, now));
        assert_eq!(run.status, RunStatus::Failed);
        assert!(run.needs_credits);
        assert!(
            run.status_message.as_deref().unwrap().contains("2 more credits are needed"),
            "{:?}",
            run.status_message
        );
        let (resumed, queued) = run.resume(now).unwrap();
        assert_eq!((resumed.requeued_nodes, queued), (2, vec![speed]));
        assert!(!run.needs_credits && run.tasks[speed].credits.is_none() && run.tasks[speed].charged.is_none());
    }
}
