//! Times a render made whole against the same render made in segments (issue 35), with
//! the service's own media toolkit: `scripts/perf-segments.sh` runs it and writes the
//! figures in `docs/performance.md`.
//!
//! `segments <folder> <segment_s> whole|parallel <workers>|part <k>|sound|join|count`:
//! the folder holds `input.mp4` and `captions.srt`; the chain is Clip (from 1 s to 1 s
//! before the end) → Reframe 9:16 → Captions. Each command prints one line,
//! `<what> <seconds>`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::adapters::ffmpeg::Ffmpeg;
use shared::domain::media::ports::MediaToolkit;
use shared::domain::media::{segments, Edit, JoinJob, RenderInput, RenderJob, RenderPart};
use shared::domain::nodes::captions::{CaptionPosition, CaptionsFilter};
use shared::domain::nodes::clip::ClipFilter;
use shared::domain::nodes::reframe::ReframeFilter;

const BUDGET: Duration = Duration::from_secs(3_600);

struct Bench {
    folder: PathBuf,
    input: RenderInput,
    edits: Vec<Edit>,
    windows: Vec<(u64, u64)>,
    toolkit: Ffmpeg,
}

impl Bench {
    fn new(folder: &Path, segment_s: u64) -> Self {
        let probe = |entries: &str| {
            let output = std::process::Command::new("ffprobe")
                .args(["-v", "error", "-select_streams", "v", "-show_entries", entries, "-of", "csv=p=0"])
                .arg(folder.join("input.mp4"))
                .output()
                .expect("ffprobe");
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        };
        let seconds: f64 = probe("format=duration").parse().expect("the input's length");
        let size = probe("stream=width,height");
        let rate = probe("stream=r_frame_rate");
        let (num, den) = rate.split_once('/').expect("a frame rate");
        let frame_rate: (u32, u32) = (num.parse().expect("frames"), den.parse().expect("seconds"));
        let (width, height) = size.split_once(',').expect("width,height");
        let input = RenderInput {
            location: format!("file:{}", folder.join("input.mp4").display()),
            duration_ms: (seconds * 1000.0) as u64,
            width: width.parse().expect("width"),
            height: height.parse().expect("height"),
            has_audio: true,
        };
        let duration_ms = input.duration_ms;
        let edits: Vec<Edit> = vec![
            Arc::new(ClipFilter { start_ms: 1_000, end_ms: Some(duration_ms - 1_000) }),
            Arc::new(ReframeFilter { aspect: (9, 16), pad_color: None }),
            Arc::new(CaptionsFilter {
                subtitles: folder.join("captions.srt"),
                font_size: 24,
                color: "#FFFFFF".into(),
                position: CaptionPosition::Bottom,
            }),
        ];
        let length = edits.iter().fold(duration_ms, |length, edit| edit.duration_after(length));
        let windows = segments(length, segment_s * 1_000, frame_rate);
        Self { folder: folder.to_owned(), input, edits, windows, toolkit: Ffmpeg::new("ffmpeg") }
    }

    fn job(&self, output: PathBuf, part: RenderPart) -> RenderJob {
        RenderJob { inputs: vec![self.input.clone()], edits: self.edits.clone(), output, budget: BUDGET, part }
    }

    fn part_path(&self, index: usize) -> PathBuf {
        self.folder.join(format!("part-{index}.mp4"))
    }

    async fn render(&self, job: RenderJob) {
        let (_, never) = tokio::sync::watch::channel(false);
        self.toolkit.render(&job, never).await.expect("the render");
    }

    async fn part(&self, index: usize) {
        let (start_ms, end_ms) = self.windows[index];
        self.render(self.job(self.part_path(index), RenderPart::Picture { start_ms, end_ms })).await;
    }

    async fn sound(&self) {
        self.render(self.job(self.folder.join("sound.m4a"), RenderPart::Sound)).await;
    }

    async fn join(&self) {
        let pictures = (0..self.windows.len())
            .map(|index| {
                let (start_ms, end_ms) = self.windows[index];
                (format!("file:{}", self.part_path(index).display()), end_ms - start_ms)
            })
            .collect();
        let sound = Some(format!("file:{}", self.folder.join("sound.m4a").display()));
        let job = JoinJob { pictures, sound, output: self.folder.join("joined.mp4"), budget: BUDGET, index_bytes: 0 };
        let (_, never) = tokio::sync::watch::channel(false);
        self.toolkit.join(&job, never).await.expect("the join");
    }

    /// Every part and the sound by `workers` at once (the sound first, as one more
    /// task), then the join.
    async fn parallel(self: Arc<Self>, workers: usize) {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks = self.windows.len() + 1;
        let mut running = Vec::new();
        for _ in 0..workers {
            let (bench, next) = (self.clone(), next.clone());
            running.push(tokio::spawn(async move {
                loop {
                    let task = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    match task {
                        0 => bench.sound().await,
                        task if task < tasks => bench.part(task - 1).await,
                        _ => break,
                    }
                }
            }));
        }
        for worker in running {
            worker.await.expect("a worker");
        }
        self.join().await;
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "segments <folder> <segment_s> whole|parallel <workers>|part <k>|sound|join|count";
    let (folder, segment_s, command) = match args.as_slice() {
        [_, folder, segment_s, command, ..] => (folder, segment_s.parse().expect(usage), command.as_str()),
        _ => panic!("{usage}"),
    };
    // Absolute: the render runs in the captions' folder.
    let folder = std::fs::canonicalize(folder).expect("the bench's folder");
    let bench = Arc::new(Bench::new(&folder, segment_s));
    let started = Instant::now();
    match command {
        "whole" => bench.render(bench.job(bench.folder.join("whole.mp4"), RenderPart::Whole)).await,
        "parallel" => bench.clone().parallel(args[4].parse().expect(usage)).await,
        "part" => bench.part(args[4].parse().expect(usage)).await,
        "sound" => bench.sound().await,
        "join" => bench.join().await,
        "count" => {
            println!("parts {}", bench.windows.len());
            return;
        }
        _ => panic!("{usage}"),
    }
    println!("{command} {:.2}", started.elapsed().as_secs_f64());
}
