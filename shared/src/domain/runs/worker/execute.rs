//! A task's media work: the file it makes (a Video Input's cut, or an edit task's
//! render), then — for the tasks that deliver it — its thumbnail, signed-link records
//! and timeline project.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::super::Fault;
use super::{EditPlan, Outcome, Stop, TaskOutput, Worker};
use crate::core::blocking::off_runtime;
use crate::domain::ids::MediaId;
use crate::domain::media::{index_room, JoinJob, MediaError, MediaType, RenderInput, RenderJob, RenderPart};
use crate::domain::media::{MediaKind, MediaRecord};
use crate::domain::nodes::EditContext;
use crate::domain::runs::edits::{placements, timeline};
use crate::domain::runs::engine::Delivered;
use crate::domain::runs::parts::PARTS_PREFIX;
use crate::domain::runs::{GeneratedBy, MediaFile, NodeIndex, Run, TaskIndex, TaskSource, TaskStatus};

/// What an MP4 of a join holds before its index room (`ftyp`, 32 bytes) and after it
/// (a `free` and the `mdat` header, 16 bytes), with room to spare.
const JOIN_HEADER_BYTES: u64 = 4096;

/// Where one task's files go: a scratch folder of its own, and keys under one base.
pub(super) struct TaskFiles {
    pub(super) scratch: tempfile::TempDir,
    /// Every stored file's key is this with an extension.
    pub(super) base: String,
}

impl TaskFiles {
    /// A scratch folder of its own in `root`, and keys under `run`'s prefix named by
    /// `name` (the task and attempt) and a random suffix.
    pub(super) async fn new(root: &Path, run: &Run, name: String) -> anyhow::Result<Self> {
        Self::under(root, "runs/", run, name).await
    }

    /// As [`Self::new`] for a part's file, kept under [`PARTS_PREFIX`] until the join.
    pub(super) async fn part(root: &Path, run: &Run, name: String) -> anyhow::Result<Self> {
        Self::under(root, PARTS_PREFIX, run, name).await
    }

    async fn under(root: &Path, prefix: &str, run: &Run, name: String) -> anyhow::Result<Self> {
        tokio::fs::create_dir_all(root).await?;
        Ok(Self {
            scratch: tempfile::Builder::new().prefix("task-").tempdir_in(root)?,
            base: format!("{prefix}{}/{}/{name}-{}", run.organization_id, run.id, uuid::Uuid::new_v4().simple()),
        })
    }

    pub(super) fn output(&self) -> std::path::PathBuf {
        self.scratch.path().join("output.mp4")
    }
}

