//! Video Generation: text-to-video (its ID is fixed by the contract).

use serde_json::json;
use uuid::uuid;

use super::schema::{node, params_schema};
use super::{multiplier, CreditCost, NodeKind, NodeType, NodeTypeId};

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("a2eb3ec2-da7a-4f97-94d2-a9a537548522"));

/// Models that can render 4k; the others stop at 1080p.
pub(super) const MODELS_WITH_4K: [&str; 2] = ["veo-3", "veo-3-fast"];

pub(super) fn node_type() -> NodeType {
    node(
        ID,
        "Video Generation",
        NodeKind::Generation,
        params_schema(
            "Generates a video clip from a text prompt.",
            json!({
                "prompt": {"type": "string", "minLength": 1, "maxLength": 4000},
                "model": {"type": "string", "enum": ["veo-3", "veo-3-fast", "kling-2.1", "kling-2.1-pro"]},
                "resolution": {"type": "string", "enum": ["480p", "720p", "1080p", "4k"]},
                // A string because the contract carries it as one.
                "duration": {"type": "string", "enum": ["5", "8", "10"]},
                "aspect_ratio": {"type": "string", "enum": ["16:9", "9:16", "1:1"]},
            }),
            // A missing model passes here like any missing parameter; the run-time
            // completeness check catches it before a model is chosen.
            json!([{
                "description": "resolution \"4k\" is only available with the veo models",
                "if": {"properties": {"resolution": {"const": "4k"}}, "required": ["resolution"]},
                "then": {"properties": {"model": {"enum": MODELS_WITH_4K}}},
            }]),
        ),
        CreditCost::per_output_second(20, vec![multiplier("resolution", "4k", 2)]),
    )
}
