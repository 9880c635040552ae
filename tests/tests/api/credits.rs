//! Credits, plans and billing on both backends: every task paid in its claim's write
//! (never below zero under concurrent claims), refunds for our failures, prices from the
//! catalog, the credit-blocked flow (resume after an upgrade; auto top-up without one),
//! period grants once, the sandbox checkout, and the refusals.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::config::Settings;
use shared::domain::credits::{PendingTopUp, Written};
use shared::domain::nodes::{DESTINATION, IMAGE_GENERATION, VIDEO_GENERATION};
use shared::domain::time::Timestamp;

use crate::conformance;
use crate::helpers::{Backend, TestApp};
use crate::runs::{create_agent, Harness};

conformance!(
    concurrent_tasks_never_take_the_balance_below_zero,
    a_task_failed_for_our_reason_gets_its_credits_back,
    a_4k_video_generation_costs_twice_the_1080p_one,
    the_credit_blocked_flow_completes_after_an_upgrade_and_a_resume,
    auto_top_up_unblocks_a_task_without_a_resume,
    a_period_grant_happens_once_under_concurrent_requests,
    plan_and_credit_refusals_name_the_problem_and_change_nothing,
    a_sandbox_checkout_cancels_and_a_paid_plan_changes_without_one,
    the_sandbox_plays_every_outcome_of_a_subscription,
    a_declined_upgrade_grants_nothing_and_frees_its_reservation,
    a_refused_downgrade_makes_no_billing_call,
    two_concurrent_upgrades_make_one_reservation,
    past_due_or_unpaid_gets_no_monthly_grant_and_an_ended_subscription_is_free,
    two_checkouts_from_free_track_one_subscription_and_refund_the_second,
    a_plan_that_disagrees_with_the_provider_is_corrected_from_its_events,
    auto_top_up_stops_at_its_monthly_ceiling,
    a_top_up_buys_its_quantity_unless_opted_in_to_cover_the_shortfall,
    a_declined_top_up_waits_for_the_next_task_wait_and_its_invoice_is_voided,
);

/// An organization of `harness`'s app on `plan` with `credits`.
pub(crate) async fn organization(harness: &Harness, plan: &str, credits: i64, started: Option<Timestamp>) -> TestApp {
    let (organization, key) = harness.test.add_organization_with(true, plan, credits, started).await;
    TestApp { app: harness.test.app.clone(), key, organization }
}

/// Polls a run until it leaves `running` (bounded).
pub(crate) async fn finished(test: &TestApp, run: &str) -> Value {
    for _ in 0..1200 {
        let (status, body) = test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if body["status"] != "running" {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("run {run} still running after 120 s");
}

async fn start(test: &TestApp, agent: &str) -> String {
    let (status, answer) = test.call(Method::POST, &format!("/agent/{agent}/run"), Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["run_id"].as_str().unwrap().to_owned()
}

/// Every ledger entry of the organization, newest first, read page by page.
pub(crate) async fn ledger(test: &TestApp) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut path = "/credits/ledger?limit=7".to_owned();
    for _ in 0..100 {
        let (status, page) = test.call(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        entries.extend(page["entries"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/credits/ledger?limit=7&cursor={cursor}"),
            None => return entries,
        }
    }
    panic!("the ledger never ended");
}

pub(crate) async fn balance(test: &TestApp) -> i64 {
    let (status, credits) = test.call(Method::GET, "/credits", None).await;
    assert_eq!(status, StatusCode::OK, "{credits}");
    credits["balance"].as_i64().unwrap()
}

/// The ledger's entries chain and sum to the balance: each `balance_after` is the one
/// before plus its amount, newest first in the order written.
pub(crate) async fn assert_ledger_adds_up(test: &TestApp) -> Vec<Value> {
    let entries = ledger(test).await;
    let mut oldest_first = entries.clone();
    oldest_first.reverse();
    let mut running = 0;
    for entry in &oldest_first {
        running += entry["amount"].as_i64().unwrap();
        assert_eq!(entry["balance_after"].as_i64().unwrap(), running, "{entry}");
        assert!(running >= 0, "the balance never went below zero: {entry}");
    }
    assert_eq!(running, balance(test).await, "the ledger sums to the balance");
    entries
}

pub(crate) fn reasons<'a>(entries: &'a [Value], reason: &str) -> Vec<&'a Value> {
    entries.iter().filter(|entry| entry["reason"] == reason).collect()
}

/// Thirty Image Generation tasks (4 credits each) against a balance of 40: exactly ten
/// start, whatever the workers race; the other twenty are blocked for credits and the
/// run ends `partial_complete` with `needs_credits`, saying how many are missing.
async fn concurrent_tasks_never_take_the_balance_below_zero(backend: Backend) {
    let harness = Harness::tuned_with(backend, 6, |settings| settings).await;
    let test = organization(&harness, "free", 40, None).await;
    let names: Vec<String> = (0..30).map(|at| format!("image {at}")).collect();
    let nodes: Vec<(&str, _, Value)> =
        names.iter().map(|name| (name.as_str(), IMAGE_GENERATION, json!({"prompt": name, "quality": "low"}))).collect();
    let (agent, _) = create_agent(&test, &nodes, &[]).await;
    let run = start(&test, &agent).await;
    let record = finished(&test, &run).await;
    assert_eq!(record["status"], "partial_complete", "{record}");
    assert_eq!(record["needs_credits"], true);
    assert_eq!(record["outputs"].as_array().unwrap().len(), 10, "{record}");
    let message = record["status_message"].as_str().unwrap();
    assert!(message.contains("80 more credits are needed") && message.contains("20 blocked tasks"), "{message}");
    assert_eq!(record["node_status_counts"], json!({"completed": 10, "in_progress": 20, "failed": 0}));
    let (status, nodes) = test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    assert_eq!(status, StatusCode::OK);
    let nodes = nodes["nodes"].as_array().unwrap();
    let blocked: Vec<&Value> = nodes.iter().filter(|node| node["status"] == "blocked").collect();
    assert_eq!(blocked.len(), 20, "{nodes:?}");
    assert!(blocked.iter().all(|node| node["needs_credits"] == true));
    assert!(nodes.iter().filter(|node| node["status"] == "completed").all(|node| node["needs_credits"] == false));
    assert_eq!(balance(&test).await, 0);
    let entries = assert_ledger_adds_up(&test).await;
    let charges = reasons(&entries, "task_charge");
    assert_eq!(charges.len(), 10, "{entries:?}");
    assert!(charges.iter().all(|entry| entry["amount"] == -4 && entry["run_id"] == run.as_str()));
    assert!(charges.iter().all(|entry| entry["agent_node_id"].is_string()));
    assert_eq!(reasons(&entries, "opening_balance").len(), 1);

    // A run that ended partially for credits is resumed like a failed one: with the
    // credits now there, the twenty blocked tasks run and the run completes.
    let (_, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "creator"}))).await;
    let checkout = upgraded["checkout_url"].as_str().unwrap();
    assert_eq!(page(&format!("{checkout}/complete"), Method::POST).await.0, StatusCode::OK);
    let (status, resumed) = test.call(Method::POST, &format!("/agent_run/{run}/resume"), None).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["requeued_nodes"], 20, "{resumed}");
    let record = finished(&test, &run).await;
    assert_eq!(
        (record["status"].clone(), record["needs_credits"].clone()),
        (json!("completed"), json!(false)),
        "{record}"
    );
    assert_eq!(record["outputs"].as_array().unwrap().len(), 30);
    assert_eq!(balance(&test).await, 2500 - 80);
    assert_ledger_adds_up(&test).await;
}

