//! The Stripe billing adapter against a local server that follows Stripe's published
//! API (form-encoded requests, `Idempotency-Key`, `{error: {message}}` answers, 5xx
//! retried) and sends events signed as Stripe signs them: a plan's checkout, its event
//! applied once, forged and stale events refused, a plan change as a subscription
//! update, an auto top-up as an invoice paid at once whose event changes nothing more.

use std::time::Duration;

use http::{Method, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::{json, Value};
use shared::adapters::dynamodb::DynamoDb;
use shared::adapters::stripe::sign;
use shared::app::{App, AppConfig};
use shared::config::{BillingSettings, ProviderKey, Settings, StripeSettings};
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

/// A Stripe that answers as its API does; the first checkout-session request of each
/// idempotency key fails with a 500 (a retry must send the same key).
async fn fake_stripe() -> Fake {
    Fake::start(|request, earlier| {
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
            ("POST", "/v1/invoices/in_test_1/pay") => {
                json_reply(StatusCode::OK, json!({"id": "in_test_1", "object": "invoice", "status": "paid"}))
            }
            ("GET", "/v1/subscriptions/sub_test_1") => json_reply(
                StatusCode::OK,
                json!({"id": "sub_test_1", "object": "subscription", "items": {"object": "list", "data": [
                    {"id": "si_test_1", "object": "subscription_item", "price": {"id": "price_1", "product": "prod_test_1"}}
                ]}}),
            ),
            ("POST", "/v1/subscriptions/sub_test_1") => {
                json_reply(StatusCode::OK, json!({"id": "sub_test_1", "object": "subscription", "status": "active"}))
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
