//! The Stripe billing adapter against a local server that follows Stripe's published
//! API (form-encoded requests, `Idempotency-Key`, `{error: {message}}` answers, 5xx
//! retried) and sends events signed as Stripe signs them: a plan's checkout, its event
//! applied once, forged and stale events refused, a plan change as a subscription
//! update, an auto top-up as an invoice paid at once whose event changes nothing more;
//! declined cards (a 402 on a move up or a top-up's payment: nothing granted, the
//! invoice voided), a second subscription ended and refunded, the plan and status
//! corrected from `customer.subscription.updated`, idempotency keys derived from the
//! reservation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use http::{Method, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::{json, Value};
use shared::adapters::dynamodb::DynamoDb;
use shared::adapters::stripe::sign;
use shared::app::{App, AppConfig};
use shared::config::{BillingSettings, ProviderKey, Settings, StripeSettings};
use shared::domain::credits::Written;
use shared::domain::identity::OrganizationId;
use shared::domain::nodes::{DESTINATION, IMAGE_GENERATION};
use shared::domain::time::Timestamp;

use crate::conformance;
use crate::helpers::{Backend, TestApp};
use crate::providers::{json_reply, Answer, Fake, Received};
use crate::runs::{create_agent, Harness};

conformance!(
    a_plan_is_paid_through_a_stripe_checkout_once_whatever_events_come,
    an_auto_top_up_is_a_stripe_invoice_paid_at_once_and_applied_once,
    stripe_declines_refunds_and_corrections_follow_its_answers_and_events,
    a_renewal_grants_its_credits_only_when_its_invoice_is_paid,
    an_upgrade_whose_answer_is_lost_is_held_and_finished_by_stripes_event,
);

const API_KEY: &str = "sk_test_51Fake0000000000";
const WEBHOOK_SECRET: &str = "whsec_test_fake_0000000000";

/// The settings of a deployment billing through the Stripe at `url`.
pub fn billing(url: &str, key: &str) -> BillingSettings {
    BillingSettings::Stripe(StripeSettings {
        base_url: url.to_owned(),
        api_key: ProviderKey::Value(key.to_owned()),
        webhook_secret: ProviderKey::Value(WEBHOOK_SECRET.to_owned()),
    })
}

/// An app on `table` billing through the Stripe at `url`.
pub fn app_of(table: &DynamoDb, url: &str) -> App {
    let settings = Settings { billing: billing(url, API_KEY), ..Settings::default() };
    App::build(AppConfig { settings, ..AppConfig::dynamodb(table.clone(), crate::helpers::temp_media()) })
}

/// Stripe's `checkout.session.completed` for a checkout the service opened.
pub fn checkout_completed(organization: OrganizationId, checkout: &str, plan: &str) -> Value {
    json!({
        "id": format!("evt_{}", uuid::Uuid::new_v4().simple()),
        "object": "event",
        "api_version": "2024-06-20",
        "created": Timestamp::now().unix_seconds(),
        "livemode": false,
        "type": "checkout.session.completed",
        "data": { "object": {
            "id": "cs_test_1",
            "object": "checkout.session",
            "mode": "subscription",
            "payment_status": "paid",
            "status": "complete",
            "customer": "cus_test_1",
            "subscription": "sub_test_1",
            "client_reference_id": organization.to_string(),
            "metadata": { "organization_id": organization.to_string(), "checkout_id": checkout, "plan": plan },
        }},
    })
}

/// POSTs `event` to the webhook endpoint signed with the endpoint's secret, now.
pub async fn deliver(test: &TestApp, event: &Value) -> (StatusCode, Value) {
    let payload = event.to_string().into_bytes();
    let header = sign(&payload, WEBHOOK_SECRET.as_bytes(), Timestamp::now().unix_seconds());
    send(test, payload, Some(&header)).await
}

async fn send(test: &TestApp, payload: Vec<u8>, signature: Option<&str>) -> (StatusCode, Value) {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(signature) = signature {
        headers.push(("stripe-signature", signature));
    }
    test.raw(Method::POST, "/billing/stripe/webhook", &headers, payload).await
}

/// A form-encoded body's fields.
fn form(request: &Received) -> Vec<(String, String)> {
    let decode = |text: &str| percent_decode_str(&text.replace('+', " ")).decode_utf8_lossy().into_owned();
    request
        .raw
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect()
}

fn field(request: &Received, name: &str) -> Option<String> {
    form(request).into_iter().find(|(key, _)| key == name).map(|(_, value)| value)
}

fn stripe_error(status: StatusCode, message: &str) -> Answer {
    json_reply(status, json!({ "error": { "type": "invalid_request_error", "message": message } }))
}

/// Stripe's answer to a payment with a declined card.
fn card_declined() -> Answer {
    json_reply(
        StatusCode::PAYMENT_REQUIRED,
        json!({ "error": { "type": "card_error", "code": "card_declined", "decline_code": "generic_decline",
                           "message": "Your card was declined." } }),
    )
}

/// A Stripe that answers as its API does; the first checkout-session request of each
/// idempotency key fails with a 500 (a retry must send the same key).
async fn fake_stripe() -> Fake {
    fake_stripe_declining(Arc::new(AtomicBool::new(false))).await
}

/// [`fake_stripe`] whose customer's card is declined while `declines` is set.
async fn fake_stripe_declining(declines: Arc<AtomicBool>) -> Fake {
    fake_stripe_with(declines, Arc::new(AtomicBool::new(false))).await
}

