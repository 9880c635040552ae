//! Running one task message: claim the attempt, do the media work in a scratch folder,
//! store the files, then record the result — each step idempotent, so a duplicate
//! message does nothing and a worker that dies leaves a task that runs again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::edits::{placements, timeline};
use super::engine::{Claim, Delivered};
use super::events::Notifier;
use super::service::{change_run, send_tasks, RunError};
use super::{InputSource, MediaFile, MediaId, MediaKind, MediaRecord, Run, TaskSource};
use crate::core::queue::Queue;
use crate::core::retry::RUN_UPDATE_CONFLICTS;
use crate::domain::media::ports::BlobStore;
use crate::domain::media::ports::DownloadError;
use crate::domain::media::ports::Downloader;
use crate::domain::media::ports::MediaProbe;
use crate::domain::media::ports::MediaToolkit;
use crate::domain::media::ports::WEB_PAGE_REFUSAL;
use crate::domain::media::ProbeReport;
use crate::domain::media::{until_cancelled, Edit, MediaError, RenderInput, RenderJob};
use crate::domain::nodes::EditContext;
use crate::domain::runs::ports::RunRepo;
use crate::domain::runs::ports::TaskMessage;
use crate::domain::sites::Sites;
use crate::domain::time::Clock;
use crate::domain::webhooks::ports::WebhookRepo;
use crate::domain::webhooks::{DeliveryState, WebhookMessage};

/// Largest URL input (the contract's limit).
pub const MAX_DOWNLOAD_BYTES: u64 = 5 * 1024 * 1024 * 1024;
/// Longest input video (the contract's limit).
pub const MAX_INPUT_MS: u64 = 5 * 60 * 60 * 1000;
/// How often a running task checks whether its run was cancelled.
pub const CANCEL_POLL: Duration = Duration::from_millis(500);

/// What a worker needs.
#[derive(Clone)]
pub struct Worker {
    pub runs: Arc<dyn RunRepo>,
    pub queue: Arc<dyn Queue<TaskMessage>>,
    pub blobs: Arc<dyn BlobStore>,
    pub toolkit: Arc<dyn MediaToolkit>,
    pub probe: Arc<dyn MediaProbe>,
    pub downloader: Arc<dyn Downloader>,
    /// Video-sharing sites' videos (yt-dlp).
    pub sites: Sites,
    pub clock: Arc<dyn Clock>,
    /// Records the runs' webhook events.
    pub notifier: Notifier,
    /// The delivery log, to queue again deliveries a stopped worker recorded but never queued.
    pub deliveries: Arc<dyn WebhookRepo>,
    /// Longest one task's media work may take.
    pub task_budget: Duration,
    /// Folder for scratch files (a folder per task inside it).
    pub scratch: PathBuf,
}

/// How a task's work ended.
enum Outcome {
    Done {
        file: MediaFile,
        delivered: Option<Delivered>,
        media: Vec<MediaRecord>,
    },
    /// Failed, with the message and the node (of the run's nodes) it is about, if one.
    Failed(String, Option<usize>),
    Cancelled,
}

impl Worker {
    /// A claim is held this long: the work's budget and time to store its files.
    pub fn lease(&self) -> Duration {
        self.task_budget + Duration::from_secs(120)
    }

