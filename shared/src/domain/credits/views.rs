//! How an organization's plan and credits are shown: `GET /plan`, and `GET /credits`
//! (also the answer of `POST /credits/settings`). Each view is the type serialized and
//! the schema the OpenAPI document gives.

use serde::Serialize;
use utoipa::ToSchema;

use super::plans::{period_at, PlanId};
use super::service::{awaiting_payment, bought_this_month};
use super::{Account, AutoTopUp, SubscriptionStatus};
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;

/// `GET /plan`
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PlanAnswer)]
pub struct PlanView {
    #[schema(value_type = uuid::Uuid)]
    pub organization_id: OrganizationId,
    pub plan: PlanState,
    /// The plan that takes over at the period's end (a downgrade), if one.
    #[schema(required = true)]
    pub scheduled_plan: Option<PlanId>,
    pub credits: PlanCredits,
}

/// The organization's plan: its monthly periods count from `started_at`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanState {
    pub id: PlanId,
    /// The plan ID without `_annual`.
    pub family: &'static str,
    /// The subscription's state: `active`, `past_due` or `unpaid` (a renewal not
    /// paid: no monthly grant until it is), `incomplete`.
    pub status: &'static str,
    pub started_at: Timestamp,
    pub current_period_start: Timestamp,
    pub current_period_end: Timestamp,
    /// When a change to free was asked for (it takes effect at the period's end).
    #[schema(required = true)]
    pub canceled_at: Option<Timestamp>,
}

/// The organization's credits on its plan.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanCredits {
    pub balance: i64,
    /// Credits spent in the current period.
    pub usage: i64,
    /// Credits the plan grants each month.
    pub included_usage: i64,
    pub unlimited: bool,
}

/// `GET /credits`
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreditsAnswer)]
pub struct CreditsView {
    pub balance: i64,
    /// Credits spent in the current period.
    pub usage: i64,
    pub auto_topup: AutoTopUp,
    pub auto_topup_month: AutoTopUpMonth,
}

/// Where auto top-up stands in the plan's current monthly period.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AutoTopUpMonth {
    pub period_start: Timestamp,
    /// Credits bought (or awaiting payment) this period.
    pub bought: u64,
    /// `off`, `ready`, `awaiting_payment`, or `limit_reached` (the next top-up would pass
    /// `monthly_limit`: nothing is bought until the next period or a higher limit).
    pub state: AutoTopUpState,
    /// When the card was last declined: no top-up is tried for one task wait after it.
    #[schema(required = true)]
    pub declined_at: Option<Timestamp>,
}

/// Where auto top-up stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AutoTopUpState {
    Off,
    Ready,
    AwaitingPayment,
    LimitReached,
}

/// `GET /plan`.
pub fn plan_view(account: &Account, now: Timestamp) -> PlanView {
    let (start, end) = period_at(account.plan_started_at, now);
    PlanView {
        organization_id: account.organization_id,
        plan: PlanState {
            id: account.plan,
            family: account.plan.family(),
            status: account.billing.status.map_or("active", SubscriptionStatus::as_str),
            started_at: account.plan_started_at,
            current_period_start: start,
            current_period_end: end,
            canceled_at: account.canceled_at,
        },
        scheduled_plan: account.scheduled_plan,
        credits: PlanCredits {
            balance: account.balance,
            usage: account.usage,
            included_usage: account.plan.plan().credits_per_month,
            unlimited: false,
        },
    }
}

/// `GET /credits` (and the answer of `POST /credits/settings`).
pub fn credits_view(account: &Account, now: Timestamp) -> CreditsView {
    let month = period_at(account.plan_started_at, now).0;
    let bought = bought_this_month(account, month);
    let auto = account.auto_topup;
    let state = if !auto.enabled || !account.plan.allows_top_ups() {
        AutoTopUpState::Off
    } else if awaiting_payment(account, now) {
        AutoTopUpState::AwaitingPayment
    } else if bought.saturating_add(auto.quantity.max(1)) > auto.monthly_limit {
        AutoTopUpState::LimitReached
    } else {
        AutoTopUpState::Ready
    };
    CreditsView {
        balance: account.balance,
        usage: account.usage,
        auto_topup: auto,
        auto_topup_month: AutoTopUpMonth {
            period_start: month,
            bought,
            state,
            declined_at: account.top_ups.declined_at,
        },
    }
}
