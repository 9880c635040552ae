//! The uploads flow: a presigned PUT URL, then a finalize step that checks the object is
//! real media of the announced kind (with ffprobe) and records it as an asset.

use std::time::Duration;

use serde::Serialize;

use super::time::Timestamp;
use crate::domain::ids::OrganizationId;
use async_trait::async_trait;

use super::media::ports::{BlobStore, MediaProbe, ProbeError};
use super::media::{ProbeReport, SealedBlob};
use super::time::Clock;
pub use crate::domain::ids::UploadId;
use crate::domain::rejection::{DomainError, Rejection};

/// How long an upload URL stays valid.
pub const UPLOAD_URL_TTL: Duration = Duration::from_secs(3600);
/// Longest video, in milliseconds (5 hours).
pub const MAX_VIDEO_DURATION_MS: u64 = 5 * 3600 * 1000;

/// What an upload holds; the path segment of the uploads endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum UploadKind {
    Video,
    Audio,
    Image,
}

impl UploadKind {
    /// Parses the path segment; anything else names no endpoint.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "video" => Some(Self::Video),
            "audio" => Some(Self::Audio),
            "image" => Some(Self::Image),
            _ => None,
        }
    }

    /// The stored and shown word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Video => "video",
            Self::Audio => "audio",
            Self::Image => "image",
        }
    }

    /// Largest file of this kind, in bytes, and the same limit in words.
    pub fn max_bytes(self) -> (u64, &'static str) {
        match self {
            Self::Video => (5_000_000_000, "5 GB"),
            Self::Audio => (500_000_000, "500 MB"),
            Self::Image => (50_000_000, "50 MB"),
        }
    }

    /// The Content-Type an upload URL of this kind pins when the caller names none.
    pub fn default_content_type(self) -> &'static str {
        match self {
            Self::Video => "video/mp4",
            Self::Audio => "audio/mpeg",
            Self::Image => "image/png",
        }
    }

    /// The Content-Type an upload URL pins: `asked` (a media type of this kind's family,
    /// e.g. `video/quicktime`) or the kind's default. An upload URL never accepts a type
    /// outside the family, so an uploaded page is never stored as one.
    pub fn content_type(self, asked: Option<&str>) -> Result<String, UploadError> {
        let Some(asked) = asked else { return Ok(self.default_content_type().to_owned()) };
        let family = self.as_str();
        let subtype = asked.strip_prefix(family).and_then(|rest| rest.strip_prefix('/'));
        let token = |text: &str| {
            !text.is_empty()
                && text.len() <= 100
                && text.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&byte))
        };
        match subtype {
            Some(subtype) if token(subtype) => Ok(format!("{family}/{}", subtype.to_ascii_lowercase())),
            _ => Err(UploadError::Invalid(format!(
                "content_type must be a {family} media type such as {} (got {asked:?})",
                self.default_content_type()
            ))),
        }
    }
}

/// Where an upload is in its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UploadStatus {
    /// The URL was handed out; the file is not checked yet.
    PendingUpload,
    /// Finalized: the file is media of its kind and usable as an input.
    Ready,
}

/// What ffprobe found out about a finalized file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MediaInfo {
    pub size_bytes: u64,
    pub duration_ms: Option<u64>,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub codec: String,
    pub format: String,
}

/// An upload and, once finalized, the asset it became.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Upload {
    pub id: UploadId,
    pub kind: UploadKind,
    pub status: UploadStatus,
    pub created_at: Timestamp,
    pub upload_expires_at: Timestamp,
    pub finalized_at: Option<Timestamp>,
    #[serde(flatten)]
    pub media: Option<MediaInfo>,
    /// Where the finalized file is; internal, runs read their inputs from it.
    #[serde(skip)]
    pub blob: Option<SealedBlob>,
}

impl Upload {
    /// The blob-store key the upload URL writes to.
    pub fn object_key(organization: OrganizationId, id: UploadId) -> String {
        format!("uploads/{organization}/{id}")
    }

