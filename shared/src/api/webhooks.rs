//! The webhook endpoints: the organization's secret, and a run's delivery log with
//! redelivery. Each: auth, parse, one domain call, map.

use std::sync::Arc;

use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::openapi::prelude::*;
use super::query::query_params;
use super::runs::{organization, queues, run_id, runs};
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::core::cursor;
use crate::domain::ids::DeliveryId;
use crate::domain::time::Timestamp;
use crate::domain::webhooks::log::{self, DeliveryError, MAX_LOG_LIMIT};
use crate::domain::webhooks::{self, secret, WebhookDelivery};

endpoints! {
    list_run_webhooks: GET "/agent_run/{run_id}/webhooks" => "list-run-webhooks", handler: list_deliveries,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): Doc::new("A run's webhook deliveries and their attempts", WEBHOOKS, BearerOrApiKey)
            .query("limit", integer(1, 100), "Deliveries per page, 1 to 100 (default 100)")
            .query("cursor", text(4096), "The `next_cursor` of the previous page")
            .answer(200, "One page, by sequence", sc.of::<DeliveryPage>())
            .general(sc, &[400, 404]);
    redeliver_run_webhook: POST "/agent_run/{run_id}/webhooks/{delivery_id}/redeliver" => "redeliver-run-webhook",
        handler: redeliver,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"],
        sqs: ["sqs:SendMessage"] on ["WebhookQueue"],
        operation(sc): Doc::new("Send a delivery again now", WEBHOOKS, BearerOrApiKey)
            .answer(200, "The delivery, pending", sc.of::<Redelivered>())
            .general(sc, &[404, 409]);
    rotate_webhook_secret: POST "/webhooks/secret" => "rotate-webhook-secret", handler: rotate_secret,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"], idempotent: true,
        operation(sc): Doc::new("Create or replace the webhook secret", WEBHOOKS, BearerOrApiKey)
            .answer(200, "The secret, shown only here", sc.of::<WebhookSecret>())
            .general(sc, &[])
            .idempotent(sc);
    delete_webhook_secret: DELETE "/webhooks/secret" => "delete-webhook-secret", handler: delete_secret,
        dynamodb: ["dynamodb:GetItem", "dynamodb:DeleteItem"],
        operation(sc): Doc::new("Remove the webhook secret", WEBHOOKS, BearerOrApiKey)
            .answer(200, "Removed", sc.of::<s::Success>())
            .general(sc, &[404]);
}

const CURSOR_LOG: &str = "webhooks";

fn map_error(error: DeliveryError, action: &'static str) -> ApiError {
    ApiError::refused(error, || format!("Failed to {action}"))
}

/// The run must be the organization's (404 otherwise, as for every run endpoint).
async fn check_run(
    app: &App,
    call: &Call,
) -> Result<(crate::domain::identity::OrganizationId, crate::domain::runs::RunId), ApiError> {
    let organization = organization(app, call).await?;
    let runs = runs(app)?;
    let run = run_id(call)?;
    let found = runs
        .get_run(organization, run)
        .await
        .map_err(|error| ApiError::backend(&error, "Failed to read the run".into()))?;
    found.ok_or_else(|| map_error(DeliveryError::RunNotFound, "read the run"))?;
    Ok((organization, run))
}

/// `GET /agent_run/{run_id}/webhooks`: the run's deliveries in sequence order, with
/// their attempts; `limit` 1–100 (default 100) and `cursor`.
pub async fn list_deliveries(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, run) = check_run(&app, &call).await?;
    let params = query_params(&call.request)?;
    let invalid = |message: String| map_error(DeliveryError::Invalid(message), "list webhook deliveries");
    let limit = match params.get("limit") {
        None => MAX_LOG_LIMIT,
        Some(text) => match text.parse::<usize>() {
            Ok(limit) if (1..=MAX_LOG_LIMIT).contains(&limit) => limit,
            _ => return Err(invalid(format!("limit must be an integer from 1 to {MAX_LOG_LIMIT}, got {text:?}"))),
        },
    };
    let after = match params.get("cursor") {
        None => None,
        Some(text) => Some(
            cursor::decode(CURSOR_LOG, text)
                .and_then(|position| position.parse::<u64>().ok())
                .filter(|sequence| i64::try_from(*sequence).is_ok())
                .ok_or_else(|| invalid("cursor is not valid".into()))?,
        ),
    };
    let (page, next) = log::delivery_log(app.webhooks().as_ref(), organization, run, after, limit)
        .await
        .map_err(|error| map_error(error, "list webhook deliveries"))?;
    let deliveries = page.iter().map(Delivery::from).collect();
    let next_cursor = next.map(|sequence| cursor::encode(CURSOR_LOG, &sequence.to_string()));
    Ok(json_response(StatusCode::OK, &DeliveryPage { run_id: run.as_uuid(), deliveries, next_cursor }))
}

