//! Schedule trigger: starts runs on a cron schedule (see `domain::triggers`).

use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::schema::{cron_pattern, no_rules, node, params_schema, TIMEZONE_PATTERN};
use super::tile::{CreditCost, NodeKind, NodeSettings, NodeType, TriggerSpec};
use crate::domain::ids::NodeTypeId;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("ca4a4af1-9622-4018-ae48-a107c46bd14b"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        settings: |params| Arc::new(Schedule(TriggerSpec::schedule(params))),
        ..node(
            ID,
            "Schedule",
            NodeKind::Trigger,
            params_schema(
                "Starts a run on a cron schedule, with the body of POST /agent/{agent_id}/run given as \
                 run_request (checked when saved, as a run checks it).",
                json!({
                    "cron": {
                        "type": "string",
                        "maxLength": 120,
                        "pattern": cron_pattern(),
                        "description": "a five-field cron expression (minute hour day-of-month month day-of-week)",
                    },
                    "timezone": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 64,
                        "pattern": TIMEZONE_PATTERN,
                        "description": "an IANA time zone name such as Europe/Paris",
                    },
                    "run_request": {
                        "type": "object",
                        "description": "the body of the runs it starts (inputs, update_params, callback_url)",
                    },
                    "enabled": {"type": "boolean"},
                }),
                no_rules(),
            ),
            CreditCost::free(),
        )
    }
}

#[derive(Debug)]
struct Schedule(TriggerSpec);

impl NodeSettings for Schedule {
    fn trigger(&self) -> Option<TriggerSpec> {
        Some(self.0.clone())
    }
}

impl TriggerSpec {
    fn schedule(params: &Map<String, Value>) -> Self {
        Self::Schedule {
            cron: params.get("cron").and_then(Value::as_str).map(str::to_owned),
            timezone: params.get("timezone").and_then(Value::as_str).unwrap_or("UTC").to_owned(),
            run_request: params.get("run_request").and_then(Value::as_object).cloned().unwrap_or_default(),
            enabled: params.get("enabled").and_then(Value::as_bool).unwrap_or(true),
        }
    }
}
