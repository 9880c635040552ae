//! What an output says of how it was made: `sources` (a citation per stretch of an
//! external or uploaded medium, with where it plays in the output) and
//! `timeline_prproj_url` (a zip of the edit as OpenTimelineIO, FCP7 XML and CMX3600 EDL,
//! read back here by the `opentimelineio` package from PyPI).

use std::path::Path;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::domain::nodes::{BACKGROUND_MUSIC, CLIP, CONCATENATE, DESTINATION, SPEED, VIDEO_INPUT};

use crate::conformance;
use crate::helpers::{http_get, Backend};
use crate::runs::{file_server, Harness};
use crate::uploads::sample;

conformance!(an_output_cites_its_media_where_they_play_and_links_a_timeline_project_of_its_edit);

/// Asserts `actual` is `expected` within `slack` ms (encoders round to frames).
fn near(actual: &Value, expected: u64, slack: u64, what: &str) {
    let actual = actual.as_u64().unwrap_or_else(|| panic!("{what}: {actual} is not a number"));
    assert!(actual.abs_diff(expected) <= slack, "{what}: {actual} ms, expected {expected} ± {slack} ms");
}

async fn an_output_cites_its_media_where_they_play_and_links_a_timeline_project_of_its_edit(backend: Backend) {
    let harness = Harness::new(backend).await;
    // Two items on one tile: an upload (2 s) and a URL (2 s, used from 500 ms on); each
    // cut to 200–1800 ms, joined, played at double speed, with music under it all.
    let video = harness.upload("video", "video.mp4").await;
    let music = harness.upload("audio", "audio.mp3").await;
    let url = file_server(sample("video.mp4")).await;
    let nodes = [
        ("in", VIDEO_INPUT, json!({})),
        ("clip", CLIP, json!({ "start_ms": 200, "end_ms": 1800 })),
        ("join", CONCATENATE, json!({})),
        ("speed", SPEED, json!({ "factor": 2.0 })),
        ("music", BACKGROUND_MUSIC, json!({ "audio_id": music })),
        ("out", DESTINATION, json!({})),
    ];
    let edges = [("in", "clip"), ("clip", "join"), ("join", "speed"), ("speed", "music"), ("music", "out")];
    let (agent, ids) = harness.agent(&nodes, &edges).await;
    let body = json!({ "video_inputs": [{
        "agent_node_id": ids["in"],
        "video_ids": [video],
        "video_url_inputs": [{ "url": url, "input_clip_start_ms": 500 }],
    }] });
    let run = harness.start(&agent, body).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    crate::openapi::conforms("get-run", StatusCode::OK, &record);
    for (function, path) in [
        ("get-run-nodes", format!("/agent_run/{run}/nodes")),
        ("list-runs", format!("/agent_runs?agent_id={agent}")),
        ("list-run-webhooks", format!("/agent_run/{run}/webhooks")),
    ] {
        let (status, body) = harness.test.call(Method::GET, &path, None).await;
        crate::openapi::conforms(function, status, &body);
    }
    let output = &record["outputs"][0];

    // The upload is the caller's own video: not cited. The URL input plays from 800 ms
    // (after the upload's 1.6 s at double speed) for 1.3 s / 2; the music under it all.
    let sources = output["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2, "{output}");
    let cited = &sources[0];
    assert_eq!(cited["provider"], "url");
    assert_eq!(cited["source_kind"], "video_url");
    assert_eq!(cited["media_type"], "video");
    assert_eq!(cited["query"], url.as_str());
    assert_eq!(cited["placement"], "main");
    assert_eq!(cited["layout"], "full_frame");
    assert_eq!(cited["licensed_asset_family"], "customer_supplied");
    assert!(cited["render_asset_id"].is_string(), "{cited}");
    near(&cited["start_ms"], 800, 60, "the URL input's start in the output");
    near(&cited["end_ms"], 1_450, 60, "the URL input's end in the output");
    let sound = &sources[1];
    assert_eq!(
        (&sound["provider"], &sound["source_kind"], &sound["media_type"], &sound["placement"]),
        (&json!("upload"), &json!("uploaded_audio"), &json!("audio"), &json!("background"))
    );
    assert_eq!(sound["provider_asset_id"], music.as_str());
    assert_eq!(sound["start_ms"], 0);
    near(&sound["end_ms"], 1_450, 60, "the music's end");

    // The timeline project: a signed zip of the same edit.
    let link = output["timeline_prproj_url"].as_str().expect("a timeline project link");
    let (status, zip) = http_get(link).await;
    assert_eq!(status, StatusCode::OK, "{link}");
    let folder = tempfile::tempdir().unwrap();
    let zip_path = folder.path().join("timeline.zip");
    std::fs::write(&zip_path, &zip).unwrap();
    let read = read_with_opentimelineio(&zip_path);
    let clips = read["video"].as_array().unwrap();
    assert_eq!(clips.len(), 2, "{read}");
    // Source ranges in each source's own time; positions in the output.
    let ms = |value: &Value| (value.as_f64().unwrap() * 1000.0).round() as u64;
    assert_eq!(ms(&clips[0]["source_start"]), 200, "{read}");
    assert_eq!(ms(&clips[1]["source_start"]), 700, "{read}");
    assert_eq!(ms(&clips[0]["record_start"]), 0, "{read}");
    near(&json!(ms(&clips[1]["record_start"])), 800, 40, "the second clip's place");
    assert_eq!(clips[0]["time_scalar"], 2.0, "{read}");
    assert!(clips[0]["target_url"].as_str().unwrap().contains("/media/"), "the upload's signed link: {read}");
    assert_eq!(clips[1]["target_url"], url.as_str());
    assert_eq!(read["audio"].as_array().unwrap().len(), 1, "{read}");
    // The FCP7 XML names the same clips; the EDL has an event per clip.
    let names: Vec<&Value> = clips.iter().map(|clip| &clip["name"]).collect();
    assert_eq!(read["xml_clip_names"].as_array().unwrap().iter().take(2).collect::<Vec<_>>(), names, "{read}");
    assert!(read["edl_events"].as_u64().unwrap() >= 2, "{read}");

    // The zip link is signed, and another organization cannot read the run.
    let tampered = link.replace("signature=", "signature=0");
    assert_eq!(http_get(&tampered).await.0, StatusCode::FORBIDDEN);
    let (_, other) = harness.test.add_organization(true).await;
    let (status, _) = harness.test.call_as(&other, Method::GET, &format!("/agent_run/{run}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Opens the zip's `.otio` with `opentimelineio` and reports its clips; parses the XML
/// and counts the EDL's events.
fn read_with_opentimelineio(zip: &Path) -> Value {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.local/venv/bin/python");
    let script = r#"
import json, sys, zipfile, tempfile, os
import xml.etree.ElementTree as ET
import opentimelineio as otio
folder = tempfile.mkdtemp()
with zipfile.ZipFile(sys.argv[1]) as archive:
    names = archive.namelist()
    archive.extractall(folder)
def find(suffix):
    matches = [name for name in names if name.endswith(suffix)]
    assert len(matches) == 1, (suffix, names)
    return os.path.join(folder, matches[0])
timeline = otio.adapters.read_from_file(find(".otio"))
report = {"video": [], "audio": []}
video_tracks = [t for t in timeline.tracks if t.kind == otio.schema.TrackKind.Video]
audio_tracks = [t for t in timeline.tracks if t.kind == otio.schema.TrackKind.Audio]
for name, tracks in (("video", video_tracks[:1]), ("audio", audio_tracks)):
    for track in tracks:
        for clip in track.find_clips():
            warp = [e for e in clip.effects if isinstance(e, otio.schema.LinearTimeWarp)]
            report[name].append({
                "name": clip.name,
                "source_start": clip.source_range.start_time.to_seconds(),
                "record_start": clip.range_in_parent().start_time.to_seconds(),
                "duration": clip.range_in_parent().duration.to_seconds(),
                "time_scalar": warp[0].time_scalar if warp else 1.0,
                "target_url": clip.media_reference.target_url,
            })
root = ET.parse(find(".xml")).getroot()
report["xml_clip_names"] = [item.findtext("name") for item in root.iter("clipitem")]
with open(find(".edl")) as edl:
    report["edl_events"] = sum(1 for line in edl if line[:3].isdigit())
print(json.dumps(report))
"#;
    let output = std::process::Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(zip)
        .output()
        .unwrap_or_else(|error| panic!("{} runs (installed by ./scripts/test.sh): {error}", python.display()));
    assert!(output.status.success(), "opentimelineio reads the project: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("the script's report")
}
