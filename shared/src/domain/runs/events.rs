//! A run's webhook events: what a change did (started, nodes that moved, finished),
//! each recorded as a delivery in the same write as the change and then queued for the
//! sender.

use std::sync::Arc;

use super::{NodeIndex, NodeStatus, Run, RunStatus};
use crate::core::queue::Queue;
use crate::domain::ids::DeliveryId;
use crate::domain::media::MediaLinks;
use crate::domain::time::Timestamp;
use crate::domain::webhooks::{DeliveryState, EventFlag, WebhookDelivery, WebhookMessage};

/// A run's node statuses and status before a change, to tell what the change did.
#[derive(Clone, Debug)]
pub struct Before {
    status: RunStatus,
    nodes: Vec<NodeStatus>,
    /// Each node's parts made, of how many (empty when no task is made in parts).
    progress: Vec<Option<(usize, usize)>>,
}

impl Before {
    pub fn of(run: &Run) -> Self {
        Self { status: run.status, nodes: run.node_statuses(), progress: progress_of(run) }
    }
}

/// Each node's progress ([`Run::progress`]); empty when no task of the run is made in parts.
fn progress_of(run: &Run) -> Vec<Option<(usize, usize)>> {
    match run.tasks.iter().any(|task| !task.parts.is_empty()) {
        true => run.node_indexes().map(|index| run.progress(index)).collect(),
        false => Vec::new(),
    }
}

/// Least time between two `RUN_PROGRESS` events of a node for its parts alone.
pub const PROGRESS_EVENT_GAP: std::time::Duration = std::time::Duration::from_secs(1);

/// The nodes whose parts made changed from `before` and whose last event for their
/// parts was [`PROGRESS_EVENT_GAP`] ago or more (each task made in parts remembers
/// when: it is marked now for the nodes returned).
fn progressed(before: &Before, run: &mut Run, now: Timestamp) -> Vec<NodeIndex> {
    let after = progress_of(run);
    if after.is_empty() || after == before.progress {
        return Vec::new();
    }
    let due = |task: &super::Task| {
        !task.parts.is_empty() && task.progress_event_at.is_none_or(|at| at.after(PROGRESS_EVENT_GAP) <= now)
    };
    let nodes: Vec<NodeIndex> = run
        .work_nodes()
        .filter(|index| after.get(index.0) != before.progress.get(index.0))
        .filter(|index| run.tasks_of(*index).any(|(_, task)| due(task)))
        .collect();
    let marked: Vec<super::TaskIndex> = run
        .task_indexes()
        .filter(|index| due(&run.tasks[*index]) && nodes.iter().any(|node| run.tasks[*index].nodes.contains(node)))
        .collect();
    for index in marked {
        run.tasks[index].progress_event_at = Some(now);
    }
    nodes
}

/// Records the events of run changes and asks for their delivery.
#[derive(Clone)]
pub struct Notifier {
    /// Signs the media links in payloads.
    pub links: MediaLinks,
    pub queue: Arc<dyn Queue<WebhookMessage>>,
}

impl Notifier {
    /// The events of a run that was just created: `RUN_STARTED`.
    pub fn started(&self, run: &mut Run, now: Timestamp) -> Vec<WebhookDelivery> {
        self.events(None, run, now)
    }

    /// The events of a change from `before` to `run` (at most [`MAX_EVENTS_PER_CHANGE`]):
    /// `RUN_STARTED` when it (re)started,
    /// `RUN_PROGRESS` with every node whose status changed, `RUN_FINISHED` when it ended;
    /// none when the run has no `callback_url`. Each takes the run's next sequence number
    /// (the run is changed: store it with the deliveries, in one write).
    pub fn events(&self, before: Option<&Before>, run: &mut Run, now: Timestamp) -> Vec<WebhookDelivery> {
        let Some(url) = run.callback_url.clone() else { return Vec::new() };
        let was_running = before.is_some_and(|before| before.status == RunStatus::Running);
        let mut flags: Vec<(EventFlag, Vec<NodeIndex>)> = Vec::new();
        if run.status == RunStatus::Running && !was_running {
            flags.push((EventFlag::RunStarted, Vec::new()));
        }
        if let Some(before) = before {
            let mut changed: Vec<NodeIndex> = {
                let now = run.node_statuses();
                run.work_nodes().filter(|index| before.nodes.get(index.0) != now.get(index.0)).collect()
            };
            if run.status == RunStatus::Running {
                // Parts made: at most one event per node per PROGRESS_EVENT_GAP.
                for index in progressed(before, run, now) {
                    if !changed.contains(&index) {
                        changed.push(index);
                    }
                }
                changed.sort_unstable();
            }
            if !changed.is_empty() {
                flags.push((EventFlag::RunProgress, changed));
            }
        }
        if run.status != RunStatus::Running && was_running {
            flags.push((EventFlag::RunFinished, Vec::new()));
        }
        flags
            .into_iter()
            .map(|(event, nodes)| {
                run.webhook_sequence += 1;
                let sequence = run.webhook_sequence;
                WebhookDelivery {
                    id: DeliveryId::now_v7(),
                    organization_id: run.organization_id,
                    run_id: run.id,
                    sequence,
                    event,
                    url: url.clone(),
                    payload: bounded_payload(run.event_payload(event, sequence, &nodes, &self.links, now)),
                    created_at: now,
                    state: DeliveryState::Pending,
                    attempts: Vec::new(),
                    next_attempt_at: Some(now),
                    schedule_start: 0,
                }
            })
            .collect()
    }

