//! Organizations, API keys and workspaces in SQLite.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension, Row};

use super::{parsed, parsed_optional, Db, Sqlite};
use crate::domain::identity::IdentityRepo;
use crate::domain::identity::{ApiKeyRecord, Organization};
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;
use crate::domain::workspaces::Workspace;
use crate::domain::workspaces::WorkspaceRepo;

/// The columns [`organization_at`] reads, in its order.
const ORGANIZATION_COLUMNS: &str = "o.id, o.name, o.slug, o.api_access, o.plan, o.credits, o.created_at";

/// An organization from the columns of [`ORGANIZATION_COLUMNS`] starting at `first`;
/// None when they are NULL (a key bound to no organization, in a join).
fn organization_at(row: &Row<'_>, first: usize) -> rusqlite::Result<Option<Organization>> {
    let Some(id) = parsed_optional(row, first)? else { return Ok(None) };
    Ok(Some(Organization {
        id,
        name: row.get(first + 1)?,
        slug: row.get(first + 2)?,
        api_access: row.get(first + 3)?,
        plan: row.get(first + 4)?,
        credits: row.get(first + 5)?,
        created_at: parsed(row, first + 6)?,
    }))
}

#[async_trait]
impl IdentityRepo for Sqlite {
    async fn api_key(&self, key_hash: &str) -> anyhow::Result<Option<ApiKeyRecord>> {
        let key_hash = key_hash.to_owned();
        self.call(move |connection| {
            connection
                .prepare_cached("SELECT organization_id, created_at, last_used_at FROM api_keys WHERE key_hash = ?1")
                .db("reading an API key")?
                .query_row([&key_hash], |row| {
                    Ok(ApiKeyRecord {
                        key_hash: key_hash.clone(),
                        organization_id: parsed_optional(row, 0)?,
                        created_at: parsed(row, 1)?,
                        last_used_at: parsed_optional(row, 2)?,
                    })
                })
                .optional()
                .db("reading an API key")
        })
        .await
    }

    async fn organization(&self, id: OrganizationId) -> anyhow::Result<Option<Organization>> {
        self.call(move |connection| {
            let found = connection
                .prepare_cached(&format!("SELECT {ORGANIZATION_COLUMNS} FROM organizations o WHERE o.id = ?1"))
                .db("reading an organization")?
                .query_row([id.to_string()], |row| organization_at(row, 0))
                .optional()
                .db("reading an organization")?;
            Ok(found.flatten())
        })
        .await
    }

    async fn api_key_with_organization(
        &self,
        key_hash: &str,
    ) -> anyhow::Result<Option<(ApiKeyRecord, Option<Organization>)>> {
        let key_hash = key_hash.to_owned();
        // One read for both: authentication runs on every request.
        self.call(move |connection| {
            connection
                .prepare_cached(&format!(
                    "SELECT k.organization_id, k.created_at, k.last_used_at, {ORGANIZATION_COLUMNS}
                     FROM api_keys k LEFT JOIN organizations o ON o.id = k.organization_id
                     WHERE k.key_hash = ?1"
                ))
                .db("reading an API key")?
                .query_row([&key_hash], |row| {
                    let record = ApiKeyRecord {
                        key_hash: key_hash.clone(),
                        organization_id: parsed_optional(row, 0)?,
                        created_at: parsed(row, 1)?,
                        last_used_at: parsed_optional(row, 2)?,
                    };
                    Ok((record, organization_at(row, 3)?))
                })
                .optional()
                .db("reading an API key")
        })
        .await
    }

    async fn touch_api_key(&self, key_hash: &str, at: Timestamp) -> anyhow::Result<()> {
        let key_hash = key_hash.to_owned();
        self.write(move |transaction| {
            transaction
                .prepare_cached("UPDATE api_keys SET last_used_at = ?2 WHERE key_hash = ?1")
                .db("recording API key use")?
                .execute(params![key_hash, at.to_string()])
                .db("recording API key use")?;
            Ok(())
        })
        .await
    }

    async fn upsert_organization(&self, organization: &Organization) -> anyhow::Result<()> {
        let organization = organization.clone();
        self.write(move |transaction| {
            transaction
                .execute(
                    "INSERT INTO organizations (id, name, slug, api_access, plan, credits, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT (id) DO UPDATE SET name = excluded.name, slug = excluded.slug,
                         api_access = excluded.api_access, plan = excluded.plan, credits = excluded.credits",
                    params![
                        organization.id.to_string(),
                        organization.name,
                        organization.slug,
                        organization.api_access,
                        organization.plan,
                        organization.credits,
                        organization.created_at.to_string()
                    ],
                )
                .db("writing an organization")?;
            Ok(())
        })
        .await
    }

    async fn upsert_api_key(
        &self,
        key_hash: &str,
        organization: Option<OrganizationId>,
        at: Timestamp,
    ) -> anyhow::Result<()> {
        let key_hash = key_hash.to_owned();
        self.write(move |transaction| {
            transaction
                .execute(
                    "INSERT INTO api_keys (key_hash, organization_id, created_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (key_hash) DO UPDATE SET organization_id = excluded.organization_id",
                    params![key_hash, organization.map(|id| id.to_string()), at.to_string()],
                )
                .db("writing an API key")?;
            Ok(())
        })
        .await
    }
}

#[async_trait]
impl WorkspaceRepo for Sqlite {
    async fn workspaces(&self, organization: OrganizationId) -> anyhow::Result<Vec<Workspace>> {
        self.call(move |connection| {
            let mut statement = connection
                .prepare_cached("SELECT id, name, is_primary, created_at FROM workspaces WHERE organization_id = ?1")
                .db("listing workspaces")?;
            let rows = statement
                .query_map([organization.to_string()], |row| {
                    Ok(Workspace {
                        id: parsed(row, 0)?,
                        name: row.get(1)?,
                        primary: row.get(2)?,
                        created_at: parsed(row, 3)?,
                    })
                })
                .db("listing workspaces")?;
            rows.collect::<Result<Vec<_>, _>>().db("listing workspaces")
        })
        .await
    }

    async fn put_workspace(&self, organization: OrganizationId, workspace: &Workspace) -> anyhow::Result<()> {
        let workspace = workspace.clone();
        self.write(move |transaction| {
            transaction
                .execute(
                    "INSERT INTO workspaces (organization_id, id, name, is_primary, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (organization_id, id) DO UPDATE SET name = excluded.name, is_primary = excluded.is_primary",
                    params![
                        organization.to_string(),
                        workspace.id.to_string(),
                        workspace.name,
                        workspace.primary,
                        workspace.created_at.to_string()
                    ],
                )
                .db("writing a workspace")?;
            Ok(())
        })
        .await
    }
}
