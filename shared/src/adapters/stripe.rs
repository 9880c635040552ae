//! Stripe as the billing provider, from its published API: Checkout Sessions
//! (`POST /v1/checkout/sessions`, mode `subscription`) for plans; top-ups as an invoice of
//! the customer the plan's checkout made, paid at once with its payment method
//! (`/v1/invoiceitems`, `/v1/invoices`, `…/finalize`, `…/pay`; a declined card's 402
//! voids it: `…/void`); plan changes as a subscription update with prorations (a move up
//! with `payment_behavior=error_if_incomplete`: a declined payment changes nothing); a
//! second subscription ended (`DELETE /v1/subscriptions/{id}`) and its first invoice's
//! payment refunded (`POST /v1/refunds`); and events (`checkout.session.completed`,
//! `invoice.paid` of a top-up or of a subscription's period (the only confirmation of a
//! renewal), `invoice.payment_failed` of a top-up, `customer.subscription.updated`,
//! `customer.subscription.deleted`) verified by their `Stripe-Signature` header: HMAC-SHA256 of
//! `{t}.{payload}` under the endpoint's secret, compared in constant time, within five
//! minutes of `t`.
//!
//! Requests are form-encoded, carry an `Idempotency-Key` (so a retried call pays once)
//! and are retried on 429 and 5xx a few times. The keys are given (a local `serve`) or
//! read from the deployment's Secrets Manager secret when first used.

use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use hmac::{Hmac, Mac};
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;
use sha2::Sha256;

use super::secrets::SecretsManager;
use crate::config::{ProviderKey, StripeSettings};
use crate::core::retry::PROVIDER_CALLS;
use crate::domain::credits::billing::{
    BillingEvent, BillingEventKind, BillingProvider, EventError, OpenedCheckout, PlanChanged, TopUpState,
};
use crate::domain::credits::plans::{Billing, PlanId};
use crate::domain::credits::{Account, Checkout, Purchase, SubscriptionStatus};
use crate::domain::ids::CheckoutId;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;

/// How far an event's timestamp may be from now (Stripe's libraries' default).
pub const SIGNATURE_TOLERANCE: Duration = Duration::from_secs(300);
/// Longest wait for a connection or an answer.
const TIMEOUT: Duration = Duration::from_secs(20);
/// Most of an answer read.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// A request Stripe refused (a 4xx other than 429): not tried again.
#[derive(Debug, thiserror::Error)]
#[error("Stripe refused {path} ({status}): {message}")]
pub struct Refused {
    pub path: String,
    pub status: u16,
    pub message: String,
}

/// The message of a declined payment (Stripe's 402), if `error` is one.
fn declined(error: &anyhow::Error) -> Option<String> {
    error.downcast_ref::<Refused>().filter(|refused| refused.status == 402).map(|refused| refused.message.clone())
}

/// Whether `error` is Stripe's 404 (the object is gone: deleted before).
fn missing(error: &anyhow::Error) -> bool {
    error.downcast_ref::<Refused>().is_some_and(|refused| refused.status == 404)
}

/// Stripe's API with its keys.
struct Client {
    base_url: String,
    key: HeaderValue,
    webhook_secret: Vec<u8>,
    http: reqwest::Client,
}

/// The Stripe billing provider: built when first used.
pub struct StripeBilling {
    settings: StripeSettings,
    secrets: Option<SecretsManager>,
    /// Where the caller returns from a checkout that names no `success_url`.
    return_url: String,
    client: tokio::sync::OnceCell<Client>,
}

impl StripeBilling {
    pub fn new(settings: StripeSettings, secrets: Option<SecretsManager>, return_url: &str) -> Self {
        Self { settings, secrets, return_url: return_url.to_owned(), client: tokio::sync::OnceCell::new() }
    }

    async fn key(&self, key: &ProviderKey) -> anyhow::Result<String> {
        match key {
            ProviderKey::Value(value) => Ok(value.clone()),
            ProviderKey::Secret { secret, field } => {
                let secrets = self.secrets.as_ref().ok_or_else(|| {
                    anyhow::anyhow!("keys in Secrets Manager (BILLING_KEYS_SECRET) need the AWS backend")
                })?;
                secrets.field(secret, field).await
            }
        }
    }

