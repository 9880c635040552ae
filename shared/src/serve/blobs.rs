//! The local media folder's signed URLs: `PUT /blobs/{key}?expires=..&signature=..`
//! streams the body to disk, like a presigned S3 PUT; `GET` streams the file back, with
//! HTTP Range support, like a presigned S3 GET.

use bytes::Bytes;
use futures::stream;
use http::{header, HeaderValue, Method, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::adapters::fs::{content_type_of, signed_put, BlobAccessError, LocalBlobStore, BLOB_PATH_PREFIX};
use crate::api::ApiError;
use crate::core::signing::signed_query_values;
use crate::domain::time::Timestamp;
use crate::domain::uploads::UploadKind;

/// The body of every `serve` response: whole, or streamed from a file.
pub type ResponseBody = BoxBody<Bytes, std::io::Error>;

/// Bytes read from a file per frame.
const CHUNK_BYTES: usize = 256 * 1024;

/// A whole body.
pub fn full_body(bytes: Bytes) -> ResponseBody {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

fn respond(refusal: ApiError) -> hyper::Response<ResponseBody> {
    into_hyper(refusal.into_response())
}

fn into_hyper(response: crate::api::Response) -> hyper::Response<ResponseBody> {
    let (parts, body) = response.into_parts();
    hyper::Response::from_parts(parts, full_body(Bytes::copy_from_slice(&body)))
}

fn empty(status: StatusCode) -> hyper::Response<ResponseBody> {
    let mut response = hyper::Response::new(full_body(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// Serves one request under [`BLOB_PATH_PREFIX`]. A PUT's signature covers its
/// Content-Type (an upload URL pins one, as a presigned S3 PUT does).
pub async fn handle(
    store: &LocalBlobStore,
    method: &Method,
    uri: &Uri,
    headers: &http::HeaderMap,
    body: Incoming,
) -> hyper::Response<ResponseBody> {
    if method != Method::PUT && method != Method::GET {
        return into_hyper(ApiError::method_not_allowed(
            &[&Method::GET, &Method::PUT],
            "media URLs accept PUT and GET only",
        ));
    }
    let key = uri.path().strip_prefix(BLOB_PATH_PREFIX).unwrap_or_default();
    let (expires, signature) = signed_query_values(uri.query().unwrap_or_default());
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or_default();
    let signed = match *method {
        Method::PUT => signed_put(content_type),
        _ => method.as_str().to_owned(),
    };
    let path = match store.authorize(&signed, key, expires, signature, Timestamp::now()) {
        Ok(path) => path,
        Err(error @ BlobAccessError::BadKey) => {
            return respond(ApiError::detail(StatusCode::NOT_FOUND, error.to_string()))
        }
        Err(error) if *method == Method::PUT => {
            let message = format!(
                "{error}: an upload URL accepts only the Content-Type it was made for (its upload_headers); \
                 this PUT sent {content_type:?}"
            );
            return respond(ApiError::detail(StatusCode::FORBIDDEN, message));
        }
        Err(error) => return respond(ApiError::detail(StatusCode::FORBIDDEN, error.to_string())),
    };
    let range = headers.get(header::RANGE);
    if method == Method::GET {
        return match send_file(&path, content_type_of(key), range).await {
            Ok(response) => response,
            Err(refusal) => respond(refusal),
        };
    }
    match receive(store, &path, body).await {
        Ok(()) => empty(StatusCode::OK),
        Err(refusal) => respond(refusal),
    }
}

/// Serves a run's media link: checks its signature and streams the file (with Range).
pub async fn media(app: &crate::app::App, uri: &Uri, range: Option<&HeaderValue>) -> hyper::Response<ResponseBody> {
    use crate::domain::media::MEDIA_PATH_PREFIX;
    let Some(store) = app.local_blobs.as_ref() else {
        return respond(ApiError::detail(StatusCode::NOT_FOUND, "Not Found"));
    };
    let id = uri.path().strip_prefix(MEDIA_PATH_PREFIX).unwrap_or_default();
    let record = match crate::api::runs::verified_media(app, id, uri.query()).await {
        Ok(record) => record,
        Err(refusal) => return respond(refusal),
    };
    let Some(path) = store.path(&record.key) else {
        return respond(ApiError::detail(StatusCode::NOT_FOUND, "Media not found"));
    };
    match send_file(&path, &record.content_type, range).await {
        Ok(response) => response,
        Err(refusal) => respond(refusal),
    }
}

/// Streams the body to a temporary file, then moves it into place, so a reader never
/// sees half an upload and an interrupted upload leaves nothing behind.
async fn receive(store: &LocalBlobStore, path: &std::path::Path, mut body: Incoming) -> Result<(), ApiError> {
    let (limit, limit_text) = UploadKind::Video.max_bytes();
    let incoming = store.incoming_path();
    let failed = |error: &dyn std::fmt::Display| {
        tracing::error!(%error, path = %path.display(), "storing an upload failed");
        ApiError::detail(StatusCode::INTERNAL_SERVER_ERROR, "the upload could not be stored")
    };
    let mut file = tokio::fs::File::create(&incoming).await.map_err(|error| failed(&error))?;
    let mut written: u64 = 0;
    let outcome = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| ApiError::detail(StatusCode::BAD_REQUEST, "the upload was interrupted"))?;
            if let Some(data) = frame.data_ref() {
                written += data.len() as u64;
                if written > limit {
                    let message = format!("uploads may be at most {limit_text}");
                    return Err(ApiError::detail(StatusCode::PAYLOAD_TOO_LARGE, message));
                }
                file.write_all(data).await.map_err(|error| failed(&error))?;
            }
        }
        file.flush().await.map_err(|error| failed(&error))?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|error| failed(&error))?;
        }
        tokio::fs::rename(&incoming, path).await.map_err(|error| failed(&error))
    }
    .await;
    if outcome.is_err() {
        let _ = tokio::fs::remove_file(&incoming).await;
    }
    outcome
}

