//! The media toolkit on ffmpeg: a render job becomes one ffmpeg command (an argument
//! vector, never a shell) whose filter graph does every edit of the chain in one pass,
//! encoding once to MP4 (H.264 yuv420p, AAC, `+faststart`). A join of parts copies
//! streams, its index written in room kept for it at the start.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;

use crate::domain::media::filter::{seconds, window_past_end, FilterGraph, STEREO_48K};
use crate::domain::media::ports::MediaToolkit;
use crate::domain::media::{Edit, JoinJob, Loudness, MediaError, PreviewJob, RenderJob, RenderPart};
use crate::domain::media::{SILENCE_DB, SILENCE_MIN_S};

/// Encoder settings of every output (the performance script's reference command uses
/// the same).
pub const VIDEO_ENCODER: [&str; 8] = ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-pix_fmt", "yuv420p"];
pub const AUDIO_ENCODER: [&str; 6] = ["-c:a", "aac", "-b:a", "128k", "-ar", "48000"];
/// Outputs longer than this have their sound encoded with the AAC encoder's `fast`
/// coder rather than its default (`twoloop`), made in parts or not (so that both give
/// the same sound). The sound of an output is one pass over all of it, even when its
/// pictures are made in parts: with `twoloop`, the hardest sound measured (a pure tone,
/// 128 kb/s) takes 125 s of one core an hour, so 5 hours would pass a node-worker's
/// 840 s; `fast` takes it in 55 s an hour (docs/performance.md, "The sound of long
/// outputs"). An output over an hour is made in parts anyway: one pass of it cannot run
/// in one function.
pub const LONG_SOUND_MS: u64 = 60 * 60 * 1000;
/// Frame rate of joined videos.
const CONCAT_FPS: u32 = 30;
/// Longest reading a caption file may take.
const CAPTIONS_BUDGET: Duration = Duration::from_secs(30);
/// Longest a thumbnail may take.
const THUMBNAIL_BUDGET: Duration = Duration::from_secs(60);
/// How much earlier than its window a segment starts reading its input: the frame
/// before the window's first one is then decoded too, so that the frame-rate filter
/// picks the same frames as the whole render.
const SEGMENT_LEAD_MS: u64 = 1_000;
/// The frames of an output: on the grid of the input's rate, counted from the output's
/// start, the grid every part of the same render keeps too. The last frame is held a
/// moment first (`tpad`): the frame-rate filter ends at its input's end, which a filter
/// such as overlay puts at its last frame's start, not its end; the output's length
/// (`-t`, or a part's window) then cuts what is held.
const FRAME_GRID: &str = "tpad=stop_mode=clone:stop_duration=1,fps=source_fps";
/// Frames a second of the stand-in picture of a sound-only render (the edits' picture
/// filters run on it, at almost no cost, so that the sound's graph is the whole one's).
const SOUND_PICTURE_RATE: &str = "1/10";

/// Demuxers ffmpeg and ffprobe may open an input with. Playlist and concat formats are
/// left out on purpose: they would open other files or URLs named inside an uploaded file.
pub const MEDIA_FORMATS: &str = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,flv,mpegts,mpeg,ogg,wav,mp3,aac,flac,\
                                 asf,image2,png_pipe,jpeg_pipe,webp_pipe,gif,bmp_pipe,tiff_pipe";

/// The protocols an input at `location` truly needs: a file, or (a presigned URL) HTTPS.
pub fn protocols_of(location: &str) -> &'static str {
    if location.starts_with("http://") || location.starts_with("https://") {
        "http,https,tcp,tls,crypto"
    } else {
        "file"
    }
}

/// The arguments that open one input: what it may read (protocols and demuxers), then
/// `-i location`.
fn input(location: &str) -> [String; 6] {
    [
        "-protocol_whitelist".into(),
        protocols_of(location).into(),
        "-format_whitelist".into(),
        MEDIA_FORMATS.into(),
        "-i".into(),
        location.into(),
    ]
}

/// `ffmpeg` as a child process.
pub struct Ffmpeg {
    program: PathBuf,
}

impl Ffmpeg {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self { program: program.into() }
    }
}

