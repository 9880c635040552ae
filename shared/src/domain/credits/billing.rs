//! The billing port: where plans and credits are paid for. The local sandbox (served by
//! `serve`) and Stripe implement it.

use async_trait::async_trait;

use super::plans::PlanId;
use super::{Account, Checkout, CheckoutId, SubscriptionStatus};
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;

/// A checkout opened at the provider: where the caller goes to pay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenedCheckout {
    pub url: String,
    /// The provider's own ID of it (Stripe's session), when it has one.
    pub provider_session: Option<String>,
}

/// Where a top-up purchase stands once asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopUpState {
    /// Paid now: grant the credits.
    Paid,
    /// The provider confirms the payment later (its event grants the credits).
    Pending,
    /// The card was declined; the purchase's invoice is voided (nothing is collected
    /// from it later).
    Declined(String),
}

/// What a plan change at the provider did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanChanged {
    /// Made (a move up: its prorated invoice paid).
    Done,
    /// The payment a move up needs was declined: nothing changed at the provider.
    Declined(String),
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
        /// The invoice of its first payment (what a refund gives back).
        invoice: Option<String>,
    },
    /// A top-up's invoice was paid (`invoice.paid` of an invoice the top-up made).
    TopUpPaid { organization: OrganizationId, purchase: String, quantity: u64 },
    /// A top-up's invoice could not be paid: the next shortage may buy again.
    TopUpFailed { organization: OrganizationId, purchase: String, invoice: Option<String> },
    /// The provider's subscription changed (its status, or its plan).
    SubscriptionChanged {
        organization: OrganizationId,
        subscription: String,
        status: SubscriptionStatus,
        /// The plan the subscription bills, when it names one.
        plan: Option<PlanId>,
        /// When the provider made the event (an older one does not undo a newer plan).
        at: Option<Timestamp>,
    },
    /// A subscription's period invoice was paid (`invoice.paid` of its first period or a
    /// renewal): the period up to `paid_until` gets its credits. Only this confirms a
    /// renewal: the provider moves the period on (`customer.subscription.updated`) before
    /// its invoice is charged.
    RenewalPaid {
        organization: OrganizationId,
        subscription: String,
        /// The end of the period the invoice paid (none where renewals are not confirmed).
        paid_until: Option<Timestamp>,
    },
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
    /// prorated (its invoice paid now, or nothing changes), or (`at_renewal`) from its
    /// next renewal; `key` is the provider's idempotency key (from the reservation).
    async fn change_plan(
        &self,
        account: &Account,
        to: PlanId,
        at_renewal: bool,
        key: &str,
    ) -> anyhow::Result<PlanChanged>;
    /// Ends at once a subscription the organization must not have (a second checkout's)
    /// and refunds its payment (`invoice`); `key` makes it idempotent.
    async fn cancel_and_refund(&self, subscription: &str, invoice: Option<&str>, key: &str) -> anyhow::Result<()>;
    /// Voids an unpaid top-up invoice, so that nothing is collected from it later.
    async fn void_invoice(&self, invoice: &str, key: &str) -> anyhow::Result<()>;
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
    /// Whether its renewals are confirmed by its events (Stripe's subscription updated at
    /// each renewal): a period past the last confirmed one then waits for one.
    fn confirms_renewals(&self) -> bool {
        true
    }
    /// The sandbox's controls (None for a real provider).
    fn sandbox(&self) -> Option<&dyn SandboxControls> {
        None
    }
}

/// What a caller of the local sandbox plays that a real provider decides: the
/// organization's card on file declining or paying.
pub trait SandboxControls: Send + Sync {
    /// Makes the organization's card on file decline (or pay) from now.
    fn set_declining(&self, organization: OrganizationId, declines: bool);
    /// The latest calls that a real provider would have received (`top_up …`,
    /// `change_plan …`, `cancel_and_refund …`, `void …`), oldest first.
    fn calls(&self) -> Vec<String>;
}
