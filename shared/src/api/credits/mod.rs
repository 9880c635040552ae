//! The plan and credit endpoints: the plan, the plans, upgrades, the balance, auto
//! top-up settings and the ledger. Each: auth (bearer or X-API-Key), parse, one domain
//! call, map.

use std::sync::Arc;

use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::body::json_body;
use super::openapi::prelude::*;
use super::query::query_params;
use super::runs::organization;
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::domain::credits::billing::EventError;
use crate::domain::credits::plans::{self, PlanId};
use crate::domain::credits::service::{self, CreditError, CreditPorts, Upgraded};
use crate::domain::credits::views;
use crate::domain::credits::{self, Reason};
use crate::domain::time::Timestamp;

pub mod parse;

endpoints! {
    // Plans and credits: the account item is read (GetItem) and, when a monthly period
    // began since its last grant, written with the grant's ledger entry in one
    // transaction of puts; the ledger is a Query of the organization's partition.
    get_plan: GET "/plan" => "get-plan", handler: get_plan,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"],
        operation(sc): Doc::new("The organization's plan and credits", PLANS, BearerOrApiKey)
            .answer(200, "The plan", sc.of::<views::PlanView>())
            .general(sc, &[]);
    list_plans: GET "/plan/list" => "list-plans", handler: list_plans,
        dynamodb: ["dynamodb:GetItem"],
        operation(sc): Doc::new("The plans", PLANS, BearerOrApiKey)
            .answer(200, "Every plan with its price and credits", sc.of::<PlanList>())
            .general(sc, &[]);
    // An upgrade from free opens a checkout: it honours Idempotency-Key (one checkout).
    upgrade_plan: POST "/plan/upgrade" => "upgrade-plan", handler: upgrade_plan,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"], idempotent: true,
        operation(sc): Doc::new("Change the plan (from free: a checkout)", PLANS, BearerOrApiKey)
            .body(sc.of::<parse::UpgradeBody>(), true)
            .answer(200, "A checkout to finish, or the change made", sc.of::<UpgradeAnswer>())
            .general(sc, &[400, 402, 409])
            .idempotent(sc);
    get_credits: GET "/credits" => "get-credits", handler: get_credits,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"],
        operation(sc): Doc::new("The credit balance and auto top-up settings", PLANS, BearerOrApiKey)
            .answer(200, "The credits", sc.of::<views::CreditsView>())
            .general(sc, &[]);
    update_credit_settings: POST "/credits/settings" => "update-credit-settings", handler: update_credit_settings,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"],
        operation(sc): Doc::new("Change the auto top-up settings", PLANS, BearerOrApiKey)
            .body(sc.of::<parse::SettingsBody>(), true)
            .answer(200, "The credits with the new settings", sc.of::<views::CreditsView>())
            .general(sc, &[400, 403]);
    list_credit_ledger: GET "/credits/ledger" => "list-credit-ledger", handler: list_credit_ledger,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): Doc::new("Every movement of credits, newest first", PLANS, BearerOrApiKey)
            .query("limit", integer(1, 100), "Entries per page, 1 to 100 (default 25)")
            .query("cursor", text(4096), "The `next_cursor` of the previous page")
            .answer(200, "One page", sc.of::<LedgerPage>())
            .general(sc, &[400]);
    // Stripe's events: a paid checkout or top-up is an account write (puts of one
    // transaction) and its checkout's update.
    stripe_webhook: POST "/billing/stripe/webhook" => "stripe-webhook", handler: stripe_webhook,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"],
        operation(sc): Doc::new("Stripe's events (verified by their Stripe-Signature)", PLANS, Public)
            .body(sc.of::<parse::StripeEvent>(), true)
            .answer(200, "Received (applied once; an event sent again changes nothing)", sc.of::<EventReceived>())
            .answer(400, "Not verified (forged, stale, unsigned): nothing changed", sc.of::<s::Detail>())
            .answer(500, "The request failed on the service's side", sc.of::<s::Detail>())
            .answer(503, "A dependency is unavailable; Stripe sends the event again", sc.of::<s::Detail>());
}

fn ports(app: &App) -> CreditPorts<'_> {
    CreditPorts { credits: app.credits().as_ref(), billing: app.billing().as_ref(), clock: app.clock.as_ref() }
}

pub(super) fn map_error(error: CreditError, action: &'static str) -> ApiError {
    ApiError::refused(error, || format!("Failed to {action}"))
}

/// `GET /plan`
pub async fn get_plan(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let now = app.clock.now();
    let account = service::current(app.credits().as_ref(), organization, now)
        .await
        .map_err(|error| map_error(error.into(), "read the plan"))?;
    Ok(json_response(StatusCode::OK, &views::plan_view(&account, now)))
}

/// `GET /plan/list`
pub async fn list_plans(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    organization(&app, &call).await?;
    let plans = plans::PlanId::ALL.iter().map(|plan| plan.plan()).collect();
    Ok(json_response(StatusCode::OK, &PlanList { plans }))
}