/// The ffmpeg arguments of a job (without the program), and the folder to run in (where
/// caption files are, so that the filter names them without any path quoting): the
/// inputs, joined when there are several, then each edit's piece of the filter graph
/// (its tile's [`Filter`](crate::domain::media::filter::Filter)), then the encoders.
pub fn arguments(job: &RenderJob) -> Result<(Vec<String>, Option<PathBuf>), MediaError> {
    let mut args: Vec<String> = ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"].map(String::from).to_vec();
    let mut graph = FilterGraph::new(job.inputs.len());
    let edits = match job.part {
        RenderPart::Picture { start_ms, end_ms } => open_window(job, start_ms, end_ms, &mut args, &mut graph)?,
        RenderPart::Whole | RenderPart::Sound => open_inputs(job, &mut args, &mut graph)?,
    };
    // Positions in the job's edits (a leading clip, done as a seek, is not in `edits`).
    let first = job.edits.len() - edits.len();
    let mut folder = None;
    for (position, edit) in edits.iter().enumerate() {
        edit.write(&mut graph).map_err(|message| MediaError::InvalidEdit { edit: first + position, message })?;
        if let Some(subtitles) = edit.subtitles() {
            folder = subtitles.parent().map(Path::to_path_buf);
        }
        graph.duration_ms = edit.duration_after(graph.duration_ms);
    }
    for added in graph.added_inputs() {
        if added.looped {
            args.extend(["-stream_loop", "-1"].map(String::from));
        }
        args.extend(input(&added.location));
    }
    let video = graph.video.clone();
    match job.part {
        RenderPart::Whole => {
            let _ = write!(graph, "[{video}]{FRAME_GRID},format=yuv420p[vout]");
            args.extend(["-filter_complex".into(), graph.text().to_owned(), "-map".into(), "[vout]".into()]);
            map_sound(&mut args, &mut graph);
            args.extend(VIDEO_ENCODER.map(String::from));
            args.extend(["-t".into(), seconds(graph.duration_ms), "-movflags".into(), "+faststart".into()]);
        }
        RenderPart::Picture { start_ms, end_ms } => {
            if let Some(audio) = graph.audio.take().filter(|audio| !audio.contains(':')) {
                // A sound an edit made (music) is not this part's: it ends here.
                let _ = write!(graph, "[{audio}]anullsink;");
            }
            // The window starts on a frame of the grid (`media::segments`): the part's
            // first frame, moved to 0 (exactly, in the grid's time base).
            let (start, end) = (seconds(start_ms), seconds(end_ms));
            let shift = if start_ms > 0 { ",setpts=PTS-STARTPTS" } else { "" };
            let _ = write!(graph, "[{video}]{FRAME_GRID},trim=start={start}:end={end}{shift},format=yuv420p[vout]");
            args.extend(["-filter_complex".into(), graph.text().to_owned(), "-map".into(), "[vout]".into()]);
            // The whole render's encoder, B-frames included: the join offsets each part
            // by the windows before it, decoding times too (the segments test checks
            // that no packet is moved at a seam).
            args.extend(VIDEO_ENCODER.map(String::from));
            args.push("-an".into());
        }
        RenderPart::Sound => {
            let _ = write!(graph, "[{video}]nullsink");
            args.extend(["-filter_complex".into(), graph.text().to_owned()]);
            if graph.audio.is_none() {
                return Err(MediaError::Invalid("the render has no sound to make".into()));
            }
            map_sound(&mut args, &mut graph);
            args.extend(["-t".into(), seconds(graph.duration_ms)]);
        }
    }
    args.push(job.output.display().to_string());
    Ok((args, folder))
}

/// Maps the graph's sound, if it has one, with the audio encoder (its `fast` coder when
/// the output is longer than [`LONG_SOUND_MS`]).
fn map_sound(args: &mut Vec<String>, graph: &mut FilterGraph) {
    if let Some(audio) = graph.audio.take() {
        // A stream label from the graph is bracketed; an input's stream is not.
        let map = if audio.contains(':') { audio } else { format!("[{audio}]") };
        args.extend(["-map".into(), map]);
        args.extend(AUDIO_ENCODER.map(String::from));
        if graph.duration_ms > LONG_SOUND_MS {
            args.extend(["-aac_coder", "fast"].map(String::from));
        }
    }
}

