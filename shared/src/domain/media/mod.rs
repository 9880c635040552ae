//! What a task asks of the media toolkit, in the domain's words: the inputs, the edits in
//! order, and where the result goes. The toolkit (ffmpeg) turns this into one pass.

use std::path::PathBuf;
use std::time::Duration;

pub mod filter;
mod links;
pub mod ports;

pub use filter::Edit;
pub use links::{MediaKind, MediaLinks, MediaRecord, LINK_TTL, MEDIA_PATH_PREFIX};

/// A finalized file, frozen where no upload URL can change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedBlob {
    pub key: String,
    /// The object version (S3), when the key alone does not pin the content.
    pub version: Option<String>,
    pub size: u64,
}

/// The result of probing a file, in the domain's terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeReport {
    /// ffprobe's `format_name`, e.g. `mov,mp4,m4a,3gp,3g2,mj2` or `png_pipe`.
    pub format_name: String,
    pub duration_seconds: Option<f64>,
    pub streams: Vec<ProbedStream>,
}

/// One stream of a probed file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbedStream {
    /// `video`, `audio`, `subtitle`, ...
    pub codec_type: String,
    pub codec_name: String,
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// Frames per `.1` seconds (a video's grid).
    pub frame_rate: Option<(u32, u32)>,
    /// Cover art inside an audio file: a picture, not a video.
    pub attached_pic: bool,
}

/// What a media file holds: the engine's files are videos, except what image and audio
/// generation make (which feed Overlay, Background Music or a Destination).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaType {
    #[default]
    Video,
    Image,
    Audio,
}

impl MediaType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Video => "video",
            Self::Image => "image",
            Self::Audio => "audio",
        }
    }

    /// The media type its files are served with.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Video => "video/mp4",
            Self::Image => "image/png",
            Self::Audio => "audio/mp4",
        }
    }

    /// The extension its files are stored with.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Video => "mp4",
            Self::Image => "png",
            Self::Audio => "m4a",
        }
    }
}

/// How loud a sound is (ffmpeg's `volumedetect`) and how long it is silent
/// (`silencedetect` below [`SILENCE_DB`] for at least [`SILENCE_MIN_S`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loudness {
    pub mean_db: f64,
    pub max_db: f64,
    pub silent_ms: u64,
}

/// The level below which a stretch of sound counts as silence, in dBFS.
pub const SILENCE_DB: i32 = -40;
/// The shortest stretch below [`SILENCE_DB`] counted as silence, in seconds.
pub const SILENCE_MIN_S: f64 = 0.3;

/// A preview to make: the first `seconds` of a video (with its sound), or of a picture
/// shown over a sound; `width` pixels wide.
#[derive(Clone, Debug, PartialEq)]
pub struct PreviewJob {
    pub video: Option<String>,
    pub image: Option<String>,
    pub audio: Option<String>,
    pub seconds: u32,
    pub width: u32,
    pub budget: Duration,
}

/// A media file a job reads, with what is known of it.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderInput {
    /// A path (`file:` prefixed) or URL.
    pub location: String,
    pub duration_ms: u64,
    pub width: u32,
    pub height: u32,
    pub has_audio: bool,
}

/// A render: the inputs (joined end to end when there are several), then the edits.
#[derive(Clone, Debug)]
pub struct RenderJob {
    pub inputs: Vec<RenderInput>,
    pub edits: Vec<Edit>,
    /// Where the MP4 goes (an M4A for [`RenderPart::Sound`]).
    pub output: PathBuf,
    /// Longest the render may take.
    pub budget: Duration,
    /// What of the output the job makes.
    pub part: RenderPart,
}

/// Which part of its output a render makes. A long output is made as the pictures of
/// its segments ([`segments`]), each reading only its window of the input, and its sound
/// made once; a join ([`JoinJob`]) then puts them together without encoding again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RenderPart {
    /// The whole output, picture and sound, in one pass.
    #[default]
    Whole,
    /// The picture of `start_ms..end_ms` of the output, without sound. Its frames are
    /// those the whole render has in that window, with the same timestamps less
    /// `start_ms`, which must fall on a frame ([`segments`]).
    Picture { start_ms: u64, end_ms: u64 },
    /// The sound of the whole output, without picture.
    Sound,
}

/// A join of rendered parts: the pictures end to end (each `duration_ms` long, as its
/// window), with the sound; streams are copied, nothing is encoded.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinJob {
    /// Each picture's location (a `file:` path or URL) and its window's length.
    pub pictures: Vec<(String, u64)>,
    /// The sound's location; None for a silent output.
    pub sound: Option<String>,
    /// Where the MP4 goes.
    pub output: PathBuf,
    pub budget: Duration,
    /// Room kept at the file's start for its index (`moov`), written there when the
    /// join ends ([`index_room`]): every byte after the room is then written once, in
    /// order, and the file keeps its index first. 0: the index goes last.
    pub index_bytes: u64,
}

