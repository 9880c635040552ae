//! Renders made in segments (issue 35): each segment's picture reads only its window of
//! the input, the sound is made once, and a join copies them into the output. The
//! joined output is held to the same render made in one pass: the same frames at the
//! same times (ffprobe, packet by packet), SSIM frame by frame, and the same sound.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use shared::adapters::ffmpeg::Ffmpeg;
use shared::domain::media::ports::MediaToolkit;
use shared::domain::media::{segments, Edit, JoinJob, RenderInput, RenderJob, RenderPart};
use shared::domain::nodes::background_music::MusicFilter;
use shared::domain::nodes::captions::{CaptionPosition, CaptionsFilter};
use shared::domain::nodes::clip::ClipFilter;
use shared::domain::nodes::overlay::{Corner, OverlayFilter};
use shared::domain::nodes::reframe::ReframeFilter;
use shared::domain::nodes::speed::SpeedFilter;

use super::helpers::ffmpeg_in;

/// Segments of 3 s: the outputs below (6.7 to 10 s) are cut in 3 or 4 parts, so
/// seams fall inside captions, after a speed change and under music.
const SEGMENT_MS: u64 = 3_000;
const BUDGET: Duration = Duration::from_secs(120);

/// 12 s of 320×240 at `rate` frames a second (30, or 30000/1001; keyframes every 60
/// frames, so that segments seek into the middle of a group of pictures) over a sine
/// sweep.
pub(crate) fn source(folder: &Path, rate: (u32, u32)) -> RenderInput {
    let picture = format!("testsrc2=size=320x240:rate={}/{}", rate.0, rate.1);
    ffmpeg_in(
        folder,
        &[
            "-f",
            "lavfi",
            "-i",
            &picture,
            "-f",
            "lavfi",
            "-i",
            "aevalsrc=0.5*sin(2*PI*(200+300*t)*t):s=48000",
            "-t",
            "12",
            "-c:v",
            "libx264",
            "-g",
            "60",
            "-pix_fmt",
            "yuv420p",
            "-c:a",
            "aac",
            "-shortest",
            "source.mp4",
        ],
    );
    RenderInput {
        location: format!("file:{}", folder.join("source.mp4").display()),
        duration_ms: 12_000,
        width: 320,
        height: 240,
        has_audio: true,
    }
}

