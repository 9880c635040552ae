//! Media in S3: presigned PUT URLs for uploads, HEAD for sizes, short presigned GET URLs
//! from which ffprobe reads only the bytes it needs.

use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, Tag, Tagging, VersioningConfiguration};
use aws_sdk_s3::Client;
use bytes::Bytes;

use super::{growing, ActionLog, LazyClient};
use crate::core::retry::AWS_SDK_CALLS;
use crate::domain::media::ports::{BlobStore, Chunks, UploadTarget};
use crate::domain::media::SealedBlob;

/// How long ffprobe's read URL stays valid.
const PROBE_URL_TTL: Duration = Duration::from_secs(15 * 60);

/// A bucket of media objects.
#[derive(Clone)]
pub struct S3BlobStore {
    client: LazyClient<Client>,
    bucket: String,
}

impl S3BlobStore {
    /// Connects with the standard AWS settings of the environment. With an endpoint
    /// override (an emulator) addresses use the path style, which needs no DNS per bucket.
    pub async fn connect(bucket: impl Into<String>) -> Self {
        let shared = crate::adapters::aws_env::load_defaults().await;
        Self::from_config(&shared, bucket)
    }

    /// Uses AWS settings loaded already (one load per process serves every client); the
    /// client is made on first use.
    pub fn from_config(shared: &aws_config::SdkConfig, bucket: impl Into<String>) -> Self {
        Self { client: LazyClient::new(shared), bucket: bucket.into() }
    }

    fn client(&self) -> &Client {
        self.client.get(Self::make_client)
    }

    /// The client of the bucket: the retries of `AWS_SDK_CALLS`, where an attempt may
    /// take the whole budget, since a PUT of a large response body is one attempt.
    fn make_client(shared: &aws_config::SdkConfig) -> Client {
        let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
        let emulated = set("AWS_ENDPOINT_URL_S3") || set("AWS_ENDPOINT_URL");
        let retry = RetryConfig::standard()
            .with_max_attempts(AWS_SDK_CALLS.max_attempts)
            .with_initial_backoff(AWS_SDK_CALLS.first_delay)
            .with_max_backoff(AWS_SDK_CALLS.max_delay);
        let timeout = TimeoutConfig::builder()
            .operation_attempt_timeout(AWS_SDK_CALLS.budget)
            .operation_timeout(AWS_SDK_CALLS.budget)
            .build();
        let config = aws_sdk_s3::config::Builder::from(shared)
            .force_path_style(emulated)
            .retry_config(retry)
            .timeout_config(timeout)
            .build();
        Client::from_conf(config)
    }

    /// Creates the bucket, versioned, when it does not exist (local use; AWS gets it from SAM).
    pub async fn ensure_bucket(&self) -> anyhow::Result<()> {
        if self.client().head_bucket().bucket(&self.bucket).send().await.is_ok() {
            return Ok(());
        }
        let created = self.client().create_bucket().bucket(&self.bucket).send().await;
        if let Err(error) = created {
            let service = error.into_service_error();
            if !service.is_bucket_already_owned_by_you() && !service.is_bucket_already_exists() {
                return Err(anyhow::Error::new(service).context(format!("creating bucket {}", self.bucket)));
            }
        }
        let versioning = VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled).build();
        self.client()
            .put_bucket_versioning()
            .bucket(&self.bucket)
            .versioning_configuration(versioning)
            .send()
            .await
            .with_context(|| format!("enabling versioning on bucket {}", self.bucket))?;
        Ok(())
    }
}

/// Maps every call to the IAM actions it needs, presigned ones included (the URL is
/// used with the signer's permissions).
#[derive(Debug)]
struct RecordActions(ActionLog);