/// `POST /agent_run/{run_id}/webhooks/{delivery_id}/redeliver`
pub async fn redeliver(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let (organization, run) = check_run(&app, &call).await?;
    let queues = queues(&app)?;
    let id = DeliveryId::parse(call.params.get("delivery_id"))
        .ok_or_else(|| map_error(DeliveryError::NotFound, "redeliver the webhook"))?;
    let delivery =
        log::redeliver(app.webhooks().as_ref(), queues.webhooks.as_ref(), app.clock.as_ref(), organization, run, id)
            .await
            .map_err(|error| map_error(error, "redeliver the webhook"))?;
    Ok(json_response(StatusCode::OK, &Redelivered { success: true, delivery: Delivery::from(&delivery) }))
}

/// `POST /webhooks/secret`: creates or rotates the organization's secret and returns it
/// (the only time it is shown).
pub async fn rotate_secret(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let secret = secret::rotate_secret(app.webhooks().as_ref(), app.clock.as_ref(), organization)
        .await
        .map_err(|error| ApiError::backend(&error, "Failed to store the webhook secret".into()))?;
    let answer = WebhookSecret {
        secret: secret.secret,
        created_at: secret.created_at,
        message: "Store this secret now: it is not shown again. Webhooks carry it as X-Service-Signature and sign \
                  with it under Standard Webhooks (webhook-signature)."
            .to_owned(),
    };
    Ok(json_response(StatusCode::OK, &answer))
}

/// `DELETE /webhooks/secret`
pub async fn delete_secret(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let had = secret::delete_secret(app.webhooks().as_ref(), organization)
        .await
        .map_err(|error| ApiError::backend(&error, "Failed to remove the webhook secret".into()))?;
    if !had {
        return Err(ApiError::detail(StatusCode::NOT_FOUND, "No webhook secret is set"));
    }
    Ok(json_response(StatusCode::OK, &s::Success { success: true }))
}

// ---- Answers ---------------------------------------------------------------------

/// One POST of a delivery.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Attempt {
    pub at: Timestamp,
    /// The receiver's status, when it answered.
    #[schema(required = true)]
    pub status_code: Option<u16>,
    /// Why the attempt failed (timeout, connection, refused address).
    #[schema(required = true)]
    pub error: Option<String>,
    pub duration_ms: u64,
    /// The start of the receiver's answer (at most 1,024 bytes); null when there was none.
    #[schema(required = true)]
    pub response_excerpt: Option<String>,
}

/// One event of a run for its `callback_url`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Delivery {
    pub delivery_id: Uuid,
    pub event: webhooks::EventFlag,
    pub sequence: u64,
    pub url: String,
    pub state: webhooks::DeliveryState,
    pub created_at: Timestamp,
    #[schema(required = true)]
    pub next_attempt_at: Option<Timestamp>,
    pub attempts: Vec<Attempt>,
}

/// `GET /agent_run/{run_id}/webhooks`, by sequence.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliveryPage {
    pub run_id: Uuid,
    pub deliveries: Vec<Delivery>,
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

/// `POST /agent_run/{run_id}/webhooks/{delivery_id}/redeliver`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Redelivered {
    pub success: bool,
    pub delivery: Delivery,
}

/// `POST /webhooks/secret`: the new secret, shown only here.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSecret {
    pub secret: String,
    pub created_at: Timestamp,
    pub message: String,
}

impl From<&webhooks::Attempt> for Attempt {
    fn from(attempt: &webhooks::Attempt) -> Self {
        Self {
            at: attempt.at,
            status_code: attempt.status_code,
            error: attempt.error.clone(),
            duration_ms: attempt.duration_ms,
            response_excerpt: attempt.response_excerpt.clone(),
        }
    }
}

impl From<&WebhookDelivery> for Delivery {
    fn from(delivery: &WebhookDelivery) -> Self {
        Self {
            delivery_id: delivery.id.as_uuid(),
            event: delivery.event,
            sequence: delivery.sequence,
            url: delivery.url.clone(),
            state: delivery.state,
            created_at: delivery.created_at,
            next_attempt_at: delivery.next_attempt_at,
            attempts: delivery.attempts.iter().map(Attempt::from).collect(),
        }
    }
}
