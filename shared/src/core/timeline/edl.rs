//! A CMX3600 EDL.

use super::{frame_base, lanes, ClipFrames, ClipKind, Timeline, TimelineClip};

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

#[cfg(test)]
mod tests {

    use super::*;
    use crate::core::timeline::fixtures::*;

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
}
