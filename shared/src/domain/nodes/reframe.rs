//! Reframe: changes the aspect ratio by cropping or padding.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::schema::{hex_color, no_rules, node, params_schema};
use super::tile::{CreditCost, EditContext, NodeKind, NodeSettings, NodeType};
use crate::domain::ids::NodeTypeId;
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
        Ok(Some(Edit::Reframe { width: self.aspect.0, height: self.aspect.1, pad_color: self.pad_color.clone() }))
    }
}
