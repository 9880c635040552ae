//! Processing an avatar profile, as a queued task: claim it (`pending → processing`,
//! under a lease), fetch and check its sources, make its preview, then record it `ready`
//! or `failed` with a clear `status_message`. Each step is idempotent: a duplicate
//! message finds the profile claimed or finished; a worker that stops leaves a claim
//! that runs out, and the message's next delivery processes it again (at most
//! [`MAX_ATTEMPTS`] times).

use std::path::Path;
use std::time::Duration;

use super::{change, change_with, AvatarStatus, Kept, MAX_SOURCE_MS, MIN_SOURCE_MS};
use super::{AvatarError, AvatarFile, AvatarProfile, AvatarProfileId, AvatarReference, AvatarRepo, AvatarSource};
use crate::core::versioned::Changed;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::{MediaId, RunId};
use crate::domain::media::ports::{BlobStore, DownloadError, Downloader, MediaProbe, MediaToolkit};
use crate::domain::media::{MediaError, PreviewJob, ProbeReport, SILENCE_DB};
use crate::domain::media::{MediaKind, MediaRecord};
use crate::domain::time::{Clock, Timestamp};
use crate::domain::uploads::{self, UploadError, UploadKind, UploadRepo, UploadStatus};

/// Processing attempts a profile is given (workers that stopped each used one).
pub const MAX_ATTEMPTS: u32 = 3;
/// Largest URL source fetched.
pub const MAX_SOURCE_BYTES: u64 = 500 * 1024 * 1024;
/// Length of a preview.
pub const PREVIEW_SECONDS: u32 = 3;
/// Width of a preview.
pub const PREVIEW_WIDTH: u32 = 480;
/// A voice whose loudest moment is below this is silent, in dBFS.
pub const AUDIBLE_MAX_DB: f64 = -35.0;
/// Most of a voice recording that may be silence (below [`SILENCE_DB`]), in percent.
pub const MAX_SILENT_PERCENT: u64 = 60;

/// What processing needs.
pub struct AvatarWork<'a> {
    pub avatars: &'a dyn AvatarRepo,
    pub uploads: &'a dyn UploadRepo,
    pub blobs: &'a dyn BlobStore,
    pub probe: &'a dyn MediaProbe,
    pub downloader: &'a dyn Downloader,
    pub toolkit: &'a dyn MediaToolkit,
    pub clock: &'a dyn Clock,
    /// A folder of this attempt's own.
    pub scratch: &'a Path,
    /// Longest the attempt's work may take; its claim holds this and a margin.
    pub budget: Duration,
}

/// What became of a processing message.
#[derive(Debug, PartialEq, Eq)]
pub enum Processed {
    /// Ready or failed now, or already.
    Done,
    /// Another worker's claim holds until then: deliver the message again after it.
    Held(Timestamp),
}

/// Processes profile `id` of `organization` (see the module's description).
pub async fn process(
    work: &AvatarWork<'_>,
    organization: OrganizationId,
    id: AvatarProfileId,
) -> Result<Processed, AvatarError> {
    let now = work.clock.now();
    let lease = work.budget + Duration::from_secs(60);
    let claimed = change(work.avatars, organization, id, |profile| match profile.status {
        AvatarStatus::Ready | AvatarStatus::Failed => Ok(None),
        AvatarStatus::Processing if profile.processing_until.is_some_and(|until| until > now) => {
            Err(profile.processing_until.unwrap_or(now))
        }
        _ if profile.attempts >= MAX_ATTEMPTS => {
            profile.status = AvatarStatus::Failed;
            profile.status_message =
                Some(format!(
                    "processing stopped {MAX_ATTEMPTS} times before it finished; create the avatar again under another name"
                ));
            profile.processing_until = None;
            profile.updated_at = now;
            Ok(Some(()))
        }
        _ => {
            profile.status = AvatarStatus::Processing;
            profile.attempts += 1;
            profile.processing_until = Some(now.after(lease));
            profile.updated_at = now;
            Ok(Some(()))
        }
    })
    .await?;
    let profile = match claimed {
        Changed::Kept(Kept::Held(until)) => return Ok(Processed::Held(until)),
        Changed::Kept(Kept::Unchanged) | Changed::Missing => return Ok(Processed::Done),
        Changed::Written(profile, ()) if profile.status != AvatarStatus::Processing => return Ok(Processed::Done),
        Changed::Written(profile, ()) => profile,
    };
    let attempt = profile.attempts;
    let outcome = tokio::time::timeout(work.budget, prepare(work, &profile)).await.unwrap_or_else(|_| {
        Ok(Err(format!("processing took longer than its time limit of {} s", work.budget.as_secs())))
    });
    let (reference, preview) = match outcome {
        Ok(Ok(made)) => (Some(made.0), made.1),
        Ok(Err(problem)) => {
            finish(work, &profile, attempt, Err(problem)).await?;
            return Ok(Processed::Done);
        }
        // Ours (storage, a tool that could not run): the claim runs out and the
        // message's next delivery tries again.
        Err(error) => return Err(AvatarError::Backend(error)),
    };
    finish(work, &profile, attempt, Ok((reference, preview))).await?;
    Ok(Processed::Done)
}

