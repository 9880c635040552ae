//! The local billing sandbox: the billing port played by `serve` itself (its checkout
//! pages are `serve::sandbox`), the default provider, with no money moving.

use std::collections::HashSet;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::domain::credits::billing::{
    BillingEvent, BillingProvider, EventError, OpenedCheckout, PlanChanged, SandboxControls, TopUpState,
};
use crate::domain::credits::plans::PlanId;
use crate::domain::credits::{Account, Checkout};
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;

/// The local sandbox: checkouts are pages `serve` answers at
/// `{public_url}/billing/sandbox/checkout/{id}`, where the caller pays, pays with a
/// declined card or cancels, and (a plan's, once paid) plays its subscription's outcomes:
/// renewal past due or unpaid, renewal paid, ended by the provider, the card on file
/// declining or paying. Top-ups and plan changes are paid at once unless the
/// organization's card is set to decline (kept in this process).
pub struct SandboxBilling {
    pub public_url: String,
    declining: Mutex<HashSet<OrganizationId>>,
    /// Calls that would reach a real provider, in order (`serve` logs them; tests read them).
    calls: Mutex<Vec<String>>,
}

impl SandboxBilling {
    /// The sandbox of a `serve` answering at `public_url`.
    pub fn new(public_url: &str) -> Self {
        Self { public_url: public_url.to_owned(), declining: Mutex::default(), calls: Mutex::default() }
    }

    fn declines(&self, organization: OrganizationId) -> bool {
        self.declining.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&organization)
    }

    fn record(&self, call: String) {
        tracing::info!(call, "sandbox billing");
        let mut calls = self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A long-running `serve` keeps only the latest.
        if calls.len() >= SANDBOX_CALLS_KEPT {
            calls.remove(0);
        }
        calls.push(call);
    }
}

/// How many of its calls the sandbox keeps.
const SANDBOX_CALLS_KEPT: usize = 1_000;

/// The declined card's message.
pub const SANDBOX_DECLINE: &str = "Your card was declined (sandbox).";

#[async_trait]
impl BillingProvider for SandboxBilling {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    async fn open_checkout(&self, checkout: &Checkout, _account: &Account) -> anyhow::Result<OpenedCheckout> {
        let base = self.public_url.trim_end_matches('/');
        Ok(OpenedCheckout { url: format!("{base}/billing/sandbox/checkout/{}", checkout.id), provider_session: None })
    }

    async fn top_up(&self, account: &Account, purchase: &str, quantity: u64, _: u64) -> anyhow::Result<TopUpState> {
        self.record(format!("top_up {purchase} {quantity}"));
        if self.declines(account.organization_id) {
            self.record(format!("void {purchase}"));
            return Ok(TopUpState::Declined(SANDBOX_DECLINE.to_owned()));
        }
        Ok(TopUpState::Paid)
    }

    async fn change_plan(
        &self,
        account: &Account,
        to: PlanId,
        at_renewal: bool,
        key: &str,
    ) -> anyhow::Result<PlanChanged> {
        self.record(format!("change_plan {} {key}", to.as_str()));
        // Only a move made now is paid now.
        if !at_renewal && to.is_paid() && self.declines(account.organization_id) {
            return Ok(PlanChanged::Declined(SANDBOX_DECLINE.to_owned()));
        }
        Ok(PlanChanged::Done)
    }

    async fn cancel_and_refund(&self, subscription: &str, invoice: Option<&str>, key: &str) -> anyhow::Result<()> {
        self.record(format!("cancel_and_refund {subscription} {} {key}", invoice.unwrap_or("-")));
        Ok(())
    }

    async fn void_invoice(&self, invoice: &str, key: &str) -> anyhow::Result<()> {
        self.record(format!("void {invoice} {key}"));
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

    fn sandbox(&self) -> Option<&dyn SandboxControls> {
        Some(self)
    }

    fn confirms_renewals(&self) -> bool {
        // Renewals happen on the calendar unless a test or user plays another outcome.
        false
    }
}

impl SandboxControls for SandboxBilling {
    fn set_declining(&self, organization: OrganizationId, declines: bool) {
        let mut declining = self.declining.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match declines {
            true => declining.insert(organization),
            false => declining.remove(&organization),
        };
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}