/// Opens the one input of a segment's picture (`start_ms..end_ms` of the output) and
/// writes the graph's first piece: only the part of the input the window shows is read
/// (from a little before it), and its frames keep the times they have in the whole
/// input, so that every edit does to them what it does in the whole render. Every edit
/// is left to write (a leading clip is not a seek here: the window is).
fn open_window<'a>(
    job: &'a RenderJob,
    start_ms: u64,
    end_ms: u64,
    args: &mut Vec<String>,
    graph: &mut FilterGraph,
) -> Result<&'a [Edit], MediaError> {
    let [only] = job.inputs.as_slice() else {
        return Err(MediaError::Invalid("a segment of a render reads exactly one input".into()));
    };
    if start_ms >= end_ms {
        return Err(MediaError::Invalid(format!("a segment's window {start_ms}..{end_ms} ms is empty")));
    }
    // The input's times the window shows: each edit, last first, maps its output's time
    // back to its input's.
    let (from, to) =
        job.edits.iter().rev().fold((start_ms, end_ms), |(from, to), edit| (edit.source_ms(from), edit.source_ms(to)));
    let seek = from.saturating_sub(SEGMENT_LEAD_MS).min(only.duration_ms);
    let until = (to + SEGMENT_LEAD_MS).min(only.duration_ms).max(seek + 1);
    args.extend(["-ss".into(), seconds(seek), "-t".into(), seconds(until - seek)]);
    args.extend(input(&only.location));
    let (w, h) = (only.width / 2 * 2, only.height / 2 * 2);
    let out = graph.label("v");
    let _ = write!(graph, "[0:v]setpts=PTS+{}/TB,scale={w}:{h},setsar=1[{out}];", seconds(seek));
    (graph.video, graph.width, graph.height) = (out, w, h);
    graph.audio = None;
    graph.duration_ms = only.duration_ms;
    Ok(&job.edits)
}

/// The concat demuxer's list of a join: each picture, with its window's length as its
/// duration, so that each part starts exactly where the one before ends.
pub fn join_list(job: &JoinJob) -> String {
    let mut list = String::from("ffconcat version 1.0\n");
    for (location, duration_ms) in &job.pictures {
        let location = location.strip_prefix("file:").unwrap_or(location).replace('\'', "'\\''");
        let _ = write!(list, "file '{location}'\nduration {}\n", seconds(*duration_ms));
    }
    list
}

/// The arguments of a join (`list` is [`join_list`]'s file): the pictures end to end and
/// the sound, streams copied.
pub fn join_arguments(job: &JoinJob, list: &Path) -> Vec<String> {
    let reads = match job.pictures.iter().any(|(location, _)| protocols_of(location) != "file") {
        true => "file,http,https,tcp,tls,crypto",
        false => "file",
    };
    let mut args: Vec<String> = ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"].map(String::from).to_vec();
    args.extend(["-protocol_whitelist", reads, "-f", "concat", "-safe", "0", "-i"].map(String::from));
    args.push(list.display().to_string());
    if let Some(sound) = &job.sound {
        args.extend(input(sound));
    }
    args.extend(["-map".into(), "0:v".into()]);
    if job.sound.is_some() {
        args.extend(["-map".into(), "1:a".into()]);
    }
    args.extend(["-c", "copy"].map(String::from));
    // The index is written in room kept for it at the start, when the join ends, rather
    // than moved there by a second pass: every byte after the room is written once, in
    // order, so the file can be stored while it is written (`BlobStore::put_growing`).
    if job.index_bytes > 0 {
        args.extend(["-moov_size".into(), job.index_bytes.to_string()]);
    }
    args.push(job.output.display().to_string());
    args
}

