//! The plan and credit operations: the account as of now (periods granted), the views of
//! `GET /plan`, `GET /plan/list` and `GET /credits`, auto top-up settings, the ledger,
//! upgrades and their checkouts, and top-ups. Every change is an account write under the
//! sequence number read, retried on a conflict.

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;

use super::billing::{BillingEvent, BillingEventKind, BillingProvider, PlanChanged, TopUpState};
use super::plans::{period_at, PlanId};
use super::{
    Account, AccountWrite, BillingRefs, Checkout, CheckoutId, CheckoutStatus, CreditRepo, LedgerEntry, PlanReservation,
    Purchase, Reason, SubscriptionStatus, Written,
};
use crate::core::retry::ACCOUNT_CONFLICTS;
use crate::core::versioned::{self, Changed, Edit};
use crate::domain::ids::OrganizationId;
use crate::domain::rejection::{DomainError, Rejection};
use crate::domain::time::{Clock, Timestamp};

/// A top-up asked for and not paid holds off the next one this long.
pub const PENDING_TOP_UP_HOLD: Duration = Duration::from_secs(3600);
/// How long a plan change's reservation holds off another: one older is taken as lost
/// (its process stopped between the provider's answer and its write), and the
/// provider's events correct the plan.
pub const PLAN_CHANGE_HOLD: Duration = Duration::from_secs(120);
/// Longest `success_url` or `cancel_url`.
pub const MAX_URL_BYTES: usize = 2_048;
/// Ledger page size bounds.
pub const LEDGER_DEFAULT_LIMIT: usize = 25;
pub const LEDGER_MAX_LIMIT: usize = 100;

/// What the plan and credit operations use.
pub struct CreditPorts<'a> {
    pub credits: &'a dyn CreditRepo,
    pub billing: &'a dyn BillingProvider,
    pub clock: &'a dyn Clock,
}

/// Why a plan or credit request is refused.
#[derive(Debug, thiserror::Error)]
pub enum CreditError {
    /// 400, naming the problem.
    #[error("{0}")]
    Invalid(String),
    /// 403: the plan does not allow it.
    #[error("{0}")]
    Forbidden(String),
    #[error("Checkout not found")]
    NotFound,
    /// 409: the checkout cannot be completed, or another change is in progress.
    #[error("{0}")]
    Conflict(String),
    /// 402: the payment was declined (nothing changed).
    #[error("{0}")]
    PaymentRequired(String),
    /// 503: the provider's answer to a change was lost; the change is held until its
    /// event confirms it (or the hold ends).
    #[error("{0}")]
    Pending(String),
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

impl DomainError for CreditError {
    fn rejection(self) -> Result<Rejection, anyhow::Error> {
        match self {
            CreditError::Invalid(_) => Ok(Rejection::Invalid),
            CreditError::Forbidden(_) => Ok(Rejection::Forbidden),
            CreditError::NotFound => Ok(Rejection::NotFound),
            CreditError::Conflict(_) => Ok(Rejection::Conflict),
            CreditError::PaymentRequired(_) => Ok(Rejection::PaymentRequired),
            CreditError::Pending(_) => Ok(Rejection::Pending),
            CreditError::Backend(cause) => Err(cause),
        }
    }
}

/// Writes a change of the organization's current account, made by `change` (None:
/// nothing to write), until it lands ([`ACCOUNT_CONFLICTS`]); returns the account as
/// written (or as read).
async fn change_account(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    now: Timestamp,
    change: impl FnMut(&Account) -> Result<Option<AccountWrite>, CreditError> + Send,
) -> Result<(Account, Written), CreditError> {
    let mut change = ChangeAccount { repo, organization, now, change };
    match versioned::change(&ACCOUNT_CONFLICTS, format!("the credit account of {organization}"), &mut change).await? {
        Changed::Written(write, written) => Ok((write.account, written)),
        Changed::Kept(account) => Ok((account, Written::Done)),
        Changed::Missing => Err(CreditError::Backend(anyhow::anyhow!("no account of {organization} was read"))),
    }
}

/// A change of the organization's current account, by `change`.
struct ChangeAccount<'a, F> {
    repo: &'a dyn CreditRepo,
    organization: OrganizationId,
    now: Timestamp,
    change: F,
}

#[async_trait]
impl<F> versioned::Change for ChangeAccount<'_, F>
where
    F: FnMut(&Account) -> Result<Option<AccountWrite>, CreditError> + Send,
{
    type Record = Account;
    type Write = AccountWrite;
    type Landed = Written;
    type Kept = Account;
    type Error = CreditError;

    async fn read(&mut self) -> Result<Option<Account>, CreditError> {
        Ok(Some(current(self.repo, self.organization, self.now).await?))
    }

    async fn edit(&mut self, account: Account) -> Result<Edit<AccountWrite, Account>, CreditError> {
        Ok(match (self.change)(&account)? {
            Some(write) => Edit::Write(write),
            None => Edit::Keep(account),
        })
    }

    async fn write(&mut self, write: &mut AccountWrite) -> Result<Option<Written>, CreditError> {
        Ok(match self.repo.write_account(write).await? {
            Written::Conflict => None,
            written => Some(written),
        })
    }
}

/// The organization's account as of `now`: the included credits of a period begun since
/// the last grant are granted (once, whoever asks at the same time), and a plan change
/// scheduled for the period's end is made.
pub async fn current(repo: &dyn CreditRepo, organization: OrganizationId, now: Timestamp) -> anyhow::Result<Account> {
    let mut change = OpenPeriod { repo, organization, now };
    match versioned::change(&ACCOUNT_CONFLICTS, format!("the credit account of {organization}"), &mut change).await? {
        Changed::Written(write, ()) => Ok(write.account),
        Changed::Kept(account) => Ok(account),
        Changed::Missing => Err(anyhow::anyhow!("no account of {organization} was read")),
    }
}

/// The account brought to `now`: opened, or granted the period begun since its last
/// grant.
struct OpenPeriod<'a> {
    repo: &'a dyn CreditRepo,
    organization: OrganizationId,
    now: Timestamp,
}

