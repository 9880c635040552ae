//! The trigger endpoints: fire by hand, read, and list the runs a trigger started.
//! Each: auth (bearer or X-API-Key), parse, one domain call, map.

use std::sync::Arc;

use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::openapi::prelude::*;
use super::query::query_params;
use super::runs::{links, map_error, organization, ports, queues, runs, RunPage};
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::domain::ids::AgentNodeId;
use crate::domain::nodes::NodeTypeRef;
use crate::domain::runs::events::Notifier;
use crate::domain::runs::list;
use crate::domain::runs::service::RunPorts;
use crate::domain::time::Timestamp;
use crate::domain::triggers::{self, TriggerError, Triggers};

endpoints! {
    // Triggers: a fire starts runs as start-run does (a feed is read first); a run is
    // created with its claim in one transaction of puts.
    fire_trigger: POST "/trigger/{trigger_id}/fire" => "fire-trigger", handler: fire_trigger,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"],
        sqs: ["sqs:SendMessage"] on ["TaskQueue", "WebhookQueue"], idempotent: true,
        operation(sc): {
            Doc::new("Fire a trigger now (a Schedule starts its run; a feed is polled)", TRIGGERS, BearerOrApiKey)
                .answer(200, "The runs started", sc.of::<TriggerFired>())
                .general(sc, &[400, 404, 409])
        };
    get_trigger: GET "/trigger/{trigger_id}" => "get-trigger", handler: get_trigger,
        dynamodb: ["dynamodb:GetItem"],
        operation(sc): Doc::new("Read a trigger", TRIGGERS, BearerOrApiKey)
            .answer(200, "The trigger", sc.of::<Trigger>())
            .general(sc, &[404]);
    list_trigger_runs: GET "/trigger/{trigger_id}/runs" => "list-trigger-runs", handler: list_trigger_runs,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): {
            run_filters(Doc::new("The runs a trigger started, newest first", TRIGGERS, BearerOrApiKey))
                .answer(200, "One page", sc.of::<RunPage>())
                .general(sc, &[400, 404])
        };
}

/// The triggers of the app, starting runs through `runs`.
pub fn firing<'a>(app: &'a App, runs: &'a RunPorts<'a>) -> Triggers<'a> {
    Triggers {
        repo: app.triggers().as_ref(),
        agents: app.agents().as_ref(),
        runs,
        downloader: app.downloader().as_ref(),
    }
}

fn trigger_id(call: &Call) -> Result<AgentNodeId, ApiError> {
    // Not a UUID: no such trigger (as for any other ID the caller cannot see).
    AgentNodeId::parse(call.params.get("trigger_id"))
        .ok_or_else(|| ApiError::detail(StatusCode::NOT_FOUND, TriggerError::NotFound.to_string()))
}

fn map_trigger_error(error: TriggerError, action: &'static str) -> ApiError {
    ApiError::refused(error, || format!("Failed to {action}"))
}

/// `POST /trigger/{trigger_id}/fire`
pub async fn fire_trigger(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let id = trigger_id(&call)?;
    let queues = queues(&app)?;
    let notifier: Notifier = queues.notifier(links(&app, &call));
    let run_ports = ports(&app, queues, &notifier);
    let runs = firing(&app, &run_ports)
        .fire(organization, id, app.clock.now())
        .await
        .map_err(|error| map_trigger_error(error, "fire the trigger"))?;
    let run_ids = runs.iter().map(|run| run.as_uuid()).collect();
    Ok(json_response(StatusCode::OK, &TriggerFired { trigger_id: id.as_uuid(), run_ids }))
}

/// `GET /trigger/{trigger_id}`
pub async fn get_trigger(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let id = trigger_id(&call)?;
    let view = triggers::view(app.triggers().as_ref(), app.agents().as_ref(), organization, id)
        .await
        .map_err(|error| map_trigger_error(error, "read the trigger"))?;
    Ok(json_response(StatusCode::OK, &Trigger::from(view)))
}

/// `GET /trigger/{trigger_id}/runs`
pub async fn list_trigger_runs(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let id = trigger_id(&call)?;
    let params = query_params(&call.request)?;
    let mut query =
        list::parse_list(|name| params.get(name).cloned(), false).map_err(|error| map_error(error, "list runs"))?;
    triggers::view(app.triggers().as_ref(), app.agents().as_ref(), organization, id)
        .await
        .map_err(|error| map_trigger_error(error, "list runs"))?;
    query.trigger_id = Some(id);
    let (found, next_cursor) = list::list_runs(runs(&app)?, app.agents().as_ref(), organization, query)
        .await
        .map_err(|error| map_error(error, "list runs"))?;
    Ok(json_response(StatusCode::OK, &RunPage::of(&found, next_cursor, &app, &call)))
}

/// `GET /trigger/{trigger_id}`: a trigger node (its ID is its `agent_node_id`) and what
/// it did last.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Trigger {
    pub trigger_id: Uuid,
    pub agent_id: Uuid,
    pub node_type: NodeTypeRef,
    pub enabled: bool,
    /// The next fire (Schedule) or poll (Channel Feed); null when disabled or none.
    #[schema(required = true)]
    pub next_fire_at: Option<Timestamp>,
    #[schema(required = true)]
    pub last_fired_at: Option<Timestamp>,
    /// Why the last fire or poll could not start a run; null after one that could.
    #[schema(required = true)]
    pub last_error: Option<String>,
}

/// `POST /trigger/{trigger_id}/fire`: the runs the fire started (a Schedule: one; a
/// Channel Feed: one per new entry, maybe none).
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerFired {
    pub trigger_id: Uuid,
    pub run_ids: Vec<Uuid>,
}

impl From<triggers::TriggerView> for Trigger {
    fn from(view: triggers::TriggerView) -> Self {
        Self {
            trigger_id: view.trigger_id.as_uuid(),
            agent_id: view.agent_id.as_uuid(),
            node_type: view.node_type,
            enabled: view.enabled,
            next_fire_at: view.next_fire_at,
            last_fired_at: view.last_fired_at,
            last_error: view.last_error,
        }
    }
}
