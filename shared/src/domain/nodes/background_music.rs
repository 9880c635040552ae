//! Background Music: mixes an uploaded audio track under the video's sound.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::placement::{Medium, Placement};
use super::schema::{no_rules, node, params_schema, uuid_string};
use super::tile::{Connectable, CreditCost, EditContext, NodeKind, NodeSettings, NodeType, UploadUse};
use crate::domain::ids::NodeTypeId;
use crate::domain::ids::UploadId;
use crate::domain::media::{Edit, MediaType};
use crate::domain::uploads::UploadKind;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("e1da61bb-803c-4518-8c72-3794867512a7"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        connectable: Some(Connectable { media: MediaType::Audio, param: "audio_id" }),
        settings: |params| Arc::new(Music::parse(params)),
        ..node(
            ID,
            "Background Music",
            NodeKind::Edit,
            params_schema(
                "Mixes an uploaded audio track under the video's sound; volume 1 is unchanged, ducking lowers it under speech.",
                json!({
                    "audio_id": uuid_string(),
                    "volume": {"type": "number", "minimum": 0, "maximum": 2},
                    "ducking": {"type": "boolean"},
                }),
                no_rules(),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        )
    }
}

/// The track and how it is mixed (default: volume 1, no ducking).
#[derive(Clone, Debug, PartialEq)]
struct Music {
    audio_id: Option<String>,
    volume: f64,
    ducking: bool,
}

impl Music {
    fn parse(params: &Map<String, Value>) -> Self {
        Self {
            audio_id: params.get("audio_id").and_then(Value::as_str).map(str::to_owned),
            volume: params.get("volume").and_then(Value::as_f64).unwrap_or(1.0),
            ducking: params.get("ducking").and_then(Value::as_bool).unwrap_or(false),
        }
    }
}

impl NodeSettings for Music {
    fn uploads(&self) -> Vec<UploadUse> {
        vec![UploadUse { param: "audio_id", kind: UploadKind::Audio, value: self.audio_id.clone() }]
    }

    fn edit(&self, context: &EditContext<'_>) -> Result<Option<Edit>, String> {
        let location = match (&context.connected, self.audio_id.as_deref()) {
            (Some(connected), _) => connected.clone(),
            (None, None) => return Err("Background Music needs audio_id or a connected audio".into()),
            (None, Some(audio)) => UploadId::parse(audio)
                .and_then(context.files)
                .ok_or_else(|| format!("Background Music: audio {audio} is not available"))?,
        };
        Ok(Some(Edit::Music { location, volume: self.volume, ducking: self.ducking }))
    }

    fn place(&self, mut placed: Vec<Placement>, length: u64) -> (Vec<Placement>, u64) {
        if let Some(upload) = self.audio_id.as_deref().and_then(UploadId::parse) {
            placed.push(Placement::whole(Medium::Music { upload }, length));
        }
        (placed, length)
    }
}
