//! What the media work needs from the outside world: where files live, the toolkit that
//! edits and probes them, and the downloader of URL inputs.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{MediaError, MediaRecord, ProbeReport, RenderJob, SealedBlob};
use crate::domain::ids::MediaId;

/// Where the records of media IDs are kept (written by runs with their outputs, read by
/// whoever is handed a media ID: runs' inputs, social posts, the media links).
#[async_trait]
pub trait MediaRecords: Send + Sync {
    /// A media record by ID (links carry no organization: their signature is the authority).
    async fn get_media(&self, id: MediaId) -> anyhow::Result<Option<MediaRecord>>;
}

/// Where media files live: S3, or a local folder served by `serve`.
#[async_trait]
pub trait BlobStore: Send + Sync {
    /// A URL that accepts HTTP PUTs of the object at `key` for `ttl`, sent with
    /// `content_type` (the URL is refused with any other) and the other headers the
    /// target names.
    async fn upload_url(&self, key: &str, content_type: &str, ttl: Duration) -> anyhow::Result<UploadTarget>;
    /// Marks a sealed upload as finalized, where storage removes uploads never finalized
    /// (S3: a lifecycle rule expires objects still tagged as pending uploads).
    async fn mark_finalized(&self, blob: &SealedBlob) -> anyhow::Result<()> {
        let _ = blob;
        Ok(())
    }
    /// Freezes what was uploaded to `key` so that later PUTs cannot change it and says
    /// where it now is (a new key under `sealed_prefix`, or a pinned version); None when
    /// nothing was uploaded. Two seals never give the same place different contents.
    async fn seal(&self, key: &str, sealed_prefix: &str) -> anyhow::Result<Option<SealedBlob>>;
    /// Removes what [`Self::seal`] made of an upload that was refused (too large, not
    /// media of its kind), so that a failed finalize leaves no copy behind. Nothing to do
    /// where sealing made no copy (S3 pins a version of the uploaded object).
    async fn discard(&self, blob: &SealedBlob) -> anyhow::Result<()> {
        let _ = blob;
        Ok(())
    }
    /// A path or short-lived URL from which the media toolkit can read a sealed object.
    async fn probe_location(&self, blob: &SealedBlob) -> anyhow::Result<String>;
    /// Stores `bytes` at `key`.
    async fn put(&self, key: &str, bytes: Bytes, content_type: &str) -> anyhow::Result<()>;
    /// A URL that answers HTTP GETs of the object at `key` (of `version`, when given)
    /// for `ttl`.
    async fn download_url(&self, key: &str, version: Option<&str>, ttl: Duration) -> anyhow::Result<String>;
    /// As [`Self::download_url`], answered with `content_type` whatever the object was
    /// stored with (a media link never serves a file as a page).
    async fn media_url(
        &self,
        key: &str,
        version: Option<&str>,
        content_type: &str,
        ttl: Duration,
    ) -> anyhow::Result<String> {
        let _ = content_type;
        self.download_url(key, version, ttl).await
    }
    /// Stores the file at `path` as the object at `key` (streamed, not read into memory).
    async fn put_file(&self, key: &str, path: &std::path::Path, content_type: &str) -> anyhow::Result<()>;
    /// Stores what `chunks` hold as the object at `key`, piece by piece as they arrive:
    /// never the whole in memory nor on this machine's disk (S3: a multipart upload).
    /// Returns the bytes stored; an error of the stream (a [`DownloadError`] in it, say)
    /// stores nothing.
    async fn put_stream(&self, key: &str, chunks: Chunks, content_type: &str) -> anyhow::Result<u64>;
    /// A path or short-lived URL from which the media toolkit can read the object at
    /// `key` (of `version`, when given).
    async fn read_location(&self, key: &str, version: Option<&str>) -> anyhow::Result<String>;
    /// Stores the file at `path` as the object at `key` while a writer is still
    /// appending to it (a join's MP4 as ffmpeg writes it): the writer appends, and may
    /// write again only within the file's first `held` bytes (an MP4's index room and
    /// `mdat` header) before it ends. `finished` resolves when it ended, true if well;
    /// nothing is stored otherwise, and the answer says whether the object was stored.
    /// A store may send what is final as it comes and give its disk back (S3: parts of a
    /// multipart upload, the first sent last, their blocks punched out of the file), so
    /// that a long output never needs its whole size on the task's disk; by default the
    /// file is stored once written.
    async fn put_growing(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
        held: u64,
        finished: futures::future::BoxFuture<'_, bool>,
    ) -> anyhow::Result<bool> {
        let _ = held;
        if !finished.await {
            return Ok(false);
        }
        self.put_file(key, path, content_type).await?;
        Ok(true)
    }
    /// Removes the object at `key`; one already gone is no error. (On a versioned
    /// bucket this leaves a delete marker; the bucket's lifecycle rules remove what it
    /// hides.)
    async fn delete(&self, key: &str) -> anyhow::Result<()>;
}

