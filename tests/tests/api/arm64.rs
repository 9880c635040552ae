//! A deployment's arm64 artifacts, run on this x86_64 machine under qemu as Lambda runs
//! them: the media layer (`scripts/build-layer.sh`) unzipped into a folder standing for
//! `/opt`, its tools started through their wrappers with Lambda's environment and no
//! library of this machine's (here); the function binaries as `sam build` makes them
//! (`scripts/build-lambda.sh`) making a run with the layer's ffmpeg
//! (`lambda_binaries::arm64_*`). qemu-aarch64 is registered with binfmt_misc
//! (`infra/qemu.sh`), so an arm64 program starts as any other, as when node-worker starts
//! the layer's `/opt/bin/ffmpeg`, a shell wrapper that starts the layer's loader.
//!
//! Ignored in the main run: `scripts/test.sh` builds the artifacts, then runs
//! `cargo test --test api -- --ignored arm64_layer`, and once the functions are built
//! `-- --ignored arm64_functions arm64_deploy arm64_rebuilt`. `ARM64_LAYER_ZIP` and `ARM64_FUNCTIONS`
//! name other builds than `.local/layer/ffmpeg-layer-arm64.zip` and `target/functions-lambda-test`
//! (`scripts/build-lambda.sh --profile lambda-test`; the release build is `target/lambda`).
//!
//! The roots qemu is given (`QEMU_LD_PREFIX`) are no chroot: qemu looks there first, then
//! in this machine's folders. What keeps the layer's tools from this machine's libraries
//! is that it has none for arm64: an x86_64 library the loader finds is not loaded.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;
use shared::domain::media::{RenderInput, RenderJob, RenderPart};
use shared::domain::nodes::reframe::ReframeFilter;

use crate::helpers::ffmpeg_in;
use crate::runs::{probe_file, Probed};

/// The glibc libraries of the function image (and its C runtime), which the layer's
/// copies stand for here: Debian 12's glibc 2.36, where provided.al2023 has 2.34 (the
/// functions are linked for older ones).
const IMAGE_LIBRARIES: [&str; 5] = ["libc.so.6", "libm.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2"];
/// The dynamic loader the function binaries name (`PT_INTERP`).
const LOADER: &str = "ld-linux-aarch64.so.1";
/// provided.al2023's glibc: no function may need a newer one.
const IMAGE_GLIBC: (u32, u32) = (2, 34);
/// Longest a tool of the layer may take here (under qemu, on a slow machine).
const TOOL_LIMIT: Duration = Duration::from_secs(300);

/// The arm64 layer, unzipped, and the roots arm64 programs see as `/`.
pub struct Layer {
    /// Where the layer is, standing for `/opt`.
    pub opt: PathBuf,
    /// An empty root: the layer's tools find nothing outside it.
    empty: PathBuf,
    /// A root with only what the function image gives a function binary: the loader at
    /// `/lib` and glibc in `/lib64`.
    image: PathBuf,
}

/// The workspace's folder.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The layer `scripts/build-layer.sh` made (`ARM64_LAYER_ZIP` names another).
fn layer_zip() -> PathBuf {
    std::env::var_os("ARM64_LAYER_ZIP")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join(".local/layer/ffmpeg-layer-arm64.zip"))
}

/// The layer zip `scripts/build-layer.sh` made, unzipped once per test process into
/// `.local/layer/unzipped` (made anew; with its files' modes, as Lambda unzips a layer).
pub fn layer() -> &'static Layer {
    static LAYER: OnceLock<Layer> = OnceLock::new();
    LAYER.get_or_init(|| {
        let zip = layer_zip();
        assert!(
            zip.is_file(),
            "{} is missing: build the layer first with scripts/build-layer.sh (./scripts/test.sh does)",
            zip.display()
        );
        assert!(
            std::fs::read_to_string("/proc/sys/fs/binfmt_misc/qemu-aarch64")
                .is_ok_and(|state| state.starts_with("enabled")),
            "qemu-aarch64 is not registered with binfmt_misc: run infra/qemu.sh (./scripts/test.sh does)"
        );
        let folder = workspace().join(".local/layer/unzipped");
        if folder.exists() {
            std::fs::remove_dir_all(&folder).expect("removing the last unzipped layer");
        }
        let opt = folder.join("opt");
        std::fs::create_dir_all(&opt).expect("the layer's folder");
        let unzipped = Command::new("unzip").arg("-q").arg(&zip).arg("-d").arg(&opt).status().expect("unzip");
        assert!(unzipped.success(), "unzipping {}", zip.display());
        let (empty, image) = (folder.join("empty-root"), folder.join("image-root"));
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::create_dir_all(image.join("lib")).unwrap();
        std::fs::create_dir_all(image.join("lib64")).unwrap();
        std::fs::copy(opt.join("lib").join(LOADER), image.join("lib").join(LOADER)).expect("the layer's loader");
        for library in IMAGE_LIBRARIES {
            std::fs::copy(opt.join("lib").join(library), image.join("lib64").join(library))
                .unwrap_or_else(|error| panic!("the layer has no {library}: {error}"));
        }
        Layer { opt, empty, image }
    })
}