/// Records the attempt's outcome, unless the profile moved on meanwhile.
async fn finish(
    work: &AvatarWork<'_>,
    profile: &AvatarProfile,
    attempt: u32,
    outcome: Result<(Option<AvatarReference>, Option<MediaRecord>), String>,
) -> Result<(), AvatarError> {
    let now = work.clock.now();
    let (reference, preview, message) = match outcome {
        Ok((reference, preview)) => (reference, preview, None),
        Err(message) => (None, None, Some(message)),
    };
    let ready = message.is_none();
    let recorded = change_with(work.avatars, profile.organization_id, profile.id, preview.as_ref(), |stored| {
        if stored.status != AvatarStatus::Processing || stored.attempts != attempt {
            return Ok(None);
        }
        stored.status = if ready { AvatarStatus::Ready } else { AvatarStatus::Failed };
        stored.status_message = message.clone();
        stored.reference = reference.clone();
        stored.processing_until = None;
        stored.updated_at = now;
        Ok(Some(()))
    })
    .await?;
    if let Changed::Written(stored, ()) = recorded {
        tracing::info!(avatar = %stored.id, status = stored.status.as_str(), "avatar profile processed");
    }
    Ok(())
}

/// A source fetched or found: where the toolkit reads it, and the upload it is.
struct Resolved {
    location: String,
    file: AvatarFile,
    report: ProbeReport,
}

/// Fetches, checks and previews the profile's sources: Ok(Err(why)) when they are
/// refused (the profile fails), Err when something of ours failed.
async fn prepare(
    work: &AvatarWork<'_>,
    profile: &AvatarProfile,
) -> anyhow::Result<Result<(AvatarReference, Option<MediaRecord>), String>> {
    let sources = &profile.sources;
    let mut resolved = [None, None, None];
    for (slot, (source, kind, field)) in resolved.iter_mut().zip([
        (&sources.video, UploadKind::Video, "video"),
        (&sources.image, UploadKind::Image, "image"),
        (&sources.audio, UploadKind::Audio, "audio"),
    ]) {
        let Some(source) = source else { continue };
        match resolve(work, profile.organization_id, source, kind, field).await? {
            Ok(found) => *slot = Some(found),
            Err(problem) => return Ok(Err(problem)),
        }
    }
    let [video, image, audio] = resolved;
    // The sound that must carry the person's voice, and what checks its length.
    let (voice, picture) = match (&video, &image, &audio) {
        (Some(video), _, _) => {
            if let Err(problem) = check_length(&video.report, "the video") {
                return Ok(Err(problem));
            }
            if !video.report.streams.iter().any(|stream| stream.codec_type == "audio") {
                return Ok(Err("the video has no sound: an avatar video needs the person speaking".into()));
            }
            (video, video)
        }
        (None, Some(image), Some(audio)) => {
            if let Err(problem) = check_length(&audio.report, "the voice recording") {
                return Ok(Err(problem));
            }
            (audio, image)
        }
        _ => return Ok(Err("the avatar has neither a video nor a picture and a voice recording".into())),
    };
    let loudness = match work.toolkit.loudness(&voice.location).await {
        Ok(loudness) => loudness,
        Err(MediaError::Unavailable(error)) => return Err(error),
        Err(error) => return Ok(Err(format!("the sound could not be read: {error}"))),
    };
    let length_ms = duration_ms(&voice.report).max(1);
    if loudness.max_db < AUDIBLE_MAX_DB {
        return Ok(Err(format!(
            "the sound is silent (its loudest moment is {:.1} dB, below {AUDIBLE_MAX_DB} dB): an avatar needs the \
             person speaking",
            loudness.max_db
        )));
    }
    let silent_percent = loudness.silent_ms.saturating_mul(100) / length_ms;
    if silent_percent > MAX_SILENT_PERCENT {
        return Ok(Err(format!(
            "the sound is mostly silence ({silent_percent}% below {SILENCE_DB} dB, at most {MAX_SILENT_PERCENT}%): \
             an avatar needs the person speaking"
        )));
    }
    let (width, height) = picture_size(&picture.report).unwrap_or((1080, 1080));
    let preview = make_preview(work, profile, video.as_ref(), image.as_ref(), audio.as_ref()).await?;
    let preview = match preview {
        Ok(record) => record,
        Err(problem) => return Ok(Err(problem)),
    };
    let reference = AvatarReference {
        video: video.map(|found| found.file),
        image: image.map(|found| found.file),
        audio: audio.map(|found| found.file),
        width,
        height,
        preview: Some(preview.id),
    };
    Ok(Ok((reference, Some(preview))))
}

