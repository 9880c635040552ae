//! The billing port: where plans and credits are paid for. The local sandbox (served by
//! `serve`) and Stripe implement it.

use async_trait::async_trait;

use super::plans::PlanId;
use super::{Account, Checkout, CheckoutId};
use crate::domain::identity::OrganizationId;
use crate::domain::time::Timestamp;

/// A checkout opened at the provider: where the caller goes to pay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenedCheckout {
    pub url: String,
    /// The provider's own ID of it (Stripe's session), when it has one.
    pub provider_session: Option<String>,
}

/// Where a top-up purchase stands once asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopUpState {
    /// Paid now: grant the credits.
    Paid,
    /// The provider confirms the payment later (its event grants the credits).
    Pending,
}

/// An event the billing provider sent, verified and read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BillingEvent {
    /// The provider's event ID (an event is applied once, however often it is sent).
    pub id: String,
    pub kind: BillingEventKind,
}

/// What a billing event says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BillingEventKind {
    /// A plan's checkout was paid (Stripe's `checkout.session.completed`).
    PlanPaid {
        organization: OrganizationId,
        checkout: CheckoutId,
        plan: PlanId,
        customer: Option<String>,
        subscription: Option<String>,
    },
    /// A top-up's invoice was paid (`invoice.paid` of an invoice the top-up made).
    TopUpPaid { organization: OrganizationId, purchase: String, quantity: u64 },
    /// A top-up's invoice could not be paid: the next shortage may buy again.
    TopUpFailed { organization: OrganizationId, purchase: String },
    /// The provider ended the subscription (at the period's end after a move to free, or
    /// after its payments failed): the organization is on free from now.
    SubscriptionEnded { organization: OrganizationId, subscription: String },
    /// Nothing for the service to do (another event type, a subscription's renewal).
    Ignored(String),
}

/// Why an event was not read; nothing is changed.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// Not verified (forged, stale, unsigned) or not an event (400).
    #[error("{0}")]
    Refused(String),
    /// Ours: the endpoint's secret could not be read (500 or 503: the provider sends it again).
    #[error("{0:#}")]
    Failed(anyhow::Error),
}

/// Takes payments.
#[async_trait]
pub trait BillingProvider: Send + Sync {
    /// Its name, in logs.
    fn name(&self) -> &'static str;
    /// Opens a checkout for `checkout`'s purchase (a plan) for the account's organization.
    async fn open_checkout(&self, checkout: &Checkout, account: &Account) -> anyhow::Result<OpenedCheckout>;
    /// Buys `quantity` credits for `cents` with the payment method the organization
    /// already gave (its paid plan's); `purchase` identifies the purchase (idempotent).
    async fn top_up(&self, account: &Account, purchase: &str, quantity: u64, cents: u64) -> anyhow::Result<TopUpState>;
    /// Moves the organization's subscription to plan `to` (free: ends it): at once and
    /// prorated, or (`at_renewal`) from its next renewal.
    async fn change_plan(&self, account: &Account, to: PlanId, at_renewal: bool) -> anyhow::Result<()>;
    /// Verifies and reads an event the provider sent to the service: `payload` as
    /// received, with its signature header.
    async fn event(&self, payload: &[u8], signature: Option<&str>, now: Timestamp) -> Result<BillingEvent, EventError>;
    /// Whether the provider holds a subscription of the account's paid plan (one a
    /// seed gave has none: moving from it takes a checkout).
    fn has_subscription(&self, _account: &Account) -> bool {
        true
    }
    /// Whether a checkout without a `success_url` has somewhere to send the caller back.
    fn has_return_url(&self) -> bool {
        true
    }
    /// Whether `serve` answers its checkout pages (the sandbox).
    fn serves_checkout_pages(&self) -> bool {
        false
    }
}

/// The local sandbox: checkouts are pages `serve` answers at
/// `{public_url}/billing/sandbox/checkout/{id}`; top-ups are paid at once (a card on file
/// is assumed); plan changes need nothing of a provider.
pub struct SandboxBilling {
    pub public_url: String,
}

#[async_trait]
impl BillingProvider for SandboxBilling {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    async fn open_checkout(&self, checkout: &Checkout, _account: &Account) -> anyhow::Result<OpenedCheckout> {
        let base = self.public_url.trim_end_matches('/');
        Ok(OpenedCheckout { url: format!("{base}/billing/sandbox/checkout/{}", checkout.id), provider_session: None })
    }

    async fn top_up(&self, _: &Account, _: &str, _: u64, _: u64) -> anyhow::Result<TopUpState> {
        Ok(TopUpState::Paid)
    }

    async fn change_plan(&self, _: &Account, _: PlanId, _: bool) -> anyhow::Result<()> {
        Ok(())
    }

    async fn event(&self, _: &[u8], _: Option<&str>, _: Timestamp) -> Result<BillingEvent, EventError> {
        Err(EventError::Refused(
            "this deployment takes no Stripe events: its billing provider is the local sandbox (BILLING_PROVIDER)"
                .into(),
        ))
    }

    fn serves_checkout_pages(&self) -> bool {
        true
    }
}
