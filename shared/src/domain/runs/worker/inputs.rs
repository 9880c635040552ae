//! The Video Input task: the bound input, downloaded when it is a URL (or fetched from
//! a video-sharing site), probed, and cut to its clip window.

use std::path::Path;
use std::sync::Arc;

use super::Worker;
use super::{Stop, TaskOutput, MAX_DOWNLOAD_BYTES, MAX_INPUT_MS};
use crate::domain::media::ports::{DownloadError, WEB_PAGE_REFUSAL};
use crate::domain::media::{until_cancelled, Edit, MediaType, ProbeReport, RenderInput};
use crate::domain::nodes::clip::ClipFilter;
use crate::domain::runs::{InputSource, MediaFile, Run};

impl Worker {
    /// A Video Input task: the bound input, downloaded when it is a URL, cut to its
    /// window. A source already in the output format and not cut is used as it is.
    pub(super) async fn input_task(
        &self,
        run: &Run,
        input: usize,
        scratch: &Path,
        output: &Path,
        stop: &Stop,
    ) -> anyhow::Result<TaskOutput> {
        let bound = &run.inputs[input];
        let (location, stored) = match &bound.source {
            InputSource::Upload { key, version, .. } => {
                (self.blobs.read_location(key, version.as_deref()).await?, Some((key.clone(), version.clone())))
            }
            InputSource::Render { key, version, .. } | InputSource::Asset { key, version, .. } => {
                (self.blobs.read_location(key, version.as_deref()).await?, Some((key.clone(), version.clone())))
            }
            // Streamed into the media store, never whole on this machine: it is probed,
            // and cut, by ranged reads of the stored object.
            InputSource::Url { url } => match self.store_download(run, input, url, stop).await {
                Ok(key) => (self.blobs.read_location(&key, None).await?, Some((key, None))),
                Err(answer) => return Ok(answer),
            },
            // yt-dlp writes files: a site's video is downloaded to the task's scratch folder.
            InputSource::Site { url, .. } => match self.download(url, scratch, stop).await {
                Ok(location) => (location, None),
                Err(answer) => return Ok(answer),
            },
        };
        let report = match self.probe.probe(&location).await {
            Ok(report) => report,
            Err(error) => {
                return Ok(TaskOutput::Refused(format!("the input video is not readable media: {error}"), None))
            }
        };
        let (facts, ready) = match facts_of(&report) {
            Ok(facts) => facts,
            Err(problem) => return Ok(TaskOutput::Refused(format!("the input is not usable: {problem}"), None)),
        };
        if facts.duration_ms > MAX_INPUT_MS {
            return Ok(TaskOutput::Refused(
                format!(
                    "the input video is {} s long; at most 5 hours (18000 s) are accepted",
                    facts.duration_ms / 1000
                ),
                None,
            ));
        }
        let start = bound.clip_start_ms.unwrap_or(0);
        if start >= facts.duration_ms {
            return Ok(TaskOutput::Refused(
                format!("the clip window starts at {start} ms, after the end of the video ({} ms)", facts.duration_ms),
                None,
            ));
        }
        let window = start > 0 || bound.clip_end_ms.is_some_and(|end| end < facts.duration_ms);
        if !window && ready {
            if let Some((key, version)) = stored {
                return Ok(TaskOutput::Existing(MediaFile { key, version, ..facts }));
            }
        }
        let edits: Vec<Edit> =
            if window { vec![Arc::new(ClipFilter { start_ms: start, end_ms: bound.clip_end_ms })] } else { Vec::new() };
        let input = RenderInput {
            location,
            duration_ms: facts.duration_ms,
            width: facts.width,
            height: facts.height,
            has_audio: facts.has_audio,
        };
        let plan = super::EditPlan { inputs: vec![input], edits, edit_nodes: Vec::new() };
        self.render(plan, output, stop, crate::domain::media::RenderPart::Whole).await
    }

    /// Downloads a video-sharing site's video (yt-dlp) into the task's scratch folder:
    /// its location, or the task's answer when it cannot.
    async fn download(&self, url: &str, scratch: &Path, stop: &Stop) -> Result<String, TaskOutput> {
        let path = scratch.join("download");
        let download = self.sites.videos.download(url, &path, MAX_DOWNLOAD_BYTES);
        match self.within_task(download, stop).await? {
            Some(Ok(_)) => Ok(format!("file:{}", path.display())),
            Some(Err(error)) => Err(download_answer(url, true, &error)),
            None => Err(self.download_too_slow(url)),
        }
    }