/// A provider outage (ours) fails the node and gives its price back; the ledger shows
/// the charge and the refund.
async fn a_task_failed_for_our_reason_gets_its_credits_back(backend: Backend) {
    use shared::config::{GenerationSettings, ProviderAccess, ProviderChoice, ProviderKey};
    // Nothing listens here: the provider is unreachable.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let generation = GenerationSettings {
        image: ProviderChoice::OpenAi,
        openai: Some(ProviderAccess {
            base_url: format!("http://{closed}/v1"),
            key: ProviderKey::Value("sk-test-0000000000".into()),
        }),
        ..GenerationSettings::default()
    };
    let harness = Harness::tuned(backend, |settings| Settings { generation, ..settings }).await;
    let test = organization(&harness, "free", 50, None).await;
    let (agent, _) = create_agent(
        &test,
        &[
            ("image", IMAGE_GENERATION, json!({"prompt": "a red square", "quality": "high"})),
            ("out", DESTINATION, json!({})),
        ],
        &[("image", "out")],
    )
    .await;
    let run = start(&test, &agent).await;
    let record = finished(&test, &run).await;
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(record["needs_credits"], false);
    assert_eq!(balance(&test).await, 50, "the price was given back");
    let entries = assert_ledger_adds_up(&test).await;
    let (charges, refunds) = (reasons(&entries, "task_charge"), reasons(&entries, "refund"));
    assert_eq!((charges.len(), refunds.len()), (1, 1), "{entries:?}");
    assert_eq!(charges[0]["amount"], -16, "high quality: 4 × 4");
    assert_eq!(refunds[0]["amount"], 16);
    assert_eq!(refunds[0]["agent_node_id"], charges[0]["agent_node_id"]);
}

/// The catalog's 4k multiplier: with 150 credits a 5 s 1080p Video Generation (100)
/// runs and a 5 s 4k one (200) is blocked, the run saying it costs 200.
async fn a_4k_video_generation_costs_twice_the_1080p_one(backend: Backend) {
    let harness = Harness::new(backend).await;
    let test = organization(&harness, "free", 150, None).await;
    let video = |resolution: &str| json!({"prompt": "waves", "model": "veo-3", "resolution": resolution, "aspect_ratio": "16:9", "duration": "5"});
    let (agent, ids) =
        create_agent(&test, &[("hd", VIDEO_GENERATION, video("1080p")), ("uhd", VIDEO_GENERATION, video("4k"))], &[])
            .await;
    let run = start(&test, &agent).await;
    let record = finished(&test, &run).await;
    assert_eq!(record["status"], "partial_complete", "{record}");
    assert_eq!(record["needs_credits"], true);
    let message = record["status_message"].as_str().unwrap();
    assert!(message.contains("1 blocked tasks cost 200 credits"), "{message}");
    let entries = assert_ledger_adds_up(&test).await;
    let charges = reasons(&entries, "task_charge");
    assert_eq!(charges.len(), 1, "{entries:?}");
    assert_eq!(charges[0]["amount"], -100, "5 s at 20 credits a second");
    let (_, nodes) = test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    let node = |template: &str| {
        nodes["nodes"].as_array().unwrap().iter().find(|node| node["original_node_id"] == template).unwrap().clone()
    };
    assert_eq!(node(&ids["hd"])["status"], "completed");
    assert_eq!(
        (node(&ids["uhd"])["status"].clone(), node(&ids["uhd"])["needs_credits"].clone()),
        (json!("blocked"), json!(true))
    );
    assert_eq!(charges[0]["agent_node_id"], node(&ids["hd"])["agent_node_id"]);
}