/// What a `Range` header asks of a file of `size` bytes.
#[derive(Debug, PartialEq, Eq)]
enum Wanted {
    /// The whole file: no header, or one this server does not serve (several ranges, or
    /// not a byte range), which RFC 9110 says to ignore.
    Whole,
    /// Bytes `start..end`.
    Part(u64, u64),
    /// A byte range that starts past the end of the file (416).
    Outside,
}

fn wanted(header: Option<&str>, size: u64) -> Wanted {
    let Some(spec) = header.and_then(|header| header.trim().strip_prefix("bytes=")) else { return Wanted::Whole };
    let Some((first, last)) = spec.split_once('-').filter(|_| !spec.contains(',')) else { return Wanted::Whole };
    let number = |text: &str| text.trim().parse::<u64>().ok();
    let (start, end) = match (first.trim(), last.trim()) {
        ("", suffix) => match number(suffix) {
            Some(0) => return Wanted::Outside,
            Some(suffix) => (size.saturating_sub(suffix), size),
            None => return Wanted::Whole,
        },
        (first, "") => match number(first) {
            Some(start) => (start, size),
            None => return Wanted::Whole,
        },
        (first, last) => match (number(first), number(last)) {
            (Some(start), Some(last)) if start <= last => (start, last.saturating_add(1).min(size)),
            _ => return Wanted::Whole,
        },
    };
    if start >= end {
        return Wanted::Outside;
    }
    Wanted::Part(start, end)
}

/// Streams a file, or the part of it a Range header asks for.
async fn send_file(
    path: &std::path::Path,
    content_type: &str,
    range: Option<&HeaderValue>,
) -> Result<hyper::Response<ResponseBody>, ApiError> {
    let mut file = match tokio::fs::File::open(path).await {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(ApiError::detail(StatusCode::NOT_FOUND, "no such object"))
        }
        Err(error) => {
            tracing::error!(%error, path = %path.display(), "reading a stored object failed");
            return Err(ApiError::detail(StatusCode::INTERNAL_SERVER_ERROR, "the object could not be read"));
        }
    };
    let size = file
        .metadata()
        .await
        .map_err(|_| ApiError::detail(StatusCode::INTERNAL_SERVER_ERROR, "the object could not be read"))?
        .len();
    let (status, start, end) = match wanted(range.and_then(|value| value.to_str().ok()), size) {
        Wanted::Whole => (StatusCode::OK, 0, size),
        Wanted::Part(start, end) => (StatusCode::PARTIAL_CONTENT, start, end),
        Wanted::Outside => {
            let outside = ApiError::detail(StatusCode::RANGE_NOT_SATISFIABLE, "the range is outside the object");
            let mut refused = respond(outside);
            if let Ok(value) = HeaderValue::from_str(&format!("bytes */{size}")) {
                refused.headers_mut().insert(header::CONTENT_RANGE, value);
            }
            return Ok(refused);
        }
    };
    file.seek(std::io::SeekFrom::Start(start))
        .await
        .map_err(|_| ApiError::detail(StatusCode::INTERNAL_SERVER_ERROR, "the object could not be read"))?;
    let frames = stream::unfold((file, end - start), |(mut file, left)| async move {
        if left == 0 {
            return None;
        }
        let mut buffer = vec![0; CHUNK_BYTES.min(left as usize)];
        match file.read(&mut buffer).await {
            Ok(0) => None,
            Ok(read) => {
                buffer.truncate(read);
                Some((Ok(Frame::data(Bytes::from(buffer))), (file, left - read as u64)))
            }
            Err(error) => Some((Err(error), (file, 0))),
        }
    });
    let mut response = hyper::Response::new(BodyExt::boxed(StreamBody::new(frames)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let content_type =
        HeaderValue::from_str(content_type).unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    // Browsers take the type as given: a file is never sniffed into a page.
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    if status == StatusCode::PARTIAL_CONTENT {
        if let Ok(value) = HeaderValue::from_str(&format!("bytes {start}-{}/{size}", end - 1)) {
            headers.insert(header::CONTENT_RANGE, value);
        }
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_http_defines_them() {
        assert_eq!(wanted(Some("bytes=0-99"), 1000), Wanted::Part(0, 100));
        assert_eq!(wanted(Some("bytes=900-"), 1000), Wanted::Part(900, 1000));
        assert_eq!(wanted(Some("bytes=-100"), 1000), Wanted::Part(900, 1000));
        assert_eq!(wanted(Some("bytes=990-2000"), 1000), Wanted::Part(990, 1000));
        assert_eq!(wanted(Some("bytes=1000-"), 1000), Wanted::Outside);
        assert_eq!(wanted(Some("bytes=-0"), 1000), Wanted::Outside);
        // Headers this server does not serve are ignored: the whole object.
        for ignored in ["items=0-1", "bytes=5-1", "bytes=0-1,5-9", "bytes=x-y", "bytes=5"] {
            assert_eq!(wanted(Some(ignored), 1000), Wanted::Whole, "{ignored}");
        }
        assert_eq!(wanted(None, 1000), Wanted::Whole);
    }
}