impl aws_sdk_s3::config::Intercept for RecordActions {
    fn name(&self) -> &'static str {
        "RecordActions"
    }

    fn read_before_execution(
        &self,
        context: &aws_sdk_s3::config::interceptors::BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut aws_sdk_s3::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        use aws_sdk_s3::operation as op;
        let input = context.input();
        let actions: &[&str] = if let Some(put) = input.downcast_ref::<op::put_object::PutObjectInput>() {
            if put.tagging().is_some() {
                &["s3:PutObject", "s3:PutObjectTagging"]
            } else {
                &["s3:PutObject"]
            }
        } else if let Some(tagging) = input.downcast_ref::<op::put_object_tagging::PutObjectTaggingInput>() {
            if tagging.version_id().is_some() {
                &["s3:PutObjectVersionTagging"]
            } else {
                &["s3:PutObjectTagging"]
            }
        } else if input.downcast_ref::<op::create_multipart_upload::CreateMultipartUploadInput>().is_some()
            || input.downcast_ref::<op::upload_part::UploadPartInput>().is_some()
            || input.downcast_ref::<op::complete_multipart_upload::CompleteMultipartUploadInput>().is_some()
        {
            // S3 authorizes a multipart upload's calls as PutObject.
            &["s3:PutObject"]
        } else if input.downcast_ref::<op::abort_multipart_upload::AbortMultipartUploadInput>().is_some() {
            &["s3:AbortMultipartUpload"]
        } else if input.downcast_ref::<op::delete_object::DeleteObjectInput>().is_some() {
            &["s3:DeleteObject"]
        } else if input.downcast_ref::<op::head_object::HeadObjectInput>().is_some() {
            // Without ListBucket, S3 answers 403 instead of 404 for a missing key.
            &["s3:GetObject", "s3:ListBucket"]
        } else if let Some(get) = input.downcast_ref::<op::get_object::GetObjectInput>() {
            if get.version_id().is_some() {
                &["s3:GetObjectVersion"]
            } else {
                &["s3:GetObject"]
            }
        } else {
            &["s3:unrecognized-operation"]
        };
        self.0.record(actions.iter().map(|action| (*action).to_owned()));
        Ok(())
    }
}

impl S3BlobStore {
    /// A presigned GET of the object at `key` (of `version`), answered with
    /// `content_type` when given, for `ttl`.
    async fn presigned_get(
        &self,
        key: &str,
        version: Option<&str>,
        content_type: Option<&str>,
        ttl: Duration,
    ) -> anyhow::Result<String> {
        let presigned = self
            .client()
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
            .set_response_content_type(content_type.map(str::to_owned))
            .presigned(PresigningConfig::expires_in(ttl)?)
            .await
            .context("presigning a download URL")?;
        Ok(presigned.uri().to_owned())
    }

    /// The tags of the object at `key` (of `version`): what the lifecycle rules see.
    pub async fn tags(&self, key: &str, version: Option<&str>) -> anyhow::Result<Vec<(String, String)>> {
        let tagging = self
            .client()
            .get_object_tagging()
            .bucket(&self.bucket)
            .key(key)
            .set_version_id(version.map(str::to_owned))
            .send()
            .await
            .map_err(|error| unavailable(error, "reading an object's tags"))?;
        Ok(tagging.tag_set().iter().map(|tag| (tag.key().to_owned(), tag.value().to_owned())).collect())
    }

    /// A copy of this store whose client records the IAM action of every call.
    pub fn recording_actions(&self) -> (Self, ActionLog) {
        let log = ActionLog::default();
        let config = self.client().config().to_builder().interceptor(RecordActions(log.clone())).build();
        (Self { client: LazyClient::ready(Client::from_conf(config)), bucket: self.bucket.clone() }, log)
    }
}

#[async_trait]
impl BlobStore for S3BlobStore {
    async fn upload_url(&self, key: &str, content_type: &str, ttl: Duration) -> anyhow::Result<UploadTarget> {
        // Both headers are signed: S3 refuses a PUT with another type, and the tag lets
        // the bucket's lifecycle rule expire an upload never finalized.
        let presigned = self
            .client()
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .tagging(PENDING_UPLOAD_TAG)
            .presigned(PresigningConfig::expires_in(ttl)?)
            .await
            .context("presigning an upload URL")?;
        let headers = presigned.headers().map(|(name, value)| (header_name(name), value.to_owned())).collect();
        Ok(UploadTarget { url: presigned.uri().to_owned(), headers })
    }