/// Where and how an upload is PUT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadTarget {
    pub url: String,
    /// Headers the PUT must carry, as given (the URL's signature covers them).
    pub headers: Vec<(String, String)>,
}

/// Edits media (ffmpeg).
#[async_trait]
pub trait MediaToolkit: Send + Sync {
    /// Renders `job` to its output file; stops (killing the work) as soon as `cancelled`
    /// becomes true.
    async fn render(&self, job: &RenderJob, cancelled: tokio::sync::watch::Receiver<bool>) -> Result<(), MediaError>;
    /// Joins the parts of a render split in segments (`job`) into its output, copying
    /// their streams; stops as [`render`](Self::render) does.
    async fn join(&self, job: &super::JoinJob, cancelled: tokio::sync::watch::Receiver<bool>)
        -> Result<(), MediaError>;
    /// Writes a JPEG thumbnail of the video at `location` to `output`.
    async fn thumbnail(&self, location: &str, duration_ms: u64, output: &std::path::Path) -> Result<(), MediaError>;
    /// Writes a JPEG picture of the waveform of the sound at `location` to `output`.
    async fn waveform(&self, location: &str, output: &std::path::Path) -> Result<(), MediaError>;
    /// How loud the sound of the media at `location` is, and how much of it is silence.
    async fn loudness(&self, location: &str) -> Result<super::Loudness, MediaError>;
    /// Writes a short H.264/AAC MP4 preview of `job` to `output`.
    async fn preview(&self, job: &super::PreviewJob, output: &std::path::Path) -> Result<(), MediaError>;
}

/// Why a download failed.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// The URL cannot be used; the text says why (status, size, address).
    #[error("{0}")]
    Refused(String),
    #[error("download failed: {0:#}")]
    Failed(anyhow::Error),
}

/// A body read piece by piece, on its way into the media store.
pub type Chunks = futures::stream::BoxStream<'static, anyhow::Result<Bytes>>;

/// The refusal of a URL that answers with a web page rather than a media file.
pub const WEB_PAGE_REFUSAL: &str = "the server answered with a web page (text/html), not a video file";

/// Fetches URL inputs.
#[async_trait]
pub trait Downloader: Send + Sync {
    /// Streams `url` into the file `output`, refusing more than `max_bytes`; returns the size.
    async fn download(&self, url: &str, output: &std::path::Path, max_bytes: u64) -> Result<u64, DownloadError>;
    /// As [`Downloader::download`], giving up on a connection not made within `connect`
    /// (a quick read, such as a feed's: the caller bounds the whole read with its own
    /// deadline).
    async fn download_connecting_within(
        &self,
        url: &str,
        output: &std::path::Path,
        max_bytes: u64,
        connect: std::time::Duration,
    ) -> Result<u64, DownloadError>;
    /// Opens `url` for [`BlobStore::put_stream`]: the checks of [`Downloader::download`]
    /// are made before the first chunk, and a body that grows past `max_bytes` ends the
    /// stream with a [`DownloadError::Refused`] (as its error's cause).
    async fn open(&self, url: &str, max_bytes: u64) -> Result<Chunks, DownloadError>;
}

/// Why a file could not be probed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The file is not media the toolkit can read; the text says why.
    #[error("{0}")]
    Unreadable(String),
    /// The toolkit itself could not run.
    #[error("media probe unavailable: {0:#}")]
    Unavailable(anyhow::Error),
}

/// Reads media properties (ffprobe).
#[async_trait]
pub trait MediaProbe: Send + Sync {
    /// Probes the file at a path or URL.
    async fn probe(&self, location: &str) -> Result<ProbeReport, ProbeError>;
}