    async fn client(&self) -> anyhow::Result<&Client> {
        self.client
            .get_or_try_init(|| async {
                let key = self.key(&self.settings.api_key).await.context("reading STRIPE_API_KEY")?;
                let secret = self.key(&self.settings.webhook_secret).await.context("reading STRIPE_WEBHOOK_SECRET")?;
                anyhow::ensure!(!key.trim().is_empty(), "STRIPE_API_KEY is empty");
                let mut key = HeaderValue::from_str(&format!("Bearer {}", key.trim()))
                    .context("STRIPE_API_KEY is not a header value")?;
                key.set_sensitive(true);
                let http = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .connect_timeout(TIMEOUT)
                    .timeout(TIMEOUT)
                    .build()
                    .context("building Stripe's HTTP client")?;
                let base_url = self.settings.base_url.trim_end_matches('/').to_owned();
                Ok(Client { base_url, key, webhook_secret: secret.into_bytes(), http })
            })
            .await
    }
}

impl Client {
    /// Sends a form-encoded request (none for a GET) and reads the JSON answer; 429 and
    /// 5xx are tried again under the same idempotency key.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        form: &[(String, String)],
        key: &str,
    ) -> anyhow::Result<Value> {
        let url = format!("{}/v1/{path}", self.base_url);
        let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        let mut retry = PROVIDER_CALLS.start();
        loop {
            let mut request = self.http.request(method.clone(), &url).header(AUTHORIZATION, self.key.clone());
            if method == reqwest::Method::POST {
                request = request
                    .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .header("Idempotency-Key", key)
                    .body(body.clone());
            }
            let (status, text) = match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    let bytes = response.bytes().await.unwrap_or_default();
                    (Some(status), String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_ANSWER_BYTES)]).into_owned())
                }
                Err(error) => (None, format!("{error}")),
            };
            match status {
                Some(status) if status.is_success() => {
                    return serde_json::from_str(&text)
                        .with_context(|| format!("Stripe's answer to {path} is not JSON"))
                }
                Some(status) if status.as_u16() != 429 && !status.is_server_error() => {
                    let message = serde_json::from_str::<Value>(&text)
                        .ok()
                        .and_then(|answer| answer["error"]["message"].as_str().map(str::to_owned))
                        .unwrap_or_else(|| text.chars().take(300).collect());
                    return Err(Refused { path: path.to_owned(), status: status.as_u16(), message }.into());
                }
                _ => {
                    let why = match status {
                        Some(status) => format!("Stripe answered {path} with {status}"),
                        None => format!("Stripe could not be reached for {path}: {text}"),
                    };
                    retry.wait(why).await?;
                }
            }
        }
    }
}

fn pair(name: &str, value: impl ToString) -> (String, String) {
    (name.to_owned(), value.to_string())
}

/// The price fields of a plan (inline prices: no price objects to configure).
fn price_fields(prefix: &str, plan: PlanId) -> Vec<(String, String)> {
    let offer = plan.plan();
    let interval = match offer.billing {
        Billing::Annual => "year",
        _ => "month",
    };
    vec![
        pair(&format!("{prefix}[currency]"), "usd"),
        pair(&format!("{prefix}[unit_amount]"), u64::from(offer.price_usd) * 100),
        pair(&format!("{prefix}[recurring][interval]"), interval),
    ]
}

