//! Avatar profiles in SQLite: one row each, the profile as a JSON document beside the
//! columns its rules need. A unique index on `(organization_id, workspace_id, name_key)`
//! refuses a second profile of the same name in a workspace; an update is conditional
//! on the version it read.

use async_trait::async_trait;
use rusqlite::params;

use super::runs::insert_media;
use super::{Db, Sqlite};
use crate::domain::avatars::{AvatarProfile, AvatarRepo};
use crate::domain::ids::AvatarProfileId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::WorkspaceId;
use crate::domain::media::MediaRecord;

fn profile_of(document: &str) -> anyhow::Result<AvatarProfile> {
    Ok(serde_json::from_str(document)?)
}

#[async_trait]
impl AvatarRepo for Sqlite {
    async fn create_avatar(&self, profile: &AvatarProfile) -> anyhow::Result<bool> {
        let (profile, document) = (profile.clone(), serde_json::to_string(profile)?);
        self.write(move |transaction| {
            let inserted = transaction.execute(
                "INSERT INTO avatar_profiles (organization_id, id, workspace_id, name_key, version, document)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    profile.organization_id.to_string(),
                    profile.id.to_string(),
                    profile.workspace_id.to_string(),
                    profile.name_key(),
                    profile.version as i64,
                    document
                ],
            );
            match inserted {
                Ok(_) => Ok(true),
                Err(rusqlite::Error::SqliteFailure(error, _))
                    if error.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
                {
                    Ok(false)
                }
                Err(error) => Err(error).db("recording an avatar profile"),
            }
        })
        .await
    }

    async fn get_avatar(
        &self,
        organization: OrganizationId,
        id: AvatarProfileId,
    ) -> anyhow::Result<Option<AvatarProfile>> {
        self.call(move |connection| {
            let key = (organization.to_string(), id.to_string());
            super::document_of(connection, "avatar_profiles", (&key.0, &key.1), "reading an avatar profile")
        })
        .await
    }

    async fn list_avatars(
        &self,
        organization: OrganizationId,
        workspace: WorkspaceId,
        after: Option<AvatarProfileId>,
        limit: Option<usize>,
    ) -> anyhow::Result<(Vec<AvatarProfile>, bool)> {
        self.call(move |connection| {
            // One more than the page, to tell whether more follow.
            let most = limit.map_or(-1, |limit| limit as i64 + 1);
            let mut statement = connection
                .prepare_cached(
                    "SELECT document FROM avatar_profiles WHERE organization_id = ?1 AND workspace_id = ?2
                       AND (?3 IS NULL OR id < ?3)
                     ORDER BY id DESC LIMIT ?4",
                )
                .db("listing avatar profiles")?;
            let documents = statement
                .query_map(
                    params![organization.to_string(), workspace.to_string(), after.map(|id| id.to_string()), most],
                    |row| row.get::<_, String>(0),
                )
                .db("listing avatar profiles")?
                .collect::<Result<Vec<String>, _>>()
                .db("listing avatar profiles")?;
            let mut profiles =
                documents.iter().map(|document| profile_of(document)).collect::<anyhow::Result<Vec<_>>>()?;
            let more = limit.is_some_and(|limit| profiles.len() > limit);
            if let Some(limit) = limit {
                profiles.truncate(limit);
            }
            Ok((profiles, more))
        })
        .await
    }

    async fn update_avatar(&self, profile: &AvatarProfile, preview: Option<&MediaRecord>) -> anyhow::Result<bool> {
        let (profile, document) = (profile.clone(), serde_json::to_string(profile)?);
        let preview: Vec<MediaRecord> = preview.into_iter().cloned().collect();
        self.write(move |transaction| {
            let changed = transaction
                .execute(
                    "UPDATE avatar_profiles SET version = ?3, document = ?4
                     WHERE organization_id = ?1 AND id = ?2 AND version = ?5",
                    params![
                        profile.organization_id.to_string(),
                        profile.id.to_string(),
                        profile.version as i64,
                        document,
                        profile.version as i64 - 1
                    ],
                )
                .db("updating an avatar profile")?;
            if changed == 1 {
                insert_media(transaction, &preview)?;
            }
            Ok(changed == 1)
        })
        .await
    }
}
