//! Upload records in DynamoDB; recording a finalized upload is a conditional write on
//! `pending_upload`, so concurrent finalizes record the asset once.

use anyhow::Context;
use async_trait::async_trait;

use super::table::{
    id, n, number, optional_number, optional_text, optional_timestamp, s, text, timestamp, unless_condition_failed,
    Item,
};
use super::{keys, DynamoDb};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::UploadId;
use crate::domain::media::SealedBlob;
use crate::domain::uploads::UploadRepo;
use crate::domain::uploads::{MediaInfo, Upload, UploadKind, UploadStatus};

const PENDING: &str = "pending_upload";
const READY: &str = "ready";

fn upload_from(item: &Item) -> anyhow::Result<Upload> {
    let status = match text(item, "status")? {
        PENDING => UploadStatus::PendingUpload,
        READY => UploadStatus::Ready,
        other => anyhow::bail!("stored upload status {other:?} is not known"),
    };
    let (media, blob) = match status {
        UploadStatus::PendingUpload => (None, None),
        UploadStatus::Ready => (
            Some(MediaInfo {
                size_bytes: number(item, "size_bytes")?,
                duration_ms: optional_number(item, "duration_ms")?,
                width: optional_number(item, "width")?,
                height: optional_number(item, "height")?,
                codec: text(item, "codec")?.to_owned(),
                format: text(item, "format")?.to_owned(),
            }),
            Some(SealedBlob {
                key: text(item, "blob_key")?.to_owned(),
                version: optional_text(item, "blob_version")?.map(str::to_owned),
                size: number(item, "size_bytes")?,
            }),
        ),
    };
    Ok(Upload {
        id: id(item, "id")?,
        kind: UploadKind::parse(text(item, "kind")?).context("stored upload kind is not known")?,
        status,
        created_at: timestamp(item, "created_at")?,
        upload_expires_at: timestamp(item, "upload_expires_at")?,
        finalized_at: optional_timestamp(item, "finalized_at")?,
        media,
        blob,
    })
}

/// The whole item of an upload as it stands.
fn upload_item(organization: OrganizationId, upload: &Upload) -> Item {
    let mut item = keys::upload(organization, upload.id);
    item.extend([
        ("id".to_owned(), s(upload.id.to_string())),
        ("kind".to_owned(), s(upload.kind.as_str())),
        ("status".to_owned(), s(if upload.status == UploadStatus::Ready { READY } else { PENDING })),
        ("created_at".to_owned(), s(upload.created_at.to_string())),
        ("upload_expires_at".to_owned(), s(upload.upload_expires_at.to_string())),
    ]);
    if let Some(at) = upload.finalized_at {
        item.insert("finalized_at".to_owned(), s(at.to_string()));
    }
    if let Some(media) = &upload.media {
        item.insert("size_bytes".to_owned(), n(media.size_bytes));
        item.insert("codec".to_owned(), s(&media.codec));
        item.insert("format".to_owned(), s(&media.format));
        let optional = [
            ("duration_ms", media.duration_ms),
            ("width", media.width.map(u64::from)),
            ("height", media.height.map(u64::from)),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                item.insert(name.to_owned(), n(value));
            }
        }
    }
    if let Some(blob) = &upload.blob {
        item.insert("blob_key".to_owned(), s(&blob.key));
        if let Some(version) = &blob.version {
            item.insert("blob_version".to_owned(), s(version));
        }
    }
    item
}

#[async_trait]
impl UploadRepo for DynamoDb {
    async fn put_upload(&self, organization: OrganizationId, upload: &Upload) -> anyhow::Result<()> {
        let item = upload_item(organization, upload);
        let written = self.put_if(item, "attribute_not_exists(pk)", &[], "recording an upload").await?;
        anyhow::ensure!(written, "upload {} already exists", upload.id);
        Ok(())
    }

    async fn get_upload(&self, organization: OrganizationId, id: UploadId) -> anyhow::Result<Option<Upload>> {
        let item = self.get(keys::upload(organization, id), "reading an upload").await?;
        item.as_ref().map(upload_from).transpose()
    }

    async fn record_finalized(&self, organization: OrganizationId, upload: &Upload) -> anyhow::Result<Option<Upload>> {
        let recorded = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(upload_item(organization, upload)))
            .condition_expression("#status = :pending")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":pending", s(PENDING))
            .send()
            .await;
        match unless_condition_failed(recorded, "finalizing an upload")? {
            Some(_) => Ok(Some(upload.clone())),
            // Finalized by an earlier or concurrent request (that one wins), or missing.
            None => self.get_upload(organization, upload.id).await,
        }
    }
}