/// A request to `serve` (the sandbox checkout pages), without following redirects.
async fn page(url: &str, method: Method) -> (StatusCode, Option<String>, String) {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let request = http::Request::builder().method(method).uri(url).body(http_body_util::Full::default()).unwrap();
    let response = client.request(request).await.expect("serve answers");
    let status = response.status();
    let location = response.headers().get(http::header::LOCATION).map(|value| value.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.expect("a body").to_bytes();
    (status, location, String::from_utf8_lossy(&body).into_owned())
}

/// The contract's credit-blocked flow, as the README walks it: detect `needs_credits`,
/// check the plan, list plans, upgrade (a checkout), finish the sandbox checkout, check
/// the plan again, turn auto top-up on, resume: the run completes.
async fn the_credit_blocked_flow_completes_after_an_upgrade_and_a_resume(backend: Backend) {
    let harness = Harness::new(backend).await;
    let test = organization(&harness, "free", 0, None).await;
    let (agent, ids) = create_agent(
        &test,
        &[("image", IMAGE_GENERATION, json!({"prompt": "a blue circle"})), ("out", DESTINATION, json!({}))],
        &[("image", "out")],
    )
    .await;
    let receiver = crate::webhooks::Receiver::start(crate::webhooks::Mode::Accept).await;
    let (status, started) =
        test.call(Method::POST, &format!("/agent/{agent}/run"), Some(json!({ "callback_url": receiver.url }))).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let run = started["run_id"].as_str().unwrap().to_owned();
    let record = finished(&test, &run).await;
    assert_eq!((record["status"].clone(), record["needs_credits"].clone()), (json!("failed"), json!(true)), "{record}");
    assert!(record["status_message"].as_str().unwrap().contains("4 more credits are needed"), "{record}");
    // The webhooks say so too: the node blocked for credits, and RUN_FINISHED.
    let events = receiver.finished_cycles(1).await;
    let blocked = events
        .iter()
        .flat_map(|event| event.body["updated_nodes"].as_array().cloned().unwrap_or_default())
        .find(|node| node["original_node_id"] == ids["image"] && node["status"] == "blocked")
        .expect("a RUN_PROGRESS with the node blocked");
    assert_eq!(blocked["needs_credits"], true, "{blocked}");
    let finish = &events.iter().find(|event| event.body["flag"] == "RUN_FINISHED").unwrap().body;
    assert_eq!((finish["status"].clone(), finish["needs_credits"].clone()), (json!("failed"), json!(true)), "{finish}");
    assert_eq!(finish["status_message"], record["status_message"]);
    let (_, nodes) = test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    let image =
        nodes["nodes"].as_array().unwrap().iter().find(|node| node["original_node_id"] == ids["image"]).unwrap();
    assert_eq!((image["status"].clone(), image["needs_credits"].clone()), (json!("blocked"), json!(true)));

    let (status, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(plan["plan"]["id"], "free");
    assert_eq!(plan["credits"], json!({"balance": 0, "usage": 0, "included_usage": 100, "unlimited": false}));
    let (status, plans) = test.call(Method::GET, "/plan/list", None).await;
    assert_eq!(status, StatusCode::OK);
    let ids_listed: Vec<&str> =
        plans["plans"].as_array().unwrap().iter().map(|plan| plan["id"].as_str().unwrap()).collect();
    assert_eq!(ids_listed, ["free", "creator", "creator_annual", "professional", "professional_annual"]);
    assert_eq!(plans["plans"][1]["price_usd"], 50);
    assert_eq!(plans["plans"][1]["credits_per_month"], 2500);
    assert_eq!(plans["plans"][4]["price_usd"], 1500);

    let body = json!({"plan_id": "creator", "success_url": "https://example.com/paid", "cancel_url": "https://example.com/back"});
    let (status, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{upgraded}");
    assert_eq!((upgraded["success"].clone(), upgraded["requires_checkout"].clone()), (json!(true), json!(true)));
    assert_eq!(upgraded["plan_id"], "creator");
    let checkout = upgraded["checkout_url"].as_str().unwrap();
    let (status, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!((status, plan["plan"]["id"].clone()), (StatusCode::OK, json!("free")), "nothing changes before payment");

    let (status, _, html) = page(checkout, Method::GET).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("creator") && html.contains("/complete") && html.contains("/cancel"), "{html}");
    for _ in 0..2 {
        let (status, location, _) = page(&format!("{checkout}/complete"), Method::POST).await;
        assert_eq!((status, location.as_deref()), (StatusCode::SEE_OTHER, Some("https://example.com/paid")));
    }
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!(plan["plan"]["id"], "creator");
    assert_eq!(plan["plan"]["family"], "creator");
    assert_eq!(plan["credits"]["balance"], 2500, "granted once, though completed twice: {plan}");

    let settings = json!({"auto_topup": {"enabled": true, "threshold": 100, "quantity": 500}});
    let (status, credits) = test.call(Method::POST, "/credits/settings", Some(settings)).await;
    assert_eq!(status, StatusCode::OK, "{credits}");
    assert_eq!(
        credits["auto_topup"],
        json!({"enabled": true, "threshold": 100, "quantity": 500, "monthly_limit": 5000, "cover_shortfall": false})
    );
    assert_eq!(credits["auto_topup_month"]["state"], "ready", "{credits}");

    let (status, resumed) = test.call(Method::POST, &format!("/agent_run/{run}/resume"), None).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["requeued_nodes"], 2, "{resumed}");
    let record = finished(&test, &run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["needs_credits"], false);
    assert_eq!(balance(&test).await, 2496);
    let entries = assert_ledger_adds_up(&test).await;
    assert_eq!(reasons(&entries, "plan_change").len(), 1);
    assert_eq!(reasons(&entries, "task_charge").len(), 1);
}

/// With auto top-up on, a task short of credits buys them (the sandbox pays at once)
/// and starts by itself: the run completes without a resume.
async fn auto_top_up_unblocks_a_task_without_a_resume(backend: Backend) {
    let harness =
        Harness::tuned(backend, |settings| Settings { blocked_retry: Duration::from_millis(300), ..settings }).await;
    let test = organization(&harness, "creator", 2, None).await;
    let settings = json!({"auto_topup": {"enabled": true, "threshold": 0, "quantity": 10}});
    let (status, answer) = test.call(Method::POST, "/credits/settings", Some(settings)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (agent, _) = create_agent(
        &test,
        &[
            ("image", IMAGE_GENERATION, json!({"prompt": "a star", "quality": "medium"})),
            ("out", DESTINATION, json!({})),
        ],
        &[("image", "out")],
    )
    .await;
    let run = start(&test, &agent).await;
    let record = finished(&test, &run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["needs_credits"], false);
    assert!(record["resumes"].as_array().is_none_or(|resumes| resumes.is_empty()), "{record}");
    let entries = assert_ledger_adds_up(&test).await;
    let top_ups = reasons(&entries, "top_up");
    assert_eq!(top_ups.len(), 1, "one purchase: {entries:?}");
    assert_eq!(top_ups[0]["amount"], 10);
    assert_eq!(reasons(&entries, "task_charge")[0]["amount"], -8);
    assert_eq!(balance(&test).await, 2 + 10 - 8);
}

/// An organization whose plan started 40 days ago is owed one grant; twenty requests
/// at once make exactly one.
async fn a_period_grant_happens_once_under_concurrent_requests(backend: Backend) {
    let harness = Harness::with_workers(backend, 0).await;
    let started = Timestamp::from_unix_millis(Timestamp::now().unix_millis() - 40 * 24 * 3600 * 1000);
    let test = Arc::new(organization(&harness, "free", 10, Some(started)).await);
    let reads = (0..20).map(|at| {
        let test = test.clone();
        async move {
            let path = if at % 2 == 0 { "/credits" } else { "/plan" };
            let (status, body) = test.call(Method::GET, path, None).await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    });
    futures::future::join_all(reads).await;
    assert_eq!(balance(&test).await, 110);
    let entries = assert_ledger_adds_up(&test).await;
    assert_eq!(reasons(&entries, "period_grant").len(), 1, "{entries:?}");
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    let period_start = Timestamp::parse(plan["plan"]["current_period_start"].as_str().unwrap()).unwrap();
    assert!(period_start > started && period_start <= Timestamp::now(), "{plan}");
    assert_eq!(plan["credits"]["usage"], 0);
}

async fn plan_and_credit_refusals_name_the_problem_and_change_nothing(backend: Backend) {
    let harness = Harness::with_workers(backend, 0).await;
    let test = organization(&harness, "free", 10, None).await;
    let refused = |status: StatusCode, body: &Value, expected: StatusCode, mentions: &str| {
        assert_eq!(status, expected, "{body}");
        let detail = body["detail"].as_str().unwrap_or_else(|| panic!("{{detail}}: {body}"));
        assert!(detail.contains(mentions), "{detail:?} should mention {mentions:?}");
    };
    for (body, mentions) in [
        (json!({"plan_id": "enterprise"}), "plan_id"),
        (json!({"plan_id": 3}), "plan_id"),
        (json!({}), "plan_id"),
        (json!({"plan_id": "creator", "coupon": "x"}), "coupon"),
        (json!({"plan_id": "creator", "success_url": "ftp://example.com"}), "success_url"),
    ] {
        let (status, answer) = test.call(Method::POST, "/plan/upgrade", Some(body)).await;
        refused(status, &answer, StatusCode::BAD_REQUEST, mentions);
    }
    let settings = |auto: Value| json!({ "auto_topup": auto });
    for (body, mentions) in [
        (settings(json!({"threshold": -1})), "threshold"),
        (settings(json!({"threshold": 1.5})), "threshold"),
        (settings(json!({"quantity": 1_000_001})), "quantity"),
        (settings(json!({"enabled": "yes"})), "enabled"),
        (settings(json!({"cover_shortfall": 1})), "cover_shortfall"),
        (settings(json!({"monthly_limit": -5})), "monthly_limit"),
        (settings(json!({"limit": 3})), "limit"),
        (json!({"auto": {}}), "auto"),
        (json!({}), "auto_topup"),
    ] {
        let (status, answer) = test.call(Method::POST, "/credits/settings", Some(body)).await;
        refused(status, &answer, StatusCode::BAD_REQUEST, mentions);
    }
    let (status, answer) = test.call(Method::POST, "/credits/settings", Some(settings(json!({"enabled": true})))).await;
    refused(status, &answer, StatusCode::FORBIDDEN, "creator");
    for query in ["limit=0", "limit=101", "limit=abc", "cursor=nope", "page=2"] {
        let (status, answer) = test.call(Method::GET, &format!("/credits/ledger?{query}"), None).await;
        refused(status, &answer, StatusCode::BAD_REQUEST, query.split('=').next().unwrap());
    }
    let (_, mut credits) = test.call(Method::GET, "/credits", None).await;
    assert_eq!(credits["auto_topup_month"]["state"], "off", "{credits}");
    credits.as_object_mut().unwrap().remove("auto_topup_month");
    assert_eq!(
        credits,
        json!({"balance": 10, "usage": 0, "auto_topup": {"enabled": false, "threshold": 0, "quantity": 0,
            "monthly_limit": 5000, "cover_shortfall": false}})
    );
    assert_eq!(ledger(&test).await.len(), 1, "only the opening balance");
    // Another organization's ledger is its own.
    let other = organization(&harness, "free", 3, None).await;
    let entries = ledger(&other).await;
    assert_eq!((entries.len(), entries[0]["amount"].clone()), (1, json!(3)));
}

/// Canceling the sandbox checkout buys nothing (and it cannot be paid after); between
/// paid plans a move up happens at once with the difference in credits, a move down at
/// the period's end.
async fn a_sandbox_checkout_cancels_and_a_paid_plan_changes_without_one(backend: Backend) {
    let harness = Harness::with_workers(backend, 0).await;
    let test = organization(&harness, "free", 0, None).await;
    let (_, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
    let checkout = upgraded["checkout_url"].as_str().unwrap().to_owned();
    let (status, _, html) = page(&format!("{checkout}/cancel"), Method::POST).await;
    assert_eq!(status, StatusCode::OK, "no cancel_url: a plain page");
    assert!(html.contains("Nothing was bought"), "{html}");
    let (status, _, _) = page(&format!("{checkout}/complete"), Method::POST).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _, _) = page(&format!("{}/not-a-checkout", checkout.rsplit_once('/').unwrap().0), Method::GET).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, plan) = test.call(Method::GET, "/plan", None).await;
    assert_eq!((plan["plan"]["id"].clone(), plan["credits"]["balance"].clone()), (json!("free"), json!(0)));

    let paid = organization(&harness, "creator", 100, None).await;
    let (status, changed) =
        paid.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional_annual"}))).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed, json!({"success": true, "requires_checkout": false, "plan_id": "professional_annual"}));
    let (_, plan) = paid.call(Method::GET, "/plan", None).await;
    assert_eq!(plan["plan"]["id"], "professional_annual");
    assert_eq!(plan["plan"]["family"], "professional");
    assert_eq!(plan["credits"]["balance"], 100 + 10_000 - 2_500, "the difference in monthly credits: {plan}");
    let (_, changed) = paid.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "creator"}))).await;
    assert_eq!(changed["requires_checkout"], false);
    let (_, plan) = paid.call(Method::GET, "/plan", None).await;
    assert_eq!(
        (plan["plan"]["id"].clone(), plan["scheduled_plan"].clone()),
        (json!("professional_annual"), json!("creator"))
    );
    // While a top-up awaits payment, credits are owed: no move to free.
    let credits = paid.app.credits();
    let mut owing = credits.account(paid.organization).await.unwrap().write();
    owing.account.pending_top_up =
        Some(PendingTopUp { purchase: "p-1".into(), quantity: 100, since: Timestamp::now() });
    assert_eq!(credits.write_account(&owing).await.unwrap(), Written::Done);
    let (status, refused) = paid.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "free"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("owed"), "{refused}");
    let mut settled = credits.account(paid.organization).await.unwrap().write();
    settled.account.pending_top_up = None;
    assert_eq!(credits.write_account(&settled).await.unwrap(), Written::Done);
    let (_, changed) = paid.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "free"}))).await;
    assert_eq!(changed["plan_id"], "free");
    let (_, plan) = paid.call(Method::GET, "/plan", None).await;
    assert_eq!(plan["scheduled_plan"], "free");
    assert!(plan["plan"]["canceled_at"].is_string(), "{plan}");
    let entries = assert_ledger_adds_up(&paid).await;
    assert_eq!(reasons(&entries, "plan_change").len(), 1);
}

