//! The account under random interleavings (issue 33): charges of task claims, their
//! settlements, refunds of our failures, cancels (refunds owed, then paid in batches),
//! workers that stopped (a claim released and made again), top-ups, plan changes and
//! monthly grants, each made with the real domain types (`Run::claim`/`charge`/
//! `settle_charge`/`fail`/`cancel`/`pay_refunds`, `AccountWrite::apply`,
//! `credits::service::{open, current, apply_purchase}`) on the SQLite repository. After
//! every step: the balance is never below zero, the stored ledger sums to it (and
//! chains), and no task is charged twice net of its refunds, refunded twice, or given
//! back more than it paid.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use crate::adapters::sqlite::Sqlite;
use crate::domain::credits::plans::PlanId;
use crate::domain::credits::service::{apply_purchase, current, open};
use crate::domain::credits::{CreditRepo, Purchase, Reason, Written};
use crate::domain::ids::OrganizationId;
use crate::domain::media::MediaType;
use crate::domain::nodes::{DESTINATION, IMAGE_GENERATION, SPEED, VIDEO_INPUT};
use crate::domain::runs::charges::Prices;
use crate::domain::runs::engine::tests::run_of;
use crate::domain::runs::engine::Claim;
use crate::domain::runs::{Fault, MediaFile, Run, RunStatus, TaskIndex, TaskStatus};
use crate::domain::time::Timestamp;

/// One step of an interleaving; task numbers are taken modulo the run's tasks.
#[derive(Clone, Debug)]
enum Step {
    /// A worker claims the task (the claim charges it when the balance covers it).
    Claim {
        run: usize,
        task: usize,
    },
    /// The task's work made an output of this length: its charge is settled on it.
    Complete {
        run: usize,
        task: usize,
        millis: u64,
    },
    /// The task failed, for our reason (refunded) or the caller's (kept).
    Fail {
        run: usize,
        task: usize,
        ours: bool,
    },
    /// The worker stopped: its claim is released, to be claimed again.
    Release {
        run: usize,
        task: usize,
    },
    /// The run is cancelled; its owed refunds are paid in batches, `batches` of them
    /// now (the rest later, as a sweep does).
    Cancel {
        run: usize,
        batches: usize,
    },
    /// The sweep pays a batch of what a run owes.
    PayOwed {
        run: usize,
    },
    TopUp {
        credits: u64,
    },
    Plan {
        plan: usize,
    },
    /// A month passes: the next read of the account grants its period.
    Month,
}

fn step() -> impl Strategy<Value = Step> {
    let run = 0..3usize;
    let task = 0..8usize;
    prop_oneof![
        4 => (run.clone(), task.clone()).prop_map(|(run, task)| Step::Claim { run, task }),
        3 => (run.clone(), task.clone(), 200..6_000u64).prop_map(|(run, task, millis)| Step::Complete { run, task, millis }),
        2 => (run.clone(), task.clone(), any::<bool>()).prop_map(|(run, task, ours)| Step::Fail { run, task, ours }),
        1 => (run.clone(), task).prop_map(|(run, task)| Step::Release { run, task }),
        1 => (run.clone(), 0..3usize).prop_map(|(run, batches)| Step::Cancel { run, batches }),
        1 => run.prop_map(|run| Step::PayOwed { run }),
        1 => (1..40u64).prop_map(|credits| Step::TopUp { credits }),
        1 => (0..PLANS.len()).prop_map(|plan| Step::Plan { plan }),
        1 => Just(Step::Month),
    ]
}

const PLANS: [PlanId; 3] = [PlanId::Free, PlanId::Creator, PlanId::Professional];

/// The runs of a case: a fan-out of three priced edits, one of 21 image generations
/// (more tasks than a refund batch), and a chain of priced edits.
fn runs(organization: OrganizationId) -> Vec<Run> {
    let mut fan_out: Vec<(_, &[usize])> = vec![(VIDEO_INPUT, &[])];
    for _ in 0..3 {
        fan_out.push((SPEED, &[0]));
    }
    let generations: Vec<(_, &[usize])> = (0..21).map(|_| (IMAGE_GENERATION, &[][..])).collect();
    let chain: Vec<(_, &[usize])> = vec![(VIDEO_INPUT, &[]), (SPEED, &[0]), (SPEED, &[1]), (DESTINATION, &[2])];
    [(fan_out, 1), (generations, 0), (chain, 1)]
        .iter()
        .map(|(nodes, items)| {
            let mut run = run_of(nodes, *items);
            run.organization_id = organization;
            run
        })
        .collect()
}

