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
    assert_eq!(credits["auto_topup"], json!({"enabled": true, "threshold": 100, "quantity": 500}));

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
    let (_, credits) = test.call(Method::GET, "/credits", None).await;
    assert_eq!(
        credits,
        json!({"balance": 10, "usage": 0, "auto_topup": {"enabled": false, "threshold": 0, "quantity": 0}})
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
