//! Organizations and API keys in DynamoDB.

use anyhow::Context;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use uuid::Uuid;

use super::{key, s, text, timestamp, DynamoDb, Item};
use crate::domain::identity::{ApiKeyRecord, Organization};
use crate::domain::time::Timestamp;
use crate::domain::workspaces::Workspace;
use crate::ports::IdentityRepo;

fn api_key_key(key_hash: &str) -> Item {
    key(format!("APIKEY#{key_hash}"), "APIKEY")
}

fn organization_key(id: Uuid) -> Item {
    key(format!("ORG#{id}"), "ORG")
}

impl DynamoDb {
    pub(super) async fn get(&self, key: Item) -> anyhow::Result<Option<Item>> {
        let output =
            self.client.get_item().table_name(&self.table).set_key(Some(key)).consistent_read(true).send().await?;
        Ok(output.item)
    }
}

#[async_trait]
impl IdentityRepo for DynamoDb {
    async fn api_key(&self, key_hash: &str) -> anyhow::Result<Option<ApiKeyRecord>> {
        let Some(item) = self.get(api_key_key(key_hash)).await.context("reading an API key")? else {
            return Ok(None);
        };
        let organization_id = match item.get("organization_id") {
            Some(AttributeValue::S(id)) => Some(Uuid::parse_str(id)?),
            _ => None,
        };
        let last_used_at = match item.get("last_used_at") {
            Some(AttributeValue::S(_)) => Some(timestamp(&item, "last_used_at")?),
            _ => None,
        };
        Ok(Some(ApiKeyRecord {
            key_hash: key_hash.to_owned(),
            organization_id,
            created_at: timestamp(&item, "created_at")?,
            last_used_at,
        }))
    }

    async fn organization(&self, id: Uuid) -> anyhow::Result<Option<Organization>> {
        let Some(item) = self.get(organization_key(id)).await.context("reading an organization")? else {
            return Ok(None);
        };
        Ok(Some(Organization {
            id,
            name: text(&item, "name")?.to_owned(),
            slug: text(&item, "slug")?.to_owned(),
            api_access: matches!(item.get("api_access"), Some(AttributeValue::Bool(true))),
            plan: text(&item, "plan")?.to_owned(),
            credits: super::number(&item, "credits")?,
            created_at: timestamp(&item, "created_at")?,
        }))
    }

    async fn touch_api_key(&self, key_hash: &str, at: Timestamp) -> anyhow::Result<()> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(api_key_key(key_hash)))
            .update_expression("SET last_used_at = :at")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":at", s(at.to_string()))
            .send()
            .await
            .context("recording API key use")?;
        Ok(())
    }

    async fn upsert_organization(&self, organization: &Organization) -> anyhow::Result<()> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(organization_key(organization.id)))
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
            .expression_attribute_values(":credits", super::n(organization.credits))
            .expression_attribute_values(":created", s(organization.created_at.to_string()))
            .expression_attribute_values(":zero", super::n(0))
            .send()
            .await
            .context("writing an organization")?;
        Ok(())
    }

    async fn upsert_api_key(&self, key_hash: &str, organization: Option<Uuid>, at: Timestamp) -> anyhow::Result<()> {
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(api_key_key(key_hash)))
            .expression_attribute_values(":created", s(at.to_string()));
        let update = match organization {
            Some(id) => update
                .update_expression("SET organization_id = :org, created_at = if_not_exists(created_at, :created)")
                .expression_attribute_values(":org", s(id.to_string())),
            None => {
                update.update_expression("SET created_at = if_not_exists(created_at, :created) REMOVE organization_id")
            }
        };
        update.send().await.context("writing an API key")?;
        Ok(())
    }

    async fn workspaces(&self, organization: Uuid) -> anyhow::Result<Vec<Workspace>> {
        let items = self
            .query_all(format!("ORG#{organization}"), Some("WORKSPACE#"), None)
            .await
            .context("listing workspaces")?;
        items
            .iter()
            .map(|item| {
                Ok(Workspace {
                    id: Uuid::parse_str(text(item, "id")?)?,
                    name: text(item, "name")?.to_owned(),
                    primary: matches!(item.get("primary"), Some(AttributeValue::Bool(true))),
                    created_at: timestamp(item, "created_at")?,
                })
            })
            .collect()
    }

    async fn put_workspace(&self, organization: Uuid, workspace: &Workspace) -> anyhow::Result<()> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(format!("ORG#{organization}"), format!("WORKSPACE#{}", workspace.id))))
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
            .context("writing a workspace")?;
        Ok(())
    }
}