impl Layer {
    /// The environment Lambda gives a function on provided.al2023, with `/opt` here:
    /// its `PATH` but for the image's folders (which here would be this machine's), its
    /// `LD_LIBRARY_PATH`, and the root arm64 programs see (`image` for the function
    /// binaries, which need the image's glibc; empty for the tools).
    pub fn lambda_environment(&self, image: bool) -> Vec<(String, String)> {
        let opt = self.opt.display();
        let root = if image { &self.image } else { &self.empty };
        [
            ("PATH", format!("{opt}/bin")),
            (
                "LD_LIBRARY_PATH",
                format!("/lib64:/usr/lib64:/var/runtime:/var/runtime/lib:/var/task:/var/task/lib:{opt}/lib"),
            ),
            ("QEMU_LD_PREFIX", root.display().to_string()),
            ("LANG", "en_US.UTF-8".to_owned()),
            ("TZ", ":UTC".to_owned()),
        ]
        .map(|(name, value)| (name.to_owned(), value))
        .to_vec()
    }

    /// What the template gives node-worker to reach the layer's tools, with `/opt` here.
    pub fn tool_environment(&self) -> Vec<(String, String)> {
        let opt = self.opt.display();
        [
            ("FFMPEG_PATH", format!("{opt}/bin/ffmpeg")),
            ("FFPROBE_PATH", format!("{opt}/bin/ffprobe")),
            ("YT_DLP_PATH", format!("{opt}/bin/yt-dlp")),
            ("ESPEAK_PATH", format!("{opt}/bin/espeak-ng")),
            ("GENERATION_FONT", format!("{opt}/fonts/DejaVuSans.ttf")),
        ]
        .map(|(name, value)| (name.to_owned(), value))
        .to_vec()
    }

    /// Runs the layer's `tool` through its wrapper, in `folder`, with Lambda's
    /// environment and nothing else; fails the test when it does not end well.
    fn run(&self, tool: &str, args: &[&str], folder: &Path) -> Output {
        let mut command = Command::new(self.opt.join("bin").join(tool));
        command.args(args).current_dir(folder).env_clear().envs(self.lambda_environment(false));
        let output = output_within(command, TOOL_LIMIT);
        assert!(
            output.status.success(),
            "the layer's {tool} {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }
}

/// The folder of the arm64 functions, each `<name>/bootstrap`.
pub fn functions_folder() -> PathBuf {
    std::env::var_os("ARM64_FUNCTIONS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/functions-lambda-test"))
}

/// The arm64 build of a function, as `scripts/build-lambda.sh` (`sam build`) makes it;
/// fails the test when it needs a glibc newer than the function image's.
pub fn function_binary(name: &str) -> PathBuf {
    let path = functions_folder().join(name).join("bootstrap");
    assert!(
        path.is_file(),
        "{} is missing: build it first with scripts/build-lambda.sh --profile lambda-test {name} (./scripts/test.sh does)",
        path.display()
    );
    let glibc = newest_glibc(&path);
    assert!(
        glibc <= IMAGE_GLIBC,
        "{} needs glibc {glibc:?}, newer than provided.al2023's {IMAGE_GLIBC:?}",
        path.display()
    );
    path
}

/// The newest glibc version an ELF file names among the versions it needs.
fn newest_glibc(path: &Path) -> (u32, u32) {
    let mut command = Command::new("readelf");
    command.args(["--version-info", "--wide"]).arg(path);
    let listing = text(&output_within(command, Duration::from_secs(60)).stdout);
    listing
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("GLIBC_2."))
        .filter_map(|minor| minor.split('.').next()?.parse::<u32>().ok())
        .map(|minor| (2, minor))
        .max()
        .unwrap_or_else(|| panic!("{} names no glibc version: {listing}", path.display()))
}