/// [`fake_stripe_declining`] whose subscription updates answer 500 while `failing` is set
/// (Stripe may have applied them: the caller cannot tell).
async fn fake_stripe_with(declines: Arc<AtomicBool>, failing: Arc<AtomicBool>) -> Fake {
    // The invoices voided, with the idempotency key that voided each: Stripe replays the
    // answer for the same key and refuses (400) to void an invoice no longer open.
    let voided: Mutex<HashMap<String, String>> = Mutex::default();
    Fake::start(move |request, earlier| {
        let declining = declines.load(Ordering::SeqCst);
        if request.headers.get("authorization").map(String::as_str) != Some(&format!("Bearer {API_KEY}")) {
            return stripe_error(StatusCode::UNAUTHORIZED, "Invalid API Key provided: sk_wrong");
        }
        let post = request.method == "POST";
        if post && !request.headers.contains_key("idempotency-key") {
            return stripe_error(StatusCode::BAD_REQUEST, "this fake wants an Idempotency-Key on every POST");
        }
        match (request.method.as_str(), request.path.as_str()) {
            ("POST", "/v1/checkout/sessions") => {
                for required in ["mode", "success_url", "line_items[0][price_data][unit_amount]"] {
                    if field(request, required).is_none() {
                        return stripe_error(StatusCode::BAD_REQUEST, &format!("Missing required param: {required}."));
                    }
                }
                if earlier == 0 {
                    return stripe_error(StatusCode::INTERNAL_SERVER_ERROR, "An unknown error occurred");
                }
                json_reply(
                    StatusCode::OK,
                    json!({"id": "cs_test_1", "object": "checkout.session", "mode": "subscription",
                           "url": "https://checkout.stripe.test/c/pay/cs_test_1"}),
                )
            }
            ("POST", "/v1/invoiceitems") => json_reply(StatusCode::OK, json!({"id": "ii_test_1", "object": "invoiceitem"})),
            ("POST", "/v1/invoices") => {
                json_reply(StatusCode::OK, json!({"id": "in_test_1", "object": "invoice", "status": "draft"}))
            }
            ("POST", "/v1/invoices/in_test_1/finalize") => {
                json_reply(StatusCode::OK, json!({"id": "in_test_1", "object": "invoice", "status": "open"}))
            }
            ("POST", "/v1/invoices/in_test_1/pay") if declining => card_declined(),
            ("POST", "/v1/invoices/in_test_1/pay") => {
                json_reply(StatusCode::OK, json!({"id": "in_test_1", "object": "invoice", "status": "paid"}))
            }
            ("POST", path) if path.starts_with("/v1/invoices/") && path.ends_with("/void") => {
                let id = path.trim_start_matches("/v1/invoices/").trim_end_matches("/void");
                let key = request.headers["idempotency-key"].clone();
                let mut voided = voided.lock().unwrap();
                match voided.get(id) {
                    Some(earlier_key) if *earlier_key != key => stripe_error(
                        StatusCode::BAD_REQUEST,
                        "You can only pass in open invoices. This invoice isn't open.",
                    ),
                    _ => {
                        voided.insert(id.to_owned(), key);
                        json_reply(StatusCode::OK, json!({"id": id, "object": "invoice", "status": "void"}))
                    }
                }
            }
            ("DELETE", "/v1/subscriptions/sub_test_2") if earlier > 0 => json_reply(
                StatusCode::NOT_FOUND,
                json!({"error": {"type": "invalid_request_error", "code": "resource_missing",
                                 "message": "No such subscription: 'sub_test_2'"}}),
            ),
            ("DELETE", "/v1/subscriptions/sub_test_2") => {
                json_reply(StatusCode::OK, json!({"id": "sub_test_2", "object": "subscription", "status": "canceled"}))
            }
            ("GET", "/v1/invoices/in_test_2") => json_reply(
                StatusCode::OK,
                json!({"id": "in_test_2", "object": "invoice", "status": "paid", "amount_paid": 15000,
                       "payment_intent": "pi_test_2", "subscription": "sub_test_2"}),
            ),
            // A subscription whose session named no invoice, in API versions since
            // 2025-03-31: the invoice names its payments in a list of their own.
            ("GET", "/v1/subscriptions/sub_test_3") => json_reply(
                StatusCode::OK,
                json!({"id": "sub_test_3", "object": "subscription", "status": "active", "latest_invoice": "in_test_4"}),
            ),
            ("DELETE", "/v1/subscriptions/sub_test_3") => {
                json_reply(StatusCode::OK, json!({"id": "sub_test_3", "object": "subscription", "status": "canceled"}))
            }
            ("GET", "/v1/invoices/in_test_4") => json_reply(
                StatusCode::OK,
                json!({"id": "in_test_4", "object": "invoice", "status": "paid", "amount_paid": 15000,
                       "parent": {"type": "subscription_details", "subscription_details": {"subscription": "sub_test_3"}}}),
            ),
            ("GET", "/v1/invoice_payments?invoice=in_test_4&status=paid") => json_reply(
                StatusCode::OK,
                json!({"object": "list", "has_more": false, "data": [
                    {"id": "inpay_test_4", "object": "invoice_payment", "invoice": "in_test_4", "status": "paid",
                     "amount_paid": 15000, "payment": {"type": "payment_intent", "payment_intent": "pi_test_4"}}
                ]}),
            ),
            ("POST", "/v1/refunds") => match field(request, "payment_intent").or_else(|| field(request, "charge")) {
                Some(_) => json_reply(StatusCode::OK, json!({"id": "re_test_1", "object": "refund", "status": "succeeded"})),
                None => stripe_error(StatusCode::BAD_REQUEST, "One of `charge` or `payment_intent` is required."),
            },
            ("GET", "/v1/subscriptions/sub_test_1") => json_reply(
                StatusCode::OK,
                json!({"id": "sub_test_1", "object": "subscription", "items": {"object": "list", "data": [
                    {"id": "si_test_1", "object": "subscription_item", "price": {"id": "price_1", "product": "prod_test_1"}}
                ]}}),
            ),
            ("POST", "/v1/subscriptions/sub_test_1") if failing.load(Ordering::SeqCst) => {
                stripe_error(StatusCode::INTERNAL_SERVER_ERROR, "An unknown error occurred")
            }
            ("POST", "/v1/subscriptions/sub_test_1")
                if declining && field(request, "payment_behavior").as_deref() == Some("error_if_incomplete") =>
            {
                card_declined()
            }
            ("POST", "/v1/subscriptions/sub_test_1") => {
                json_reply(StatusCode::OK, json!({"id": "sub_test_1", "object": "subscription", "status": "active"}))
            }
            ("GET", path) if voided.lock().unwrap().contains_key(path.trim_start_matches("/v1/invoices/")) => {
                let id = path.trim_start_matches("/v1/invoices/");
                json_reply(StatusCode::OK, json!({"id": id, "object": "invoice", "status": "void"}))
            }
            _ => stripe_error(StatusCode::NOT_FOUND, "Unrecognized request URL"),
        }
    })
    .await
}

