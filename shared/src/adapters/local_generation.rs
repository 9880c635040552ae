//! The local generation providers (the default): real, deterministic media made on this
//! machine with ffmpeg and espeak-ng, no network. The same request always gives the same
//! bytes (ffmpeg runs with bit-exact flags; every choice is seeded by the prompt).
//! - images: a PNG of the size asked, coloured by the prompt, with the prompt drawn in;
//! - video: an H.264/AAC MP4 of the size and length asked, the prompt drawn in and
//!   moving down the picture over a tone;
//! - music: a chord progression (I–V–vi–IV) of synthesized tones, key and tempo from the
//!   prompt; sound effects: repeated decaying sweeps;
//! - speech: espeak-ng;
//! - avatars: the reference video looped or cut to the speech, or the reference picture
//!   slowly zoomed, carrying the speech.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::ffmpeg::{protocols_of, Ffmpeg, AUDIO_ENCODER, MEDIA_FORMATS, VIDEO_ENCODER};
use crate::domain::generation::{
    AudioMode, AudioRequest, AvatarReference, AvatarRequest, GenerationError, Generator, Generators, ImageRequest,
    SpeechRequest, Stop, VideoRequest,
};
use crate::domain::media::MediaError;

/// The name local providers are cited by in `sources`.
pub const LOCAL: &str = "local";

/// Most lines of a prompt drawn on a picture (the rest is cut with "…").
const MAX_LINES: usize = 8;

/// Flags that keep ffmpeg's output free of anything but the media (no version string,
/// no time): the same request gives the same bytes. The encoder's thread count is fixed
/// too: x264's choices (and the options it writes into the stream) follow it, so a
/// count taken from the machine's cores would make other bytes on another machine.
const BIT_EXACT: [&str; 8] =
    ["-fflags", "+bitexact", "-flags:v", "+bitexact", "-flags:a", "+bitexact", "-threads", "4"];

/// The local providers of every kind.
#[derive(Clone)]
pub struct LocalGenerator {
    ffmpeg: std::sync::Arc<Ffmpeg>,
    espeak: PathBuf,
    font: PathBuf,
}

impl LocalGenerator {
    pub fn new(ffmpeg: impl Into<PathBuf>, espeak: impl Into<PathBuf>, font: impl Into<PathBuf>) -> Self {
        Self { ffmpeg: std::sync::Arc::new(Ffmpeg::new(ffmpeg)), espeak: espeak.into(), font: font.into() }
    }

    /// These local providers as the provider of every kind (configuration may then
    /// give a kind to an HTTP adapter instead). A new kind's local provider is one more
    /// line here.
    pub fn providers(self) -> Generators {
        let local = std::sync::Arc::new(self);
        Generators::default()
            .with::<ImageRequest>(local.clone())
            .with::<VideoRequest>(local.clone())
            .with::<AudioRequest>(local.clone())
            .with::<SpeechRequest>(local.clone())
            .with::<AvatarRequest>(local)
    }

    /// Runs ffmpeg with `args` in `folder` (where the text files are) within `stop`.
    async fn ffmpeg(&self, args: Vec<String>, folder: &Path, stop: &Stop) -> Result<(), GenerationError> {
        let mut all: Vec<String> = ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"].map(String::from).to_vec();
        all.extend(args);
        let budget = stop.remaining();
        self.ffmpeg.run(&all, Some(folder), budget, stop.cancelled.clone()).await.map_err(|error| match error {
            MediaError::Cancelled => GenerationError::Cancelled,
            MediaError::TimedOut(limit) => GenerationError::TimedOut { provider: LOCAL.into(), limit },
            MediaError::Unavailable(error) => GenerationError::Unavailable(error),
            other => GenerationError::Provider { provider: LOCAL.into(), message: other.to_string() },
        })
    }

    /// The drawtext filter that writes the text of `file` (in the run folder) centred
    /// horizontally at height `y`, `size` pixels high.
    fn drawtext(&self, file: &str, size: u32, y: &str) -> String {
        // [`Self::check_font`] refused the characters a filter graph would read as syntax.
        format!(
            "drawtext=fontfile={}:textfile={file}:expansion=none:fontcolor=white:fontsize={size}:\
             line_spacing={}:box=1:boxcolor=black@0.35:boxborderw={}:x=(w-text_w)/2:y={y}",
            self.font.display(),
            size / 3,
            size / 2,
        )
    }

