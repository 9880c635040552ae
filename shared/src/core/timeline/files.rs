//! The timeline as files an editor imports: OpenTimelineIO JSON, Final Cut Pro 7 XML
//! (xmeml 4, which Premiere Pro and DaVinci Resolve import), a CMX3600 EDL, and the three
//! in one zip.
//!
//! OTIO counts time in exact fractional frames (ms × rate / 1000), so milliseconds survive.
//! The frame-based formats round each record edge to the nearest frame and take a clip's
//! source length from its rounded record length, so the two never disagree by a frame.
//! Clips that play for no time are left out of every file.

use std::io::{Cursor, Write as _};

use anyhow::Context as _;
use serde_json::{json, Value};

use super::{ClipKind, Timeline, TimelineClip};

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

/// The timeline as Final Cut Pro 7 XML (xmeml version 4), the XML Premiere Pro imports.
///
/// Video tracks: the main clips, then the overlays. Audio tracks: the main clips' sound
/// (each video clip's picture and sound are two linked clipitems, as FCP7 and Premiere
/// write them), then the audio. Frames are `round(ms × frame_rate / 1000)`.
///
/// A clip at another speed is written the way FCP7 and Premiere write one: its `<in>`,
/// `<out>` and `<duration>` count frames of the retimed clip (source frames / speed), and a
/// Time Remap filter carries the speed and the graph from those frames to source frames.
/// (OTIO's fcp_xml adapter ignores the filter and so reads such a clip's source start as
/// `<in>`, in retimed frames.) `<file>` holds the source's own length in frames.
pub fn fcp7_xml(timeline: &Timeline) -> String {
    let fps = frame_base(timeline);
    let main = lanes(&timeline.video).into_iter().map(|lane| main_lane(&lane)).collect::<Vec<_>>();
    let overlays = lanes(&timeline.overlays);
    let audio = lanes(&timeline.audio);
    let mut files = FileTable::default();
    let mut xml = XmlWriter::default();
    xml.open("xmeml", &[("version", "4")]);
    xml.open("sequence", &[("id", "sequence-1")]);
    xml.leaf("name", &timeline.name);
    xml.leaf("duration", frames(timeline.duration_ms, fps));
    xml_rate(&mut xml, fps);
    xml.open("media", &[]);

    xml.open("video", &[]);
    xml.open("format", &[]);
    xml.open("samplecharacteristics", &[]);
    xml_rate(&mut xml, fps);
    xml.leaf("width", timeline.width);
    xml.leaf("height", timeline.height);
    xml.leaf("anamorphic", "FALSE");
    xml.leaf("pixelaspectratio", "square");
    xml.leaf("fielddominance", "none");
    xml.close();
    xml.close();
    let mut video_track = 0;
    for (index, lane) in main.iter().enumerate() {
        video_track += 1;
        xml.open("track", &[]);
        for placed in lane {
            if let Some(picture) = placed.picture {
                let link = placed.sound.map(|sound| Link { track: index + 1, picture, sound });
                let item = Clipitem { clip: placed.clip, media: Media::Video, track: video_track, index: picture };
                write_clipitem(&mut xml, &mut files, &item, link.as_ref(), fps);
            }
        }
        xml.close();
    }
    for lane in &overlays {
        video_track += 1;
        xml.open("track", &[]);
        for (index, clip) in lane.iter().enumerate() {
            let item = Clipitem { clip, media: Media::Video, track: video_track, index: index + 1 };
            write_clipitem(&mut xml, &mut files, &item, None, fps);
        }
        xml.close();
    }
    xml.close();

    xml.open("audio", &[]);
    let mut audio_track = 0;
    for (index, lane) in main.iter().enumerate() {
        audio_track += 1;
        xml.open("track", &[]);
        for placed in lane {
            if let Some(sound) = placed.sound {
                let link = placed.picture.map(|picture| Link { track: index + 1, picture, sound });
                let item = Clipitem { clip: placed.clip, media: Media::Audio, track: audio_track, index: sound };
                write_clipitem(&mut xml, &mut files, &item, link.as_ref(), fps);
            }
        }
        xml.close();
    }
    for lane in &audio {
        audio_track += 1;
        xml.open("track", &[]);
        for (index, clip) in lane.iter().enumerate() {
            let item = Clipitem { clip, media: Media::Audio, track: audio_track, index: index + 1 };
            write_clipitem(&mut xml, &mut files, &item, None, fps);
        }
        xml.close();
    }
    xml.close();
    xml.finish()
}