async fn organization(harness: &Harness, plan: &str, credits: i64) -> TestApp {
    let (organization, key) = harness.test.add_organization_with(true, plan, credits, None).await;
    TestApp { app: harness.test.app.clone(), key, organization }
}

async fn balance(test: &TestApp) -> i64 {
    test.call(Method::GET, "/credits", None).await.1["balance"].as_i64().unwrap()
}

async fn a_plan_is_paid_through_a_stripe_checkout_once_whatever_events_come(backend: Backend) {
    let stripe = fake_stripe().await;
    let url = stripe.url.clone();
    let harness = Harness::tuned(backend, |settings| Settings { billing: billing(&url, API_KEY), ..settings }).await;
    let test = organization(&harness, "free", 0).await;
    let body = json!({"plan_id": "creator", "success_url": "https://example.com/paid"});
    let (status, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{upgraded}");
    assert_eq!(upgraded["requires_checkout"], true);
    assert_eq!(upgraded["checkout_url"], "https://checkout.stripe.test/c/pay/cs_test_1");
    let sessions: Vec<Received> =
        stripe.received().into_iter().filter(|request| request.path == "/v1/checkout/sessions").collect();
    assert_eq!(sessions.len(), 2, "a 500 is tried again");
    assert_eq!(sessions[0].headers["idempotency-key"], sessions[1].headers["idempotency-key"], "with the same key");
    let session = &sessions[1];
    let organization = test.organization.to_string();
    for (name, value) in [
        ("mode", "subscription"),
        ("success_url", "https://example.com/paid"),
        ("line_items[0][price_data][currency]", "usd"),
        ("line_items[0][price_data][unit_amount]", "5000"),
        ("line_items[0][price_data][recurring][interval]", "month"),
        ("metadata[organization_id]", organization.as_str()),
        ("metadata[plan]", "creator"),
        ("client_reference_id", organization.as_str()),
    ] {
        assert_eq!(field(session, name).as_deref(), Some(value), "{name}");
    }
    let checkout = field(session, "metadata[checkout_id]").unwrap();
    assert_eq!(session.headers["idempotency-key"], checkout);
    assert_eq!(test.call(Method::GET, "/plan", None).await.1["plan"]["id"], "free", "not before payment");

    // Refused events change nothing: unsigned, forged, stale, signed with another secret.
    let event = checkout_completed(test.organization, &checkout, "creator");
    let payload = event.to_string().into_bytes();
    let now = Timestamp::now().unix_seconds();
    let tampered = event.to_string().replace("creator", "professional").into_bytes();
    let signed = sign(&payload, WEBHOOK_SECRET.as_bytes(), now);
    let stale = sign(&payload, WEBHOOK_SECRET.as_bytes(), now - 600);
    let other = sign(&payload, b"whsec_someone_else", now);
    for (body, header, why) in [
        (payload.clone(), None, "missing"),
        (tampered, Some(signed.as_str()), "no signature"),
        (payload.clone(), Some(stale.as_str()), "tolerance"),
        (payload.clone(), Some(other.as_str()), "no signature"),
        (payload.clone(), Some("t=abc,v1=zz"), "timestamp"),
    ] {
        let (status, answer) = send(&test, body, header).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(answer["detail"].as_str().unwrap().contains(why), "{answer} should say {why}");
    }
    assert_eq!(balance(&test).await, 0);

    let (status, answer) = deliver(&test, &event).await;
    assert_eq!((status, answer.clone()), (StatusCode::OK, json!({"received": true, "applied": true})));
    let (status, answer) = deliver(&test, &event).await;
    assert_eq!((status, answer), (StatusCode::OK, json!({"received": true, "applied": false})), "a replay");
    // Another event (another ID) of the same payment changes nothing either.
    let again = checkout_completed(test.organization, &checkout, "creator");
    assert_ne!(again["id"], event["id"]);
    assert_eq!(deliver(&test, &again).await, (StatusCode::OK, json!({"received": true, "applied": false})));
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!((plan["plan"]["id"].clone(), plan["credits"]["balance"].clone()), (json!("creator"), json!(2500)));
    // Events the service does not act on are received.
    let ping = json!({"id": "evt_ping", "object": "event", "type": "customer.created", "data": {"object": {}}});
    assert_eq!(deliver(&test, &ping).await, (StatusCode::OK, json!({"received": true, "applied": false})));

    // Between paid plans: the subscription's item moves to the new price, prorated.
    let (status, changed) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["requires_checkout"], false);
    let update = stripe
        .received()
        .into_iter()
        .find(|request| request.path == "/v1/subscriptions/sub_test_1" && request.method == "POST")
        .unwrap();
    for (name, value) in [
        ("items[0][id]", "si_test_1"),
        ("items[0][price_data][product]", "prod_test_1"),
        ("items[0][price_data][unit_amount]", "15000"),
        ("proration_behavior", "always_invoice"),
        ("billing_cycle_anchor", "now"),
        ("cancel_at_period_end", "false"),
    ] {
        assert_eq!(field(&update, name).as_deref(), Some(value), "{name}");
    }
    assert_eq!(balance(&test).await, 2500 + 7500);
    // Down a family: the new price from the next renewal; to free: it ends then.
    let updates = |stripe: &Fake| -> Vec<Received> {
        stripe
            .received()
            .into_iter()
            .filter(|request| request.path == "/v1/subscriptions/sub_test_1" && request.method == "POST")
            .collect()
    };
    let (_, changed) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "creator"}))).await;
    assert_eq!(changed["requires_checkout"], false, "{changed}");
    let down = updates(&stripe).pop().unwrap();
    assert_eq!(field(&down, "proration_behavior").as_deref(), Some("none"));
    assert_eq!(field(&down, "items[0][price_data][unit_amount]").as_deref(), Some("5000"));
    let (_, changed) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "free"}))).await;
    assert_eq!(changed["plan_id"], "free", "{changed}");
    let ended = updates(&stripe).pop().unwrap();
    assert_eq!(field(&ended, "cancel_at_period_end").as_deref(), Some("true"));
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!((plan["plan"]["id"].clone(), plan["scheduled_plan"].clone()), (json!("professional"), json!("free")));
    // Stripe ends the subscription (at the period's end, or when its payments failed):
    // free from then, once.
    let deleted = json!({
        "id": "evt_subscription_deleted_1", "object": "event", "type": "customer.subscription.deleted",
        "data": {"object": {"id": "sub_test_1", "object": "subscription", "status": "canceled",
            "metadata": {"organization_id": test.organization.to_string()}}},
    });
    assert_eq!(deliver(&test, &deleted).await, (StatusCode::OK, json!({"received": true, "applied": true})));
    assert_eq!(deliver(&test, &deleted).await, (StatusCode::OK, json!({"received": true, "applied": false})));
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!((plan["plan"]["id"].clone(), plan["scheduled_plan"].clone()), (json!("free"), json!(null)));
    assert_eq!(plan["credits"]["balance"], 10_000, "credits bought stay");
}

