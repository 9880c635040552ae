//! The uploads flow: an upload URL, the finalize check, and reading the asset.

use std::sync::Arc;

use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::{authenticate, Scheme};
use super::body::json_body;
use super::openapi::prelude::*;
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;
use crate::domain::uploads::{self, FinalizeBody, Upload, UploadError, UploadKind, UploadStatus, UploadUrlBody};

endpoints! {
    get_upload_url: POST "/uploads/{kind}/get_upload_url" => "get-upload-url", handler: get_upload_url,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"],
        s3: ["s3:PutObject", "s3:PutObjectTagging"], idempotent: true,
        operation(sc): Doc::new("A URL to PUT a video, audio or image file to", UPLOADS, BearerOrApiKey)
            .body(sc.of::<uploads::UploadUrlBody>(), false)
            .answer(200, "Where and how to PUT the file", sc.of::<uploads::UploadTicket>())
            .general(sc, &[400, 404])
            .idempotent(sc);
    finalize_upload: POST "/uploads/{kind}/finalize_upload" => "finalize-upload", handler: finalize_upload,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"],
        s3: ["s3:GetObject", "s3:GetObjectVersion", "s3:ListBucket", "s3:PutObjectVersionTagging"],
        operation(sc): Doc::new("Check an uploaded file and make it usable", UPLOADS, BearerOrApiKey)
            .body(sc.of::<uploads::FinalizeBody>(), true)
            .answer(200, "The upload, ready", sc.of::<UploadView>())
            .general(sc, &[400, 404, 409]);
    get_upload: GET "/uploads/{kind}/{upload_id}" => "get-upload", handler: get_upload,
        dynamodb: ["dynamodb:GetItem"],
        operation(sc): Doc::new("Read an upload", UPLOADS, BearerOrApiKey)
            .answer(200, "The upload", sc.of::<UploadView>())
            .general(sc, &[404]);
}

/// An upload as the API shows it: the media fields are present once it is `ready`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Upload, description = "An upload; the media fields are present once it is `ready`.")]
pub struct UploadView<'a> {
    #[schema(value_type = uuid::Uuid)]
    pub id: crate::domain::ids::UploadId,
    pub kind: UploadKind,
    pub status: UploadStatus,
    pub created_at: Timestamp,
    pub upload_expires_at: Timestamp,
    #[schema(required = true)]
    pub finalized_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub size_bytes: Option<u64>,
    /// Null for an image.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub duration_ms: Option<Option<u64>>,
    /// Null for audio.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u32>)]
    pub width: Option<Option<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u32>)]
    pub height: Option<Option<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub codec: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub format: Option<&'a str>,
}

impl<'a> From<&'a Upload> for UploadView<'a> {
    fn from(upload: &'a Upload) -> Self {
        let media = upload.media.as_ref();
        Self {
            id: upload.id,
            kind: upload.kind,
            status: upload.status,
            created_at: upload.created_at,
            upload_expires_at: upload.upload_expires_at,
            finalized_at: upload.finalized_at,
            size_bytes: media.map(|media| media.size_bytes),
            duration_ms: media.map(|media| media.duration_ms),
            width: media.map(|media| media.width),
            height: media.map(|media| media.height),
            codec: media.map(|media| media.codec.as_str()),
            format: media.map(|media| media.format.as_str()),
        }
    }
}

/// Authenticates, then reads the `kind` path parameter.
async fn upload_scope(app: &App, call: &Call) -> Result<(OrganizationId, UploadKind), ApiError> {
    let organization = authenticate(app, call.request.headers(), Scheme::BearerOrApiKey).await?.organization_id();
    let kind = call.params.get("kind");
    let kind = UploadKind::parse(kind).ok_or_else(|| {
        ApiError::detail(StatusCode::NOT_FOUND, format!("unknown upload kind {kind:?}: use video, audio or image"))
    })?;
    Ok((organization, kind))
}

fn fail(action: &'static str) -> impl Fn(UploadError) -> ApiError {
    move |error| ApiError::refused(error, || format!("Failed to {action} the upload"))
}

/// `POST /uploads/{kind}/get_upload_url`
pub async fn get_upload_url(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, kind) = upload_scope(&app, &call).await?;
    // An optional body: `{"content_type": "video/quicktime"}` picks the type the URL pins.
    let body = UploadUrlBody::parse(&json_body(&call.request)?).map_err(fail("create"))?;
    let ticket = uploads::create_upload(
        app.uploads().as_ref(),
        app.blobs().as_ref(),
        app.clock.as_ref(),
        organization,
        kind,
        body.content_type.as_deref(),
    )
    .await
    .map_err(fail("create"))?;
    Ok(json_response(StatusCode::OK, &ticket))
}

/// `POST /uploads/{kind}/finalize_upload`
pub async fn finalize_upload(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, kind) = upload_scope(&app, &call).await?;
    let FinalizeBody { id } = FinalizeBody::parse(&json_body(&call.request)?).map_err(fail("finalize"))?;
    let upload = uploads::finalize_upload(
        app.uploads().as_ref(),
        app.blobs().as_ref(),
        app.probe().as_ref(),
        app.clock.as_ref(),
        organization,
        kind,
        id,
    )
    .await
    .map_err(fail("finalize"))?;
    Ok(json_response(StatusCode::OK, &UploadView::from(&upload)))
}

/// `GET /uploads/{kind}/{upload_id}`
pub async fn get_upload(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, kind) = upload_scope(&app, &call).await?;
    let id = uploads::parse_upload_id(call.params.get("upload_id")).map_err(fail("read"))?;
    let upload = uploads::get_upload(app.uploads().as_ref(), organization, kind, id).await.map_err(fail("read"))?;
    Ok(json_response(StatusCode::OK, &UploadView::from(&upload)))
}
