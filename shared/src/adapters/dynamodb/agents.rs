//! Agents in DynamoDB: one item per agent holding its metadata, its graph as JSON text
//! and a version number, so an update (metadata and every operation) is one
//! conditional write. Lists read the metadata only.

use anyhow::Context;
use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};

use super::table::{build, failure, id, n, number, query_beyond, s, text, timestamp, Item};
use super::{keys, DynamoDb};
use crate::domain::agents::AgentRepo;
use crate::domain::agents::{Agent, AgentQuery, AgentRecord, Visibility};
use crate::domain::graph::Graph;
use crate::domain::ids::AgentId;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;
use crate::domain::triggers::TriggerWrite;

/// The attributes of a list item: everything but the graph.
const LIST_PROJECTION: &str = "id, #name, description, visibility, workspace_id, created_at, updated_at";
/// Items read per query page when filters may drop many of them; without filters a
/// page reads just what the answer needs (deleted agents aside).
const FILTERED_PAGE_ITEMS: i32 = 200;

fn agent_item(organization: OrganizationId, record: &AgentRecord) -> anyhow::Result<Item> {
    let agent = &record.agent;
    let mut item = keys::agent(organization, agent.id);
    item.extend([
        ("id".to_owned(), s(agent.id.to_string())),
        ("name".to_owned(), s(&agent.name)),
        ("name_lower".to_owned(), s(agent.name.to_lowercase())),
        ("description".to_owned(), s(&agent.description)),
        ("visibility".to_owned(), s(agent.visibility.as_str())),
        ("workspace_id".to_owned(), s(agent.workspace_id.to_string())),
        ("created_at".to_owned(), s(agent.created_at.to_string())),
        ("updated_at".to_owned(), s(agent.updated_at.to_string())),
        ("version".to_owned(), n(record.version)),
        ("graph".to_owned(), s(serde_json::to_string(&record.graph)?)),
    ]);
    Ok(item)
}

fn agent_from(item: &Item) -> anyhow::Result<Agent> {
    Ok(Agent {
        id: id(item, "id")?,
        name: text(item, "name")?.to_owned(),
        description: text(item, "description")?.to_owned(),
        visibility: Visibility::parse(text(item, "visibility")?).context("stored visibility is not known")?,
        workspace_id: id(item, "workspace_id")?,
        created_at: timestamp(item, "created_at")?,
        updated_at: timestamp(item, "updated_at")?,
    })
}

impl DynamoDb {
    /// An agent's write with its triggers' writes, in one transaction (an agent has at
    /// most `graph::MAX_TRIGGERS` of them): false when a condition failed.
    async fn write_with_triggers(
        &self,
        organization: OrganizationId,
        record: &AgentRecord,
        condition: &str,
        expected: Option<u64>,
        triggers: &[TriggerWrite],
    ) -> anyhow::Result<bool> {
        let mut put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(agent_item(organization, record)?))
            .condition_expression(condition);
        if let Some(expected) = expected {
            put = put.expression_attribute_values(":expected", n(expected));
        }
        let mut items = vec![TransactWriteItem::builder().put(build(put.build())?).build()];
        for write in triggers {
            items.push(super::triggers::write_item(&self.table, write)?);
        }
        Ok(self.transact(items, "saving an agent and its triggers").await?.is_ok())
    }
}

#[async_trait]
impl AgentRepo for DynamoDb {
    async fn create_agent(
        &self,
        organization: OrganizationId,
        record: &AgentRecord,
        triggers: &[TriggerWrite],
    ) -> anyhow::Result<bool> {
        if !triggers.is_empty() {
            return self.write_with_triggers(organization, record, "attribute_not_exists(pk)", None, triggers).await;
        }
        self.put_if(agent_item(organization, record)?, "attribute_not_exists(pk)", &[], "creating an agent").await
    }

    async fn get_agent(&self, organization: OrganizationId, id: AgentId) -> anyhow::Result<Option<AgentRecord>> {
        let Some(item) = self.get(keys::agent(organization, id), "reading an agent").await? else {
            return Ok(None);
        };
        if item.contains_key("deleted_at") {
            return Ok(None);
        }
        let graph: Graph = serde_json::from_str(text(&item, "graph")?).context("stored graph is not valid")?;
        Ok(Some(AgentRecord { agent: agent_from(&item)?, graph, version: number(&item, "version")? }))
    }

    async fn list_agents(&self, organization: OrganizationId, query: &AgentQuery) -> anyhow::Result<Vec<Agent>> {
        let mut filter = vec!["attribute_not_exists(deleted_at)"];
        let mut request = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(keys::organization_pk(organization)))
            .expression_attribute_values(":prefix", s(keys::AGENT_PREFIX))
            .expression_attribute_names("#name", "name")
            .projection_expression(LIST_PROJECTION)
            .scan_index_forward(false)
            // A caller who just created an agent expects to see it listed.
            .consistent_read(true)
            .limit(if query.workspace_id.is_some() || query.name_contains.is_some() {
                FILTERED_PAGE_ITEMS
            } else {
                // limit + 1 tells whether another page follows.
                query.limit as i32 + 1
            });
        if let Some(workspace) = query.workspace_id {
            filter.push("workspace_id = :workspace");
            request = request.expression_attribute_values(":workspace", s(workspace.to_string()));
        }
        if let Some(part) = &query.name_contains {
            // `contains` compares literally: `%` and `_` are plain characters here.
            filter.push("contains(name_lower, :name)");
            request = request.expression_attribute_values(":name", s(part));
        }
        let request = request.filter_expression(filter.join(" AND "));
        let start = query.after.map(|after| keys::agent(organization, after));
        query_beyond(request, start, query.limit, "listing agents", |item| std::future::ready(agent_from(&item))).await
    }

    async fn replace_agent(
        &self,
        organization: OrganizationId,
        record: &AgentRecord,
        expected_version: u64,
        triggers: &[TriggerWrite],
    ) -> anyhow::Result<bool> {
        let condition = "version = :expected AND attribute_not_exists(deleted_at)";
        if !triggers.is_empty() {
            return self.write_with_triggers(organization, record, condition, Some(expected_version), triggers).await;
        }
        let item = agent_item(organization, record)?;
        self.put_if(item, condition, &[(":expected", n(expected_version))], "updating an agent").await
    }

    async fn delete_agent(&self, organization: OrganizationId, id: AgentId, at: Timestamp) -> anyhow::Result<bool> {
        let deleted = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(keys::agent(organization, id)))
            .update_expression("SET deleted_at = :at, updated_at = :at, version = version + :one")
            .condition_expression("attribute_exists(pk) AND attribute_not_exists(deleted_at)")
            .expression_attribute_values(":at", s(at.to_string()))
            .expression_attribute_values(":one", n(1))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(true),
            // A retry of this deletion, applied but its answer lost, finds its own mark.
            Err(error) => match error.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    Ok(failed.item().and_then(|item| item.get("deleted_at")) == Some(&s(at.to_string())))
                }
                _ => Err(failure(error, "deleting an agent")),
            },
        }
    }
}