async fn an_auto_top_up_is_a_stripe_invoice_paid_at_once_and_applied_once(backend: Backend) {
    let stripe = fake_stripe().await;
    let url = stripe.url.clone();
    let harness = Harness::tuned(backend, |settings| Settings { billing: billing(&url, API_KEY), ..settings }).await;
    let test = organization(&harness, "free", 0).await;
    let (_, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "creator"}))).await;
    assert_eq!(upgraded["requires_checkout"], true, "{upgraded}");
    let session = stripe.received().into_iter().rfind(|request| request.path == "/v1/checkout/sessions").unwrap();
    let checkout = field(&session, "metadata[checkout_id]").unwrap();
    let event = checkout_completed(test.organization, &checkout, "creator");
    assert_eq!(deliver(&test, &event).await.0, StatusCode::OK);
    // Below 3,000 after any charge: buy 100.
    let settings = json!({"auto_topup": {"enabled": true, "threshold": 3000, "quantity": 100}});
    assert_eq!(test.call(Method::POST, "/credits/settings", Some(settings)).await.0, StatusCode::OK);
    let (agent, _) = create_agent(
        &test,
        &[("image", IMAGE_GENERATION, json!({"prompt": "a coin"})), ("out", DESTINATION, json!({}))],
        &[("image", "out")],
    )
    .await;
    let (status, started) = test.call(Method::POST, &format!("/agent/{agent}/run"), Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let run = started["run_id"].as_str().unwrap().to_owned();
    let mut record = Value::Null;
    for _ in 0..600 {
        record = test.call(Method::GET, &format!("/agent_run/{run}"), None).await.1;
        if record["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(record["status"], "completed", "{record}");
    let requests = stripe.requests();
    let invoicing = [
        "POST /v1/invoices",
        "POST /v1/invoiceitems",
        "POST /v1/invoices/in_test_1/finalize",
        "POST /v1/invoices/in_test_1/pay",
    ];
    let made: Vec<&String> = requests.iter().filter(|request| request.contains("invoice")).collect();
    assert_eq!(made, invoicing.iter().collect::<Vec<_>>(), "{requests:?}");
    let item = stripe.received().into_iter().find(|request| request.path == "/v1/invoiceitems").unwrap();
    assert_eq!(field(&item, "customer").as_deref(), Some("cus_test_1"));
    assert_eq!(field(&item, "invoice").as_deref(), Some("in_test_1"), "on its own invoice, never left pending");
    let invoice = stripe.received().into_iter().find(|request| request.path == "/v1/invoices").unwrap();
    assert_eq!(field(&invoice, "pending_invoice_items_behavior").as_deref(), Some("exclude"));
    assert_eq!(field(&item, "amount").as_deref(), Some("200"), "100 credits at $2.00 per 100");
    let purchase = field(&item, "metadata[purchase]").unwrap();
    for _ in 0..100 {
        if balance(&test).await == 2500 - 4 + 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(balance(&test).await, 2500 - 4 + 100);
    // Stripe's invoice.paid for it changes nothing more.
    let paid = json!({
        "id": "evt_invoice_paid_1", "object": "event", "type": "invoice.paid",
        "data": {"object": {"id": "in_test_1", "object": "invoice", "status": "paid", "customer": "cus_test_1",
            "metadata": {"kind": "top_up", "organization_id": test.organization.to_string(),
                         "quantity": "100", "purchase": purchase}}},
    });
    assert_eq!(deliver(&test, &paid).await, (StatusCode::OK, json!({"received": true, "applied": false})));
    assert_eq!(balance(&test).await, 2500 - 4 + 100);
    let (_, ledger) = test.call(Method::GET, "/credits/ledger?limit=100", None).await;
    let top_ups = ledger["entries"].as_array().unwrap().iter().filter(|entry| entry["reason"] == "top_up").count();
    assert_eq!(top_ups, 1);
}

/// Declined cards grant nothing (a move up's 402 leaves the plan; a top-up's 402 voids
/// its invoice, and no new invoice is made within the task wait); a failed top-up event
/// voids its invoice; a second paid checkout is ended and refunded; the status and plan
/// follow `customer.subscription.updated`. Every POST carries its idempotency key, a
/// plan change's derived from its reservation.
async fn stripe_declines_refunds_and_corrections_follow_its_answers_and_events(backend: Backend) {
    use shared::domain::credits::service::{self, CreditPorts, ToppedUp};
    let declines = Arc::new(AtomicBool::new(false));
    let stripe = fake_stripe_declining(declines.clone()).await;
    let url = stripe.url.clone();
    let harness =
        Harness::tuned_with(backend, 0, |settings| Settings { billing: billing(&url, API_KEY), ..settings }).await;
    let test = organization(&harness, "free", 0).await;
    let (_, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "creator"}))).await;
    assert_eq!(upgraded["requires_checkout"], true, "{upgraded}");
    let session = stripe.received().into_iter().rfind(|request| request.path == "/v1/checkout/sessions").unwrap();
    assert_eq!(field(&session, "subscription_data[metadata][plan]").as_deref(), Some("creator"));
    let checkout = field(&session, "metadata[checkout_id]").unwrap();
    assert_eq!(deliver(&test, &checkout_completed(test.organization, &checkout, "creator")).await.0, StatusCode::OK);
    let credits = test.app.credits().clone();
    let updates = |stripe: &Fake| -> Vec<Received> {
        stripe
            .received()
            .into_iter()
            .filter(|request| request.path == "/v1/subscriptions/sub_test_1" && request.method == "POST")
            .collect()
    };

    // A move up whose payment is declined: 402, nothing granted, nothing changed.
    declines.store(true, Ordering::SeqCst);
    let (status, refused) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("Your card was declined."), "{refused}");
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!((plan["plan"]["id"].clone(), plan["credits"]["balance"].clone()), (json!("creator"), json!(2500)));
    let declined = updates(&stripe).pop().unwrap();
    assert_eq!(field(&declined, "payment_behavior").as_deref(), Some("error_if_incomplete"));
    let seq = credits.account(test.organization).await.unwrap().seq;
    let first_key = declined.headers["idempotency-key"].clone();
    assert_eq!(first_key, format!("plan-change-{}-{}", test.organization, seq - 1), "from the reservation");
    declines.store(false, Ordering::SeqCst);
    let (status, changed) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(balance(&test).await, 10_000);
    let seq = credits.account(test.organization).await.unwrap().seq;
    let second_key = updates(&stripe).pop().unwrap().headers["idempotency-key"].clone();
    assert_eq!(second_key, format!("plan-change-{}-{}", test.organization, seq - 1));
    assert_ne!(second_key, first_key);

    // A declined top-up: its invoice voided; the task's next looks buy nothing more.
    let settings = json!({"auto_topup": {"enabled": true, "threshold": 20000, "quantity": 100}});
    assert_eq!(test.call(Method::POST, "/credits/settings", Some(settings)).await.0, StatusCode::OK);
    declines.store(true, Ordering::SeqCst);
    let app = &test.app;
    let ports =
        CreditPorts { credits: app.credits().as_ref(), billing: app.billing().as_ref(), clock: app.clock.as_ref() };
    let wait = Duration::from_secs(600);
    for _ in 0..3 {
        assert_eq!(service::auto_top_up(&ports, test.organization, 0, wait).await.unwrap(), ToppedUp::Declined);
    }
    let invoicing: Vec<String> = stripe.requests().into_iter().filter(|request| request.contains("invoice")).collect();
    assert_eq!(
        invoicing,
        [
            "POST /v1/invoices",
            "POST /v1/invoiceitems",
            "POST /v1/invoices/in_test_1/finalize",
            "POST /v1/invoices/in_test_1/pay",
            "POST /v1/invoices/in_test_1/void",
        ],
        "one attempt, its invoice voided"
    );
    let item = stripe.received().into_iter().find(|request| request.path == "/v1/invoiceitems").unwrap();
    let purchase = field(&item, "metadata[purchase]").unwrap();
    let void = stripe.received().into_iter().find(|request| request.path.ends_with("/void")).unwrap();
    assert_eq!(void.headers["idempotency-key"], format!("{purchase}-void"));
    assert_eq!(balance(&test).await, 10_000, "no credits without the money");
    let (_, credits_view) = test.call(Method::GET, "/credits", None).await;
    assert!(credits_view["auto_topup_month"]["declined_at"].is_string(), "{credits_view}");

    // A top-up's payment failing later (Stripe's event): its invoice voided.
    let mut write = credits.account(test.organization).await.unwrap().write();
    write.account.pending_top_up = Some(shared::domain::credits::PendingTopUp {
        purchase: "p-late".into(),
        quantity: 100,
        since: Timestamp::now(),
    });
    assert_eq!(credits.write_account(&write).await.unwrap(), shared::domain::credits::Written::Done);
    let failed = json!({
        "id": "evt_invoice_failed_1", "object": "event", "type": "invoice.payment_failed",
        "data": {"object": {"id": "in_test_3", "object": "invoice", "status": "open", "customer": "cus_test_1",
            "metadata": {"kind": "top_up", "organization_id": test.organization.to_string(),
                         "quantity": "100", "purchase": "p-late"}}},
    });
    assert_eq!(deliver(&test, &failed).await, (StatusCode::OK, json!({"received": true, "applied": true})));
    let void = stripe.received().into_iter().find(|request| request.path == "/v1/invoices/in_test_3/void").unwrap();
    assert_eq!(void.headers["idempotency-key"], "p-late-void", "the top-up's own void's key");
    // Stripe's event for the declined top-up whose invoice it already voided: a 200
    // (a void refused as not open, the invoice found void), never a 500 resent for days.
    let declined = json!({
        "id": "evt_invoice_failed_2", "object": "event", "type": "invoice.payment_failed",
        "data": {"object": {"id": "in_test_1", "object": "invoice", "status": "open", "customer": "cus_test_1",
            "metadata": {"kind": "top_up", "organization_id": test.organization.to_string(),
                         "quantity": "100", "purchase": purchase}}},
    });
    assert_eq!(deliver(&test, &declined).await.0, StatusCode::OK);
    // Voided again under another key (as an earlier build did): refused, read as done.
    let voiding = app.billing().void_invoice("in_test_1", "another-key").await;
    assert!(voiding.is_ok(), "{voiding:?}");
    assert!(stripe.requests().contains(&"GET /v1/invoices/in_test_1".to_owned()), "the invoice was read");
    assert_eq!(credits.account(test.organization).await.unwrap().pending_top_up, None);

    // A second checkout paid: its subscription ended and its payment refunded.
    let second = uuid::Uuid::new_v4().to_string();
    let mut paid = checkout_completed(test.organization, &second, "professional");
    paid["data"]["object"]["subscription"] = json!("sub_test_2");
    paid["data"]["object"]["invoice"] = json!("in_test_2");
    for applied in [true, false] {
        assert_eq!(deliver(&test, &paid).await, (StatusCode::OK, json!({"received": true, "applied": applied})));
    }
    let refunds: Vec<Received> =
        stripe.received().into_iter().filter(|request| request.path == "/v1/refunds").collect();
    assert!(!refunds.is_empty());
    assert!(refunds.iter().all(|refund| field(refund, "payment_intent").as_deref() == Some("pi_test_2")));
    assert!(refunds
        .iter()
        .all(|refund| refund.headers["idempotency-key"] == format!("second-checkout-{second}-refund")));
    assert!(stripe.requests().contains(&"DELETE /v1/subscriptions/sub_test_2".to_owned()));
    // Another, whose session names no invoice and whose invoice is in the newer format:
    // the subscription's latest invoice is read, and its payment found in its list.
    let third = uuid::Uuid::new_v4().to_string();
    let mut paid = checkout_completed(test.organization, &third, "professional");
    paid["data"]["object"]["subscription"] = json!("sub_test_3");
    assert_eq!(deliver(&test, &paid).await, (StatusCode::OK, json!({"received": true, "applied": true})));
    let refund = stripe
        .received()
        .into_iter()
        .find(|request| request.headers.get("idempotency-key") == Some(&format!("second-checkout-{third}-refund")))
        .expect("the third checkout's payment was refunded");
    assert_eq!((refund.path.as_str(), field(&refund, "payment_intent")), ("/v1/refunds", Some("pi_test_4".to_owned())));
    assert!(stripe.requests().contains(&"DELETE /v1/subscriptions/sub_test_3".to_owned()));
    let account = credits.account(test.organization).await.unwrap();
    assert_eq!(account.billing.subscription.as_deref(), Some("sub_test_1"), "the first stays tracked");
    assert_eq!(balance(&test).await, 10_000, "the second grants nothing");

    // The subscription's state and plan follow Stripe's.
    let updated = |id: &str, status: &str, plan: &str| {
        json!({
            "id": id, "object": "event", "type": "customer.subscription.updated",
            "created": Timestamp::now().unix_seconds(),
            "data": {"object": {"id": "sub_test_1", "object": "subscription", "status": status,
                "current_period_end": Timestamp::now().unix_seconds() + 30 * 24 * 3600,
                "metadata": {"organization_id": test.organization.to_string(), "plan": plan}}},
        })
    };
    assert_eq!(deliver(&test, &updated("evt_sub_1", "past_due", "professional")).await.1["applied"], true);
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!(
        (plan["plan"]["id"].clone(), plan["plan"]["status"].clone()),
        (json!("professional"), json!("past_due"))
    );
    assert_eq!(deliver(&test, &updated("evt_sub_2", "active", "creator_annual")).await.1["applied"], true);
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!(
        (plan["plan"]["id"].clone(), plan["plan"]["status"].clone()),
        (json!("creator_annual"), json!("active"))
    );
    assert!(credits.account(test.organization).await.unwrap().billing.paid_until.is_some());
    // Every POST carried an idempotency key (the fake refuses one without).
    assert!(stripe
        .received()
        .iter()
        .filter(|request| request.method == "POST")
        .all(|request| request.headers.contains_key("idempotency-key")));
}