    /// Streams a URL input into the media store as the object it will be read from
    /// (multipart on S3): its key, or the task's answer when it cannot.
    async fn store_download(&self, run: &Run, input: usize, url: &str, stop: &Stop) -> Result<String, TaskOutput> {
        let key =
            format!("runs/{}/{}/input-{input}-{}.mp4", run.organization_id, run.id, uuid::Uuid::new_v4().simple());
        let stored = async {
            let chunks = self.downloader.open(url, MAX_DOWNLOAD_BYTES).await.map_err(anyhow::Error::new)?;
            self.blobs.put_stream(&key, chunks, "video/mp4").await
        };
        match self.within_task(stored, stop).await? {
            Some(Ok(_)) => Ok(key),
            Some(Err(error)) => Err(match error.downcast_ref::<DownloadError>() {
                Some(error) => download_answer(url, false, error),
                None => TaskOutput::Failed(format!("{url} could not be downloaded: {error:#}")),
            }),
            None => Err(self.download_too_slow(url)),
        }
    }

    /// `work` within the task's time (None when it ran out), or the task's answer when
    /// its run was cancelled first.
    async fn within_task<T>(
        &self,
        work: impl std::future::Future<Output = T>,
        stop: &Stop,
    ) -> Result<Option<T>, TaskOutput> {
        tokio::select! {
            done = tokio::time::timeout_at(stop.deadline, work) => Ok(done.ok()),
            () = until_cancelled(stop.cancelled.clone()) => Err(TaskOutput::Cancelled),
        }
    }

    fn download_too_slow(&self, url: &str) -> TaskOutput {
        TaskOutput::Failed(format!(
            "{url} could not be downloaded within the task's time limit of {} s",
            self.task_budget.as_secs()
        ))
    }
}

/// The task's answer to a download that failed (`site`: a video-sharing site's, by yt-dlp).
fn download_answer(url: &str, site: bool, error: &DownloadError) -> TaskOutput {
    match error {
        DownloadError::Refused(problem) => {
            let message = match site {
                // yt-dlp's reasons name the page already.
                true if problem != WEB_PAGE_REFUSAL => problem.clone(),
                false if problem == WEB_PAGE_REFUSAL => {
                    format!("{url}: {problem}; give a video-sharing site's page in youtube_url_inputs")
                }
                _ => format!("{url}: {problem}"),
            };
            TaskOutput::Refused(message, None)
        }
        DownloadError::Failed(error) => TaskOutput::Failed(format!("{url} could not be downloaded: {error:#}")),
    }
}

/// What the engine tracks of a probed video, and whether it is already in the output
/// format (MP4, H.264, AAC or no sound) so that it can be used without re-encoding.
/// What a probed file holds, when it holds `media`: an image's size, a sound's length,
/// or a video's facts (see [`facts_of`]).
pub(super) fn facts_of_media(report: &ProbeReport, media: MediaType) -> Result<MediaFile, String> {
    let duration_ms = report.duration_seconds.map(|seconds| (seconds * 1000.0).round() as u64).unwrap_or(0);
    let blank = MediaFile {
        key: String::new(),
        version: None,
        duration_ms: 0,
        width: 0,
        height: 0,
        has_audio: false,
        media,
        generated: None,
    };
    match media {
        // What a provider made is delivered as it is: it must be what renders are.
        MediaType::Video => match facts_of(report)? {
            (facts, true) => Ok(facts),
            (_, false) => Err("it is not an H.264/AAC MP4".into()),
        },
        MediaType::Image => {
            let picture = report.streams.iter().find(|stream| stream.codec_type == "video");
            match picture.map(|stream| (stream.width, stream.height)) {
                Some((Some(width), Some(height))) => Ok(MediaFile { width, height, ..blank }),
                _ => Err("it has no picture of a known size".into()),
            }
        }
        MediaType::Audio => {
            if !report.streams.iter().any(|stream| stream.codec_type == "audio") {
                return Err("it has no audio stream".into());
            }
            if duration_ms == 0 {
                return Err("its duration is unknown or zero".into());
            }
            Ok(MediaFile { duration_ms, has_audio: true, ..blank })
        }
    }
}

pub(super) fn facts_of(report: &ProbeReport) -> Result<(MediaFile, bool), String> {
    let video = report
        .streams
        .iter()
        .find(|stream| stream.codec_type == "video" && !stream.attached_pic)
        .ok_or("it has no video stream")?;
    let audio = report.streams.iter().find(|stream| stream.codec_type == "audio");
    let duration_ms = report.duration_seconds.map(|seconds| (seconds * 1000.0).round() as u64).unwrap_or(0);
    if duration_ms == 0 {
        return Err("its duration is unknown or zero".into());
    }
    let (Some(width), Some(height)) = (video.width, video.height) else {
        return Err("its picture size is unknown".into());
    };
    let ready = report.format_name.split(',').any(|name| name == "mp4")
        && video.codec_name == "h264"
        && audio.is_none_or(|audio| audio.codec_name == "aac");
    let file = MediaFile {
        key: String::new(),
        version: None,
        duration_ms,
        width,
        height,
        has_audio: audio.is_some(),
        media: MediaType::Video,
        generated: None,
    };
    Ok((file, ready))
}
