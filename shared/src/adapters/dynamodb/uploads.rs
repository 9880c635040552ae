//! Upload records in DynamoDB; finalizing is a conditional `pending → ready` update, so
//! concurrent finalizes record the asset once.

use anyhow::Context;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValue;
use uuid::Uuid;

use super::{key, n, number, s, text, timestamp, unless_condition_failed, AttributeValue, DynamoDb, Item};
use crate::domain::time::Timestamp;
use crate::domain::uploads::{MediaInfo, SealedBlob, Upload, UploadKind, UploadStatus};
use crate::ports::UploadRepo;

const PENDING: &str = "pending_upload";
const READY: &str = "ready";

fn upload_key(organization: Uuid, id: Uuid) -> Item {
    key(format!("ORG#{organization}"), format!("UPLOAD#{id}"))
}

fn optional_number<T: std::str::FromStr>(item: &Item, name: &str) -> anyhow::Result<Option<T>> {
    match item.get(name) {
        Some(AttributeValue::N(_)) => Ok(Some(number(item, name)?)),
        _ => Ok(None),
    }
}

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
                version: if item.contains_key("blob_version") {
                    Some(text(item, "blob_version")?.to_owned())
                } else {
                    None
                },
                size: number(item, "size_bytes")?,
            }),
        ),
    };
    Ok(Upload {
        id: Uuid::parse_str(text(item, "id")?)?,
        kind: UploadKind::parse(text(item, "kind")?).context("stored upload kind is not known")?,
        status,
        created_at: timestamp(item, "created_at")?,
        upload_expires_at: timestamp(item, "upload_expires_at")?,
        finalized_at: if item.contains_key("finalized_at") { Some(timestamp(item, "finalized_at")?) } else { None },
        media,
        blob,
    })
}

#[async_trait]
impl UploadRepo for DynamoDb {
    async fn put_upload(&self, organization: Uuid, upload: &Upload) -> anyhow::Result<()> {
        let mut item = upload_key(organization, upload.id);
        item.extend([
            ("id".to_owned(), s(upload.id.to_string())),
            ("kind".to_owned(), s(upload.kind.as_str())),
            ("status".to_owned(), s(PENDING)),
            ("created_at".to_owned(), s(upload.created_at.to_string())),
            ("upload_expires_at".to_owned(), s(upload.upload_expires_at.to_string())),
        ]);
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await
            .context("recording an upload")?;
        Ok(())
    }

    async fn get_upload(&self, organization: Uuid, id: Uuid) -> anyhow::Result<Option<Upload>> {
        let item = self.get(upload_key(organization, id)).await.context("reading an upload")?;
        item.as_ref().map(upload_from).transpose()
    }

    async fn finalize_upload(
        &self,
        organization: Uuid,
        id: Uuid,
        media: &MediaInfo,
        blob: &SealedBlob,
        at: Timestamp,
    ) -> anyhow::Result<Option<Upload>> {
        let mut set: Vec<String> = [
            "#status = :ready",
            "finalized_at = :at",
            "size_bytes = :size",
            "codec = :codec",
            "#format = :format",
            "blob_key = :blob_key",
        ]
        .map(str::to_owned)
        .into();
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(upload_key(organization, id)))
            .condition_expression("#status = :pending")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#format", "format")
            .expression_attribute_values(":pending", s(PENDING))
            .expression_attribute_values(":ready", s(READY))
            .expression_attribute_values(":at", s(at.to_string()))
            .expression_attribute_values(":size", n(media.size_bytes))
            .expression_attribute_values(":codec", s(&media.codec))
            .expression_attribute_values(":format", s(&media.format))
            .expression_attribute_values(":blob_key", s(&blob.key))
            .return_values(ReturnValue::AllNew);
        if let Some(version) = &blob.version {
            set.push("blob_version = :blob_version".to_owned());
            update = update.expression_attribute_values(":blob_version", s(version));
        }
        let optional = [
            ("duration_ms", media.duration_ms),
            ("width", media.width.map(u64::from)),
            ("height", media.height.map(u64::from)),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                set.push(format!("{name} = :{name}"));
                update = update.expression_attribute_values(format!(":{name}"), n(value));
            }
        }
        let updated = update.update_expression(format!("SET {}", set.join(", "))).send().await;
        match unless_condition_failed(updated, "finalizing an upload")? {
            Some(output) => output.attributes.as_ref().map(upload_from).transpose(),
            // Already finalized by an earlier or concurrent request: that one wins.
            None => self.get_upload(organization, id).await,
        }
    }
}
