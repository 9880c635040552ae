//! Video Generation: text-to-video (its ID is fixed by the contract).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::schema::{node, params_schema};
use super::tile::{multiplier, CreditCost, Generation, MediaRequest, NodeKind, NodeSettings, NodeType, Unready};
use crate::domain::generation::{video_size, GenerationError, Generators, Stop, VideoRequest};
use crate::domain::ids::NodeTypeId;
use crate::domain::media::MediaType;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("a2eb3ec2-da7a-4f97-94d2-a9a537548522"));

/// Models that can render 4k; the others stop at 1080p.
pub(super) const MODELS_WITH_4K: [&str; 2] = ["veo-3", "veo-3-fast"];

pub(super) fn node_type() -> NodeType {
    NodeType {
        produces: Some(MediaType::Video),
        settings: |params| Arc::new(Video::parse(params)),
        ..node(
            ID,
            "Video Generation",
            NodeKind::Generation,
            params_schema(
                "Generates a video clip from a text prompt (default veo-3-fast, 1080p, 8 seconds, 16:9); \
                 resolution names the short side, 4k the long one.",
                json!({
                    "prompt": {"type": "string", "minLength": 1, "maxLength": 4000},
                    "model": {"type": "string", "enum": ["veo-3", "veo-3-fast", "kling-2.1", "kling-2.1-pro"]},
                    "resolution": {"type": "string", "enum": ["480p", "720p", "1080p", "4k"]},
                    // A string because the contract carries it as one.
                    "duration": {"type": "string", "enum": ["5", "8", "10"]},
                    "aspect_ratio": {"type": "string", "enum": ["16:9", "9:16", "1:1"]},
                }),
                // Without a model the default (a veo model) applies, which renders 4k.
                json!([{
                    "description": "resolution \"4k\" is only available with the veo models",
                    "if": {"properties": {"resolution": {"const": "4k"}}, "required": ["resolution"]},
                    "then": {"properties": {"model": {"enum": MODELS_WITH_4K}}},
                }]),
            ),
            CreditCost::per_output_second(20, vec![multiplier("resolution", "4k", 2)]),
        )
    }
}

#[derive(Debug)]
struct Video {
    prompt: Option<String>,
    model: String,
    resolution: String,
    aspect_ratio: String,
    duration_s: u32,
}

impl Video {
    fn parse(params: &Map<String, Value>) -> Self {
        let text = |name: &str, default: &str| params.get(name).and_then(Value::as_str).unwrap_or(default).to_owned();
        let prompt = params.get("prompt").and_then(Value::as_str).map(str::trim);
        Self {
            prompt: prompt.filter(|prompt| !prompt.is_empty()).map(str::to_owned),
            model: text("model", "veo-3-fast"),
            resolution: text("resolution", "1080p"),
            aspect_ratio: text("aspect_ratio", "16:9"),
            duration_s: text("duration", "8").parse().unwrap_or(8),
        }
    }
}

impl NodeSettings for Video {
    fn check(&self) -> Result<(), Unready> {
        self.prompt.as_ref().map(|_| ()).ok_or(Unready::Needs("prompt"))
    }

    fn generation(&self) -> Option<Generation> {
        let (width, height) = video_size(&self.resolution, &self.aspect_ratio);
        Some(Generation::Media(Arc::new(VideoRequest {
            prompt: self.prompt.clone()?,
            model: self.model.clone(),
            resolution: self.resolution.clone(),
            aspect_ratio: self.aspect_ratio.clone(),
            width,
            height,
            duration_s: self.duration_s,
        })))
    }
}

#[async_trait]
impl MediaRequest for VideoRequest {
    fn prompt(&self) -> &str {
        &self.prompt
    }

    fn expected_seconds(&self) -> f64 {
        f64::from(self.duration_s)
    }

    fn media(&self) -> MediaType {
        MediaType::Video
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