    /// Handles one message. Ok means the message is done with (worked, or nothing to
    /// do); an error means it should be delivered again later.
    pub async fn process(&self, message: TaskMessage) -> anyhow::Result<()> {
        let TaskMessage { organization_id: organization, run_id, task, attempt } = message;
        let now = self.clock.now();
        let lease = self.lease();
        let mut outcome = None;
        let mut resend: Vec<TaskMessage> = Vec::new();
        let mut has_events = false;
        let claimed = change_run(
            self.runs.as_ref(),
            &self.notifier,
            organization,
            run_id,
            &RUN_UPDATE_CONFLICTS,
            |run| match run.claim(task, attempt, now, lease) {
                Claim::Claimed => {
                    outcome = Some(true);
                    Ok(Some(((), Vec::new())))
                }
                Claim::GaveUp => {
                    outcome = Some(false);
                    Ok(Some(((), Vec::new())))
                }
                Claim::Refused(why) => {
                    tracing::info!(%run_id, task, attempt, why, "task message needs no work");
                    has_events = run.webhook_sequence > 0;
                    resend = run
                        .queued_after(task, attempt)
                        .into_iter()
                        .map(|index| TaskMessage {
                            organization_id: organization,
                            run_id,
                            task: index,
                            attempt: run.tasks[index].attempt,
                        })
                        .collect();
                    Ok(None)
                }
            },
        )
        .await;
        if matches!(claimed, Ok(None)) && has_events {
            self.queue_unsent_events(organization, run_id).await?;
        }
        let run = match claimed {
            Ok(Some((run, ()))) => run,
            Ok(None) if !resend.is_empty() => {
                tracing::info!(%run_id, task, tasks = resend.len(), "queueing again the tasks this ended task queued");
                return self.queue.send(&resend).await;
            }
            Ok(None) | Err(RunError::NotFound) => return Ok(()),
            Err(error) => return Err(anyhow::anyhow!("{error}")),
        };
        if outcome == Some(false) {
            let queued: Vec<usize> = queued_tasks(&run);
            return send_tasks(self.queue.as_ref(), &run, &queued).await;
        }
        let started = std::time::Instant::now();
        let node_names: Vec<&str> = run.tasks[task].nodes.iter().map(|node| run.nodes[*node].type_name()).collect();
        let node_names = node_names.join(" → ");
        let (cancel, cancelled) = tokio::sync::watch::channel(false);
        let watcher = tokio::spawn(watch_cancel(self.runs.clone(), organization, run_id, task, attempt, cancel));
        let result = self.execute(&run, task, attempt, cancelled).await;
        watcher.abort();
        let outcome = match result {
            Ok(outcome) => outcome,
            // Ours, not the media's: say so plainly in the task's error.
            Err(error) => Outcome::Failed(format!("internal error while running the task: {error:#}"), None),
        };
        let now = self.clock.now();
        let (status, changed) = match outcome {
            Outcome::Cancelled => ("cancelled", Ok(None)),
            Outcome::Done { file, delivered, media } => (
                "completed",
                change_run(self.runs.as_ref(), &self.notifier, organization, run_id, &RUN_UPDATE_CONFLICTS, |run| {
                    Ok(run
                        .complete(task, attempt, file.clone(), delivered.clone(), now)
                        .map(|queued| (queued, media.clone())))
                })
                .await,
            ),
            Outcome::Failed(message, node) => (
                "failed",
                change_run(self.runs.as_ref(), &self.notifier, organization, run_id, &RUN_UPDATE_CONFLICTS, |run| {
                    Ok(run.fail(task, attempt, message.clone(), node, now).map(|queued| (queued, Vec::new())))
                })
                .await,
            ),
        };
        tracing::info!(
            %run_id,
            task,
            attempt,
            nodes = node_names,
            status,
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "node task"
        );
        match changed {
            Ok(Some((run, queued))) => {
                if run.status != super::RunStatus::Running {
                    tracing::info!(%run_id, status = run.status.as_str(), "run finished");
                }
                send_tasks(self.queue.as_ref(), &run, &queued).await
            }
            Ok(None) | Err(RunError::NotFound) => Ok(()),
            Err(error) => Err(anyhow::anyhow!("{error}")),
        }
    }

    /// Queues again the run's deliveries never attempted: a worker that stopped between
    /// recording a change and queueing its events leaves them so (a copy of a message
    /// already queued is taken as early or already done by the sender).
    async fn queue_unsent_events(
        &self,
        organization: crate::domain::identity::OrganizationId,
        run_id: super::RunId,
    ) -> anyhow::Result<()> {
        let mut unsent: Vec<WebhookMessage> = Vec::new();
        let mut after = None;
        loop {
            let page = self.deliveries.list_deliveries(organization, run_id, after, 100).await?;
            let more = page.len() > 100;
            unsent.extend(
                page.iter()
                    .take(100)
                    .filter(|delivery| delivery.state == DeliveryState::Pending && delivery.attempts.is_empty())
                    .map(|delivery| delivery.message()),
            );
            after = page.get(99).map(|delivery| delivery.sequence);
            if !more {
                break;
            }
        }
        if !unsent.is_empty() {
            tracing::info!(%run_id, deliveries = unsent.len(), "queueing again webhook deliveries never attempted");
            self.notifier.queue.send(&unsent).await?;
        }
        Ok(())
    }

