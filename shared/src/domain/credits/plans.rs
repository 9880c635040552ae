//! The plans an organization may be on (ARCHITECTURE §6), and the monthly periods their
//! included credits are granted for.

use chrono::{DateTime, Months, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::time::Timestamp;

/// A plan, by its ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(description = "A plan's ID.")]
#[serde(rename_all = "snake_case")]
pub enum PlanId {
    Free,
    Creator,
    CreatorAnnual,
    Professional,
    ProfessionalAnnual,
}

/// How a plan is billed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = PlanBilling)]
#[serde(rename_all = "snake_case")]
pub enum Billing {
    Free,
    Monthly,
    Annual,
}

/// What a plan costs and gives.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PlanOffer, description = "A plan one can be on.")]
pub struct Plan {
    pub id: PlanId,
    pub billing: Billing,
    /// Per billing period (a month, or a year for the annual plans).
    pub price_usd: u32,
    /// Granted at the start of every monthly period (annual plans too).
    pub credits_per_month: i64,
    /// What a top-up of 100 credits costs; null where the plan buys none.
    #[schema(required = true)]
    pub top_up_rate_per_100_credits_usd: Option<f64>,
    pub notes: &'static str,
}

impl PlanId {
    pub const ALL: [PlanId; 5] =
        [Self::Free, Self::Creator, Self::CreatorAnnual, Self::Professional, Self::ProfessionalAnnual];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Free => "free",
            Self::Creator => "creator",
            Self::CreatorAnnual => "creator_annual",
            Self::Professional => "professional",
            Self::ProfessionalAnnual => "professional_annual",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|plan| plan.as_str() == text)
    }

    /// The plan ID without `_annual`.
    pub fn family(self) -> &'static str {
        self.as_str().trim_end_matches("_annual")
    }

    /// Free 0, creator 1, professional 2: an upgrade moves up.
    pub fn rank(self) -> u8 {
        match self {
            Self::Free => 0,
            Self::Creator | Self::CreatorAnnual => 1,
            Self::Professional | Self::ProfessionalAnnual => 2,
        }
    }

    pub fn is_paid(self) -> bool {
        self != Self::Free
    }

    /// Auto top-ups and their settings are for the paid plans only.
    pub fn allows_top_ups(self) -> bool {
        self.is_paid()
    }

    pub fn plan(self) -> Plan {
        let (billing, price_usd, credits_per_month, rate, notes) = match self {
            Self::Free => (Billing::Free, 0, 100, None, "100 credits a month; no top-ups"),
            Self::Creator => (Billing::Monthly, 50, 2_500, Some(2.0), "2,500 credits a month"),
            Self::CreatorAnnual => {
                (Billing::Annual, 500, 2_500, Some(2.0), "creator billed yearly: 2,500 credits each month")
            }
            Self::Professional => (Billing::Monthly, 150, 10_000, Some(1.5), "10,000 credits a month"),
            Self::ProfessionalAnnual => {
                (Billing::Annual, 1_500, 10_000, Some(1.5), "professional billed yearly: 10,000 credits each month")
            }
        };
        Plan { id: self, billing, price_usd, credits_per_month, top_up_rate_per_100_credits_usd: rate, notes }
    }

    /// What `quantity` credits cost as a top-up, in cents (rounded up).
    pub fn top_up_cents(self, quantity: u64) -> u64 {
        let rate = self.plan().top_up_rate_per_100_credits_usd.unwrap_or(0.0);
        // Cents per 100 credits, then per credit, rounded up.
        let per_hundred = (rate * 100.0).round() as u64;
        (quantity.saturating_mul(per_hundred)).div_ceil(100)
    }
}

/// The monthly period of a plan started at `started` that holds `now`: its start and end.
/// Periods begin on the start's day of the month (the month's last day when it is shorter).
pub fn period_at(started: Timestamp, now: Timestamp) -> (Timestamp, Timestamp) {
    let anchor = datetime(started);
    let at = datetime(now);
    if at <= anchor {
        return (started, month_after(anchor, 1));
    }
    // A first guess from the calendar, corrected by a step either way.
    let months = months_between(anchor, at);
    let mut k = months.saturating_sub(1);
    while add_months(anchor, k + 1) <= at {
        k += 1;
    }
    (Timestamp::from_datetime(add_months(anchor, k)), month_after(anchor, k + 1))
}

fn datetime(at: Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.unix_millis() as i64).unwrap_or_default()
}

fn add_months(anchor: DateTime<Utc>, months: u32) -> DateTime<Utc> {
    anchor.checked_add_months(Months::new(months)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn month_after(anchor: DateTime<Utc>, months: u32) -> Timestamp {
    Timestamp::from_datetime(add_months(anchor, months))
}

fn months_between(from: DateTime<Utc>, to: DateTime<Utc>) -> u32 {
    use chrono::Datelike;
    let months = (to.year() - from.year()) * 12 + to.month() as i32 - from.month() as i32;
    months.max(0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    #[test]
    fn periods_start_on_the_plans_day_of_the_month() {
        let started = at("2026-01-31T10:00:00.000Z");
        assert_eq!(
            period_at(started, at("2026-01-31T10:00:00.000Z")),
            (started, at("2026-02-28T10:00:00.000Z")),
            "the first period; February has no 31st"
        );
        assert_eq!(
            period_at(started, at("2026-03-30T09:00:00.000Z")),
            (at("2026-02-28T10:00:00.000Z"), at("2026-03-31T10:00:00.000Z"))
        );
        assert_eq!(
            period_at(started, at("2026-03-31T10:00:00.000Z")),
            (at("2026-03-31T10:00:00.000Z"), at("2026-04-30T10:00:00.000Z")),
            "a period's start belongs to it"
        );
        assert_eq!(period_at(started, at("2025-12-01T00:00:00.000Z")).0, started, "before the start: the first");
    }

    #[test]
    fn plans_and_their_families() {
        assert_eq!(PlanId::parse("creator_annual"), Some(PlanId::CreatorAnnual));
        assert_eq!(PlanId::CreatorAnnual.family(), "creator");
        assert_eq!(PlanId::parse("enterprise"), None);
        assert_eq!(PlanId::Professional.plan().credits_per_month, 10_000);
        assert_eq!(PlanId::ProfessionalAnnual.plan().price_usd, 1_500);
        assert_eq!(PlanId::Creator.top_up_cents(100), 200);
        assert_eq!(PlanId::Professional.top_up_cents(1), 2, "rounded up to a cent");
    }
}