#[async_trait]
impl versioned::Change for OpenPeriod<'_> {
    type Record = Account;
    type Write = AccountWrite;
    type Landed = ();
    type Kept = Account;
    type Error = anyhow::Error;

    async fn read(&mut self) -> anyhow::Result<Option<Account>> {
        Ok(Some(self.repo.account(self.organization).await?))
    }

    async fn edit(&mut self, account: Account) -> anyhow::Result<Edit<AccountWrite, Account>> {
        let write = match account.seq {
            // Never stored (an organization from before credits): opened with the plan
            // and credits its record holds, as its opening balance.
            0 => {
                let mut write = Account { balance: 0, ..account.clone() }.write();
                write.grant(account.balance, Reason::OpeningBalance, self.now);
                Some(write)
            }
            _ => period_due(&account, self.now),
        };
        Ok(match write {
            Some(write) => Edit::Write(write),
            None => Edit::Keep(account),
        })
    }

    /// Another writer's grant (already done) is read again, as any other writer's change.
    async fn write(&mut self, write: &mut AccountWrite) -> anyhow::Result<Option<()>> {
        Ok(match self.repo.write_account(write).await? {
            Written::Done => Some(()),
            Written::Conflict | Written::AlreadyDone => None,
        })
    }
}

/// The grant (and scheduled plan change) a new period owes the account, if one began
/// since its last grant.
fn period_due(account: &Account, now: Timestamp) -> Option<AccountWrite> {
    if account.seq == 0 {
        return None;
    }
    let (start, _) = period_at(account.plan_started_at, now);
    if start <= account.period_start {
        return None;
    }
    let unpaid = account.billing.status.is_some_and(|status| !status.is_paid_up())
        || account.billing.paid_until.is_some_and(|until| start >= until);
    if account.plan.is_paid() && unpaid {
        // The renewal is not paid (or not confirmed yet): no credits for the period
        // until it is (the grant is made by the first read after that).
        return None;
    }
    let mut write = account.write();
    let next = &mut write.account;
    if let Some(plan) = next.scheduled_plan.take() {
        next.plan = plan;
        next.plan_started_at = start;
    }
    next.period_start = start;
    next.usage = 0;
    let credits = next.plan.plan().credits_per_month;
    write.grant(credits, Reason::PeriodGrant, now);
    Some(write)
}

/// Opens the organization's account with `balance` credits on `plan` (its
/// `opening_balance` entry); an account already open is left as it is.
pub async fn open(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    plan: PlanId,
    balance: i64,
    started: Timestamp,
    now: Timestamp,
) -> anyhow::Result<()> {
    if repo.account(organization).await?.seq > 0 {
        return Ok(());
    }
    let mut write = Account::opened(organization, plan, 0, started).write();
    write.grant(balance, Reason::OpeningBalance, now);
    match repo.write_account(&write).await? {
        // Another process opened it first: the same seed.
        Written::Done | Written::Conflict | Written::AlreadyDone => Ok(()),
    }
}

/// Credits auto top-up bought in the monthly period starting at `month`.
pub(super) fn bought_this_month(account: &Account, month: Timestamp) -> u64 {
    match account.top_ups.start {
        Some(start) if start == month => account.top_ups.bought,
        _ => 0,
    }
}

/// What `POST /credits/settings` changes of the auto top-up: fields left out (None) keep
/// their value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SettingsChange {
    pub enabled: Option<bool>,
    pub threshold: Option<u64>,
    pub quantity: Option<u64>,
    pub monthly_limit: Option<u64>,
    pub cover_shortfall: Option<bool>,
}

/// `POST /credits/settings`: 403 unless a paid plan; 400 when the quantity is above the
/// monthly ceiling.
pub async fn update_settings(
    ports: &CreditPorts<'_>,
    organization: OrganizationId,
    change: SettingsChange,
) -> Result<Account, CreditError> {
    let SettingsChange { enabled, threshold, quantity, monthly_limit, cover_shortfall } = change;
    let now = ports.clock.now();
    let (account, _) = change_account(ports.credits, organization, now, |account| {
        if !account.plan.allows_top_ups() {
            return Err(CreditError::Forbidden(format!(
                "Auto top-up is available on the creator, creator_annual, professional and professional_annual \
                 plans; this organization is on the {} plan (POST /plan/upgrade)",
                account.plan.as_str()
            )));
        }
        let mut write = account.write();
        let auto = &mut write.account.auto_topup;
        auto.enabled = enabled.unwrap_or(auto.enabled);
        auto.threshold = threshold.unwrap_or(auto.threshold);
        auto.quantity = quantity.unwrap_or(auto.quantity);
        auto.monthly_limit = monthly_limit.unwrap_or(auto.monthly_limit);
        auto.cover_shortfall = cover_shortfall.unwrap_or(auto.cover_shortfall);
        if auto.quantity > auto.monthly_limit {
            return Err(CreditError::Invalid(format!(
                "auto_topup.quantity ({}) is above auto_topup.monthly_limit ({}): no top-up could be bought; \
                 raise monthly_limit or lower quantity",
                auto.quantity, auto.monthly_limit
            )));
        }
        Ok(Some(write))
    })
    .await?;
    Ok(account)
}

/// One page of the ledger and the cursor of the next.
pub struct LedgerPage {
    pub entries: Vec<LedgerEntry>,
    pub next_cursor: Option<String>,
}

fn encode_cursor(entry: &LedgerEntry) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}.{}", entry.seq, entry.position))
}

fn decode_cursor(cursor: &str) -> Option<(u64, u32)> {
    let text = String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let (seq, position) = text.split_once('.')?;
    Some((seq.parse().ok()?, position.parse().ok()?))
}

/// `GET /credits/ledger?limit&cursor`: newest first.
pub async fn ledger(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    limit: Option<&str>,
    cursor: Option<&str>,
) -> Result<LedgerPage, CreditError> {
    let limit = match limit {
        None => LEDGER_DEFAULT_LIMIT,
        Some(text) => {
            text.parse::<usize>().ok().filter(|limit| (1..=LEDGER_MAX_LIMIT).contains(limit)).ok_or_else(|| {
                CreditError::Invalid(format!("limit must be a whole number from 1 to {LEDGER_MAX_LIMIT}, not {text:?}"))
            })?
        }
    };
    let after = match cursor {
        None => None,
        Some(text) => Some(
            decode_cursor(text)
                .ok_or_else(|| CreditError::Invalid("cursor is not one this endpoint gave".to_owned()))?,
        ),
    };
    let mut entries = repo.ledger(organization, after, limit + 1).await?;
    let next_cursor = (entries.len() > limit).then(|| encode_cursor(&entries[limit - 1]));
    entries.truncate(limit);
    Ok(LedgerPage { entries, next_cursor })
}