/// A main-track clip and its 1-based places among the clipitems of its video track
/// (picture) and of its audio track (sound).
struct Placed<'a> {
    clip: &'a TimelineClip,
    picture: Option<usize>,
    sound: Option<usize>,
}

/// A video clip has picture and sound, a still only picture, a sound only sound.
fn main_lane<'a>(lane: &[&'a TimelineClip]) -> Vec<Placed<'a>> {
    let (mut pictures, mut sounds) = (0, 0);
    lane.iter()
        .map(|clip| {
            let picture = (clip.kind != ClipKind::Audio).then(|| {
                pictures += 1;
                pictures
            });
            let sound = (clip.kind != ClipKind::Image).then(|| {
                sounds += 1;
                sounds
            });
            Placed { clip, picture, sound }
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Media {
    Video,
    Audio,
}

impl Media {
    fn word(self) -> &'static str {
        match self {
            Media::Video => "video",
            Media::Audio => "audio",
        }
    }

    fn letter(self) -> char {
        match self {
            Media::Video => 'V',
            Media::Audio => 'A',
        }
    }
}

/// One clipitem: which clip, as picture or sound, where (1-based track and place).
struct Clipitem<'a> {
    clip: &'a TimelineClip,
    media: Media,
    track: usize,
    index: usize,
}

/// The picture and sound clipitems of one main clip, which move together in an editor.
struct Link {
    track: usize,
    picture: usize,
    sound: usize,
}

fn clipitem_id(media: Media, track: usize, index: usize) -> String {
    format!("clipitem-{}{track}-{index}", media.letter())
}

fn write_clipitem(xml: &mut XmlWriter, files: &mut FileTable, item: &Clipitem, link: Option<&Link>, fps: u64) {
    let clip = item.clip;
    let edges = ClipFrames::of(clip, fps);
    let length = edges.record_out - edges.record_in;
    // Retimed clips count in/out/duration in retimed frames (see `fcp7_xml`); the graph's
    // first point carries the fraction of a retimed frame the source in falls after.
    let (clip_in, clip_duration, phase) = match edges.speed {
        None => (edges.source_in, edges.media.map_or(edges.source_in + length, |media| media), 0.0),
        Some(speed) => {
            let clip_in = (edges.source_in_exact / speed).floor() as u64;
            let phase = edges.source_in_exact - clip_in as f64 * speed;
            let whole = edges.media.map_or(0, |media| ((media as f64 - phase) / speed).ceil() as u64);
            (clip_in, whole, phase)
        }
    };
    let clip_out = clip_in + length;
    let clip_duration = clip_duration.max(clip_out);

    xml.open("clipitem", &[("id", &clipitem_id(item.media, item.track, item.index))]);
    xml.leaf("name", &clip.name);
    xml.leaf("enabled", "TRUE");
    xml.leaf("duration", clip_duration);
    xml_rate(xml, fps);
    xml.leaf("start", edges.record_in);
    xml.leaf("end", edges.record_out);
    xml.leaf("in", clip_in);
    xml.leaf("out", clip_out);
    if clip.kind == ClipKind::Image {
        xml.leaf("stillframe", "TRUE");
    }
    files.write(xml, clip, fps);
    xml.open("sourcetrack", &[]);
    xml.leaf("mediatype", item.media.word());
    xml.leaf("trackindex", 1);
    xml.close();
    if let Some(speed) = edges.speed {
        // Where the clip's start or end coincides with its in or out, one point is both
        // and carries the in/out flag, as FCP7 writes it.
        let mut graph = Vec::with_capacity(4);
        if clip_in > 0 {
            graph.push((0, phase, "speedkfstart"));
        }
        graph.push((clip_in, edges.source_in_exact, "speedkfin"));
        graph.push((clip_out, edges.source_in_exact + length as f64 * speed, "speedkfout"));
        if clip_duration > clip_out {
            graph.push((clip_duration, phase + clip_duration as f64 * speed, "speedkfend"));
        }
        write_time_remap(xml, item.media, speed, &graph);
    }
    if let Some(link) = link {
        for media in [Media::Video, Media::Audio] {
            let index = if media == Media::Video { link.picture } else { link.sound };
            xml.open("link", &[]);
            xml.leaf("linkclipref", clipitem_id(media, link.track, index));
            xml.leaf("mediatype", media.word());
            xml.leaf("trackindex", link.track);
            xml.leaf("clipindex", index);
            xml.close();
        }
    }
    xml.close();
}

