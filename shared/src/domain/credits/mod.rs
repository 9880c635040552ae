//! Credits: an organization's balance, the ledger of every movement, its plan and
//! auto top-up settings (ARCHITECTURE §6). The account is one record stored under a
//! sequence number: every change (a task's charge, a grant, a top-up) is a write
//! conditional on the number it read, with its ledger entries, so that the balance never
//! goes below zero whatever runs at once.

pub mod billing;
pub mod plans;
pub mod service;
pub mod views;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use self::plans::PlanId;
use super::time::Timestamp;
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::RunId;
pub use crate::domain::ids::{CheckoutId, LedgerEntryId};

/// Largest auto top-up threshold or quantity.
pub const MAX_TOP_UP_SETTING: u64 = 1_000_000;
/// Most credits auto top-up buys in one monthly period unless the organization sets
/// another ceiling (`auto_topup.monthly_limit`): $100 a month at the creator rate.
pub const DEFAULT_MONTHLY_TOP_UP_LIMIT: u64 = 5_000;

/// Why credits moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = LedgerReason)]
pub enum Reason {
    // The credits an organization was created with.
    OpeningBalance,
    // A task's price, taken when it started (per-output-second prices reserved).
    TaskCharge,
    // The difference between a reserved price and the price of the real output.
    TaskSettlement,
    // A task's price given back: it failed for a reason of ours.
    Refund,
    // A plan's included credits, at the start of a monthly period.
    PeriodGrant,
    // Credits bought.
    TopUp,
    // Credits given when the plan changed up.
    PlanChange,
}

/// A movement of credits and the balance it left.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub entry_id: LedgerEntryId,
    pub created_at: Timestamp,
    /// Negative when spent.
    pub amount: i64,
    pub balance_after: i64,
    pub reason: Reason,
    pub run_id: Option<RunId>,
    pub agent_node_id: Option<AgentNodeId>,
    /// The task of the run, for task movements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<usize>,
    /// A task's movement is one entry whatever its chain (so a change of a run writes a
    /// bounded number of items): each priced node's part of `amount`, in chain order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<LedgerLine>,
    /// Where in the ledger it is: the account's sequence number of the write, and its
    /// place in that write (the list's order, newest first by these).
    pub seq: u64,
    pub position: u32,
}

/// One node's part of a task's movement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLine {
    pub agent_node_id: AgentNodeId,
    /// Negative when spent.
    pub amount: i64,
}

/// Auto top-up settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "Auto top-up settings: when the balance falls below `threshold` (or a task is
blocked for credits), `quantity` credits are bought (what the task lacks when more
and `cover_shortfall` is true), at most `monthly_limit` credits in a monthly period
(default 5,000).")]
pub struct AutoTopUp {
    pub enabled: bool,
    /// Buy when the balance falls below this.
    #[schema(minimum = 0, maximum = 1000000)]
    pub threshold: u64,
    /// Credits bought each time.
    #[schema(minimum = 0, maximum = 1000000)]
    pub quantity: u64,
    /// Most credits bought in one monthly period of the plan (the ceiling).
    #[serde(default = "default_monthly_limit")]
    #[schema(minimum = 0, maximum = 1000000, required = true)]
    pub monthly_limit: u64,
    /// Whether one top-up may buy more than `quantity`: what a blocked task lacks.
    #[serde(default)]
    #[schema(required = true)]
    pub cover_shortfall: bool,
}

fn default_monthly_limit() -> u64 {
    DEFAULT_MONTHLY_TOP_UP_LIMIT
}

impl Default for AutoTopUp {
    fn default() -> Self {
        AutoTopUp {
            enabled: false,
            threshold: 0,
            quantity: 0,
            monthly_limit: DEFAULT_MONTHLY_TOP_UP_LIMIT,
            cover_shortfall: false,
        }
    }
}

/// What auto top-up bought in the plan's current monthly period, and its last decline.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopUpMonth {
    /// The start of the period `bought` counts (None: nothing bought yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Timestamp>,
    /// Credits bought (or awaiting payment) in that period.
    #[serde(default)]
    pub bought: u64,
    /// When the card was last declined: nothing is bought again for one task wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declined_at: Option<Timestamp>,
}

/// A plan change reserved on the account before the billing provider is called: one at
/// a time, and the provider's idempotency key is derived from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanReservation {
    /// The provider's idempotency key for this change.
    pub key: String,
    pub to: PlanId,
    pub since: Timestamp,
}