/// Opens the job's inputs and writes the graph's first piece (one input scaled to even
/// dimensions, or several joined end to end); answers the edits left to write. A
/// leading window of a single input is a seek on it: nothing before it is decoded.
fn open_inputs<'a>(
    job: &'a RenderJob,
    args: &mut Vec<String>,
    graph: &mut FilterGraph,
) -> Result<&'a [Edit], MediaError> {
    let mut edits: &[Edit] = &job.edits;
    match job.inputs.as_slice() {
        [] => return Err(MediaError::Invalid("a render needs at least one input".into())),
        [only] => {
            graph.duration_ms = only.duration_ms;
            if let Some((edit, (start_ms, end_ms))) = edits.first().and_then(|edit| Some((edit, edit.window()?))) {
                let end = end_ms.unwrap_or(only.duration_ms).min(only.duration_ms);
                if start_ms >= end {
                    let message = window_past_end(edit.name(), start_ms, only.duration_ms);
                    return Err(MediaError::InvalidEdit { edit: 0, message });
                }
                args.extend(["-ss".into(), seconds(start_ms), "-t".into(), seconds(end - start_ms)]);
                graph.duration_ms = end - start_ms;
                edits = &edits[1..];
            }
            args.extend(input(&only.location));
            // Even dimensions, as yuv420p needs.
            let (w, h) = (only.width / 2 * 2, only.height / 2 * 2);
            let out = graph.label("v");
            match job.part {
                // The sound alone: the input's picture is not decoded; a still stand-in
                // of its size carries the edits' picture filters.
                RenderPart::Sound => {
                    let (rate, length) = (SOUND_PICTURE_RATE, seconds(graph.duration_ms));
                    let _ = write!(graph, "color=c=black:s={w}x{h}:r={rate}:d={length},setsar=1[{out}];");
                }
                RenderPart::Whole | RenderPart::Picture { .. } => {
                    let _ = write!(graph, "[0:v]scale={w}:{h},setsar=1[{out}];");
                }
            }
            (graph.video, graph.width, graph.height) = (out, w, h);
            graph.audio = only.has_audio.then(|| "0:a".to_owned());
        }
        several if job.part != RenderPart::Whole => {
            return Err(MediaError::Invalid(format!(
                "a render of {} inputs joined is made whole, not in parts",
                several.len()
            )));
        }
        several => {
            let (w, h) = (several[0].width / 2 * 2, several[0].height / 2 * 2);
            let mut pairs = String::new();
            for (index, input) in several.iter().enumerate() {
                args.extend(self::input(&input.location));
                let (v, a) = (graph.label("v"), graph.label("a"));
                let _ = write!(
                    graph,
                    "[{index}:v]scale={w}:{h}:force_original_aspect_ratio=decrease,pad={w}:{h}:(ow-iw)/2:(oh-ih)/2,\
                     setsar=1,fps={CONCAT_FPS},format=yuv420p[{v}];"
                );
                if input.has_audio {
                    let _ = write!(graph, "[{index}:a]{STEREO_48K}[{a}];");
                } else {
                    let _ =
                        write!(graph, "anullsrc=r=48000:cl=stereo,atrim=duration={}[{a}];", seconds(input.duration_ms));
                }
                let _ = write!(pairs, "[{v}][{a}]");
            }
            let (v, a) = (graph.label("v"), graph.label("a"));
            let _ = write!(graph, "{pairs}concat=n={}:v=1:a=1[{v}][{a}];", several.len());
            (graph.video, graph.width, graph.height) = (v, w, h);
            graph.audio = Some(a);
            graph.duration_ms = several.iter().map(|input| input.duration_ms).sum();
        }
    }
    Ok(edits)
}

impl Ffmpeg {
    /// Runs ffmpeg with `args` until it ends, the budget passes or `cancelled` is set
    /// (the child is killed in both cases).
    pub(crate) async fn run(
        &self,
        args: &[String],
        folder: Option<&Path>,
        budget: Duration,
        cancelled: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), MediaError> {
        let stderr = self.execute(args, folder, budget, cancelled).await?;
        let stderr = match stderr {
            Ok(_) => return Ok(()),
            Err(stderr) => stderr,
        };
        let lines: Vec<&str> = stderr.lines().filter(|line| !line.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(3)..].join(" / ");
        Err(MediaError::Invalid(format!(
            "ffmpeg could not make the video: {}",
            if tail.is_empty() { "no message" } else { &tail }
        )))
    }

    /// Runs ffmpeg with `args` (in `folder`) to its end: Ok(its stderr's end) when it
    /// succeeded, Ok(Err(it)) when it failed; a budget passed or a cancel is an error.
    async fn execute(
        &self,
        args: &[String],
        folder: Option<&Path>,
        budget: Duration,
        cancelled: tokio::sync::watch::Receiver<bool>,
    ) -> Result<Result<String, String>, MediaError> {
        let mut command = super::child::command(&self.program);
        command.args(args).stdout(Stdio::null());
        if let Some(folder) = folder {
            command.current_dir(folder);
        }
        let ended = super::child::run_to_end(command, budget, cancelled).await.map_err(|error| {
            MediaError::Unavailable(anyhow::Error::new(error).context(format!("running {}", self.program.display())))
        })?;
        match ended {
            super::child::Ended::Exited { success: true, stderr } => Ok(Ok(stderr)),
            super::child::Ended::Exited { success: false, stderr } => Ok(Err(stderr)),
            super::child::Ended::TimedOut => Err(MediaError::TimedOut(budget)),
            super::child::Ended::Cancelled => Err(MediaError::Cancelled),
        }
    }
}