// The money rules, at the domain's operations on each backend's store, against a
// billing provider whose answers the test sets and whose calls it reads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use shared::api::credits::parse;
use shared::domain::credits::billing::{
    BillingEvent, BillingEventKind, BillingProvider, EventError, OpenedCheckout, PlanChanged, TopUpState,
};
use shared::domain::credits::plans::PlanId;
use shared::domain::credits::service::{self, CreditError, CreditPorts, ToppedUp, Upgraded};
use shared::domain::credits::{Account, Checkout, CheckoutId, CheckoutStatus, PlanReservation, SubscriptionStatus};
use shared::domain::identity::OrganizationId;
use shared::domain::time::Clock;

/// A billing provider that records its calls, declines when told, and may hold
/// `change_plan` until the test lets it go.
struct Scripted {
    calls: Mutex<Vec<String>>,
    declines: AtomicBool,
    gated: AtomicBool,
    entered: tokio::sync::Semaphore,
    release: tokio::sync::Semaphore,
    checkouts: Mutex<Vec<CheckoutId>>,
}

impl Default for Scripted {
    fn default() -> Self {
        Scripted {
            calls: Mutex::default(),
            declines: AtomicBool::default(),
            gated: AtomicBool::default(),
            entered: tokio::sync::Semaphore::new(0),
            release: tokio::sync::Semaphore::new(0),
            checkouts: Mutex::default(),
        }
    }
}

