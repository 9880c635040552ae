//! Upload records in SQLite; recording a finalized upload is an UPDATE conditional on
//! `pending_upload`, so concurrent finalizes record the asset once.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension, Row};

use super::{parsed, parsed_optional, Db, Sqlite};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::UploadId;
use crate::domain::media::SealedBlob;
use crate::domain::uploads::UploadRepo;
use crate::domain::uploads::{MediaInfo, Upload, UploadKind, UploadStatus};

const PENDING: &str = "pending_upload";
const READY: &str = "ready";
const UPLOAD_COLUMNS: &str = "id, kind, status, created_at, upload_expires_at, finalized_at, size_bytes, duration_ms, \
                              width, height, codec, format, blob_key, blob_version";

/// A stored value that is not what it must be.
fn bad_value(index: usize, problem: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, problem.into())
}

/// A count stored as SQLite's signed integer.
fn unsigned(value: i64, index: usize) -> rusqlite::Result<u64> {
    u64::try_from(value).map_err(|_| bad_value(index, format!("{value} is negative")))
}

/// A column that is set whenever the upload is ready.
fn ready_column<T: rusqlite::types::FromSql>(row: &Row<'_>, index: usize) -> rusqlite::Result<T> {
    row.get::<_, Option<T>>(index)?.ok_or_else(|| bad_value(index, "a ready upload lacks this value".into()))
}

fn upload_from(row: &Row<'_>) -> rusqlite::Result<Upload> {
    let kind: String = row.get(1)?;
    let kind =
        UploadKind::parse(&kind).ok_or_else(|| bad_value(1, format!("stored upload kind {kind:?} is not known")))?;
    let status = match row.get::<_, String>(2)?.as_str() {
        PENDING => UploadStatus::PendingUpload,
        READY => UploadStatus::Ready,
        other => return Err(bad_value(2, format!("stored upload status {other:?} is not known"))),
    };
    let (media, blob) = match status {
        UploadStatus::PendingUpload => (None, None),
        UploadStatus::Ready => {
            let size = unsigned(ready_column(row, 6)?, 6)?;
            (
                Some(MediaInfo {
                    size_bytes: size,
                    duration_ms: row.get::<_, Option<i64>>(7)?.map(|value| unsigned(value, 7)).transpose()?,
                    width: row.get(8)?,
                    height: row.get(9)?,
                    codec: ready_column(row, 10)?,
                    format: ready_column(row, 11)?,
                }),
                Some(SealedBlob { key: ready_column(row, 12)?, version: row.get(13)?, size }),
            )
        }
    };
    Ok(Upload {
        id: parsed(row, 0)?,
        kind,
        status,
        created_at: parsed(row, 3)?,
        upload_expires_at: parsed(row, 4)?,
        finalized_at: parsed_optional(row, 5)?,
        media,
        blob,
    })
}

fn read_upload(
    connection: &rusqlite::Connection,
    organization: OrganizationId,
    id: UploadId,
) -> anyhow::Result<Option<Upload>> {
    connection
        .prepare_cached(&format!("SELECT {UPLOAD_COLUMNS} FROM uploads WHERE organization_id = ?1 AND id = ?2"))
        .db("reading an upload")?
        .query_row([organization.to_string(), id.to_string()], upload_from)
        .optional()
        .db("reading an upload")
}

#[async_trait]
impl UploadRepo for Sqlite {
    async fn put_upload(&self, organization: OrganizationId, upload: &Upload) -> anyhow::Result<()> {
        let upload = upload.clone();
        self.write(move |transaction| {
            transaction
                .execute(
                    "INSERT INTO uploads (organization_id, id, kind, status, created_at, upload_expires_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        organization.to_string(),
                        upload.id.to_string(),
                        upload.kind.as_str(),
                        PENDING,
                        upload.created_at.to_string(),
                        upload.upload_expires_at.to_string()
                    ],
                )
                .db("recording an upload")?;
            Ok(())
        })
        .await
    }

    async fn get_upload(&self, organization: OrganizationId, id: UploadId) -> anyhow::Result<Option<Upload>> {
        self.call(move |connection| read_upload(connection, organization, id)).await
    }

    async fn record_finalized(&self, organization: OrganizationId, upload: &Upload) -> anyhow::Result<Option<Upload>> {
        let upload = upload.clone();
        self.write(move |transaction| {
            let (Some(media), Some(blob), Some(finalized_at)) = (&upload.media, &upload.blob, upload.finalized_at)
            else {
                anyhow::bail!("a finalized upload must carry its media, its sealed file and its time");
            };
            let signed = |value: u64| i64::try_from(value).map_err(anyhow::Error::from);
            let duration_ms = media.duration_ms.map(signed).transpose()?;
            let changed = transaction
                .execute(
                    "UPDATE uploads SET status = ?3, finalized_at = ?4, size_bytes = ?5, duration_ms = ?6, width = ?7,
                         height = ?8, codec = ?9, format = ?10, blob_key = ?11, blob_version = ?12
                     WHERE organization_id = ?1 AND id = ?2 AND status = ?13",
                    params![
                        organization.to_string(),
                        upload.id.to_string(),
                        READY,
                        finalized_at.to_string(),
                        signed(media.size_bytes)?,
                        duration_ms,
                        media.width,
                        media.height,
                        media.codec,
                        media.format,
                        blob.key,
                        blob.version,
                        PENDING
                    ],
                )
                .db("finalizing an upload")?;
            if changed == 1 {
                return Ok(Some(upload));
            }
            // Finalized by an earlier or concurrent request (that one wins), or missing.
            read_upload(transaction, organization, upload.id)
        })
        .await
    }
}
