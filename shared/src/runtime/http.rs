//! The one runner every HTTP Lambda binary calls, compiled once here so each binary is
//! a single line and rebuilds stay short; and the delivery of responses larger than a
//! Lambda function may return.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, StatusCode};

use crate::api::{self, routes, Endpoint, Handler, Response, Route};
use crate::app::App;
use crate::core::retry::{Unavailable, FUNCTION_BUDGET};
use crate::domain::media::ports::BlobStore;

/// Largest body a function answers itself. Lambda refuses responses over 6 MB, counting
/// the JSON envelope the body travels in, where every `"` and `\` of the body is escaped.
pub const MAX_INLINE_BODY_BYTES: usize = 6 * 1024 * 1024 - 64 * 1024;
/// How long the link to a larger response stays valid.
pub const LARGE_RESPONSE_LINK_TTL: Duration = Duration::from_secs(10 * 60);
/// Where larger responses are kept (the bucket expires them after a day).
pub const LARGE_RESPONSE_PREFIX: &str = "responses/";

/// Where a function parks a response too large to return: the app's blob store, for
/// the routes marked `large_responses`.
type Park = fn(&App) -> &Arc<dyn BlobStore>;

/// Runs the Lambda function `function` (a name from the routes table) with its
/// `handler` until the runtime stops it; a function that cannot start reports why to the
/// Runtime API. The binary names its handler, so it links that one alone. A route marked
/// `large_responses` runs with [`run_parking`] instead, and this one refuses to start it.
pub fn run(function: &'static str, handler: Handler) -> ! {
    serve(function, handler, None)
}

/// As [`run`], for a route whose responses may be larger than Lambda returns: those go
/// to the blob store and are answered with a 303 (the only functions that link S3 for it).
pub fn run_parking(function: &'static str, handler: Handler) -> ! {
    serve(function, handler, Some(App::blobs))
}

fn serve(function: &'static str, handler: Handler, park: Option<Park>) -> ! {
    let setup = async move {
        let route = routes::by_function(function)
            .ok_or_else(|| anyhow::anyhow!("no route in the routes table has the function name {function:?}"))?;
        if route.large_responses != park.is_some() {
            let runner = if route.large_responses { "run_parking" } else { "run" };
            anyhow::bail!("the binary of {function} must start with shared::runtime::http::{runner}");
        }
        Ok((Endpoint { route, handler }, Arc::new(App::from_env().await?)))
    };
    super::run_function(function, setup, |(endpoint, app)| {
        lambda_http::run(lambda_http::service_fn(move |request: lambda_http::Request| {
            let app = app.clone();
            async move { Ok::<_, Infallible>(answer(endpoint, app, request, park).await) }
        }))
    })
}

/// Runs the `console` function: the console's files (`api::console`), no state, no key.
pub fn run_console() -> ! {
    super::run_function("console", async { Ok(()) }, |()| {
        lambda_http::run(lambda_http::service_fn(|request: lambda_http::Request| async move {
            let rest = api::console::path_in_function(request.uri().path());
            let asked = api::console::Asked::of(request.headers());
            Ok::<_, Infallible>(api::console::answer(request.method(), rest, asked))
        }))
    })
}

/// Serves one request of a function's route as its binary does, parking a large
/// response when the route allows it.
pub async fn handle(endpoint: Endpoint, app: Arc<App>, request: lambda_http::Request) -> Response {
    let park: Option<Park> = if endpoint.route.large_responses { Some(App::blobs) } else { None };
    answer(endpoint, app, request, park).await
}

async fn answer(endpoint: Endpoint, app: Arc<App>, request: lambda_http::Request, park: Option<Park>) -> Response {
    let deadline = Instant::now() + FUNCTION_BUDGET;
    let response = api::invoke_route(endpoint, app.clone(), request).await;
    deliver(endpoint.route, &app, response, deadline, park).await
}

/// The size of a body once escaped inside the Lambda response's JSON envelope.
pub fn envelope_size(body: &[u8]) -> usize {
    body.len()
        + body
            .iter()
            .map(|byte| match byte {
                b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
                0..=0x1f => 5,
                _ => 0,
            })
            .sum::<usize>()
}