    /// Checks that the font exists (drawtext's own error would not say what to install)
    /// and that its path needs no quoting in a filter graph.
    fn check_font(&self) -> Result<(), GenerationError> {
        let path = self.font.display().to_string();
        if let Some(bad) = path.chars().find(|c| matches!(c, '\'' | '\\' | ':' | ',' | ';' | '[' | ']')) {
            return Err(GenerationError::Unavailable(anyhow::anyhow!(
                "the font path {path} has a {bad:?}, which ffmpeg's filters would read as syntax: \
                 set GENERATION_FONT to a path without it"
            )));
        }
        if self.font.is_file() {
            return Ok(());
        }
        Err(GenerationError::Unavailable(anyhow::anyhow!(
            "the font {} is missing: install Debian's fonts-dejavu-core (or set GENERATION_FONT)",
            self.font.display()
        )))
    }
}

/// The folder a provider works in: the output's own.
fn folder_of(output: &Path) -> &Path {
    output.parent().unwrap_or(Path::new("."))
}

/// Bytes that follow from `text` alone (a seed for colours, keys and tempos).
fn seed(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// A dark colour of the seed, as ffmpeg writes colours (`0xRRGGBB`).
fn colour(seed: &[u8; 32]) -> String {
    format!("0x{:02x}{:02x}{:02x}", 40 + seed[0] % 120, 40 + seed[1] % 120, 40 + seed[2] % 120)
}

/// `prompt` broken into lines of at most `width` characters, at most [`MAX_LINES`] of them.
fn wrapped(prompt: &str, width: usize) -> String {
    let width = width.max(8);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in prompt.split_whitespace() {
        let mut word: String = word.to_owned();
        while word.chars().count() > width {
            let head: String = word.chars().take(width).collect();
            word = word.chars().skip(width).collect();
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(head);
        }
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    if lines.len() > MAX_LINES {
        lines.truncate(MAX_LINES);
        if let Some(last) = lines.last_mut() {
            last.push('…');
        }
    }
    lines.join("\n")
}

/// Writes the prompt, wrapped for a picture `width` wide in text `size` high, to a file
/// in `folder` named `name`.
async fn prompt_file(folder: &Path, name: &str, prompt: &str, width: u32, size: u32) -> Result<(), GenerationError> {
    let columns = (f64::from(width) * 0.85 / (f64::from(size) * 0.6)) as usize;
    tokio::fs::write(folder.join(name), wrapped(prompt, columns))
        .await
        .map_err(|error| GenerationError::Unavailable(error.into()))
}

fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| (*arg).to_owned()).collect()
}

#[async_trait]
impl Generator<ImageRequest> for LocalGenerator {
    fn name(&self) -> &str {
        LOCAL
    }

    async fn generate(&self, request: &ImageRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        self.check_font()?;
        let folder = folder_of(output);
        let size = (request.width.min(request.height) / 16).max(12);
        prompt_file(folder, "prompt.txt", &request.prompt, request.width, size).await?;
        let seed = seed(&request.prompt);
        let source = format!("color=c={}:s={}x{}:d=1", colour(&seed), request.width, request.height);
        let filter = format!("{},format=rgb24", self.drawtext("prompt.txt", size, "(h-text_h)/2"));
        let mut args = strings(&["-f", "lavfi", "-i", &source, "-vf", &filter, "-frames:v", "1"]);
        args.extend(strings(&BIT_EXACT));
        args.push(output.display().to_string());
        self.ffmpeg(args, folder, stop).await
    }
}

#[async_trait]
impl Generator<VideoRequest> for LocalGenerator {
    fn name(&self) -> &str {
        LOCAL
    }