impl Scripted {
    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl BillingProvider for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    async fn open_checkout(&self, checkout: &Checkout, _: &Account) -> anyhow::Result<OpenedCheckout> {
        self.record(format!("open_checkout {}", checkout.id));
        self.checkouts.lock().unwrap().push(checkout.id);
        Ok(OpenedCheckout { url: format!("https://pay.test/{}", checkout.id), provider_session: None })
    }
    async fn top_up(&self, _: &Account, purchase: &str, quantity: u64, _: u64) -> anyhow::Result<TopUpState> {
        self.record(format!("top_up {quantity}"));
        if self.declines.load(Ordering::SeqCst) {
            self.record(format!("void {purchase}"));
            return Ok(TopUpState::Declined("Your card was declined.".into()));
        }
        Ok(TopUpState::Paid)
    }
    async fn change_plan(&self, _: &Account, to: PlanId, at_renewal: bool, key: &str) -> anyhow::Result<PlanChanged> {
        self.record(format!("change_plan {} {at_renewal} {key}", to.as_str()));
        if self.gated.load(Ordering::SeqCst) {
            self.entered.add_permits(1);
            self.release.acquire().await.unwrap().forget();
        }
        if self.declines.load(Ordering::SeqCst) && !at_renewal {
            return Ok(PlanChanged::Declined("Your card was declined.".into()));
        }
        Ok(PlanChanged::Done)
    }
    async fn cancel_and_refund(&self, subscription: &str, invoice: Option<&str>, key: &str) -> anyhow::Result<()> {
        self.record(format!("cancel_and_refund {subscription} {} {key}", invoice.unwrap_or("-")));
        Ok(())
    }
    async fn void_invoice(&self, invoice: &str, key: &str) -> anyhow::Result<()> {
        self.record(format!("void_invoice {invoice} {key}"));
        Ok(())
    }
    async fn event(&self, _: &[u8], _: Option<&str>, _: Timestamp) -> Result<BillingEvent, EventError> {
        Err(EventError::Refused("none".into()))
    }
}

/// A clock the test moves.
struct TestClock(Mutex<Timestamp>);

impl TestClock {
    fn now_plus(&self, duration: Duration) {
        let mut now = self.0.lock().unwrap();
        *now = now.after(duration);
    }
}

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }
}

/// A store's organization with its provider and clock.
struct Books {
    harness: Harness,
    organization: OrganizationId,
    billing: Scripted,
    clock: TestClock,
}

impl Books {
    async fn new(backend: Backend, plan: &str, credits: i64, started: Option<Timestamp>) -> Self {
        let harness = Harness::with_workers(backend, 0).await;
        let (organization, _) = harness.test.add_organization_with(true, plan, credits, started).await;
        Books { harness, organization, billing: Scripted::default(), clock: TestClock(Mutex::new(Timestamp::now())) }
    }
    fn credits(&self) -> Arc<dyn shared::domain::credits::CreditRepo> {
        self.harness.test.app.credits().clone()
    }
    fn ports(&self) -> CreditPorts<'_> {
        CreditPorts { credits: self.harness.test.app.credits().as_ref(), billing: &self.billing, clock: &self.clock }
    }
    async fn account(&self) -> Account {
        self.credits().account(self.organization).await.unwrap()
    }
    /// Changes the stored account as `change` says (as a provider's past would have).
    async fn set(&self, change: impl FnOnce(&mut Account)) {
        let mut write = self.account().await.write();
        change(&mut write.account);
        assert_eq!(self.credits().write_account(&write).await.unwrap(), Written::Done);
    }
    async fn upgrade(&self, plan: &str) -> Result<Upgraded, CreditError> {
        service::upgrade(&self.ports(), self.organization, parse::upgrade_request(&json!({ "plan_id": plan }))?).await
    }
    async fn event(&self, kind: BillingEventKind) -> bool {
        let event = BillingEvent { id: format!("evt_{}", uuid::Uuid::new_v4().simple()), kind };
        service::apply_event(&self.ports(), &event, self.clock.now()).await.unwrap()
    }
    async fn entries(&self, reason: &str) -> usize {
        let entries = self.credits().ledger(self.organization, None, 1000).await.unwrap();
        entries.iter().filter(|entry| serde_json::to_value(entry.reason).unwrap() == reason).count()
    }
    async fn settings(&self, auto: Value) -> Result<Account, CreditError> {
        service::update_settings(
            &self.ports(),
            self.organization,
            parse::settings_change(&json!({ "auto_topup": auto }))?,
        )
        .await
    }
}

/// A move up whose payment is declined changes nothing and leaves no reservation; the
/// next one is made, under an idempotency key derived from its own reservation.
async fn a_declined_upgrade_grants_nothing_and_frees_its_reservation(backend: Backend) {
    let books = Books::new(backend, "creator", 100, None).await;
    books.billing.declines.store(true, Ordering::SeqCst);
    match books.upgrade("professional").await {
        Err(CreditError::PaymentRequired(detail)) => assert!(detail.contains("declined"), "{detail}"),
        other => panic!("a declined move up is a 402: {other:?}"),
    }
    let account = books.account().await;
    assert_eq!((account.plan, account.balance, account.plan_change.clone()), (PlanId::Creator, 100, None));
    assert_eq!(books.entries("plan_change").await, 0, "no credits without the money");
    let first_key = books.billing.calls()[0].rsplit(' ').next().unwrap().to_owned();
    assert_eq!(first_key, format!("plan-change-{}-{}", books.organization, account.seq - 1));

    books.billing.declines.store(false, Ordering::SeqCst);
    assert_eq!(books.upgrade("professional").await.unwrap(), Upgraded::Changed { plan: PlanId::Professional });
    let account = books.account().await;
    assert_eq!((account.plan, account.balance), (PlanId::Professional, 100 + 7_500));
    let calls = books.billing.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let second_key = calls[1].rsplit(' ').next().unwrap();
    assert_eq!(second_key, format!("plan-change-{}-{}", books.organization, account.seq - 1));
    assert_ne!(second_key, first_key, "a new reservation, a new key");
    assert_eq!(books.entries("plan_change").await, 1);
}

/// A move to free while credits are owed is refused before the provider hears of it.
async fn a_refused_downgrade_makes_no_billing_call(backend: Backend) {
    let books = Books::new(backend, "professional", 50, None).await;
    let pending = PendingTopUp { purchase: "p-1".into(), quantity: 100, since: Timestamp::now() };
    books.set(|account| account.pending_top_up = Some(pending)).await;
    match books.upgrade("free").await {
        Err(CreditError::Invalid(detail)) => assert!(detail.contains("owed"), "{detail}"),
        other => panic!("refused: {other:?}"),
    }
    assert_eq!(books.billing.calls(), Vec::<String>::new(), "no Stripe call for a refused change");
    let account = books.account().await;
    assert_eq!((account.scheduled_plan, account.plan_change), (None, None));
}