fn ffprobe(args: &[&str], file: &Path) -> String {
    let output = std::process::Command::new("ffprobe")
        .args(["-v", "error"])
        .args(args)
        .arg(file)
        .output()
        .expect("ffprobe is installed (./scripts/test.sh installs it)");
    assert!(output.status.success(), "ffprobe {args:?} {}", file.display());
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The video packets' presentation times, in order.
fn picture_times(file: &Path) -> Vec<f64> {
    let text = ffprobe(&["-select_streams", "v", "-show_entries", "packet=pts_time", "-of", "csv=p=0"], file);
    let mut times: Vec<f64> = text.lines().map(|line| line.trim().parse().expect("a time")).collect();
    times.sort_by(f64::total_cmp);
    times
}

/// The video packets' decoding times, in file order.
fn decoding_times(file: &Path) -> Vec<f64> {
    let text = ffprobe(&["-select_streams", "v", "-show_entries", "packet=dts_time", "-of", "csv=p=0"], file);
    text.lines().map(|line| line.trim().parse().expect("a time")).collect()
}

/// The frames decoded from the video stream, and its duration in seconds.
fn frames_and_length(file: &Path) -> (u64, f64) {
    let text = ffprobe(
        &["-count_frames", "-select_streams", "v", "-show_entries", "stream=nb_read_frames,duration", "-of", "csv=p=0"],
        file,
    );
    let (duration, frames) = text.trim().split_once(',').expect("duration,frames");
    (frames.parse().expect("frames"), duration.parse().expect("duration"))
}

/// The decoded sound as 16-bit samples.
fn samples(file: &Path) -> Vec<i16> {
    let output = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(file)
        .args(["-map", "0:a", "-f", "s16le", "-"])
        .output()
        .expect("ffmpeg is installed");
    assert!(output.status.success());
    output.stdout.chunks_exact(2).map(|pair| i16::from_le_bytes([pair[0], pair[1]])).collect()
}

/// Stereo samples of two AAC frames: how much the end of a sound may move with how ffmpeg
/// stops its encoder at the output's length (`-t`) when a picture is encoded beside it.
const SOUND_END_SLACK: usize = 2 * 1024 * 2;

/// The joined output's sound is the whole render's: made once, by the same filters, it
/// has the same length (to its last AAC frames) and the same samples but for rounding: a
/// mix sums frames cut differently when no picture is decoded beside it (ducking's
/// compressor follows them), so it is compared by the energy of the difference.
fn assert_same_sound(whole: &Path, joined: &Path) {
    let (a, b) = (samples(whole), samples(joined));
    assert!(a.len().abs_diff(b.len()) <= SOUND_END_SLACK, "{} samples against {}", b.len(), a.len());
    let energy = |samples: &mut dyn Iterator<Item = f64>| samples.map(|x| x * x).sum::<f64>();
    let signal = energy(&mut a.iter().map(|x| f64::from(*x)));
    let noise = energy(&mut a.iter().zip(&b).map(|(x, y)| f64::from(*x) - f64::from(*y)));
    let ratio = (noise / signal).sqrt();
    assert!(ratio < 0.02, "the sound differs from the whole render's by {:.2}% (RMS)", ratio * 100.0);
}

/// The SSIM (luma) of each frame of `b` against the same frame of `a`.
fn ssim(a: &Path, b: &Path, folder: &Path) -> Vec<f64> {
    let stats = folder.join("ssim.log");
    let filter = format!("[0:v][1:v]ssim=stats_file={}", stats.display());
    let status = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(a)
        .arg("-i")
        .arg(b)
        .args(["-lavfi", &filter, "-f", "null", "-"])
        .status()
        .expect("ffmpeg is installed");
    assert!(status.success());
    let log = std::fs::read_to_string(&stats).expect("the SSIM log");
    log.lines()
        .map(|line| {
            let y = line.split_whitespace().find_map(|part| part.strip_prefix("Y:")).expect("Y:");
            y.parse().expect("a number")
        })
        .collect()
}

/// Renders `edits` over `input` whole, then in segments joined; answers both files.
async fn whole_and_joined(
    folder: &Path,
    input: &RenderInput,
    rate: (u32, u32),
    edits: &[Edit],
    sound: bool,
) -> (PathBuf, PathBuf) {
    let toolkit = Ffmpeg::new("ffmpeg");
    let (_, never) = tokio::sync::watch::channel(false);
    let job = |output: PathBuf, part| RenderJob {
        inputs: vec![input.clone()],
        edits: edits.to_vec(),
        output,
        budget: BUDGET,
        part,
    };
    let whole = folder.join("whole.mp4");
    toolkit.render(&job(whole.clone(), RenderPart::Whole), never.clone()).await.expect("the whole render");
    let length = edits.iter().fold(input.duration_ms, |length, edit| edit.duration_after(length));
    let windows = segments(length, SEGMENT_MS, rate);
    assert!(windows.len() >= 3, "{length} ms in {} segments", windows.len());
    let mut pictures = Vec::new();
    for (index, (start_ms, end_ms)) in windows.into_iter().enumerate() {
        let part = folder.join(format!("part-{index}.mp4"));
        let picture = job(part.clone(), RenderPart::Picture { start_ms, end_ms });
        toolkit.render(&picture, never.clone()).await.expect("a segment's picture");
        pictures.push((format!("file:{}", part.display()), end_ms - start_ms));
    }
    let sound = match sound {
        true => {
            let path = folder.join("sound.m4a");
            toolkit.render(&job(path.clone(), RenderPart::Sound), never.clone()).await.expect("the sound");
            Some(format!("file:{}", path.display()))
        }
        false => None,
    };
    let joined = folder.join("joined.mp4");
    // The index in room kept for it at the start, as the engine's join writes it.
    let index_bytes = shared::domain::media::index_room(length, rate, sound.is_some());
    let join = JoinJob { pictures, sound, output: joined.clone(), budget: BUDGET, index_bytes };
    toolkit.join(&join, never).await.expect("the join");
    (whole, joined)
}

/// The joined output is the whole one: as many frames, at the same times, one frame
/// after another with no gap, overlap or repeat at a seam; SSIM ≥ 0.98 on average and
/// ≥ 0.95 on every frame; the same sound, sample for sample.
pub(crate) fn assert_seamless(folder: &Path, whole: &Path, joined: &Path, frame_s: f64) {
    let ((frames, length), (joined_frames, joined_length)) = (frames_and_length(whole), frames_and_length(joined));
    assert_eq!(joined_frames, frames, "frames");
    assert!((joined_length - length).abs() < 0.002, "length {joined_length} s against {length} s");
    let (times, joined_times) = (picture_times(whole), picture_times(joined));
    assert_eq!(joined_times.len(), times.len());
    for (at, (a, b)) in times.iter().zip(&joined_times).enumerate() {
        assert!((a - b).abs() < 0.001, "frame {at}: {b} s in the joined output, {a} s in the whole one");
    }
    for pair in joined_times.windows(2) {
        let step = pair[1] - pair[0];
        assert!((step - frame_s).abs() < 0.001, "a step of {step} s at {} s", pair[0]);
    }
    // Packets are decoded a frame apart, none moved by the muxer to keep order at a seam.
    for pair in decoding_times(joined).windows(2) {
        let step = pair[1] - pair[0];
        assert!(step > frame_s / 2.0, "packets decoded {step} s apart at {} s", pair[0]);
    }
    let scores = ssim(whole, joined, folder);
    assert_eq!(scores.len() as u64, frames);
    let mean = scores.iter().sum::<f64>() / scores.len() as f64;
    let worst = scores.iter().copied().fold(1.0, f64::min);
    assert!(mean >= 0.98 && worst >= 0.95, "SSIM mean {mean}, worst {worst}");
    assert_same_sound(whole, joined);
}

/// Clip → Reframe → Captions with cues across the seams, at `rate`.
async fn clip_reframe_and_captions(rate: (u32, u32)) {
    let folder = tempfile::tempdir().unwrap();
    let input = source(folder.path(), rate);
    // Cues that cross the seams at 3 s and 6 s of the output.
    let srt = "1\n00:00:02,500 --> 00:00:03,500\nACROSS THE FIRST SEAM\n\n\
               2\n00:00:05,000 --> 00:00:07,000\nACROSS THE SECOND\n";
    let subtitles = folder.path().join("captions.srt");
    std::fs::write(&subtitles, srt).unwrap();
    let edits: Vec<Edit> = vec![
        Arc::new(ClipFilter { start_ms: 1_000, end_ms: Some(11_000) }),
        Arc::new(ReframeFilter { aspect: (9, 16), pad_color: None }),
        Arc::new(CaptionsFilter {
            subtitles,
            font_size: 18,
            color: "#FFFF00".into(),
            position: CaptionPosition::Bottom,
        }),
    ];
    let (whole, joined) = whole_and_joined(folder.path(), &input, rate, &edits, true).await;
    assert_seamless(folder.path(), &whole, &joined, f64::from(rate.1) / f64::from(rate.0));
}

#[tokio::test]
async fn clip_reframe_and_captions_across_seams_join_into_the_one_pass_render() {
    clip_reframe_and_captions((30, 1)).await;
}

/// At 29.97 frames a second no frame falls on a whole second: the seams fall on frames
/// at whole milliseconds (every 1,001 ms), and each part's first frame keeps its time.
#[tokio::test]
async fn at_ntsc_rates_parts_start_on_frames_and_keep_their_times() {
    clip_reframe_and_captions((30_000, 1_001)).await;
}

#[tokio::test]
async fn speed_and_overlay_segments_are_windows_of_the_output() {
    let folder = tempfile::tempdir().unwrap();
    let input = source(folder.path(), (30, 1));
    ffmpeg_in(folder.path(), &["-f", "lavfi", "-i", "color=c=red:s=64x64", "-frames:v", "1", "logo.png"]);
    let edits: Vec<Edit> = vec![
        Arc::new(ClipFilter { start_ms: 500, end_ms: None }),
        Arc::new(SpeedFilter { factor: 1.5 }),
        Arc::new(OverlayFilter {
            location: format!("file:{}", folder.path().join("logo.png").display()),
            position: Corner::TopRight,
            opacity: 0.8,
            scale: 0.2,
        }),
    ];
    let (whole, joined) = whole_and_joined(folder.path(), &input, (30, 1), &edits, true).await;
    assert_seamless(folder.path(), &whole, &joined, 1.0 / 30.0);
}

#[tokio::test]
async fn music_under_a_segmented_picture_is_mixed_once() {
    let folder = tempfile::tempdir().unwrap();
    let input = source(folder.path(), (30, 1));
    ffmpeg_in(folder.path(), &["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "4", "music.m4a"]);
    let edits: Vec<Edit> = vec![Arc::new(MusicFilter {
        location: format!("file:{}", folder.path().join("music.m4a").display()),
        volume: 0.3,
        ducking: true,
    })];
    let (whole, joined) = whole_and_joined(folder.path(), &input, (30, 1), &edits, true).await;
    assert_seamless(folder.path(), &whole, &joined, 1.0 / 30.0);
}