    /// Where finalized files are kept, out of reach of the upload URL (a store that
    /// seals by moving gives each finalize its own key under this prefix).
    pub fn sealed_prefix(organization: OrganizationId, id: UploadId) -> String {
        format!("assets/{organization}/{id}")
    }

    /// The asset this upload becomes once the sealed `blob` was probed as `media`: a
    /// pending upload turns ready; one that is ready already stays as it is.
    pub fn finalized(self, media: MediaInfo, blob: SealedBlob, at: Timestamp) -> Upload {
        match self.status {
            UploadStatus::Ready => self,
            UploadStatus::PendingUpload => Upload {
                status: UploadStatus::Ready,
                finalized_at: Some(at),
                media: Some(media),
                blob: Some(blob),
                ..self
            },
        }
    }
}

/// The answer of `get_upload_url`.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "Where and how to PUT the file.")]
pub struct UploadTicket {
    #[schema(value_type = uuid::Uuid)]
    pub id: UploadId,
    pub upload_url: String,
    /// Always `PUT`.
    pub upload_method: &'static str,
    /// Headers the PUT must carry as given (the URL's signature covers them): its
    /// `Content-Type`, and on S3 the tag that lets a never-finalized upload expire.
    pub upload_headers: std::collections::BTreeMap<String, String>,
    pub expires_at: Timestamp,
}

/// Everything that can go wrong with an upload request.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("Upload not found")]
    NotFound,
    /// The request is refused; the text names the problem (400).
    #[error("{0}")]
    Invalid(String),
    #[error("no file has been uploaded for this id yet: PUT it to the upload_url first")]
    NotUploaded,
    #[error("{kind} uploads may be at most {limit}; this file is {size} bytes")]
    TooLarge { kind: &'static str, limit: &'static str, size: u64 },
    /// The file is not media of the upload's kind; the text says why.
    #[error("{0}")]
    NotMedia(String),
    #[error("media storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

/// A property outside a body's declaration is a 400 `{ detail }`.
impl crate::core::json::Refusal for UploadError {
    fn unknown_property(message: String) -> Self {
        UploadError::Invalid(message)
    }
}