    async fn generate(&self, request: &VideoRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        self.check_font()?;
        let folder = folder_of(output);
        let (width, height, duration) = (request.width, request.height, request.duration_s.max(1));
        let size = (width.min(height) / 14).max(12);
        prompt_file(folder, "prompt.txt", &request.prompt, width, size).await?;
        let seed = seed(&format!("{}\n{}", request.model, request.prompt));
        let tone = 220 + u32::from(seed[3]) * 2;
        let video = format!("color=c={}:s={width}x{height}:r=30:d={duration}", colour(&seed));
        let audio = format!("sine=frequency={tone}:sample_rate=48000:duration={duration}");
        // The text travels from the top tenth to below the middle: visible motion.
        let y = format!("h*0.1+(h*0.5)*t/{duration}");
        let graph = format!(
            "[0:v]{},format=yuv420p[v];[1:a]volume=0.15,aformat=channel_layouts=stereo[a]",
            self.drawtext("prompt.txt", size, &y)
        );
        let mut args = strings(&["-f", "lavfi", "-i", &video, "-f", "lavfi", "-i", &audio]);
        args.extend(strings(&["-filter_complex", &graph, "-map", "[v]", "-map", "[a]"]));
        args.extend(strings(&VIDEO_ENCODER));
        args.extend(strings(&AUDIO_ENCODER));
        args.extend(strings(&["-t", &duration.to_string(), "-movflags", "+faststart"]));
        args.extend(strings(&BIT_EXACT));
        args.push(output.display().to_string());
        self.ffmpeg(args, folder, stop).await
    }
}

/// The aevalsrc expression of music: a I–V–vi–IV progression of triads in the seed's
/// key, one chord every `beat` seconds, each struck and decaying.
fn music_expression(seed: &[u8; 32]) -> String {
    const ROOTS: [f64; 5] = [220.0, 246.94, 261.63, 293.66, 329.63];
    let root = ROOTS[usize::from(seed[4]) % ROOTS.len()];
    let beat = 1.5 + f64::from(seed[5] % 5) * 0.25;
    // Chord roots in semitones above the key, and whether the chord is minor.
    let chords = [(0, false), (7, false), (9, true), (5, false)];
    let note = |semitones: i32| root * 2f64.powf(f64::from(semitones) / 12.0);
    let envelope = format!("(1-exp(-30*mod(t,{beat})))*exp(-1.2*mod(t,{beat}))");
    let mut expression = String::from("0");
    for (index, (offset, minor)) in chords.iter().enumerate().rev() {
        let third = if *minor { 3 } else { 4 };
        let tones: Vec<String> =
            [0, third, 7, 12].iter().map(|interval| format!("sin(2*PI*{:.3}*t)", note(offset + interval))).collect();
        expression = format!("if(eq(mod(floor(t/{beat}),4),{index}),{},{expression})", tones.join("+"));
    }
    format!("0.12*({expression})*{envelope}")
}

/// The aevalsrc expression of a sound effect: a sweep from the seed's pitch that
/// decays, repeated every `period` seconds.
fn effect_expression(seed: &[u8; 32]) -> String {
    let start = 120 + u32::from(seed[6]) * 3;
    let sweep = 400 + u32::from(seed[7]) * 8;
    let period = 0.6 + f64::from(seed[8] % 8) * 0.1;
    let local = format!("mod(t,{period:.2})");
    format!("0.5*sin(2*PI*({start}+{sweep}*{local})*{local})*exp(-6*{local})")
}

#[async_trait]
impl Generator<AudioRequest> for LocalGenerator {
    fn name(&self) -> &str {
        LOCAL
    }

    async fn generate(&self, request: &AudioRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        let seed = seed(&request.prompt);
        let expression = match request.mode {
            AudioMode::Music => music_expression(&seed),
            AudioMode::SoundEffect => effect_expression(&seed),
        };
        let length = seconds(request.length_ms);
        let source = format!("aevalsrc=exprs='{expression}':s=48000:d={length}");
        let mut args = strings(&["-f", "lavfi", "-i", &source, "-ac", "2"]);
        args.extend(strings(&AUDIO_ENCODER));
        args.extend(strings(&["-t", &length, "-movflags", "+faststart"]));
        args.extend(strings(&BIT_EXACT));
        args.push(output.display().to_string());
        self.ffmpeg(args, folder_of(output), stop).await
    }
}

#[async_trait]
impl Generator<SpeechRequest> for LocalGenerator {
    fn name(&self) -> &str {
        LOCAL
    }