/// Answers a response a function can return as it is; a larger one (a list of 10,000
/// entries with large metadata) is stored in the blob store and answered with a 303 to a
/// short-lived link from which clients GET it whole.
async fn deliver(route: &Route, app: &App, response: Response, deadline: Instant, park: Option<Park>) -> Response {
    if envelope_size(response.body()) <= MAX_INLINE_BODY_BYTES {
        return response;
    }
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let size = response.body().len();
    let Some(park) = park else {
        tracing::error!(
            function = route.function,
            size,
            "the response is too large for Lambda and the route may not park it"
        );
        return api::ApiError::detail(StatusCode::INTERNAL_SERVER_ERROR, "the response is too large to return")
            .into_response();
    };
    let key = format!("{LARGE_RESPONSE_PREFIX}{}.json", uuid::Uuid::new_v4());
    let body = Bytes::copy_from_slice(response.body());
    let parked = async {
        let blobs = park(app);
        blobs.put(&key, body, &content_type).await?;
        blobs.download_url(&key, None, LARGE_RESPONSE_LINK_TTL).await
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let parked = tokio::time::timeout(left, parked).await.unwrap_or_else(|_| {
        let reason = format!("storing a large response did not finish within the function's {FUNCTION_BUDGET:?}");
        Err(Unavailable(reason).into())
    });
    match parked {
        Ok(url) => {
            tracing::info!(function = route.function, size, key, "answered a large response through the blob store");
            let body = api::error::LargeResponse {
                detail: format!(
                    "The response ({size} bytes) is larger than a function may return: GET it from the Location URL \
                     within {} minutes",
                    LARGE_RESPONSE_LINK_TTL.as_secs() / 60
                ),
                location: url.clone(),
            };
            let mut redirect = api::json_response(StatusCode::SEE_OTHER, &body);
            if let Ok(location) = http::HeaderValue::from_str(&url) {
                redirect.headers_mut().insert(header::LOCATION, location);
            }
            redirect
        }
        Err(error) => api::ApiError::backend(&error, "the response could not be delivered".to_owned()).into_response(),
    }
}

/// JSON logs at the level of `RUST_LOG` (default info), as CloudWatch reads them.
/// `RUST_LOG` is read as a list of `target=level` directives and a default level
/// (`info`, `shared=debug,info`): `Targets`, which needs no regular expressions, where an
/// `EnvFilter` would link a regex engine into every function.
pub fn init_tracing() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let json = tracing_subscriber::fmt::layer().json().with_current_span(true);
    tracing_subscriber::registry().with(json).with(filter).init();
}

/// The directives of `RUST_LOG`; unset, empty or unreadable: `info`.
fn log_filter(text: Option<&str>) -> tracing_subscriber::filter::Targets {
    let info = || tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO);
    match text.map(str::trim).filter(|text| !text.is_empty()) {
        Some(text) => text.parse().unwrap_or_else(|_| info()),
        None => info(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_is_read_as_targets_with_info_by_default() {
        use tracing::Level;
        let filter = log_filter(Some("shared=debug,warn"));
        assert!(filter.would_enable("shared::api", &Level::DEBUG));
        assert!(!filter.would_enable("aws_smithy_runtime", &Level::INFO));
        assert!(filter.would_enable("aws_smithy_runtime", &Level::WARN));
        for text in [None, Some(""), Some("not a = filter = at all")] {
            let filter = log_filter(text);
            assert!(filter.would_enable("shared", &Level::INFO) && !filter.would_enable("shared", &Level::DEBUG));
        }
    }

    #[test]
    fn the_envelope_counts_escapes_as_json_writes_them() {
        for body in [r#"{"a":"b\\"}"#, "\x01\n\t\u{7f}", "é", "\u{8}\u{c}\r"] {
            let escaped = serde_json::to_string(body).unwrap().len() - 2;
            assert_eq!(envelope_size(body.as_bytes()), escaped, "{body:?}");
        }
    }
}
