//! Entry points of the Lambda functions: HTTP (one function per route) and the node-task
//! queue (`node-worker`); the webhook queue gets its own here too, and the scheduled
//! `sweeper`. Every one starts through [`run_function`].

pub mod http;
pub mod schedule;
pub mod sqs;

use std::future::Future;
use std::time::Duration;

/// The error type a function reports to the Runtime API when its configuration does not
/// let it start (Lambda's `<category>.<reason>` form).
pub const CONFIG_INVALID: &str = "Runtime.ConfigInvalid";

/// The Runtime API path a function reports a failed initialisation to.
pub const INIT_ERROR_PATH: &str = "/2018-06-01/runtime/init/error";

/// How long a function waits for the Runtime API to take its init error before exiting.
const INIT_ERROR_REPORT_TIME: Duration = Duration::from_secs(2);

/// Runs a Lambda function until the runtime stops it: `setup` builds its state once (the
/// cold start), then `serve` answers invocations with it. A failed setup is reported to
/// the Runtime API (`init/error`, as Lambda expects of a custom runtime) and the process
/// exits with 1, so Lambda logs the reason instead of a bare exit.
pub(crate) fn run_function<S, Setup, Serve, Serving>(function: &str, setup: Setup, serve: Serve) -> !
where
    Setup: Future<Output = anyhow::Result<S>>,
    Serve: FnOnce(S) -> Serving,
    Serving: Future<Output = Result<(), lambda_http::Error>>,
{
    http::init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(error = %error, function, "no async runtime for the function");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async move {
        let state = match setup.await {
            Ok(state) => state,
            Err(error) => {
                tracing::error!(error = %format!("{error:#}"), function, "the function could not start");
                report_init_error(&error).await;
                return 1;
            }
        };
        match serve(state).await {
            Ok(()) => 0,
            Err(error) => {
                tracing::error!(error = %error, function, "lambda runtime stopped");
                1
            }
        }
    });
    std::process::exit(code)
}

/// POSTs `error` to the Runtime API's `init/error` with the
/// `Lambda-Runtime-Function-Error-Type` header and a `{"errorMessage", "errorType"}`
/// body. lambda_runtime 1.5 only reports SnapStart hook failures there (its request type
/// is private), so this is a plain POST. Outside a Lambda (no `AWS_LAMBDA_RUNTIME_API`)
/// there is no one to tell; a report that fails is logged.
async fn report_init_error(error: &anyhow::Error) {
    use http_body_util::Full;

    let Some(api) = std::env::var("AWS_LAMBDA_RUNTIME_API").ok().filter(|api| !api.is_empty()) else {
        return;
    };
    let diagnostic = lambda_http::lambda_runtime::Diagnostic {
        error_type: CONFIG_INVALID.to_owned(),
        error_message: format!("{error:#}"),
    };
    let sent = async {
        let body = serde_json::to_vec(&diagnostic)?;
        let request = ::http::Request::post(format!("http://{api}{INIT_ERROR_PATH}"))
            .header("lambda-runtime-function-error-type", CONFIG_INVALID)
            .header(::http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(bytes::Bytes::from(body)))?;
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<Full<bytes::Bytes>>();
        let status = client.request(request).await?.status();
        anyhow::ensure!(status.is_success(), "the Runtime API answered {status}");
        Ok(())
    };
    match tokio::time::timeout(INIT_ERROR_REPORT_TIME, sent).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::error!(error = %format!("{error:#}"), "could not report the init error"),
        Err(_) => tracing::error!("the Runtime API did not take the init error within {INIT_ERROR_REPORT_TIME:?}"),
    }
}