/// An organization seeded on a paid plan has no Stripe subscription: moving to another
/// paid plan takes a checkout. A deployment without a public address asks for
/// `success_url`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paid_plan_without_a_subscription_moves_through_a_checkout() {
    use shared::domain::credits::billing::BillingProvider;
    let stripe = fake_stripe().await;
    let url = stripe.url.clone();
    let harness =
        Harness::tuned(Backend::Sqlite, |settings| Settings { billing: billing(&url, API_KEY), ..settings }).await;
    let test = organization(&harness, "creator", 0).await;
    let (status, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
    assert_eq!(status, StatusCode::OK, "{upgraded}");
    assert_eq!(upgraded["requires_checkout"], true, "{upgraded}");
    let settings = || match billing(&url, API_KEY) {
        BillingSettings::Stripe(settings) => settings,
        BillingSettings::Sandbox => unreachable!("billing() is Stripe's"),
    };
    assert!(!shared::adapters::stripe::StripeBilling::new(settings(), None, "").has_return_url());
    assert!(shared::adapters::stripe::StripeBilling::new(settings(), None, "https://api.example.com").has_return_url());
}

/// A wrong key: the upgrade fails saying so (500 `{detail}`), and opens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stripe_refusal_fails_the_upgrade_and_changes_nothing() {
    let stripe = fake_stripe().await;
    let url = stripe.url.clone();
    let harness =
        Harness::tuned(Backend::Sqlite, |settings| Settings { billing: billing(&url, "sk_wrong"), ..settings }).await;
    let test = organization(&harness, "free", 0).await;
    let (status, answer) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "creator"}))).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{answer}");
    assert_eq!(answer.as_object().unwrap().keys().collect::<Vec<_>>(), ["detail"]);
    assert_eq!(stripe.requests(), ["POST /v1/checkout/sessions"], "a 401 is not tried again");
    assert_eq!(test.call(Method::GET, "/plan", None).await.1["plan"]["id"], "free");
}