/// Two moves at once: the first reserves, the second is refused (409) without calling
/// the provider; one change is made and granted once.
async fn two_concurrent_upgrades_make_one_reservation(backend: Backend) {
    let books = Books::new(backend, "creator", 0, None).await;
    books.billing.gated.store(true, Ordering::SeqCst);
    let first = books.upgrade("professional");
    let second = async {
        // Once the first is at the provider (its reservation written), the second comes.
        books.billing.entered.acquire().await.unwrap().forget();
        let second = books.upgrade("professional_annual").await;
        books.billing.release.add_permits(1);
        second
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first.unwrap(), Upgraded::Changed { plan: PlanId::Professional });
    match second {
        Err(CreditError::Conflict(detail)) => assert!(detail.contains("in progress"), "{detail}"),
        other => panic!("the second is refused while the first is reserved: {other:?}"),
    }
    assert_eq!(books.billing.calls().len(), 1, "{:?}", books.billing.calls());
    let account = books.account().await;
    assert_eq!((account.plan, account.balance, account.plan_change), (PlanId::Professional, 7_500, None));
    assert_eq!(books.entries("plan_change").await, 1);
}

/// A renewal not paid (`past_due`, then `unpaid`) grants nothing for the new period; paid
/// again, the period's credits come once; the provider ending the subscription moves the
/// organization to free.
async fn past_due_or_unpaid_gets_no_monthly_grant_and_an_ended_subscription_is_free(backend: Backend) {
    let started = Timestamp::from_unix_millis(Timestamp::now().unix_millis() - 40 * 24 * 3600 * 1000);
    let books = Books::new(backend, "creator", 10, Some(started)).await;
    // The first month was paid; its renewal is not confirmed yet.
    let first_end = Timestamp::from_unix_millis(started.unix_millis() + 30 * 24 * 3600 * 1000);
    books
        .set(|account| {
            account.billing.subscription = Some("sub_1".into());
            account.billing.status = Some(SubscriptionStatus::Active);
            account.billing.paid_until = Some(first_end);
        })
        .await;
    let now = Timestamp::now();
    let account = service::current(books.credits().as_ref(), books.organization, now).await.unwrap();
    assert_eq!(account.balance, 10, "a renewal not confirmed: no grant yet");
    let changed = |status| BillingEventKind::SubscriptionChanged {
        organization: books.organization,
        subscription: "sub_1".into(),
        status,
        plan: None,
        at: None,
    };
    assert!(books.event(changed(SubscriptionStatus::PastDue)).await);
    let account = service::current(books.credits().as_ref(), books.organization, now).await.unwrap();
    assert_eq!(account.balance, 10, "past due: no grant");
    assert_eq!(json!(shared::domain::credits::views::plan_view(&account, now))["plan"]["status"], "past_due");
    assert!(books.event(changed(SubscriptionStatus::Unpaid)).await);
    let account = service::current(books.credits().as_ref(), books.organization, now).await.unwrap();
    assert_eq!(account.balance, 10, "unpaid: no grant");
    assert_eq!(books.entries("period_grant").await, 0);
    // A move up while the renewal is unpaid is refused before the provider is called.
    assert!(matches!(books.upgrade("professional").await, Err(CreditError::PaymentRequired(_))));
    assert_eq!(books.billing.calls(), Vec::<String>::new());

    let next_end = Timestamp::from_unix_millis(now.unix_millis() + 20 * 24 * 3600 * 1000);
    // Active again (the provider moved the period on) but its invoice not paid yet: nothing.
    assert!(books.event(changed(SubscriptionStatus::Active)).await);
    let account = service::current(books.credits().as_ref(), books.organization, now).await.unwrap();
    assert_eq!(account.balance, 10, "active is not paid: no grant before the renewal's invoice.paid");
    let renewal = BillingEventKind::RenewalPaid {
        organization: books.organization,
        subscription: "sub_1".into(),
        paid_until: Some(next_end),
    };
    assert!(books.event(renewal).await, "the invoice paid");
    for _ in 0..2 {
        let account = service::current(books.credits().as_ref(), books.organization, now).await.unwrap();
        assert_eq!(account.balance, 10 + 2_500, "the period's credits, once paid");
    }
    assert_eq!(books.entries("period_grant").await, 1);

    let ended = BillingEventKind::SubscriptionEnded { organization: books.organization, subscription: "sub_1".into() };
    assert!(books.event(ended.clone()).await);
    assert!(
        !books
            .event(BillingEventKind::SubscriptionEnded {
                organization: books.organization,
                subscription: "sub_other".into()
            })
            .await
    );
    let account = books.account().await;
    assert_eq!((account.plan, account.billing.subscription, account.balance), (PlanId::Free, None, 2_510));
}

/// Two checkouts opened from free and both paid: the first subscription is kept, the
/// second is ended and refunded at the provider, and one plan's credits are granted.
async fn two_checkouts_from_free_track_one_subscription_and_refund_the_second(backend: Backend) {
    let books = Books::new(backend, "free", 0, None).await;
    for plan in ["creator", "professional"] {
        assert!(matches!(books.upgrade(plan).await.unwrap(), Upgraded::Checkout { .. }));
    }
    let ids = books.billing.checkouts.lock().unwrap().clone();
    for id in &ids {
        let stored = books.credits().checkout(*id).await.unwrap().unwrap();
        assert_eq!(stored.status, CheckoutStatus::Open);
    }
    let paid = |at: usize, plan| BillingEventKind::PlanPaid {
        organization: books.organization,
        checkout: ids[at],
        plan,
        customer: Some("cus_1".into()),
        subscription: Some(format!("sub_{at}")),
        invoice: Some(format!("in_{at}")),
    };
    // Paid at once: whichever lands first is kept.
    let (a, b) = tokio::join!(books.event(paid(0, PlanId::Creator)), books.event(paid(1, PlanId::Professional)));
    assert!(a && b);
    let account = books.account().await;
    let kept = account.billing.subscription.clone().unwrap();
    let (kept_at, refunded_at) = if kept == "sub_0" { (0, 1) } else { (1, 0) };
    let refunds: Vec<String> =
        books.billing.calls().into_iter().filter(|call| call.starts_with("cancel_and_refund")).collect();
    assert_eq!(
        refunds,
        [format!("cancel_and_refund sub_{refunded_at} in_{refunded_at} second-checkout-{}", ids[refunded_at])]
    );
    let credits = books.credits();
    let kept_status = credits.checkout(ids[kept_at]).await.unwrap().unwrap().status;
    let refunded_status = credits.checkout(ids[refunded_at]).await.unwrap().unwrap().status;
    assert_eq!((kept_status, refunded_status), (CheckoutStatus::Completed, CheckoutStatus::Refunded));
    assert_eq!(account.balance, account.plan.plan().credits_per_month, "one plan's credits: {account:?}");
    assert_eq!(books.entries("plan_change").await, 1);
    // Sent again, neither changes anything nor calls the provider again.
    assert!(!books.event(paid(refunded_at, PlanId::Creator)).await);
    assert!(!books.event(paid(kept_at, PlanId::Creator)).await);
    assert_eq!(books.billing.calls().iter().filter(|call| call.starts_with("cancel_and_refund")).count(), 1);
    assert_eq!(books.account().await.balance, account.balance);
    // A crash after the refund's keys were recorded and before its checkout was marked:
    // the event sent again marks it refunded (the refund itself is idempotent).
    let mut stuck = credits.checkout(ids[refunded_at]).await.unwrap().unwrap();
    stuck.status = CheckoutStatus::Open;
    credits.put_checkout(&stuck).await.unwrap();
    assert!(!books.event(paid(refunded_at, PlanId::Professional)).await, "nothing more is applied");
    let status = credits.checkout(ids[refunded_at]).await.unwrap().unwrap().status;
    assert_eq!(status, CheckoutStatus::Refunded, "never left open");
    assert_eq!(books.account().await.balance, account.balance);
}

