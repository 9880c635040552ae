//! An output's edit decisions as an editing timeline: which stretch of which source
//! medium plays where in the output. The files an editor imports (OpenTimelineIO,
//! FCP7 XML, CMX3600 EDL) are written from it by [`files`].

use serde::{Deserialize, Serialize};

pub mod files;

/// What a clip plays: a video with its picture (and sound), a sound only, or a still.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClipKind {
    Video,
    Audio,
    Image,
}

/// One stretch of a source medium placed in the output.
///
/// The source plays from `source_in_ms` to `source_out_ms` while the output runs from
/// `record_in_ms` to `record_out_ms`; when the two lengths differ the clip is played
/// faster or slower (speed = source length / record length).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimelineClip {
    /// The clip's name as an editor shows it (unique within the timeline).
    pub name: String,
    /// Where the source medium is: a URL (a signed link to a run's input, or the URL
    /// the input was given as).
    pub target_url: String,
    pub kind: ClipKind,
    /// Length of the whole source medium, when known.
    pub source_duration_ms: Option<u64>,
    pub source_in_ms: u64,
    pub source_out_ms: u64,
    pub record_in_ms: u64,
    pub record_out_ms: u64,
}

/// An output's timeline: a video track of clips end to end, and tracks laid over it
/// (background music, overlaid pictures).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The sequence's name.
    pub name: String,
    /// Frames per second the frame-based formats (FCP7 XML, EDL) count in.
    pub frame_rate: u32,
    pub width: u32,
    pub height: u32,
    /// The output's length.
    pub duration_ms: u64,
    /// The main picture (and its sound), in output order, without overlaps.
    pub video: Vec<TimelineClip>,
    /// Pictures laid over the main one (second video track).
    pub overlays: Vec<TimelineClip>,
    /// Sounds mixed under the main one (second audio track).
    pub audio: Vec<TimelineClip>,
}
