//! Captions: burns subtitles into the picture (libass), from SRT text given inline.

use std::any::Any;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::schema::{hex_color, node, params_schema, uuid_string};
use super::tile::{CreditCost, EditContext, NodeKind, NodeSettings, NodeType, ScratchFile, Unready};
use crate::domain::ids::NodeTypeId;
use crate::domain::media::filter::{Filter, FilterGraph};
use crate::domain::media::Edit;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("d4ad2388-2f79-4d9c-9cb1-b953460ffedb"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        settings: |params| Arc::new(Captions::parse(params)),
        ..node(
            ID,
            "Captions",
            NodeKind::Edit,
            params_schema(
                "Burns subtitles into the picture, from inline SRT text or an uploaded caption file.",
                json!({
                    "srt": {"type": "string", "maxLength": 100_000},
                    "caption_file_id": uuid_string(),
                    "style": {
                        "type": "object",
                        "properties": {
                            "font_size": {"type": "integer", "minimum": 8, "maximum": 200},
                            "color": hex_color(),
                            "position": {"type": "string", "enum": ["bottom", "top", "center"]},
                        },
                        "additionalProperties": false,
                    },
                }),
                // Neither is allowed while the graph is being built; giving both would leave it
                // ambiguous which captions to burn, so that is refused outright.
                json!([{
                    "description": "srt and caption_file_id may not both be set",
                    "not": {"required": ["srt", "caption_file_id"]},
                }]),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        )
    }
}

/// The captions and their look (default: 24 px white text at the bottom).
#[derive(Clone, Debug, PartialEq)]
struct Captions {
    srt: Option<String>,
    /// Whether an uploaded caption file was named (not read by this deployment yet).
    caption_file: bool,
    font_size: u32,
    color: String,
    position: CaptionPosition,
}

impl Captions {
    fn parse(params: &Map<String, Value>) -> Self {
        let style = params.get("style").and_then(Value::as_object).cloned().unwrap_or_default();
        let position = match style.get("position").and_then(Value::as_str) {
            Some("top") => CaptionPosition::Top,
            Some("center") => CaptionPosition::Center,
            _ => CaptionPosition::Bottom,
        };
        Self {
            srt: params.get("srt").and_then(Value::as_str).map(str::to_owned),
            caption_file: params.contains_key("caption_file_id"),
            font_size: style.get("font_size").and_then(Value::as_u64).unwrap_or(24) as u32,
            color: style.get("color").and_then(Value::as_str).unwrap_or("#FFFFFF").to_owned(),
            position,
        }
    }
}

impl NodeSettings for Captions {
    fn check(&self) -> Result<(), Unready> {
        if self.caption_file {
            return Err(Unready::Refused(
                "caption_file_id is not supported by this deployment yet; give the captions inline as srt".into(),
            ));
        }
        if self.srt.as_deref().is_none_or(|srt| srt.trim().is_empty()) {
            return Err(Unready::Needs("srt"));
        }
        Ok(())
    }

    fn scratch_file(&self) -> Option<ScratchFile> {
        Some(ScratchFile { extension: "srt", contents: self.srt.clone().unwrap_or_default() })
    }

    fn edit(&self, context: &EditContext<'_>) -> Result<Option<Edit>, String> {
        Ok(Some(Arc::new(CaptionsFilter {
            subtitles: context.scratch_file.clone().unwrap_or_default(),
            font_size: self.font_size,
            color: self.color.clone(),
            position: self.position,
        })))
    }
}

/// Where captions go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptionPosition {
    Bottom,
    Top,
    Center,
}

/// Burns in the subtitle file at `subtitles` (the SRT the worker wrote, which the
/// toolkit may convert first), in the render's folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptionsFilter {
    pub subtitles: PathBuf,
    pub font_size: u32,
    /// `#RRGGBB`.
    pub color: String,
    pub position: CaptionPosition,
}

impl Filter for CaptionsFilter {
    fn name(&self) -> &'static str {
        "Captions"
    }

    /// The filter names the file without its folder (no path quoting): the render runs
    /// in that folder.
    fn write(&self, graph: &mut FilterGraph) -> Result<(), String> {
        let name = self.subtitles.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        // ASS colours are &HBBGGRR.
        let rgb = self.color.trim_start_matches('#');
        let bgr = if rgb.len() == 6 { format!("{}{}{}", &rgb[4..6], &rgb[2..4], &rgb[0..2]) } else { "FFFFFF".into() };
        let alignment = match self.position {
            CaptionPosition::Bottom => 2,
            CaptionPosition::Center => 5,
            CaptionPosition::Top => 8,
        };
        let (video, out) = (graph.video.clone(), graph.label("v"));
        let _ = write!(
            graph,
            "[{video}]subtitles=filename={name}:force_style='FontSize={},PrimaryColour=&H00{bgr},\
             Alignment={alignment}'[{out}];",
            self.font_size
        );
        graph.video = out;
        Ok(())
    }

    fn subtitles(&self) -> Option<&Path> {
        Some(&self.subtitles)
    }

    fn with_subtitles(&self, subtitles: PathBuf) -> Option<Edit> {
        Some(Arc::new(Self { subtitles, ..self.clone() }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