/// The billing provider's state of the organization's subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubscriptionStatus {
    /// Paid up: the plan's credits are granted each period.
    Active,
    /// A renewal's payment failed and is being retried: no grant.
    PastDue,
    /// The provider gave up retrying: no grant.
    Unpaid,
    /// The first payment is not made yet: no grant.
    Incomplete,
    /// Ended.
    Canceled,
}

impl SubscriptionStatus {
    /// Its name as the provider writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::PastDue => "past_due",
            Self::Unpaid => "unpaid",
            Self::Incomplete => "incomplete",
            Self::Canceled => "canceled",
        }
    }

    /// Reads the provider's status (Stripe's `trialing` counts as paid up, its
    /// `incomplete_expired` and `paused` as ended); None when unknown.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "active" | "trialing" => Self::Active,
            "past_due" => Self::PastDue,
            "unpaid" => Self::Unpaid,
            "incomplete" => Self::Incomplete,
            "canceled" | "incomplete_expired" | "paused" => Self::Canceled,
            _ => return None,
        })
    }

    /// Whether the plan's credits are granted in this state.
    pub fn is_paid_up(self) -> bool {
        self == Self::Active
    }
}

/// A top-up bought and not yet paid (one at a time).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTopUp {
    pub purchase: String,
    pub quantity: u64,
    pub since: Timestamp,
}

/// The billing provider's references for the organization (Stripe's customer and
/// subscription).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BillingRefs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription: Option<String>,
    /// The subscription's state as the provider last said (None: paid up, as a seeded
    /// plan or one from before this was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SubscriptionStatus>,
    /// The end of the last billing period the provider confirmed paid: a monthly
    /// period starting at or after it is granted only once a renewal confirms it (None:
    /// the calendar decides, as for a seeded plan or the sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paid_until: Option<Timestamp>,
}

/// An organization's credits and plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Account {
    pub organization_id: OrganizationId,
    /// The stored account's write count; 0 for one never stored.
    #[serde(skip)]
    pub seq: u64,
    pub balance: i64,
    /// Credits spent in the current period.
    pub usage: i64,
    pub auto_topup: AutoTopUp,
    pub plan: PlanId,
    pub plan_started_at: Timestamp,
    /// The start of the period whose included credits were granted last.
    pub period_start: Timestamp,
    pub canceled_at: Option<Timestamp>,
    /// The plan that takes over at the end of the current period (a downgrade).
    pub scheduled_plan: Option<PlanId>,
    pub pending_top_up: Option<PendingTopUp>,
    #[serde(default)]
    pub billing: BillingRefs,
    /// A plan change reserved and not yet confirmed by the billing provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_change: Option<PlanReservation>,
    /// Auto top-up's purchases this monthly period.
    #[serde(default)]
    pub top_ups: TopUpMonth,
}

impl Account {
    /// The account of an organization that has none stored: the free plan, no credits.
    pub fn empty(organization: OrganizationId, now: Timestamp) -> Self {
        Self::opened(organization, PlanId::Free, 0, now)
    }

    /// A new account on `plan` since `started`, with `balance` credits.
    pub fn opened(organization: OrganizationId, plan: PlanId, balance: i64, started: Timestamp) -> Self {
        Account {
            organization_id: organization,
            seq: 0,
            balance,
            usage: 0,
            auto_topup: AutoTopUp::default(),
            plan,
            plan_started_at: started,
            period_start: started,
            canceled_at: None,
            scheduled_plan: None,
            pending_top_up: None,
            billing: BillingRefs::default(),
            plan_change: None,
            top_ups: TopUpMonth::default(),
        }
    }
}

/// How a movement may meet the balance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// The balance covers it (checked by whoever asked for it on the account it read).
    Required,
    /// Taken up to the balance: the balance never goes below zero.
    UpToBalance,
}

/// A movement a change asks for; made an entry when the change is written.
#[derive(Clone, Debug, PartialEq)]
pub struct CreditMove {
    pub amount: i64,
    pub reason: Reason,
    pub run_id: Option<RunId>,
    pub agent_node_id: Option<AgentNodeId>,
    pub task: Option<usize>,
    pub cover: Cover,
    /// Each node's part of a task's movement (their sum is `amount`); empty otherwise.
    pub lines: Vec<LedgerLine>,
}

/// A change of an account to write: its new state and the entries it adds, conditional
/// on the account still being at `expected` (0: not stored yet). `once` names events (a
/// checkout completed, a top-up bought, a provider's event ID) recorded in the same
/// write: a write naming one recorded before is refused.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountWrite {
    pub account: Account,
    pub expected: u64,
    pub entries: Vec<LedgerEntry>,
    pub once: Vec<String>,
}