/// `POST /plan/upgrade`
pub async fn upgrade_plan(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let request = parse::upgrade_request(&serde_json::Value::Object(json_body(&call.request)?))
        .map_err(|error| map_error(error, "change the plan"))?;
    let upgraded = service::upgrade(&ports(&app), organization, request)
        .await
        .map_err(|error| map_error(error, "change the plan"))?;
    let (checkout_url, plan) = match upgraded {
        Upgraded::Checkout { url, plan } => (Some(url), plan),
        Upgraded::Changed { plan } => (None, plan),
    };
    let answer =
        UpgradeAnswer { success: true, requires_checkout: checkout_url.is_some(), checkout_url, plan_id: plan };
    Ok(json_response(StatusCode::OK, &answer))
}

/// `GET /credits`
pub async fn get_credits(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let now = app.clock.now();
    let account = service::current(app.credits().as_ref(), organization, now)
        .await
        .map_err(|error| map_error(error.into(), "read the credits"))?;
    Ok(json_response(StatusCode::OK, &views::credits_view(&account, now)))
}

/// `POST /credits/settings`
pub async fn update_credit_settings(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let change = parse::settings_change(&serde_json::Value::Object(json_body(&call.request)?))
        .map_err(|error| map_error(error, "change the credit settings"))?;
    let account = service::update_settings(&ports(&app), organization, change)
        .await
        .map_err(|error| map_error(error, "change the credit settings"))?;
    Ok(json_response(StatusCode::OK, &views::credits_view(&account, app.clock.now())))
}

/// `GET /credits/ledger`
pub async fn list_credit_ledger(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let query = query_params(&call.request)?;
    if let Some(unknown) = query.keys().find(|name| !matches!(name.as_str(), "limit" | "cursor")) {
        return Err(ApiError::detail(
            StatusCode::BAD_REQUEST,
            format!("unknown query parameter {unknown:?}; allowed: limit, cursor"),
        ));
    }
    let page = service::ledger(
        app.credits().as_ref(),
        organization,
        query.get("limit").map(String::as_str),
        query.get("cursor").map(String::as_str),
    )
    .await
    .map_err(|error| map_error(error, "read the ledger"))?;
    let entries = page.entries.iter().map(LedgerEntry::from).collect();
    Ok(json_response(StatusCode::OK, &LedgerPage { entries, next_cursor: page.next_cursor }))
}

/// `POST /billing/stripe/webhook`: Stripe's events, verified by their `Stripe-Signature`
/// header (no key: the signature is the authority). A forged, stale or unverifiable
/// event is a 400 that changes nothing; an event sent again is a 200 that changes nothing.
pub async fn stripe_webhook(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let signature = call.request.headers().get("stripe-signature").and_then(|value| value.to_str().ok());
    let payload: &[u8] = call.request.body();
    let now = app.clock.now();
    let event = app.billing().event(payload, signature, now).await.map_err(|error| match error {
        EventError::Refused(why) => ApiError::detail(StatusCode::BAD_REQUEST, why),
        EventError::Failed(cause) => ApiError::backend(&cause, "Failed to read the billing event".into()),
    })?;
    let applied = service::apply_event(&ports(&app), &event, now)
        .await
        .map_err(|error| map_error(error, "apply the billing event"))?;
    Ok(json_response(StatusCode::OK, &EventReceived { received: true, applied }))
}

// ---- Answers ---------------------------------------------------------------------

/// `GET /plan/list`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanList {
    pub plans: Vec<plans::Plan>,
}

/// `POST /plan/upgrade`'s answer: from free a checkout to finish at `checkout_url`;
/// between paid plans the change made (or scheduled for the period's end).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpgradeAnswer {
    pub success: bool,
    pub requires_checkout: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub checkout_url: Option<String>,
    pub plan_id: PlanId,
}

/// A movement of credits.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LedgerEntry {
    pub entry_id: Uuid,
    pub created_at: Timestamp,
    /// Negative when spent.
    pub amount: i64,
    pub balance_after: i64,
    pub reason: Reason,
    #[schema(required = true)]
    pub run_id: Option<Uuid>,
    /// For a task's movement, its chain's first node that moved.
    #[schema(required = true)]
    pub agent_node_id: Option<Uuid>,
    /// For a task's movement: the task of the run (its place in the run's tasks).
    #[schema(required = true)]
    pub task: Option<u64>,
    /// For a task's movement: each node's part of `amount` (a chain of edits done in one
    /// pass is one entry); empty otherwise.
    pub lines: Vec<LedgerLine>,
}

/// One node's part of a task's movement of credits.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LedgerLine {
    pub agent_node_id: Uuid,
    /// Negative when spent.
    pub amount: i64,
}

/// `GET /credits/ledger`: newest first.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LedgerPage {
    pub entries: Vec<LedgerEntry>,
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

/// `POST /billing/stripe/webhook`'s answer.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventReceived {
    pub received: bool,
    /// False for an event that needed nothing or was applied before.
    pub applied: bool,
}

impl From<&credits::LedgerEntry> for LedgerEntry {
    fn from(entry: &credits::LedgerEntry) -> Self {
        Self {
            entry_id: entry.entry_id.as_uuid(),
            created_at: entry.created_at,
            amount: entry.amount,
            balance_after: entry.balance_after,
            reason: entry.reason,
            run_id: entry.run_id.map(|run| run.as_uuid()),
            agent_node_id: entry.agent_node_id.map(|node| node.as_uuid()),
            task: entry.task.map(|task| task as u64),
            lines: entry
                .lines
                .iter()
                .map(|line| LedgerLine { agent_node_id: line.agent_node_id.as_uuid(), amount: line.amount })
                .collect(),
        }
    }
}