/// What an upgrade did.
#[derive(Debug, PartialEq, Eq)]
pub enum Upgraded {
    /// The caller finishes the purchase at `url`.
    Checkout { url: String, plan: PlanId },
    /// Changed (or scheduled for the period's end) without a payment step.
    Changed { plan: PlanId },
}

/// `POST /plan/upgrade {plan_id, success_url?, cancel_url?}`. From free: a checkout
/// (the plan starts when it is paid). Between paid plans: up a family, or between a
/// family's monthly and annual billing, at once (a move up, once its prorated invoice is
/// paid, grants the difference in monthly credits now and starts a new period); down a
/// family, at the period's end. To free: at the period's end, refused while credits are
/// owed. Every check is made, and the change reserved on the account, before the billing
/// provider is called (with an idempotency key derived from the reservation): a refused
/// change calls nothing, and of two changes at once one is refused (409).
pub async fn upgrade(
    ports: &CreditPorts<'_>,
    organization: OrganizationId,
    request: UpgradeRequest,
) -> Result<Upgraded, CreditError> {
    let plan = request.plan;
    let now = ports.clock.now();
    let account = current(ports.credits, organization, now).await?;
    if let Some(reservation) = reserved(&account, now) {
        return Err(in_progress(reservation));
    }
    // From free, or from a paid plan the provider holds no subscription of (seeded): a
    // checkout.
    let checkout_first = account.plan == PlanId::Free || !ports.billing.has_subscription(&account);
    if checkout_first && plan.is_paid() && plan != account.plan {
        return open_plan_checkout(ports, &account, request, now).await;
    }
    if plan_move(&account, plan, now)? == Move::Nothing {
        return Ok(Upgraded::Changed { plan });
    }
    change_plan(ports, organization, plan, now).await
}

/// `POST /plan/upgrade {plan_id, success_url?, cancel_url?}`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeRequest {
    pub plan: PlanId,
    pub success_url: Option<String>,
    pub cancel_url: Option<String>,
}

/// A checkout of `request`'s paid plan for the account's organization: stored first, so
/// that the provider's session is opened under the checkout's ID (its idempotency key)
/// and its payment is matched to this record.
async fn open_plan_checkout(
    ports: &CreditPorts<'_>,
    account: &Account,
    request: UpgradeRequest,
    now: Timestamp,
) -> Result<Upgraded, CreditError> {
    let UpgradeRequest { plan, success_url, cancel_url } = request;
    if success_url.is_none() && !ports.billing.has_return_url() {
        return Err(CreditError::Invalid(
            "success_url is required: this deployment has no public address to send the caller back to".into(),
        ));
    }
    let checkout = Checkout {
        id: CheckoutId::new_v4(),
        organization_id: account.organization_id,
        purchase: Purchase::Plan { plan },
        status: CheckoutStatus::Open,
        success_url,
        cancel_url,
        created_at: now,
        provider_session: None,
    };
    ports.credits.put_checkout(&checkout).await?;
    let opened = ports.billing.open_checkout(&checkout, account).await?;
    let checkout = Checkout { provider_session: opened.provider_session, ..checkout };
    ports.credits.put_checkout(&checkout).await?;
    Ok(Upgraded::Checkout { url: opened.url, plan })
}

/// Moves a paid subscription to `plan`: reserved on the account (conditional on what was
/// read: the checks hold for the account as written, and a second change at once finds
/// the reservation), asked of the provider under the reservation's key, then made (or,
/// declined, released).
async fn change_plan(
    ports: &CreditPorts<'_>,
    organization: OrganizationId,
    plan: PlanId,
    now: Timestamp,
) -> Result<Upgraded, CreditError> {
    let mut reservation: Option<(String, Move)> = None;
    let (reserved_account, _) = change_account(ports.credits, organization, now, |account| {
        reservation = None;
        if let Some(held) = reserved(account, now) {
            return Err(in_progress(held));
        }
        let step = plan_move(account, plan, now)?;
        if step == Move::Nothing {
            return Ok(None);
        }
        let mut write = account.write();
        let key = format!("plan-change-{organization}-{}", write.account.seq);
        write.account.plan_change = Some(PlanReservation { key: key.clone(), to: plan, since: now });
        reservation = Some((key, step));
        Ok(Some(write))
    })
    .await?;
    let Some((key, step)) = reservation else { return Ok(Upgraded::Changed { plan }) };
    let answer = ports.billing.change_plan(&reserved_account, plan, step != Move::Now, &key).await;
    let declined = match answer {
        Ok(PlanChanged::Done) => None,
        Ok(PlanChanged::Declined(why)) => Some(Ok(why)),
        Err(error) => Some(Err(error)),
    };
    if let Some(Err(error)) = &declined {
        // The provider may have made the change (a timeout after it did, or retries
        // exhausted): the reservation is kept, so its `customer.subscription.updated`
        // makes the move and its grant (the prorated invoice was paid); unconfirmed, it
        // lapses after PLAN_CHANGE_HOLD.
        tracing::warn!(%organization, to = plan.as_str(), error = format!("{error:#}"), "a plan change's answer was lost: held for the provider's event");
        return Err(CreditError::Pending(format!(
            "the move to the {} plan is pending confirmation from the billing provider; the plan and credits follow once it confirms (try again in {} minutes if it does not)",
            plan.as_str(),
            PLAN_CHANGE_HOLD.as_secs() / 60
        )));
    }
    change_account(ports.credits, organization, now, |account| {
        if account.plan_change.as_ref().map(|held| &held.key) != Some(&key) {
            // Released already, or finished by the provider's event.
            return Ok(None);
        }
        let mut write = account.write();
        write.account.plan_change = None;
        if declined.is_none() {
            apply_move(&mut write, plan, step, now);
        }
        Ok(Some(write))
    })
    .await?;
    match declined {
        None => Ok(Upgraded::Changed { plan }),
        Some(Ok(why)) => Err(CreditError::PaymentRequired(format!(
            "the payment for the {} plan was declined ({why}); the plan and credits are unchanged",
            plan.as_str()
        ))),
        Some(Err(error)) => Err(CreditError::Backend(error.context("changing the plan at the billing provider"))),
    }
}

/// What a plan change asks of the account and its provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    /// Already so.
    Nothing,
    /// Staying: the change scheduled for the period's end is called off.
    CallOff,
    /// Up (or between a family's billings): now.
    Now,
    /// Down (to free: the subscription ends): at the period's end.
    AtRenewal,
}

