//! Clip: keeps one time range of its input.

use std::any::Any;
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::placement::Placement;
use super::schema::{no_rules, node, params_schema};
use super::tile::{CreditCost, EditContext, NodeKind, NodeSettings, NodeType};
use crate::domain::ids::NodeTypeId;
use crate::domain::media::filter::{seconds, window_past_end, Filter, FilterGraph};
use crate::domain::media::Edit;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("774577c0-7d6c-42fa-9f2d-fbc179081641"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        settings: |params| Arc::new(Clip::parse(params)),
        ..node(
            ID,
            "Clip",
            NodeKind::Edit,
            params_schema(
                // A schema cannot compare two properties, so end_ms > start_ms (and end_ms within
                // the media) is checked at run time, when the input's duration is known.
                "Keeps the range from start_ms to end_ms of its input; end_ms must be after start_ms.",
                json!({
                    "start_ms": {"type": "integer", "minimum": 0},
                    "end_ms": {"type": "integer", "minimum": 1},
                }),
                no_rules(),
            ),
            CreditCost::free(),
        )
    }
}

/// The range kept: from `start_ms` (default 0) to `end_ms` (default: the end).
#[derive(Clone, Debug, PartialEq)]
struct Clip {
    start_ms: u64,
    end_ms: Option<u64>,
}

impl Clip {
    fn parse(params: &Map<String, Value>) -> Self {
        Self {
            start_ms: params.get("start_ms").and_then(Value::as_u64).unwrap_or(0),
            end_ms: params.get("end_ms").and_then(Value::as_u64),
        }
    }
}

impl NodeSettings for Clip {
    fn edit(&self, _context: &EditContext<'_>) -> Result<Option<Edit>, String> {
        let Clip { start_ms, end_ms } = *self;
        if let Some(end) = end_ms.filter(|end| *end <= start_ms) {
            return Err(format!("Clip: end_ms ({end}) must be greater than start_ms ({start_ms})"));
        }
        if start_ms == 0 && end_ms.is_none() {
            return Ok(None);
        }
        Ok(Some(Arc::new(ClipFilter { start_ms, end_ms })))
    }

    fn place(&self, placed: Vec<Placement>, length: u64) -> (Vec<Placement>, u64) {
        let unchanged = self.start_ms == 0 && self.end_ms.is_none();
        if unchanged || self.end_ms.is_some_and(|end| end <= self.start_ms) {
            return (placed, length);
        }
        let end = self.end_ms.unwrap_or(length).min(length);
        let placed = placed.iter().filter_map(|part| part.within(self.start_ms, end)).collect();
        (placed, end.saturating_sub(self.start_ms))
    }
}

/// Keeps `start_ms..end_ms` of the video (to its end when None).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClipFilter {
    pub start_ms: u64,
    pub end_ms: Option<u64>,
}

impl Filter for ClipFilter {
    fn name(&self) -> &'static str {
        "Clip"
    }

    fn write(&self, graph: &mut FilterGraph) -> Result<(), String> {
        let duration = graph.duration_ms;
        let end = self.end_ms.unwrap_or(duration).min(duration);
        if self.start_ms >= end {
            return Err(window_past_end(self.name(), self.start_ms, duration));
        }
        let range = format!("start={}:end={}", seconds(self.start_ms), seconds(end));
        let (video, out) = (graph.video.clone(), graph.label("v"));
        // Timestamps move by the window's start, not by the first frame's: a segment of
        // the output, which sees only a part of the input, then times its frames as the
        // whole render does.
        let shift = seconds(self.start_ms);
        let _ = write!(graph, "[{video}]trim={range},setpts=PTS-{shift}/TB[{out}];");
        graph.video = out;
        if let Some(audio) = graph.audio.clone() {
            let out = graph.label("a");
            let _ = write!(graph, "[{audio}]atrim={range},asetpts=PTS-STARTPTS[{out}];");
            graph.audio = Some(out);
        }
        Ok(())
    }

    fn duration_after(&self, duration_ms: u64) -> u64 {
        self.end_ms.unwrap_or(duration_ms).min(duration_ms).saturating_sub(self.start_ms)
    }

    fn source_ms(&self, output_ms: u64) -> u64 {
        output_ms + self.start_ms
    }

    fn window(&self) -> Option<(u64, Option<u64>)> {
        Some((self.start_ms, self.end_ms))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::nodes::speed::SpeedFilter;

    #[test]
    fn durations_follow_clips_and_speed() {
        assert_eq!(ClipFilter { start_ms: 500, end_ms: Some(1500) }.duration_after(2000), 1000);
        assert_eq!(ClipFilter { start_ms: 500, end_ms: Some(9000) }.duration_after(2000), 1500);
        assert_eq!(SpeedFilter { factor: 2.0 }.duration_after(2000), 1000);
    }
}