fn file(millis: u64, media: MediaType) -> MediaFile {
    MediaFile {
        key: "k".into(),
        version: None,
        duration_ms: millis,
        width: 320,
        height: 240,
        has_audio: false,
        media,
        generated: None,
    }
}

/// The case's state: the repository, the runs as stored, the clock.
struct Books {
    repo: Sqlite,
    organization: OrganizationId,
    runs: Vec<Run>,
    now: Timestamp,
    purchases: u32,
}

impl Books {
    /// Makes `change` on a copy of run `at` and, as a run's change is written, stores
    /// it with the credit movements it asked for in one account write (conditional on
    /// the account it read; one writer here, so it wins).
    async fn change(&mut self, at: usize, change: impl FnOnce(&mut Run, i64) -> bool) {
        let account = current(&self.repo, self.organization, self.now).await.unwrap();
        let mut run = self.runs[at].clone();
        if !change(&mut run, account.balance) {
            return;
        }
        let moves = std::mem::take(&mut run.credit_moves);
        if !moves.is_empty() {
            let mut write = account.write();
            for movement in &moves {
                write.apply(movement, self.now);
            }
            assert_eq!(self.repo.write_account(&write).await.unwrap(), Written::Done);
        }
        self.runs[at] = run;
    }

    async fn apply(&mut self, step: &Step) {
        self.now = self.now.after(Duration::from_secs(1));
        let now = self.now;
        let lease = Duration::from_secs(60);
        let task_of = |run: &Run, task: usize| TaskIndex(task % run.tasks.len());
        match *step {
            Step::Claim { run, task } => {
                self.change(run, |run, balance| {
                    let index = task_of(run, task);
                    let attempt = run.tasks[index].attempt;
                    if run.claim(index, attempt, now, lease) != Claim::Claimed {
                        return false;
                    }
                    // A claim of an attempt already paid (a worker stopped) pays nothing more.
                    if run.tasks[index].charged.is_none() {
                        let prices = run.task_prices(index, None, Prices::Catalog);
                        let price: u64 = prices.iter().sum();
                        if i64::try_from(price).unwrap() > balance {
                            // Blocked for credits: the engine stores no charge.
                            return false;
                        }
                        run.charge(index, prices);
                    }
                    true
                })
                .await
            }
            Step::Complete { run, task, millis } => {
                // The second run's tasks make images; the others' videos.
                let media = if run == 1 { MediaType::Image } else { MediaType::Video };
                self.change(run, |run, _| {
                    let index = task_of(run, task);
                    let attempt = run.tasks[index].attempt;
                    if run.complete(index, attempt, file(millis, media), None, now).is_none() {
                        return false;
                    }
                    let real = run.task_prices(index, Some(millis as f64 / 1000.0), Prices::Catalog);
                    run.settle_charge(index, &real);
                    true
                })
                .await
            }
            Step::Fail { run, task, ours } => {
                self.change(run, |run, _| {
                    let index = task_of(run, task);
                    let attempt = run.tasks[index].attempt;
                    let fault = if ours { Fault::Ours } else { Fault::Caller };
                    run.fail(index, attempt, "failed".into(), (None, fault), now).is_some()
                })
                .await
            }
            Step::Release { run, task } => {
                self.change(run, |run, _| {
                    let index = task_of(run, task);
                    let attempt = run.tasks[index].attempt;
                    run.release(index, attempt, now)
                })
                .await
            }
            Step::Cancel { run, batches } => {
                self.change(run, |run, _| run.status == RunStatus::Running && run.cancel(now).is_ok()).await;
                for _ in 0..batches {
                    self.pay_owed(run).await;
                }
            }
            Step::PayOwed { run } => self.pay_owed(run).await,
            Step::TopUp { credits } => {
                self.purchases += 1;
                let once = format!("top-up {}", self.purchases);
                let purchase = Purchase::TopUp { quantity: credits };
                apply_purchase(&self.repo, self.organization, &purchase, &[&once], now).await.unwrap();
            }
            Step::Plan { plan } => {
                self.purchases += 1;
                let once = format!("plan {}", self.purchases);
                let purchase = Purchase::Plan { plan: PLANS[plan] };
                apply_purchase(&self.repo, self.organization, &purchase, &[&once], now).await.unwrap();
                // The same payment applied again changes nothing.
                let again = apply_purchase(&self.repo, self.organization, &purchase, &[&once], now).await.unwrap();
                assert_eq!(again, Written::AlreadyDone);
            }
            Step::Month => {
                self.now = self.now.after(Duration::from_secs(31 * 24 * 3600));
                current(&self.repo, self.organization, self.now).await.unwrap();
            }
        }
    }

