//! Audio Generation: music or sound effects (its ID is fixed by the contract).

use serde_json::json;
use uuid::uuid;

use super::schema::{no_rules, node, params_schema};
use super::{CreditCost, NodeKind, NodeType, NodeTypeId};

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("14687f30-5fd0-468f-8239-2784d83df95b"));

pub(super) fn node_type() -> NodeType {
    node(
        ID,
        "Audio Generation",
        NodeKind::Generation,
        params_schema(
            "Generates music or a sound effect from a text prompt.",
            json!({
                "mode": {"type": "string", "enum": ["music", "sound_effect"]},
                "music_prompt": {"type": "string", "minLength": 1, "maxLength": 2000},
                "music_length_ms": {"type": "integer", "minimum": 1000, "maximum": 300_000},
            }),
            no_rules(),
        ),
        CreditCost::per_output_second(1, Vec::new()),
    )
}
