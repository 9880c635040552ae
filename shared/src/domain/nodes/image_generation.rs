//! Image Generation: text-to-image (its ID is fixed by the contract).

use serde_json::json;
use uuid::uuid;

use super::schema::{no_rules, node, params_schema};
use super::{multiplier, CreditCost, NodeKind, NodeType, NodeTypeId};

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("18b998a0-2ea7-4676-a5d3-3ae6c8ac0b72"));

pub(super) fn node_type() -> NodeType {
    node(
        ID,
        "Image Generation",
        NodeKind::Generation,
        params_schema(
            "Generates an image from a text prompt.",
            json!({
                "prompt": {"type": "string", "minLength": 1, "maxLength": 4000},
                "image_size": {"type": "string", "enum": ["1024x1024", "1024x1536", "1536x1024"]},
                "quality": {"type": "string", "enum": ["low", "medium", "high"]},
            }),
            no_rules(),
        ),
        CreditCost::per_run(4, vec![multiplier("quality", "medium", 2), multiplier("quality", "high", 4)]),
    )
}
