//! An output's edit decisions as an editing timeline: which stretch of which source
//! medium plays where in the output. The files an editor imports are written from it, one
//! module per format: [`otio`] (OpenTimelineIO JSON), [`fcp7`] (Final Cut Pro 7 XML, which
//! Premiere Pro and DaVinci Resolve import) and [`edl`] (CMX3600), the three in one [`zip`].
//!
//! The frame-based formats round each record edge to the nearest frame and take a clip's
//! source length from its rounded record length, so the two never disagree by a frame.
//! Clips that play for no time are left out of every file.

use std::io::{Cursor, Write as _};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

pub mod edl;
pub mod fcp7;
pub mod otio;

pub use edl::edl;
pub use fcp7::fcp7_xml;
pub use otio::otio;

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

/// A zip archive of `{stem}.otio`, `{stem}.xml` and `{stem}.edl`, stored uncompressed
/// (a few kilobytes of text). Path separators in `stem` become `_`.
pub fn zip(timeline: &Timeline, stem: &str) -> anyhow::Result<Vec<u8>> {
    let stem = stem.replace(['/', '\\'], "_");
    let mut archive = ::zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = ::zip::write::SimpleFileOptions::default()
        .compression_method(::zip::CompressionMethod::Stored)
        .unix_permissions(0o644);
    for (extension, body) in [("otio", otio(timeline)), ("xml", fcp7_xml(timeline)), ("edl", edl(timeline))] {
        let name = format!("{stem}.{extension}");
        archive.start_file(name.as_str(), options).with_context(|| format!("adding {name} to the timeline zip"))?;
        archive.write_all(body.as_bytes()).with_context(|| format!("writing {name} into the timeline zip"))?;
    }
    Ok(archive.finish().context("finishing the timeline zip")?.into_inner())
}

/// Splits clips into tracks without overlaps, each in record order: a clip goes on the
/// first track whose last clip has ended, so clips that never overlap make one track.
/// There is always at least one (maybe empty) track.
pub(super) fn lanes(clips: &[TimelineClip]) -> Vec<Vec<&TimelineClip>> {
    let mut sorted: Vec<&TimelineClip> = clips.iter().filter(|clip| record_ms(clip) > 0).collect();
    sorted.sort_by_key(|clip| (clip.record_in_ms, clip.record_out_ms));
    let mut lanes: Vec<Vec<&TimelineClip>> = vec![Vec::new()];
    for clip in sorted {
        let free = lanes.iter_mut().find(|lane| lane.last().is_none_or(|last| last.record_out_ms <= clip.record_in_ms));
        match free {
            Some(lane) => lane.push(clip),
            None => lanes.push(vec![clip]),
        }
    }
    lanes
}

pub(super) fn record_ms(clip: &TimelineClip) -> u64 {
    clip.record_out_ms.saturating_sub(clip.record_in_ms)
}

/// Source length / record length, when the two differ.
pub(super) fn speed(clip: &TimelineClip) -> Option<f64> {
    let source_ms = clip.source_out_ms.saturating_sub(clip.source_in_ms);
    let record_ms = record_ms(clip);
    (source_ms != record_ms && record_ms > 0).then(|| source_ms as f64 / record_ms as f64)
}

/// The frame rate the frame-based formats count in (at least 1, so timecodes divide).
pub(super) fn frame_base(timeline: &Timeline) -> u64 {
    u64::from(timeline.frame_rate.max(1))
}

/// `ms` in whole frames, to the nearest (halves up).
pub(super) fn frames(ms: u64, fps: u64) -> u64 {
    (ms.saturating_mul(fps) + 500) / 1000
}

/// A clip's edges in frames at the timeline's rate.
pub(super) struct ClipFrames {
    pub(super) record_in: u64,
    pub(super) record_out: u64,
    pub(super) source_in: u64,
    pub(super) source_out: u64,
    /// Where the source starts, in fractional frames.
    pub(super) source_in_exact: f64,
    pub(super) speed: Option<f64>,
    /// The whole source's length, when known.
    pub(super) media: Option<u64>,
}

