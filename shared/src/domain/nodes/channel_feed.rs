//! Channel Feed trigger: polls an Atom or RSS 2.0 feed and starts a run for each new
//! entry, its link bound to every Video Input (see `domain::triggers`).

use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::schema::{no_rules, node, params_schema};
use super::tile::{CreditCost, NodeKind, NodeSettings, NodeType, TriggerSpec};
use crate::domain::ids::NodeTypeId;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("795c3a4b-fb36-4ffc-943a-6c7bf4f3d99e"));

/// Longest feed address.
pub const MAX_FEED_URL_CHARS: u64 = 2_048;
/// Polling interval bounds and default, in minutes.
pub const POLL_MINUTES: (u64, u64, u64) = (5, 1_440, 15);

pub(super) fn node_type() -> NodeType {
    NodeType {
        settings: |params| Arc::new(ChannelFeed(TriggerSpec::feed(params))),
        ..node(
            ID,
            "Channel Feed",
            NodeKind::Trigger,
            params_schema(
                "Polls an Atom or RSS 2.0 feed every poll_minutes and starts one run per new entry, the entry's \
                 link bound to every Video Input.",
                json!({
                    "feed_url": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_FEED_URL_CHARS,
                        "description": "the http(s) address of an Atom or RSS 2.0 feed",
                    },
                    "poll_minutes": {"type": "integer", "minimum": POLL_MINUTES.0, "maximum": POLL_MINUTES.1},
                    "run_request": {
                        "type": "object",
                        "properties": {
                            "update_params": {"type": "object"},
                            "ignore_nodes": {"type": "array"},
                            "callback_url": {"type": "string"},
                        },
                        "additionalProperties": false,
                        "description": "update_params, ignore_nodes and callback_url of the runs it starts",
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
struct ChannelFeed(TriggerSpec);

impl NodeSettings for ChannelFeed {
    fn trigger(&self) -> Option<TriggerSpec> {
        Some(self.0.clone())
    }
}

impl TriggerSpec {
    fn feed(params: &Map<String, Value>) -> Self {
        Self::Feed {
            feed_url: params.get("feed_url").and_then(Value::as_str).map(str::to_owned),
            poll_minutes: params.get("poll_minutes").and_then(Value::as_u64).unwrap_or(POLL_MINUTES.2),
            run_request: params.get("run_request").and_then(Value::as_object).cloned().unwrap_or_default(),
            enabled: params.get("enabled").and_then(Value::as_bool).unwrap_or(true),
        }
    }
}
