//! Destination: where a finished video is delivered; it passes on what it receives.

use serde_json::json;
use uuid::uuid;

use super::schema::{no_rules, node, params_schema};
use super::tile::{CreditCost, NodeKind, NodeType};
use crate::domain::ids::NodeTypeId;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("96600cea-d346-4a43-a262-cc54579cfe1e"));

pub(super) fn node_type() -> NodeType {
    node(
        ID,
        "Destination",
        NodeKind::Destination,
        params_schema(
            "Receives the finished video.",
            json!({"name": {"type": "string", "maxLength": 200}}),
            no_rules(),
        ),
        CreditCost::free(),
    )
}