/// The reservation of a plan change still in progress, if one.
fn reserved(account: &Account, now: Timestamp) -> Option<&PlanReservation> {
    account.plan_change.as_ref().filter(|held| now < held.since.after(PLAN_CHANGE_HOLD))
}

fn in_progress(held: &PlanReservation) -> CreditError {
    CreditError::Conflict(format!(
        "a change to the {} plan is in progress since {}; try again when it is done",
        held.to.as_str(),
        held.since
    ))
}

/// The checks of a move of `account` to `plan` between paid plans or to free: what it
/// does, or why it is refused (before anything is asked of the provider).
fn plan_move(account: &Account, plan: PlanId, now: Timestamp) -> Result<Move, CreditError> {
    if plan == account.plan {
        return Ok(if account.scheduled_plan.is_some() { Move::CallOff } else { Move::Nothing });
    }
    if plan == PlanId::Free && (account.balance < 0 || awaiting_payment(account, now)) {
        return Err(CreditError::Invalid(format!(
            "the plan cannot change to free while credits are owed (balance {}, a top-up awaiting payment: {})",
            account.balance,
            awaiting_payment(account, now)
        )));
    }
    let now_move = plan.is_paid() && plan.rank() >= account.plan.rank();
    if let Some(status) = account.billing.status.filter(|status| now_move && !status.is_paid_up()) {
        return Err(CreditError::PaymentRequired(format!(
            "the subscription is {}: its unpaid invoice must be paid before the plan moves up",
            status.as_str()
        )));
    }
    Ok(if now_move { Move::Now } else { Move::AtRenewal })
}

/// Writes a move the provider made.
fn apply_move(write: &mut AccountWrite, plan: PlanId, step: Move, now: Timestamp) {
    let from = write.account.plan;
    let next = &mut write.account;
    match step {
        Move::Nothing => {}
        Move::CallOff => {
            next.scheduled_plan = None;
            next.canceled_at = None;
        }
        Move::Now => {
            let more = plan.plan().credits_per_month - from.plan().credits_per_month;
            if next.billing.paid_until.is_some() {
                // The provider's billing period restarts now, paid by the prorated invoice.
                next.billing.paid_until = Some(first_period_end(plan, now));
            }
            next.plan = plan;
            next.plan_started_at = now;
            next.period_start = now;
            next.scheduled_plan = None;
            next.canceled_at = None;
            if more > 0 {
                write.grant(more, Reason::PlanChange, now);
            }
        }
        Move::AtRenewal => {
            next.scheduled_plan = Some(plan);
            if plan == PlanId::Free {
                next.canceled_at = Some(now);
            }
        }
    }
}

/// Applies a paid purchase to the organization's account once: `once` names the
/// payment (a checkout, a provider's event, a top-up), and a second call with it changes
/// nothing. A plan starts now with its monthly credits; a top-up adds its credits.
pub async fn apply_purchase(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    purchase: &Purchase,
    once: &[&str],
    now: Timestamp,
) -> Result<Written, CreditError> {
    let (_, written) =
        change_account(repo, organization, now, |account| Ok(Some(purchase_write(account, purchase, once, None, now))))
            .await?;
    Ok(written)
}

/// The write of a paid purchase, keeping the provider's references given.
fn purchase_write(
    account: &Account,
    purchase: &Purchase,
    once: &[&str],
    refs: Option<&BillingRefs>,
    now: Timestamp,
) -> AccountWrite {
    let mut write = account.write();
    write.once = once.iter().map(|key| (*key).to_owned()).collect();
    if let Some(refs) = refs {
        let known = &mut write.account.billing;
        known.customer = refs.customer.clone().or(known.customer.take());
        known.subscription = refs.subscription.clone().or(known.subscription.take());
        known.paid_until = refs.paid_until;
    }
    match purchase {
        Purchase::Plan { plan } => {
            let next = &mut write.account;
            next.plan = *plan;
            next.plan_started_at = now;
            next.period_start = now;
            next.scheduled_plan = None;
            next.canceled_at = None;
            next.plan_change = None;
            // Paid: its checkout's payment is what this applies.
            next.billing.status = Some(SubscriptionStatus::Active);
            write.grant(plan.plan().credits_per_month, Reason::PlanChange, now);
        }
        Purchase::TopUp { quantity } => {
            let next = &mut write.account;
            let bought = |pending: &super::PendingTopUp| once.iter().any(|key| key.ends_with(&pending.purchase));
            if next.pending_top_up.as_ref().is_some_and(bought) {
                next.pending_top_up = None;
            }
            write.grant(i64::try_from(*quantity).unwrap_or(i64::MAX), Reason::TopUp, now);
        }
    }
    write
}

/// The end of the first billing period of `plan` bought at `now`.
fn first_period_end(plan: PlanId, now: Timestamp) -> Timestamp {
    match plan.plan().billing {
        super::plans::Billing::Annual => Timestamp::from_datetime(
            chrono::DateTime::from_timestamp_millis(now.unix_millis() as i64)
                .and_then(|at| at.checked_add_months(chrono::Months::new(12)))
                .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC),
        ),
        _ => period_at(now, now).1,
    }
}

/// The sandbox's subscription of a plan bought by checkout `id`.
fn sandbox_subscription(id: CheckoutId) -> String {
    format!("sandbox_sub_{id}")
}

/// The sandbox checkout page's completion: the purchase is applied once, as the
/// provider's event of a paid checkout is (a second subscription is refunded); a
/// canceled checkout cannot be completed.
pub async fn complete_checkout(ports: &CreditPorts<'_>, id: CheckoutId) -> Result<Checkout, CreditError> {
    let repo = ports.credits;
    let now = ports.clock.now();
    let mut checkout = repo.checkout(id).await?.ok_or(CreditError::NotFound)?;
    if checkout.provider_session.is_some() {
        // Another provider's checkout: paid there, completed by its event.
        return Err(CreditError::NotFound);
    }
    match checkout.status {
        CheckoutStatus::Canceled => Err(CreditError::Conflict("this checkout was canceled".into())),
        CheckoutStatus::Completed | CheckoutStatus::Refunded => Ok(checkout),
        CheckoutStatus::Open => match checkout.purchase {
            Purchase::Plan { plan } => {
                let organization = checkout.organization_id;
                let kind = BillingEventKind::PlanPaid {
                    organization,
                    checkout: id,
                    plan,
                    customer: Some(format!("sandbox_cus_{organization}")),
                    subscription: Some(sandbox_subscription(id)),
                    invoice: Some(format!("sandbox_in_{id}")),
                };
                apply_event(ports, &BillingEvent { id: format!("sandbox-complete-{id}"), kind }, now).await?;
                repo.checkout(id).await?.ok_or(CreditError::NotFound)
            }
            Purchase::TopUp { .. } => {
                let key = format!("checkout:{id}");
                apply_purchase(repo, checkout.organization_id, &checkout.purchase, &[&key], now).await?;
                checkout.status = CheckoutStatus::Completed;
                repo.put_checkout(&checkout).await?;
                Ok(checkout)
            }
        },
    }
}