/// The provider's subscription says another plan: ours follows (no credits for it),
/// and an event older than our plan does not undo it; a reservation the provider made
/// (its answer lost) is finished from the event, granting its difference once.
async fn a_plan_that_disagrees_with_the_provider_is_corrected_from_its_events(backend: Backend) {
    let books = Books::new(backend, "creator", 5, None).await;
    books.set(|account| account.billing.subscription = Some("sub_1".into())).await;
    let changed = |plan, at| BillingEventKind::SubscriptionChanged {
        organization: books.organization,
        subscription: "sub_1".into(),
        status: SubscriptionStatus::Active,
        plan: Some(plan),
        at,
    };
    assert!(books.event(changed(PlanId::Professional, Some(Timestamp::now()))).await);
    let account = books.account().await;
    assert_eq!((account.plan, account.balance), (PlanId::Professional, 5));
    let old = Timestamp::from_unix_millis(account.plan_started_at.unix_millis() - 3_600_000);
    assert!(!books.event(changed(PlanId::Creator, Some(old))).await, "an older event undoes nothing");
    assert_eq!(books.account().await.plan, PlanId::Professional);
    // Another subscription's event changes nothing.
    let other = BillingEventKind::SubscriptionChanged {
        organization: books.organization,
        subscription: "sub_other".into(),
        status: SubscriptionStatus::PastDue,
        plan: Some(PlanId::Creator),
        at: None,
    };
    assert!(!books.event(other).await);

    let reservation = PlanReservation { key: "k-1".into(), to: PlanId::ProfessionalAnnual, since: Timestamp::now() };
    books.set(|account| account.plan_change = Some(reservation)).await;
    assert!(books.event(changed(PlanId::ProfessionalAnnual, Some(Timestamp::now()))).await);
    let account = books.account().await;
    assert_eq!((account.plan, account.plan_change.clone()), (PlanId::ProfessionalAnnual, None));
    assert_eq!(account.balance, 5, "annual and monthly professional grant the same");
}

/// Auto top-up buys up to its monthly ceiling and then nothing (the state says so); a
/// quantity above the ceiling is refused when set.
async fn auto_top_up_stops_at_its_monthly_ceiling(backend: Backend) {
    let books = Books::new(backend, "creator", 0, None).await;
    let account = books.settings(json!({"enabled": true, "threshold": 10})).await.unwrap();
    assert_eq!(account.auto_topup.monthly_limit, 5_000, "the documented default");
    match books.settings(json!({"quantity": 60, "monthly_limit": 50})).await {
        Err(CreditError::Invalid(detail)) => assert!(detail.contains("monthly_limit"), "{detail}"),
        other => panic!("{other:?}"),
    }
    books.settings(json!({"quantity": 20, "monthly_limit": 50})).await.unwrap();
    let wait = Duration::from_secs(600);
    for _ in 0..2 {
        assert_eq!(service::auto_top_up(&books.ports(), books.organization, 0, wait).await.unwrap(), ToppedUp::Granted);
        books.set(|account| account.balance = 0).await;
    }
    assert_eq!(
        service::auto_top_up(&books.ports(), books.organization, 0, wait).await.unwrap(),
        ToppedUp::LimitReached
    );
    assert_eq!(books.billing.calls(), ["top_up 20", "top_up 20"], "nothing bought past the ceiling");
    let view = json!(shared::domain::credits::views::credits_view(&books.account().await, books.clock.now()));
    assert_eq!(
        (view["auto_topup_month"]["bought"].clone(), view["auto_topup_month"]["state"].clone()),
        (json!(40), json!("limit_reached"))
    );
    // A higher ceiling lets it buy again.
    books.settings(json!({"monthly_limit": 60})).await.unwrap();
    assert_eq!(service::auto_top_up(&books.ports(), books.organization, 0, wait).await.unwrap(), ToppedUp::Granted);
}

/// A blocked task lacking 30 credits: the quantity (10) is bought, not the shortfall,
/// unless the organization opted in with `cover_shortfall`.
async fn a_top_up_buys_its_quantity_unless_opted_in_to_cover_the_shortfall(backend: Backend) {
    let books = Books::new(backend, "professional", 0, None).await;
    books.settings(json!({"enabled": true, "threshold": 0, "quantity": 10})).await.unwrap();
    let wait = Duration::from_secs(600);
    service::auto_top_up(&books.ports(), books.organization, 30, wait).await.unwrap();
    assert_eq!(books.account().await.balance, 10);
    books.settings(json!({"cover_shortfall": true})).await.unwrap();
    service::auto_top_up(&books.ports(), books.organization, 30, wait).await.unwrap();
    assert_eq!(books.account().await.balance, 40);
    assert_eq!(books.billing.calls(), ["top_up 10", "top_up 30"]);
}