/// On AWS the keys are fields of the billing secret, read when Stripe is first used:
/// the API key signs the calls and the webhook secret verifies the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_keys_kept_in_secrets_manager_are_read_when_first_used() {
    use shared::adapters::secrets::SecretsManager;
    use shared::adapters::stripe::StripeBilling;
    use shared::domain::credits::billing::BillingProvider;
    use shared::domain::credits::plans::PlanId;
    use shared::domain::credits::{Account, Checkout, CheckoutId, CheckoutStatus, Purchase};
    assert!(
        std::env::var("AWS_ENDPOINT_URL_SECRETS_MANAGER").is_ok(),
        "AWS_ENDPOINT_URL_SECRETS_MANAGER is not set: run the tests with ./scripts/test.sh"
    );
    let aws = shared::adapters::aws_env::load_defaults().await;
    let client = aws_sdk_secretsmanager::Client::new(&aws);
    let keys = json!({ "STRIPE_API_KEY": API_KEY, "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET }).to_string();
    let created = client
        .create_secret()
        .name(format!("billing-keys-{}", uuid::Uuid::new_v4()))
        .secret_string(keys)
        .send()
        .await
        .unwrap();
    let secret = created.arn().unwrap().to_owned();
    let stripe = fake_stripe().await;
    let settings = StripeSettings {
        base_url: stripe.url.clone(),
        api_key: ProviderKey::Secret { secret: secret.clone(), field: "STRIPE_API_KEY" },
        webhook_secret: ProviderKey::Secret { secret, field: "STRIPE_WEBHOOK_SECRET" },
    };
    let billing = StripeBilling::new(settings, Some(SecretsManager::from_config(&aws)), "https://example.com");
    let organization = OrganizationId::new_v4();
    let now = Timestamp::now();
    let checkout = Checkout {
        id: CheckoutId::new_v4(),
        organization_id: organization,
        purchase: Purchase::Plan { plan: PlanId::Professional },
        status: CheckoutStatus::Open,
        success_url: None,
        cancel_url: None,
        created_at: now,
        provider_session: None,
    };
    let opened = billing.open_checkout(&checkout, &Account::empty(organization, now)).await.unwrap();
    assert_eq!(opened.url, "https://checkout.stripe.test/c/pay/cs_test_1");
    let session = stripe.received().into_iter().last().unwrap();
    assert_eq!(session.headers["authorization"], format!("Bearer {API_KEY}"));
    assert_eq!(field(&session, "success_url").as_deref(), Some("https://example.com"), "the default return");
    let event = checkout_completed(organization, &checkout.id.to_string(), "professional");
    let payload = event.to_string().into_bytes();
    let header = sign(&payload, WEBHOOK_SECRET.as_bytes(), now.unix_seconds());
    let read = billing.event(&payload, Some(&header), now).await.unwrap();
    assert!(matches!(
        read.kind,
        shared::domain::credits::billing::BillingEventKind::PlanPaid { plan: PlanId::Professional, .. }
    ));
}

/// Stripe's order at a renewal: `customer.subscription.updated` with the new period while
/// its invoice is unpaid (still `active`), then `invoice.payment_failed` or `invoice.paid`.
/// Only the renewal invoice's `invoice.paid` grants the period's credits, once.
async fn a_renewal_grants_its_credits_only_when_its_invoice_is_paid(backend: Backend) {
    let stripe = fake_stripe().await;
    let url = stripe.url.clone();
    let harness =
        Harness::tuned_with(backend, 0, |settings| Settings { billing: billing(&url, API_KEY), ..settings }).await;
    let test = organization(&harness, "free", 0).await;
    let (_, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "creator"}))).await;
    assert_eq!(upgraded["requires_checkout"], true, "{upgraded}");
    let session = stripe.received().into_iter().rfind(|request| request.path == "/v1/checkout/sessions").unwrap();
    let checkout = field(&session, "metadata[checkout_id]").unwrap();
    let paid = checkout_completed(test.organization, &checkout, "creator");
    assert_eq!(deliver(&test, &paid).await.1["applied"], true);
    let first = balance(&test).await;
    // The first month paid 40 days ago: its renewal is due.
    let credits = test.app.credits().clone();
    let day = 24 * 3600;
    let started = Timestamp::from_unix_millis(Timestamp::now().unix_millis() - 40 * day as u64 * 1000);
    let mut write = credits.account(test.organization).await.unwrap().write();
    write.account.plan_started_at = started;
    write.account.period_start = started;
    write.account.billing.paid_until =
        Some(Timestamp::from_unix_millis(started.unix_millis() + 30 * day as u64 * 1000));
    assert_eq!(credits.write_account(&write).await.unwrap(), Written::Done);
    assert_eq!(balance(&test).await, first, "the renewal is not confirmed");

    let organization = test.organization.to_string();
    let period_end = Timestamp::now().unix_seconds() + 20 * day;
    let updated = json!({
        "id": "evt_sub_renew", "object": "event", "type": "customer.subscription.updated",
        "created": Timestamp::now().unix_seconds(),
        "data": {"object": {"id": "sub_test_1", "object": "subscription", "status": "active",
            "current_period_end": period_end,
            "items": {"data": [{"current_period_end": period_end}]},
            "metadata": {"organization_id": organization, "plan": "creator"}}},
    });
    assert_eq!(deliver(&test, &updated).await.0, StatusCode::OK);
    assert_eq!(balance(&test).await, first, "the period moved on, its invoice not paid: no grant");
    let invoice = |id: &str, kind: &str, reason: &str| {
        json!({
            "id": id, "object": "event", "type": kind, "created": Timestamp::now().unix_seconds(),
            "data": {"object": {"id": "in_renew_1", "object": "invoice", "billing_reason": reason,
                "customer": "cus_test_1", "period_end": period_end - 30 * day,
                "parent": {"type": "subscription_details", "subscription_details": {
                    "subscription": "sub_test_1", "metadata": {"organization_id": organization, "plan": "creator"}}},
                "lines": {"data": [{"period": {"start": period_end - 30 * day, "end": period_end}}]},
                "metadata": {}}},
        })
    };
    let failed = invoice("evt_renew_failed", "invoice.payment_failed", "subscription_cycle");
    assert_eq!(deliver(&test, &failed).await, (StatusCode::OK, json!({"received": true, "applied": false})));
    assert_eq!(balance(&test).await, first, "a failed renewal grants nothing");
    // A proration's invoice pays no period.
    let proration = invoice("evt_renew_proration", "invoice.paid", "subscription_update");
    assert_eq!(deliver(&test, &proration).await.1["applied"], false);
    assert_eq!(balance(&test).await, first);
    let renewed = invoice("evt_renew_paid", "invoice.paid", "subscription_cycle");
    assert_eq!(deliver(&test, &renewed).await.1["applied"], true);
    let granted = balance(&test).await;
    assert!(granted > first, "the paid renewal grants the period's credits: {first} -> {granted}");
    assert_eq!(deliver(&test, &renewed).await.1["applied"], false);
    assert_eq!(balance(&test).await, granted, "once");
}

