//! AI Avatar: a talking avatar reading a script (its ID is fixed by the contract). Its
//! profile must exist in the organization and not have failed when a run starts; a run
//! waits (the task `blocked`) while the profile is still being processed.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::schema::{no_rules, node, params_schema, uuid_string};
use super::tile::{CreditCost, Generation, NodeKind, NodeSettings, NodeType, Unready};
use crate::domain::ids::NodeTypeId;
use crate::domain::media::MediaType;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("b3b4c9e2-2a47-4fa9-8ce8-0c1fa1d7b6ef"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        produces: Some(MediaType::Video),
        settings: |params| Arc::new(Avatar::parse(params)),
        ..node(
            ID,
            "AI Avatar",
            NodeKind::Generation,
            params_schema(
                "A talking avatar of an avatar profile reading a script (default video_model standard).",
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
}

#[derive(Debug)]
struct Avatar {
    profile: Option<String>,
    script: Option<String>,
    video_model: String,
}

impl Avatar {
    fn parse(params: &Map<String, Value>) -> Self {
        let text = |name: &str| params.get(name).and_then(Value::as_str).map(str::trim).filter(|text| !text.is_empty());
        Self {
            profile: text("avatar_profile_id").map(str::to_owned),
            script: text("script").map(str::to_owned),
            video_model: text("video_model").unwrap_or("standard").to_owned(),
        }
    }
}

impl NodeSettings for Avatar {
    fn check(&self) -> Result<(), Unready> {
        self.profile.as_ref().ok_or(Unready::Needs("avatar_profile_id"))?;
        self.script.as_ref().map(|_| ()).ok_or(Unready::Needs("script"))
    }

    fn generation(&self) -> Option<Generation> {
        Some(Generation::Avatar {
            profile: self.profile.clone()?,
            script: self.script.clone()?,
            video_model: self.video_model.clone(),
        })
    }
}
