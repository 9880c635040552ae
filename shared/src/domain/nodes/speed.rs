//! Speed: plays the video faster or slower.

use std::any::Any;
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use uuid::uuid;

use super::placement::Placement;
use super::schema::{no_rules, node, params_schema};
use super::tile::{CreditCost, EditContext, NodeKind, NodeSettings, NodeType};
use crate::domain::ids::NodeTypeId;
use crate::domain::media::filter::{Filter, FilterGraph};
use crate::domain::media::Edit;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("47a6bc12-618b-47a6-b0ad-7b3983640b2d"));

pub(super) fn node_type() -> NodeType {
    NodeType {
        settings: |params| Arc::new(Speed::parse(params)),
        ..node(
            ID,
            "Speed",
            NodeKind::Edit,
            params_schema(
                // ffmpeg's atempo filter handles 0.5..=2 per pass; the executor chains passes,
                // and beyond 0.25..=4 the audio becomes unusable.
                "Plays the video faster (factor > 1) or slower (factor < 1).",
                json!({"factor": {"type": "number", "minimum": 0.25, "maximum": 4}}),
                no_rules(),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        )
    }
}

/// How many times faster the video plays (default 1: unchanged).
#[derive(Clone, Debug, PartialEq)]
struct Speed {
    factor: f64,
}

impl Speed {
    fn parse(params: &Map<String, Value>) -> Self {
        Self { factor: params.get("factor").and_then(Value::as_f64).unwrap_or(1.0) }
    }

    fn changes_anything(&self) -> bool {
        (self.factor - 1.0).abs() >= f64::EPSILON
    }
}

impl NodeSettings for Speed {
    fn edit(&self, _context: &EditContext<'_>) -> Result<Option<Edit>, String> {
        Ok(self.changes_anything().then(|| Arc::new(SpeedFilter { factor: self.factor }) as Edit))
    }

    fn place(&self, placed: Vec<Placement>, length: u64) -> (Vec<Placement>, u64) {
        if !self.changes_anything() || self.factor <= 0.0 {
            return (placed, length);
        }
        let placed = placed.into_iter().map(|part| part.sped(self.factor)).collect();
        (placed, (length as f64 / self.factor).round() as u64)
    }
}

/// Plays the video `factor` times faster, keeping the audio's pitch.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeedFilter {
    pub factor: f64,
}

impl Filter for SpeedFilter {
    fn name(&self) -> &'static str {
        "Speed"
    }

    fn write(&self, graph: &mut FilterGraph) -> Result<(), String> {
        let factor = self.factor;
        let (video, out) = (graph.video.clone(), graph.label("v"));
        let _ = write!(graph, "[{video}]setpts=PTS/{factor}[{out}];");
        graph.video = out;
        if let Some(audio) = graph.audio.clone() {
            let out = graph.label("a");
            let tempos: Vec<String> = atempo_steps(factor).iter().map(|step| format!("atempo={step}")).collect();
            let _ = write!(graph, "[{audio}]{}[{out}];", tempos.join(","));
            graph.audio = Some(out);
        }
        Ok(())
    }

    fn source_ms(&self, output_ms: u64) -> u64 {
        (output_ms as f64 * self.factor).round() as u64
    }

    fn duration_after(&self, duration_ms: u64) -> u64 {
        (duration_ms as f64 / self.factor).round() as u64
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// atempo factors (each within 0.5..=2) whose product is `factor`.
fn atempo_steps(mut factor: f64) -> Vec<f64> {
    let mut steps = Vec::new();
    while factor > 2.0 {
        steps.push(2.0);
        factor /= 2.0;
    }
    while factor < 0.5 {
        steps.push(0.5);
        factor /= 0.5;
    }
    steps.push(factor);
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atempo_steps_stay_in_range() {
        assert_eq!(atempo_steps(0.25), vec![0.5, 0.5]);
        assert_eq!(atempo_steps(3.0), vec![2.0, 1.5]);
    }
}