impl ClipFrames {
    pub(super) fn of(clip: &TimelineClip, fps: u64) -> Self {
        Self {
            record_in: frames(clip.record_in_ms, fps),
            record_out: frames(clip.record_out_ms, fps),
            source_in: frames(clip.source_in_ms, fps),
            source_out: frames(clip.source_out_ms, fps),
            source_in_exact: clip.source_in_ms as f64 * fps as f64 / 1000.0,
            speed: speed(clip),
            media: clip.source_duration_ms.map(|ms| frames(ms, fps)),
        }
    }
}

/// The source's file name: the URL's last path segment without query, else the clip's name.
pub(super) fn file_name(clip: &TimelineClip) -> &str {
    let path = clip.target_url.split(['?', '#']).next().unwrap_or_default();
    match path.rsplit('/').next() {
        Some(name) if !name.is_empty() => name,
        _ => &clip.name,
    }
}

/// A number with at most four decimals and no trailing zeros (`200`, `33.3333`).
pub(super) fn decimal(value: f64) -> String {
    let text = format!("{value:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! A timeline every format's tests write, and a small XML reader to check the FCP7 file.

    use serde_json::Value;

    use super::*;

    pub(crate) const SOURCE: &str = "https://media.example/in/source.mp4?sig=a&b=c";
    pub(crate) const LOGO: &str = "https://media.example/in/logo.png";
    pub(crate) const MUSIC: &str = "https://media.example/in/music.mp3";
    pub(crate) const INTRO: &str = "Intro <A & \"B\">";

    pub(crate) fn clip(
        name: &str,
        kind: ClipKind,
        url: &str,
        media_ms: Option<u64>,
        source: [u64; 2],
        record: [u64; 2],
    ) -> TimelineClip {
        TimelineClip {
            name: name.to_owned(),
            target_url: url.to_owned(),
            kind,
            source_duration_ms: media_ms,
            source_in_ms: source[0],
            source_out_ms: source[1],
            record_in_ms: record[0],
            record_out_ms: record[1],
        }
    }

    /// Two stretches of one 10 s source end to end, the second at 2×, a logo over part of
    /// them and music under all of it; 25 fps.
    pub(crate) fn timeline() -> Timeline {
        Timeline {
            name: "Cut <1> & \"final\"".to_owned(),
            frame_rate: 25,
            width: 1920,
            height: 1080,
            duration_ms: 3000,
            video: vec![
                clip(INTRO, ClipKind::Video, SOURCE, Some(10_000), [1000, 3000], [0, 2000]),
                clip("Fast", ClipKind::Video, SOURCE, Some(10_000), [5000, 7000], [2000, 3000]),
            ],
            overlays: vec![clip("Logo", ClipKind::Image, LOGO, None, [0, 1000], [400, 1400])],
            audio: vec![clip("Music", ClipKind::Audio, MUSIC, Some(180_000), [0, 3000], [0, 3000])],
        }
    }

    pub(crate) fn range(value: &Value) -> [f64; 2] {
        let time = |key: &str| value[key]["value"].as_f64().unwrap_or(f64::NAN);
        [time("start_time"), time("duration")]
    }

    /// An XML element as the test reads it back: tags must balance, entities must be known.
    #[derive(Debug, Default)]
    pub(crate) struct Element {
        pub(crate) name: String,
        pub(crate) attributes: Vec<(String, String)>,
        pub(crate) children: Vec<Element>,
        pub(crate) text: String,
    }

    impl Element {
        pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
            self.children.iter().filter(move |child| child.name == name)
        }

        pub(crate) fn child(&self, name: &str) -> &Element {
            self.children
                .iter()
                .find(|child| child.name == name)
                .unwrap_or_else(|| panic!("<{}> has no <{name}>", self.name))
        }

        pub(crate) fn text_of(&self, name: &str) -> &str {
            &self.child(name).text
        }

        pub(crate) fn attribute(&self, name: &str) -> &str {
            self.attributes.iter().find(|(key, _)| key == name).map_or("", |(_, value)| value)
        }
    }

    pub(crate) fn unescape(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find(['&', '<', '>', '"']) {
            out.push_str(&rest[..at]);
            assert!(rest[at..].starts_with('&'), "raw markup character in text: {text}");
            let end = rest[at..].find(';').expect("entity ends") + at;
            out.push(match &rest[at + 1..end] {
                "amp" => '&',
                "lt" => '<',
                "gt" => '>',
                "quot" => '"',
                "apos" => '\'',
                other => panic!("unknown entity &{other};"),
            });
            rest = &rest[end + 1..];
        }
        out + rest
    }

    pub(crate) fn parse_xml(document: &str) -> Element {
        let mut stack = vec![Element::default()];
        let mut rest = document;
        while let Some(start) = rest.find('<') {
            let text = unescape(rest[..start].trim());
            stack.last_mut().expect("open element").text.push_str(&text);
            let end = rest[start..].find('>').expect("tag ends") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                let element = stack.pop().expect("open element");
                assert_eq!(element.name, name, "closing tag matches the open one");
                stack.last_mut().expect("parent").children.push(element);
                continue;
            }
            let (tag, closed) = tag.strip_suffix('/').map_or((tag, false), |tag| (tag, true));
            let (name, mut attributes_text) = tag.split_once(' ').unwrap_or((tag, ""));
            let mut attributes = Vec::new();
            while let Some((key, value)) = attributes_text.trim_start().split_once("=\"") {
                let (value, after) = value.split_once('"').expect("attribute value ends");
                attributes.push((key.to_owned(), unescape(value)));
                attributes_text = after;
            }
            let element = Element { name: name.to_owned(), attributes, ..Element::default() };
            if closed {
                stack.last_mut().expect("parent").children.push(element);
            } else {
                stack.push(element);
            }
        }
        assert!(rest.trim().is_empty(), "text after the root");
        assert_eq!(stack.len(), 1, "every element is closed");
        let mut root = stack.pop().expect("document");
        assert_eq!(root.children.len(), 1, "one root element");
        root.children.pop().expect("root")
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use serde_json::{json, Value};

    use super::fixtures::*;
    use super::*;

    #[test]
    fn overlapping_clips_go_on_tracks_of_their_own() {
        let mut timeline = timeline();
        timeline.overlays.push(clip("Badge", ClipKind::Image, LOGO, None, [0, 1000], [1000, 2000]));
        timeline.overlays.push(clip("Empty", ClipKind::Image, LOGO, None, [0, 0], [2500, 2500]));
        let document: Value = serde_json::from_str(&otio(&timeline)).expect("OTIO is JSON");
        let names: Vec<&str> = document["tracks"]["children"]
            .as_array()
            .expect("tracks")
            .iter()
            .map(|track| track["name"].as_str().expect("name"))
            .collect();
        assert_eq!(names, ["Video", "Overlays", "Overlays 2", "Audio"]);
        let xml = parse_xml(&fcp7_xml(&timeline));
        assert_eq!(xml.child("sequence").child("media").child("video").all("track").count(), 3);
        assert_eq!(edl(&timeline).matches("* OVERLAY NOT IN THIS EDL").count(), 2, "the empty clip is left out");
    }

    #[test]
    fn zip_holds_the_otio_xml_and_edl_files() {
        let timeline = timeline();
        let mut archive = ::zip::ZipArchive::new(Cursor::new(zip(&timeline, "cut/1").expect("zip"))).expect("a zip");
        let mut names: Vec<String> =
            archive.file_names().map(|name| name.expect("an entry name").into_owned()).collect();
        names.sort_unstable();
        assert_eq!(names, ["cut_1.edl", "cut_1.otio", "cut_1.xml"]);
        for (name, expected) in
            [("cut_1.otio", otio(&timeline)), ("cut_1.xml", fcp7_xml(&timeline)), ("cut_1.edl", edl(&timeline))]
        {
            let mut text = String::new();
            archive.by_name(name).expect(name).read_to_string(&mut text).expect("readable entry");
            assert_eq!(text, expected, "{name}");
        }
    }

    /// Reads the three files with opentimelineio and prints, as JSON, each track's kind and
    /// each item's range in its track and source range in frames, with the packages' versions.
    const OTIO_READER: &str = r#"
import importlib.metadata, json, sys, warnings
import opentimelineio as otio

otio_path, xml_path, edl_path, rate = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

def frames(time_range):
    if time_range is None:
        return None
    return [time_range.start_time.value_rescaled_to(rate), time_range.duration.value_rescaled_to(rate)]

def describe(timeline):
    tracks = []
    for track in timeline.tracks:
        items = []
        for item in track:
            entry = {"schema": item.schema_name(), "name": item.name,
                     "range_in_parent": frames(item.range_in_parent()), "source_range": frames(item.source_range)}
            if isinstance(item, otio.schema.Clip):
                reference = item.media_reference
                entry["target_url"] = getattr(reference, "target_url", None)
                entry["available_range"] = frames(reference.available_range)
                entry["effects"] = [{"schema": e.schema_name(), "name": e.name or e.effect_name,
                                     "time_scalar": getattr(e, "time_scalar", None)} for e in item.effects]
            items.append(entry)
        tracks.append({"kind": track.kind, "items": items})
    return {"name": timeline.name, "tracks": tracks}

def version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None

adapters = otio.adapters.available_adapter_names()
report = {"versions": {p: version(p) for p in ["opentimelineio", "otio-fcp-adapter", "otio-cmx3600-adapter"]}}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    report["otio"] = describe(otio.adapters.read_from_file(otio_path))
report["otio_warnings"] = [str(w.message) for w in caught]
report["fcp_xml"] = describe(otio.adapters.read_from_file(xml_path, adapter_name="fcp_xml")) if "fcp_xml" in adapters else None
report["cmx_3600"] = (describe(otio.adapters.read_from_file(edl_path, adapter_name="cmx_3600", rate=rate))
                      if "cmx_3600" in adapters else None)
print(json.dumps(report))
"#;

    /// schema, name, range in track and source range (frames) of each item of a track.
    fn items(track: &Value) -> Vec<(String, String, Value, Value)> {
        track["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|item| {
                let text = |key: &str| item[key].as_str().unwrap_or_default().to_owned();
                (text("schema"), text("name"), item["range_in_parent"].clone(), item["source_range"].clone())
            })
            .collect()
    }

    fn item(schema: &str, name: &str, in_track: [f64; 2], source: [f64; 2]) -> (String, String, Value, Value) {
        (schema.to_owned(), name.to_owned(), json!(in_track), json!(source))
    }

    fn kinds(read: &Value) -> Vec<&str> {
        read["tracks"].as_array().expect("tracks").iter().map(|track| track["kind"].as_str().expect("kind")).collect()
    }

    #[test]
    fn opentimelineio_reads_the_otio_xml_and_edl_back() {
        let Some(python) = std::env::var_os("OTIO_PYTHON") else {
            eprintln!("skipped: OTIO_PYTHON is not set (a python with opentimelineio, otio-fcp-adapter, otio-cmx3600-adapter)");
            return;
        };
        let timeline = timeline();
        let folder = tempfile::tempdir().expect("a temp dir");
        let paths = [("cut.otio", otio(&timeline)), ("cut.xml", fcp7_xml(&timeline)), ("cut.edl", edl(&timeline))].map(
            |(name, body)| {
                let path = folder.path().join(name);
                std::fs::write(&path, body).expect("write the file");
                path
            },
        );
        let output = std::process::Command::new(python)
            .arg("-c")
            .arg(OTIO_READER)
            .args(&paths)
            .arg("25")
            .output()
            .expect("python");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let report: Value = serde_json::from_slice(&output.stdout).expect("the reader prints JSON");
        eprintln!("verified with {}", report["versions"]);

        let read = &report["otio"];
        assert_eq!(report["otio_warnings"], json!([]));
        assert_eq!(read["name"], timeline.name);
        assert_eq!(kinds(read), ["Video", "Video", "Audio"]);
        let intro = item("Clip", INTRO, [0.0, 50.0], [25.0, 50.0]);
        let fast = item("Clip", "Fast", [50.0, 25.0], [125.0, 25.0]);
        let gap = item("Gap", "", [0.0, 10.0], [0.0, 10.0]);
        let logo = item("Clip", "Logo", [10.0, 25.0], [0.0, 25.0]);
        let music = item("Clip", "Music", [0.0, 75.0], [0.0, 75.0]);
        assert_eq!(items(&read["tracks"][0]), [intro.clone(), fast.clone()]);
        assert_eq!(items(&read["tracks"][1]), [gap.clone(), logo.clone()]);
        assert_eq!(items(&read["tracks"][2]), vec![music.clone()]);
        let read_fast = &read["tracks"][0]["items"][1];
        assert_eq!(
            read_fast["effects"],
            json!([{"schema": "LinearTimeWarp", "name": "LinearTimeWarp", "time_scalar": 2.0}])
        );
        assert_eq!(read_fast["target_url"], SOURCE);
        assert_eq!(read_fast["available_range"], json!([0.0, 250.0]));
        assert_eq!(read["tracks"][1]["items"][1]["available_range"], Value::Null);

        match &report["fcp_xml"] {
            Value::Null => eprintln!("skipped FCP7 XML: no fcp_xml adapter (pip install otio-fcp-adapter)"),
            read => {
                assert_eq!(read["name"], timeline.name);
                assert_eq!(kinds(read), ["Video", "Video", "Audio", "Audio"]);
                // The adapter ignores Time Remap, so it reads the 2× clip's in as its source
                // start: retimed frame 62 (source frame 125).
                let fast = item("Clip", "Fast", [50.0, 25.0], [62.0, 25.0]);
                assert_eq!(items(&read["tracks"][0]), [intro.clone(), fast.clone()]);
                assert_eq!(items(&read["tracks"][1]), [gap, logo]);
                assert_eq!(items(&read["tracks"][2]), [intro.clone(), fast]);
                assert_eq!(items(&read["tracks"][3]), vec![music.clone()]);
                let read_intro = &read["tracks"][0]["items"][0];
                assert_eq!(
                    (&read_intro["target_url"], &read_intro["available_range"]),
                    (&json!(SOURCE), &json!([0.0, 250.0]))
                );
                assert_eq!(read["tracks"][0]["items"][1]["effects"][0]["name"], "Time Remap");
            }
        }

        match &report["cmx_3600"] {
            Value::Null => eprintln!("skipped EDL: no cmx_3600 adapter (pip install otio-cmx3600-adapter)"),
            read => {
                assert_eq!(read["name"], timeline.name);
                // Channel B puts each main clip on V and A1; the music is on A2.
                assert_eq!(kinds(read), ["Video", "Audio", "Audio"]);
                assert_eq!(items(&read["tracks"][0]), [intro.clone(), fast.clone()]);
                assert_eq!(items(&read["tracks"][1]), [intro, fast]);
                assert_eq!(items(&read["tracks"][2]), [music]);
                assert_eq!(read["tracks"][0]["items"][1]["effects"][0]["time_scalar"], 2.0);
            }
        }
    }
}
