//! An output's edit decisions: which stretch of which medium (a bound input, an uploaded
//! sound or picture) plays where in the output. Derived from the tasks that made it —
//! the inputs' clip windows, then each node's Clip, Speed, Concatenate, Background Music
//! and Overlay in order — so that `sources` can say where each medium is used and the
//! timeline project can rebuild the edit in an editor.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::views::MediaLinks;
use super::{InputSource, MediaFile, MediaId, Run, TaskSource};
use crate::core::timeline::{ClipKind, Timeline, TimelineClip};
use crate::domain::media::{edit_of, Edit};
use crate::domain::node_types::{BACKGROUND_MUSIC, OVERLAY};
use crate::domain::time::Timestamp;
use crate::domain::uploads::UploadId;

/// The medium a stretch comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Medium {
    /// The run's bound input with this index.
    Input { input: usize },
    /// An uploaded sound (Background Music).
    Music { upload: UploadId },
    /// An uploaded picture (Overlay).
    Picture { upload: UploadId },
}

/// One stretch of a medium in the output: the medium plays from `source_in_ms` to
/// `source_out_ms` (in its own time) while the output runs from `record_in_ms` to
/// `record_out_ms`. A looping sound's source times run past its end; a picture's are
/// the time it is shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    pub medium: Medium,
    pub source_in_ms: u64,
    pub source_out_ms: u64,
    pub record_in_ms: u64,
    pub record_out_ms: u64,
}

impl Placement {
    fn length(&self) -> u64 {
        self.record_out_ms - self.record_in_ms
    }

    /// Source time at record time `at` (inside the placement), linear in between.
    fn source_at(&self, at: u64) -> u64 {
        let length = self.length();
        if length == 0 {
            return self.source_in_ms;
        }
        let span = (self.source_out_ms - self.source_in_ms) as f64;
        self.source_in_ms + ((at - self.record_in_ms) as f64 * span / length as f64).round() as u64
    }

    /// The part inside the record window `from..to`, moved to start at `from` = 0.
    fn within(&self, from: u64, to: u64) -> Option<Placement> {
        let (start, end) = (self.record_in_ms.max(from), self.record_out_ms.min(to));
        (end > start).then(|| Placement {
            medium: self.medium.clone(),
            source_in_ms: self.source_at(start),
            source_out_ms: self.source_at(end),
            record_in_ms: start - from,
            record_out_ms: end - from,
        })
    }

    fn shifted(mut self, by: u64) -> Placement {
        self.record_in_ms += by;
        self.record_out_ms += by;
        self
    }

    fn sped(mut self, factor: f64) -> Placement {
        let scale = |at: u64| (at as f64 / factor).round() as u64;
        (self.record_in_ms, self.record_out_ms) = (scale(self.record_in_ms), scale(self.record_out_ms));
        self
    }
}

/// The placements of task `task`'s result `file` (the tasks it builds on are completed).
pub fn placements(run: &Run, task: usize, file: &MediaFile) -> Vec<Placement> {
    let mut placed = placements_and_length(run, task, Some(file)).0;
    // Bounded, so that a fan-in of many items keeps the run's document small.
    placed.truncate(MAX_PLACEMENTS);
    placed
}

/// Most placements an output keeps (its first ones, in output order per track).
pub const MAX_PLACEMENTS: usize = 200;

/// The placements of a task's result and its length; `file` is the result (else the
/// task's recorded one).
fn placements_and_length(run: &Run, index: usize, file: Option<&MediaFile>) -> (Vec<Placement>, u64) {
    let task = &run.tasks[index];
    let file = file.or(task.result.as_ref());
    let (mut placed, mut length) = match &task.source {
        TaskSource::Input { input } => {
            let bound = &run.inputs[*input];
            let start = bound.clip_start_ms.unwrap_or(0);
            // The Video Input task's result is its input cut to the window.
            let length = file.map_or(0, |file| file.duration_ms);
            let placement = Placement {
                medium: Medium::Input { input: *input },
                source_in_ms: start,
                source_out_ms: start + length,
                record_in_ms: 0,
                record_out_ms: length,
            };
            (vec![placement], length)
        }
        TaskSource::Tasks { tasks } => {
            let mut placed = Vec::new();
            let mut offset = 0;
            for source in tasks {
                let (parts, length) = placements_and_length(run, *source, None);
                placed.extend(parts.into_iter().map(|part| part.shifted(offset)));
                offset += length;
            }
            (placed, offset)
        }
    };
    for &node_index in &task.nodes {
        let node = &run.nodes[node_index];
        let upload = |param: &str| node.params.get(param).and_then(Value::as_str).and_then(UploadId::parse);
        if node.node_type_id == BACKGROUND_MUSIC || node.node_type_id == OVERLAY {
            let medium = match (node.node_type_id == BACKGROUND_MUSIC, upload("audio_id"), upload("image_id")) {
                (true, Some(upload), _) => Medium::Music { upload },
                (false, _, Some(upload)) => Medium::Picture { upload },
                _ => continue,
            };
            placed.push(Placement {
                medium,
                source_in_ms: 0,
                source_out_ms: length,
                record_in_ms: 0,
                record_out_ms: length,
            });
            continue;
        }
        // Only the timing of an edit matters here: files are not looked up.
        let edit = edit_of(node, &|_| Some(String::new()), &std::path::PathBuf::new);
        match edit {
            Ok(Some(Edit::Clip { start_ms, end_ms })) => {
                let end = end_ms.unwrap_or(length).min(length);
                placed = placed.iter().filter_map(|part| part.within(start_ms, end)).collect();
                length = end.saturating_sub(start_ms);
            }
            Ok(Some(Edit::Speed { factor })) if factor > 0.0 => {
                placed = placed.into_iter().map(|part| part.sped(factor)).collect();
                length = (length as f64 / factor).round() as u64;
            }
            _ => {}
        }
    }
    // What the task's file measures is the truth about its length.
    if let Some(actual) = file.map(|file| file.duration_ms).filter(|ms| *ms > 0) {
        placed = placed.iter().filter_map(|part| part.within(0, actual)).collect();
        length = actual;
    }
    (placed, length)
}