crate::closed_body! {
    /// `POST /uploads/{kind}/get_upload_url`; the body is optional.
    #[schema(as = UploadUrlRequest)]
    pub struct UploadUrlBody -> UploadError {
        /// The media type the URL pins (default: the kind's usual one, e.g. `video/mp4`).
        #[schema(nullable = false)]
        content_type: Option<String> = |value: Option<&serde_json::Value>| match value {
            None => Ok(None),
            Some(serde_json::Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(UploadError::Invalid("content_type must be a string".into())),
        },
    }
}

crate::closed_body! {
    /// `POST /uploads/{kind}/finalize_upload`
    #[schema(as = FinalizeUpload)]
    pub struct FinalizeBody -> UploadError {
        #[schema(value_type = uuid::Uuid)]
        id: UploadId = |value: Option<&serde_json::Value>| match value {
            Some(serde_json::Value::String(id)) => parse_upload_id(id),
            Some(_) => Err(UploadError::Invalid("id must be a UUID string".into())),
            None => Err(UploadError::Invalid("id is required".into())),
        },
    }
}

impl DomainError for UploadError {
    fn rejection(self) -> Result<Rejection, anyhow::Error> {
        match self {
            UploadError::NotFound => Ok(Rejection::NotFound),
            UploadError::Invalid(_)
            | UploadError::NotUploaded
            | UploadError::TooLarge { .. }
            | UploadError::NotMedia(_) => Ok(Rejection::Invalid),
            UploadError::Backend(cause) => Err(cause),
        }
    }
}

/// Hands out a presigned PUT URL for a new upload of `kind`.
pub async fn create_upload(
    repo: &dyn UploadRepo,
    blobs: &dyn BlobStore,
    clock: &dyn Clock,
    organization: OrganizationId,
    kind: UploadKind,
    content_type: Option<&str>,
) -> Result<UploadTicket, UploadError> {
    let content_type = kind.content_type(content_type)?;
    let now = clock.now();
    let id = UploadId::new_v4();
    let expires_at = now.after(UPLOAD_URL_TTL);
    let target = blobs.upload_url(&Upload::object_key(organization, id), &content_type, UPLOAD_URL_TTL).await?;
    let upload = Upload {
        id,
        kind,
        status: UploadStatus::PendingUpload,
        created_at: now,
        upload_expires_at: expires_at,
        finalized_at: None,
        media: None,
        blob: None,
    };
    repo.put_upload(organization, &upload).await?;
    let upload_headers = target.headers.into_iter().collect();
    Ok(UploadTicket { id, upload_url: target.url, upload_method: "PUT", upload_headers, expires_at })
}

/// An upload of `kind` of the organization.
pub async fn get_upload(
    repo: &dyn UploadRepo,
    organization: OrganizationId,
    kind: UploadKind,
    id: UploadId,
) -> Result<Upload, UploadError> {
    match repo.get_upload(organization, id).await? {
        Some(upload) if upload.kind == kind => Ok(upload),
        _ => Err(UploadError::NotFound),
    }
}

/// Checks the uploaded file and records it as an asset; finalizing again returns the
/// asset already recorded.
pub async fn finalize_upload(
    repo: &dyn UploadRepo,
    blobs: &dyn BlobStore,
    probe: &dyn MediaProbe,
    clock: &dyn Clock,
    organization: OrganizationId,
    kind: UploadKind,
    id: UploadId,
) -> Result<Upload, UploadError> {
    let upload = get_upload(repo, organization, kind, id).await?;
    if upload.status == UploadStatus::Ready {
        return Ok(upload);
    }
    // Sealed first, so that the file measured and probed is the one recorded, whatever is
    // PUT to the upload URL afterwards or however many finalizes run at once: each one
    // probes the sealed file it got, and only the first to record wins.
    let sealed = blobs.seal(&Upload::object_key(organization, id), &Upload::sealed_prefix(organization, id)).await?;
    let blob = sealed.ok_or(UploadError::NotUploaded)?;
    let media = match check_sealed(blobs, probe, kind, &blob).await {
        Ok(media) => media,
        Err(refused @ (UploadError::TooLarge { .. } | UploadError::NotMedia(_))) => {
            // Refused for good: the sealed copy goes (a failure of ours keeps it, to be
            // finalized again).
            blobs.discard(&blob).await?;
            return Err(refused);
        }
        Err(error) => return Err(error),
    };
    // Before the record: a recorded asset must never be one storage still takes for an
    // abandoned upload.
    blobs.mark_finalized(&blob).await?;
    let finalized = upload.finalized(media, blob, clock.now());
    repo.record_finalized(organization, &finalized).await?.ok_or(UploadError::NotFound)
}

/// A file the service fetched itself: what it should be, where it is, its size.
#[derive(Clone, Copy, Debug)]
pub struct Fetched<'a> {
    pub kind: UploadKind,
    pub path: &'a std::path::Path,
    pub size: u64,
}

/// Records a file the service fetched itself (an avatar's URL source) as a ready upload
/// of `kind`: stored under the upload's sealed prefix, probed and classified like a
/// finalized upload. A file that is not media of its kind is refused with why, and no
/// upload is recorded (the stored copy is left as an orphan, never a dangling record).
pub async fn record_fetched(
    repo: &dyn UploadRepo,
    blobs: &dyn BlobStore,
    probe: &dyn MediaProbe,
    clock: &dyn Clock,
    organization: OrganizationId,
    fetched: &Fetched<'_>,
) -> Result<Upload, UploadError> {
    let Fetched { kind, path, size } = *fetched;
    let id = UploadId::new_v4();
    let key = format!("{}/fetched", Upload::sealed_prefix(organization, id));
    let (limit_bytes, limit) = kind.max_bytes();
    if size > limit_bytes {
        return Err(UploadError::TooLarge { kind: kind.as_str(), limit, size });
    }
    blobs.put_file(&key, path, kind.default_content_type()).await?;
    let blob = SealedBlob { key, version: None, size };
    let media = check_sealed(blobs, probe, kind, &blob).await?;
    let now = clock.now();
    let upload = Upload {
        id,
        kind,
        status: UploadStatus::PendingUpload,
        created_at: now,
        upload_expires_at: now,
        finalized_at: None,
        media: None,
        blob: None,
    };
    repo.put_upload(organization, &upload).await?;
    let finalized = upload.finalized(media, blob, now);
    repo.record_finalized(organization, &finalized).await?.ok_or(UploadError::NotFound)
}