/// A move up whose subscription update Stripe answers only with 500s (it may have made
/// it): a 503 saying the change is pending, the reservation kept, and Stripe's
/// `customer.subscription.updated` for the new plan makes the move with its credits' difference.
async fn an_upgrade_whose_answer_is_lost_is_held_and_finished_by_stripes_event(backend: Backend) {
    let failing = Arc::new(AtomicBool::new(false));
    let stripe = fake_stripe_with(Arc::new(AtomicBool::new(false)), failing.clone()).await;
    let url = stripe.url.clone();
    let harness =
        Harness::tuned_with(backend, 0, |settings| Settings { billing: billing(&url, API_KEY), ..settings }).await;
    let test = organization(&harness, "free", 0).await;
    let (_, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "creator"}))).await;
    assert_eq!(upgraded["requires_checkout"], true, "{upgraded}");
    let session = stripe.received().into_iter().rfind(|request| request.path == "/v1/checkout/sessions").unwrap();
    let checkout = field(&session, "metadata[checkout_id]").unwrap();
    let paid = checkout_completed(test.organization, &checkout, "creator");
    assert_eq!(deliver(&test, &paid).await.1["applied"], true);
    let before = balance(&test).await;

    failing.store(true, Ordering::SeqCst);
    let (status, answer) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer.as_object().unwrap().keys().collect::<Vec<_>>(), ["detail"]);
    assert!(answer["detail"].as_str().unwrap().contains("pending confirmation"), "{answer}");
    let account = test.app.credits().account(test.organization).await.unwrap();
    assert!(account.plan_change.is_some(), "the reservation is kept for Stripe's event");
    assert_eq!(balance(&test).await, before);
    // Another change meanwhile is refused (the first may be made).
    let (status, _) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Stripe made it: its event moves the plan and grants the difference.
    let updated = json!({
        "id": "evt_sub_lost_answer", "object": "event", "type": "customer.subscription.updated",
        "created": Timestamp::now().unix_seconds(),
        "data": {"object": {"id": "sub_test_1", "object": "subscription", "status": "active",
            "metadata": {"organization_id": test.organization.to_string(), "plan": "professional"}}},
    });
    assert_eq!(deliver(&test, &updated).await.1["applied"], true);
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!(plan["plan"]["id"], "professional");
    let after = balance(&test).await;
    assert!(after > before, "the paid move's credits: {before} -> {after}");
    assert_eq!(test.app.credits().account(test.organization).await.unwrap().plan_change, None);
    assert_eq!(deliver(&test, &updated).await.1["applied"], false);
    assert_eq!(balance(&test).await, after, "once");
}
