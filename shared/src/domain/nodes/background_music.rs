//! Background Music: mixes an uploaded audio track under the video's sound.

use std::any::Any;
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::placement::{Medium, Placement};
use super::schema::{no_rules, node, params_schema, uuid_string};
use super::tile::{Connectable, CreditCost, EditContext, NodeKind, NodeSettings, NodeType, UploadUse};
use crate::domain::ids::NodeTypeId;
use crate::domain::ids::UploadId;
use crate::domain::media::filter::{seconds, Filter, FilterGraph, STEREO_48K};
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
        Ok(Some(Arc::new(MusicFilter { location, volume: self.volume, ducking: self.ducking })))
    }

    fn place(&self, mut placed: Vec<Placement>, length: u64) -> (Vec<Placement>, u64) {
        if let Some(upload) = self.audio_id.as_deref().and_then(UploadId::parse) {
            placed.push(Placement::whole(Medium::Music { upload }, length));
        }
        (placed, length)
    }
}

/// Mixes the audio at `location` (looped) under the sound at `volume`, lowered while the
/// video's own sound plays when `ducking`.
#[derive(Clone, Debug, PartialEq)]
pub struct MusicFilter {
    pub location: String,
    pub volume: f64,
    pub ducking: bool,
}

impl Filter for MusicFilter {
    fn name(&self) -> &'static str {
        "Background Music"
    }

    fn write(&self, graph: &mut FilterGraph) -> Result<(), String> {
        let input = graph.add_input(&self.location, true);
        let music = graph.label("m");
        let _ = write!(graph, "[{input}:a]{STEREO_48K},volume={}[{music}];", self.volume);
        let out = graph.label("a");
        match graph.audio.clone() {
            None => {
                let _ = write!(graph, "[{music}]atrim=duration={}[{out}];", seconds(graph.duration_ms));
            }
            Some(current) => {
                let voice = graph.label("a");
                let _ = write!(graph, "[{current}]{STEREO_48K}[{voice}];");
                if self.ducking {
                    let (mix, side, ducked) = (graph.label("a"), graph.label("a"), graph.label("m"));
                    let _ = write!(
                        graph,
                        "[{voice}]asplit[{mix}][{side}];[{music}][{side}]sidechaincompress=threshold=0.03:\
                         ratio=8:attack=20:release=300[{ducked}];[{mix}][{ducked}]amix=inputs=2:duration=first:\
                         normalize=0[{out}];"
                    );
                } else {
                    let _ = write!(graph, "[{voice}][{music}]amix=inputs=2:duration=first:normalize=0[{out}];");
                }
            }
        }
        graph.audio = Some(out);
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