/// Runs `command` to its end, bounded: a process still running after `limit` is killed
/// and fails the test (qemu stuck on a tool must not hang the suite).
pub fn output_within(mut command: Command, limit: Duration) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("starting {command:?}: {error}"));
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(child.wait_with_output()));
    match receiver.recv_timeout(limit) {
        Ok(output) => output.expect("waiting for the process"),
        Err(_) => {
            // SAFETY: kill(2) on the child's pid, which is not reaped before the waiting
            // thread returns.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{command:?} did not end within {limit:?}");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

/// Each tool of the layer runs from the layer alone, with Lambda's environment: ffprobe
/// reads a test video; ffmpeg renders a Reframe with the arguments node-worker gives it
/// (and draws text with the layer's font, as the local generation provider does);
/// espeak-ng speaks a sentence into a WAV as long as this machine's espeak-ng makes it
/// (the same Debian release), without a word of complaint (a missing dictionary is
/// only a message); yt-dlp answers its version on the layer's Python.
#[test]
#[ignore = "needs the arm64 layer and qemu: ./scripts/test.sh builds and runs it (arm64)"]
fn arm64_layer_tools_run_from_the_layer_alone() {
    let layer = layer();
    let folder = tempfile::tempdir().unwrap();
    let work = folder.path();
    ffmpeg_in(
        work,
        &["-f", "lavfi", "-i", "testsrc=duration=2:size=320x240:rate=25", "-f", "lavfi", "-i", "sine=duration=2"]
            .iter()
            .chain(&["-shortest", "-pix_fmt", "yuv420p", "in.mp4"])
            .copied()
            .collect::<Vec<_>>(),
    );

    let version = layer.run("ffmpeg", &["-version"], work);
    println!("layer: {}", text(&version.stdout).lines().next().unwrap_or_default());
    let probed = layer.run(
        "ffprobe",
        &["-v", "error", "-show_entries", "format=duration:stream=codec_name,width,height", "-of", "json", "in.mp4"],
        work,
    );
    let report: Value = serde_json::from_slice(&probed.stdout).expect("ffprobe's JSON");
    assert_eq!(report["streams"][0]["codec_name"], "h264", "{report}");
    assert_eq!(
        (report["streams"][0]["width"].as_u64(), report["streams"][0]["height"].as_u64()),
        (Some(320), Some(240))
    );
    assert_eq!(report["streams"][1]["codec_name"], "aac", "{report}");
    let duration: f64 = report["format"]["duration"].as_str().unwrap().parse().unwrap();
    assert!((duration - 2.0).abs() < 0.1, "{report}");

    let job = RenderJob {
        inputs: vec![RenderInput {
            location: format!("file:{}", work.join("in.mp4").display()),
            duration_ms: 2000,
            width: 320,
            height: 240,
            has_audio: true,
        }],
        edits: vec![Arc::new(ReframeFilter { aspect: (9, 16), pad_color: None })],
        output: work.join("reframed.mp4"),
        budget: Duration::from_secs(120),
        part: RenderPart::Whole,
    };
    let (args, _) = shared::adapters::ffmpeg::arguments(&job).expect("a Reframe's arguments");
    layer.run("ffmpeg", &args.iter().map(String::as_str).collect::<Vec<_>>(), work);
    let Probed { duration, width, height, .. } = probe_file(&work.join("reframed.mp4"));
    assert_eq!((width, height), (136, 240), "9:16 of 320x240");
    assert!((duration - 2.0).abs() < 0.1, "{duration} s");
    let font = format!("drawtext=fontfile={}/fonts/DejaVuSans.ttf:text=layer:fontsize=40", layer.opt.display());
    layer.run("ffmpeg", &["-v", "error", "-i", "in.mp4", "-vf", &font, "-frames:v", "1", "text.png"], work);

    let sentence = "The layer speaks this sentence from its own libraries and data.";
    let spoken = layer.run("espeak-ng", &["-v", "en", "-w", "arm64.wav", sentence], work);
    assert_eq!(text(&spoken.stderr), "", "espeak-ng complained");
    espeak_here(work, sentence);
    let (arm64, here) = (wav_seconds(&work.join("arm64.wav")), wav_seconds(&work.join("here.wav")));
    println!("layer: espeak-ng spoke {arm64:.3} s (this machine's: {here:.3} s)");
    assert!(arm64 > 2.0 && (arm64 - here).abs() < 0.05, "the layer's WAV is {arm64} s, this machine's {here} s");

    let yt_dlp = text(&layer.run("yt-dlp", &["--version"], work).stdout);
    println!("layer: yt-dlp {yt_dlp}");
    let parts: Vec<&str> = yt_dlp.split('.').collect();
    assert!(parts.len() >= 3 && parts.iter().all(|part| part.parse::<u32>().is_ok()), "a version: {yt_dlp}");
}

/// A layer whose packages cannot be fetched (Debian's mirror unreachable: apt goes
/// through a proxy at a closed port) is no layer: `scripts/build-layer.sh` fails, says
/// what and where apt's log is, and leaves no zip under the final name, not even the one
/// an earlier build left there.
#[test]
#[ignore = "needs the layer's host tools and qemu: ./scripts/test.sh runs it (arm64)"]
fn arm64_layer_build_whose_packages_cannot_be_fetched_fails_clearly_and_leaves_no_zip() {
    let folder = tempfile::tempdir().unwrap();
    let out = folder.path().join("ffmpeg-layer.zip");
    std::fs::write(&out, "an earlier build's layer").unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut command = Command::new(workspace().join("scripts/build-layer.sh"));
    // apt takes the lowercase variables, https_proxy for https sources, and skips the
    // proxy for the hosts no_proxy names.
    let proxy = format!("http://{closed}");
    command.arg("--out").arg(&out).env("http_proxy", &proxy).env("https_proxy", &proxy).env_remove("no_proxy");
    let output = output_within(command, TOOL_LIMIT);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let said = stderr.lines().last().unwrap_or_default();
    assert!(said.starts_with("[build-layer] Debian's package index could not be fetched: Err:"), "{stderr}");
    assert!(said.contains(&closed.to_string()) && said.contains("apt-update.log"), "{stderr}");
    assert!(!out.exists(), "the earlier zip is left under the final name");
    let left: Vec<_> = std::fs::read_dir(folder.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left beside it: {left:?}");
}

/// Two builds of the layer from the same packages are the same file: the layer is built
/// again, into a file of its own, and its bytes are the first build's (the script zips
/// sorted names with fixed times, and compiles Python without timestamps). Should
/// Debian publish another version of a package between the two builds, they are not
/// the same packages, and the test says so and checks nothing more.
#[test]
#[ignore = "needs the layer's host tools and qemu: ./scripts/test.sh runs it (arm64)"]
fn arm64_rebuilt_layer_is_the_same_file() {
    let first = layer_zip();
    let packages = workspace().join(".local/layer/arm64/packages.txt");
    let read = |path: &Path| std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let packages_before = read(&packages);
    let folder = tempfile::tempdir().unwrap();
    let again = folder.path().join("ffmpeg-layer-arm64.zip");
    let mut command = Command::new(workspace().join("scripts/build-layer.sh"));
    command.arg("--out").arg(&again);
    let output = output_within(command, Duration::from_secs(900));
    assert!(output.status.success(), "the second build failed: {}", text(&output.stderr));
    if read(&packages) != packages_before {
        println!("layer: Debian published other packages between the builds; not compared");
        return;
    }
    let (first_bytes, again_bytes) = (read(&first), read(&again));
    if first_bytes != again_bytes {
        let listing = |zip: &Path| -> std::collections::BTreeSet<String> {
            let mut command = Command::new("unzip");
            command.arg("-lv").arg(zip);
            // Length, method, size, ratio, date, time, CRC-32, name: the name and its CRC.
            let lines = text(&output_within(command, TOOL_LIMIT).stdout);
            lines
                .lines()
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    (fields.len() == 8).then(|| format!("{} {}", fields[7], fields[6]))
                })
                .collect()
        };
        let (before, after) = (listing(&first), listing(&again));
        let differ: Vec<_> = before.symmetric_difference(&after).take(20).collect();
        panic!(
            "the layer built again differs from the first build ({} and {} bytes): {differ:?}",
            first_bytes.len(),
            again_bytes.len()
        );
    }
}

/// This machine's espeak-ng speaks `sentence` into `here.wav` in `folder`.
fn espeak_here(folder: &Path, sentence: &str) {
    let status = Command::new("espeak-ng")
        .args(["-v", "en", "-w", "here.wav", sentence])
        .current_dir(folder)
        .status()
        .expect("espeak-ng is installed (infra/ffmpeg.sh)");
    assert!(status.success());
}

/// A WAV file's length in seconds, as ffprobe reads it.
fn wav_seconds(path: &Path) -> f64 {
    let output = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("ffprobe");
    assert!(output.status.success(), "{}: {}", path.display(), text(&output.stderr));
    text(&output.stdout).parse().unwrap_or_else(|_| panic!("a duration: {}", text(&output.stdout)))
}
