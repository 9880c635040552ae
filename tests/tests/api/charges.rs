//! Every change of a run fits one DynamoDB transaction whatever its graph (both
//! backends): a task's charge is one ledger entry with a line per priced node, so a long
//! chain is claimed; a cancel of a wide fan-out owes its refunds and pays them in
//! bounded batches, each task's once, and a cancel stopped before its batches is paid by
//! the sweep.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::core::retry::RUN_UPDATE_CONFLICTS;
use shared::domain::media::ports::MediaToolkit;
use shared::domain::media::{MediaError, RenderJob};
use shared::domain::nodes::{NodeTypeId, DESTINATION, SPEED, VIDEO_INPUT};
use shared::domain::runs::service::{change_run, Change};
use shared::domain::runs::RunId;

use crate::conformance;
use crate::credits::{assert_ledger_adds_up, balance, organization, reasons};
use crate::helpers::{alone_on_dynamodb, Backend, RenderHook, RendersBy, TestApp};
use crate::runs::{create_agent, Harness};

conformance!(
    a_198_node_chain_of_priced_edits_completes_and_is_charged_once,
    a_cancel_while_64_tasks_run_refunds_each_task_once_in_batches,
);

/// Starts `agent` on `test`'s uploaded `video`.
async fn start_on(test: &TestApp, agent: &str, video: &str) -> String {
    let body = json!({ "video_ids": [video] });
    let (status, answer) = test.call(Method::POST, &format!("/agent/{agent}/run"), Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["run_id"].as_str().unwrap().to_owned()
}

/// A video of `test`'s organization.
async fn video_of(test: &TestApp) -> String {
    crate::runs::upload(test, "video", crate::uploads::sample("video.mp4"), None).await
}

/// Video Input → 196 Speed → Destination: 198 nodes, one task whose chain is 197 nodes
/// long. Its claim writes one ledger entry (a line per priced node), so it fits the run's
/// transaction: the run completes, and the chain is charged once.
async fn a_198_node_chain_of_priced_edits_completes_and_is_charged_once(backend: Backend) {
    let _turn = alone_on_dynamodb(backend).await;
    let harness = Harness::new(backend).await;
    let test = organization(&harness, "free", 5_000, None).await;
    let video = video_of(&test).await;
    let names: Vec<String> = (0..196).map(|at| format!("speed {at}")).collect();
    let mut nodes: Vec<(&str, NodeTypeId, Value)> = vec![("in", VIDEO_INPUT, json!({}))];
    nodes.extend(names.iter().map(|name| (name.as_str(), SPEED, json!({}))));
    nodes.push(("out", DESTINATION, json!({})));
    let mut edges: Vec<(&str, &str)> = vec![("in", names[0].as_str())];
    edges.extend(names.windows(2).map(|pair| (pair[0].as_str(), pair[1].as_str())));
    edges.push((names[195].as_str(), "out"));
    let (agent, ids) = create_agent(&test, &nodes, &edges).await;
    assert_eq!(ids.len(), 198);
    let run = start_on(&test, &agent, &video).await;
    let record = crate::credits::finished(&test, &run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1, "{record}");

    let entries = assert_ledger_adds_up(&test).await;
    let charges = reasons(&entries, "task_charge");
    assert_eq!(charges.len(), 1, "the chain is charged once, in one entry: {charges:?}");
    let lines = charges[0]["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 196, "a line per priced node");
    let per_node = lines[0]["amount"].as_i64().unwrap();
    assert!(per_node < 0 && lines.iter().all(|line| line["amount"] == per_node), "{lines:?}");
    assert_eq!(charges[0]["amount"].as_i64().unwrap(), 196 * per_node);
    let line_nodes: std::collections::HashSet<&str> =
        lines.iter().map(|line| line["agent_node_id"].as_str().unwrap()).collect();
    assert_eq!(line_nodes.len(), 196, "each Speed node once");
    assert_eq!(charges[0]["agent_node_id"], lines[0]["agent_node_id"]);
    assert!(reasons(&entries, "refund").is_empty(), "{entries:?}");
    let spent: i64 = entries
        .iter()
        .filter(|entry| entry["run_id"] == run.as_str())
        .map(|entry| entry["amount"].as_i64().unwrap())
        .sum();
    assert_eq!(balance(&test).await, 5_000 + spent);
}

/// A toolkit whose renders with a Speed edit wait until their run is cancelled (so their
/// tasks stay running); the others are `inner`'s.
fn holds_speed(inner: Arc<dyn MediaToolkit>) -> RendersBy {
    let render: RenderHook = Box::new(|job: RenderJob, mut cancelled, inner: Arc<dyn MediaToolkit>| {
        Box::pin(async move {
            if !job.edits.iter().any(|edit| edit.name() == "Speed") {
                return inner.render(&job, cancelled).await;
            }
            // Bounded: the task's own budget ends it in any case.
            match tokio::time::timeout(job.budget, cancelled.wait_for(|cancelled| *cancelled)).await {
                Ok(_) => Err(MediaError::Cancelled),
                Err(_) => Err(MediaError::TimedOut(job.budget)),
            }
        })
    });
    RendersBy { inner, render }
}

/// Video Input → 64 branches of two Speed nodes (a fan-out of one video; each branch one
/// task of a two-node chain), started with enough workers to hold all 64 tasks running;
/// answers the run once they all are.
async fn fan_out_running(test: &TestApp, agent: &str, video: &str) -> String {
    let run = start_on(test, agent, video).await;
    // Bounded (64 claims take turns on one run): minutes at most on a slow machine.
    for _ in 0..3_000 {
        let (status, view) = test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        let running = view["nodes"].as_array().unwrap().iter().filter(|node| node["status"] == "running").count();
        if running == 128 {
            return run;
        }
        assert_eq!(view["status"], "running", "{view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the 64 Speed tasks of run {run} never all ran");
}

/// Each task of `run` charged and refunded: the tasks of its `task_charge` and `refund`
/// entries, with how many entries each has.
fn per_task(entries: &[Value], run: &str, reason: &str) -> BTreeMap<u64, usize> {
    let mut tasks = BTreeMap::new();
    for entry in entries.iter().filter(|entry| entry["run_id"] == run && entry["reason"] == reason) {
        *tasks.entry(entry["task"].as_u64().expect("a task's entry names its task")).or_insert(0) += 1;
    }
    tasks
}

/// A cancel while the 64 tasks of a fan-out run, each charged in its claim for its two
/// priced nodes, answers 200 and gives each task's credits back exactly once (in batches
/// after the cancel's own write: in its write, the 128 nodes' refunds would not fit). A cancel that stops after its write and before any batch (as a process
/// killed there leaves it) owes them: the sweep pays them, once.
async fn a_cancel_while_64_tasks_run_refunds_each_task_once_in_batches(backend: Backend) {
    let _turn = alone_on_dynamodb(backend).await;
    let harness = match backend {
        Backend::Sqlite => Harness::with_workers(backend, 0).await,
        // The sweep below acts on every run of its table.
        Backend::DynamoDb => Harness::own_table(0).await,
    };
    let mut engine = harness.test.app.engine().clone();
    engine.worker.toolkit = Arc::new(holds_speed(engine.worker.toolkit.clone()));
    let _workers = shared::serve::workers::start_engine(&engine, None, 66).await.unwrap();
    let test = organization(&harness, "free", 10_000, None).await;
    let video = video_of(&test).await;
    let branches: Vec<(String, String)> = (0..64).map(|at| (format!("fast {at}"), format!("slow {at}"))).collect();
    let mut nodes: Vec<(&str, NodeTypeId, Value)> = vec![("in", VIDEO_INPUT, json!({}))];
    for (fast, slow) in &branches {
        nodes.push((fast.as_str(), SPEED, json!({"factor": 2})));
        nodes.push((slow.as_str(), SPEED, json!({"factor": 0.5})));
    }
    let mut edges: Vec<(&str, &str)> = Vec::new();
    for (fast, slow) in &branches {
        edges.extend([("in", fast.as_str()), (fast.as_str(), slow.as_str())]);
    }
    let (agent, _) = create_agent(&test, &nodes, &edges).await;

    let run = fan_out_running(&test, &agent, &video).await;
    let charged = balance(&test).await;
    assert!(charged < 10_000, "the claims took their prices");
    let (status, cancelled) = test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["tasks_cancelled"], 64, "{cancelled}");
    assert_eq!(balance(&test).await, 10_000, "every price came back before the answer");
    let entries = assert_ledger_adds_up(&test).await;
    let charges = per_task(&entries, &run, "task_charge");
    assert_eq!(charges.len(), 64, "{entries:?}");
    assert!(charges.values().all(|count| *count == 1), "each task charged once: {charges:?}");
    assert_eq!(per_task(&entries, &run, "refund"), charges, "each task refunded once");
    let refunds = reasons(&entries, "refund");
    assert!(refunds.iter().all(|entry| entry["lines"].as_array().unwrap().len() == 2), "{refunds:?}");

    // The same cancel, stopped right after its own write: its refunds are owed.
    let second = fan_out_running(&test, &agent, &video).await;
    let before = balance(&test).await;
    let (organization, id) = (test.organization, RunId::parse(&second).unwrap());
    let now = harness.test.app.clock.now();
    change_run(engine.runs.as_ref(), &engine.sweeper.notifier, organization, id, &RUN_UPDATE_CONFLICTS, |run, _| {
        Ok(Change::Store(run.cancel(now)?, Vec::new()))
    })
    .await
    .unwrap();
    let stored = engine.runs.get_run(organization, id).await.unwrap().unwrap();
    assert_eq!(stored.refunds_owed, 64, "owed, not lost");
    assert_eq!(balance(&test).await, before, "nothing given back yet");
    let report = engine.sweeper.sweep().await.unwrap();
    assert_eq!(report.refunds_paid, 64, "{report:?}");
    assert_eq!(balance(&test).await, 10_000);
    assert_eq!(engine.runs.get_run(organization, id).await.unwrap().unwrap().refunds_owed, 0);
    let report = engine.sweeper.sweep().await.unwrap();
    assert_eq!(report.refunds_paid, 0, "paid once");
    let entries = assert_ledger_adds_up(&test).await;
    let charges = per_task(&entries, &second, "task_charge");
    assert_eq!(charges.len(), 64);
    assert_eq!(per_task(&entries, &second, "refund"), charges, "each task refunded once");
}
