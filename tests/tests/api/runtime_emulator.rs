//! A Lambda Runtime API emulator (the published API, version 2018-06-01): it starts a
//! compiled function binary as its child process, as Lambda's execution environment
//! does, hands it events through `invocation/next` and collects what it answers on
//! `invocation/{id}/response`, `invocation/{id}/error` and `init/error`. The events and
//! answers it carries are in `lambda_events`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

/// The Runtime API's version prefix.
const API: &str = "/2018-06-01/runtime";
/// The largest response a synchronously invoked function may return (6 MB).
pub const MAX_RESPONSE_BYTES: usize = 6 * 1024 * 1024;
/// The account the emulated functions' ARNs name.
const ACCOUNT: &str = "123456789012";
/// How many of a function's last log lines an error shows.
const LOG_TAIL: usize = 40;

/// Where a compiled function binary is: `$CARGO_TARGET_DIR/<profile>/<name>`, or the
/// workspace's `target/`.
pub fn binary_path(name: &str, profile: &str) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace.join(dir),
        None => workspace.join("target"),
    };
    target.join(profile).join(name)
}

/// The debug binary of `name`; a clear failure when it was not built.
pub fn debug_binary(name: &str) -> PathBuf {
    let path = binary_path(name, "debug");
    assert!(
        path.is_file(),
        "{} is missing: build the function binaries first with `cargo build --workspace --bins --tests` \
         (./scripts/test.sh does)",
        path.display()
    );
    path
}

/// The AWS settings of the test environment (the emulators' endpoints, region and fake
/// credentials), as a function's environment carries them.
pub fn aws_environment() -> Vec<(String, String)> {
    [
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL_SQS",
        "AWS_ENDPOINT_URL_S3",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ]
    .iter()
    .filter_map(|name| std::env::var(name).ok().map(|value| ((*name).to_owned(), value)))
    .collect()
}

/// A function to start: its binary, environment, timeout and memory.
pub struct Function {
    name: String,
    binary: PathBuf,
    env: Vec<(String, String)>,
    timeout: Duration,
    memory_mb: u32,
}

impl Function {
    /// The debug build of the binary `name`, 30 s an invocation, 256 MB.
    pub fn new(name: &str) -> Self {
        Self::new_built(name, debug_binary(name))
    }

    /// The function `name` built as `binary` (another profile or architecture).
    pub fn new_built(name: &str, binary: PathBuf) -> Self {
        Self { name: name.to_owned(), binary, env: Vec::new(), timeout: Duration::from_secs(30), memory_mb: 256 }
    }

    /// Sets a variable of the function's environment.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.retain(|(other, _)| other != name);
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets every variable of `variables`.
    pub fn envs(self, variables: &[(String, String)]) -> Self {
        variables.iter().fold(self, |function, (name, value)| function.env(name, value))
    }

    /// The function's timeout: an invocation not answered by then fails (and the
    /// process is stopped, as Lambda resets the environment).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Serves the Runtime API on a port of its own and starts the binary against it.
    pub async fn start(self) -> RunningFunction {
        let (events, inbox) = mpsc::unbounded_channel();
        let state = Arc::new(RuntimeState {
            inbox: tokio::sync::Mutex::new(inbox),
            pending: Mutex::default(),
            first_next: Mutex::default(),
            init_error: Mutex::default(),
            function_arn: function_arn(&self.name),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port for the Runtime API");
        let address = listener.local_addr().expect("the Runtime API's address");
        let server = tokio::spawn(serve(listener, state.clone()));
        let mut command = Command::new(&self.binary);
        // Only what Lambda sets and what the function is configured with.
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "en_US.UTF-8")
            .env("TZ", ":UTC")
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned()))
            .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", &self.name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", self.memory_mb.to_string())
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{}", self.name))
            .env("AWS_LAMBDA_LOG_STREAM_NAME", format!("2026/01/01/[$LATEST]{}", uuid::Uuid::new_v4().simple()))
            .env("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand")
            .env("AWS_EXECUTION_ENV", "AWS_Lambda_provided.al2023")
            .env("_HANDLER", "bootstrap")
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = command.spawn().unwrap_or_else(|error| panic!("starting {}: {error}", self.binary.display()));
        let logs: Arc<Mutex<Vec<String>>> = Arc::default();
        for stream in [child.stdout.take().map(read_box), child.stderr.take().map(read_box)].into_iter().flatten() {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stream).lines().map_while(Result::ok) {
                    logs.lock().unwrap().push(line);
                }
            });
        }
        RunningFunction {
            name: self.name,
            state,
            events,
            child: Mutex::new(child),
            started,
            server,
            timeout: self.timeout,
            logs,
        }
    }
}