/// The size and kind of a sealed upload: what it holds, or why it is refused.
async fn check_sealed(
    blobs: &dyn BlobStore,
    probe: &dyn MediaProbe,
    kind: UploadKind,
    blob: &SealedBlob,
) -> Result<MediaInfo, UploadError> {
    let (limit_bytes, limit) = kind.max_bytes();
    if blob.size > limit_bytes {
        return Err(UploadError::TooLarge { kind: kind.as_str(), limit, size: blob.size });
    }
    let location = blobs.probe_location(blob).await?;
    let report = match probe.probe(&location).await {
        Ok(report) => report,
        Err(ProbeError::Unreadable(reason)) => {
            return Err(UploadError::NotMedia(format!(
                "the uploaded file is not a media file ffprobe can read: {reason}"
            )))
        }
        Err(ProbeError::Unavailable(error)) => return Err(UploadError::Backend(error)),
    };
    classify(kind, &report, blob.size)
}

/// Image containers as ffprobe names them: a single picture, even though its stream's
/// type is `video`.
fn is_image_format(format_name: &str) -> bool {
    format_name == "image2" || format_name.ends_with("_pipe") || format_name == "gif" || format_name == "webp"
}

/// Decides whether a probed file is media of `kind` and describes it.
pub fn classify(kind: UploadKind, report: &ProbeReport, size_bytes: u64) -> Result<MediaInfo, UploadError> {
    let picture_stream = report.streams.iter().find(|stream| stream.codec_type == "video");
    let video_stream = report.streams.iter().find(|stream| stream.codec_type == "video" && !stream.attached_pic);
    let audio_stream = report.streams.iter().find(|stream| stream.codec_type == "audio");
    let image_format = is_image_format(&report.format_name);
    let duration_ms = report
        .duration_seconds
        .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
        .map(|seconds| (seconds * 1000.0).round() as u64);
    let not = |what: &str| UploadError::NotMedia(format!("the uploaded file is not {what}"));
    let (stream, duration_ms) = match kind {
        UploadKind::Video => {
            let stream =
                video_stream.filter(|_| !image_format).ok_or_else(|| not("a video: it has no video stream"))?;
            let duration_ms = duration_ms.ok_or_else(|| not("a video: it has no duration"))?;
            if duration_ms > MAX_VIDEO_DURATION_MS {
                return Err(UploadError::NotMedia(format!(
                    "videos may be at most 5 hours long; this one is {:.1} hours",
                    duration_ms as f64 / 3_600_000.0
                )));
            }
            (stream, Some(duration_ms))
        }
        UploadKind::Audio => {
            if video_stream.is_some() {
                return Err(not("audio: it has a video stream (upload it as a video)"));
            }
            let stream = audio_stream.ok_or_else(|| not("audio: it has no audio stream"))?;
            (stream, Some(duration_ms.ok_or_else(|| not("audio: it has no duration"))?))
        }
        UploadKind::Image => {
            let stream = picture_stream.filter(|_| image_format).ok_or_else(|| not("an image"))?;
            (stream, None)
        }
    };
    Ok(MediaInfo {
        size_bytes,
        duration_ms,
        width: stream.width.filter(|_| kind != UploadKind::Audio),
        height: stream.height.filter(|_| kind != UploadKind::Audio),
        codec: stream.codec_name.clone(),
        format: report.format_name.clone(),
    })
}

/// Parses an upload ID from a path or body; anything but a UUID names no upload.
pub fn parse_upload_id(text: &str) -> Result<UploadId, UploadError> {
    UploadId::parse(text).ok_or(UploadError::NotFound)
}