impl Ffmpeg {
    /// Writes one JPEG picture of the media at `location` to `output`: `before` are the
    /// input's options (a seek), `filters` what makes the picture.
    async fn picture(
        &self,
        before: &[&str],
        location: &str,
        filters: &[&str],
        output: &Path,
    ) -> Result<(), MediaError> {
        let args: Vec<String> = ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
            .iter()
            .chain(before)
            .map(|arg| arg.to_string())
            .chain(input(location))
            .chain(filters.iter().chain(&["-frames:v", "1", "-q:v", "4"]).map(|arg| arg.to_string()))
            .chain([output.display().to_string()])
            .collect();
        let (_never, cancelled) = tokio::sync::watch::channel(false);
        self.run(&args, None, THUMBNAIL_BUDGET, cancelled).await
    }
}

/// Longest a loudness check or a preview may take.
const ANALYSIS_BUDGET: Duration = Duration::from_secs(120);

impl Ffmpeg {
    /// Runs ffmpeg with `args` (its log at `info`) and answers its log's end: what the
    /// analysis filters (`volumedetect`, `silencedetect`) print.
    async fn log_of(&self, args: &[String], budget: Duration) -> Result<String, MediaError> {
        let (_never, cancelled) = tokio::sync::watch::channel(false);
        self.execute(args, None, budget, cancelled).await?.map_err(|log| {
            let last = log.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("no message");
            MediaError::Invalid(format!("ffmpeg could not read the sound: {last}"))
        })
    }
}

/// The loudness `volumedetect` and `silencedetect` printed in an ffmpeg log.
pub fn loudness_of(log: &str) -> Option<Loudness> {
    let value = |label: &str| {
        log.lines().rev().find_map(|line| {
            let (_, rest) = line.split_once(label)?;
            rest.trim().trim_end_matches("dB").trim().parse::<f64>().ok()
        })
    };
    let silent: f64 = log
        .lines()
        .filter_map(|line| line.split_once("silence_duration:").and_then(|(_, rest)| rest.trim().parse::<f64>().ok()))
        .sum();
    Some(Loudness {
        mean_db: value("mean_volume:")?,
        max_db: value("max_volume:")?,
        silent_ms: (silent * 1000.0) as u64,
    })
}

impl Ffmpeg {
    /// The job with each caption file read as SubRip (the format forced, never probed:
    /// text that starts like a playlist must not open the HLS demuxer) and written as
    /// an ASS file beside it, which the subtitles filter then reads: a file of ffmpeg's
    /// own making. Captions with no cue SubRip can read fail that edit.
    async fn with_captions_read_as_srt(
        &self,
        job: &RenderJob,
        cancelled: &tokio::sync::watch::Receiver<bool>,
    ) -> Result<RenderJob, MediaError> {
        let mut job = job.clone();
        for (position, edit) in job.edits.iter_mut().enumerate() {
            let Some(srt) = edit.subtitles() else { continue };
            let ass = srt.with_extension("ass");
            let args: Vec<String> = ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
                .into_iter()
                .chain(["-protocol_whitelist", "file", "-f", "srt", "-i"])
                .map(String::from)
                .chain([srt.display().to_string(), ass.display().to_string()])
                .collect();
            let name = edit.name();
            let not_srt = || MediaError::InvalidEdit {
                edit: position,
                message: format!("{name}: srt has no caption that SubRip can read"),
            };
            match self.run(&args, None, CAPTIONS_BUDGET, cancelled.clone()).await {
                Ok(()) => {}
                Err(MediaError::Invalid(_)) => return Err(not_srt()),
                Err(error) => return Err(error),
            }
            let written = tokio::fs::read_to_string(&ass).await.unwrap_or_default();
            if !written.lines().any(|line| line.starts_with("Dialogue:")) {
                return Err(not_srt());
            }
            *edit = edit.with_subtitles(ass).unwrap_or_else(|| edit.clone());
        }
        Ok(job)
    }
}

