//! Audio Generation: music or sound effects (its ID is fixed by the contract). Its sound
//! feeds Background Music through a connection, or a Destination.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::schema::{no_rules, node, params_schema};
use super::tile::{CreditCost, Generation, MediaRequest, NodeKind, NodeSettings, NodeType, Unready};
use crate::domain::generation::{AudioMode, AudioRequest, GenerationError, Generators, Stop};
use crate::domain::ids::NodeTypeId;
use crate::domain::media::MediaType;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("14687f30-5fd0-468f-8239-2784d83df95b"));

/// Length of music when `music_length_ms` is not set.
const DEFAULT_MUSIC_MS: u64 = 30_000;
/// Length of a sound effect when `music_length_ms` is not set.
const DEFAULT_EFFECT_MS: u64 = 5_000;

pub(super) fn node_type() -> NodeType {
    NodeType {
        produces: Some(MediaType::Audio),
        settings: |params| Arc::new(Audio::parse(params)),
        ..node(
            ID,
            "Audio Generation",
            NodeKind::Generation,
            params_schema(
                "Generates music or a sound effect from a text prompt (default music of 30 seconds; \
                 an effect lasts 5 seconds unless music_length_ms says otherwise).",
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
}

#[derive(Debug)]
struct Audio {
    mode: AudioMode,
    prompt: Option<String>,
    length_ms: u64,
}

impl Audio {
    fn parse(params: &Map<String, Value>) -> Self {
        let mode = match params.get("mode").and_then(Value::as_str) {
            Some("sound_effect") => AudioMode::SoundEffect,
            _ => AudioMode::Music,
        };
        let default = if mode == AudioMode::Music { DEFAULT_MUSIC_MS } else { DEFAULT_EFFECT_MS };
        let prompt = params.get("music_prompt").and_then(Value::as_str).map(str::trim);
        Self {
            mode,
            prompt: prompt.filter(|prompt| !prompt.is_empty()).map(str::to_owned),
            length_ms: params.get("music_length_ms").and_then(Value::as_u64).unwrap_or(default),
        }
    }
}

impl NodeSettings for Audio {
    fn check(&self) -> Result<(), Unready> {
        self.prompt.as_ref().map(|_| ()).ok_or(Unready::Needs("music_prompt"))
    }

    fn generation(&self) -> Option<Generation> {
        Some(Generation::Media(Arc::new(AudioRequest {
            mode: self.mode,
            prompt: self.prompt.clone()?,
            length_ms: self.length_ms,
        })))
    }
}

#[async_trait]
impl MediaRequest for AudioRequest {
    fn prompt(&self) -> &str {
        &self.prompt
    }

    fn expected_seconds(&self) -> f64 {
        self.length_ms as f64 / 1000.0
    }

    fn media(&self) -> MediaType {
        MediaType::Audio
    }

    async fn generate(
        &self,
        generators: &Generators,
        output: &Path,
        stop: &Stop,
    ) -> (String, Result<(), GenerationError>) {
        generators.generate(self, output, stop).await
    }
}