/// FCP7's Time Remap filter at one speed, as Premiere writes it: editors apply the graph
/// (retimed frame → source frame); the speed parameter is what they show.
fn write_time_remap(xml: &mut XmlWriter, media: Media, speed: f64, graph: &[(u64, f64, &str)]) {
    xml.open("filter", &[]);
    xml.open("effect", &[]);
    xml.leaf("name", "Time Remap");
    xml.leaf("effectid", "timeremap");
    xml.leaf("effectcategory", "motion");
    xml.leaf("effecttype", "motion");
    xml.leaf("mediatype", media.word());
    for (id, value) in [
        ("variablespeed", "0".to_owned()),
        ("speed", decimal(speed * 100.0)),
        ("reverse", "FALSE".to_owned()),
        ("frameblending", "FALSE".to_owned()),
    ] {
        xml.open("parameter", &[]);
        xml.leaf("parameterid", id);
        xml.leaf("name", id);
        xml.leaf("value", value);
        xml.close();
    }
    xml.open("parameter", &[]);
    xml.leaf("parameterid", "graphdict");
    xml.leaf("name", "graphdict");
    for &(when, value, flag) in graph {
        xml.open("keyframe", &[]);
        xml.leaf("when", when);
        xml.leaf("value", decimal(value));
        xml.leaf(flag, "TRUE");
        xml.close();
    }
    xml.close();
    xml.close();
    xml.close();
}

fn xml_rate(xml: &mut XmlWriter, fps: u64) {
    xml.open("rate", &[]);
    xml.leaf("timebase", fps);
    xml.leaf("ntsc", "FALSE");
    xml.close();
}

/// Source files by URL: the first clipitem of a file defines it, later ones refer to its id.
#[derive(Default)]
struct FileTable {
    urls: Vec<String>,
}

impl FileTable {
    fn write(&mut self, xml: &mut XmlWriter, clip: &TimelineClip, fps: u64) {
        if let Some(index) = self.urls.iter().position(|url| *url == clip.target_url) {
            xml.empty("file", &[("id", &format!("file-{}", index + 1))]);
            return;
        }
        self.urls.push(clip.target_url.clone());
        xml.open("file", &[("id", &format!("file-{}", self.urls.len()))]);
        xml.leaf("name", file_name(clip));
        xml.leaf("pathurl", &clip.target_url);
        xml_rate(xml, fps);
        if let Some(ms) = clip.source_duration_ms {
            xml.leaf("duration", frames(ms, fps));
        }
        xml.open("media", &[]);
        if clip.kind != ClipKind::Audio {
            xml.empty("video", &[]);
        }
        if clip.kind != ClipKind::Image {
            xml.empty("audio", &[]);
        }
        xml.close();
        xml.close();
    }
}

/// Indented XML whose tags always balance; every text and attribute value is escaped.
#[derive(Default)]
struct XmlWriter {
    out: String,
    open: Vec<&'static str>,
}

impl XmlWriter {
    fn indent(&mut self) {
        self.out.extend(std::iter::repeat_n("  ", self.open.len()));
    }

    fn start_tag(&mut self, tag: &str, attributes: &[(&str, &str)]) {
        self.indent();
        self.out.push('<');
        self.out.push_str(tag);
        for (name, value) in attributes {
            self.out.push_str(&format!(" {name}=\"{}\"", escape_xml(value)));
        }
    }

    fn open(&mut self, tag: &'static str, attributes: &[(&str, &str)]) {
        self.start_tag(tag, attributes);
        self.out.push_str(">\n");
        self.open.push(tag);
    }

    fn empty(&mut self, tag: &str, attributes: &[(&str, &str)]) {
        self.start_tag(tag, attributes);
        self.out.push_str("/>\n");
    }

