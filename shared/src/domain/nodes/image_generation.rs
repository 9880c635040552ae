//! Image Generation: text-to-image (its ID is fixed by the contract). Its PNG feeds an
//! Overlay through a connection, or a Destination.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::schema::{no_rules, node, params_schema};
use super::tile::{multiplier, CreditCost, Generation, MediaRequest, NodeKind, NodeSettings, NodeType, Unready};
use crate::domain::generation::{GenerationError, Generators, ImageRequest, Stop};
use crate::domain::ids::NodeTypeId;
use crate::domain::media::MediaType;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("18b998a0-2ea7-4676-a5d3-3ae6c8ac0b72"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        produces: Some(MediaType::Image),
        settings: |params| Arc::new(Image::parse(params)),
        ..node(
            ID,
            "Image Generation",
            NodeKind::Generation,
            params_schema(
                "Generates an image from a text prompt (default 1024x1024, medium quality).",
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
}

#[derive(Debug)]
struct Image {
    prompt: Option<String>,
    size: (u32, u32),
    quality: String,
}

impl Image {
    fn parse(params: &Map<String, Value>) -> Self {
        let text = |name: &str| params.get(name).and_then(Value::as_str);
        let size = match text("image_size") {
            Some("1024x1536") => (1024, 1536),
            Some("1536x1024") => (1536, 1024),
            _ => (1024, 1024),
        };
        Self {
            prompt: text("prompt").map(str::trim).filter(|prompt| !prompt.is_empty()).map(str::to_owned),
            size,
            quality: text("quality").unwrap_or("medium").to_owned(),
        }
    }
}

impl NodeSettings for Image {
    fn check(&self) -> Result<(), Unready> {
        self.prompt.as_ref().map(|_| ()).ok_or(Unready::Needs("prompt"))
    }

    fn generation(&self) -> Option<Generation> {
        Some(Generation::Media(Arc::new(ImageRequest {
            prompt: self.prompt.clone()?,
            width: self.size.0,
            height: self.size.1,
            quality: self.quality.clone(),
        })))
    }
}

#[async_trait]
impl MediaRequest for ImageRequest {
    fn prompt(&self) -> &str {
        &self.prompt
    }

    fn expected_seconds(&self) -> f64 {
        0.0
    }

    fn media(&self) -> MediaType {
        MediaType::Image
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
