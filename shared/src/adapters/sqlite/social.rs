//! Social connections and posts in SQLite: each a JSON document in its row. A post's row
//! carries its status and, while it is scheduled, its due time (a partial index the
//! scheduler reads); its destinations are rows of their own, which the connection and
//! platform filters of the list join on. An update is conditional on the version it read
//! and rewrites the destination rows in the same transaction.

use async_trait::async_trait;
use rusqlite::params;

use super::runs::insert_media;
use super::{Db, Sqlite};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::{PostId, SocialConnectionId};
use crate::domain::media::MediaRecord;
use crate::domain::social::SocialRepo;
use crate::domain::social::{PostFilter, PostPage, SocialConnection, SocialPost};
use crate::domain::time::Timestamp;

fn write_destinations(transaction: &rusqlite::Connection, post: &SocialPost) -> anyhow::Result<()> {
    let (org, id) = (post.organization_id.to_string(), post.id.to_string());
    transaction
        .execute("DELETE FROM social_post_destinations WHERE organization_id = ?1 AND post_id = ?2", [&org, &id])
        .db("storing a post's destinations")?;
    let mut insert = transaction
        .prepare_cached(
            "INSERT INTO social_post_destinations (organization_id, post_id, connection_id, platform)
             VALUES (?1, ?2, ?3, ?4)",
        )
        .db("storing a post's destinations")?;
    for destination in &post.destinations {
        let connection = &destination.connection;
        insert
            .execute(params![org, id, connection.id.to_string(), connection.platform.as_str()])
            .db("storing a post's destinations")?;
    }
    Ok(())
}

#[async_trait]
impl SocialRepo for Sqlite {
    async fn create_connection(&self, connection: &SocialConnection, max: u32) -> anyhow::Result<bool> {
        let (connection, document) = (connection.clone(), serde_json::to_string(connection)?);
        // One write transaction at a time: the count and the insert cannot interleave.
        self.write(move |transaction| {
            let organization = connection.organization_id.to_string();
            let count: u32 = transaction
                .query_row(
                    "SELECT count(*) FROM social_connections WHERE organization_id = ?1",
                    [&organization],
                    |row| row.get(0),
                )
                .db("counting social connections")?;
            if count >= max {
                return Ok(false);
            }
            transaction
                .execute(
                    "INSERT INTO social_connections (organization_id, id, document) VALUES (?1, ?2, ?3)",
                    params![organization, connection.id.to_string(), document],
                )
                .db("recording a social connection")?;
            Ok(true)
        })
        .await
    }

    async fn update_connection(&self, connection: &SocialConnection) -> anyhow::Result<bool> {
        let (connection, document) = (connection.clone(), serde_json::to_string(connection)?);
        self.write(move |transaction| {
            let changed = transaction
                .execute(
                    "UPDATE social_connections SET document = ?3 WHERE organization_id = ?1 AND id = ?2",
                    params![connection.organization_id.to_string(), connection.id.to_string(), document],
                )
                .db("updating a social connection")?;
            Ok(changed == 1)
        })
        .await
    }

    async fn delete_connection(&self, organization: OrganizationId, id: SocialConnectionId) -> anyhow::Result<bool> {
        self.write(move |transaction| {
            let deleted = transaction
                .execute(
                    "DELETE FROM social_connections WHERE organization_id = ?1 AND id = ?2",
                    params![organization.to_string(), id.to_string()],
                )
                .db("deleting a social connection")?;
            Ok(deleted == 1)
        })
        .await
    }

    async fn list_connections(&self, organization: OrganizationId) -> anyhow::Result<Vec<SocialConnection>> {
        self.call(move |connection| {
            let mut statement = connection
                .prepare_cached("SELECT document FROM social_connections WHERE organization_id = ?1 ORDER BY id")
                .db("listing social connections")?;
            let documents = statement
                .query_map([organization.to_string()], |row| row.get::<_, String>(0))
                .db("listing social connections")?
                .collect::<Result<Vec<String>, _>>()
                .db("listing social connections")?;
            documents.iter().map(|document| Ok(serde_json::from_str(document)?)).collect()
        })
        .await
    }

    async fn get_connection(
        &self,
        organization: OrganizationId,
        id: SocialConnectionId,
    ) -> anyhow::Result<Option<SocialConnection>> {
        self.call(move |connection| {
            let key = (organization.to_string(), id.to_string());
            super::document_of(connection, "social_connections", (&key.0, &key.1), "reading a social connection")
        })
        .await
    }