/// The sandbox checkout page's cancel: an open checkout is canceled (a completed one
/// stays completed).
pub async fn cancel_checkout(repo: &dyn CreditRepo, id: CheckoutId) -> Result<Checkout, CreditError> {
    let mut checkout = repo.checkout(id).await?.ok_or(CreditError::NotFound)?;
    if checkout.status == CheckoutStatus::Open {
        checkout.status = CheckoutStatus::Canceled;
        repo.put_checkout(&checkout).await?;
    }
    Ok(checkout)
}

/// What the sandbox plays for the subscription a plan's checkout made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxOutcome {
    /// The renewal's payment failed and is retried (`past_due`): no monthly grant.
    PastDue,
    /// The retries gave up (`unpaid`): no monthly grant.
    Unpaid,
    /// The renewal's invoice is paid: `active`, and the period's grant is made.
    RenewalPaid,
    /// The provider ends the subscription: the organization is on free.
    Ended,
    /// The card on file declines from now (top-ups, moves up).
    CardDeclines,
    /// The card on file pays from now.
    CardPays,
}

impl SandboxOutcome {
    /// The outcome named by a sandbox page's action.
    pub fn parse(action: &str) -> Option<Self> {
        Some(match action {
            "past_due" => Self::PastDue,
            "unpaid" => Self::Unpaid,
            "renewal_paid" => Self::RenewalPaid,
            "end" => Self::Ended,
            "card_declines" => Self::CardDeclines,
            "card_pays" => Self::CardPays,
            _ => return None,
        })
    }
}

/// Plays `outcome` for the subscription checkout `id` made (sandbox only), through the
/// same event handling as the provider's.
pub async fn sandbox_outcome(
    ports: &CreditPorts<'_>,
    id: CheckoutId,
    outcome: SandboxOutcome,
) -> Result<Checkout, CreditError> {
    let checkout = ports.credits.checkout(id).await?.ok_or(CreditError::NotFound)?;
    let Some(sandbox) = ports.billing.sandbox() else { return Err(CreditError::NotFound) };
    if checkout.status != CheckoutStatus::Completed || !matches!(checkout.purchase, Purchase::Plan { .. }) {
        return Err(CreditError::Conflict("only a paid plan's checkout has a subscription to play outcomes of".into()));
    }
    let organization = checkout.organization_id;
    let subscription = sandbox_subscription(id);
    let now = ports.clock.now();
    let changed = |status| BillingEventKind::SubscriptionChanged {
        organization,
        subscription: subscription.clone(),
        status,
        plan: None,
        at: Some(now),
    };
    let kind = match outcome {
        SandboxOutcome::PastDue => changed(SubscriptionStatus::PastDue),
        SandboxOutcome::Unpaid => changed(SubscriptionStatus::Unpaid),
        // As the provider's `invoice.paid` of a renewal (the sandbox's periods are not
        // confirmed one by one: no period end).
        SandboxOutcome::RenewalPaid => {
            BillingEventKind::RenewalPaid { organization, subscription: subscription.clone(), paid_until: None }
        }
        SandboxOutcome::Ended => {
            BillingEventKind::SubscriptionEnded { organization, subscription: subscription.clone() }
        }
        SandboxOutcome::CardDeclines | SandboxOutcome::CardPays => {
            sandbox.set_declining(organization, outcome == SandboxOutcome::CardDeclines);
            return Ok(checkout);
        }
    };
    let event = BillingEvent { id: format!("sandbox-{}", uuid::Uuid::new_v4()), kind };
    apply_event(ports, &event, now).await?;
    Ok(checkout)
}

/// Whether a top-up bought within [`PENDING_TOP_UP_HOLD`] awaits its payment (an older
/// one is taken as failed: it holds nothing off).
pub(super) fn awaiting_payment(account: &Account, now: Timestamp) -> bool {
    account.pending_top_up.as_ref().is_some_and(|pending| now < pending.since.after(PENDING_TOP_UP_HOLD))
}

/// What an auto top-up did.
#[derive(Debug, PartialEq, Eq)]
pub enum ToppedUp {
    /// Auto top-up is off (or the plan has none, or its quantity is 0).
    Off,
    /// A purchase is awaiting payment.
    Pending,
    /// Credits were added.
    Granted,
    /// The month's ceiling (`auto_topup.monthly_limit`) is reached: nothing bought.
    LimitReached,
    /// The card was declined (now, or within the last task wait): nothing bought.
    Declined,
}

