//! An output's edit decisions: which stretch of which medium (a bound input, an uploaded
//! sound or picture) plays where in the output. Derived from the tasks that made it —
//! the inputs' clip windows, then each node's Clip, Speed, Concatenate, Background Music
//! and Overlay in order — so that `sources` can say where each medium is used and the
//! timeline project can rebuild the edit in an editor.

use std::collections::{BTreeSet, HashMap};

use super::{InputSource, MediaFile, MediaId, Run, TaskIndex, TaskSource};
use crate::core::timeline::{ClipKind, Timeline, TimelineClip};
use crate::domain::media::MediaLinks;
use crate::domain::media::MediaType;
use crate::domain::nodes::placement::Role;
pub use crate::domain::nodes::placement::{Medium, Placement};
use crate::domain::nodes::NodeKind;
use crate::domain::time::Timestamp;

/// The placements of task `task`'s result `file` (the tasks it builds on are completed).
pub fn placements(run: &Run, task: TaskIndex, file: &MediaFile) -> Vec<Placement> {
    placements_and_length(run, task, file).0
}

/// Most placements an output keeps (its first ones, in output order per track).
pub const MAX_PLACEMENTS: usize = 200;

/// The placements of a task's result `file` and its length. Every task it builds on is
/// placed once, sources before the tasks that use them, and each list is kept to
/// [`MAX_PLACEMENTS`]: linear in the tasks it builds on and their connections however
/// often a result is used again downstream (a walk per path would be exponential in a
/// graph of layers that each join two copies of the layer before), and in nothing else
/// of the run (an output of a 1,000-task fan-out walks its own chain, not the run).
fn placements_and_length(run: &Run, index: TaskIndex, file: &MediaFile) -> (Vec<Placement>, u64) {
    // The tasks `index` builds on, found from it; tasks only depend on earlier tasks, so
    // in ascending order sources come before the tasks that use them.
    let mut needed = BTreeSet::from([index.0]);
    let mut unvisited = vec![index.0];
    while let Some(at) = unvisited.pop() {
        if let TaskSource::Tasks { tasks } = &run.tasks[at].source {
            for source in tasks.iter().filter(|source| source.0 < at) {
                if needed.insert(source.0) {
                    unvisited.push(source.0);
                }
            }
        }
    }
    let mut placed: HashMap<usize, (Vec<Placement>, u64)> = HashMap::with_capacity(needed.len());
    for at in needed {
        let file = if at == index.0 { Some(file) } else { run.tasks[at].result.as_ref() };
        let this = place_task(run, TaskIndex(at), file, |source| placed.get(&source.0));
        placed.insert(at, this);
    }
    placed.remove(&index.0).unwrap_or_default()
}

/// One task's placements and length from those of its sources; `file` is its result.
fn place_task<'a>(
    run: &Run,
    index: TaskIndex,
    file: Option<&MediaFile>,
    of_source: impl Fn(TaskIndex) -> Option<&'a (Vec<Placement>, u64)>,
) -> (Vec<Placement>, u64) {
    let task = &run.tasks[index];
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
        TaskSource::Generate => {
            let length = file.map_or(0, |file| file.duration_ms);
            (vec![Placement::whole(Medium::Generated { task: index.0, role: Role::Main }, length)], length)
        }
        TaskSource::Tasks { tasks } => {
            let mut placed = Vec::new();
            let mut offset = 0;
            let edits = task.nodes.first().and_then(|node| run.nodes[*node].kind()) == Some(NodeKind::Edit);
            let mut connected = Vec::new();
            for source in tasks {
                let media = run.tasks[*source].result.as_ref().map(|file| file.media).unwrap_or_default();
                if edits && media != MediaType::Video {
                    // A generated medium the edit takes through a connection, over its whole length.
                    let role = if media == MediaType::Audio { Role::Background } else { Role::Overlay };
                    connected.push(Medium::Generated { task: source.0, role });
                    continue;
                }
                let Some((parts, length)) = of_source(*source) else { continue };
                let room = MAX_PLACEMENTS.saturating_sub(placed.len());
                placed.extend(parts.iter().take(room).map(|part| part.clone().shifted(offset)));
                offset += length;
            }
            placed.extend(connected.into_iter().map(|medium| Placement::whole(medium, offset)));
            (placed, offset)
        }
    };
    for &node_index in &task.nodes {
        (placed, length) = run.nodes[node_index].settings().place(placed, length);
    }
    // What the task's file measures is the truth about its length.
    if let Some(actual) = file.map(|file| file.duration_ms).filter(|ms| *ms > 0) {
        placed = placed.iter().filter_map(|part| part.within(0, actual)).collect();
        length = actual;
    }
    // Bounded, so that a fan-in of many items keeps the run's document small.
    placed.truncate(MAX_PLACEMENTS);
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
            Medium::Generated { task, role } => {
                let Some(made) = run.tasks.get(*task).and_then(|task| task.result.as_ref()) else { continue };
                let kind = match made.media {
                    MediaType::Video => ClipKind::Video,
                    MediaType::Image => ClipKind::Image,
                    MediaType::Audio => ClipKind::Audio,
                };
                let target = made.generated.as_ref().and_then(|by| by.link).map(|media| links.link(media, now));
                let name = format!("generated {} ({})", made.media.as_str(), role.as_str());
                (
                    kind,
                    name,
                    target.unwrap_or_default(),
                    Some(made.duration_ms).filter(|ms| *ms > 0 && made.media == MediaType::Video),
                )
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