/// Why an account write was not made.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    Done,
    /// Another writer changed the account first: read it again.
    Conflict,
    /// One of the `once` events was recorded already.
    AlreadyDone,
}

impl Account {
    /// Starts a write of this account (its next sequence number).
    pub fn write(&self) -> AccountWrite {
        let mut account = self.clone();
        account.seq = self.seq + 1;
        AccountWrite { account, expected: self.seq, entries: Vec::new(), once: Vec::new() }
    }
}

impl AccountWrite {
    /// Applies `movement` to the balance (and usage) and records its entry.
    pub fn apply(&mut self, movement: &CreditMove, now: Timestamp) {
        let account = &mut self.account;
        let amount = match movement.cover {
            Cover::Required => movement.amount,
            Cover::UpToBalance if movement.amount < 0 => movement.amount.max(-account.balance.max(0)),
            Cover::UpToBalance => movement.amount,
        };
        if amount == 0 && movement.reason != Reason::OpeningBalance {
            return;
        }
        let lines = match amount == movement.amount {
            true => movement.lines.clone(),
            false => capped_lines(&movement.lines, amount),
        };
        account.balance += amount;
        if matches!(movement.reason, Reason::TaskCharge | Reason::TaskSettlement | Reason::Refund) {
            account.usage = (account.usage - amount).max(0);
        }
        let position = self.entries.len() as u32;
        self.entries.push(LedgerEntry {
            entry_id: LedgerEntryId::new_v4(),
            created_at: now,
            amount,
            balance_after: account.balance,
            reason: movement.reason,
            run_id: movement.run_id,
            agent_node_id: movement.agent_node_id,
            task: movement.task,
            lines,
            seq: account.seq,
            position,
        });
    }

    /// Grants `amount` credits for `reason` (no run).
    pub fn grant(&mut self, amount: i64, reason: Reason, now: Timestamp) {
        let movement = CreditMove {
            amount,
            reason,
            run_id: None,
            agent_node_id: None,
            task: None,
            cover: Cover::Required,
            lines: Vec::new(),
        };
        self.apply(&movement, now);
    }
}

/// `lines` of a movement taken only up to the balance, as `amount` (above their sum):
/// what is taken less comes off the nodes that take, in chain order.
fn capped_lines(lines: &[LedgerLine], amount: i64) -> Vec<LedgerLine> {
    let mut spare = amount - lines.iter().map(|line| line.amount).sum::<i64>();
    lines
        .iter()
        .map(|line| {
            let less = match line.amount < 0 {
                true => spare.min(-line.amount),
                false => 0,
            };
            spare -= less;
            LedgerLine { agent_node_id: line.agent_node_id, amount: line.amount + less }
        })
        .filter(|line| line.amount != 0)
        .collect()
}

/// Where accounts and their ledgers are stored.
#[async_trait]
pub trait CreditRepo: Send + Sync {
    /// The organization's account (seq 0 and [`Account::empty`] when none is stored).
    async fn account(&self, organization: OrganizationId) -> anyhow::Result<Account>;
    /// Writes the account and its entries if it is still at `write.expected`.
    async fn write_account(&self, write: &AccountWrite) -> anyhow::Result<Written>;
    /// Entries of the organization, newest first, after the entry at `after` (its
    /// `(seq, position)`): at most `limit`.
    async fn ledger(
        &self,
        organization: OrganizationId,
        after: Option<(u64, u32)>,
        limit: usize,
    ) -> anyhow::Result<Vec<LedgerEntry>>;
    /// Stores a checkout (new or changed).
    async fn put_checkout(&self, checkout: &Checkout) -> anyhow::Result<()>;
    /// A checkout by ID (its ID is its secret: no organization is needed to find it).
    async fn checkout(&self, id: CheckoutId) -> anyhow::Result<Option<Checkout>>;
}

/// What a checkout buys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Purchase {
    /// A paid plan.
    Plan { plan: PlanId },
    /// Credits.
    TopUp { quantity: u64 },
}

/// Where a checkout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckoutStatus {
    Open,
    Completed,
    Canceled,
    /// Paid while the organization already had a subscription: the new one was ended
    /// and its payment refunded.
    Refunded,
}

/// A purchase the caller completes at the billing provider's page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkout {
    pub id: CheckoutId,
    pub organization_id: OrganizationId,
    pub purchase: Purchase,
    pub status: CheckoutStatus,
    pub success_url: Option<String>,
    pub cancel_url: Option<String>,
    pub created_at: Timestamp,
    /// The provider's session ID (Stripe), when it is not ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_session: Option<String>,
}