#[async_trait]
impl MediaToolkit for Ffmpeg {
    async fn render(&self, job: &RenderJob, cancelled: tokio::sync::watch::Receiver<bool>) -> Result<(), MediaError> {
        let job = self.with_captions_read_as_srt(job, &cancelled).await?;
        let (args, folder) = arguments(&job)?;
        self.run(&args, folder.as_deref(), job.budget, cancelled).await
    }

    async fn join(&self, job: &JoinJob, cancelled: tokio::sync::watch::Receiver<bool>) -> Result<(), MediaError> {
        if job.pictures.is_empty() {
            return Err(MediaError::Invalid("a join needs at least one part".into()));
        }
        let list = job.output.with_extension("ffconcat");
        tokio::fs::write(&list, join_list(job)).await.map_err(|error| MediaError::Unavailable(error.into()))?;
        let joined = self.run(&join_arguments(job, &list), None, job.budget, cancelled).await;
        let _ = tokio::fs::remove_file(&list).await;
        joined
    }

    async fn thumbnail(&self, location: &str, duration_ms: u64, output: &Path) -> Result<(), MediaError> {
        // A picture (no length) is not sought: a seek in a still JPEG leaves no frame, and
        // ffmpeg then ends successfully having written nothing.
        if duration_ms == 0 {
            return self.picture(&[], location, &["-vf", "scale=320:-2"], output).await;
        }
        let at = seconds((duration_ms / 2).min(1000));
        self.picture(&["-ss", &at], location, &["-vf", "scale=320:-2"], output).await
    }

    async fn loudness(&self, location: &str) -> Result<Loudness, MediaError> {
        let filters = format!("silencedetect=noise={SILENCE_DB}dB:d={SILENCE_MIN_S},volumedetect");
        let args: Vec<String> = ["-nostdin", "-hide_banner", "-nostats", "-loglevel", "info"]
            .iter()
            .map(|arg| arg.to_string())
            .chain(input(location))
            .chain(["-vn", "-af", &filters, "-f", "null", "-"].iter().map(|arg| arg.to_string()))
            .collect();
        let log = self.log_of(&args, ANALYSIS_BUDGET).await?;
        // A file without sound prints no volume: as silent as can be.
        Ok(loudness_of(&log).unwrap_or(Loudness {
            mean_db: f64::NEG_INFINITY,
            max_db: f64::NEG_INFINITY,
            silent_ms: 0,
        }))
    }

    async fn preview(&self, job: &PreviewJob, output: &Path) -> Result<(), MediaError> {
        let seconds = job.seconds.to_string();
        let mut args: Vec<String> = ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"].map(String::from).to_vec();
        let scale = format!("scale={}:-2,setsar=1,format=yuv420p", job.width);
        match (&job.video, &job.image, &job.audio) {
            (Some(video), _, _) => {
                args.extend(["-t".into(), seconds.clone()]);
                args.extend(input(video));
                args.extend(["-map".into(), "0:v:0".into(), "-map".into(), "0:a:0?".into(), "-vf".into(), scale]);
            }
            (None, Some(image), Some(audio)) => {
                args.extend([
                    "-loop".into(),
                    "1".into(),
                    "-framerate".into(),
                    "30".into(),
                    "-t".into(),
                    seconds.clone(),
                ]);
                args.extend(input(image));
                args.extend(["-t".into(), seconds.clone()]);
                args.extend(input(audio));
                args.extend(["-map".into(), "0:v:0".into(), "-map".into(), "1:a:0".into(), "-vf".into(), scale]);
            }
            _ => return Err(MediaError::Invalid("a preview needs a video, or a picture and a sound".into())),
        }
        args.extend(VIDEO_ENCODER.iter().chain(AUDIO_ENCODER.iter()).map(|arg| arg.to_string()));
        args.extend(["-t".into(), seconds, "-movflags".into(), "+faststart".into(), output.display().to_string()]);
        let (_never, cancelled) = tokio::sync::watch::channel(false);
        self.run(&args, None, job.budget.min(ANALYSIS_BUDGET), cancelled).await
    }