    /// Pays one batch of what run `at` owes, as a cancel's batches and the sweep do.
    async fn pay_owed(&mut self, at: usize) {
        self.change(at, |run, _| run.refunds_owed > 0 && run.pay_refunds(usize::MAX) > 0).await;
    }

    /// The invariants, after every step.
    async fn check(&self, steps: &[Step]) {
        let account = self.repo.account(self.organization).await.unwrap();
        assert!(account.balance >= 0, "the balance went below zero after {steps:?}");
        let mut entries = Vec::new();
        let mut after = None;
        loop {
            let page = self.repo.ledger(self.organization, after, 50).await.unwrap();
            let Some(last) = page.last() else { break };
            after = Some((last.seq, last.position));
            entries.extend(page);
        }
        entries.reverse();
        let mut running = 0;
        for entry in &entries {
            running += entry.amount;
            assert_eq!(entry.balance_after, running, "the ledger chains: {entry:?} after {steps:?}");
            assert!(running >= 0, "never below zero: {entry:?}");
        }
        assert_eq!(running, account.balance, "the ledger sums to the balance after {steps:?}");
        // Per task of a run: (charges, refunds, net credits).
        let mut tasks: BTreeMap<(String, usize), (i64, i64, i64)> = BTreeMap::new();
        for entry in entries.iter().filter(|entry| entry.run_id.is_some()) {
            let key = (entry.run_id.map(|id| id.to_string()).unwrap_or_default(), entry.task.unwrap_or(usize::MAX));
            let counts = tasks.entry(key).or_default();
            match entry.reason {
                Reason::TaskCharge => counts.0 += 1,
                Reason::Refund => counts.1 += 1,
                Reason::TaskSettlement => {}
                other => panic!("a run's entry of reason {other:?}"),
            }
            counts.2 += entry.amount;
            let lines: i64 = entry.lines.iter().map(|line| line.amount).sum();
            assert_eq!(lines, entry.amount, "a task's lines add up to its entry: {entry:?}");
        }
        for (task, (charges, refunds, net)) in &tasks {
            assert!(*charges <= 1, "task {task:?} charged {charges} times after {steps:?}");
            assert!(*refunds <= *charges, "task {task:?} refunded {refunds} times for {charges} charges");
            assert!(*net <= 0, "task {task:?} was given back more than it paid ({net}) after {steps:?}");
        }
        // A cancelled run whose debts are paid keeps nothing of the tasks it cancelled
        // (a delivered task, or one failed for the caller's reason, keeps its price).
        for run in &self.runs {
            if run.status == RunStatus::Cancelled && run.refunds_owed == 0 {
                for index in run.task_indexes().filter(|index| run.tasks[*index].status == TaskStatus::Cancelled) {
                    let net = tasks.get(&(run.id.to_string(), index.0)).map_or(0, |counts| counts.2);
                    assert_eq!(net, 0, "cancelled run {}: task {} kept {net} credits after {steps:?}", run.id, index.0);
                }
            }
        }
    }
}

async fn play(opening: i64, steps: Vec<Step>) {
    let repo = Sqlite::in_memory().unwrap();
    let organization = OrganizationId::new_v4();
    let now = Timestamp::parse("2026-01-10T00:00:00.000Z").unwrap();
    open(&repo, organization, PlanId::Free, opening, now, now).await.unwrap();
    let mut books = Books { repo, organization, runs: runs(organization), now, purchases: 0 };
    for (at, step) in steps.iter().enumerate() {
        books.apply(step).await;
        books.check(&steps[..=at]).await;
    }
    // Whatever is still owed is paid by sweeps, each batch once.
    for at in 0..books.runs.len() {
        for _ in 0..4 {
            books.pay_owed(at).await;
        }
        assert_eq!(books.runs[at].refunds_owed, 0, "four batches pay any debt of 21 tasks");
    }
    books.check(&steps).await;
}

proptest! {
    // Small enough for CI: each case is at most 60 steps on an in-memory database.
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_keep_the_books(opening in 0..60i64, steps in proptest::collection::vec(step(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(play(opening, steps));
    }
}
