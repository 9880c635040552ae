//! Where a medium plays in an output: the edit decisions that `sources` and the timeline
//! project are made of, which each node type moves as it edits.

use serde::{Deserialize, Serialize};

use crate::domain::ids::UploadId;

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
    /// What the generation task with this index made, playing as `role`.
    Generated { task: usize, role: Role },
}

/// How a generated medium is used in an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The picture and sound themselves (a generated video, or an image or sound delivered as it is).
    Main,
    /// A picture over the video (Overlay).
    Overlay,
    /// A sound under the video (Background Music).
    Background,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Main => "main",
            Self::Overlay => "overlay",
            Self::Background => "background",
        }
    }
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
    /// The medium playing from its start for the whole of an output `length` long.
    pub fn whole(medium: Medium, length: u64) -> Self {
        Self { medium, source_in_ms: 0, source_out_ms: length, record_in_ms: 0, record_out_ms: length }
    }

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
    pub fn within(&self, from: u64, to: u64) -> Option<Placement> {
        let (start, end) = (self.record_in_ms.max(from), self.record_out_ms.min(to));
        (end > start).then(|| Placement {
            medium: self.medium.clone(),
            source_in_ms: self.source_at(start),
            source_out_ms: self.source_at(end),
            record_in_ms: start - from,
            record_out_ms: end - from,
        })
    }

    pub fn shifted(mut self, by: u64) -> Placement {
        self.record_in_ms += by;
        self.record_out_ms += by;
        self
    }

    pub fn sped(mut self, factor: f64) -> Placement {
        let scale = |at: u64| (at as f64 / factor).round() as u64;
        (self.record_in_ms, self.record_out_ms) = (scale(self.record_in_ms), scale(self.record_out_ms));
        self
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