fn read_box(stream: impl std::io::Read + Send + 'static) -> Box<dyn std::io::Read + Send> {
    Box::new(stream)
}

/// What a function posted to `init/error`.
#[derive(Clone, Debug)]
pub struct InitError {
    /// The `Lambda-Runtime-Function-Error-Type` header.
    pub error_type: Option<String>,
    /// The JSON body (`errorMessage`, `errorType`); null when it was not JSON.
    pub body: Value,
}

/// Why an invocation gave no response.
#[derive(Debug)]
pub enum InvokeError {
    /// The function reported an invocation error (`invocation/{id}/error`).
    Function { error_type: Option<String>, body: Value },
    /// The function's response was larger than Lambda returns.
    ResponseTooLarge(usize),
    /// The process ended (after reporting an init error, when it did).
    Exited { status: ExitStatus, init_error: Option<InitError> },
    /// No answer within the function's timeout; the process was stopped.
    TimedOut(Duration),
    /// The response was not JSON.
    NotJson(String),
}

impl std::fmt::Display for InvokeError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Function { error_type, body } => write!(formatter, "invocation error {error_type:?}: {body}"),
            Self::ResponseTooLarge(size) => write!(formatter, "a response of {size} bytes (over 6 MB)"),
            Self::Exited { status, init_error } => write!(formatter, "the process ended ({status}): {init_error:?}"),
            Self::TimedOut(timeout) => write!(formatter, "no answer within the function's {timeout:?}"),
            Self::NotJson(text) => write!(formatter, "a response that is not JSON: {text}"),
        }
    }
}

/// How an invocation ended, as the function posted it.
enum Outcome {
    Response(Bytes),
    Error { error_type: Option<String>, body: Bytes },
    TooLarge(usize),
}

/// One event waiting for the function's `next`.
struct Invocation {
    id: String,
    deadline_ms: u128,
    payload: Bytes,
}

/// The Runtime API's side: events not yet taken, invocations not yet answered, and
/// what the function reported.
struct RuntimeState {
    inbox: tokio::sync::Mutex<mpsc::UnboundedReceiver<Invocation>>,
    pending: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    first_next: Mutex<Option<Instant>>,
    init_error: Mutex<Option<InitError>>,
    function_arn: String,
}

/// A function's process and the Runtime API it talks to; both stop when this is dropped.
pub struct RunningFunction {
    name: String,
    state: Arc<RuntimeState>,
    events: mpsc::UnboundedSender<Invocation>,
    child: Mutex<Child>,
    started: Instant,
    server: tokio::task::JoinHandle<()>,
    timeout: Duration,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Drop for RunningFunction {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = child.kill();
        let _ = child.wait();
        self.server.abort();
    }
}