    /// Asks for the deliveries to be attempted. A failure is logged, not returned: the
    /// change they belong to is stored, and they stay `pending` in the delivery log (the
    /// local queue is the log itself; on SQS a redelivered task message sends them again).
    pub async fn send(&self, deliveries: &[WebhookDelivery]) {
        if deliveries.is_empty() {
            return;
        }
        let messages: Vec<WebhookMessage> = deliveries.iter().map(WebhookDelivery::message).collect();
        if let Err(error) = self.queue.send(&messages).await {
            tracing::error!(
                run_id = %deliveries[0].run_id,
                error = %format!("{error:#}"),
                "webhook deliveries were recorded but could not be queued"
            );
        }
    }
}

/// Most events one change of a run records: started, progress and finished.
pub const MAX_EVENTS_PER_CHANGE: usize = 3;

/// Largest webhook body: with the run's own state, a change's deliveries stay inside a
/// DynamoDB transaction (4 MB) and each inside an item (400 KB).
pub const MAX_PAYLOAD_BYTES: usize = 100_000;

/// The payload as sent: when it is larger than [`MAX_PAYLOAD_BYTES`] (a run of hundreds
/// of inputs and outputs), its lists of media are emptied and `truncated` is set, so
/// the receiver reads them from `GET /agent_run/{id}`; the event itself is never lost.
fn bounded_payload(mut payload: serde_json::Value) -> String {
    let text = payload.to_string();
    if text.len() <= MAX_PAYLOAD_BYTES {
        return text;
    }
    if let Some(fields) = payload.as_object_mut() {
        for list in ["inputs", "outputs"] {
            if fields.contains_key(list) {
                fields.insert(list.into(), serde_json::Value::Array(Vec::new()));
            }
        }
        if let Some(nodes) = fields.get_mut("updated_nodes").and_then(serde_json::Value::as_array_mut) {
            for node in nodes.iter_mut() {
                node["outputs"] = serde_json::Value::Array(Vec::new());
                node["errors"] = serde_json::Value::Array(Vec::new());
            }
        }
        if let Some(errors) = fields.get_mut("errors").and_then(serde_json::Value::as_array_mut) {
            errors.truncate(20);
        }
        fields.insert("truncated".into(), serde_json::Value::Bool(true));
    }
    let mut text = payload.to_string();
    if text.len() > MAX_PAYLOAD_BYTES {
        // Only the common fields are left to send.
        if let Some(fields) = payload.as_object_mut() {
            fields.retain(|name, _| {
                ["flag", "sequence", "occurred_at", "agent_id", "run_id", "status", "node_status_counts", "truncated"]
                    .contains(&name.as_str())
            });
        }
        text = payload.to_string();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_too_large_for_a_delivery_is_sent_without_its_media_lists() {
        let output = serde_json::json!({ "id": "x", "video_url": "https://example.com/".repeat(20), "sources": [] });
        let payload = serde_json::json!({
            "flag": "RUN_FINISHED", "sequence": 9, "run_id": "r", "status": "completed",
            "outputs": vec![output; 2_000], "inputs": [], "errors": [],
        });
        let sent: serde_json::Value = serde_json::from_str(&bounded_payload(payload.clone())).unwrap();
        assert!(sent.to_string().len() <= MAX_PAYLOAD_BYTES);
        assert_eq!(
            (sent["truncated"].clone(), sent["outputs"].clone()),
            (serde_json::json!(true), serde_json::json!([]))
        );
        assert_eq!(
            (sent["flag"].clone(), sent["sequence"].clone()),
            (payload["flag"].clone(), payload["sequence"].clone())
        );
        let small = serde_json::json!({ "flag": "RUN_STARTED", "inputs": [] });
        assert_eq!(bounded_payload(small.clone()), small.to_string(), "a small payload is sent as it is");
    }
}