    async fn generate(&self, request: &SpeechRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        let folder = folder_of(output);
        let script = folder.join("script.txt");
        tokio::fs::write(&script, &request.text).await.map_err(|error| GenerationError::Unavailable(error.into()))?;
        let mut command = super::child::command(&self.espeak);
        command.args(["-v", "en-us", "-s", "160", "-w"]).arg(output).arg("-f").arg(&script).stdout(Stdio::null());
        let limit = stop.remaining();
        let ended = super::child::run_to_end(command, limit, stop.cancelled.clone()).await.map_err(|error| {
            GenerationError::Unavailable(anyhow::anyhow!(
                "running {}: {error} (install Debian's espeak-ng, or set ESPEAK_PATH)",
                self.espeak.display()
            ))
        })?;
        match ended {
            super::child::Ended::Exited { success: true, .. } => Ok(()),
            super::child::Ended::Exited { success: false, stderr } => Err(GenerationError::Provider {
                provider: LOCAL.into(),
                message: format!("espeak-ng could not speak the script: {}", stderr.trim()),
            }),
            super::child::Ended::TimedOut => Err(GenerationError::TimedOut { provider: LOCAL.into(), limit }),
            super::child::Ended::Cancelled => Err(GenerationError::Cancelled),
        }
    }
}

#[async_trait]
impl Generator<AvatarRequest> for LocalGenerator {
    fn name(&self) -> &str {
        LOCAL
    }

    async fn generate(&self, request: &AvatarRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        let length = seconds(request.speech_ms);
        let (width, height) = (request.width, request.height);
        let mut args: Vec<String> = Vec::new();
        let filter = match &request.reference {
            AvatarReference::Video { location } => {
                // Looped when the speech is longer, cut when shorter.
                args.extend(strings(&["-stream_loop", "-1"]));
                args.extend(input(location));
                format!("[0:v]scale={width}:{height},setsar=1,fps=30,format=yuv420p[v]")
            }
            AvatarReference::Image { location } => {
                args.extend(input(location));
                // A slow zoom towards the centre over the whole speech, at 30 fps.
                let frames = request.speech_ms * 30 / 1000 + 1;
                format!(
                    "[0:v]scale={width}:{height},setsar=1,\
                     zoompan=z='min(1+0.10*on/{frames},1.10)':d={frames}:x='iw/2-(iw/zoom/2)':\
                     y='ih/2-(ih/zoom/2)':s={width}x{height}:fps=30,format=yuv420p[v]"
                )
            }
        };
        args.extend(strings(&["-protocol_whitelist", "file", "-i", &request.speech.display().to_string()]));
        let graph = format!("{filter};[1:a]aformat=sample_rates=48000:channel_layouts=stereo[a]");
        args.extend(strings(&["-filter_complex", &graph, "-map", "[v]", "-map", "[a]"]));
        args.extend(strings(&VIDEO_ENCODER));
        args.extend(strings(&AUDIO_ENCODER));
        args.extend(strings(&["-t", &length, "-movflags", "+faststart"]));
        args.extend(strings(&BIT_EXACT));
        args.push(output.display().to_string());
        self.ffmpeg(args, folder_of(output), stop).await
    }
}

/// The arguments that open a reference file (what it may read, then `-i`).
fn input(location: &str) -> Vec<String> {
    strings(&["-protocol_whitelist", protocols_of(location), "-format_whitelist", MEDIA_FORMATS, "-i", location])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_wrap_at_words_and_stop_after_eight_lines() {
        assert_eq!(wrapped("a cat on a mat", 8), "a cat on\na mat");
        let long = "word ".repeat(200);
        let text = wrapped(&long, 20);
        assert_eq!(text.lines().count(), MAX_LINES);
        assert!(text.ends_with('…'));
        assert_eq!(wrapped(&"x".repeat(20), 8), "xxxxxxxx\nxxxxxxxx\nxxxx");
    }

    #[test]
    fn the_same_prompt_gives_the_same_choices() {
        assert_eq!(music_expression(&seed("calm piano")), music_expression(&seed("calm piano")));
        assert_ne!(music_expression(&seed("calm piano")), music_expression(&seed("loud drums")));
        assert_eq!(colour(&seed("a")), colour(&seed("a")));
    }
}