    async fn mark_finalized(&self, blob: &SealedBlob) -> anyhow::Result<()> {
        let tag = Tag::builder().key(UPLOAD_TAG_KEY).value("finalized").build().context("an object tag")?;
        let tagging = Tagging::builder().tag_set(tag).build().context("an object tagging")?;
        self.client()
            .put_object_tagging()
            .bucket(&self.bucket)
            .key(&blob.key)
            .set_version_id(blob.version.clone())
            .tagging(tagging)
            .send()
            .await
            .map_err(|error| unavailable(error, "marking an upload finalized"))?;
        Ok(())
    }

    async fn seal(&self, key: &str, _sealed_prefix: &str) -> anyhow::Result<Option<SealedBlob>> {
        // The bucket is versioned: pinning the current version freezes the content without
        // copying it (a copy of a 5 GB object would outlast the request).
        match self.client().head_object().bucket(&self.bucket).key(key).send().await {
            Ok(head) => Ok(Some(SealedBlob {
                key: key.to_owned(),
                version: head.version_id().filter(|version| *version != "null").map(str::to_owned),
                size: head.content_length().unwrap_or(0).max(0) as u64,
            })),
            Err(error) if error.as_service_error().is_some_and(|service| service.is_not_found()) => Ok(None),
            Err(error) => Err(unavailable(error, "reading an uploaded object")),
        }
    }

    async fn probe_location(&self, blob: &SealedBlob) -> anyhow::Result<String> {
        let presigned = self
            .client()
            .get_object()
            .bucket(&self.bucket)
            .key(&blob.key)
            .set_version_id(blob.version.clone())
            .presigned(PresigningConfig::expires_in(PROBE_URL_TTL)?)
            .await
            .context("presigning a read URL")?;
        Ok(presigned.uri().to_owned())
    }

    async fn put(&self, key: &str, bytes: Bytes, content_type: &str) -> anyhow::Result<()> {
        self.client()
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(ByteStream::from(bytes))
            .send()
            .await
            .map_err(|error| unavailable(error, "storing an object"))?;
        Ok(())
    }

    async fn download_url(&self, key: &str, version: Option<&str>, ttl: Duration) -> anyhow::Result<String> {
        self.presigned_get(key, version, None, ttl).await
    }

    async fn media_url(
        &self,
        key: &str,
        version: Option<&str>,
        content_type: &str,
        ttl: Duration,
    ) -> anyhow::Result<String> {
        self.presigned_get(key, version, Some(content_type), ttl).await
    }

    async fn put_file(&self, key: &str, path: &std::path::Path, content_type: &str) -> anyhow::Result<()> {
        let body = ByteStream::from_path(path).await.with_context(|| format!("reading {}", path.display()))?;
        self.client()
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(body)
            .send()
            .await
            .map_err(|error| unavailable(error, "storing a file"))?;
        Ok(())
    }

    async fn read_location(&self, key: &str, version: Option<&str>) -> anyhow::Result<String> {
        self.download_url(key, version, READ_URL_TTL).await
    }

    async fn delete(&self, key: &str) -> anyhow::Result<()> {
        // S3 answers a key that is not there as deleted too.
        self.client()
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|error| unavailable(error, "deleting a file"))?;
        Ok(())
    }

    async fn put_stream(&self, key: &str, mut chunks: Chunks, content_type: &str) -> anyhow::Result<u64> {
        use futures::StreamExt;
        // The first part decides: a body that ends within it is one PutObject.
        let mut part = Vec::with_capacity(MULTIPART_PART_BYTES);
        let mut ended = false;
        while part.len() < MULTIPART_PART_BYTES {
            match chunks.next().await.transpose()? {
                Some(chunk) => part.extend_from_slice(&chunk),
                None => {
                    ended = true;
                    break;
                }
            }
        }
        if ended {
            let size = part.len() as u64;
            self.put(key, Bytes::from(part), content_type).await?;
            return Ok(size);
        }
        let upload_id = self.start_multipart(key, content_type).await?;
        match self.upload_parts(key, &upload_id, part, chunks).await {
            Ok(size) => Ok(size),
            Err(error) => {
                self.abort_multipart(key, &upload_id).await;
                Err(error)
            }
        }
    }

    async fn put_growing(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
        held: u64,
        finished: futures::future::BoxFuture<'_, bool>,
    ) -> anyhow::Result<bool> {
        // The first part holds what the writer may write again; S3's least part is 5 MiB.
        let first = (held.next_multiple_of(1 << 20)).max(MULTIPART_PART_BYTES as u64);
        let mut upload = GrowingUpload { store: self, key, path, first, upload_id: None, completed: Vec::new() };
        let sent = upload.send(content_type, finished).await;
        if !matches!(sent, Ok(true)) {
            if let Some(upload_id) = &upload.upload_id {
                self.abort_multipart(key, upload_id).await;
            }
        }
        sent
    }
}