    async fn create_post(&self, post: &SocialPost, media: &[MediaRecord]) -> anyhow::Result<()> {
        let (post, document, media) = (post.clone(), serde_json::to_string(post)?, media.to_vec());
        self.write(move |transaction| {
            insert_media(transaction, &media)?;
            transaction
                .execute(
                    "INSERT INTO social_posts (organization_id, id, status, due_ms, version, document)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        post.organization_id.to_string(),
                        post.id.to_string(),
                        post.status.as_str(),
                        post.due_at().map(|at| at.unix_millis() as i64),
                        post.version as i64,
                        document
                    ],
                )
                .db("recording a social post")?;
            write_destinations(transaction, &post)
        })
        .await
    }

    async fn get_post(&self, organization: OrganizationId, id: PostId) -> anyhow::Result<Option<SocialPost>> {
        self.call(move |connection| {
            let key = (organization.to_string(), id.to_string());
            super::document_of(connection, "social_posts", (&key.0, &key.1), "reading a social post")
        })
        .await
    }

    async fn update_post_with_media(&self, post: &SocialPost, media: &[MediaRecord]) -> anyhow::Result<bool> {
        let (post, document, media) = (post.clone(), serde_json::to_string(post)?, media.to_vec());
        self.write(move |transaction| {
            let changed = transaction
                .execute(
                    "UPDATE social_posts SET status = ?3, due_ms = ?4, version = ?5, document = ?6
                     WHERE organization_id = ?1 AND id = ?2 AND version = ?7",
                    params![
                        post.organization_id.to_string(),
                        post.id.to_string(),
                        post.status.as_str(),
                        post.due_at().map(|at| at.unix_millis() as i64),
                        post.version as i64,
                        document,
                        post.version as i64 - 1
                    ],
                )
                .db("updating a social post")?;
            if changed == 1 {
                insert_media(transaction, &media)?;
                write_destinations(transaction, &post)?;
            }
            Ok(changed == 1)
        })
        .await
    }

    async fn list_posts(
        &self,
        organization: OrganizationId,
        filter: &PostFilter,
        after: Option<PostId>,
        limit: usize,
    ) -> anyhow::Result<PostPage> {
        let filter = filter.clone();
        self.call(move |connection| {
            // One query: each filter given narrows it (an index each: status, and the
            // destination rows by connection and by platform), newest first from the cursor.
            let mut statement = connection
                .prepare_cached(
                    "SELECT p.document FROM social_posts p
                     WHERE p.organization_id = ?1
                       AND (?2 IS NULL OR p.status = ?2)
                       AND (?3 IS NULL OR EXISTS (SELECT 1 FROM social_post_destinations d
                            WHERE d.organization_id = p.organization_id AND d.post_id = p.id AND d.connection_id = ?3))
                       AND (?4 IS NULL OR EXISTS (SELECT 1 FROM social_post_destinations d
                            WHERE d.organization_id = p.organization_id AND d.post_id = p.id AND d.platform = ?4))
                       AND (?5 IS NULL OR p.id < ?5)
                     ORDER BY p.id DESC LIMIT ?6",
                )
                .db("listing social posts")?;
            let documents = statement
                .query_map(
                    params![
                        organization.to_string(),
                        filter.status.map(|status| status.as_str()),
                        filter.connection.map(|id| id.to_string()),
                        filter.platform.map(|platform| platform.as_str()),
                        after.map(|id| id.to_string()),
                        limit as i64 + 1
                    ],
                    |row| row.get::<_, String>(0),
                )
                .db("listing social posts")?
                .collect::<Result<Vec<String>, _>>()
                .db("listing social posts")?;
            let mut posts = documents
                .iter()
                .map(|document| Ok(serde_json::from_str(document)?))
                .collect::<anyhow::Result<Vec<SocialPost>>>()?;
            let more = posts.len() > limit;
            posts.truncate(limit);
            Ok((posts, more))
        })
        .await
    }

    async fn due_posts(&self, now: Timestamp, limit: usize) -> anyhow::Result<Vec<(OrganizationId, PostId)>> {
        self.call(move |connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT organization_id, id FROM social_posts WHERE due_ms IS NOT NULL AND due_ms <= ?1
                     ORDER BY due_ms LIMIT ?2",
                )
                .db("reading due social posts")?;
            let rows = statement
                .query_map(params![now.unix_millis() as i64, limit as i64], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                })
                .db("reading due social posts")?
                .collect::<Result<Vec<(String, String)>, _>>()
                .db("reading due social posts")?;
            rows.iter()
                .map(|(organization, id)| {
                    let organization = OrganizationId::parse(organization)
                        .ok_or_else(|| anyhow::anyhow!("a stored organization ID {organization:?}"))?;
                    let id = PostId::parse(id).ok_or_else(|| anyhow::anyhow!("a stored post ID {id:?}"))?;
                    Ok((organization, id))
                })
                .collect()
        })
        .await
    }
}