/// Buys credits when auto top-up is on: the setting's quantity (what a blocked task
/// lacks, `shortfall`, when more and the organization opted in with `cover_shortfall`);
/// within the monthly ceiling. One purchase at a time: while one awaits payment, nothing
/// more is bought; after a decline nothing is bought for `wait` (a blocked task's wait
/// for a top-up: one attempt per wait), the declined invoice voided by the provider.
pub async fn auto_top_up(
    ports: &CreditPorts<'_>,
    organization: OrganizationId,
    shortfall: u64,
    wait: Duration,
) -> Result<ToppedUp, CreditError> {
    let now = ports.clock.now();
    let purchase = uuid::Uuid::new_v4().to_string();
    let mut outcome = ToppedUp::Off;
    let (account, _) = change_account(ports.credits, organization, now, |account| {
        let settings = account.auto_topup;
        outcome = ToppedUp::Off;
        if !settings.enabled || !account.plan.allows_top_ups() {
            return Ok(None);
        }
        if account.pending_top_up.as_ref().is_some_and(|pending| pending.purchase == purchase) {
            // This call's own purchase, written before (its answer was lost): buy it.
            outcome = ToppedUp::Granted;
            return Ok(None);
        }
        outcome = ToppedUp::Pending;
        if awaiting_payment(account, now) {
            return Ok(None);
        }
        let low = account.balance < i64::try_from(settings.threshold).unwrap_or(i64::MAX);
        if shortfall == 0 && !low {
            outcome = ToppedUp::Off;
            return Ok(None);
        }
        if account.top_ups.declined_at.is_some_and(|at| now < at.after(wait)) {
            outcome = ToppedUp::Declined;
            return Ok(None);
        }
        let quantity = match settings.cover_shortfall {
            true => settings.quantity.max(shortfall),
            false => settings.quantity,
        };
        if quantity == 0 {
            outcome = ToppedUp::Off;
            return Ok(None);
        }
        let month = period_at(account.plan_started_at, now).0;
        let bought = bought_this_month(account, month);
        if bought.saturating_add(quantity) > settings.monthly_limit {
            outcome = ToppedUp::LimitReached;
            return Ok(None);
        }
        outcome = ToppedUp::Granted;
        let mut write = account.write();
        write.account.pending_top_up = Some(super::PendingTopUp { purchase: purchase.clone(), quantity, since: now });
        write.account.top_ups.start = Some(month);
        write.account.top_ups.bought = bought + quantity;
        Ok(Some(write))
    })
    .await?;
    if outcome == ToppedUp::LimitReached {
        tracing::warn!(%organization, limit = account.auto_topup.monthly_limit, "auto top-up's monthly ceiling is reached");
    }
    if outcome != ToppedUp::Granted {
        return Ok(outcome);
    }
    let Some(pending) = account.pending_top_up.clone() else { return Ok(ToppedUp::Off) };
    buy_top_up(ports, &account, &pending, now).await
}

/// Buys a reserved top-up from the billing provider: granted when paid, released when
/// declined (holding off the next one) or not bought at all.
async fn buy_top_up(
    ports: &CreditPorts<'_>,
    account: &Account,
    pending: &super::PendingTopUp,
    now: Timestamp,
) -> Result<ToppedUp, CreditError> {
    let organization = account.organization_id;
    let cents = account.plan.top_up_cents(pending.quantity);
    match ports.billing.top_up(account, &pending.purchase, pending.quantity, cents).await {
        Ok(TopUpState::Paid) => {
            let bought = Purchase::TopUp { quantity: pending.quantity };
            let key = format!("topup:{}", pending.purchase);
            apply_purchase(ports.credits, organization, &bought, &[&key], now).await?;
            tracing::info!(%organization, credits = pending.quantity, "auto top-up paid");
            Ok(ToppedUp::Granted)
        }
        Ok(TopUpState::Pending) => Ok(ToppedUp::Pending),
        Ok(TopUpState::Declined(why)) => {
            tracing::warn!(%organization, why, "an auto top-up was declined: none is tried again for one task wait");
            release_top_up(ports.credits, organization, &pending.purchase, true, None, now).await?;
            Ok(ToppedUp::Declined)
        }
        Err(error) => {
            // Not bought: the next shortage asks again.
            release_top_up(ports.credits, organization, &pending.purchase, false, None, now).await?;
            Err(CreditError::Backend(error.context(format!("buying {} credits", pending.quantity))))
        }
    }
}

/// Ends a top-up purchase not paid: it no longer awaits payment nor counts towards the
/// month's ceiling, and (`declined`) holds off the next one. Answers whether it was the
/// one awaiting payment.
async fn release_top_up(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    purchase: &str,
    declined: bool,
    once: Option<&str>,
    now: Timestamp,
) -> Result<bool, CreditError> {
    let mut found = false;
    let (_, written) = change_account(repo, organization, now, |account| {
        let pending = account.pending_top_up.as_ref().filter(|pending| pending.purchase == purchase);
        found = pending.is_some();
        let Some(pending) = pending else { return Ok(None) };
        let mut write = account.write();
        let next = &mut write.account;
        next.top_ups.bought = next.top_ups.bought.saturating_sub(pending.quantity);
        next.pending_top_up = None;
        if declined {
            next.top_ups.declined_at = Some(now);
        }
        write.once = once.into_iter().map(str::to_owned).collect();
        Ok(Some(write))
    })
    .await?;
    Ok(found && written == Written::Done)
}

/// Applies a verified billing event once (its payment's key is recorded with the
/// account's change; the event sent again changes nothing). Answers whether it changed
/// anything. A plan paid while the organization already has a subscription is ended and
/// refunded at the provider; a subscription's status and plan are taken from the
/// provider's.
pub async fn apply_event(ports: &CreditPorts<'_>, event: &BillingEvent, now: Timestamp) -> Result<bool, CreditError> {
    let repo = ports.credits;
    // The event's ID is recorded with the payment's own key: the same event sent again,
    // or another event of the same payment, changes nothing more.
    let event_key = format!("event:{}", event.id);
    match &event.kind {
        BillingEventKind::PlanPaid { organization, checkout, plan, customer, subscription, invoice } => {
            let payment = PlanPayment {
                organization: *organization,
                checkout: *checkout,
                plan: *plan,
                customer: customer.as_deref(),
                subscription: subscription.as_deref(),
                invoice: invoice.as_deref(),
            };
            plan_paid(ports, &payment, &event_key, now).await
        }
        BillingEventKind::TopUpPaid { organization, purchase, quantity } => {
            let bought = Purchase::TopUp { quantity: *quantity };
            let key = format!("topup:{purchase}");
            let written = apply_purchase(repo, *organization, &bought, &[&key, &event_key], now).await?;
            Ok(written == Written::Done)
        }
        BillingEventKind::TopUpFailed { organization, purchase, invoice } => {
            // Voided first (idempotent): nothing is collected from it later, and a
            // failure here has the provider send the event again.
            if let Some(invoice) = invoice {
                ports
                    .billing
                    // The key the top-up's own void used: one void a purchase.
                    .void_invoice(invoice, &format!("{purchase}-void"))
                    .await
                    .map_err(|error| CreditError::Backend(error.context("voiding a declined top-up's invoice")))?;
            }
            Ok(release_top_up(repo, *organization, purchase, true, Some(&event_key), now).await?)
        }
        BillingEventKind::SubscriptionChanged { organization, subscription, status, plan, at } => {
            if *status == SubscriptionStatus::Canceled {
                return subscription_ended(repo, *organization, subscription, &event_key, now).await;
            }
            let change = SubscriptionChange { subscription, status: *status, plan: *plan, at: *at };
            subscription_changed(repo, *organization, &change, &event_key, now).await
        }
        BillingEventKind::RenewalPaid { organization, subscription, paid_until } => {
            renewal_paid(repo, *organization, subscription, *paid_until, &event_key, now).await
        }
        BillingEventKind::SubscriptionEnded { organization, subscription } => {
            subscription_ended(repo, *organization, subscription, &event_key, now).await
        }
        BillingEventKind::Ignored(what) => {
            tracing::info!(event = %event.id, what, "billing event needs nothing");
            Ok(false)
        }
    }
}