/// A file stored while its writer still appends to it ([`BlobStore::put_growing`]):
/// every part but the first is sent as soon as the file holds it whole (the writer
/// appends only past the first part) and its blocks are given back; the first part,
/// which the writer writes again when it ends, is sent last. A file that ends within
/// two parts is one PutObject.
struct GrowingUpload<'a> {
    store: &'a S3BlobStore,
    key: &'a str,
    path: &'a std::path::Path,
    /// The first part's length: what the writer may write again, at least a part.
    first: u64,
    upload_id: Option<String>,
    completed: Vec<aws_sdk_s3::types::CompletedPart>,
}

/// How often a growing file's length is looked at while its writer works.
const GROWING_POLL: Duration = Duration::from_millis(200);

impl GrowingUpload<'_> {
    async fn send(
        &mut self,
        content_type: &str,
        finished: futures::future::BoxFuture<'_, bool>,
    ) -> anyhow::Result<bool> {
        use futures::FutureExt;
        let part = MULTIPART_PART_BYTES as u64;
        let mut finished = finished.fuse();
        // Bytes before `sent` are stored (but the first part) and their disk given back.
        let (mut sent, mut ended) = (self.first, None);
        loop {
            if ended == Some(false) {
                return Ok(false);
            }
            let length = growing::length(self.path).await?;
            // A part the file holds whole is final: the writer only appends past the
            // first part. The first part waits for the end; the last may be short.
            if length >= sent + part || (ended == Some(true) && self.upload_id.is_some() && length > sent) {
                let size = (length - sent).min(part);
                self.send_part(content_type, sent, size).await?;
                sent += size;
                continue;
            }
            if ended.is_some() {
                break;
            }
            tokio::select! {
                well = &mut finished => ended = Some(well),
                () = tokio::time::sleep(GROWING_POLL) => {}
            }
        }
        let Some(upload_id) = self.upload_id.clone() else {
            self.store.put_file(self.key, self.path, content_type).await?;
            return Ok(true);
        };
        self.send_part(content_type, 0, self.first).await?;
        self.completed.sort_by_key(|part| part.part_number());
        self.store.complete_multipart(self.key, &upload_id, std::mem::take(&mut self.completed)).await?;
        Ok(true)
    }

    /// Sends the `size` bytes from `offset` as their part, and gives their disk back.
    async fn send_part(&mut self, content_type: &str, offset: u64, size: u64) -> anyhow::Result<()> {
        let upload_id = match &self.upload_id {
            Some(upload_id) => upload_id.clone(),
            None => {
                let upload_id = self.store.start_multipart(self.key, content_type).await?;
                self.upload_id = Some(upload_id.clone());
                upload_id
            }
        };
        let number = match offset.checked_sub(self.first) {
            Some(after) => i32::try_from(after / MULTIPART_PART_BYTES as u64 + 2)?,
            None => 1,
        };
        let body = growing::read_range(self.path, offset, usize::try_from(size)?).await?;
        self.completed.push(self.store.upload_part(self.key, &upload_id, number, body).await?);
        if offset > 0 {
            growing::release(self.path, offset, size).await?;
        }
        Ok(())
    }
}

/// The size of each part of a multipart upload but the last (S3's least is 5 MiB): what
/// a streamed object holds in memory at once.
pub const MULTIPART_PART_BYTES: usize = 16 * 1024 * 1024;