    async fn waveform(&self, location: &str, output: &Path) -> Result<(), MediaError> {
        let filter = ["-filter_complex", "showwavespic=s=320x120:colors=white,format=yuvj420p"];
        self.picture(&[], location, &filter, output).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::media::RenderInput;
    use crate::domain::nodes::background_music::MusicFilter;
    use crate::domain::nodes::clip::ClipFilter;
    use crate::domain::nodes::overlay::{Corner, OverlayFilter};
    use crate::domain::nodes::reframe::ReframeFilter;
    use crate::domain::nodes::speed::SpeedFilter;

    fn clip(start_ms: u64, end_ms: Option<u64>) -> Edit {
        Arc::new(ClipFilter { start_ms, end_ms })
    }

    fn speed(factor: f64) -> Edit {
        Arc::new(SpeedFilter { factor })
    }

    fn input(duration_ms: u64) -> RenderInput {
        RenderInput { location: "file:/in.mp4".into(), duration_ms, width: 320, height: 240, has_audio: true }
    }

    #[test]
    fn a_chain_is_one_command_with_a_leading_clip_as_a_seek() {
        let job = RenderJob {
            inputs: vec![input(4000)],
            edits: vec![
                clip(1000, Some(3000)),
                Arc::new(ReframeFilter { aspect: (9, 16), pad_color: None }),
                speed(4.0),
            ],
            output: "/out.mp4".into(),
            budget: Duration::from_secs(1),
            part: RenderPart::Whole,
        };
        let (args, _) = arguments(&job).unwrap();
        let text = args.join(" ");
        assert!(text.contains("-ss 1.000 -t 2.000 -protocol_whitelist file -format_whitelist "), "{text}");
        assert!(text.contains(" -i file:/in.mp4 "), "{text}");
        assert!(text.contains("crop=136:240"), "{text}");
        assert!(text.contains("atempo=2,atempo=2"), "{text}");
        assert!(text.ends_with("-t 0.500 -movflags +faststart /out.mp4"), "{text}");
    }

    #[test]
    fn the_sound_of_an_output_over_an_hour_is_encoded_by_the_fast_coder_made_in_parts_or_not() {
        let job = |duration_ms, part| RenderJob {
            inputs: vec![input(duration_ms)],
            edits: vec![clip(0, None)],
            output: "/o.mp4".into(),
            budget: Duration::ZERO,
            part,
        };
        let coder = |duration_ms, part| {
            let text = arguments(&job(duration_ms, part)).unwrap().0.join(" ");
            assert!(text.contains("-c:a aac -b:a 128k -ar 48000"), "{text}");
            text.contains("-aac_coder fast")
        };
        for part in [RenderPart::Whole, RenderPart::Sound] {
            assert!(!coder(LONG_SOUND_MS, part), "an hour: the default coder");
            assert!(coder(LONG_SOUND_MS + 1, part), "longer: fast");
            assert!(coder(5 * LONG_SOUND_MS, part), "5 hours: fast");
        }
    }

    #[test]
    fn a_clip_past_the_end_names_its_position_in_the_job() {
        let job = |edits| RenderJob {
            inputs: vec![input(4000)],
            edits,
            output: "/o.mp4".into(),
            budget: Duration::ZERO,
            part: RenderPart::Whole,
        };
        let late = clip(800, None);
        let leading = arguments(&job(vec![clip(4000, None)])).unwrap_err();
        assert!(matches!(leading, MediaError::InvalidEdit { edit: 0, .. }), "{leading}");
        // 1 s kept, at double speed: 500 ms left, so a clip from 800 ms is past the end.
        let edits = vec![clip(0, Some(1000)), speed(2.0), late];
        let error = arguments(&job(edits)).unwrap_err();
        assert!(matches!(error, MediaError::InvalidEdit { edit: 2, .. }), "{error}");
        assert_eq!(error.to_string(), "Clip: start_ms (800) is not before the end of its input (500 ms)");
    }

    #[test]
    fn a_segment_reads_only_its_window_and_keeps_the_whole_renders_times() {
        // Output 0..4000 ms is input 1000..9000 ms at twice the speed; 2000..3000 ms of
        // the output shows input 5000..7000 ms.
        let job = RenderJob {
            inputs: vec![input(10_000)],
            edits: vec![clip(1000, Some(9000)), speed(2.0)],
            output: "/seg.mp4".into(),
            budget: Duration::ZERO,
            part: RenderPart::Picture { start_ms: 2000, end_ms: 3000 },
        };
        let (args, _) = arguments(&job).unwrap();
        let text = args.join(" ");
        assert!(text.contains("-ss 4.000 -t 4.000 -protocol_whitelist file"), "{text}");
        assert!(text.contains("[0:v]setpts=PTS+4.000/TB,scale=320:240"), "{text}");
        assert!(text.contains("trim=start=1.000:end=9.000,setpts=PTS-1.000/TB"), "{text}");
        assert!(text.contains(&format!("{FRAME_GRID},trim=start=2.000:end=3.000,setpts=PTS-STARTPTS")), "{text}");
        assert!(text.ends_with("-pix_fmt yuv420p -an /seg.mp4") && !text.contains("atempo"), "{text}");
        let sound = RenderJob { part: RenderPart::Sound, output: "/s.m4a".into(), ..job };
        let text = arguments(&sound).unwrap().0.join(" ");
        assert!(text.contains("color=c=black:s=320x240:r=1/10:d=8.000") && text.contains("nullsink"), "{text}");
        assert!(text.contains("atempo=2") && !text.contains("libx264"), "{text}");
        let join = JoinJob {
            pictures: vec![("file:/a b/0.mp4".into(), 2000), ("/it's/1.mp4".into(), 500)],
            sound: Some("file:/s.m4a".into()),
            output: "/out.mp4".into(),
            budget: Duration::ZERO,
            index_bytes: 300_000,
        };
        assert_eq!(
            join_list(&join),
            "ffconcat version 1.0\nfile '/a b/0.mp4'\nduration 2.000\nfile '/it'\\''s/1.mp4'\nduration 0.500\n"
        );
        let text = join_arguments(&join, Path::new("/list")).join(" ");
        assert!(text.contains("-f concat -safe 0 -i /list -protocol_whitelist file"), "{text}");
        assert!(text.ends_with("-i file:/s.m4a -map 0:v -map 1:a -c copy -moov_size 300000 /out.mp4"), "{text}");
    }

    #[test]
    fn every_input_says_what_it_may_read() {
        let job = RenderJob {
            inputs: vec![input(4000), RenderInput { location: "https://bucket/v?sig".into(), ..input(1000) }],
            edits: vec![
                Arc::new(MusicFilter { location: "file:/m.mp3".into(), volume: 1.0, ducking: false }),
                Arc::new(OverlayFilter {
                    location: "file:/i.png".into(),
                    position: Corner::Center,
                    opacity: 1.0,
                    scale: 0.2,
                }),
            ],
            output: "/o.mp4".into(),
            budget: Duration::ZERO,
            part: RenderPart::Whole,
        };
        let (args, _) = arguments(&job).unwrap();
        let opened: Vec<usize> = args.iter().enumerate().filter(|(_, arg)| *arg == "-i").map(|(at, _)| at).collect();
        assert_eq!(opened.len(), 4);
        for at in opened {
            let location = &args[at + 1];
            assert_eq!(args[at - 4], "-protocol_whitelist", "{args:?}");
            assert_eq!(args[at - 3], protocols_of(location));
            assert_eq!((args[at - 2].as_str(), args[at - 1].as_str()), ("-format_whitelist", MEDIA_FORMATS));
        }
        assert_eq!(protocols_of("file:/m.mp3"), "file");
        assert!(!MEDIA_FORMATS.split(',').any(|format| ["hls", "concat", "srt", "tty"].contains(&format)));
    }

    #[test]
    fn loudness_is_read_from_the_filters_log() {
        let log =
            "[silencedetect @ 0x1] silence_start: 0\n[silencedetect @ 0x1] silence_end: 1.5 | silence_duration: 1.5\n\
                   [silencedetect @ 0x1] silence_duration: 0.25\n[Parsed_volumedetect_1 @ 0x2] mean_volume: -21.4 dB\n\
                   [Parsed_volumedetect_1 @ 0x2] max_volume: -3.0 dB\n";
        let loudness = loudness_of(log).unwrap();
        assert_eq!((loudness.mean_db, loudness.max_db, loudness.silent_ms), (-21.4, -3.0, 1750));
        assert!(loudness_of("no volume here").is_none());
    }
}