/// A declined card: one attempt per task wait (however often the task looks again),
/// nothing counted towards the ceiling; the provider's failure event voids its invoice.
async fn a_declined_top_up_waits_for_the_next_task_wait_and_its_invoice_is_voided(backend: Backend) {
    let books = Books::new(backend, "creator", 0, None).await;
    books.settings(json!({"enabled": true, "threshold": 5, "quantity": 100})).await.unwrap();
    books.billing.declines.store(true, Ordering::SeqCst);
    let wait = Duration::from_secs(600);
    let top_up = || async { service::auto_top_up(&books.ports(), books.organization, 8, wait).await };
    assert_eq!(top_up().await.unwrap(), ToppedUp::Declined);
    for _ in 0..5 {
        // A blocked task looks again every 10 s.
        books.clock.now_plus(Duration::from_secs(10));
        assert_eq!(top_up().await.unwrap(), ToppedUp::Declined);
    }
    let calls = books.billing.calls();
    assert_eq!(calls.len(), 2, "one purchase (and its void): {calls:?}");
    assert!(calls[1].starts_with("void "), "{calls:?}");
    let account = books.account().await;
    assert_eq!((account.balance, account.pending_top_up.clone(), account.top_ups.bought), (0, None, 0));
    assert!(account.top_ups.declined_at.is_some());
    // The next task wait tries once more.
    books.clock.now_plus(wait);
    books.billing.declines.store(false, Ordering::SeqCst);
    assert_eq!(top_up().await.unwrap(), ToppedUp::Granted);
    assert_eq!(books.account().await.balance, 100);

    // A payment that fails later (the provider's event): its invoice voided, the
    // purchase released, the next attempt held off.
    let pending = PendingTopUp { purchase: "p-late".into(), quantity: 100, since: books.clock.now() };
    books
        .set(|account| {
            account.pending_top_up = Some(pending);
            account.top_ups.bought += 100;
        })
        .await;
    let failed = BillingEventKind::TopUpFailed {
        organization: books.organization,
        purchase: "p-late".into(),
        invoice: Some("in_late".into()),
    };
    assert!(books.event(failed.clone()).await);
    assert!(books.billing.calls().contains(&"void_invoice in_late p-late-void".to_owned()));
    let account = books.account().await;
    assert_eq!((account.pending_top_up.clone(), account.top_ups.bought), (None, 100));
    assert_eq!(account.top_ups.declined_at, Some(books.clock.now()));
    books.set(|account| account.balance = 0).await;
    assert_eq!(top_up().await.unwrap(), ToppedUp::Declined, "held off for a task wait");
}

/// Through `serve`'s sandbox pages: a declined card buys nothing, a second checkout from
/// free is refunded, a past-due subscription cannot move up, the card on file declines
/// and pays, and the provider ending the subscription moves the organization to free.
async fn the_sandbox_plays_every_outcome_of_a_subscription(backend: Backend) {
    let harness = Harness::with_workers(backend, 0).await;
    let test = organization(&harness, "free", 0, None).await;
    let mut checkouts = Vec::new();
    for plan in ["creator", "professional"] {
        let (status, upgraded) = test.call(Method::POST, "/plan/upgrade", Some(json!({ "plan_id": plan }))).await;
        assert_eq!(status, StatusCode::OK, "{upgraded}");
        checkouts.push(upgraded["checkout_url"].as_str().unwrap().to_owned());
    }
    let (status, _, html) = page(&format!("{}/decline", checkouts[0]), Method::POST).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{html}");
    assert!(html.contains("declined"), "{html}");
    let plan = |test: &TestApp| {
        let test = test.clone();
        async move { test.call(Method::GET, "/plan", None).await.1 }
    };
    assert_eq!(plan(&test).await["plan"]["id"], "free", "a declined card buys nothing");
    assert_eq!(page(&format!("{}/complete", checkouts[0]), Method::POST).await.0, StatusCode::OK);
    let (status, _, html) = page(&format!("{}/complete", checkouts[1]), Method::POST).await;
    assert_eq!(status, StatusCode::CONFLICT, "{html}");
    assert!(html.contains("refunded"), "{html}");
    let (_, _, html) = page(&checkouts[1], Method::GET).await;
    assert!(html.contains("refunded"), "{html}");
    let now = plan(&test).await;
    assert_eq!((now["plan"]["id"].clone(), now["credits"]["balance"].clone()), (json!("creator"), json!(2500)));
    let sandbox = test.app.billing().sandbox().unwrap().calls();
    assert!(sandbox.iter().any(|call| call.starts_with("cancel_and_refund sandbox_sub_")), "{sandbox:?}");

    let subscription = &checkouts[0];
    let (_, _, html) = page(subscription, Method::GET).await;
    assert!(html.contains("/past_due") && html.contains("/end"), "{html}");
    for (action, status) in [("past_due", "past_due"), ("unpaid", "unpaid")] {
        assert_eq!(page(&format!("{subscription}/{action}"), Method::POST).await.0, StatusCode::OK);
        assert_eq!(plan(&test).await["plan"]["status"], status);
        let (code, refused) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
        assert_eq!(code, StatusCode::PAYMENT_REQUIRED, "{refused}");
        assert!(refused["detail"].as_str().unwrap().contains(status), "{refused}");
    }
    assert_eq!(page(&format!("{subscription}/renewal_paid"), Method::POST).await.0, StatusCode::OK);
    assert_eq!(plan(&test).await["plan"]["status"], "active");
    assert_eq!(page(&format!("{subscription}/card_declines"), Method::POST).await.0, StatusCode::OK);
    let (code, refused) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
    assert_eq!(code, StatusCode::PAYMENT_REQUIRED, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("declined"), "{refused}");
    assert_eq!(plan(&test).await["credits"]["balance"], 2500, "a declined move up grants nothing");
    // A top-up on the declining card: nothing granted, its invoice voided, held off.
    let settings = json!({"auto_topup": {"enabled": true, "threshold": 3000, "quantity": 100}});
    assert_eq!(test.call(Method::POST, "/credits/settings", Some(settings)).await.0, StatusCode::OK);
    let app = &test.app;
    let ports =
        CreditPorts { credits: app.credits().as_ref(), billing: app.billing().as_ref(), clock: app.clock.as_ref() };
    for _ in 0..2 {
        let topped = service::auto_top_up(&ports, test.organization, 0, Duration::from_secs(600)).await.unwrap();
        assert_eq!(topped, ToppedUp::Declined);
    }
    let sandbox = app.billing().sandbox().unwrap().calls();
    assert_eq!(sandbox.iter().filter(|call| call.starts_with("top_up ")).count(), 1, "{sandbox:?}");
    assert!(sandbox.iter().any(|call| call.starts_with("void ")), "{sandbox:?}");
    let (_, credits) = test.call(Method::GET, "/credits", None).await;
    assert_eq!(credits["balance"], 2500);
    assert!(credits["auto_topup_month"]["declined_at"].is_string(), "{credits}");
    assert_eq!(page(&format!("{subscription}/card_pays"), Method::POST).await.0, StatusCode::OK);
    let (code, changed) = test.call(Method::POST, "/plan/upgrade", Some(json!({"plan_id": "professional"}))).await;
    assert_eq!(code, StatusCode::OK, "{changed}");
    assert_eq!(plan(&test).await["credits"]["balance"], 10_000);
    assert_eq!(page(&format!("{subscription}/end"), Method::POST).await.0, StatusCode::OK);
    let now = plan(&test).await;
    assert_eq!((now["plan"]["id"].clone(), now["credits"]["balance"].clone()), (json!("free"), json!(10_000)));
    assert_eq!(page(&format!("{subscription}/nonsense"), Method::POST).await.0, StatusCode::NOT_FOUND);
    assert_ledger_adds_up(&test).await;
}