/// Where a source is: an upload of the organization, or a URL fetched and stored as one.
async fn resolve(
    work: &AvatarWork<'_>,
    organization: OrganizationId,
    source: &AvatarSource,
    kind: UploadKind,
    field: &str,
) -> anyhow::Result<Result<Resolved, String>> {
    let upload = match source {
        AvatarSource::Upload { id } => match work.uploads.get_upload(organization, *id).await? {
            Some(upload) if upload.kind == kind && upload.status == UploadStatus::Ready => upload,
            _ => return Ok(Err(format!("sources.{field}_id: upload {id} is no longer a ready {field} upload"))),
        },
        AvatarSource::Url { url } => {
            let path = work.scratch.join(format!("{field}-source"));
            let size = match work.downloader.download(url, &path, MAX_SOURCE_BYTES).await {
                Ok(size) => size,
                Err(DownloadError::Refused(problem)) => return Ok(Err(format!("sources.{field}_url: {problem}"))),
                Err(DownloadError::Failed(error)) => {
                    return Ok(Err(format!("sources.{field}_url could not be downloaded: {error:#}")))
                }
            };
            let fetched = uploads::Fetched { kind, path: &path, size };
            let recorded =
                uploads::record_fetched(work.uploads, work.blobs, work.probe, work.clock, organization, &fetched).await;
            match recorded {
                Ok(upload) => upload,
                Err(refused @ (UploadError::NotMedia(_) | UploadError::TooLarge { .. })) => {
                    let refused = refused.to_string().replace("the uploaded file", "the file");
                    return Ok(Err(format!("sources.{field}_url: {refused}")));
                }
                Err(error) => return Err(anyhow::anyhow!("{error}")),
            }
        }
    };
    let blob = upload.blob.ok_or_else(|| anyhow::anyhow!("ready upload {} has no file", upload.id))?;
    let location = work.blobs.read_location(&blob.key, blob.version.as_deref()).await?;
    let report = match work.probe.probe(&location).await {
        Ok(report) => report,
        Err(error) => return Ok(Err(format!("the {field} source could not be read: {error}"))),
    };
    Ok(Ok(Resolved { location, file: AvatarFile { upload: upload.id, key: blob.key, version: blob.version }, report }))
}

fn duration_ms(report: &ProbeReport) -> u64 {
    report.duration_seconds.filter(|seconds| seconds.is_finite() && *seconds > 0.0).map_or(0, |s| (s * 1000.0) as u64)
}

/// Refuses a video or voice recording outside 4–15 s.
fn check_length(report: &ProbeReport, what: &str) -> Result<(), String> {
    let length = duration_ms(report);
    if (MIN_SOURCE_MS..=MAX_SOURCE_MS).contains(&length) {
        return Ok(());
    }
    Err(format!(
        "{what} is {:.1} s long; it must be {} to {} s",
        length as f64 / 1000.0,
        MIN_SOURCE_MS / 1000,
        MAX_SOURCE_MS / 1000
    ))
}

/// The picture's size, even, at most 1080 on its long side.
fn picture_size(report: &ProbeReport) -> Option<(u32, u32)> {
    let stream = report.streams.iter().find(|stream| stream.codec_type == "video")?;
    let (width, height) = (f64::from(stream.width?), f64::from(stream.height?));
    let scale = (1080.0 / width.max(height)).min(1.0);
    let even = |value: f64| ((value * scale / 2.0).round() as u32 * 2).max(2);
    Some((even(width), even(height)))
}

/// Makes and stores the preview: the first seconds, 480 px wide, and its media record.
async fn make_preview(
    work: &AvatarWork<'_>,
    profile: &AvatarProfile,
    video: Option<&Resolved>,
    image: Option<&Resolved>,
    audio: Option<&Resolved>,
) -> anyhow::Result<Result<MediaRecord, String>> {
    let output = work.scratch.join("preview.mp4");
    let job = PreviewJob {
        video: video.map(|found| found.location.clone()),
        image: image.map(|found| found.location.clone()),
        audio: audio.map(|found| found.location.clone()),
        seconds: PREVIEW_SECONDS,
        width: PREVIEW_WIDTH,
        budget: work.budget,
    };
    match work.toolkit.preview(&job, &output).await {
        Ok(()) => {}
        Err(MediaError::Unavailable(error)) => return Err(error),
        Err(error) => return Ok(Err(format!("the preview could not be made: {error}"))),
    }
    let key = format!("avatars/{}/{}/preview-{}.mp4", profile.organization_id, profile.id, profile.attempts);
    work.blobs.put_file(&key, &output, "video/mp4").await?;
    Ok(Ok(MediaRecord {
        id: MediaId::now_v7(),
        organization_id: profile.organization_id,
        // A preview belongs to no run: it carries its profile's ID.
        run_id: RunId::from_uuid(profile.id.as_uuid()),
        kind: MediaKind::Preview,
        key,
        version: None,
        content_type: "video/mp4".into(),
        duration_ms: Some(u64::from(PREVIEW_SECONDS) * 1000),
        created_at: work.clock.now(),
    }))
}
