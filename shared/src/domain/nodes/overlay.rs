//! Overlay: places an uploaded image (e.g. a watermark) over the video.

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
use crate::domain::media::filter::{Filter, FilterGraph};
use crate::domain::media::{Edit, MediaType};
use crate::domain::uploads::UploadKind;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("5aa5e31c-34be-4cd1-b618-7a7544f6e4c0"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        connectable: Some(Connectable { media: MediaType::Image, param: "image_id" }),
        settings: |params| Arc::new(Overlay::parse(params)),
        ..node(
            ID,
            "Overlay",
            NodeKind::Edit,
            params_schema(
                "Places an uploaded image (e.g. a watermark) over the video; scale is its width as a fraction of the video's.",
                json!({
                    "image_id": uuid_string(),
                    "position": {
                        "type": "string",
                        "enum": ["top_left", "top_right", "bottom_left", "bottom_right", "center"],
                    },
                    "opacity": {"type": "number", "minimum": 0, "maximum": 1},
                    "scale": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                }),
                no_rules(),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        )
    }
}

/// The picture and where it goes (default: bottom right, opaque, a fifth of the width).
#[derive(Clone, Debug, PartialEq)]
struct Overlay {
    image_id: Option<String>,
    position: Corner,
    opacity: f64,
    scale: f64,
}

impl Overlay {
    fn parse(params: &Map<String, Value>) -> Self {
        let number = |name: &str, default: f64| params.get(name).and_then(Value::as_f64).unwrap_or(default);
        let position = match params.get("position").and_then(Value::as_str) {
            Some("top_left") => Corner::TopLeft,
            Some("top_right") => Corner::TopRight,
            Some("bottom_left") => Corner::BottomLeft,
            Some("center") => Corner::Center,
            _ => Corner::BottomRight,
        };
        Self {
            image_id: params.get("image_id").and_then(Value::as_str).map(str::to_owned),
            position,
            opacity: number("opacity", 1.0),
            scale: number("scale", 0.2),
        }
    }
}

impl NodeSettings for Overlay {
    fn uploads(&self) -> Vec<UploadUse> {
        vec![UploadUse { param: "image_id", kind: UploadKind::Image, value: self.image_id.clone() }]
    }

    fn edit(&self, context: &EditContext<'_>) -> Result<Option<Edit>, String> {
        let location = match (&context.connected, self.image_id.as_deref()) {
            (Some(connected), _) => connected.clone(),
            (None, None) => return Err("Overlay needs image_id or a connected image".into()),
            (None, Some(image)) => UploadId::parse(image)
                .and_then(context.files)
                .ok_or_else(|| format!("Overlay: image {image} is not available"))?,
        };
        Ok(Some(Arc::new(OverlayFilter {
            location,
            position: self.position,
            opacity: self.opacity,
            scale: self.scale,
        })))
    }

    fn place(&self, mut placed: Vec<Placement>, length: u64) -> (Vec<Placement>, u64) {
        if let Some(upload) = self.image_id.as_deref().and_then(UploadId::parse) {
            placed.push(Placement::whole(Medium::Picture { upload }, length));
        }
        (placed, length)
    }
}

/// Where a picture element goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corner {
    TopLeft,
    TopRight,
    BottomLeft,
    BottomRight,
    Center,
}

/// Places the image at `location` over the picture: at `position`, `scale` of the
/// picture's width, at `opacity`.
#[derive(Clone, Debug, PartialEq)]
pub struct OverlayFilter {
    pub location: String,
    pub position: Corner,
    pub opacity: f64,
    pub scale: f64,
}

impl Filter for OverlayFilter {
    fn name(&self) -> &'static str {
        "Overlay"
    }

    fn write(&self, graph: &mut FilterGraph) -> Result<(), String> {
        let input = graph.add_input(&self.location, false);
        let image_width = ((graph.width as f64 * self.scale / 2.0).round() as u32 * 2).max(2);
        let (x, y) = match self.position {
            Corner::TopLeft => ("10", "10"),
            Corner::TopRight => ("main_w-overlay_w-10", "10"),
            Corner::BottomLeft => ("10", "main_h-overlay_h-10"),
            Corner::BottomRight => ("main_w-overlay_w-10", "main_h-overlay_h-10"),
            Corner::Center => ("(main_w-overlay_w)/2", "(main_h-overlay_h)/2"),
        };
        let (video, image, out) = (graph.video.clone(), graph.label("i"), graph.label("v"));
        let _ = write!(
            graph,
            "[{input}:v]scale={image_width}:-1,format=rgba,colorchannelmixer=aa={}[{image}];\
             [{video}][{image}]overlay=x={x}:y={y}:eof_action=repeat[{out}];",
            self.opacity
        );
        graph.video = out;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
