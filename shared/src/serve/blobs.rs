//! The local media folder's URL endpoint: `PUT /blobs/{key}?expires=..&signature=..`
//! streams the body to disk, like a presigned S3 PUT.

use http::{Method, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt;

use crate::adapters::fs::{BlobAccessError, LocalBlobStore, BLOB_PATH_PREFIX};
use crate::api::{ApiError, Response};
use crate::domain::time::Timestamp;
use crate::domain::uploads::UploadKind;

/// Serves one request under [`BLOB_PATH_PREFIX`].
pub async fn handle(store: &LocalBlobStore, method: &Method, uri: &Uri, body: Incoming) -> Response {
    if method != Method::PUT {
        return ApiError::detail(StatusCode::METHOD_NOT_ALLOWED, "upload URLs accept PUT only").into_response();
    }
    let key = uri.path().strip_prefix(BLOB_PATH_PREFIX).unwrap_or_default();
    let (mut expires, mut signature) = ("", "");
    for pair in uri.query().unwrap_or_default().split('&') {
        match pair.split_once('=') {
            Some(("expires", value)) => expires = value,
            Some(("signature", value)) => signature = value,
            _ => {}
        }
    }
    let path = match store.authorize("PUT", key, expires, signature, Timestamp::now()) {
        Ok(path) => path,
        Err(error @ BlobAccessError::BadKey) => {
            return ApiError::detail(StatusCode::NOT_FOUND, error.to_string()).into_response()
        }
        Err(error) => return ApiError::detail(StatusCode::FORBIDDEN, error.to_string()).into_response(),
    };
    match receive(store, &path, body).await {
        Ok(()) => http::Response::builder().status(StatusCode::OK).body(lambda_http::Body::Empty).unwrap_or_default(),
        Err(refusal) => refusal.into_response(),
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
