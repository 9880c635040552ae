//! AI Avatar: a talking avatar reading a script (its ID is fixed by the contract).

use serde_json::json;
use uuid::uuid;

use super::schema::{no_rules, node, params_schema, uuid_string};
use super::{CreditCost, NodeKind, NodeType, NodeTypeId};

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("b3b4c9e2-2a47-4fa9-8ce8-0c1fa1d7b6ef"));

pub(super) fn node_type() -> NodeType {
    node(
        ID,
        "AI Avatar",
        NodeKind::Generation,
        params_schema(
            "A talking avatar reading a script.",
            json!({
                "avatar_profile_id": uuid_string(),
                "video_model": {"type": "string", "enum": ["standard", "expressive"]},
                "single_take": {"type": "boolean"},
                "script": {"type": "string", "minLength": 1, "maxLength": 10_000},
            }),
            no_rules(),
        ),
        CreditCost::per_output_second(10, Vec::new()),
    )
}