/// A checkout's payment of a plan, as the provider's event tells it.
struct PlanPayment<'a> {
    organization: OrganizationId,
    checkout: CheckoutId,
    plan: PlanId,
    customer: Option<&'a str>,
    subscription: Option<&'a str>,
    invoice: Option<&'a str>,
}

/// A plan's checkout was paid: the plan and its credits are the organization's, unless
/// it already has a subscription that is not ended, in which case this second one is
/// ended and refunded at the provider.
async fn plan_paid(
    ports: &CreditPorts<'_>,
    payment: &PlanPayment<'_>,
    event_key: &str,
    now: Timestamp,
) -> Result<bool, CreditError> {
    let repo = ports.credits;
    let PlanPayment { organization, checkout, plan, customer, subscription, invoice } = *payment;
    let found = repo.checkout(checkout).await?;
    if found.as_ref().is_some_and(|found| found.status == CheckoutStatus::Refunded) {
        return Ok(false);
    }
    let purchase = Purchase::Plan { plan };
    // The checkout paid the first billing period: a later one waits for the provider to
    // confirm its renewal.
    let paid_until = ports.billing.confirms_renewals().then(|| first_period_end(plan, now));
    let refs = BillingRefs {
        customer: customer.map(str::to_owned),
        subscription: subscription.map(str::to_owned),
        status: None,
        paid_until,
    };
    let key = format!("checkout:{checkout}");
    let mut second = false;
    let (_, written) = change_account(repo, organization, now, |account| {
        // Another subscription is tracked and not ended: this one must not bill.
        second = subscription.is_some()
            && account.plan.is_paid()
            && account.billing.subscription.is_some()
            && account.billing.subscription.as_deref() != subscription
            && account.billing.status != Some(SubscriptionStatus::Canceled);
        if second {
            return Ok(None);
        }
        Ok(Some(purchase_write(account, &purchase, &[&key, event_key], Some(&refs), now)))
    })
    .await?;
    let mut refunded_now = false;
    let status = match second {
        false => CheckoutStatus::Completed,
        true => {
            let extra = subscription.unwrap_or_default();
            tracing::warn!(%organization, subscription = extra, "a second subscription was paid: ending and refunding it");
            ports
                .billing
                .cancel_and_refund(extra, invoice, &format!("second-checkout-{checkout}"))
                .await
                .map_err(|error| CreditError::Backend(error.context("ending a second subscription")))?;
            let (_, recorded) = change_account(repo, organization, now, |account| {
                let mut write = account.write();
                write.once = vec![key.clone(), event_key.to_owned()];
                Ok(Some(write))
            })
            .await?;
            // Recorded before (a redelivery): the checkout is still marked, in case the
            // first pass stopped between its keys and its checkout.
            refunded_now = recorded == Written::Done;
            CheckoutStatus::Refunded
        }
    };
    if let Some(mut found) = found {
        if found.status != status {
            found.status = status;
            repo.put_checkout(&found).await?;
        }
    }
    Ok(refunded_now || (!second && written == Written::Done))
}

/// A change of a subscription's status or plan, as the provider's event tells it.
struct SubscriptionChange<'a> {
    subscription: &'a str,
    status: SubscriptionStatus,
    plan: Option<PlanId>,
    /// When the provider made the change, if it says.
    at: Option<Timestamp>,
}

/// The provider's subscription changed: its status is taken, and so is its plan (a
/// reserved change it made, a cancel at the period's end, or another plan it bills).
async fn subscription_changed(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    change: &SubscriptionChange<'_>,
    event_key: &str,
    now: Timestamp,
) -> Result<bool, CreditError> {
    change_subscription(repo, organization, change.subscription, event_key, now, |account, write| {
        let mut changes = false;
        if account.billing.status != Some(change.status) {
            write.account.billing.status = Some(change.status);
            changes = true;
        }
        let newer = change.at.is_none_or(|at| at.unix_seconds() >= account.plan_started_at.unix_seconds());
        if let Some(plan) =
            change.plan.filter(|plan| newer && *plan != account.plan && account.scheduled_plan != Some(*plan))
        {
            changes |= follow_provider_plan(account, write, plan, change.status, now);
        }
        changes
    })
    .await
}

/// Changes the organization's account when `subscription` is the one it tracks (another
/// one, a second subscription, is ended when its checkout's payment is applied): `edit`
/// makes the change and answers whether it changed anything. The change is recorded once,
/// under the event's key; answers whether it was made now.
async fn change_subscription(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    subscription: &str,
    event_key: &str,
    now: Timestamp,
    edit: impl Fn(&Account, &mut AccountWrite) -> bool + Send + Sync,
) -> Result<bool, CreditError> {
    let mut changes = false;
    let (_, written) = change_account(repo, organization, now, |account| {
        changes = false;
        if account.billing.subscription.as_deref() != Some(subscription) {
            return Ok(None);
        }
        let mut write = account.write();
        changes = edit(account, &mut write);
        if !changes {
            return Ok(None);
        }
        write.once = vec![event_key.to_owned()];
        Ok(Some(write))
    })
    .await?;
    Ok(changes && written == Written::Done)
}

/// Makes the account's plan follow `plan`, the one the provider's subscription (in
/// `status`) bills; true when it changed anything.
fn follow_provider_plan(
    account: &Account,
    write: &mut AccountWrite,
    plan: PlanId,
    status: SubscriptionStatus,
    now: Timestamp,
) -> bool {
    match account.plan_change.as_ref().filter(|held| held.to == plan) {
        // The provider made the reserved change (its answer lost): made here.
        Some(_) if status.is_paid_up() => {
            let step = plan_move(account, plan, now).unwrap_or(Move::Nothing);
            write.account.plan_change = None;
            apply_move(write, plan, step, now);
            true
        }
        Some(_) => false,
        None if plan == PlanId::Free => {
            write.account.scheduled_plan = Some(PlanId::Free);
            write.account.canceled_at = write.account.canceled_at.or(Some(now));
            true
        }
        None => {
            // The provider bills another plan: ours follows (its credits come with its
            // next period).
            let organization = account.organization_id;
            tracing::warn!(%organization, from = account.plan.as_str(), to = plan.as_str(), "the plan is corrected from the billing provider's subscription");
            write.account.plan = plan;
            write.account.scheduled_plan = None;
            true
        }
    }
}

