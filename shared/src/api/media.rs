//! `GET /media/{media_id}`: the signed links of a run's media.

use std::sync::Arc;

use http::StatusCode;

use super::openapi::prelude::*;
use super::runs::{runs, verified_media};
use super::{ApiError, Call, Response};
use crate::app::App;

endpoints! {
    // A signed link is its own authority (no API key): one read, then a presigned GET.
    get_media: GET "/media/{media_id}" => "get-media", handler: get_media,
        dynamodb: ["dynamodb:GetItem"], s3: ["s3:GetObject", "s3:GetObjectVersion"],
        operation(sc): {
            let detail = sc.of::<s::Detail>();
            Doc::new("A signed media link of a run (7 days)", RUNS, Public)
                .query("expires", integer(0, i64::MAX), "When the link expires (seconds since the epoch)")
                .query("signature", text(128), "The link's signature")
                .empty(200, "The file (`serve`), whole")
                .empty(206, "The part of the file a `Range` asked for (`serve`)")
                .empty(302, "A 15-minute link to the file (AWS)")
                .answer(403, "The signature does not match or the link expired", detail.clone())
                .answer(404, "No such media", detail.clone())
                .empty(416, "The `Range` is outside the file (`serve`)")
                .answer(500, "The media could not be read", detail.clone())
                .answer(503, "A dependency is unavailable; the request may be sent again", detail)
        };
}

/// `GET /media/{media_id}`: a signed link (no API key) → a 302 to a 15-minute link of the
/// file. `serve` answers these links itself, streaming the file.
pub async fn get_media(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    runs(&app)?;
    let record = verified_media(&app, call.params.get("media_id"), call.request.uri().query()).await?;
    let url = app
        .blobs()
        .media_url(
            &record.key,
            record.version.as_deref(),
            &record.content_type,
            std::time::Duration::from_secs(15 * 60),
        )
        .await
        .map_err(|error| ApiError::backend(&error, "Failed to read the media".into()))?;
    Ok(http::Response::builder()
        .status(StatusCode::FOUND)
        .header(http::header::LOCATION, url)
        .header(http::header::CACHE_CONTROL, "no-store")
        .body(lambda_http::Body::Empty)
        .unwrap_or_default())
}
