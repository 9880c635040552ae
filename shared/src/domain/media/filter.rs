//! The filter graph of a render, written one edit at a time. Each edit tile owns its
//! piece of the graph, as a libavfilter filter owns its options: the tile's module
//! implements [`Filter`], reading the streams the graph carries so far and writing the
//! ones it makes. The toolkit (`adapters::ffmpeg`) opens the inputs, asks each edit of
//! the chain for its piece in turn, and encodes what comes out.

use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One edit of a chain, as the render does it.
pub trait Filter: fmt::Debug + Send + Sync {
    /// The tile's name, in messages.
    fn name(&self) -> &'static str;

    /// Writes the edit's piece onto `graph`, from its current streams; a refusal is the
    /// edit's own message.
    fn write(&self, graph: &mut FilterGraph) -> Result<(), String>;

    /// The length after the edit of a video of `duration_ms`.
    fn duration_after(&self, duration_ms: u64) -> u64 {
        duration_ms
    }

    /// The time of the edit's input that its output shows at `output_ms` (the same for
    /// an edit that does not move time): a segment of the output reads its input from
    /// there.
    fn source_ms(&self, output_ms: u64) -> u64 {
        output_ms
    }

    /// The window the edit keeps (start, and end or None for the end), when it only
    /// keeps one: leading a chain of one input, it is then a seek on that input.
    fn window(&self) -> Option<(u64, Option<u64>)> {
        None
    }

    /// A subtitle file the edit reads (SubRip, as its tile wrote it).
    fn subtitles(&self) -> Option<&Path> {
        None
    }

    /// The edit reading `subtitles` (the toolkit's own conversion of them) instead.
    fn with_subtitles(&self, _subtitles: PathBuf) -> Option<Edit> {
        None
    }

    /// The edit as its type, for tests.
    fn as_any(&self) -> &dyn Any;
}

/// An edit of a render job.
pub type Edit = Arc<dyn Filter>;

/// An input an edit adds to the render (music, an image).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedInput {
    pub location: String,
    /// Read again from its start whenever it ends (music under a longer video).
    pub looped: bool,
}

/// A filter graph being written: its text, the streams it carries so far (labels), the
/// picture's size and the length, and the inputs the edits added.
#[derive(Debug)]
pub struct FilterGraph {
    text: String,
    labels: usize,
    /// Inputs the render opens before the edits' (their streams are `0:v`, `1:v`, …).
    inputs: usize,
    added: Vec<AddedInput>,
    /// The current video stream's label.
    pub video: String,
    /// The current audio stream: a label, or an input's stream (`0:a`); None when silent.
    pub audio: Option<String>,
    pub width: u32,
    pub height: u32,
    pub duration_ms: u64,
}

impl FilterGraph {
    /// A graph over `inputs` opened inputs; its streams are set by the first piece.
    pub fn new(inputs: usize) -> Self {
        Self {
            text: String::new(),
            labels: 0,
            inputs,
            added: Vec::new(),
            video: String::new(),
            audio: None,
            width: 0,
            height: 0,
            duration_ms: 0,
        }
    }

    /// A new stream label: `prefix` and a number no other label has.
    pub fn label(&mut self, prefix: &str) -> String {
        self.labels += 1;
        format!("{prefix}{}", self.labels)
    }

    /// Adds an input to the render; answers its index (its streams are `{index}:v`,
    /// `{index}:a`).
    pub fn add_input(&mut self, location: &str, looped: bool) -> usize {
        self.added.push(AddedInput { location: location.to_owned(), looped });
        self.inputs + self.added.len() - 1
    }

    /// The inputs the edits added, in order.
    pub fn added_inputs(&self) -> &[AddedInput] {
        &self.added
    }

    /// The graph's text so far.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Pieces are written with `write!`, each ending with `;`.
impl fmt::Write for FilterGraph {
    fn write_str(&mut self, piece: &str) -> fmt::Result {
        self.text.push_str(piece);
        Ok(())
    }
}

/// The refusal of a window (`name`'s) that starts at or after the end of its input.
pub fn window_past_end(name: &str, start_ms: u64, duration_ms: u64) -> String {
    format!("{name}: start_ms ({start_ms}) is not before the end of its input ({duration_ms} ms)")
}

/// Milliseconds as the seconds a filter option reads (`1.500`).
pub fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// Audio as every piece mixes it: 48 kHz stereo.
pub const STEREO_48K: &str = "aformat=sample_rates=48000:channel_layouts=stereo";

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    #[test]
    fn labels_are_unique_and_added_inputs_follow_the_opened_ones() {
        let mut graph = FilterGraph::new(2);
        let (a, b) = (graph.label("v"), graph.label("a"));
        assert_ne!(a, b);
        assert_eq!(graph.add_input("file:/m.mp3", true), 2);
        assert_eq!(graph.add_input("file:/i.png", false), 3);
        let _ = write!(graph, "[0:v]null[{a}];");
        assert_eq!(graph.text(), "[0:v]null[v1];");
        assert_eq!(seconds(1500), "1.500");
    }
}
