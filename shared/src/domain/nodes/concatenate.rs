//! Concatenate: joins its inputs end to end, in the order they were connected (the
//! render joins a job's inputs; the timeline shifts each input's placements after the
//! one before).

use serde_json::json;
use uuid::uuid;

use super::schema::{no_rules, node, params_schema};
use super::tile::{CreditCost, ItemFlow, NodeKind, NodeType};
use crate::domain::ids::NodeTypeId;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("2d56a739-616f-497a-b979-cee33ec9b857"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        flow: ItemFlow::AllItems,
        ..node(
            ID,
            "Concatenate",
            NodeKind::Edit,
            params_schema(
                "Joins its inputs end to end, in the order they were connected; it takes no parameters.",
                json!({}),
                no_rules(),
            ),
            CreditCost::free(),
        )
    }
}