/// Room enough for the index of an MP4 of `duration_ms` at `frame_rate` (frames per
/// `frame_rate.1` seconds), with its sound when `sound` (AAC at 48 kHz, 1,024 samples a
/// frame): 24 bytes for each frame of either (an index takes 4 to 16 for one: its size,
/// its time, its B-frame offset, a keyframe mark; 14 measured on a 10-minute join), and
/// 256 KiB for the rest.
pub fn index_room(duration_ms: u64, frame_rate: (u32, u32), sound: bool) -> u64 {
    let (num, den) = (u64::from(frame_rate.0.max(1)), u64::from(frame_rate.1.max(1)));
    let pictures = (duration_ms * num).div_ceil(den * 1000) + 1;
    let sounds = if sound { (duration_ms * 48).div_ceil(1024) + 2 } else { 0 };
    (pictures + sounds) * 24 + 256 * 1024
}

/// The output windows of a render of `duration_ms` at `frame_rate` (frames per
/// `frame_rate.1` seconds) cut into segments of about `segment_ms`: `[0, s)`, `[s, 2s)`, …
/// to the end; one window when the output is not longer. Each seam falls on a frame, at
/// a whole millisecond (30 frames of 29.97 are 1,001 ms), so that a part starts with a
/// frame of the grid and the join puts it at its exact time.
pub fn segments(duration_ms: u64, segment_ms: u64, frame_rate: (u32, u32)) -> Vec<(u64, u64)> {
    let (num, den) = (u64::from(frame_rate.0.max(1)), u64::from(frame_rate.1.max(1)));
    // The fewest frames that last a whole number of milliseconds.
    let step = num / gcd(num, den * 1000);
    let frames = (segment_ms * num / (den * 1000) / step).max(1) * step;
    let segment_ms = frames * den * 1000 / num;
    (0..duration_ms.div_ceil(segment_ms).max(1))
        .map(|index| (index * segment_ms, ((index + 1) * segment_ms).min(duration_ms)))
        .collect()
}

/// The length of a render of `input` through `edits`, and whether it has sound: each
/// edit's piece written as the render writes it (a refusal is the edit's message).
pub fn outcome_of(input: &RenderInput, edits: &[Edit]) -> Result<(u64, bool), String> {
    let mut graph = filter::FilterGraph::new(1);
    graph.video = "0:v".to_owned();
    graph.audio = input.has_audio.then(|| "0:a".to_owned());
    (graph.width, graph.height, graph.duration_ms) = (input.width / 2 * 2, input.height / 2 * 2, input.duration_ms);
    for edit in edits {
        edit.write(&mut graph)?;
        graph.duration_ms = edit.duration_after(graph.duration_ms);
    }
    Ok((graph.duration_ms, graph.audio.is_some()))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Why a render failed.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// The media or the edit is the problem (the task fails with this message).
    #[error("{0}")]
    Invalid(String),
    /// The edit at this position of the job is the problem.
    #[error("{message}")]
    InvalidEdit { edit: usize, message: String },
    /// Stopped because the run was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// Took longer than its budget.
    #[error("the edit took longer than its time budget of {0:?}")]
    TimedOut(Duration),
    /// The toolkit could not run.
    #[error("media toolkit unavailable: {0:#}")]
    Unavailable(anyhow::Error),
}

/// Resolves once `cancelled` is set; never, when its sender is gone without setting it.
pub async fn until_cancelled(mut cancelled: tokio::sync::watch::Receiver<bool>) {
    loop {
        if *cancelled.borrow_and_update() {
            return;
        }
        if cancelled.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seams_fall_on_frames_at_whole_milliseconds() {
        assert_eq!(segments(7_000, 3_000, (30, 1)), vec![(0, 3_000), (3_000, 6_000), (6_000, 7_000)]);
        // 29.97: 90 frames are 3,003 ms, not a whole number of 30 frames under 3 s.
        assert_eq!(
            segments(7_000, 3_000, (30_000, 1_001)),
            vec![(0, 2_002), (2_002, 4_004), (4_004, 6_006), (6_006, 7_000)]
        );
        assert_eq!(segments(500, 3_000, (25, 1)), vec![(0, 500)]);
        assert_eq!(segments(3_000, 10, (30, 1)), segments(3_000, 100, (30, 1)));
    }
}