impl RunningFunction {
    /// Invokes the function with `event` and waits (at most its timeout) for its answer.
    pub async fn invoke(&self, event: &Value) -> Result<Value, InvokeError> {
        let bytes = self.invoke_bytes(Bytes::from(event.to_string())).await?;
        serde_json::from_slice(&bytes).map_err(|_| InvokeError::NotJson(String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// As [`RunningFunction::invoke`], for a function that must answer: a failure names
    /// the function and shows its last log lines.
    pub async fn call(&self, event: &Value) -> Value {
        match self.invoke(event).await {
            Ok(answer) => answer,
            Err(error) => panic!("{}: {error}\n{}", self.name, self.log_tail()),
        }
    }

    async fn invoke_bytes(&self, payload: Bytes) -> Result<Bytes, InvokeError> {
        if let Some(status) = self.exit_status() {
            return Err(self.exited(status));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let deadline = SystemTime::now() + self.timeout;
        let deadline_ms = deadline.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
        let (answer, mut answered) = oneshot::channel();
        self.state.pending.lock().unwrap().insert(id.clone(), answer);
        let _ = self.events.send(Invocation { id: id.clone(), deadline_ms, payload });
        let limit = Instant::now() + self.timeout;
        loop {
            tokio::select! {
                outcome = &mut answered => return match outcome {
                    Ok(Outcome::Response(bytes)) => Ok(bytes),
                    Ok(Outcome::Error { error_type, body }) => Err(InvokeError::Function {
                        error_type,
                        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    }),
                    Ok(Outcome::TooLarge(size)) => Err(InvokeError::ResponseTooLarge(size)),
                    Err(_) => Err(InvokeError::TimedOut(self.timeout)),
                },
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    if let Some(status) = self.exit_status() {
                        self.state.pending.lock().unwrap().remove(&id);
                        return Err(self.exited(status));
                    }
                    if Instant::now() >= limit {
                        self.state.pending.lock().unwrap().remove(&id);
                        self.stop();
                        return Err(InvokeError::TimedOut(self.timeout));
                    }
                }
            }
        }
    }

    /// Waits (at most `within`) for the function's first `next`: it finished its cold
    /// start. Answers the time from the process's start to that call.
    pub async fn ready(&self, within: Duration) -> Result<Duration, InvokeError> {
        let limit = Instant::now() + within;
        loop {
            if let Some(at) = *self.state.first_next.lock().unwrap() {
                return Ok(at - self.started);
            }
            if let Some(status) = self.exit_status() {
                return Err(self.exited(status));
            }
            if Instant::now() >= limit {
                return Err(InvokeError::TimedOut(within));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits (at most `within`) for the function to report an init error and its
    /// process to end; answers both. A function that asks for an event instead fails.
    pub async fn init_failure(&self, within: Duration) -> (InitError, ExitStatus) {
        let limit = Instant::now() + within;
        loop {
            assert!(
                self.state.first_next.lock().unwrap().is_none(),
                "{} started (asked for an event) instead of failing\n{}",
                self.name,
                self.log_tail()
            );
            let reported = self.state.init_error.lock().unwrap().clone();
            match (reported, self.exit_status()) {
                (Some(report), Some(status)) => return (report, status),
                (None, Some(status)) => {
                    panic!("{} ended ({status}) without reporting an init error\n{}", self.name, self.log_tail())
                }
                _ if Instant::now() >= limit => {
                    panic!(
                        "{} neither reported an init error and ended within {within:?}\n{}",
                        self.name,
                        self.log_tail()
                    )
                }
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// The process's ID.
    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// The function's last log lines (stdout and stderr, as CloudWatch gets them).
    pub fn log_tail(&self) -> String {
        let logs = self.logs.lock().unwrap();
        logs[logs.len().saturating_sub(LOG_TAIL)..].join("\n")
    }

    fn exit_status(&self) -> Option<ExitStatus> {
        self.child.lock().unwrap().try_wait().ok().flatten()
    }

    fn exited(&self, status: ExitStatus) -> InvokeError {
        InvokeError::Exited { status, init_error: self.state.init_error.lock().unwrap().clone() }
    }

    fn stop(&self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Serves the Runtime API on `listener` until aborted (its connections with it).
async fn serve(listener: tokio::net::TcpListener, state: Arc<RuntimeState>) {
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        while connections.try_join_next().is_some() {}
        let state = state.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&state, request).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        });
    }
}

fn reply(status: StatusCode, body: Value) -> http::Response<Full<Bytes>> {
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a response")
}

fn refusal(status: StatusCode, error_type: &str, message: &str) -> http::Response<Full<Bytes>> {
    reply(status, json!({ "errorMessage": message, "errorType": error_type }))
}

/// One Runtime API request: the routes of the published API.
async fn answer(state: &RuntimeState, request: http::Request<hyper::body::Incoming>) -> http::Response<Full<Bytes>> {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let error_type = request
        .headers()
        .get("lambda-runtime-function-error-type")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let Some(route) = path.strip_prefix(API) else {
        return refusal(StatusCode::NOT_FOUND, "NotFound", "not a Runtime API path");
    };
    if method == Method::GET && route == "/invocation/next" {
        state.first_next.lock().unwrap().get_or_insert_with(Instant::now);
        // Long poll: Lambda answers `next` when an event arrives, however long that is.
        let Some(invocation) = state.inbox.lock().await.recv().await else {
            return refusal(StatusCode::INTERNAL_SERVER_ERROR, "ServiceException", "the emulator stopped");
        };
        let trace = format!(
            "Root=1-{:08x}-{};Parent={};Sampled=0",
            invocation.deadline_ms / 1000,
            &uuid::Uuid::new_v4().simple().to_string()[..24],
            &uuid::Uuid::new_v4().simple().to_string()[..16]
        );
        return http::Response::builder()
            .status(StatusCode::OK)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("lambda-runtime-aws-request-id", &invocation.id)
            .header("lambda-runtime-deadline-ms", invocation.deadline_ms.to_string())
            .header("lambda-runtime-invoked-function-arn", &state.function_arn)
            .header("lambda-runtime-trace-id", trace)
            .body(Full::new(invocation.payload))
            .expect("an event response");
    }
    if method != Method::POST {
        return refusal(StatusCode::NOT_FOUND, "NotFound", "no such Runtime API route");
    }
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return refusal(StatusCode::BAD_REQUEST, "InvalidRequest", "the body could not be read"),
    };
    if route == "/init/error" {
        let report = InitError { error_type, body: serde_json::from_slice(&body).unwrap_or(Value::Null) };
        *state.init_error.lock().unwrap() = Some(report);
        return reply(StatusCode::ACCEPTED, json!({ "status": "OK" }));
    }
    let Some((id, kind)) = route.strip_prefix("/invocation/").and_then(|rest| rest.split_once('/')) else {
        return refusal(StatusCode::NOT_FOUND, "NotFound", "no such Runtime API route");
    };
    let Some(waiting) = state.pending.lock().unwrap().remove(id) else {
        return refusal(StatusCode::BAD_REQUEST, "InvalidRequestID", "no invocation with this request ID is open");
    };
    match kind {
        "response" if body.len() > MAX_RESPONSE_BYTES => {
            let _ = waiting.send(Outcome::TooLarge(body.len()));
            let message = format!("Exceeded maximum allowed payload size ({MAX_RESPONSE_BYTES} bytes).");
            refusal(StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge", &message)
        }
        "response" => {
            let _ = waiting.send(Outcome::Response(body));
            reply(StatusCode::ACCEPTED, json!({ "status": "OK" }))
        }
        "error" => {
            let _ = waiting.send(Outcome::Error { error_type, body });
            reply(StatusCode::ACCEPTED, json!({ "status": "OK" }))
        }
        _ => refusal(StatusCode::NOT_FOUND, "NotFound", "no such Runtime API route"),
    }
}

fn function_arn(name: &str) -> String {
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".to_owned());
    format!("arn:aws:lambda:{region}:{ACCOUNT}:function:{name}")
}