/// A renewal's invoice was paid: the subscription is settled and paid until the period
/// the invoice covers.
async fn renewal_paid(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    subscription: &str,
    paid_until: Option<Timestamp>,
    event_key: &str,
    now: Timestamp,
) -> Result<bool, CreditError> {
    change_subscription(repo, organization, subscription, event_key, now, |account, write| {
        let mut changes = false;
        // A paid invoice settles the subscription (Stripe's own status follows).
        let settled =
            account.billing.status.is_some_and(|status| !status.is_paid_up() && status != SubscriptionStatus::Canceled);
        if settled {
            write.account.billing.status = Some(SubscriptionStatus::Active);
            changes = true;
        }
        if let Some(until) = paid_until.filter(|until| account.billing.paid_until < Some(*until)) {
            write.account.billing.paid_until = Some(until);
            changes = true;
        }
        changes
    })
    .await
}

/// The provider ended the organization's subscription: it is on free from now.
async fn subscription_ended(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    subscription: &str,
    event_key: &str,
    now: Timestamp,
) -> Result<bool, CreditError> {
    change_subscription(repo, organization, subscription, event_key, now, |_, write| {
        let next = &mut write.account;
        next.plan = PlanId::Free;
        next.plan_started_at = now;
        next.period_start = now;
        next.scheduled_plan = None;
        next.plan_change = None;
        next.canceled_at = next.canceled_at.or(Some(now));
        next.billing.subscription = None;
        next.billing.status = None;
        next.billing.paid_until = None;
        next.auto_topup.enabled = false;
        true
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_period_grants_once_and_makes_the_scheduled_change() {
        let started = Timestamp::parse("2026-01-10T00:00:00.000Z").unwrap();
        let mut account = Account::opened(OrganizationId::new_v4(), PlanId::Professional, 40, started);
        account.seq = 3;
        account.usage = 25;
        account.scheduled_plan = Some(PlanId::Creator);
        assert!(period_due(&account, Timestamp::parse("2026-02-09T23:59:59.000Z").unwrap()).is_none());
        let now = Timestamp::parse("2026-03-15T00:00:00.000Z").unwrap();
        let write = period_due(&account, now).unwrap();
        assert_eq!(write.expected, 3);
        assert_eq!(write.account.plan, PlanId::Creator, "the downgrade waited for the period's end");
        assert_eq!(write.account.period_start, Timestamp::parse("2026-03-10T00:00:00.000Z").unwrap());
        assert_eq!(write.account.balance, 40 + 2_500, "one grant for the period now, not for those missed");
        assert_eq!(write.account.usage, 0);
        assert_eq!(write.entries.len(), 1);
        assert!(period_due(&write.account, now).is_none(), "granted: nothing more is due");
    }

    #[test]
    fn a_period_not_paid_for_grants_nothing() {
        let started = Timestamp::parse("2026-01-10T00:00:00.000Z").unwrap();
        let now = Timestamp::parse("2026-02-15T00:00:00.000Z").unwrap();
        let mut account = Account::opened(OrganizationId::new_v4(), PlanId::Creator, 0, started);
        account.seq = 2;
        for status in [SubscriptionStatus::PastDue, SubscriptionStatus::Unpaid, SubscriptionStatus::Incomplete] {
            account.billing.status = Some(status);
            assert!(period_due(&account, now).is_none(), "{status:?}");
        }
        account.billing.status = Some(SubscriptionStatus::Active);
        account.billing.paid_until = Some(Timestamp::parse("2026-02-10T00:00:00.000Z").unwrap());
        assert!(period_due(&account, now).is_none(), "the renewal of 10 February is not confirmed");
        account.billing.paid_until = Some(Timestamp::parse("2026-03-10T00:00:00.000Z").unwrap());
        assert_eq!(period_due(&account, now).unwrap().account.balance, 2_500);
        // Free is granted on the calendar whatever a past subscription said.
        account.plan = PlanId::Free;
        account.billing.status = Some(SubscriptionStatus::PastDue);
        assert_eq!(period_due(&account, now).unwrap().account.balance, 100);
    }

    #[test]
    fn settlements_never_take_the_balance_below_zero() {
        let mut write = Account::opened(OrganizationId::new_v4(), PlanId::Free, 3, Timestamp::now()).write();
        let (first, second) =
            (crate::domain::graph::AgentNodeId::new_v4(), crate::domain::graph::AgentNodeId::new_v4());
        let movement = super::super::CreditMove {
            amount: -5,
            reason: Reason::TaskSettlement,
            run_id: None,
            agent_node_id: Some(first),
            task: Some(1),
            cover: super::super::Cover::UpToBalance,
            lines: vec![
                super::super::LedgerLine { agent_node_id: first, amount: -2 },
                super::super::LedgerLine { agent_node_id: second, amount: -3 },
            ],
        };
        write.apply(&movement, Timestamp::now());
        assert_eq!(write.account.balance, 0);
        assert_eq!(write.entries[0].amount, -3);
        assert_eq!(write.account.usage, 3);
        // The lines still add up to what was taken: what was not comes off the chain's first.
        let lines: Vec<(crate::domain::graph::AgentNodeId, i64)> =
            write.entries[0].lines.iter().map(|line| (line.agent_node_id, line.amount)).collect();
        assert_eq!(lines, [(second, -3)]);
    }

    #[test]
    fn cursors_round_trip_and_others_are_refused() {
        let entry = LedgerEntry {
            entry_id: super::super::LedgerEntryId::new_v4(),
            created_at: Timestamp::now(),
            amount: 1,
            balance_after: 1,
            reason: Reason::TopUp,
            run_id: None,
            agent_node_id: None,
            task: None,
            lines: Vec::new(),
            seq: 42,
            position: 3,
        };
        assert_eq!(decode_cursor(&encode_cursor(&entry)), Some((42, 3)));
        assert_eq!(decode_cursor("not a cursor"), None);
    }
}