impl S3BlobStore {
    /// Uploads `first` and the rest of `chunks` as the parts of multipart upload
    /// `upload_id`, then completes it; returns the bytes stored.
    async fn upload_parts(
        &self,
        key: &str,
        upload_id: &str,
        first: Vec<u8>,
        mut chunks: Chunks,
    ) -> anyhow::Result<u64> {
        use futures::StreamExt;
        let (mut completed, mut size, mut part, mut more) = (Vec::new(), 0u64, first, true);
        loop {
            while more && part.len() < MULTIPART_PART_BYTES {
                match chunks.next().await.transpose()? {
                    Some(chunk) => part.extend_from_slice(&chunk),
                    None => more = false,
                }
            }
            if part.is_empty() {
                // The body ended on a part's boundary.
                break;
            }
            let number = completed.len() as i32 + 1;
            let body = std::mem::replace(&mut part, Vec::with_capacity(MULTIPART_PART_BYTES));
            size += body.len() as u64;
            completed.push(self.upload_part(key, upload_id, number, body).await?);
            if !more {
                break;
            }
        }
        self.complete_multipart(key, upload_id, completed).await?;
        Ok(size)
    }

    /// Starts a multipart upload to `key`; returns its ID.
    async fn start_multipart(&self, key: &str, content_type: &str) -> anyhow::Result<String> {
        let created = self
            .client()
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .send()
            .await
            .map_err(|error| unavailable(error, "starting a multipart upload"))?;
        Ok(created.upload_id().context("S3 gave the multipart upload no ID")?.to_owned())
    }

    /// Sends part `number` of upload `upload_id`.
    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        body: Vec<u8>,
    ) -> anyhow::Result<aws_sdk_s3::types::CompletedPart> {
        let uploaded = self
            .client()
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(number)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|error| unavailable(error, "uploading a part"))?;
        Ok(aws_sdk_s3::types::CompletedPart::builder()
            .part_number(number)
            .set_e_tag(uploaded.e_tag().map(str::to_owned))
            .build())
    }

    /// Completes upload `upload_id` of `parts`, in order.
    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<aws_sdk_s3::types::CompletedPart>,
    ) -> anyhow::Result<()> {
        use aws_sdk_s3::types::CompletedMultipartUpload;
        self.client()
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
            .send()
            .await
            .map_err(|error| unavailable(error, "completing a multipart upload"))?;
        Ok(())
    }

    /// Best effort: node-worker is not granted the abort, and the bucket's
    /// abort-incomplete-multipart-uploads rule removes what is left after a day.
    async fn abort_multipart(&self, key: &str, upload_id: &str) {
        let _ = self.client().abort_multipart_upload().bucket(&self.bucket).key(key).upload_id(upload_id).send().await;
    }
}

/// The tag every upload is PUT with (`x-amz-tagging`), replaced at finalize: the
/// bucket's lifecycle rule (`expire-unfinalized-uploads` in template.yaml) removes objects
/// still tagged so after a day.
pub const UPLOAD_TAG_KEY: &str = "upload";
pub const PENDING_UPLOAD_TAG: &str = "upload=pending";

/// A signed header's name as callers send it.
fn header_name(name: &str) -> String {
    match name.to_ascii_lowercase().as_str() {
        "content-type" => "Content-Type".to_owned(),
        other => other.to_owned(),
    }
}

/// How long the media toolkit may read an object through its presigned URL: the longest task.
const READ_URL_TTL: Duration = Duration::from_secs(60 * 60);

/// A failed S3 call in the context `what`: a timeout, a network failure, an answer that
/// could not be read, or an answer of S3's own trouble (5xx, `SlowDown`) that outlasted
/// the SDK's retries is [`Unavailable`](crate::core::retry::Unavailable).
fn unavailable<E>(
    error: aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
    what: &'static str,
) -> anyhow::Error
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    use aws_sdk_s3::error::SdkError;
    let unavailable = match &error {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => true,
        SdkError::ServiceError(service) => {
            service.raw().status().is_server_error() || service.err().code() == Some("SlowDown")
        }
        _ => false,
    };
    if unavailable {
        let reason = format!("S3 did not serve {what}: {}", aws_sdk_s3::error::DisplayErrorContext(&error));
        return anyhow::Error::new(crate::core::retry::Unavailable(reason));
    }
    anyhow::Error::new(error).context(what)
}
