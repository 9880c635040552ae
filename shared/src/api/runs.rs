//! The run endpoints: start, read, list, cancel, resume, and the media links. Each:
//! auth (bearer or X-API-Key), parse, one domain call, map.

use std::sync::Arc;

use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::{authenticate, Scheme};
use super::body::json_body;
use super::openapi::prelude::*;
use super::query::query_params;
use super::{json_response, ApiError, Call, Response};
use crate::app::{App, Queues};
use crate::domain::agents::{self, AgentError};
use crate::domain::ids::AgentStateId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::RunId;
use crate::domain::runs::events::Notifier;
use crate::domain::runs::list;
use crate::domain::runs::ports::RunRepo;
use crate::domain::runs::service::{self, BindPorts, RunError, RunPorts, StartRun};
use crate::domain::runs::start::{StartBody, StartRequest};
use crate::domain::runs::views::{NodesView, RecordView, SummaryView};
use crate::domain::runs::Run;

endpoints! {
    // The run engine. A run with many inputs records their media in transactions of
    // puts before the run itself. A run is read by its head (GetItem), then, unless the
    // process has that version cached, its plan, chunks and outputs (Query of the run's
    // partition); runs stored whole before the split read extra parts with GetItem.
    // Changes of runs record webhook deliveries in the same transaction and queue them
    // (SendMessage on the webhook queue as well).
    // Query: asset-manager inputs read the organization's connections.
    start_run: POST "/agent/{agent_id}/run" => "start-run", handler: start_run,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"],
        sqs: ["sqs:SendMessage"] on ["TaskQueue", "WebhookQueue"], idempotent: true,
        operation(sc): Doc::new("Start a run of an agent", RUNS, BearerOrApiKey)
            .body(sc.of::<StartBody>(), false)
            .answer(200, "The run started", sc.of::<RunStarted>())
            .general(sc, &[400, 404])
            .idempotent(sc);
    get_run: GET "/agent_run/{run_id}" => "get-run", handler: get_run,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): Doc::new("A run's record (for polling)", RUNS, BearerOrApiKey)
            .answer(200, "The run", sc.of::<RecordView>())
            .general(sc, &[404]);
    get_run_nodes: GET "/agent_run/{run_id}/nodes" => "get-run-nodes", handler: get_run_nodes,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): Doc::new("A run's runtime nodes", RUNS, BearerOrApiKey)
            .answer(200, "The nodes", sc.of::<NodesView>())
            .general(sc, &[404]);
    cancel_run: POST "/agent_run/{run_id}/cancel" => "cancel-run", handler: cancel_run,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"],
        sqs: ["sqs:SendMessage"] on ["WebhookQueue"],
        operation(sc): Doc::new("Cancel a run", RUNS, BearerOrApiKey)
            .answer(200, "Cancelled", sc.of::<CancelAnswer>())
            .general(sc, &[404, 409]);
    resume_run: POST "/agent_run/{run_id}/resume" => "resume-run", handler: resume_run,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"],
        sqs: ["sqs:SendMessage"] on ["TaskQueue", "WebhookQueue"],
        operation(sc): Doc::new("Resume a failed or cancelled run", RUNS, BearerOrApiKey)
            .answer(200, "Re-queued", sc.of::<ResumeAnswer>())
            .general(sc, &[404, 409]);
    list_agent_runs: GET "/agent/{agent_id}/runs" => "list-agent-runs", handler: list_agent_runs,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): run_filters(Doc::new("An agent's runs, newest first", RUNS, BearerOrApiKey))
            .answer(200, "One page", sc.of::<RunPage>())
            .general(sc, &[400, 404]);
    list_runs: GET "/agent_runs" => "list-runs", handler: list_runs,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): run_filters(Doc::new("The organization's runs, newest first", RUNS, BearerOrApiKey))
            .query("agent_id", uuid(), "Only this agent's runs")
            .answer(200, "One page", sc.of::<RunPage>())
            .general(sc, &[400, 404]);
}

/// `{ run_id }`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunStarted {
    #[schema(value_type = uuid::Uuid)]
    pub run_id: RunId,
}

/// One page of runs, newest first.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPage<'a> {
    pub runs: Vec<SummaryView<'a>>,
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

impl<'a> RunPage<'a> {
    /// The page of `runs`, their links signed by `links` at `now`.
    pub(super) fn of(runs: &'a [Run], next_cursor: Option<String>, app: &App, call: &Call) -> Self {
        let (now, links) = (app.clock.now(), links(app, call));
        Self { runs: runs.iter().map(|run| run.summary_view(&links, now)).collect(), next_cursor }
    }
}

