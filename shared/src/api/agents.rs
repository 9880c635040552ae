//! The agent endpoints and the node-type catalog. Each: auth (bearer or X-API-Key),
//! parse, one domain call, map.

use std::sync::Arc;

use http::StatusCode;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::auth::{authenticate, Scheme};
use super::body::json_body;
use super::openapi::prelude::*;
use super::query::query_params;
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::domain::agents::{
    self, Agent, AgentCopy, AgentCreate, AgentError, AgentQuery, AgentRecord, AgentUpdate, UpdatePorts,
};
use crate::domain::graph::Connection;
use crate::domain::ids::AgentId;
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::OrganizationId;
use crate::domain::nodes::{self, NodeType, NodeTypeRef};
use crate::domain::triggers::TriggerSaves;
use crate::domain::workspaces::WorkspaceError;

endpoints! {
    list_agents: GET "/agents" => "list-agents", handler: list_agents,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): Doc::new("List agents, newest first", AGENTS, BearerOrApiKey)
            .query("limit", integer(1, 100), "Agents per page, 1 to 100 (default 25)")
            .query(
                "cursor",
                date_time(),
                "The `next_cursor` of the previous page (keep the same filters), or any RFC 3339 date-time: \
                 the agents created before it",
            )
            .query("workspace_id", uuid(), "Only agents of this workspace of the key's organization")
            .query("name", text(200), "Case-insensitive substring of the name; `%` and `_` match literally")
            .answer(200, "One page", sc.of::<agents::AgentPage>())
            .general(sc, &[400]);
    // UpdateItem: an organization stored before workspaces existed gets its primary one.
    create_agent: POST "/agent/create" => "create-agent", handler: create_agent,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"], idempotent: true,
        operation(sc): Doc::new("Create an agent (an empty graph)", AGENTS, BearerOrApiKey)
            .body(sc.of::<AgentCreate>(), false)
            .answer(201, "The agent", sc.of::<AgentCreated>())
            .general(sc, &[400])
            .idempotent(sc);
    get_agent: GET "/agent/{agent_id}" => "get-agent", handler: get_agent,
        dynamodb: ["dynamodb:GetItem"],
        operation(sc): Doc::new("Read an agent with its graph", AGENTS, BearerOrApiKey)
            .answer(200, "The agent, its nodes and connections", sc.of::<AgentView>())
            .general(sc, &[404]);
    // Its create_node operations create nodes: a repeat must not create them twice.
    // Triggers' states are saved with the graph (puts and deletes of one transaction);
    // a trigger's run request is checked as a start checks it (Query: asset connections).
    update_agent: POST "/agent/{agent_id}/update" => "update-agent", handler: update_agent,
        dynamodb: ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"], idempotent: true,
        operation(sc): Doc::new("Change an agent's metadata and apply graph operations", AGENTS, BearerOrApiKey)
            .body(sc.of::<AgentUpdate>(), true)
            .answer(200, "Every operation applied", sc.of::<agents::UpdateResult>())
            .general(sc, &[400, 404])
            .idempotent(sc);
    duplicate_agent: POST "/agent/{agent_id}/duplicate" => "duplicate-agent", handler: duplicate_agent,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"], idempotent: true,
        operation(sc): Doc::new("Copy an agent and its graph", AGENTS, BearerOrApiKey)
            .body(sc.of::<AgentCopy>(), false)
            .answer(201, "The copy", sc.of::<AgentCreated>())
            .general(sc, &[400, 404])
            .idempotent(sc);
    delete_agent: POST "/agent/{agent_id}/delete" => "delete-agent", handler: delete_agent,
        dynamodb: ["dynamodb:GetItem", "dynamodb:UpdateItem"],
        operation(sc): Doc::new("Delete an agent", AGENTS, BearerOrApiKey)
            .answer(200, "Deleted", sc.of::<s::Success>())
            .general(sc, &[404]);
    list_node_types: GET "/node_types" => "list-node-types", handler: list_node_types,
        dynamodb: ["dynamodb:GetItem"],
        operation(sc): Doc::new("The node-type catalog", AGENTS, BearerOrApiKey)
            .answer(200, "Every node type with its parameter schema and price", sc.of::<NodeTypeList>())
            .general(sc, &[]);
}

/// The caller's organization.
async fn organization(app: &App, call: &Call) -> Result<OrganizationId, ApiError> {
    Ok(authenticate(app, call.request.headers(), Scheme::BearerOrApiKey).await?.organization_id())
}

/// Authenticates, then reads the `agent_id` path parameter.
async fn agent_scope(app: &App, call: &Call) -> Result<(OrganizationId, AgentId), ApiError> {
    let organization = organization(app, call).await?;
    let agent = agents::parse_agent_id(call.params.get("agent_id")).map_err(fail("read"))?;
    Ok((organization, agent))
}

/// Maps an agent error; a foreign workspace is a 400 in a body and a 403 as a list filter.
fn map_error(error: AgentError, action: &'static str, foreign_workspace: StatusCode) -> ApiError {
    if let AgentError::Workspace(WorkspaceError::Foreign) = error {
        return ApiError::detail(foreign_workspace, error.to_string());
    }
    ApiError::refused(error, || format!("Failed to {action} the agent"))
}

