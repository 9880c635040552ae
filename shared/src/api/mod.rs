//! HTTP in and out: authentication, JSON bodies, exact error bodies and the routes table.
//! Handlers parse, call one domain function and map its result; nothing here knows
//! whether it runs in a Lambda or in `serve`.

#[macro_use]
mod endpoint;

mod agents;
mod assets;
mod auth;
pub mod avatars;
mod body;
pub mod console;
pub mod credits;
pub mod error;
pub mod handlers;
mod idempotency;
mod identity;
mod media;
pub mod openapi;
mod query;
pub mod routes;
pub mod runs;
mod shared_stores;
pub mod social;
pub mod triggers;
mod uploads;
mod webhooks;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use http::{header, StatusCode};
use serde::Serialize;
use tracing::Instrument;

pub use error::ApiError;
pub use lambda_http::Body;
pub use routes::{Route, ROUTES};

use crate::app::App;
use crate::core::retry::{self, REQUEST_BUDGET};

/// An HTTP request, as `lambda_http` delivers it.
pub type Request = lambda_http::Request;
/// An HTTP response.
pub type Response = http::Response<lambda_http::Body>;
/// The future a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Response> + Send>>;
/// An endpoint's handler: one non-generic function pointer, compiled once.
pub type Handler = fn(Arc<App>, Call) -> HandlerFuture;

/// A route and its handler: what one Lambda function serves.
#[derive(Clone, Copy)]
pub struct Endpoint {
    pub route: &'static Route,
    pub handler: Handler,
}

impl Endpoint {
    /// The endpoint of the route served by `function` (its handler found by name, which
    /// links every handler: for `serve` and the tests).
    pub fn of(function: &str) -> Option<Self> {
        Some(Self { route: routes::by_function(function)?, handler: handlers::of(function)? })
    }
}

/// A request with the path parameters of its route.
pub struct Call {
    pub request: Request,
    pub params: PathParams,
}

/// Percent-decoded path parameters by name.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PathParams(Vec<(&'static str, String)>);

impl PathParams {
    /// The parameter's decoded value, or "" when the route has no such parameter.
    pub fn get(&self, name: &str) -> &str {
        self.0.iter().find(|(key, _)| *key == name).map_or("", |(_, value)| value.as_str())
    }
}

/// `{ success: true }`: the answer of a delete.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Success {
    pub success: bool,
}

/// A JSON response.
pub fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let text = serde_json::to_string(body).unwrap_or_else(|_| r#"{"detail":"internal error"}"#.to_owned());
    http::Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(lambda_http::Body::Text(text))
        .unwrap_or_default()
}

/// Turns a handler's result into its response.
fn respond(result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(ApiError::into_response)
}

/// Routes a request by method and path: the local router of `serve` and the tests.
pub async fn dispatch(app: Arc<App>, request: Request) -> Response {
    let refusal = match routes::find(request.method(), request.uri().path()) {
        routes::Match::Found(route, params) => match handlers::of(route.function) {
            Some(handler) => return invoke(Endpoint { route, handler }, app, request, params).await,
            None => ApiError::detail(StatusCode::NOT_FOUND, "Not Found").into_response(),
        },
        routes::Match::MethodNotAllowed(allowed) => ApiError::method_not_allowed(&allowed, "Method Not Allowed"),
        routes::Match::NotFound => ApiError::detail(StatusCode::NOT_FOUND, "Not Found").into_response(),
    };
    tracing::info!(method = %request.method(), path = request.uri().path(), status = refusal.status().as_u16(), "request");
    refusal
}

/// Serves a request in a Lambda that knows its route; a stage prefix before the
/// route's path is allowed.
pub async fn invoke_route(endpoint: Endpoint, app: Arc<App>, request: Request) -> Response {
    match endpoint.route.match_path_suffix(request.uri().path()) {
        Some(params) => invoke(endpoint, app, request, params).await,
        None => ApiError::detail(StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

/// The ID that ties a request's log lines together: the Lambda invocation's, or the
/// caller's `x-request-id` (when it is short and printable), or a new one.
fn request_id(request: &Request) -> String {
    use lambda_http::RequestExt;
    if let Some(context) = request.lambda_context_ref().filter(|context| !context.request_id.is_empty()) {
        return context.request_id.clone();
    }
    let given = request.headers().get("x-request-id").and_then(|value| value.to_str().ok());
    match given.filter(|id| !id.is_empty() && id.len() <= 128) {
        Some(id) => id.to_owned(),
        None => uuid::Uuid::new_v4().to_string(),
    }
}

/// Runs a handler inside the request's span (request ID, organization once known) and
/// deadline (every retry inside respects [`REQUEST_BUDGET`]), and logs one line for it;
/// a panic becomes a logged 500 instead of a dead process.
async fn invoke(endpoint: Endpoint, app: Arc<App>, request: Request, params: PathParams) -> Response {
    let route = endpoint.route;
    let started = Instant::now();
    let span = tracing::info_span!(
        "request",
        request_id = %request_id(&request),
        organization_id = tracing::field::Empty,
        function = route.function,
    );
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let handler = AssertUnwindSafe(async move {
        match route.idempotent {
            true => idempotency::handle(endpoint, app, request, params).await,
            false => (endpoint.handler)(app, Call { request, params }).await,
        }
    })
    .catch_unwind();
    let handled = retry::with_deadline(started + REQUEST_BUDGET, handler).instrument(span.clone()).await;
    let response = handled.unwrap_or_else(|_| {
        span.in_scope(|| tracing::error!("handler panicked"));
        ApiError::detail(StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
    });
    span.in_scope(|| {
        tracing::info!(
            %method,
            path,
            status = response.status().as_u16(),
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "request"
        )
    });
    response
}