/// Frames per second the timeline project counts in (FCP7 XML, EDL).
pub const TIMELINE_FRAME_RATE: u32 = 30;

/// An output's timeline: its placements as clips that point at the run's source media
/// (signed links, valid 7 days from `now`, or the URL an input was given as).
pub fn timeline(
    run: &Run,
    output: MediaId,
    placements: &[Placement],
    file: &MediaFile,
    links: &MediaLinks,
    now: Timestamp,
) -> Timeline {
    let mut timeline = Timeline {
        name: format!("output {output}"),
        frame_rate: TIMELINE_FRAME_RATE,
        width: file.width,
        height: file.height,
        duration_ms: file.duration_ms,
        video: Vec::new(),
        overlays: Vec::new(),
        audio: Vec::new(),
    };
    for (number, placement) in placements.iter().enumerate() {
        let (kind, name, target_url, source_duration_ms) = match &placement.medium {
            Medium::Input { input } => {
                let Some(bound) = run.inputs.get(*input) else { continue };
                (ClipKind::Video, format!("input {}", input + 1), source_url(&bound.source, links, now), None)
            }
            Medium::Music { upload } | Medium::Picture { upload } => {
                let kind =
                    if matches!(placement.medium, Medium::Music { .. }) { ClipKind::Audio } else { ClipKind::Image };
                let target = run.assets.get(upload).and_then(|asset| asset.media).map(|media| links.link(media, now));
                (
                    kind,
                    format!("{} {upload}", if kind == ClipKind::Audio { "music" } else { "overlay" }),
                    target.unwrap_or_default(),
                    None,
                )
            }
        };
        let clip = TimelineClip {
            name: format!("{:03} {name}", number + 1),
            target_url,
            kind,
            source_duration_ms,
            source_in_ms: placement.source_in_ms,
            source_out_ms: placement.source_out_ms,
            record_in_ms: placement.record_in_ms,
            record_out_ms: placement.record_out_ms,
        };
        match kind {
            ClipKind::Video => timeline.video.push(clip),
            ClipKind::Image => timeline.overlays.push(clip),
            ClipKind::Audio => timeline.audio.push(clip),
        }
    }
    timeline
}

/// Where a bound input's original medium is.
fn source_url(source: &InputSource, links: &MediaLinks, now: Timestamp) -> String {
    match source {
        InputSource::Upload { media, .. } | InputSource::Asset { media, .. } => links.link(*media, now),
        InputSource::Render { id, .. } => links.link(*id, now),
        InputSource::Url { url } => url.clone(),
        InputSource::Site { video, .. } => video.page_url.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stretch(input: usize, source: (u64, u64), record: (u64, u64)) -> Placement {
        Placement {
            medium: Medium::Input { input },
            source_in_ms: source.0,
            source_out_ms: source.1,
            record_in_ms: record.0,
            record_out_ms: record.1,
        }
    }

    #[test]
    fn a_window_keeps_the_overlapping_part_with_its_source_times() {
        let part = stretch(0, (1_000, 3_000), (0, 2_000));
        assert_eq!(part.within(500, 1_500), Some(stretch(0, (1_500, 2_500), (0, 1_000))));
        assert_eq!(part.within(2_000, 3_000), None);
        // At double speed the source runs twice as fast as the record.
        let fast = stretch(0, (0, 4_000), (0, 2_000));
        assert_eq!(fast.within(1_000, 2_000), Some(stretch(0, (2_000, 4_000), (0, 1_000))));
    }

    #[test]
    fn speed_scales_record_times_only() {
        let part = stretch(1, (1_000, 3_000), (2_000, 4_000)).sped(2.0);
        assert_eq!(part, stretch(1, (1_000, 3_000), (1_000, 2_000)));
    }
}