fn fail(action: &'static str) -> impl Fn(AgentError) -> ApiError {
    move |error| map_error(error, action, StatusCode::BAD_REQUEST)
}

/// `GET /agent/{agent_id}`: the body, serialized straight from the record.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AgentDetail)]
pub struct AgentView<'a> {
    pub agent: &'a Agent,
    pub agent_nodes: Vec<NodeView<'a>>,
    pub connections: &'a [Connection],
}

/// A node of an agent's graph.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AgentNode)]
pub struct NodeView<'a> {
    #[schema(value_type = uuid::Uuid)]
    pub agent_node_id: AgentNodeId,
    pub node_type: NodeTypeRef,
    pub params_used: &'a Map<String, Value>,
}

impl<'a> AgentView<'a> {
    fn of(record: &'a AgentRecord) -> Self {
        let agent_nodes = record
            .graph
            .nodes
            .iter()
            .map(|node| NodeView {
                agent_node_id: node.agent_node_id,
                node_type: NodeTypeRef::of(node.node_type_id),
                params_used: &node.params_used,
            })
            .collect();
        Self { agent: &record.agent, agent_nodes, connections: &record.graph.connections }
    }
}

/// The answer of a create or duplicate: `201 { agent_id, agent }`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentCreated<'a> {
    #[schema(value_type = uuid::Uuid)]
    pub agent_id: AgentId,
    pub agent: &'a Agent,
}

impl<'a> AgentCreated<'a> {
    fn of(agent: &'a Agent) -> Self {
        Self { agent_id: agent.id, agent }
    }
}

/// `GET /node_types`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeTypeList {
    pub node_types: &'static [NodeType],
}

/// `GET /agents`
pub async fn list_agents(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let params = query_params(&call.request)?;
    let param = |name: &str| params.get(name).map(String::as_str);
    let query = AgentQuery::parse(param("limit"), param("cursor"), param("workspace_id"), param("name"))
        .map_err(fail("list"))?;
    let page = agents::list_agents(app.agents().as_ref(), app.identity().as_ref(), organization, query)
        .await
        .map_err(|error| map_error(error, "list", StatusCode::FORBIDDEN))?;
    Ok(json_response(StatusCode::OK, &page))
}

/// `POST /agent/create`
pub async fn create_agent(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let body = json_body(&call.request)?;
    let create = AgentCreate::parse(&body).map_err(fail("create"))?;
    let agent =
        agents::create_agent(app.agents().as_ref(), app.identity().as_ref(), app.clock.as_ref(), organization, create)
            .await
            .map_err(fail("create"))?;
    Ok(json_response(StatusCode::CREATED, &AgentCreated::of(&agent)))
}

/// `GET /agent/{agent_id}`
pub async fn get_agent(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, agent) = agent_scope(&app, &call).await?;
    let record = agents::get_agent(app.agents().as_ref(), organization, agent).await.map_err(fail("read"))?;
    Ok(json_response(StatusCode::OK, &AgentView::of(&record)))
}

fn update_ports<'a>(app: &'a App, checks: &'a TriggerSaves<'a>) -> UpdatePorts<'a> {
    UpdatePorts { agents: app.agents().as_ref(), checks, clock: app.clock.as_ref() }
}

/// `POST /agent/{agent_id}/update`
pub async fn update_agent(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, agent) = agent_scope(&app, &call).await?;
    let body = json_body(&call.request)?;
    let update = AgentUpdate::parse(&body).map_err(fail("update"))?;
    let bind = super::runs::bind_ports(&app);
    let checks = TriggerSaves { repo: app.triggers().as_ref(), bind: &bind };
    let ports = update_ports(&app, &checks);
    let result = agents::update_agent(&ports, organization, agent, update).await.map_err(fail("update"))?;
    Ok(json_response(StatusCode::OK, &result))
}

/// `POST /agent/{agent_id}/duplicate`
pub async fn duplicate_agent(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, agent) = agent_scope(&app, &call).await?;
    let copy = AgentCopy::parse(&json_body(&call.request)?).map_err(fail("duplicate"))?;
    let bind = super::runs::bind_ports(&app);
    let checks = TriggerSaves { repo: app.triggers().as_ref(), bind: &bind };
    let ports = update_ports(&app, &checks);
    let copy = agents::duplicate_agent(&ports, organization, agent, copy).await.map_err(fail("duplicate"))?;
    Ok(json_response(StatusCode::CREATED, &AgentCreated::of(&copy)))
}

/// `POST /agent/{agent_id}/delete`
pub async fn delete_agent(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, agent) = agent_scope(&app, &call).await?;
    agents::delete_agent(app.agents().as_ref(), app.clock.as_ref(), organization, agent)
        .await
        .map_err(fail("delete"))?;
    Ok(json_response(StatusCode::OK, &s::Success { success: true }))
}

/// `GET /node_types`
pub async fn list_node_types(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    organization(&app, &call).await?;
    Ok(json_response(StatusCode::OK, &NodeTypeList { node_types: nodes::catalog() }))
}