#[async_trait]
impl BillingProvider for StripeBilling {
    fn name(&self) -> &'static str {
        "stripe"
    }

    async fn open_checkout(&self, checkout: &Checkout, account: &Account) -> anyhow::Result<OpenedCheckout> {
        let Purchase::Plan { plan } = checkout.purchase else {
            anyhow::bail!("a Stripe checkout is opened for plans only");
        };
        let client = self.client().await?;
        let organization = checkout.organization_id.to_string();
        let mut form = vec![
            pair("mode", "subscription"),
            pair("success_url", checkout.success_url.as_deref().unwrap_or(&self.return_url)),
            pair("cancel_url", checkout.cancel_url.as_deref().unwrap_or(&self.return_url)),
            pair("client_reference_id", &organization),
            pair("line_items[0][quantity]", 1),
            pair("line_items[0][price_data][product_data][name]", format!("{} plan", plan.as_str())),
            pair("metadata[organization_id]", &organization),
            pair("metadata[checkout_id]", checkout.id),
            pair("metadata[plan]", plan.as_str()),
            pair("subscription_data[metadata][organization_id]", &organization),
            pair("subscription_data[metadata][plan]", plan.as_str()),
        ];
        form.extend(price_fields("line_items[0][price_data]", plan));
        if let Some(customer) = &account.billing.customer {
            form.push(pair("customer", customer));
        }
        let session = client.call(reqwest::Method::POST, "checkout/sessions", &form, &checkout.id.to_string()).await?;
        let url = session["url"].as_str().ok_or_else(|| anyhow::anyhow!("Stripe's checkout session has no url"))?;
        Ok(OpenedCheckout { url: url.to_owned(), provider_session: session["id"].as_str().map(str::to_owned) })
    }

    async fn top_up(&self, account: &Account, purchase: &str, quantity: u64, cents: u64) -> anyhow::Result<TopUpState> {
        let customer = account
            .billing
            .customer
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("no Stripe customer is on file: a plan's checkout makes one"))?;
        let client = self.client().await?;
        let organization = account.organization_id.to_string();
        let metadata = [
            pair("metadata[kind]", "top_up"),
            pair("metadata[organization_id]", &organization),
            pair("metadata[quantity]", quantity),
            pair("metadata[purchase]", purchase),
        ];
        // The invoice first, then its item on it: an item left pending on the customer
        // (a later step failing) would be billed with the next invoice, credits or not.
        let mut invoice = vec![
            pair("customer", customer),
            pair("collection_method", "charge_automatically"),
            pair("pending_invoice_items_behavior", "exclude"),
            pair("auto_advance", true),
        ];
        invoice.extend(metadata.iter().cloned());
        let created = client.call(reqwest::Method::POST, "invoices", &invoice, &format!("{purchase}-invoice")).await?;
        let id = created["id"].as_str().ok_or_else(|| anyhow::anyhow!("Stripe's invoice has no id"))?;
        let mut item = vec![
            pair("customer", customer),
            pair("invoice", id),
            pair("amount", cents),
            pair("currency", "usd"),
            pair("description", format!("{quantity} credits")),
        ];
        item.extend(metadata.iter().cloned());
        client.call(reqwest::Method::POST, "invoiceitems", &item, &format!("{purchase}-item")).await?;
        client
            .call(reqwest::Method::POST, &format!("invoices/{id}/finalize"), &[], &format!("{purchase}-finalize"))
            .await?;
        let paid = match client
            .call(reqwest::Method::POST, &format!("invoices/{id}/pay"), &[], &format!("{purchase}-pay"))
            .await
        {
            Ok(paid) => paid,
            Err(error) => {
                let Some(why) = declined(&error) else { return Err(error) };
                // Voided: Stripe would otherwise retry the card on its own schedule,
                // and the credits were not given.
                self.void_invoice(id, &format!("{purchase}-void")).await?;
                return Ok(TopUpState::Declined(why));
            }
        };
        Ok(match paid["status"].as_str() {
            Some("paid") => TopUpState::Paid,
            _ => TopUpState::Pending,
        })
    }

    async fn change_plan(
        &self,
        account: &Account,
        to: PlanId,
        at_renewal: bool,
        key: &str,
    ) -> anyhow::Result<PlanChanged> {
        let Some(subscription) = account.billing.subscription.as_deref() else {
            // Nothing to end; a paid plan without a subscription goes through a checkout.
            anyhow::ensure!(to == PlanId::Free, "no Stripe subscription is on file: a plan's checkout makes one");
            return Ok(PlanChanged::Done);
        };
        let client = self.client().await?;
        let path = format!("subscriptions/{subscription}");
        if to == PlanId::Free {
            // It ends with the period already paid for.
            let form = [pair("cancel_at_period_end", true), pair("metadata[plan]", "free")];
            client.call(reqwest::Method::POST, &path, &form, key).await?;
            return Ok(PlanChanged::Done);
        }
        let current = client.call(reqwest::Method::GET, &path, &[], "").await?;
        let item = &current["items"]["data"][0];
        let (Some(item_id), Some(product)) = (item["id"].as_str(), item["price"]["product"].as_str()) else {
            anyhow::bail!("Stripe's subscription {subscription} has no item with a product");
        };
        let mut form = vec![
            pair("items[0][id]", item_id),
            pair("items[0][price_data][product]", product),
            pair("cancel_at_period_end", false),
            pair("metadata[plan]", to.as_str()),
        ];
        if at_renewal {
            // The new price from the next renewal: nothing prorated now.
            form.push(pair("proration_behavior", "none"));
        } else {
            // At once: a new billing period starts now (as the plan's credits do), the
            // unused time of the old price credited and the difference invoiced now.
            form.push(pair("proration_behavior", "always_invoice"));
            form.push(pair("billing_cycle_anchor", "now"));
            // Paid now or not made: a declined card is a 402 and the subscription
            // stays as it was (no credits without the money).
            form.push(pair("payment_behavior", "error_if_incomplete"));
        }
        form.extend(price_fields("items[0][price_data]", to));
        match client.call(reqwest::Method::POST, &path, &form, key).await {
            Ok(_) => Ok(PlanChanged::Done),
            Err(error) => match declined(&error) {
                Some(why) => Ok(PlanChanged::Declined(why)),
                None => Err(error),
            },
        }
    }

    async fn cancel_and_refund(&self, subscription: &str, invoice: Option<&str>, key: &str) -> anyhow::Result<()> {
        let client = self.client().await?;
        // The payment to give back is the session's invoice, or (a session naming none)
        // the subscription's latest, read before it ends: its first, paid at checkout.
        let invoice =
            match invoice {
                Some(invoice) => invoice.to_owned(),
                None => {
                    let found =
                        client.call(reqwest::Method::GET, &format!("subscriptions/{subscription}"), &[], "").await?;
                    let latest = &found["latest_invoice"];
                    latest.as_str().or_else(|| latest["id"].as_str()).map(str::to_owned).ok_or_else(|| {
                        anyhow::anyhow!("Stripe's subscription {subscription} names no invoice to refund")
                    })?
                }
            };
        // Ended now (a 404: ended before, by an earlier try).
        match client.call(reqwest::Method::DELETE, &format!("subscriptions/{subscription}"), &[], "").await {
            Ok(_) => {}
            Err(error) if missing(&error) => {}
            Err(error) => return Err(error),
        }
        let paid = client.call(reqwest::Method::GET, &format!("invoices/{invoice}"), &[], "").await?;
        if paid["amount_paid"].as_u64().unwrap_or(0) == 0 {
            // Nothing taken yet: an invoice still open is voided so it never is.
            if paid["status"] == "open" {
                self.void_invoice(&invoice, &format!("{key}-void")).await?;
            }
            return Ok(());
        }
        let payment = match (paid["payment_intent"].as_str(), paid["charge"].as_str()) {
            (Some(intent), _) => ("payment_intent", intent.to_owned()),
            (None, Some(charge)) => ("charge", charge.to_owned()),
            // Since API version 2025-03-31 an invoice names its payments in a list of
            // its own (`/v1/invoice_payments`), no longer on the invoice.
            (None, None) => {
                let query = format!("invoice_payments?invoice={invoice}&status=paid");
                let payments = client.call(reqwest::Method::GET, &query, &[], "").await?;
                let paid = payments["data"].as_array().and_then(|all| {
                    all.iter().find_map(|each| {
                        let payment = &each["payment"];
                        match (payment["payment_intent"].as_str(), payment["charge"].as_str()) {
                            (Some(intent), _) => Some(("payment_intent", intent.to_owned())),
                            (None, Some(charge)) => Some(("charge", charge.to_owned())),
                            (None, None) => None,
                        }
                    })
                });
                paid.ok_or_else(|| {
                    anyhow::anyhow!("Stripe's invoice {invoice} was paid but names no payment to refund")
                })?
            }
        };
        let form =
            vec![pair("reason", "duplicate"), pair("metadata[subscription]", subscription), pair(payment.0, payment.1)];
        client.call(reqwest::Method::POST, "refunds", &form, &format!("{key}-refund")).await?;
        Ok(())
    }

    async fn void_invoice(&self, invoice: &str, key: &str) -> anyhow::Result<()> {
        let client = self.client().await?;
        match client.call(reqwest::Method::POST, &format!("invoices/{invoice}/void"), &[], key).await {
            Ok(_) => Ok(()),
            // Stripe refuses (400) to void an invoice that is no longer open: one voided
            // before (by the top-up's own call, or an earlier delivery) is done.
            Err(error) if error.downcast_ref::<Refused>().is_some_and(|refused| refused.status == 400) => {
                let found = client.call(reqwest::Method::GET, &format!("invoices/{invoice}"), &[], "").await?;
                match found["status"].as_str() {
                    Some("void") => Ok(()),
                    _ => Err(error),
                }
            }
            Err(error) => Err(error),
        }
    }

    async fn event(&self, payload: &[u8], signature: Option<&str>, now: Timestamp) -> Result<BillingEvent, EventError> {
        let client = self.client().await.map_err(|error| EventError::Failed(error.context("reading Stripe's keys")))?;
        verify(payload, signature, &client.webhook_secret, now).map_err(EventError::Refused)?;
        read_event(payload).map_err(EventError::Refused)
    }

    fn has_subscription(&self, account: &Account) -> bool {
        account.billing.subscription.is_some()
    }

    fn has_return_url(&self) -> bool {
        !self.return_url.trim().is_empty()
    }
}