    async fn execute(
        &self,
        run: &Run,
        index: usize,
        attempt: u32,
        cancelled: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Outcome> {
        tokio::fs::create_dir_all(&self.scratch).await?;
        let scratch = tempfile::Builder::new().prefix("task-").tempdir_in(&self.scratch)?;
        let task = &run.tasks[index];
        // One time limit for all of the task's media work (download and render).
        let stop = Stop { cancelled, deadline: tokio::time::Instant::now() + self.task_budget };
        let base =
            format!("runs/{}/{}/{index}-{attempt}-{}", run.organization_id, run.id, uuid::Uuid::new_v4().simple());
        let output = scratch.path().join("output.mp4");
        let last = *task.nodes.last().unwrap_or(&0);
        let delivers = run.is_output_node(last) || matches!(task.source, TaskSource::Input { .. });
        let made = match &task.source {
            TaskSource::Input { input } => self.input_task(run, *input, scratch.path(), &output, &stop).await?,
            TaskSource::Tasks { tasks } => self.edit_task(run, index, tasks, scratch.path(), &output, &stop).await?,
        };
        let file = match made {
            Made::Failed(message) => return Ok(Outcome::Failed(message, None)),
            Made::FailedAt(message, node) => return Ok(Outcome::Failed(message, Some(node))),
            Made::Cancelled => return Ok(Outcome::Cancelled),
            Made::Existing(file) => file,
            Made::Rendered => {
                let key = format!("{base}.mp4");
                let facts = match self.facts(&format!("file:{}", output.display())).await {
                    Ok(facts) => facts,
                    Err(problem) => {
                        return Ok(Outcome::Failed(format!("the rendered video is not readable: {problem}"), None))
                    }
                };
                self.blobs.put_file(&key, &output, "video/mp4").await?;
                MediaFile { key, version: None, ..facts }
            }
        };
        if !delivers {
            return Ok(Outcome::Done { file, delivered: None, media: Vec::new() });
        }
        let thumbnail_path = scratch.path().join("thumbnail.jpg");
        let location = self.blobs.read_location(&file.key, file.version.as_deref()).await?;
        let thumbnail = match self.toolkit.thumbnail(&location, file.duration_ms, &thumbnail_path).await {
            Ok(()) => {
                let key = format!("{base}.jpg");
                self.blobs.put_file(&key, &thumbnail_path, "image/jpeg").await?;
                Some(key)
            }
            Err(error) => {
                tracing::warn!(run_id = %run.id, task = index, error = %error, "no thumbnail");
                None
            }
        };
        let now = self.clock.now();
        let kind = if run.is_output_node(last) { MediaKind::Render } else { MediaKind::Input };
        let record =
            |key: &str, version: Option<&String>, kind: MediaKind, content_type: &str, duration_ms| MediaRecord {
                id: MediaId::now_v7(),
                organization_id: run.organization_id,
                run_id: run.id,
                kind,
                key: key.to_owned(),
                version: version.cloned(),
                content_type: content_type.to_owned(),
                duration_ms,
                created_at: now,
            };
        let video = record(&file.key, file.version.as_ref(), kind, "video/mp4", Some(file.duration_ms));
        let thumbnail = thumbnail.map(|key| record(&key, None, MediaKind::Thumbnail, "image/jpeg", None));
        let mut delivered = Delivered {
            video: video.id,
            thumbnail: thumbnail.as_ref().map(|record| record.id),
            timeline: None,
            placements: Vec::new(),
        };
        let mut media: Vec<MediaRecord> = [Some(video), thumbnail].into_iter().flatten().collect();
        if kind == MediaKind::Render {
            // The output's edit decisions, and the timeline project made of them.
            delivered.placements = placements(run, index, &file);
            let timeline = timeline(run, delivered.video, &delivered.placements, &file, &self.notifier.links, now);
            let path = scratch.path().join("timeline.zip");
            tokio::fs::write(
                &path,
                crate::core::timeline::files::zip(&timeline, &format!("output-{}", delivered.video))?,
            )
            .await?;
            let key = format!("{base}.zip");
            self.blobs.put_file(&key, &path, "application/zip").await?;
            let project = record(&key, None, MediaKind::Timeline, "application/zip", None);
            delivered.timeline = Some(project.id);
            media.push(project);
        }
        Ok(Outcome::Done { file, delivered: Some(delivered), media })
    }

    /// Probes a file for what the engine tracks about it.
    async fn facts(&self, location: &str) -> Result<MediaFile, String> {
        let report = self.probe.probe(location).await.map_err(|error| error.to_string())?;
        facts_of(&report).map(|(file, _)| file)
    }

    /// A Video Input task: the bound input, downloaded when it is a URL, cut to its
    /// window. A source already in the output format and not cut is used as it is.
    async fn input_task(
        &self,
        run: &Run,
        input: usize,
        scratch: &Path,
        output: &Path,
        stop: &Stop,
    ) -> anyhow::Result<Made> {
        let bound = &run.inputs[input];
        let (location, stored) = match &bound.source {
            InputSource::Upload { key, version, .. } => {
                (self.blobs.read_location(key, version.as_deref()).await?, Some((key.clone(), version.clone())))
            }
            InputSource::Render { key, version, .. } | InputSource::Asset { key, version, .. } => {
                (self.blobs.read_location(key, version.as_deref()).await?, Some((key.clone(), version.clone())))
            }
            InputSource::Url { url } | InputSource::Site { url, .. } => {
                let path = scratch.join("download");
                let download = async {
                    match &bound.source {
                        InputSource::Site { .. } => self.sites.videos.download(url, &path, MAX_DOWNLOAD_BYTES).await,
                        _ => self.downloader.download(url, &path, MAX_DOWNLOAD_BYTES).await,
                    }
                };
                let download = tokio::time::timeout_at(stop.deadline, download);
                let downloaded = tokio::select! {
                    downloaded = download => downloaded,
                    () = until_cancelled(stop.cancelled.clone()) => return Ok(Made::Cancelled),
                };
                match downloaded {
                    Ok(Ok(_)) => (format!("file:{}", path.display()), None),
                    Ok(Err(DownloadError::Refused(problem))) => {
                        let site = matches!(bound.source, InputSource::Site { .. });
                        return Ok(Made::Failed(match site {
                            // yt-dlp's reasons name the page already.
                            true if problem != WEB_PAGE_REFUSAL => problem,
                            false if problem == WEB_PAGE_REFUSAL => {
                                format!("{url}: {problem}; give a video-sharing site's page in youtube_url_inputs")
                            }
                            _ => format!("{url}: {problem}"),
                        }));
                    }
                    Ok(Err(DownloadError::Failed(error))) => {
                        return Ok(Made::Failed(format!("{url} could not be downloaded: {error:#}")))
                    }
                    Err(_) => {
                        return Ok(Made::Failed(format!(
                            "{url} could not be downloaded within the task's time limit of {} s",
                            self.task_budget.as_secs()
                        )))
                    }
                }
            }
        };
        let report = match self.probe.probe(&location).await {
            Ok(report) => report,
            Err(error) => return Ok(Made::Failed(format!("the input video is not readable media: {error}"))),
        };
        let (facts, ready) = match facts_of(&report) {
            Ok(facts) => facts,
            Err(problem) => return Ok(Made::Failed(format!("the input is not usable: {problem}"))),
        };
        if facts.duration_ms > MAX_INPUT_MS {
            return Ok(Made::Failed(format!(
                "the input video is {} s long; at most 5 hours (18000 s) are accepted",
                facts.duration_ms / 1000
            )));
        }
        let start = bound.clip_start_ms.unwrap_or(0);
        if start >= facts.duration_ms {
            return Ok(Made::Failed(format!(
                "the clip window starts at {start} ms, after the end of the video ({} ms)",
                facts.duration_ms
            )));
        }
        let window = start > 0 || bound.clip_end_ms.is_some_and(|end| end < facts.duration_ms);
        if !window && ready {
            if let Some((key, version)) = stored {
                return Ok(Made::Existing(MediaFile { key, version, ..facts }));
            }
        }
        let edits = if window { vec![Edit::Clip { start_ms: start, end_ms: bound.clip_end_ms }] } else { Vec::new() };
        let input = RenderInput {
            location,
            duration_ms: facts.duration_ms,
            width: facts.width,
            height: facts.height,
            has_audio: facts.has_audio,
        };
        self.render(vec![input], edits, &[], output, stop).await
    }

    /// An edit task: the chain's edits on its one input, or (Concatenate) its inputs
    /// joined. A chain that changes nothing passes its input on.
    async fn edit_task(
        &self,
        run: &Run,
        index: usize,
        sources: &[usize],
        scratch: &Path,
        output: &Path,
        stop: &Stop,
    ) -> anyhow::Result<Made> {
        let mut inputs = Vec::new();
        for source in sources {
            let Some(file) = &run.tasks[*source].result else {
                return Ok(Made::Failed(format!("the result of task {source} is missing")));
            };
            inputs.push(RenderInput {
                location: self.blobs.read_location(&file.key, file.version.as_deref()).await?,
                duration_ms: file.duration_ms,
                width: file.width,
                height: file.height,
                has_audio: file.has_audio,
            });
        }
        let mut assets = HashMap::new();
        for (id, file) in &run.assets {
            assets.insert(*id, self.blobs.read_location(&file.key, file.version.as_deref()).await?);
        }
        let (mut edits, mut edit_nodes) = (Vec::new(), Vec::new());
        for (position, &node_index) in run.tasks[index].nodes.iter().enumerate() {
            let settings = &run.nodes[node_index].settings;
            let scratch_file = match settings.scratch_file() {
                Some(file) => {
                    let path = scratch.join(format!("node-{position}.{}", file.extension));
                    tokio::fs::write(&path, file.contents).await?;
                    Some(path)
                }
                None => None,
            };
            let context = EditContext { files: &|id| assets.get(&id).cloned(), scratch_file };
            match settings.edit(&context) {
                Ok(Some(edit)) => {
                    edits.push(edit);
                    edit_nodes.push(node_index);
                }
                Ok(None) => {}
                Err(problem) => return Ok(Made::FailedAt(problem, node_index)),
            }
        }
        if let ([_], true) = (sources, edits.is_empty()) {
            let file = run.tasks[sources[0]].result.clone().unwrap_or_else(|| unreachable!("checked above"));
            return Ok(Made::Existing(file));
        }
        self.render(inputs, edits, &edit_nodes, output, stop).await
    }

    async fn render(
        &self,
        inputs: Vec<RenderInput>,
        edits: Vec<Edit>,
        // The run's node of each edit, when the edits are nodes' (not a Video Input's window).
        edit_nodes: &[usize],
        output: &Path,
        stop: &Stop,
    ) -> anyhow::Result<Made> {
        let budget = stop.deadline.saturating_duration_since(tokio::time::Instant::now());
        let job = RenderJob { inputs, edits, output: output.to_owned(), budget };
        match self.toolkit.render(&job, stop.cancelled.clone()).await {
            Ok(()) => Ok(Made::Rendered),
            Err(MediaError::Cancelled) => Ok(Made::Cancelled),
            Err(MediaError::Unavailable(error)) => Err(error),
            Err(MediaError::InvalidEdit { edit, message }) => Ok(match edit_nodes.get(edit) {
                Some(node) => Made::FailedAt(message, *node),
                None => Made::Failed(message),
            }),
            Err(error) => Ok(Made::Failed(error.to_string())),
        }
    }
}

/// When a task's media work must stop: its run was cancelled, or its time is up.
struct Stop {
    cancelled: tokio::sync::watch::Receiver<bool>,
    deadline: tokio::time::Instant,
}

/// What a task's media work produced.
enum Made {
    /// A new file at the task's output path.
    Rendered,
    /// An existing file, passed on.
    Existing(MediaFile),
    Failed(String),
    /// Failed because of this node (of the run's nodes).
    FailedAt(String, usize),
    Cancelled,
}

/// The tasks of a run that are queued.
fn queued_tasks(run: &Run) -> Vec<usize> {
    (0..run.tasks.len()).filter(|index| run.tasks[*index].status == super::TaskStatus::Queued).collect()
}

/// What the engine tracks of a probed video, and whether it is already in the output
/// format (MP4, H.264, AAC or no sound) so that it can be used without re-encoding.
fn facts_of(report: &ProbeReport) -> Result<(MediaFile, bool), String> {
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
    let file = MediaFile { key: String::new(), version: None, duration_ms, width, height, has_audio: audio.is_some() };
    Ok((file, ready))
}

/// Sets `cancel` once the task's attempt is no longer running (the run was cancelled,
/// or the task superseded); checks every [`CANCEL_POLL`].
async fn watch_cancel(
    runs: Arc<dyn RunRepo>,
    organization: crate::domain::identity::OrganizationId,
    run_id: super::RunId,
    task: usize,
    attempt: u32,
    cancel: tokio::sync::watch::Sender<bool>,
) {
    loop {
        tokio::time::sleep(CANCEL_POLL).await;
        match runs.get_run(organization, run_id).await {
            Ok(Some(run)) if run.still_running(task, attempt) => {}
            Ok(_) => {
                let _ = cancel.send(true);
                return;
            }
            Err(error) => tracing::warn!(%run_id, error = %format!("{error:#}"), "could not check for cancellation"),
        }
    }
}
