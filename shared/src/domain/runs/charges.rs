//! What a run's tasks cost and the credit movements their changes ask for (ARCHITECTURE
//! §6): a task's price is the sum of its chain's nodes' catalog prices, taken when the
//! task is claimed (per-output-second prices reserved from the requested or known
//! duration), settled on the output's real duration, and given back when the task fails
//! for a reason of ours. A task the balance does not cover is blocked for credits.

use super::{CreditBlock, NodeIndex, Run, RunStatus, TaskIndex, TaskSource, TaskStatus};
use crate::domain::credits::{Cover, CreditMove, Reason};
use crate::domain::media::MediaType;
use crate::domain::nodes::{Generation, CONCATENATE};
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

/// Words a talking avatar says per second, to reserve its price from its script.
const WORDS_PER_SECOND: f64 = 2.5;

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
                match self.nodes[first].settings().generation() {
                    Some(Generation::Video(request)) => f64::from(request.duration_s),
                    Some(Generation::Audio(request)) => request.length_ms as f64 / 1000.0,
                    Some(Generation::Avatar { script, .. }) => {
                        (script.split_whitespace().count() as f64 / WORDS_PER_SECOND).max(1.0)
                    }
                    Some(Generation::Image(_)) | None => 0.0,
                }
            }
            TaskSource::Tasks { tasks } => {
                let videos = tasks
                    .iter()
                    .filter_map(|source| self.tasks[*source].result.as_ref())
                    .filter(|file| file.media == MediaType::Video);
                let joins = task.nodes.iter().any(|node| self.nodes[*node].node_type_id == CONCATENATE);
                let millis: Vec<u64> = videos.map(|file| file.duration_ms).collect();
                let total = if joins { millis.iter().sum() } else { millis.into_iter().max().unwrap_or(0) };
                total as f64 / 1000.0
            }
        }
    }

    /// A movement of task `index`'s node at `position` of its chain.
    fn task_move(&self, index: TaskIndex, position: usize, amount: i64, reason: Reason, cover: Cover) -> CreditMove {
        let node = self.tasks[index].nodes.get(position).map(|node| self.nodes[*node].agent_node_id);
        CreditMove { amount, reason, run_id: Some(self.id), agent_node_id: node, task: Some(index.0), cover }
    }

    /// Takes `prices` (per node of the chain; the balance was seen to cover them) for
    /// task `index`'s attempt.
    pub fn charge(&mut self, index: TaskIndex, prices: Vec<u64>) {
        for (position, price) in prices.iter().enumerate().filter(|(_, price)| **price > 0) {
            let amount = -i64::try_from(*price).unwrap_or(i64::MAX);
            let movement = self.task_move(index, position, amount, Reason::TaskCharge, Cover::Required);
            self.credit_moves.push(movement);
        }
        let was_blocked = self.tasks[index].credits.take().is_some();
        self.tasks[index].charged = Some(prices);
        if was_blocked {
            self.refresh_needs_credits();
        }
    }

    /// Settles task `index`'s reserve on the prices of its real output: the difference
    /// is taken (up to the balance) or given back.
    pub fn settle_charge(&mut self, index: TaskIndex, real: &[u64]) {
        let Some(reserved) = self.tasks[index].charged.clone() else { return };
        for (position, (reserved, real)) in reserved.iter().zip(real).enumerate() {
            let difference = i64::try_from(*reserved).unwrap_or(i64::MAX) - i64::try_from(*real).unwrap_or(i64::MAX);
            if difference != 0 {
                let movement = self.task_move(index, position, difference, Reason::TaskSettlement, Cover::UpToBalance);
                self.credit_moves.push(movement);
            }
        }
        self.tasks[index].charged = Some(real.to_vec());
    }

    /// Gives back what task `index`'s attempt took (it failed for a reason of ours).
    pub fn refund(&mut self, index: TaskIndex) {
        let Some(charged) = self.tasks[index].charged.clone() else { return };
        for (position, credits) in charged.iter().enumerate().filter(|(_, credits)| **credits > 0) {
            let amount = i64::try_from(*credits).unwrap_or(i64::MAX);
            let movement = self.task_move(index, position, amount, Reason::Refund, Cover::Required);
            self.credit_moves.push(movement);
        }
        self.tasks[index].charged = Some(vec![0; charged.len()]);
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
        self.set_status(index, TaskStatus::Blocked);
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
