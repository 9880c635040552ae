//! Reframe: changes the aspect ratio by cropping or padding.

use std::any::Any;
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::schema::{hex_color, no_rules, node, params_schema};
use super::tile::{CreditCost, EditContext, NodeKind, NodeSettings, NodeType};
use crate::domain::ids::NodeTypeId;
use crate::domain::media::filter::{Filter, FilterGraph};
use crate::domain::media::Edit;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("3c86da6e-c0b0-4ac6-a4e3-23ff638dceae"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        settings: |params| Arc::new(Reframe::parse(params)),
        ..node(
            ID,
            "Reframe",
            NodeKind::Edit,
            params_schema(
                "Changes the aspect ratio by cropping the picture or padding it with pad_color.",
                json!({
                    "aspect_ratio": {"type": "string", "enum": ["16:9", "9:16", "1:1", "4:5"]},
                    "mode": {"type": "string", "enum": ["crop", "pad"]},
                    "pad_color": hex_color(),
                }),
                no_rules(),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        )
    }
}

/// The picture's new shape (default 16:9, cropped; padding black).
#[derive(Clone, Debug, PartialEq)]
struct Reframe {
    /// Width and height of the aspect ratio.
    aspect: (u32, u32),
    /// The padding's colour; None to crop.
    pad_color: Option<String>,
}

impl Reframe {
    fn parse(params: &Map<String, Value>) -> Self {
        let text = |name: &str| params.get(name).and_then(Value::as_str);
        let aspect = match text("aspect_ratio").unwrap_or("16:9") {
            "9:16" => (9, 16),
            "1:1" => (1, 1),
            "4:5" => (4, 5),
            _ => (16, 9),
        };
        let pad = text("mode") == Some("pad");
        Self { aspect, pad_color: pad.then(|| text("pad_color").unwrap_or("#000000").to_owned()) }
    }
}

impl NodeSettings for Reframe {
    fn edit(&self, _context: &EditContext<'_>) -> Result<Option<Edit>, String> {
        Ok(Some(Arc::new(ReframeFilter { aspect: self.aspect, pad_color: self.pad_color.clone() })))
    }
}

/// Crops (or, with `pad_color`, pads) the picture to the aspect ratio `aspect` (w:h).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReframeFilter {
    pub aspect: (u32, u32),
    pub pad_color: Option<String>,
}

impl Filter for ReframeFilter {
    fn name(&self) -> &'static str {
        "Reframe"
    }

    fn write(&self, graph: &mut FilterGraph) -> Result<(), String> {
        let (w, h) = reframed_size(graph.width, graph.height, self.aspect, self.pad_color.is_some());
        let (video, out) = (graph.video.clone(), graph.label("v"));
        match &self.pad_color {
            Some(color) => {
                let color = color.trim_start_matches('#');
                let _ = write!(graph, "[{video}]pad={w}:{h}:(ow-iw)/2:(oh-ih)/2:color=0x{color},setsar=1[{out}];");
            }
            None => {
                let _ = write!(graph, "[{video}]crop={w}:{h},setsar=1[{out}];");
            }
        }
        (graph.video, graph.width, graph.height) = (out, w, h);
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The size of a picture cropped or padded to `aspect` (w:h), kept even for yuv420p.
pub fn reframed_size(width: u32, height: u32, aspect: (u32, u32), pad: bool) -> (u32, u32) {
    let even = |value: f64| ((value / 2.0).round() as u32 * 2).max(2);
    let (w, h) = (width as f64, height as f64);
    let target = aspect.0 as f64 / aspect.1 as f64;
    let wider = w / h > target;
    match (pad, wider) {
        // Crop a wide picture's sides, or a tall one's top and bottom.
        (false, true) => (even(h * target), even(h)),
        (false, false) => (even(w), even(w / target)),
        // Pad a wide picture above and below, or a tall one's sides.
        (true, true) => (even(w), even(w / target)),
        (true, false) => (even(h * target), even(h)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reframing_keeps_the_picture_inside_its_source_and_even() {
        assert_eq!(reframed_size(320, 240, (16, 9), false), (320, 180));
        assert_eq!(reframed_size(320, 240, (9, 16), false), (136, 240));
        assert_eq!(reframed_size(320, 240, (1, 1), false), (240, 240));
        assert_eq!(reframed_size(320, 240, (16, 9), true), (426, 240));
        assert_eq!(reframed_size(320, 240, (9, 16), true), (320, 568));
        assert_eq!(reframed_size(1920, 1080, (4, 5), false), (864, 1080));
    }
}
