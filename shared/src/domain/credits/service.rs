//! The plan and credit operations: the account as of now (periods granted), the views of
//! `GET /plan`, `GET /plan/list` and `GET /credits`, auto top-up settings, the ledger,
//! upgrades and their checkouts, and top-ups. Every change is an account write under the
//! sequence number read, retried on a conflict.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Map, Value};

use super::billing::{BillingEvent, BillingEventKind, BillingProvider, TopUpState};
use super::plans::{period_at, PlanId};
use super::{
    Account, AccountWrite, BillingRefs, Checkout, CheckoutId, CheckoutStatus, CreditRepo, LedgerEntry, Purchase,
    Reason, Written, MAX_TOP_UP_SETTING,
};
use crate::core::retry::ACCOUNT_CONFLICTS;
use crate::domain::identity::OrganizationId;
use crate::domain::time::{Clock, Timestamp};

/// A top-up asked for and not paid holds off the next one this long.
pub const PENDING_TOP_UP_HOLD: Duration = Duration::from_secs(3600);
/// Longest `success_url` or `cancel_url`.
const MAX_URL_BYTES: usize = 2_048;
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
    /// 409: the checkout cannot be completed.
    #[error("{0}")]
    Conflict(String),
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

/// Writes a change of the organization's current account, made by `change` (None:
/// nothing to write), until it lands; returns the account as written (or as read).
async fn change_account(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    now: Timestamp,
    mut change: impl FnMut(&Account) -> Result<Option<AccountWrite>, CreditError>,
) -> Result<(Account, Written), CreditError> {
    let mut retry = ACCOUNT_CONFLICTS.start();
    loop {
        let account = current(repo, organization, now).await?;
        let Some(write) = change(&account)? else { return Ok((account, Written::Done)) };
        match repo.write_account(&write).await? {
            Written::Conflict => {}
            written => return Ok((write.account, written)),
        }
        retry
            .wait(format!("the credit account of {organization} was changed by another writer"))
            .await
            .map_err(|unavailable| CreditError::Backend(anyhow::Error::from(unavailable)))?;
    }
}

/// The organization's account as of `now`: the included credits of a period begun since
/// the last grant are granted (once, whoever asks at the same time), and a plan change
/// scheduled for the period's end is made.
pub async fn current(repo: &dyn CreditRepo, organization: OrganizationId, now: Timestamp) -> anyhow::Result<Account> {
    let mut retry = ACCOUNT_CONFLICTS.start();
    loop {
        let account = repo.account(organization).await?;
        let write = match account.seq {
            // Never stored (an organization from before credits): opened with the plan
            // and credits its record holds, as its opening balance.
            0 => {
                let mut write = Account { balance: 0, ..account.clone() }.write();
                write.grant(account.balance, Reason::OpeningBalance, now);
                Some(write)
            }
            _ => period_due(&account, now),
        };
        let Some(write) = write else { return Ok(account) };
        match repo.write_account(&write).await? {
            Written::Done => return Ok(write.account),
            Written::Conflict | Written::AlreadyDone => {}
        }
        retry.wait(format!("the credit account of {organization} was changed by another writer")).await?;
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

/// `GET /plan`.
pub fn plan_view(account: &Account, now: Timestamp) -> Value {
    let (start, end) = period_at(account.plan_started_at, now);
    let plan = account.plan.plan();
    json!({
        "organization_id": account.organization_id,
        "plan": {
            "id": account.plan.as_str(),
            "family": account.plan.family(),
            "status": "active",
            "started_at": account.plan_started_at,
            "current_period_start": start,
            "current_period_end": end,
            "canceled_at": account.canceled_at,
        },
        "scheduled_plan": account.scheduled_plan.map(PlanId::as_str),
        "credits": {
            "balance": account.balance,
            "usage": account.usage,
            "included_usage": plan.credits_per_month,
            "unlimited": false,
        },
    })
}

/// `GET /plan/list`.
pub fn plans_view() -> Value {
    let plans: Vec<Value> = PlanId::ALL.iter().map(|plan| json!(plan.plan())).collect();
    json!({ "plans": plans })
}

/// `GET /credits` (and the answer of `POST /credits/settings`).
pub fn credits_view(account: &Account) -> Value {
    json!({
        "balance": account.balance,
        "usage": account.usage,
        "auto_topup": account.auto_topup,
    })
}

/// A body's object, refusing other types and properties not in `known`.
fn object<'a>(value: &'a Value, what: &str, known: &[&str]) -> Result<&'a Map<String, Value>, CreditError> {
    let map = value.as_object().ok_or_else(|| CreditError::Invalid(format!("{what} must be a JSON object")))?;
    if let Some(unknown) = map.keys().find(|key| !known.contains(&key.as_str())) {
        return Err(CreditError::Invalid(format!(
            "{what}: unknown property {unknown:?}; allowed: {}",
            known.join(", ")
        )));
    }
    Ok(map)
}