/// `POST /agent_run/{run_id}/cancel`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Cancelled)]
pub struct CancelAnswer {
    pub success: bool,
    #[schema(value_type = uuid::Uuid)]
    pub run_id: RunId,
    #[schema(value_type = u64)]
    pub tasks_cancelled: usize,
    #[schema(value_type = u64)]
    pub nodes_reset: usize,
    pub message: &'static str,
}

/// `POST /agent_run/{run_id}/resume`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Resumed)]
pub struct ResumeAnswer {
    pub success: bool,
    #[schema(value_type = uuid::Uuid)]
    pub run_id: RunId,
    #[schema(value_type = uuid::Uuid)]
    pub agent_state_id: AgentStateId,
    #[schema(value_type = u64)]
    pub nodes_queued: usize,
    #[schema(value_type = u64)]
    pub nodes_considered: usize,
    #[schema(value_type = u64)]
    pub requeued_nodes: usize,
    #[schema(value_type = u64)]
    pub requeued_node_tasks_detached: usize,
    #[schema(value_type = u64)]
    pub requeued_node_active_tasks_cancelled: usize,
    #[schema(value_type = u64)]
    pub requeued_node_active_tasks_total: usize,
}

/// The caller's organization.
pub(super) async fn organization(app: &App, call: &Call) -> Result<OrganizationId, ApiError> {
    Ok(authenticate(app, call.request.headers(), Scheme::BearerOrApiKey).await?.organization_id())
}

/// The runs of a deployment that can run them; a 503 saying what is missing otherwise.
/// Reading runs needs no queue: only the endpoints that send messages build them.
pub(super) fn runs(app: &App) -> Result<&dyn RunRepo, ApiError> {
    match app.runs_missing() {
        None => Ok(app.runs().as_ref()),
        Some(missing) => Err(ApiError::detail(StatusCode::SERVICE_UNAVAILABLE, missing)),
    }
}

/// The queues runs' messages go to, as [`runs`] answers.
pub(super) fn queues(app: &App) -> Result<&Queues, ApiError> {
    runs(app)?;
    Ok(app.queues())
}

pub(crate) fn ports<'a>(app: &'a App, queues: &'a Queues, notifier: &'a Notifier) -> RunPorts<'a> {
    RunPorts {
        runs: app.runs().as_ref(),
        queue: queues.tasks.as_ref(),
        clock: app.clock.as_ref(),
        notifier,
        agents: app.agents().as_ref(),
        uploads: app.uploads().as_ref(),
        sites: app.sites(),
        assets: app.assets().as_ref(),
        asset_manager: app.asset_manager().as_ref(),
        avatars: app.avatars().as_ref(),
        allow_private_urls: app.allow_private_urls,
    }
}

/// What a start request is checked with (a trigger's, when saved).
pub(super) fn bind_ports(app: &App) -> BindPorts<'_> {
    BindPorts {
        runs: app.runs().as_ref(),
        uploads: app.uploads().as_ref(),
        sites: app.sites(),
        assets: app.assets().as_ref(),
        asset_manager: app.asset_manager().as_ref(),
        avatars: app.avatars().as_ref(),
        allow_private_urls: app.allow_private_urls,
    }
}

pub(super) fn map_error(error: RunError, action: &'static str) -> ApiError {
    ApiError::refused(error, || format!("Failed to {action}"))
}

pub(super) fn run_id(call: &Call) -> Result<RunId, ApiError> {
    let text = call.params.get("run_id");
    // Not a UUID: no such run (as for any other ID the caller cannot see).
    RunId::parse(text).ok_or_else(|| ApiError::detail(StatusCode::NOT_FOUND, "Run not found"))
}

/// `POST /agent/{agent_id}/run`
pub async fn start_run(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let queues = queues(&app)?;
    let agent = agents::parse_agent_id(call.params.get("agent_id"))
        .map_err(|error: AgentError| ApiError::detail(StatusCode::NOT_FOUND, error.to_string()))?;
    let body = json_body(&call.request)?;
    let request = StartRequest::parse(&body).map_err(|message| ApiError::detail(StatusCode::BAD_REQUEST, message))?;
    let notifier = queues.notifier(links(&app, &call));
    let ports = ports(&app, queues, &notifier);
    let run = service::start_run(&ports, StartRun { organization, agent_id: agent, request, trigger: None })
        .await
        .map_err(|error| map_error(error, "start the run"))?;
    Ok(json_response(StatusCode::OK, &RunStarted { run_id: run }))
}

/// The signer of the media links of a response to `call`.
pub(super) fn links(app: &App, call: &Call) -> crate::domain::media::MediaLinks {
    let host = call.request.headers().get(http::header::HOST).and_then(|value| value.to_str().ok());
    app.links.for_host(host)
}