/// Checks a `Stripe-Signature` header (`t=…,v1=…[,v1=…]`) for `payload` under `secret`.
pub fn verify(payload: &[u8], header: Option<&str>, secret: &[u8], now: Timestamp) -> Result<(), String> {
    let header = header.ok_or_else(|| "the Stripe-Signature header is missing".to_owned())?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => timestamp = value.parse::<i64>().ok(),
            Some(("v1", value)) => signatures.extend(hex::decode(value).ok()),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or_else(|| "the Stripe-Signature header has no timestamp".to_owned())?;
    if signatures.is_empty() {
        return Err("the Stripe-Signature header has no v1 signature".to_owned());
    }
    if now.unix_seconds().abs_diff(timestamp) > SIGNATURE_TOLERANCE.as_secs() {
        return Err("the event's timestamp is outside the tolerance of 5 minutes".to_owned());
    }
    let mac = || {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
        mac.update(format!("{timestamp}.").as_bytes());
        mac.update(payload);
        mac
    };
    // `verify_slice` compares in constant time.
    match signatures.iter().any(|signature| mac().verify_slice(signature).is_ok()) {
        true => Ok(()),
        false => Err("no signature of the Stripe-Signature header matches the payload".to_owned()),
    }
}

/// The `Stripe-Signature` header Stripe would send for `payload` at `timestamp`.
pub fn sign(payload: &[u8], secret: &[u8], timestamp: i64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(payload);
    format!("t={timestamp},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Reads the `invoice.paid` of a subscription's invoice: a paid period when it is the
/// first period's (`subscription_create`) or a renewal's (`subscription_cycle`); a
/// proration or a manual invoice pays no period.
fn subscription_invoice_paid(id: String, invoice: &Value) -> Result<BillingEvent, String> {
    let ignored = |why: &str| Ok(BillingEvent { id: id.clone(), kind: BillingEventKind::Ignored(why.to_owned()) });
    if !matches!(invoice["billing_reason"].as_str(), Some("subscription_cycle" | "subscription_create")) {
        return ignored("a subscription's invoice that pays no new period");
    }
    // Older API versions name the subscription and its metadata at the top; newer ones
    // under `parent.subscription_details`.
    let details = match &invoice["parent"]["subscription_details"] {
        Value::Object(_) => &invoice["parent"]["subscription_details"],
        _ => &invoice["subscription_details"],
    };
    let subscription = invoice["subscription"].as_str().or_else(|| details["subscription"].as_str()).map(str::to_owned);
    let organization = details["metadata"]["organization_id"].as_str().and_then(OrganizationId::parse);
    let (Some(organization), Some(subscription)) = (organization, subscription) else {
        return ignored("a subscription's invoice this service did not make");
    };
    let seconds =
        |value: &Value| value.as_u64().map(|seconds| Timestamp::from_unix_millis(seconds.saturating_mul(1000)));
    // The period the invoice paid is its subscription line's; the invoice's own
    // `period_end` is the fallback.
    let lines = invoice["lines"]["data"].as_array().map(Vec::as_slice).unwrap_or_default();
    let paid_until = lines
        .iter()
        .filter_map(|line| seconds(&line["period"]["end"]))
        .max()
        .or_else(|| seconds(&invoice["period_end"]));
    let Some(paid_until) = paid_until else { return ignored("a subscription's invoice without its period") };
    Ok(BillingEvent {
        id,
        kind: BillingEventKind::RenewalPaid { organization, subscription, paid_until: Some(paid_until) },
    })
}

/// Reads a verified event: what the service does with it.
fn read_event(payload: &[u8]) -> Result<BillingEvent, String> {
    let event: Value = serde_json::from_slice(payload).map_err(|_| "the event is not a JSON object".to_owned())?;
    let id = event["id"].as_str().ok_or_else(|| "the event has no id".to_owned())?.to_owned();
    let kind = event["type"].as_str().unwrap_or_default();
    let object = &event["data"]["object"];
    let metadata = &object["metadata"];
    let organization = metadata["organization_id"].as_str().and_then(OrganizationId::parse);
    let ignored = |why: &str| Ok(BillingEvent { id: id.clone(), kind: BillingEventKind::Ignored(why.to_owned()) });
    match kind {
        "checkout.session.completed" => {
            let checkout = metadata["checkout_id"].as_str().and_then(CheckoutId::parse);
            let plan = metadata["plan"].as_str().and_then(PlanId::parse);
            let (Some(organization), Some(checkout), Some(plan)) = (organization, checkout, plan) else {
                return ignored("a checkout this service did not open");
            };
            if !matches!(object["payment_status"].as_str(), Some("paid" | "no_payment_required")) {
                return ignored("a checkout not paid yet");
            }
            let text = |field: &str| object[field].as_str().map(str::to_owned);
            let kind = BillingEventKind::PlanPaid {
                organization,
                checkout,
                plan,
                customer: text("customer"),
                subscription: text("subscription"),
                invoice: text("invoice"),
            };
            Ok(BillingEvent { id, kind })
        }
        "invoice.paid" => {
            if metadata["kind"] != "top_up" {
                return subscription_invoice_paid(id, object);
            }
            let purchase = metadata["purchase"].as_str().map(str::to_owned);
            let quantity = metadata["quantity"].as_str().and_then(|text| text.parse::<u64>().ok());
            let (Some(organization), Some(purchase), Some(quantity)) = (organization, purchase, quantity) else {
                return ignored("a top-up invoice without its metadata");
            };
            Ok(BillingEvent { id, kind: BillingEventKind::TopUpPaid { organization, purchase, quantity } })
        }
        "invoice.payment_failed" if metadata["kind"] == "top_up" => {
            let purchase = metadata["purchase"].as_str().map(str::to_owned);
            let (Some(organization), Some(purchase)) = (organization, purchase) else {
                return ignored("a top-up invoice without its metadata");
            };
            let invoice = object["id"].as_str().map(str::to_owned);
            Ok(BillingEvent { id, kind: BillingEventKind::TopUpFailed { organization, purchase, invoice } })
        }
        "customer.subscription.updated" | "customer.subscription.created" => {
            let subscription = object["id"].as_str().map(str::to_owned);
            let status = object["status"].as_str().and_then(SubscriptionStatus::parse);
            let (Some(organization), Some(subscription), Some(status)) = (organization, subscription, status) else {
                return ignored("a subscription this service did not make, or a status it does not know");
            };
            let plan = metadata["plan"].as_str().and_then(PlanId::parse);
            let seconds =
                |value: &Value| value.as_u64().map(|seconds| Timestamp::from_unix_millis(seconds.saturating_mul(1000)));
            let at = seconds(&event["created"]);
            // Its period end is not read: at a renewal Stripe moves it on before the new
            // invoice is charged (only that invoice's `invoice.paid` confirms the period).
            let kind = BillingEventKind::SubscriptionChanged { organization, subscription, status, plan, at };
            Ok(BillingEvent { id, kind })
        }
        "customer.subscription.deleted" => {
            let subscription = object["id"].as_str().map(str::to_owned);
            let (Some(organization), Some(subscription)) = (organization, subscription) else {
                return ignored("a subscription this service did not make");
            };
            Ok(BillingEvent { id, kind: BillingEventKind::SubscriptionEnded { organization, subscription } })
        }
        other => ignored(&format!("event type {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_checked_for_payload_secret_and_time() {
        let now = Timestamp::now();
        let payload = br#"{"id":"evt_1","type":"ping"}"#;
        let header = sign(payload, b"whsec_test", now.unix_seconds());
        assert_eq!(verify(payload, Some(&header), b"whsec_test", now), Ok(()));
        assert!(verify(b"{\"id\":\"evt_2\"}", Some(&header), b"whsec_test", now).is_err(), "tampered");
        assert!(verify(payload, Some(&header), b"whsec_other", now).is_err(), "another secret");
        let stale = sign(payload, b"whsec_test", now.unix_seconds() - 301);
        assert!(verify(payload, Some(&stale), b"whsec_test", now).unwrap_err().contains("tolerance"));
        let far = format!("t={},v1=00", i64::MIN);
        assert!(verify(payload, Some(&far), b"whsec_test", now).unwrap_err().contains("tolerance"));
        assert!(verify(payload, None, b"whsec_test", now).is_err());
        assert!(verify(payload, Some("t=1,v0=00"), b"whsec_test", now).is_err());
        // A second v1 (a secret being rolled) may be the one that matches.
        let both = format!("{header},v1={}", "00".repeat(32));
        assert_eq!(verify(payload, Some(&both), b"whsec_test", now), Ok(()));
    }
}
