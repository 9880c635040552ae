//! Schedule trigger: starts runs on a cron schedule.

use serde_json::json;
use uuid::uuid;

use super::schema::{cron_pattern, no_rules, node, params_schema, TIMEZONE_PATTERN};
use super::{CreditCost, NodeKind, NodeType, NodeTypeId};

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("ca4a4af1-9622-4018-ae48-a107c46bd14b"));

pub(super) fn node_type() -> NodeType {
    node(
        ID,
        "Schedule",
        NodeKind::Trigger,
        params_schema(
            "Starts a run on a cron schedule.",
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
            }),
            no_rules(),
        ),
        CreditCost::free(),
    )
}
