//! OpenTimelineIO JSON. OTIO counts time in exact fractional frames (ms × rate / 1000),
//! so milliseconds survive.

use serde_json::{json, Value};

use super::{file_name, lanes, record_ms, speed, Timeline, TimelineClip};

/// The timeline as OpenTimelineIO JSON (`Timeline.1`, clips as `Clip.2`, the schema
/// versions opentimelineio 0.18 writes itself).
///
/// Tracks: the main video, the overlays and the audio, each split into more tracks of the
/// same kind only where its clips overlap. A clip at another speed keeps its record length
/// as its `source_range` duration, because in OTIO's core model a clip takes its
/// `source_range` duration in its track whatever its effects; the speed (source length /
/// record length) is a `LinearTimeWarp` effect's `time_scalar`. This is how OTIO's own
/// EDL and FCP XML adapters read speed changes.
pub fn otio(timeline: &Timeline) -> String {
    let rate = f64::from(timeline.frame_rate);
    let mut tracks = Vec::new();
    for (clips, kind, name) in [
        (&timeline.video, "Video", "Video"),
        (&timeline.overlays, "Video", "Overlays"),
        (&timeline.audio, "Audio", "Audio"),
    ] {
        for (index, lane) in lanes(clips).iter().enumerate() {
            let name = if index == 0 { name.to_owned() } else { format!("{name} {}", index + 1) };
            tracks.push(otio_track(kind, &name, lane, rate));
        }
    }
    let document = json!({
        "OTIO_SCHEMA": "Timeline.1",
        "metadata": {},
        "name": timeline.name,
        "global_start_time": null,
        "tracks": {
            "OTIO_SCHEMA": "Stack.1",
            "metadata": {},
            "name": "tracks",
            "source_range": null,
            "effects": [],
            "markers": [],
            "enabled": true,
            "children": tracks,
        },
    });
    // A `Value` of strings, numbers and plain maps always serializes.
    serde_json::to_string_pretty(&document).unwrap_or_default()
}

fn otio_track(kind: &str, name: &str, lane: &[&TimelineClip], rate: f64) -> Value {
    let mut children = Vec::new();
    let mut cursor_ms = 0;
    for clip in lane {
        if clip.record_in_ms > cursor_ms {
            children.push(json!({
                "OTIO_SCHEMA": "Gap.1",
                "metadata": {},
                "name": "",
                "source_range": otio_range(0, clip.record_in_ms - cursor_ms, rate),
                "effects": [],
                "markers": [],
                "enabled": true,
            }));
        }
        children.push(otio_clip(clip, rate));
        cursor_ms = clip.record_out_ms;
    }
    json!({
        "OTIO_SCHEMA": "Track.1",
        "metadata": {},
        "name": name,
        "source_range": null,
        "effects": [],
        "markers": [],
        "enabled": true,
        "children": children,
        "kind": kind,
    })
}

fn otio_clip(clip: &TimelineClip, rate: f64) -> Value {
    let effects: Vec<Value> = match speed(clip) {
        Some(time_scalar) => vec![json!({
            "OTIO_SCHEMA": "LinearTimeWarp.1",
            "metadata": {},
            "name": "",
            "effect_name": "LinearTimeWarp",
            "enabled": true,
            "time_scalar": time_scalar,
        })],
        None => Vec::new(),
    };
    let available_range = clip.source_duration_ms.map_or(Value::Null, |ms| otio_range(0, ms, rate));
    json!({
        "OTIO_SCHEMA": "Clip.2",
        "metadata": {},
        "name": clip.name,
        "source_range": otio_range(clip.source_in_ms, record_ms(clip), rate),
        "effects": effects,
        "markers": [],
        "enabled": true,
        "media_references": {
            "DEFAULT_MEDIA": {
                "OTIO_SCHEMA": "ExternalReference.1",
                "metadata": {},
                "name": file_name(clip),
                "available_range": available_range,
                "target_url": clip.target_url,
            },
        },
        "active_media_reference_key": "DEFAULT_MEDIA",
    })
}

fn otio_range(start_ms: u64, duration_ms: u64, rate: f64) -> Value {
    let time = |ms: u64| json!({"OTIO_SCHEMA": "RationalTime.1", "rate": rate, "value": ms as f64 * rate / 1000.0});
    json!({"OTIO_SCHEMA": "TimeRange.1", "duration": time(duration_ms), "start_time": time(start_ms)})
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::timeline::fixtures::*;

    #[test]
    fn otio_has_three_tracks_of_clips_and_gaps_with_exact_ranges() {
        let document: Value = serde_json::from_str(&otio(&timeline())).expect("OTIO is JSON");
        assert_eq!(document["OTIO_SCHEMA"], "Timeline.1");
        assert_eq!(document["global_start_time"], Value::Null);
        assert_eq!(document["tracks"]["OTIO_SCHEMA"], "Stack.1");
        let tracks = document["tracks"]["children"].as_array().expect("tracks");
        let kinds: Vec<_> = tracks.iter().map(|track| (track["OTIO_SCHEMA"].clone(), track["kind"].clone())).collect();
        assert_eq!(
            kinds,
            [("Track.1", "Video"), ("Track.1", "Video"), ("Track.1", "Audio")].map(|(a, b)| (json!(a), json!(b)))
        );
        let items: Vec<&Value> = tracks.iter().flat_map(|track| track["children"].as_array().expect("items")).collect();
        assert_eq!(items.iter().filter(|item| item["OTIO_SCHEMA"] == "Clip.2").count(), 4);

        let [intro, fast] = [&tracks[0]["children"][0], &tracks[0]["children"][1]];
        assert_eq!(intro["name"], INTRO);
        assert_eq!(intro["source_range"]["duration"]["rate"], 25.0);
        assert_eq!(range(&intro["source_range"]), [25.0, 50.0]);
        assert_eq!(intro["effects"], json!([]));
        let reference = &intro["media_references"][intro["active_media_reference_key"].as_str().expect("key")];
        assert_eq!(reference["OTIO_SCHEMA"], "ExternalReference.1");
        assert_eq!(reference["target_url"], SOURCE);
        assert_eq!(range(&reference["available_range"]), [0.0, 250.0]);
        // At 2× the clip keeps its record length (25 frames) and the speed is the effect's.
        assert_eq!(range(&fast["source_range"]), [125.0, 25.0]);
        assert_eq!(fast["effects"][0]["OTIO_SCHEMA"], "LinearTimeWarp.1");
        assert_eq!(fast["effects"][0]["time_scalar"], 2.0);

        let overlay = tracks[1]["children"].as_array().expect("overlay items");
        assert_eq!(overlay[0]["OTIO_SCHEMA"], "Gap.1");
        assert_eq!(range(&overlay[0]["source_range"]), [0.0, 10.0]);
        assert_eq!(overlay[1]["name"], "Logo");
        assert_eq!(range(&overlay[1]["source_range"]), [0.0, 25.0]);
        assert_eq!(overlay[1]["media_references"]["DEFAULT_MEDIA"]["available_range"], Value::Null);
        let music = &tracks[2]["children"][0];
        assert_eq!(range(&music["source_range"]), [0.0, 75.0]);
        assert_eq!(range(&music["media_references"]["DEFAULT_MEDIA"]["available_range"]), [0.0, 4500.0]);
        // Milliseconds off the frame grid stay exact.
        assert_eq!(range(&otio_range(1001, 1, 25.0)), [25.025, 0.025]);
    }
}
