//! The one runner every Lambda binary calls: compiled once here, so each binary is a
//! single line and rebuilds stay short.

use std::convert::Infallible;
use std::sync::Arc;

use crate::api::{self, routes};
use crate::app::App;

/// Runs the Lambda function `function` (a name from the routes table) until the
/// runtime stops it; exits the process with an error code if it cannot start.
pub fn run(function: &str) -> ! {
    tracing_subscriber::fmt().json().with_env_filter(env_filter()).with_current_span(false).init();
    let Some(route) = routes::by_function(function) else {
        tracing::error!(function, "no route in the routes table has this function name");
        std::process::exit(2);
    };
    let result =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(anyhow::Error::from).and_then(
            |runtime| {
                runtime.block_on(async move {
                    let app = Arc::new(App::from_env().await?);
                    let service = lambda_http::service_fn(move |request: lambda_http::Request| {
                        let app = app.clone();
                        async move { Ok::<_, Infallible>(api::invoke_route(route, app, request).await) }
                    });
                    lambda_http::run(service).await.map_err(|error| anyhow::anyhow!("{error}"))
                })
            },
        );
    match result {
        Ok(()) => std::process::exit(0),
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), function, "lambda runtime stopped");
            std::process::exit(1);
        }
    }
}

fn env_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
}