    fn leaf(&mut self, tag: &str, text: impl std::fmt::Display) {
        self.indent();
        self.out.push_str(&format!("<{tag}>{}</{tag}>\n", escape_xml(&text.to_string())));
    }

    fn close(&mut self) {
        if let Some(tag) = self.open.pop() {
            self.indent();
            self.out.push_str(&format!("</{tag}>\n"));
        }
    }

    fn finish(mut self) -> String {
        while !self.open.is_empty() {
            self.close();
        }
        format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE xmeml>\n{}", self.out)
    }
}

/// Text safe inside an element or a quoted attribute; characters XML 1.0 cannot hold
/// (control characters other than tab and line ends) are dropped.
fn escape_xml(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            '\t' | '\n' | '\r' => escaped.push(character),
            _ if character.is_control() => {}
            _ => escaped.push(character),
        }
    }
    escaped
}

/// The timeline as a CMX3600 EDL at `frame_rate`, non-drop frame, record time from 0.
///
/// CMX3600 has one video track: the main clips are its events, a video clip on channel
/// `B` (picture and its sound on A1), a still on `V`, a sound on `A`; the audio clips are
/// events on `A2` (and `A3`, … where they overlap). Overlays cannot be events: each one is
/// listed in a comment after the last event (readers attach such comments to that event).
/// A clip at another speed has an `M2` line with the speed in frames per second, and its
/// source out is where the source really stops, as Avid writes it.
pub fn edl(timeline: &Timeline) -> String {
    let fps = frame_base(timeline);
    let mut out = format!("TITLE: {}\nFCM: NON-DROP FRAME\n\n", edl_text(&timeline.name));
    let main = lanes(&timeline.video);
    let mut events = 0;
    for clip in main.first().into_iter().flatten() {
        let channel = match clip.kind {
            ClipKind::Video => "B",
            ClipKind::Image => "V",
            ClipKind::Audio => "A",
        };
        events += 1;
        write_edl_event(&mut out, events, channel, clip, fps);
    }
    for (index, lane) in lanes(&timeline.audio).iter().enumerate() {
        let channel = format!("A{}", index + 2);
        for clip in lane {
            events += 1;
            write_edl_event(&mut out, events, &channel, clip, fps);
        }
    }
    // Before the first event a comment would be a syntax error to most readers.
    if events > 0 {
        let overlays = lanes(&timeline.overlays);
        for clip in main.iter().skip(1).chain(overlays.iter()).flatten() {
            let edges = ClipFrames::of(clip, fps);
            out.push_str(&format!(
                "* OVERLAY NOT IN THIS EDL: {} {} {} {}\n",
                edl_text(&clip.name),
                timecode(edges.record_in, fps),
                timecode(edges.record_out, fps),
                edl_text(&clip.target_url),
            ));
        }
    }
    out
}

fn write_edl_event(out: &mut String, number: usize, channel: &str, clip: &TimelineClip, fps: u64) {
    const REEL: &str = "AX";
    let edges = ClipFrames::of(clip, fps);
    let source_out = match edges.speed {
        None => edges.source_in + (edges.record_out - edges.record_in),
        Some(_) => edges.source_out.max(edges.source_in),
    };
    out.push_str(&format!(
        "{number:03}  {REEL:<8} {channel:<5} C        {} {} {} {}\n",
        timecode(edges.source_in, fps),
        timecode(source_out, fps),
        timecode(edges.record_in, fps),
        timecode(edges.record_out, fps),
    ));
    if let Some(speed) = edges.speed {
        let source_fps = speed * fps as f64;
        out.push_str(&format!(
            "M2   {REEL:<8}       {source_fps:05.1}                {}\n",
            timecode(edges.source_in, fps)
        ));
    }
    out.push_str(&format!("* FROM CLIP NAME: {}\n", edl_text(&clip.name)));
    out.push_str(&format!("* SOURCE FILE: {}\n", edl_text(&clip.target_url)));
}

/// One line of EDL text: line breaks and other control characters become spaces.
fn edl_text(text: &str) -> String {
    text.chars().map(|character| if character.is_control() { ' ' } else { character }).collect()
}