impl Worker {
    /// Does task `index`'s media work, stores the files it makes and says how it ended.
    pub(super) async fn execute(
        &self,
        run: &Arc<Run>,
        index: TaskIndex,
        attempt: u32,
        cancelled: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Outcome> {
        let workspace = TaskFiles::new(&self.scratch, run, format!("{index}-{attempt}")).await?;
        // One time limit for all of the task's media work (download and render).
        let stop = Stop { cancelled, deadline: tokio::time::Instant::now() + self.task_budget };
        let (scratch, output) = (workspace.scratch.path(), workspace.output());
        let task = &run.tasks[index];
        let made = match &task.source {
            TaskSource::Input { input } => self.input_task(run, *input, scratch, &output, &stop).await?,
            TaskSource::Tasks { tasks } => self.edit_task(run, index, tasks, &workspace, &stop).await?,
            TaskSource::Generate => self.generate_task(run, index, scratch, &stop).await?,
        };
        let file = match made {
            TaskOutput::Failed(message) => return Ok(Outcome::Failed(message, None, Fault::Ours)),
            TaskOutput::FailedAt(message, node) => return Ok(Outcome::Failed(message, Some(node), Fault::Ours)),
            TaskOutput::Refused(message, node) => return Ok(Outcome::Failed(message, node, Fault::Caller)),
            TaskOutput::Cancelled => return Ok(Outcome::Cancelled),
            TaskOutput::Blocked => return Ok(Outcome::Blocked),
            TaskOutput::Split(parts) => return Ok(Outcome::Split(parts)),
            TaskOutput::Existing(file) => file,
            TaskOutput::Rendered => match self.store_made(&workspace, &output, MediaType::Video).await? {
                Ok(file) => file,
                Err(problem) => {
                    let message = format!("the rendered video is not readable: {problem}");
                    return Ok(Outcome::Failed(message, None, Fault::Ours));
                }
            },
            TaskOutput::Stored(key) => match self.stored_facts(key, MediaType::Video).await? {
                Ok(file) => file,
                Err(problem) => {
                    let message = format!("the joined video is not readable: {problem}");
                    return Ok(Outcome::Failed(message, None, Fault::Ours));
                }
            },
            TaskOutput::Generated { path, media, provider } => match self.store_made(&workspace, &path, media).await? {
                Ok(file) => MediaFile { generated: Some(GeneratedBy { provider, link: None }), ..file },
                Err(problem) => {
                    let node = *task.nodes.first().unwrap_or(&NodeIndex(0));
                    let what = super::generate::expected(media);
                    let message = format!("{provider} made no readable {what}: {problem}");
                    return Ok(Outcome::Failed(message, Some(node), Fault::Ours));
                }
            },
        };
        let last = *task.nodes.last().unwrap_or(&NodeIndex(0));
        let kind = match (run.is_output_node(last), &task.source) {
            (true, _) => MediaKind::Render,
            (false, TaskSource::Input { .. } | TaskSource::Generate) => MediaKind::Input,
            (false, TaskSource::Tasks { .. }) => return Ok(Outcome::Done { file, delivered: None, media: Vec::new() }),
        };
        let (delivered, media) = self.deliver(run, index, &file, kind, &workspace).await?;
        // A generated file keeps its link: `sources` and the timeline point at it.
        let file = match file.generated {
            Some(by) => MediaFile { generated: Some(GeneratedBy { link: Some(delivered.video), ..by }), ..file },
            None => file,
        };
        Ok(Outcome::Done { file, delivered: Some(delivered), media })
    }

    /// The file stored at `key` as the task's, which should hold `media`; Err (why the
    /// task fails) when it does not.
    async fn stored_facts(&self, key: String, media: MediaType) -> anyhow::Result<Result<MediaFile, String>> {
        let location = self.blobs.read_location(&key, None).await?;
        Ok(self.facts_at(&location, media).await.map(|facts| MediaFile { key, version: None, ..facts }))
    }

    /// What the file at `location` is; Err (why the task fails) when it holds no `media`.
    async fn facts_at(&self, location: &str, media: MediaType) -> Result<MediaFile, String> {
        let report = self.probe.probe(location).await.map_err(|error| error.to_string())?;
        super::inputs::facts_of_media(&report, media)
    }

    /// Stores a file the task made at `path`, which should hold `media`; Err (why the
    /// task fails) when it does not.
    async fn store_made(
        &self,
        workspace: &TaskFiles,
        path: &Path,
        media: MediaType,
    ) -> anyhow::Result<Result<MediaFile, String>> {
        let facts = match self.facts_at(&format!("file:{}", path.display()), media).await {
            Ok(facts) => facts,
            Err(problem) => return Ok(Err(problem)),
        };
        let key = format!("{}.{}", workspace.base, media.extension());
        self.blobs.put_file(&key, path, media.content_type()).await?;
        Ok(Ok(MediaFile { key, version: None, ..facts }))
    }

    /// What a delivering task leaves besides its file: a thumbnail, the media records
    /// of their signed links, and (for an output) its edit decisions and timeline project.
    async fn deliver(
        &self,
        run: &Arc<Run>,
        index: TaskIndex,
        file: &MediaFile,
        kind: MediaKind,
        workspace: &TaskFiles,
    ) -> anyhow::Result<(Delivered, Vec<MediaRecord>)> {
        // A generated file an edit goes on to use is linked (sources, the timeline), but
        // shown nowhere: no thumbnail.
        let shown = kind == MediaKind::Render || !matches!(run.tasks[index].source, TaskSource::Generate);
        let thumbnail = match shown {
            true => self.thumbnail(run, index, file, workspace).await?,
            false => None,
        };
        let now = self.clock.now();
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
        let duration = Some(file.duration_ms).filter(|_| file.media != MediaType::Image);
        let video = record(&file.key, file.version.as_ref(), kind, file.media.content_type(), duration);
        let thumbnail = thumbnail.map(|key| record(&key, None, MediaKind::Thumbnail, "image/jpeg", None));
        let mut delivered = Delivered {
            video: video.id,
            thumbnail: thumbnail.as_ref().map(|record| record.id),
            timeline: None,
            placements: Vec::new(),
            input_copy: None,
        };
        let mut media: Vec<MediaRecord> = [Some(video), thumbnail].into_iter().flatten().collect();
        if kind == MediaKind::Render && matches!(run.tasks[index].source, TaskSource::Input { .. }) {
            // A Video Input that is itself an output: its copy gets an input record of
            // its own too, so that what cites it names the input, not the output.
            let copy = record(&file.key, file.version.as_ref(), MediaKind::Input, file.media.content_type(), duration);
            delivered.input_copy = Some(copy.id);
            media.push(copy);
        }
        if kind == MediaKind::Render {
            // The output's edit decisions, and the timeline project made of them.
            // CPU work that grows with the graph: off the runtime's threads.
            let (run, file, links, video) = (run.clone(), file.clone(), self.notifier.links.clone(), delivered.video);
            let (placed, zip) = off_runtime(move || {
                let placed = placements(&run, index, &file);
                let timeline = timeline(&run, video, &placed, &file, &links, now);
                crate::core::timeline::zip(&timeline, &format!("output-{video}")).map(|zip| (placed, zip))
            })
            .await??;
            delivered.placements = placed;
            let path = workspace.scratch.path().join("timeline.zip");
            tokio::fs::write(&path, zip).await?;
            let key = format!("{}.zip", workspace.base);
            self.blobs.put_file(&key, &path, "application/zip").await?;
            let project = record(&key, None, MediaKind::Timeline, "application/zip", None);
            delivered.timeline = Some(project.id);
            media.push(project);
        }
        Ok((delivered, media))
    }

    /// The stored thumbnail's key; None when none could be made (the task goes on).
    async fn thumbnail(
        &self,
        run: &Run,
        index: TaskIndex,
        file: &MediaFile,
        workspace: &TaskFiles,
    ) -> anyhow::Result<Option<String>> {
        let path = workspace.scratch.path().join("thumbnail.jpg");
        let location = self.blobs.read_location(&file.key, file.version.as_deref()).await?;
        let made = match file.media {
            MediaType::Audio => self.toolkit.waveform(&location, &path).await,
            MediaType::Video | MediaType::Image => self.toolkit.thumbnail(&location, file.duration_ms, &path).await,
        };
        match made {
            Ok(()) => {
                let key = format!("{}.jpg", workspace.base);
                self.blobs.put_file(&key, &path, "image/jpeg").await?;
                Ok(Some(key))
            }
            Err(error) => {
                tracing::warn!(run_id = %run.id, task = index.0, error = %error, "no thumbnail");
                Ok(None)
            }
        }
    }

    /// An edit task: the chain's edits on its one input, or (Concatenate) its inputs
    /// joined. A chain that changes nothing passes its input on. An output longer than
    /// a segment is made in parts: the task plans them, and joins them once made.
    async fn edit_task(
        &self,
        run: &Run,
        index: TaskIndex,
        sources: &[TaskIndex],
        workspace: &TaskFiles,
        stop: &Stop,
    ) -> anyhow::Result<TaskOutput> {
        let plan = match self.edit_plan(run, index, sources, workspace.scratch.path()).await? {
            Ok(plan) => plan,
            Err(output) => return Ok(output),
        };
        let task = &run.tasks[index];
        if !task.parts.is_empty() && task.parts.iter().all(|part| part.status == TaskStatus::Completed) {
            return self.join_parts(task, workspace, stop).await;
        }
        if let Some(parts) = self.parts_of(task, &plan).await {
            return Ok(TaskOutput::Split(parts));
        }
        self.render(plan, &workspace.output(), stop, RenderPart::Whole).await
    }

    /// The parts an edit task is made in: those it planned already (a resume makes the
    /// missing ones), or — when its output is longer than a segment — its segments'
    /// pictures and its sound. None: it is made in one pass.
    async fn parts_of(&self, task: &crate::domain::runs::Task, plan: &EditPlan) -> Option<Vec<RenderPart>> {
        if !task.parts.is_empty() {
            return Some(task.parts.iter().map(|part| part.part).collect());
        }
        let segment_ms = self.segment?.as_millis() as u64;
        let [input] = plan.inputs.as_slice() else { return None };
        // An edit the planning refuses is left to the render, which says why.
        let (duration_ms, sound) = crate::domain::media::outcome_of(input, &plan.edits).ok()?;
        if plan.edits.is_empty() || duration_ms <= segment_ms {
            return None;
        }
        let report = match self.probe.probe(&input.location).await {
            Ok(report) => report,
            Err(error) => {
                tracing::warn!(error = %error, "the input's frame rate could not be read: one pass");
                return None;
            }
        };
        let rate = report.streams.iter().find(|stream| stream.codec_type == "video")?.frame_rate?;
        let windows = crate::domain::media::segments(duration_ms, segment_ms, rate);
        if windows.len() < 2 {
            return None;
        }
        let mut parts: Vec<RenderPart> =
            windows.into_iter().map(|(start_ms, end_ms)| RenderPart::Picture { start_ms, end_ms }).collect();
        if sound {
            parts.push(RenderPart::Sound);
        }
        Some(parts)
    }

    /// Joins the parts of `task`, all made, into its output (streams copied), stored
    /// while it is written: the task's disk never holds the whole of a long output.
    async fn join_parts(
        &self,
        task: &crate::domain::runs::Task,
        workspace: &TaskFiles,
        stop: &Stop,
    ) -> anyhow::Result<TaskOutput> {
        let (mut pictures, mut sound) = (Vec::new(), None);
        for part in &task.parts {
            let Some(key) = &part.key else { return Ok(TaskOutput::Failed("a part's file is missing".into())) };
            let location = self.blobs.read_location(key, None).await?;
            match part.part {
                RenderPart::Picture { start_ms, end_ms } => pictures.push((location, end_ms - start_ms)),
                RenderPart::Sound => sound = Some(location),
                RenderPart::Whole => return Ok(TaskOutput::Failed("a part is the whole output".into())),
            }
        }
        let index_bytes = self.index_room(&pictures, sound.is_some()).await;
        let budget = stop.deadline.saturating_duration_since(tokio::time::Instant::now());
        let job = JoinJob { pictures, sound, output: workspace.output(), budget, index_bytes };
        let key = format!("{}.{}", workspace.base, MediaType::Video.extension());
        // Past the index room, ffmpeg writes again only the `mdat` header just after it.
        let held = index_bytes + JOIN_HEADER_BYTES;
        // The join stops on the task's cancel, and when its storing failed: the file
        // would otherwise grow whole on the disk, for nothing.
        let (stop_join, join_stopped) = tokio::sync::watch::channel(false);
        let stop_join = std::sync::Arc::new(stop_join);
        let forward = {
            let (mut cancelled, stop_join) = (stop.cancelled.clone(), stop_join.clone());
            tokio::spawn(async move {
                loop {
                    if *cancelled.borrow_and_update() {
                        let _ = stop_join.send(true);
                        return;
                    }
                    if cancelled.changed().await.is_err() {
                        return;
                    }
                }
            })
        };
        let (ended, finished) = tokio::sync::oneshot::channel();
        let join = async {
            let joined = self.toolkit.join(&job, join_stopped).await;
            let _ = ended.send(joined.is_ok());
            joined
        };
        let store = async {
            let finished = Box::pin(async { finished.await.unwrap_or(false) });
            let stored =
                self.blobs.put_growing(&key, &job.output, MediaType::Video.content_type(), held, finished).await;
            if stored.is_err() {
                let _ = stop_join.send(true);
            }
            stored
        };
        let (joined, stored) = tokio::join!(join, store);
        forward.abort();
        let stored = stored.map_err(|error| error.context("storing the joined video"))?;
        let cancelled = *stop.cancelled.borrow();
        match joined {
            Ok(()) if stored => Ok(TaskOutput::Stored(key)),
            Ok(()) => Err(anyhow::anyhow!("the joined video was not stored")),
            Err(MediaError::Cancelled) if cancelled => Ok(TaskOutput::Cancelled),
            Err(MediaError::Unavailable(error)) => Err(error),
            Err(error) => Ok(TaskOutput::Failed(format!("joining the parts: {error}"))),
        }
    }

    /// The room a join of `pictures` keeps for its index ([`index_room`]), at the frame
    /// rate of the first picture (one probe of a part's file); at 120 frames a second when
    /// it cannot be read, ample for any rate a render keeps.
    async fn index_room(&self, pictures: &[(String, u64)], sound: bool) -> u64 {
        let duration_ms = pictures.iter().map(|(_, duration_ms)| duration_ms).sum();
        let rate = match pictures.first() {
            Some((location, _)) => match self.probe.probe(location).await {
                Ok(report) => {
                    report.streams.iter().find(|stream| stream.codec_type == "video").and_then(|s| s.frame_rate)
                }
                Err(error) => {
                    tracing::warn!(error = %error, "a part's frame rate could not be read");
                    None
                }
            },
            None => None,
        };
        index_room(duration_ms, rate.unwrap_or((120, 1)), sound)
    }

    /// What an edit task renders: its videos, and its chain's edits with their nodes;
    /// or how the task ends without a render (a chain that changes nothing passes its
    /// input on; an edit that refuses its parameters fails it).
    pub(super) async fn edit_plan(
        &self,
        run: &Run,
        index: TaskIndex,
        sources: &[TaskIndex],
        scratch: &Path,
    ) -> anyhow::Result<Result<EditPlan, TaskOutput>> {
        let mut inputs = Vec::new();
        // A generated image or sound the chain's first node takes through a connection.
        let mut connected = None;
        for source in sources {
            let Some(file) = &run.tasks[*source].result else {
                return Ok(Err(TaskOutput::Failed(format!("the result of task {source} is missing"))));
            };
            if file.media != MediaType::Video {
                connected = Some(self.blobs.read_location(&file.key, file.version.as_deref()).await?);
                continue;
            }
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
            let settings = run.nodes[node_index].settings();
            let scratch_file = match settings.scratch_file() {
                Some(file) => {
                    let path = scratch.join(format!("node-{position}.{}", file.extension));
                    tokio::fs::write(&path, file.contents).await?;
                    Some(path)
                }
                None => None,
            };
            let connected = if position == 0 { connected.clone() } else { None };
            let context = EditContext { files: &|id| assets.get(&id).cloned(), scratch_file, connected };
            match settings.edit(&context) {
                Ok(Some(edit)) => {
                    edits.push(edit);
                    edit_nodes.push(node_index);
                }
                Ok(None) => {}
                Err(problem) => return Ok(Err(TaskOutput::Refused(problem, Some(node_index)))),
            }
        }
        if let ([_], true) = (sources, edits.is_empty()) {
            // Nothing to change (a Destination): the file passes on, whatever it holds.
            let file = run.tasks[sources[0]].result.clone().unwrap_or_else(|| unreachable!("checked above"));
            return Ok(Err(TaskOutput::Existing(file)));
        }
        Ok(Ok(EditPlan { inputs, edits, edit_nodes }))
    }

    /// Renders `part` of `plan`'s output to `output`.
    pub(super) async fn render(
        &self,
        plan: EditPlan,
        output: &Path,
        stop: &Stop,
        part: RenderPart,
    ) -> anyhow::Result<TaskOutput> {
        let EditPlan { inputs, edits, edit_nodes } = plan;
        let budget = stop.deadline.saturating_duration_since(tokio::time::Instant::now());
        let job = RenderJob { inputs, edits, output: output.to_owned(), budget, part };
        match self.toolkit.render(&job, stop.cancelled.clone()).await {
            Ok(()) => Ok(TaskOutput::Rendered),
            Err(MediaError::Cancelled) => Ok(TaskOutput::Cancelled),
            Err(MediaError::Unavailable(error)) => Err(error),
            Err(MediaError::InvalidEdit { edit, message }) => Ok(match edit_nodes.get(edit) {
                Some(node) => TaskOutput::FailedAt(message, *node),
                None => TaskOutput::Failed(message),
            }),
            Err(error) => Ok(TaskOutput::Failed(error.to_string())),
        }
    }
}
