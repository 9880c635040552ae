//! Organizations, API keys and workspaces in DynamoDB.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use super::table::{failure, id, n, number, optional_timestamp, s, text, timestamp};
use super::{keys, DynamoDb};
use crate::domain::identity::IdentityRepo;
use crate::domain::identity::{ApiKeyRecord, Organization};
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;
use crate::domain::workspaces::Workspace;
use crate::domain::workspaces::WorkspaceRepo;

#[async_trait]
impl IdentityRepo for DynamoDb {
    async fn api_key(&self, key_hash: &str) -> anyhow::Result<Option<ApiKeyRecord>> {
        let Some(item) = self.get(keys::api_key(key_hash), "reading an API key").await? else {
            return Ok(None);
        };
        let organization_id = match item.get("organization_id") {
            Some(AttributeValue::S(_)) => Some(id(&item, "organization_id")?),
            _ => None,
        };
        Ok(Some(ApiKeyRecord {
            key_hash: key_hash.to_owned(),
            organization_id,
            created_at: timestamp(&item, "created_at")?,
            last_used_at: optional_timestamp(&item, "last_used_at")?,
        }))
    }

    async fn organization(&self, id: OrganizationId) -> anyhow::Result<Option<Organization>> {
        let Some(item) = self.get(keys::organization(id), "reading an organization").await? else {
            return Ok(None);
        };
        Ok(Some(Organization {
            id,
            name: text(&item, "name")?.to_owned(),
            slug: text(&item, "slug")?.to_owned(),
            api_access: matches!(item.get("api_access"), Some(AttributeValue::Bool(true))),
            plan: text(&item, "plan")?.to_owned(),
            credits: number(&item, "credits")?,
            created_at: timestamp(&item, "created_at")?,
        }))
    }

    async fn touch_api_key(&self, key_hash: &str, at: Timestamp) -> anyhow::Result<()> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::api_key(key_hash)))
            .update_expression("SET last_used_at = :at")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":at", s(at.to_string()))
            .send()
            .await
            .map_err(|error| failure(error, "recording API key use"))?;
        Ok(())
    }

    async fn upsert_organization(&self, organization: &Organization) -> anyhow::Result<()> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::organization(organization.id)))
            .update_expression(
                "SET #name = :name, slug = :slug, api_access = :access, #plan = :plan, credits = :credits, \
                 created_at = if_not_exists(created_at, :created), store_count = if_not_exists(store_count, :zero)",
            )
            .expression_attribute_names("#name", "name")
            .expression_attribute_names("#plan", "plan")
            .expression_attribute_values(":name", s(&organization.name))
            .expression_attribute_values(":slug", s(&organization.slug))
            .expression_attribute_values(":access", AttributeValue::Bool(organization.api_access))
            .expression_attribute_values(":plan", s(&organization.plan))
            .expression_attribute_values(":credits", n(organization.credits))
            .expression_attribute_values(":created", s(organization.created_at.to_string()))
            .expression_attribute_values(":zero", n(0))
            .send()
            .await
            .map_err(|error| failure(error, "writing an organization"))?;
        Ok(())
    }

    async fn upsert_api_key(
        &self,
        key_hash: &str,
        organization: Option<OrganizationId>,
        at: Timestamp,
    ) -> anyhow::Result<()> {
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::api_key(key_hash)))
            .expression_attribute_values(":created", s(at.to_string()));
        let update = match organization {
            Some(id) => update
                .update_expression("SET organization_id = :org, created_at = if_not_exists(created_at, :created)")
                .expression_attribute_values(":org", s(id.to_string())),
            None => {
                update.update_expression("SET created_at = if_not_exists(created_at, :created) REMOVE organization_id")
            }
        };
        update.send().await.map_err(|error| failure(error, "writing an API key"))?;
        Ok(())
    }
}

#[async_trait]
impl WorkspaceRepo for DynamoDb {
    async fn workspaces(&self, organization: OrganizationId) -> anyhow::Result<Vec<Workspace>> {
        let items = self
            .query_all(keys::organization_pk(organization), Some(keys::WORKSPACE_PREFIX), None, "listing workspaces")
            .await?;
        items
            .iter()
            .map(|item| {
                Ok(Workspace {
                    id: id(item, "id")?,
                    name: text(item, "name")?.to_owned(),
                    primary: matches!(item.get("primary"), Some(AttributeValue::Bool(true))),
                    created_at: timestamp(item, "created_at")?,
                })
            })
            .collect()
    }

    async fn put_workspace(&self, organization: OrganizationId, workspace: &Workspace) -> anyhow::Result<()> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::workspace(organization, workspace.id)))
            .update_expression(
                "SET id = :id, #name = :name, #primary = :primary, created_at = if_not_exists(created_at, :created)",
            )
            .expression_attribute_names("#name", "name")
            .expression_attribute_names("#primary", "primary")
            .expression_attribute_values(":id", s(workspace.id.to_string()))
            .expression_attribute_values(":name", s(&workspace.name))
            .expression_attribute_values(":primary", AttributeValue::Bool(workspace.primary))
            .expression_attribute_values(":created", s(workspace.created_at.to_string()))
            .send()
            .await
            .map_err(|error| failure(error, "writing a workspace"))?;
        Ok(())
    }
}