/// Upload records (assets once finalized).
#[async_trait]
pub trait UploadRepo: Send + Sync {
    /// Stores a new pending upload.
    async fn put_upload(&self, organization: OrganizationId, upload: &Upload) -> anyhow::Result<()>;
    /// An upload of the organization.
    async fn get_upload(&self, organization: OrganizationId, id: UploadId) -> anyhow::Result<Option<Upload>>;
    /// Records a finalized upload (see [`Upload::finalized`]) if the stored one is still
    /// pending, so that the first finalize wins; returns the upload as stored afterwards,
    /// None when there is no such upload.
    async fn record_finalized(&self, organization: OrganizationId, upload: &Upload) -> anyhow::Result<Option<Upload>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::media::ProbedStream;

    fn stream(codec_type: &str, codec_name: &str) -> ProbedStream {
        ProbedStream {
            frame_rate: None,
            codec_type: codec_type.into(),
            codec_name: codec_name.into(),
            width: Some(640),
            height: Some(360),
            attached_pic: false,
        }
    }

    fn report(format_name: &str, duration: Option<f64>, streams: Vec<ProbedStream>) -> ProbeReport {
        ProbeReport { format_name: format_name.into(), duration_seconds: duration, streams }
    }

    #[test]
    fn a_video_needs_a_moving_picture_and_at_most_five_hours() {
        let mp4 = report("mov,mp4", Some(2.5), vec![stream("video", "h264"), stream("audio", "aac")]);
        let info = classify(UploadKind::Video, &mp4, 10).unwrap();
        assert_eq!((info.duration_ms, info.width, info.codec.as_str()), (Some(2500), Some(640), "h264"));
        let long = report("mov,mp4", Some(5.0 * 3600.0 + 1.0), vec![stream("video", "h264")]);
        assert!(classify(UploadKind::Video, &long, 10).is_err());
        let png = report("png_pipe", None, vec![stream("video", "png")]);
        assert!(classify(UploadKind::Video, &png, 10).is_err());
        let wav = report("wav", Some(1.0), vec![stream("audio", "pcm_s16le")]);
        assert!(classify(UploadKind::Video, &wav, 10).is_err());
    }

    #[test]
    fn audio_with_cover_art_is_audio_but_a_video_is_not() {
        let mut cover = stream("video", "mjpeg");
        cover.attached_pic = true;
        let mp3 = report("mp3", Some(3.0), vec![stream("audio", "mp3"), cover]);
        let info = classify(UploadKind::Audio, &mp3, 10).unwrap();
        assert_eq!((info.codec.as_str(), info.width), ("mp3", None));
        let mp4 = report("mov,mp4", Some(2.0), vec![stream("video", "h264"), stream("audio", "aac")]);
        assert!(classify(UploadKind::Audio, &mp4, 10).is_err());
    }

    #[test]
    fn finalizing_turns_a_pending_upload_ready_once() {
        let now = Timestamp::now();
        let pending = Upload {
            id: UploadId::new_v4(),
            kind: UploadKind::Image,
            status: UploadStatus::PendingUpload,
            created_at: now,
            upload_expires_at: now,
            finalized_at: None,
            media: None,
            blob: None,
        };
        let media = |codec: &str| MediaInfo {
            size_bytes: 1,
            duration_ms: None,
            width: Some(1),
            height: Some(1),
            codec: codec.into(),
            format: "png_pipe".into(),
        };
        let blob = |key: &str| SealedBlob { key: key.into(), version: None, size: 1 };
        let ready = pending.finalized(media("png"), blob("a"), now);
        assert_eq!(
            (ready.status, ready.finalized_at, ready.blob.as_ref().unwrap().key.as_str()),
            (UploadStatus::Ready, Some(now), "a")
        );
        let again = ready.clone().finalized(media("gif"), blob("b"), Timestamp::now());
        assert_eq!(again, ready, "a ready asset keeps what it was finalized with");
    }

    #[test]
    fn an_image_is_a_single_picture_format() {
        let png = report("png_pipe", None, vec![stream("video", "png")]);
        assert_eq!(classify(UploadKind::Image, &png, 10).unwrap().codec, "png");
        let mp4 = report("mov,mp4", Some(2.0), vec![stream("video", "h264")]);
        assert!(classify(UploadKind::Image, &mp4, 10).is_err());
    }
}
