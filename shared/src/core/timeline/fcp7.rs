//! Final Cut Pro 7 XML (xmeml 4), which Premiere Pro and DaVinci Resolve import.

use super::{decimal, file_name, frame_base, frames, lanes, ClipFrames, ClipKind, Timeline, TimelineClip};

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

#[cfg(test)]
mod tests {

    use super::*;
    use crate::core::timeline::fixtures::*;

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
}
