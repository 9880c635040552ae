//! The media probe: runs `ffprobe` on a local path or a presigned URL and reads its JSON.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use serde::Deserialize;

use super::ffmpeg::{protocols_of, MEDIA_FORMATS};
use crate::core::retry::Unavailable;
use crate::domain::media::ports::MediaProbe;
use crate::domain::media::ports::ProbeError;
use crate::domain::media::{ProbeReport, ProbedStream};

/// Longest a probe may take: inside API Gateway's 30 s, so that a slow read ends as an
/// error the caller sees rather than a gateway timeout. A remote read of a large file
/// fetches only its headers (and the index at its end).
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// ffprobe's own limit on one network read, in microseconds.
const READ_TIMEOUT_MICROS: &str = "10000000";
/// `ffprobe` as a child process.
pub struct Ffprobe {
    program: PathBuf,
}

impl Ffprobe {
    /// Uses the given program, e.g. `ffprobe` on the PATH or `/opt/bin/ffprobe` in a layer.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self { program: program.into() }
    }
}

#[derive(Deserialize)]
struct Output {
    #[serde(default)]
    streams: Vec<Stream>,
    format: Option<Format>,
}

#[derive(Deserialize)]
struct Stream {
    #[serde(default)]
    codec_type: String,
    #[serde(default)]
    codec_name: String,
    width: Option<u32>,
    height: Option<u32>,
    /// `30000/1001`; `0/0` when the stream has none.
    r_frame_rate: Option<String>,
    #[serde(default)]
    disposition: Disposition,
}

/// A frame rate as ffprobe prints it (`30000/1001`), when it is one.
fn frame_rate(text: &str) -> Option<(u32, u32)> {
    let (num, den) = text.split_once('/')?;
    let rate = (num.parse().ok()?, den.parse().ok()?);
    (rate.0 > 0 && rate.1 > 0).then_some(rate)
}

#[derive(Default, Deserialize)]
struct Disposition {
    #[serde(default)]
    attached_pic: u8,
}

#[derive(Deserialize)]
struct Format {
    #[serde(default)]
    format_name: String,
    duration: Option<String>,
}

#[async_trait]
impl MediaProbe for Ffprobe {
    async fn probe(&self, location: &str) -> Result<ProbeReport, ProbeError> {
        let protocols = protocols_of(location);
        let child = super::child::command(&self.program)
            .args(["-v", "error", "-rw_timeout", READ_TIMEOUT_MICROS])
            .args(["-protocol_whitelist", protocols, "-format_whitelist", MEDIA_FORMATS])
            .args(["-print_format", "json", "-show_format", "-show_streams", location])
            .stdout(Stdio::piped())
            .output();
        let output = match tokio::time::timeout(PROBE_TIMEOUT, child).await {
            Err(_) => {
                // A slow read (of a presigned URL, say) may well succeed if tried again.
                let error = Unavailable(format!("ffprobe took longer than {PROBE_TIMEOUT:?} to read the file"));
                return Err(ProbeError::Unavailable(error.into()));
            }
            Ok(Err(error)) => {
                let context = format!("running {}", self.program.display());
                return Err(ProbeError::Unavailable(anyhow::Error::new(error).context(context)));
            }
            Ok(Ok(output)) => output,
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            // The last line is ffprobe's verdict; earlier ones repeat the location.
            let reason = stderr.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("ffprobe failed");
            let reason = reason.strip_prefix(location).map_or(reason, |rest| rest.trim_start_matches(':')).trim();
            return Err(ProbeError::Unreadable(reason.to_owned()));
        }
        let parsed: Output = serde_json::from_slice(&output.stdout)
            .context("ffprobe printed JSON that could not be read")
            .map_err(ProbeError::Unavailable)?;
        let format = parsed.format.ok_or_else(|| ProbeError::Unreadable("no container format found".into()))?;
        Ok(ProbeReport {
            format_name: format.format_name,
            duration_seconds: format.duration.and_then(|text| text.parse().ok()),
            streams: parsed
                .streams
                .into_iter()
                .map(|stream| ProbedStream {
                    codec_type: stream.codec_type,
                    codec_name: stream.codec_name,
                    width: stream.width,
                    height: stream.height,
                    frame_rate: stream.r_frame_rate.as_deref().and_then(frame_rate),
                    attached_pic: stream.disposition.attached_pic == 1,
                })
                .collect(),
        })
    }
}