fn timecode(frames: u64, fps: u64) -> String {
    let seconds = frames / fps;
    format!("{:02}:{:02}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60, frames % fps)
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
fn lanes(clips: &[TimelineClip]) -> Vec<Vec<&TimelineClip>> {
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

fn record_ms(clip: &TimelineClip) -> u64 {
    clip.record_out_ms.saturating_sub(clip.record_in_ms)
}

/// Source length / record length, when the two differ.
fn speed(clip: &TimelineClip) -> Option<f64> {
    let source_ms = clip.source_out_ms.saturating_sub(clip.source_in_ms);
    let record_ms = record_ms(clip);
    (source_ms != record_ms && record_ms > 0).then(|| source_ms as f64 / record_ms as f64)
}

/// The frame rate the frame-based formats count in (at least 1, so timecodes divide).
fn frame_base(timeline: &Timeline) -> u64 {
    u64::from(timeline.frame_rate.max(1))
}

/// `ms` in whole frames, to the nearest (halves up).
fn frames(ms: u64, fps: u64) -> u64 {
    (ms.saturating_mul(fps) + 500) / 1000
}

/// A clip's edges in frames at the timeline's rate.
struct ClipFrames {
    record_in: u64,
    record_out: u64,
    source_in: u64,
    source_out: u64,
    /// Where the source starts, in fractional frames.
    source_in_exact: f64,
    speed: Option<f64>,
    /// The whole source's length, when known.
    media: Option<u64>,
}

impl ClipFrames {
    fn of(clip: &TimelineClip, fps: u64) -> Self {
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
fn file_name(clip: &TimelineClip) -> &str {
    let path = clip.target_url.split(['?', '#']).next().unwrap_or_default();
    match path.rsplit('/').next() {
        Some(name) if !name.is_empty() => name,
        _ => &clip.name,
    }
}

/// A number with at most four decimals and no trailing zeros (`200`, `33.3333`).
fn decimal(value: f64) -> String {
    let text = format!("{value:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    const SOURCE: &str = "https://media.example/in/source.mp4?sig=a&b=c";
    const LOGO: &str = "https://media.example/in/logo.png";
    const MUSIC: &str = "https://media.example/in/music.mp3";
    const INTRO: &str = "Intro <A & \"B\">";

    fn clip(
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
    fn timeline() -> Timeline {
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

    fn range(value: &Value) -> [f64; 2] {
        let time = |key: &str| value[key]["value"].as_f64().unwrap_or(f64::NAN);
        [time("start_time"), time("duration")]
    }

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

    /// An XML element as the test reads it back: tags must balance, entities must be known.
    #[derive(Debug, Default)]
    struct Element {
        name: String,
        attributes: Vec<(String, String)>,
        children: Vec<Element>,
        text: String,
    }

    impl Element {
        fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
            self.children.iter().filter(move |child| child.name == name)
        }

        fn child(&self, name: &str) -> &Element {
            self.children
                .iter()
                .find(|child| child.name == name)
                .unwrap_or_else(|| panic!("<{}> has no <{name}>", self.name))
        }

        fn text_of(&self, name: &str) -> &str {
            &self.child(name).text
        }

        fn attribute(&self, name: &str) -> &str {
            self.attributes.iter().find(|(key, _)| key == name).map_or("", |(_, value)| value)
        }
    }

    fn unescape(text: &str) -> String {
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

    fn parse_xml(document: &str) -> Element {
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

    /// name, duration, start, end, in, out of each clipitem of each track.
    fn clipitems(tracks: &Element) -> Vec<Vec<(String, [u64; 5])>> {
        let number = |item: &Element, name: &str| item.text_of(name).parse::<u64>().expect("a frame number");
        tracks
            .all("track")
            .map(|track| {
                track
                    .all("clipitem")
                    .map(|item| {
                        let timing = ["duration", "start", "end", "in", "out"].map(|name| number(item, name));
                        (item.text_of("name").to_owned(), timing)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn fcp7_xml_is_well_formed_and_places_clips_in_frames() {
        let timeline = timeline();
        let text = fcp7_xml(&timeline);
        assert!(text.contains("sig=a&amp;b=c") && !text.contains("sig=a&b"), "the URL is escaped");
        let root = parse_xml(&text);
        assert_eq!((root.name.as_str(), root.attribute("version")), ("xmeml", "4"));
        let sequence = root.child("sequence");
        assert_eq!(sequence.text_of("name"), timeline.name);
        assert_eq!(sequence.text_of("duration"), "75");
        assert_eq!(sequence.child("rate").text_of("timebase"), "25");
        assert_eq!(sequence.child("rate").text_of("ntsc"), "FALSE");
        let media = sequence.child("media");
        let format = media.child("video").child("format").child("samplecharacteristics");
        assert_eq!((format.text_of("width"), format.text_of("height")), ("1920", "1080"));

        let named = |name: &str, timing: [u64; 5]| (name.to_owned(), timing);
        // duration, start, end, in, out. At 2× the in/out count retimed frames: source
        // frame 125 is retimed frame 62 (and a half, carried by the graph).
        let intro = named(INTRO, [250, 0, 50, 25, 75]);
        let fast = named("Fast", [125, 50, 75, 62, 87]);
        assert_eq!(
            clipitems(media.child("video")),
            [vec![intro.clone(), fast.clone()], vec![named("Logo", [25, 10, 35, 0, 25])]]
        );
        assert_eq!(clipitems(media.child("audio")), [vec![intro, fast], vec![named("Music", [4500, 0, 75, 0, 75])]]);

        let video: Vec<&Element> = media.child("video").all("track").collect();
        let first = video[0].child("clipitem");
        let file = first.child("file");
        assert_eq!(
            (file.attribute("id"), file.text_of("name"), file.text_of("pathurl")),
            ("file-1", "source.mp4", SOURCE)
        );
        assert_eq!(file.text_of("duration"), "250");
        let links: Vec<&str> = first.all("link").map(|link| link.text_of("linkclipref")).collect();
        assert_eq!(links, ["clipitem-V1-1", "clipitem-A1-1"]);
        let retimed = video[0].all("clipitem").nth(1).expect("the 2× clip");
        let reused = retimed.child("file");
        assert_eq!((reused.attribute("id"), reused.children.len()), ("file-1", 0), "a file is defined once");
        let effect = retimed.child("filter").child("effect");
        assert_eq!((effect.text_of("name"), effect.text_of("effectid")), ("Time Remap", "timeremap"));
        let parameter = |id: &str| effect.all("parameter").find(|p| p.text_of("parameterid") == id).expect(id);
        assert_eq!(parameter("speed").text_of("value"), "200");
        let graph: Vec<(&str, &str)> =
            parameter("graphdict").all("keyframe").map(|key| (key.text_of("when"), key.text_of("value"))).collect();
        assert_eq!(graph, [("0", "1"), ("62", "125"), ("87", "175"), ("125", "251")]);
        let logo = video[1].child("clipitem");
        assert_eq!(logo.text_of("stillframe"), "TRUE");
        assert_eq!(logo.child("file").all("duration").count(), 0, "an unknown length is left out");
    }

    #[test]
    fn edl_lists_main_clips_and_music_with_timecodes_and_motion() {
        let expected = "\
TITLE: Cut <1> & \"final\"
FCM: NON-DROP FRAME

001  AX       B     C        00:00:01:00 00:00:03:00 00:00:00:00 00:00:02:00
* FROM CLIP NAME: Intro <A & \"B\">
* SOURCE FILE: https://media.example/in/source.mp4?sig=a&b=c
002  AX       B     C        00:00:05:00 00:00:07:00 00:00:02:00 00:00:03:00
M2   AX             050.0                00:00:05:00
* FROM CLIP NAME: Fast
* SOURCE FILE: https://media.example/in/source.mp4?sig=a&b=c
003  AX       A2    C        00:00:00:00 00:00:03:00 00:00:00:00 00:00:03:00
* FROM CLIP NAME: Music
* SOURCE FILE: https://media.example/in/music.mp3
* OVERLAY NOT IN THIS EDL: Logo 00:00:00:10 00:00:01:10 https://media.example/in/logo.png
";
        assert_eq!(edl(&timeline()), expected);
        assert_eq!(timecode(90_061 * 25 + 7, 25), "25:01:01:07");
    }

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
