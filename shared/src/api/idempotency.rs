//! `Idempotency-Key` around the creating POSTs (routes marked `idempotent`): the key is
//! claimed for the caller's organization before the handler runs, and its answer kept
//! (a success) or the key released (anything else) after. See `domain::idempotency`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;

use http::{header, HeaderValue, StatusCode};

use super::auth::{authenticate, Scheme};
use super::{ApiError, Body, Call, Endpoint, PathParams, Request, Response};
use crate::app::App;
use crate::domain::idempotency::{self, Begun, KeptAnswer};

/// Runs the endpoint's handler, honouring the request's `Idempotency-Key` when it has one.
pub(super) async fn handle(endpoint: Endpoint, app: Arc<App>, request: Request, params: PathParams) -> Response {
    let route = endpoint.route;
    let Some(value) = request.headers().get(idempotency::HEADER) else {
        return (endpoint.handler)(app, Call { request, params }).await;
    };
    let checked = match value.to_str() {
        Ok(key) => idempotency::check_key(key).map(|()| key.to_owned()),
        Err(_) => idempotency::check_key("\u{0}").map(|()| String::new()),
    };
    let key = match checked {
        Ok(key) => key,
        Err(problem) => return ApiError::detail(StatusCode::BAD_REQUEST, problem).into_response(),
    };
    // Shared stores take bearer keys only; a key their handler would refuse is left to it.
    let scheme = if route.path.starts_with("/shared-stores") { Scheme::Bearer } else { Scheme::BearerOrApiKey };
    let Ok(principal) = authenticate(&app, request.headers(), scheme).await else {
        return (endpoint.handler)(app, Call { request, params }).await;
    };
    let fingerprint =
        idempotency::fingerprint(request.method().as_str(), request.uri().path(), request.body().as_ref());
    let begun = idempotency::begin(
        app.idempotency().as_ref(),
        app.clock.as_ref(),
        app.idempotency_lease,
        principal.organization_id(),
        &key,
        &fingerprint,
    )
    .await;
    match begun {
        Err(error) => ApiError::backend(&error, "the Idempotency-Key could not be checked".into()).into_response(),
        Ok(Begun::Mismatch) => ApiError::detail(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "Idempotency-Key {key:?} was already used with a different request (method, path or body) in the \
                 last 24 hours; send a new key for a new request"
            ),
        )
        .into_response(),
        Ok(Begun::StillRunning) => ApiError::detail(
            StatusCode::CONFLICT,
            format!("the first request with Idempotency-Key {key:?} is still running; send this one again shortly"),
        )
        .into_response(),
        Ok(Begun::Replay(answer)) => replay(answer),
        Ok(Begun::Run(claim)) => {
            let handler = AssertUnwindSafe((endpoint.handler)(app.clone(), Call { request, params })).catch_unwind();
            let (repo, clock) = (app.idempotency().as_ref(), app.clock.as_ref());
            let handled = idempotency::renew_while(repo, clock, app.idempotency_lease, &claim, handler).await;
            let response = match handled {
                Ok(response) => response,
                Err(_) => {
                    // Let go of the key at once: a repeat runs instead of waiting out the lease.
                    tracing::error!("handler panicked");
                    ApiError::detail(StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
                }
            };
            let body = String::from_utf8_lossy(response.body().as_ref()).into_owned();
            let answer = KeptAnswer { status: response.status().as_u16(), body };
            if let Err(error) = idempotency::finish(app.idempotency().as_ref(), &claim, answer).await {
                // The answer stands; a repeat finds the claim lapsed after its lease and runs again.
                tracing::error!(error = %format!("{error:#}"), "an idempotent answer could not be kept");
            }
            response
        }
    }
}

/// The kept answer, marked as a repeat.
fn replay(answer: KeptAnswer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    http::Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(idempotency::REPLAYED_HEADER, HeaderValue::from_static("true"))
        .body(Body::Text(answer.body))
        .unwrap_or_default()
}