/// `GET /agent_run/{run_id}`
pub async fn get_run(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let run = service::get_run(runs(&app)?, organization, run_id(&call)?)
        .await
        .map_err(|error| map_error(error, "read the run"))?;
    Ok(json_response(StatusCode::OK, &run.record_view(&links(&app, &call), app.clock.now())))
}

/// `GET /agent_run/{run_id}/nodes`
pub async fn get_run_nodes(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let run = service::get_run(runs(&app)?, organization, run_id(&call)?)
        .await
        .map_err(|error| map_error(error, "read the run"))?;
    Ok(json_response(StatusCode::OK, &run.nodes_view(&links(&app, &call), app.clock.now())))
}

async fn list(app: &App, call: &Call, agent_in_path: bool) -> Result<Response, ApiError> {
    let organization = organization(app, call).await?;
    let runs = runs(app)?;
    let params = query_params(&call.request)?;
    let mut query = list::parse_list(|name| params.get(name).cloned(), !agent_in_path)
        .map_err(|error| map_error(error, "list runs"))?;
    if agent_in_path {
        let agent = agents::parse_agent_id(call.params.get("agent_id"))
            .map_err(|error| ApiError::detail(StatusCode::NOT_FOUND, error.to_string()))?;
        query.agent_id = Some(agent);
    }
    let (runs, next_cursor) = list::list_runs(runs, app.agents().as_ref(), organization, query)
        .await
        .map_err(|error| map_error(error, "list runs"))?;
    Ok(json_response(StatusCode::OK, &RunPage::of(&runs, next_cursor, app, call)))
}

/// `GET /agent/{agent_id}/runs`
pub async fn list_agent_runs(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    list(&app, &call, true).await
}

/// `GET /agent_runs`
pub async fn list_runs(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    list(&app, &call, false).await
}

/// `POST /agent_run/{run_id}/cancel`
pub async fn cancel_run(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let queues = queues(&app)?;
    let run = run_id(&call)?;
    let cancelled = service::cancel_run(&ports(&app, queues, &queues.notifier(links(&app, &call))), organization, run)
        .await
        .map_err(|error| map_error(error, "cancel the run"))?;
    let message = if cancelled.tasks_cancelled + cancelled.nodes_reset == 0 {
        "The run is cancelled."
    } else {
        "The run was cancelled: running tasks are stopped and nothing downstream starts."
    };
    let answer = CancelAnswer {
        success: true,
        run_id: run,
        tasks_cancelled: cancelled.tasks_cancelled,
        nodes_reset: cancelled.nodes_reset,
        message,
    };
    Ok(json_response(StatusCode::OK, &answer))
}

/// `POST /agent_run/{run_id}/resume`
pub async fn resume_run(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let queues = queues(&app)?;
    let run = run_id(&call)?;
    let resumed = service::resume_run(&ports(&app, queues, &queues.notifier(links(&app, &call))), organization, run)
        .await
        .map_err(|error| map_error(error, "resume the run"))?;
    let answer = ResumeAnswer {
        success: true,
        run_id: run,
        agent_state_id: resumed.agent_state_id,
        nodes_queued: resumed.nodes_queued,
        nodes_considered: resumed.nodes_considered,
        requeued_nodes: resumed.requeued_nodes,
        requeued_node_tasks_detached: resumed.requeued_node_tasks_detached,
        requeued_node_active_tasks_cancelled: resumed.requeued_node_active_tasks_cancelled,
        requeued_node_active_tasks_total: resumed.requeued_node_active_tasks_total,
    };
    Ok(json_response(StatusCode::OK, &answer))
}

/// Checks a media link and finds its record: 403 for a bad or expired signature, 404 for
/// a media that does not exist.
pub async fn verified_media(
    app: &App,
    id: &str,
    query: Option<&str>,
) -> Result<crate::domain::media::MediaRecord, ApiError> {
    use crate::domain::ids::MediaId;
    let forbidden = |message: String| ApiError::detail(StatusCode::FORBIDDEN, message);
    let id = MediaId::parse(id).ok_or_else(|| forbidden("the link's signature does not match".into()))?;
    let (expires, signature) = crate::core::signing::signed_query_values(query.unwrap_or_default());
    app.links.verify(id, expires, signature, app.clock.now()).map_err(|error| forbidden(error.to_string()))?;
    runs(app)?
        .get_media(id)
        .await
        .map_err(|error| ApiError::backend(&error, "Failed to read the media".into()))?
        .ok_or_else(|| ApiError::detail(StatusCode::NOT_FOUND, "Media not found"))
}