/// `POST /credits/settings {auto_topup: {enabled, threshold, quantity}}`: each number a
/// whole 0–1,000,000; fields left out keep their value. 403 unless a paid plan.
pub async fn update_settings(
    ports: &CreditPorts<'_>,
    organization: OrganizationId,
    body: &Value,
) -> Result<Account, CreditError> {
    let settings = object(body, "the body", &["auto_topup"])?;
    let given = settings.get("auto_topup").ok_or_else(|| CreditError::Invalid("auto_topup is required".into()))?;
    let fields = object(given, "auto_topup", &["enabled", "threshold", "quantity"])?;
    let enabled = match fields.get("enabled") {
        None => None,
        Some(Value::Bool(enabled)) => Some(*enabled),
        Some(_) => return Err(CreditError::Invalid("auto_topup.enabled must be true or false".into())),
    };
    let number = |name: &str| -> Result<Option<u64>, CreditError> {
        match fields.get(name) {
            None => Ok(None),
            Some(value) => match value.as_u64().filter(|number| *number <= MAX_TOP_UP_SETTING) {
                Some(number) => Ok(Some(number)),
                None => Err(CreditError::Invalid(format!(
                    "auto_topup.{name} must be a whole number from 0 to {MAX_TOP_UP_SETTING}, not {value}"
                ))),
            },
        }
    };
    let (threshold, quantity) = (number("threshold")?, number("quantity")?);
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

/// The ledger page's JSON.
pub fn ledger_view(page: &LedgerPage) -> Value {
    let entries: Vec<Value> = page
        .entries
        .iter()
        .map(|entry| {
            json!({
                "entry_id": entry.entry_id,
                "created_at": entry.created_at,
                "amount": entry.amount,
                "balance_after": entry.balance_after,
                "reason": entry.reason,
                "run_id": entry.run_id,
                "agent_node_id": entry.agent_node_id,
                "task": entry.task,
                "lines": entry.lines,
            })
        })
        .collect();
    json!({ "entries": entries, "next_cursor": page.next_cursor })
}

/// What an upgrade did.
#[derive(Debug, PartialEq, Eq)]
pub enum Upgraded {
    /// The caller finishes the purchase at `url`.
    Checkout { url: String, plan: PlanId },
    /// Changed (or scheduled for the period's end) without a payment step.
    Changed { plan: PlanId },
}

/// A `success_url` or `cancel_url`: an absolute http(s) URL.
fn return_url(fields: &Map<String, Value>, name: &str) -> Result<Option<String>, CreditError> {
    match fields.get(name) {
        None => Ok(None),
        Some(Value::String(text)) => {
            let parsed = url::Url::parse(text).ok().filter(|url| matches!(url.scheme(), "http" | "https"));
            match parsed {
                Some(_) if text.len() <= MAX_URL_BYTES => Ok(Some(text.clone())),
                _ => Err(CreditError::Invalid(format!(
                    "{name} must be an absolute http or https URL of at most {MAX_URL_BYTES} bytes"
                ))),
            }
        }
        Some(_) => Err(CreditError::Invalid(format!("{name} must be a string"))),
    }
}

/// `POST /plan/upgrade {plan_id, success_url?, cancel_url?}`. From free: a checkout
/// (the plan starts when it is paid). Between paid plans: up a family, or between a
/// family's monthly and annual billing, at once (a move up grants the difference in
/// monthly credits now and starts a new period); down a family, at the period's end.
/// To free: at the period's end, refused while credits are owed.
pub async fn upgrade(
    ports: &CreditPorts<'_>,
    organization: OrganizationId,
    body: &Value,
) -> Result<Upgraded, CreditError> {
    let fields = object(body, "the body", &["plan_id", "success_url", "cancel_url"])?;
    let plan_id = match fields.get("plan_id") {
        Some(Value::String(text)) => text,
        Some(_) => return Err(CreditError::Invalid("plan_id must be a string".into())),
        None => return Err(CreditError::Invalid("plan_id is required".into())),
    };
    let known = PlanId::ALL.map(PlanId::as_str).join(", ");
    let plan = PlanId::parse(plan_id)
        .ok_or_else(|| CreditError::Invalid(format!("plan_id: {plan_id:?} is not a plan; plans are {known}")))?;
    let (success_url, cancel_url) = (return_url(fields, "success_url")?, return_url(fields, "cancel_url")?);
    let now = ports.clock.now();
    let account = current(ports.credits, organization, now).await?;
    // From free, or from a paid plan the provider holds no subscription of (seeded): a
    // checkout.
    let checkout_first = account.plan == PlanId::Free || !ports.billing.has_subscription(&account);
    if checkout_first && plan.is_paid() && plan != account.plan {
        if success_url.is_none() && !ports.billing.has_return_url() {
            return Err(CreditError::Invalid(
                "success_url is required: this deployment has no public address to send the caller back to".into(),
            ));
        }
        let checkout = Checkout {
            id: CheckoutId::new_v4(),
            organization_id: organization,
            purchase: Purchase::Plan { plan },
            status: CheckoutStatus::Open,
            success_url,
            cancel_url,
            created_at: now,
            provider_session: None,
        };
        let opened = ports.billing.open_checkout(&checkout, &account).await?;
        let checkout = Checkout { provider_session: opened.provider_session, ..checkout };
        ports.credits.put_checkout(&checkout).await?;
        return Ok(Upgraded::Checkout { url: opened.url, plan });
    }
    let immediate = plan.is_paid() && (plan.rank() >= account.plan.rank());
    if plan != account.plan {
        // The provider's subscription follows: at once (prorated), or from its next
        // renewal for a move down (to free: it ends then).
        ports.billing.change_plan(&account, plan, !immediate).await?;
    } else if account.scheduled_plan.is_some() {
        // A change scheduled for the period's end is called off: the subscription stays.
        ports.billing.change_plan(&account, plan, true).await?;
    }
    change_account(ports.credits, organization, now, |account| {
        let mut write = account.write();
        let next = &mut write.account;
        if plan == account.plan {
            // Staying: a change scheduled for the period's end is called off.
            if next.scheduled_plan.is_none() {
                return Ok(None);
            }
            next.scheduled_plan = None;
            next.canceled_at = None;
            return Ok(Some(write));
        }
        if plan == PlanId::Free && (account.balance < 0 || awaiting_payment(account, now)) {
            return Err(CreditError::Invalid(format!(
                "the plan cannot change to free while credits are owed (balance {}, a top-up awaiting payment: {})",
                account.balance,
                awaiting_payment(account, now)
            )));
        }
        if immediate {
            let more = plan.plan().credits_per_month - account.plan.plan().credits_per_month;
            next.plan = plan;
            next.plan_started_at = now;
            next.period_start = now;
            next.scheduled_plan = None;
            next.canceled_at = None;
            if more > 0 {
                write.grant(more, Reason::PlanChange, now);
            }
        } else {
            next.scheduled_plan = Some(plan);
            if plan == PlanId::Free {
                next.canceled_at = Some(now);
            }
        }
        Ok(Some(write))
    })
    .await?;
    Ok(Upgraded::Changed { plan })
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
    apply_purchase_with(repo, organization, purchase, once, now, None).await
}

/// [`apply_purchase`], keeping the provider's references given.
async fn apply_purchase_with(
    repo: &dyn CreditRepo,
    organization: OrganizationId,
    purchase: &Purchase,
    once: &[&str],
    now: Timestamp,
    refs: Option<BillingRefs>,
) -> Result<Written, CreditError> {
    let (_, written) = change_account(repo, organization, now, |account| {
        let mut write = account.write();
        write.once = once.iter().map(|key| (*key).to_owned()).collect();
        if let Some(refs) = &refs {
            let known = &mut write.account.billing;
            known.customer = refs.customer.clone().or(known.customer.take());
            known.subscription = refs.subscription.clone().or(known.subscription.take());
        }
        match purchase {
            Purchase::Plan { plan } => {
                let next = &mut write.account;
                next.plan = *plan;
                next.plan_started_at = now;
                next.period_start = now;
                next.scheduled_plan = None;
                next.canceled_at = None;
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
        Ok(Some(write))
    })
    .await?;
    Ok(written)
}

/// The sandbox checkout page's completion: the purchase is applied once; a canceled
/// checkout cannot be completed.
pub async fn complete_checkout(repo: &dyn CreditRepo, id: CheckoutId, now: Timestamp) -> Result<Checkout, CreditError> {
    let mut checkout = repo.checkout(id).await?.ok_or(CreditError::NotFound)?;
    if checkout.provider_session.is_some() {
        // Another provider's checkout: paid there, completed by its event.
        return Err(CreditError::NotFound);
    }
    match checkout.status {
        CheckoutStatus::Canceled => Err(CreditError::Conflict("this checkout was canceled".into())),
        CheckoutStatus::Completed => Ok(checkout),
        CheckoutStatus::Open => {
            let key = format!("checkout:{id}");
            apply_purchase(repo, checkout.organization_id, &checkout.purchase, &[&key], now).await?;
            checkout.status = CheckoutStatus::Completed;
            repo.put_checkout(&checkout).await?;
            Ok(checkout)
        }
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

/// Whether a top-up bought within [`PENDING_TOP_UP_HOLD`] awaits its payment (an older
/// one is taken as failed: it holds nothing off).
fn awaiting_payment(account: &Account, now: Timestamp) -> bool {
    account.pending_top_up.as_ref().is_some_and(|pending| now < pending.since.after(PENDING_TOP_UP_HOLD))
}

/// What an auto top-up did.
#[derive(Debug, PartialEq, Eq)]
pub enum ToppedUp {
    /// Auto top-up is off (or the plan has none).
    Off,
    /// A purchase is awaiting payment.
    Pending,
    /// Credits were added.
    Granted,
}

/// Buys credits when auto top-up is on: `shortfall` credits at least (what a blocked
/// task lacks; 0 when the balance fell below the threshold), the setting's quantity
/// otherwise. One purchase at a time: while one awaits payment, nothing more is bought.
pub async fn auto_top_up(
    ports: &CreditPorts<'_>,
    organization: OrganizationId,
    shortfall: u64,
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
        outcome = ToppedUp::Granted;
        let mut write = account.write();
        let quantity = settings.quantity.max(shortfall).max(1);
        write.account.pending_top_up = Some(super::PendingTopUp { purchase: purchase.clone(), quantity, since: now });
        Ok(Some(write))
    })
    .await?;
    if outcome != ToppedUp::Granted {
        return Ok(outcome);
    }
    let Some(pending) = account.pending_top_up.clone() else { return Ok(ToppedUp::Off) };
    let cents = account.plan.top_up_cents(pending.quantity);
    match ports.billing.top_up(&account, &pending.purchase, pending.quantity, cents).await {
        Ok(TopUpState::Paid) => {
            let bought = Purchase::TopUp { quantity: pending.quantity };
            let key = format!("topup:{}", pending.purchase);
            apply_purchase(ports.credits, organization, &bought, &[&key], now).await?;
            tracing::info!(%organization, credits = pending.quantity, "auto top-up paid");
            Ok(ToppedUp::Granted)
        }
        Ok(TopUpState::Pending) => Ok(ToppedUp::Pending),
        Err(error) => {
            // Not bought: the next shortage asks again.
            change_account(ports.credits, organization, now, |account| {
                if account.pending_top_up.as_ref().map(|p| &p.purchase) != Some(&pending.purchase) {
                    return Ok(None);
                }
                let mut write = account.write();
                write.account.pending_top_up = None;
                Ok(Some(write))
            })
            .await?;
            Err(CreditError::Backend(error.context(format!("buying {} credits", pending.quantity))))
        }
    }
}

/// Applies a verified billing event once (its payment's key is recorded with the
/// account's change; the event sent again changes nothing). Answers whether it changed
/// anything.
pub async fn apply_event(repo: &dyn CreditRepo, event: &BillingEvent, now: Timestamp) -> Result<bool, CreditError> {
    // The event's ID is recorded with the payment's own key: the same event sent again,
    // or another event of the same payment, changes nothing more.
    let event_key = format!("event:{}", event.id);
    match &event.kind {
        BillingEventKind::PlanPaid { organization, checkout, plan, customer, subscription } => {
            let purchase = Purchase::Plan { plan: *plan };
            let refs = BillingRefs { customer: customer.clone(), subscription: subscription.clone() };
            let key = format!("checkout:{checkout}");
            let written =
                apply_purchase_with(repo, *organization, &purchase, &[&key, &event_key], now, Some(refs)).await?;
            if let Some(mut found) = repo.checkout(*checkout).await? {
                if found.status != CheckoutStatus::Completed {
                    found.status = CheckoutStatus::Completed;
                    repo.put_checkout(&found).await?;
                }
            }
            Ok(written == Written::Done)
        }
        BillingEventKind::TopUpPaid { organization, purchase, quantity } => {
            let bought = Purchase::TopUp { quantity: *quantity };
            let key = format!("topup:{purchase}");
            let written = apply_purchase(repo, *organization, &bought, &[&key, &event_key], now).await?;
            Ok(written == Written::Done)
        }
        BillingEventKind::TopUpFailed { organization, purchase } => {
            let mut changes = false;
            let (_, written) = change_account(repo, *organization, now, |account| {
                changes = account.pending_top_up.as_ref().map(|pending| &pending.purchase) == Some(purchase);
                if !changes {
                    return Ok(None);
                }
                let mut write = account.write();
                write.account.pending_top_up = None;
                write.once = vec![event_key.clone()];
                Ok(Some(write))
            })
            .await?;
            Ok(changes && written == Written::Done)
        }
        BillingEventKind::SubscriptionEnded { organization, subscription } => {
            let mut changes = false;
            let (_, written) = change_account(repo, *organization, now, |account| {
                changes = account.billing.subscription.as_deref() == Some(subscription.as_str());
                if !changes {
                    return Ok(None);
                }
                let mut write = account.write();
                let next = &mut write.account;
                next.plan = PlanId::Free;
                next.plan_started_at = now;
                next.period_start = now;
                next.scheduled_plan = None;
                next.canceled_at = next.canceled_at.or(Some(now));
                next.billing.subscription = None;
                next.auto_topup.enabled = false;
                write.once = vec![event_key.clone()];
                Ok(Some(write))
            })
            .await?;
            Ok(changes && written == Written::Done)
        }
        BillingEventKind::Ignored(what) => {
            tracing::info!(event = %event.id, what, "billing event needs nothing");
            Ok(false)
        }
    }
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
