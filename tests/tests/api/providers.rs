//! The HTTP generation providers against local fakes of their published APIs: OpenAI's
//! images and speech (`Authorization: Bearer`, errors `{"error": {"message", "type",
//! "param", "code"}}`) and Veo through the Gemini API (`x-goog-api-key`, a long-running
//! operation, errors `{"error": {"code", "message", "status"}}`). Each fake checks the key
//! and the fields of what it gets, refuses as its provider does, and records every request;
//! the media it serves are made with ffmpeg at test time.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use shared::adapters::gemini::Veo;
use shared::adapters::openai::OpenAi;
use shared::core::retry::RetryPolicy;
use shared::domain::generation::{GenerationError, Generator, ImageRequest, SpeechRequest, Stop, VideoRequest};
use tokio::time::Instant;

/// The key the fakes accept.
const KEY: &str = "sk-test-0123456789abcdef";

/// Veo polls in tests: every 25 to 50 ms.
const QUICK_POLLS: RetryPolicy = RetryPolicy {
    name: "test polls of a Veo operation",
    max_attempts: 1000,
    first_delay: Duration::from_millis(50),
    max_delay: Duration::from_millis(50),
    budget: Duration::from_secs(60),
};

// ---------------------------------------------------------------------------------------
// A local HTTP server that records what it gets.

/// One request a fake got.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    pub(crate) method: String,
    /// Path and query.
    pub(crate) path: String,
    pub(crate) headers: BTreeMap<String, String>,
    /// The body as JSON (`Null` when it is not JSON).
    pub(crate) body: Value,
    /// The body as text.
    pub(crate) raw: String,
}

type Reply = http::Response<Full<Bytes>>;

/// How a fake answers one request.
pub(crate) enum Answer {
    Reply(Box<Reply>),
    /// Reads the request and never answers.
    Hang,
}

/// A local HTTP server answering each request with `answer(request, earlier)`, where
/// `earlier` counts the requests it got before on the same path and query.
#[derive(Clone)]
pub(crate) struct Fake {
    pub(crate) url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Fake {
    pub(crate) async fn start(answer: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = Self { url: format!("http://{}", listener.local_addr().unwrap()), received: Arc::default() };
        let answer = Arc::new(answer);
        let received = fake.received.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (answer, received) = (answer.clone(), received.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                        let (answer, received) = (answer.clone(), received.clone());
                        async move {
                            let (parts, body) = request.into_parts();
                            let raw = body.collect().await.map(|body| body.to_bytes()).unwrap_or_default();
                            let request = Received {
                                method: parts.method.to_string(),
                                path: parts.uri.path_and_query().map(|path| path.to_string()).unwrap_or_default(),
                                headers: parts
                                    .headers
                                    .iter()
                                    .map(|(name, value)| {
                                        (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned())
                                    })
                                    .collect(),
                                body: serde_json::from_slice(&raw).unwrap_or(Value::Null),
                                raw: String::from_utf8_lossy(&raw).into_owned(),
                            };
                            let answer = {
                                let mut all = received.lock().unwrap();
                                let earlier = all.iter().filter(|other| other.path == request.path).count();
                                all.push(request.clone());
                                answer(&request, earlier)
                            };
                            match answer {
                                Answer::Reply(reply) => Ok::<_, Infallible>(*reply),
                                Answer::Hang => {
                                    tokio::time::sleep(Duration::from_secs(3600)).await;
                                    Ok(reply(StatusCode::GATEWAY_TIMEOUT, "text/plain", Bytes::new()))
                                }
                            }
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        fake
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// `METHOD path` of each request, in order.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.received().iter().map(|request| format!("{} {}", request.method, request.path)).collect()
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Reply {
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()))
        .unwrap()
}

pub(crate) fn json_reply(status: StatusCode, body: Value) -> Answer {
    Answer::Reply(Box::new(reply(status, "application/json", body.to_string())))
}

// ---------------------------------------------------------------------------------------
// Media made with ffmpeg, and what ffprobe says of a file.

async fn ffmpeg(args: &[&str], name: &str) -> Vec<u8> {
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join(name);
    let status = tokio::process::Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y"])
        .args(args)
        .arg(&output)
        .status()
        .await
        .expect("ffmpeg runs");
    assert!(status.success(), "ffmpeg {args:?}");
    std::fs::read(&output).unwrap()
}

async fn red_png() -> Vec<u8> {
    ffmpeg(&["-f", "lavfi", "-i", "color=red:s=64x48", "-frames:v", "1"], "red.png").await
}

async fn sine_wav() -> Vec<u8> {
    ffmpeg(&["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=24000:duration=1", "-c:a", "pcm_s16le"], "tone.wav")
        .await
}

async fn small_mp4() -> Vec<u8> {
    let args = [
        "-f",
        "lavfi",
        "-i",
        "testsrc=size=320x180:rate=24:duration=1",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=440:duration=1",
        "-c:v",
        "libx264",
        "-pix_fmt",
        "yuv420p",
        "-c:a",
        "aac",
        "-shortest",
    ];
    ffmpeg(&args, "clip.mp4").await
}

/// ffprobe's streams and format of `path`.
async fn probe(path: &Path) -> Value {
    let output = tokio::process::Command::new("ffprobe")
        .args(["-v", "error", "-show_streams", "-show_format", "-of", "json"])
        .arg(path)
        .output()
        .await
        .expect("ffprobe runs");
    assert!(output.status.success(), "ffprobe {}: {}", path.display(), String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

// ---------------------------------------------------------------------------------------
// Stops.

/// A stop at `limit` from now, and the sender that cancels it.
fn stop_after(limit: Duration) -> (tokio::sync::watch::Sender<bool>, Stop) {
    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    (cancel, Stop { cancelled, deadline: Instant::now() + limit })
}

fn provider_message(outcome: Result<(), GenerationError>, provider: &str) -> String {
    match outcome {
        Err(GenerationError::Provider { provider: named, message }) => {
            assert_eq!(named, provider);
            message
        }
        other => panic!("not a provider error: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// The OpenAI fake.

/// How the OpenAI fake answers.
#[derive(Clone, Copy, Debug)]
enum OpenAiMode {
    Serve,
    /// Image prompts are refused by moderation.
    Moderate,
    /// Answers 503 to the first `n` requests of each path.
    OverloadedFirst(usize),
    /// Answers 429 to everything.
    RateLimited,
    /// Serves a GIF as the image.
    NotPng,
    Hang,
}

fn openai_error(status: StatusCode, message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Answer {
    json_reply(status, json!({ "error": { "message": message, "type": kind, "param": param, "code": code } }))
}

fn openai_invalid(param: &str, message: String) -> Answer {
    openai_error(StatusCode::BAD_REQUEST, &message, "invalid_request_error", Some(param), Some("invalid_value"))
}

/// The key as OpenAI quotes it in a refusal: its ends only.
fn redacted(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 8 {
        return "*".repeat(chars.len());
    }
    let head: String = chars[..3].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}{}{tail}", "*".repeat(chars.len() - 7))
}

/// The field `name` of `body` when it is one of `allowed`, else OpenAI's refusal.
fn one_of(body: &Value, name: &str, allowed: &[&str]) -> Result<(), Answer> {
    match body.get(name).and_then(Value::as_str) {
        Some(value) if allowed.contains(&value) => Ok(()),
        value => {
            let quoted: Vec<String> = allowed.iter().map(|allowed| format!("'{allowed}'")).collect();
            Err(openai_invalid(
                name,
                format!("Invalid value: {}. Supported values are: {}.", value.unwrap_or("null"), quoted.join(", ")),
            ))
        }
    }
}

fn openai_answer(mode: OpenAiMode, png: &[u8], wav: &[u8], request: &Received, earlier: usize) -> Answer {
    match mode {
        OpenAiMode::Hang => return Answer::Hang,
        OpenAiMode::OverloadedFirst(n) if earlier < n => {
            let message = "The server is overloaded or not ready yet.";
            return openai_error(StatusCode::SERVICE_UNAVAILABLE, message, "server_error", None, None);
        }
        OpenAiMode::RateLimited => {
            let message = "Rate limit reached for gpt-image-1 in organization org-test on images per minute (IPM): \
                           Limit 5, Used 5, Requested 1. Please try again in 12s.";
            return openai_error(StatusCode::TOO_MANY_REQUESTS, message, "requests", None, Some("rate_limit_exceeded"));
        }
        _ => {}
    }
    let presented = request.headers.get("authorization").and_then(|value| value.strip_prefix("Bearer "));
    if presented != Some(KEY) {
        let message = format!(
            "Incorrect API key provided: {}. You can find your API key at https://platform.openai.com/account/api-keys.",
            redacted(presented.unwrap_or_default())
        );
        return openai_error(
            StatusCode::UNAUTHORIZED,
            &message,
            "invalid_request_error",
            None,
            Some("invalid_api_key"),
        );
    }
    let body = &request.body;
    let is_json = request.headers.get("content-type").is_some_and(|value| value.starts_with("application/json"));
    if !is_json || !body.is_object() {
        let message = "We could not parse the JSON body of your request. (HINT: This likely means you aren't using \
                       your HTTP library correctly. The OpenAI API expects a JSON payload.)";
        return openai_error(StatusCode::BAD_REQUEST, message, "invalid_request_error", None, None);
    }
    let checked = match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/v1/images/generations") => check_image(body),
        ("POST", "/v1/audio/speech") => check_speech(body),
        (method, path) => {
            let message = format!("Invalid URL ({method} {path})");
            return openai_error(StatusCode::NOT_FOUND, &message, "invalid_request_error", None, None);
        }
    };
    if let Err(refusal) = checked {
        return refusal;
    }
    if request.path == "/v1/audio/speech" {
        return Answer::Reply(Box::new(reply(StatusCode::OK, "audio/wav", wav.to_vec())));
    }
    let image = match mode {
        OpenAiMode::Moderate => {
            let message = "Your request was rejected as a result of our safety system. Your prompt may contain text \
                           that is not allowed by our safety system.";
            return openai_error(
                StatusCode::BAD_REQUEST,
                message,
                "image_generation_user_error",
                None,
                Some("moderation_blocked"),
            );
        }
        OpenAiMode::NotPng => b"GIF89a\x01\x00\x01\x00\x00\x00\x00;".to_vec(),
        _ => png.to_vec(),
    };
    let data = base64::engine::general_purpose::STANDARD.encode(image);
    json_reply(
        StatusCode::OK,
        json!({
            "created": 1_750_000_000,
            "data": [{ "b64_json": data }],
            "usage": { "input_tokens": 12, "output_tokens": 272, "total_tokens": 284 },
        }),
    )
}

/// The fields of an image generation, as `gpt-image-1` accepts them.
fn check_image(body: &Value) -> Result<(), Answer> {
    one_of(body, "model", &["gpt-image-1", "dall-e-2", "dall-e-3"])?;
    if body.get("prompt").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(openai_invalid("prompt", "Invalid type for 'prompt': expected a non-empty string.".into()));
    }
    one_of(body, "size", &["1024x1024", "1024x1536", "1536x1024", "auto"])?;
    one_of(body, "quality", &["low", "medium", "high", "auto"])?;
    one_of(body, "output_format", &["png", "jpeg", "webp"])?;
    if body.get("n").and_then(Value::as_u64).is_none_or(|n| !(1..=10).contains(&n)) {
        return Err(openai_invalid("n", "Invalid 'n': integer between 1 and 10 expected.".into()));
    }
    Ok(())
}

/// The fields of a speech generation.
fn check_speech(body: &Value) -> Result<(), Answer> {
    one_of(body, "model", &["tts-1", "tts-1-hd", "gpt-4o-mini-tts"])?;
    let voices = ["alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse"];
    one_of(body, "voice", &voices)?;
    one_of(body, "response_format", &["mp3", "opus", "aac", "flac", "wav", "pcm"])?;
    match body.get("input").and_then(Value::as_str) {
        Some(input) if !input.is_empty() && input.chars().count() <= 4096 => Ok(()),
        _ => Err(openai_invalid("input", "Invalid 'input': string between 1 and 4096 characters expected.".into())),
    }
}

/// An OpenAI fake in `mode` serving a red 64×48 PNG and a one-second tone.
async fn openai_fake(mode: OpenAiMode) -> (Fake, Vec<u8>, Vec<u8>) {
    let (png, wav) = (red_png().await, sine_wav().await);
    let (served_png, served_wav) = (png.clone(), wav.clone());
    let fake =
        Fake::start(move |request, earlier| openai_answer(mode, &served_png, &served_wav, request, earlier)).await;
    (fake, png, wav)
}

fn square_image(prompt: &str) -> ImageRequest {
    ImageRequest { prompt: prompt.to_owned(), width: 1024, height: 1024, quality: "medium".to_owned() }
}

fn speech(text: &str) -> SpeechRequest {
    SpeechRequest { text: text.to_owned() }
}

// ---------------------------------------------------------------------------------------
// OpenAI.

#[tokio::test]
async fn openai_image_is_the_png_openai_answers_for_the_request() {
    let (fake, png, _) = openai_fake(OpenAiMode::Serve).await;
    // A trailing slash, as an `OPENAI_BASE_URL` may have.
    let openai = OpenAi::new(&format!("{}/v1/", fake.url), KEY).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("image.png");
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    assert_eq!(Generator::<ImageRequest>::name(&openai), "openai");
    Generator::<ImageRequest>::generate(&openai, &square_image("a red square"), &output, &stop).await.unwrap();

    assert_eq!(std::fs::read(&output).unwrap(), png);
    let probed = probe(&output).await;
    assert_eq!(probed["streams"][0]["codec_name"], "png");
    assert_eq!((probed["streams"][0]["width"].as_u64(), probed["streams"][0]["height"].as_u64()), (Some(64), Some(48)));
    let received = fake.received();
    assert_eq!(fake.requests(), ["POST /v1/images/generations"]);
    assert_eq!(received[0].headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(
        received[0].body,
        json!({
            "model": "gpt-image-1",
            "prompt": "a red square",
            "size": "1024x1024",
            "quality": "medium",
            "n": 1,
            "output_format": "png",
        })
    );
}

#[tokio::test]
async fn openai_speech_is_the_wav_openai_streams() {
    let (fake, _, wav) = openai_fake(OpenAiMode::Serve).await;
    let openai = OpenAi::new(&format!("{}/v1", fake.url), KEY).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("speech.wav");
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    assert_eq!(Generator::<SpeechRequest>::name(&openai), "openai");
    Generator::<SpeechRequest>::generate(&openai, &speech("Hello there."), &output, &stop).await.unwrap();

    assert_eq!(std::fs::read(&output).unwrap(), wav);
    let probed = probe(&output).await;
    assert_eq!(probed["format"]["format_name"], "wav");
    assert_eq!(probed["streams"][0]["codec_name"], "pcm_s16le");
    let received = fake.received();
    assert_eq!(fake.requests(), ["POST /v1/audio/speech"]);
    assert_eq!(received[0].headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(
        received[0].body,
        json!({ "model": "gpt-4o-mini-tts", "input": "Hello there.", "voice": "alloy", "response_format": "wav" })
    );
}

#[tokio::test]
async fn openai_refusals_reach_the_provider_error_with_openais_message() {
    let (fake, _, _) = openai_fake(OpenAiMode::Moderate).await;
    let openai = OpenAi::new(&format!("{}/v1", fake.url), KEY).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("image.png");
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    let moderated =
        Generator::<ImageRequest>::generate(&openai, &square_image("something not allowed"), &output, &stop).await;
    assert_eq!(
        provider_message(moderated, "openai"),
        "400 Bad Request: Your request was rejected as a result of our safety system. Your prompt may contain text \
         that is not allowed by our safety system."
    );
    let odd_size = ImageRequest { width: 64, height: 48, ..square_image("a red square") };
    let refused = Generator::<ImageRequest>::generate(&openai, &odd_size, &output, &stop).await;
    assert_eq!(
        provider_message(refused, "openai"),
        "400 Bad Request: Invalid value: 64x48. Supported values are: '1024x1024', '1024x1536', '1536x1024', 'auto'."
    );
    assert_eq!(fake.received().len(), 2, "a refusal is not retried");
    assert!(!output.exists(), "nothing is written");
}

#[tokio::test]
async fn openai_wrong_key_gets_openais_401_message() {
    let (fake, _, _) = openai_fake(OpenAiMode::Serve).await;
    let openai = OpenAi::new(&format!("{}/v1", fake.url), "sk-wrong-key-000000").unwrap();
    let folder = tempfile::tempdir().unwrap();
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    let expected = "401 Unauthorized: Incorrect API key provided: sk-************0000. You can find your API key at \
                    https://platform.openai.com/account/api-keys.";
    let image =
        Generator::<ImageRequest>::generate(&openai, &square_image("a"), &folder.path().join("a.png"), &stop).await;
    assert_eq!(provider_message(image, "openai"), expected);
    let spoken = Generator::<SpeechRequest>::generate(&openai, &speech("a"), &folder.path().join("a.wav"), &stop).await;
    assert_eq!(provider_message(spoken, "openai"), expected);
}

#[tokio::test]
async fn openai_server_that_never_answers_times_out_at_the_deadline() {
    let (fake, _, _) = openai_fake(OpenAiMode::Hang).await;
    let openai = OpenAi::new(&format!("{}/v1", fake.url), KEY).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let (_cancel, stop) = stop_after(Duration::from_secs(2));
    let started = Instant::now();

    let outcome =
        Generator::<SpeechRequest>::generate(&openai, &speech("hi"), &folder.path().join("a.wav"), &stop).await;

    let took = started.elapsed();
    match outcome {
        Err(GenerationError::TimedOut { provider, limit }) => {
            assert_eq!(provider, "openai");
            assert!(limit <= Duration::from_secs(2) && limit > Duration::from_millis(1500), "{limit:?}");
        }
        other => panic!("not a timeout: {other:?}"),
    }
    assert!(took >= Duration::from_millis(1900) && took < Duration::from_millis(2500), "{took:?}");
}

#[tokio::test]
async fn openai_cancel_stops_a_request_in_flight() {
    let (fake, _, _) = openai_fake(OpenAiMode::Hang).await;
    let openai = OpenAi::new(&format!("{}/v1", fake.url), KEY).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let (cancel, stop) = stop_after(Duration::from_secs(20));
    let output = folder.path().join("a.png");
    let request = square_image("a");

    let generation = Generator::<ImageRequest>::generate(&openai, &request, &output, &stop);
    let canceller = async {
        while fake.received().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.send(true).unwrap();
        Instant::now()
    };
    let (outcome, cancelled_at) = tokio::join!(generation, canceller);

    assert!(matches!(outcome, Err(GenerationError::Cancelled)), "{outcome:?}");
    assert!(cancelled_at.elapsed() < Duration::from_millis(300));
}

#[tokio::test]
async fn openai_overloaded_answers_are_retried_until_one_succeeds() {
    let (fake, png, _) = openai_fake(OpenAiMode::OverloadedFirst(1)).await;
    let openai = OpenAi::new(&format!("{}/v1", fake.url), KEY).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("image.png");
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    Generator::<ImageRequest>::generate(&openai, &square_image("a red square"), &output, &stop).await.unwrap();

    assert_eq!(std::fs::read(&output).unwrap(), png);
    assert_eq!(fake.requests(), ["POST /v1/images/generations", "POST /v1/images/generations"]);
    assert_eq!(fake.received()[0].body, fake.received()[1].body, "the same request again");
}

#[tokio::test]
async fn openai_rate_limit_that_lasts_ends_as_the_provider_error_before_the_deadline() {
    let (fake, _, _) = openai_fake(OpenAiMode::RateLimited).await;
    let openai = OpenAi::new(&format!("{}/v1", fake.url), KEY).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let (_cancel, stop) = stop_after(Duration::from_secs(3));
    let started = Instant::now();

    let outcome =
        Generator::<ImageRequest>::generate(&openai, &square_image("a"), &folder.path().join("a.png"), &stop).await;

    let message = provider_message(outcome, "openai");
    assert!(message.starts_with("429 Too Many Requests: Rate limit reached for gpt-image-1"), "{message}");
    assert!(fake.received().len() >= 2, "retried at least once: {:?}", fake.requests());
    assert!(started.elapsed() < Duration::from_secs(3), "the retries stop before the deadline");
}

#[tokio::test]
async fn openai_answer_without_a_png_is_a_provider_error() {
    let (fake, _, _) = openai_fake(OpenAiMode::NotPng).await;
    let openai = OpenAi::new(&format!("{}/v1", fake.url), KEY).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("image.png");
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    let outcome = Generator::<ImageRequest>::generate(&openai, &square_image("a"), &output, &stop).await;

    assert_eq!(provider_message(outcome, "openai"), "data[0].b64_json is not a PNG");
    assert!(!output.exists());
}

#[tokio::test]
async fn openai_unreachable_server_is_unavailable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let openai = OpenAi::new(&closed, KEY).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    let outcome =
        Generator::<SpeechRequest>::generate(&openai, &speech("hi"), &folder.path().join("a.wav"), &stop).await;

    assert!(matches!(outcome, Err(GenerationError::Unavailable(_))), "{outcome:?}");
}

// ---------------------------------------------------------------------------------------
// The Gemini API fake.

/// How the Gemini fake's operations end.
#[derive(Clone, Copy, Debug)]
enum VeoMode {
    /// Done after `n` polls that say it is not, with the video.
    DoneAfter(usize),
    NeverDone,
    /// Done with the error `{"code": 3, "message": ...}`.
    Fails,
    /// Done with the video filtered out by the safety filters.
    Filtered,
}

const FAILED_OPERATION: &str = "Video generation failed: the prompt could not be submitted. This prompt contains \
                                words that violate Vertex AI's usage guidelines.";

fn google_error(status: StatusCode, message: &str, code_name: &str) -> Answer {
    json_reply(status, json!({ "error": { "code": status.as_u16(), "message": message, "status": code_name } }))
}

fn google_invalid(message: String) -> Answer {
    google_error(StatusCode::BAD_REQUEST, &message, "INVALID_ARGUMENT")
}

/// The Gemini API of the Veo models: the operation's video is downloaded from the API,
/// which redirects to `storage`.
fn gemini_answer(mode: VeoMode, storage: &str, request: &Received, earlier: usize) -> Answer {
    match request.headers.get("x-goog-api-key").map(String::as_str) {
        Some(KEY) => {}
        Some(_) => {
            return json_reply(
                StatusCode::BAD_REQUEST,
                json!({ "error": {
                    "code": 400,
                    "message": "API key not valid. Please pass a valid API key.",
                    "status": "INVALID_ARGUMENT",
                    "details": [{
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                        "domain": "googleapis.com",
                        "metadata": { "service": "generativelanguage.googleapis.com" },
                    }],
                } }),
            );
        }
        None => {
            let message = "Method doesn't allow unregistered callers (callers without established identity). \
                           Please use API Key or other form of API consumer identity to call this API.";
            return google_error(StatusCode::FORBIDDEN, message, "PERMISSION_DENIED");
        }
    }
    let path = request.path.as_str();
    let host = &request.headers["host"];
    if let Some(model) = path.strip_prefix("/v1beta/models/").and_then(|rest| rest.strip_suffix(":predictLongRunning"))
    {
        if request.method != "POST" {
            return google_error(StatusCode::NOT_FOUND, "Method not found.", "NOT_FOUND");
        }
        if !["veo-3.0-generate-001", "veo-3.0-fast-generate-001"].contains(&model) {
            let message = format!(
                "models/{model} is not found for API version v1beta, or is not supported for predictLongRunning. \
                 Call ListModels to see the list of available models and their supported methods."
            );
            return google_error(StatusCode::NOT_FOUND, &message, "NOT_FOUND");
        }
        if let Err(refusal) = check_prediction(&request.body) {
            return refusal;
        }
        let operation = format!("models/{model}/operations/op{}", earlier + 1);
        return json_reply(StatusCode::OK, json!({ "name": operation }));
    }
    if let Some(operation) = path.strip_prefix("/v1beta/").filter(|rest| rest.contains("/operations/")) {
        let not_done = match mode {
            VeoMode::DoneAfter(n) => earlier < n,
            VeoMode::NeverDone => true,
            VeoMode::Fails | VeoMode::Filtered => false,
        };
        if not_done {
            // The API leaves `done` out while it is false; say it once to cover both.
            return match earlier {
                0 => json_reply(StatusCode::OK, json!({ "name": operation })),
                _ => json_reply(StatusCode::OK, json!({ "name": operation, "done": false })),
            };
        }
        let id = operation.rsplit('/').next().unwrap_or_default();
        let response_type = "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse";
        let done = match mode {
            VeoMode::Fails => {
                json!({ "name": operation, "done": true, "error": { "code": 3, "message": FAILED_OPERATION } })
            }
            VeoMode::Filtered => json!({ "name": operation, "done": true, "response": {
                "@type": response_type,
                "generateVideoResponse": {
                    "raiMediaFilteredCount": 1,
                    "raiMediaFilteredReasons": ["We can't create videos of people whose likeness is protected."],
                },
            } }),
            _ => json!({ "name": operation, "done": true, "response": {
                "@type": response_type,
                "generateVideoResponse": { "generatedSamples": [{
                    "video": { "uri": format!("http://{host}/v1beta/files/{id}:download?alt=media") },
                }] },
            } }),
        };
        return json_reply(StatusCode::OK, done);
    }
    if let Some(file) = path.strip_prefix("/v1beta/files/").and_then(|rest| rest.strip_suffix(":download?alt=media")) {
        let moved = http::Response::builder()
            .status(StatusCode::FOUND)
            .header(http::header::LOCATION, format!("{storage}/videos/{file}.mp4?signature=abc"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        return Answer::Reply(Box::new(moved));
    }
    google_error(StatusCode::NOT_FOUND, &format!("The requested URL {path} was not found."), "NOT_FOUND")
}

/// The fields of a Veo prediction the models accept.
fn check_prediction(body: &Value) -> Result<(), Answer> {
    let prompt = body.pointer("/instances/0/prompt").and_then(Value::as_str);
    if body["instances"].as_array().map(Vec::len) != Some(1) || prompt.is_none_or(str::is_empty) {
        return Err(google_invalid("* instances[0].prompt: a non-empty prompt is required\n".into()));
    }
    let parameters = &body["parameters"];
    let aspect = parameters["aspectRatio"].as_str().unwrap_or("null");
    if !["16:9", "9:16"].contains(&aspect) {
        return Err(google_invalid(format!("Unsupported aspect ratio: {aspect}. Supported values: 16:9, 9:16.")));
    }
    let resolution = parameters["resolution"].as_str().unwrap_or("null");
    if !["720p", "1080p"].contains(&resolution) {
        return Err(google_invalid(format!("Unsupported resolution: {resolution}. Supported values: 720p, 1080p.")));
    }
    if !parameters["durationSeconds"].as_u64().is_some_and(|seconds| [4, 6, 8].contains(&seconds)) {
        let given = &parameters["durationSeconds"];
        return Err(google_invalid(format!("Unsupported durationSeconds: {given}. Supported values: 4, 6, 8.")));
    }
    Ok(())
}

/// A Gemini API fake in `mode`, its storage (another origin) serving a small MP4, and it.
async fn gemini_fake(mode: VeoMode) -> (Fake, Fake, Vec<u8>) {
    let mp4 = small_mp4().await;
    let served = Bytes::from(mp4.clone());
    let storage = Fake::start(move |request, _| {
        if request.method == "GET" && request.path.starts_with("/videos/") {
            Answer::Reply(Box::new(reply(StatusCode::OK, "video/mp4", served.clone())))
        } else {
            Answer::Reply(Box::new(reply(StatusCode::NOT_FOUND, "text/plain", "not found")))
        }
    })
    .await;
    let storage_url = storage.url.clone();
    let api = Fake::start(move |request, earlier| gemini_answer(mode, &storage_url, request, earlier)).await;
    (api, storage, mp4)
}

fn veo(api: &Fake, key: &str) -> Veo {
    Veo::new(&format!("{}/v1beta", api.url), key).unwrap().with_poll(QUICK_POLLS)
}

fn clip(model: &str, resolution: &str, aspect_ratio: &str) -> VideoRequest {
    let (width, height) = shared::domain::generation::video_size(resolution, aspect_ratio);
    VideoRequest {
        prompt: "a paper boat on a stream".to_owned(),
        model: model.to_owned(),
        resolution: resolution.to_owned(),
        aspect_ratio: aspect_ratio.to_owned(),
        width,
        height,
        duration_s: 8,
    }
}

// ---------------------------------------------------------------------------------------
// Veo.

#[tokio::test]
async fn veo_video_is_downloaded_after_the_operation_is_done() {
    let (api, storage, mp4) = gemini_fake(VeoMode::DoneAfter(2)).await;
    let veo = veo(&api, KEY);
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("clip.mp4");
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    assert_eq!(veo.name(), "gemini-veo");
    veo.generate(&clip("veo-3", "1080p", "16:9"), &output, &stop).await.unwrap();

    assert_eq!(std::fs::read(&output).unwrap(), mp4);
    let probed = probe(&output).await;
    let codecs: Vec<&str> =
        probed["streams"].as_array().unwrap().iter().map(|s| s["codec_name"].as_str().unwrap()).collect();
    assert_eq!(codecs, ["h264", "aac"]);
    let operation = "/v1beta/models/veo-3.0-generate-001/operations/op1";
    assert_eq!(
        api.requests(),
        [
            "POST /v1beta/models/veo-3.0-generate-001:predictLongRunning".to_owned(),
            format!("GET {operation}"),
            format!("GET {operation}"),
            format!("GET {operation}"),
            "GET /v1beta/files/op1:download?alt=media".to_owned(),
        ]
    );
    let received = api.received();
    assert!(received.iter().all(|request| request.headers.get("x-goog-api-key").map(String::as_str) == Some(KEY)));
    assert_eq!(
        received[0].body,
        json!({
            "instances": [{ "prompt": "a paper boat on a stream" }],
            "parameters": { "aspectRatio": "16:9", "resolution": "1080p", "durationSeconds": 8 },
        })
    );
    assert_eq!(storage.requests(), ["GET /videos/op1.mp4?signature=abc"]);
    assert!(!storage.received()[0].headers.contains_key("x-goog-api-key"), "the key stays with the API's origin");
}

#[tokio::test]
async fn veo_3_fast_asks_for_the_fast_model_in_portrait() {
    let (api, _storage, mp4) = gemini_fake(VeoMode::DoneAfter(0)).await;
    let veo = veo(&api, KEY);
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("clip.mp4");
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    veo.generate(&clip("veo-3-fast", "720p", "9:16"), &output, &stop).await.unwrap();

    assert_eq!(std::fs::read(&output).unwrap(), mp4);
    let received = api.received();
    assert_eq!(received[0].path, "/v1beta/models/veo-3.0-fast-generate-001:predictLongRunning");
    assert_eq!(
        received[0].body["parameters"],
        json!({ "aspectRatio": "9:16", "resolution": "720p", "durationSeconds": 8 })
    );
}

#[tokio::test]
async fn veo_failed_operation_reaches_the_provider_error_with_its_message() {
    let (api, storage, _) = gemini_fake(VeoMode::Fails).await;
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("clip.mp4");
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    let outcome = veo(&api, KEY).generate(&clip("veo-3", "1080p", "16:9"), &output, &stop).await;

    assert_eq!(provider_message(outcome, "gemini-veo"), FAILED_OPERATION);
    assert!(storage.received().is_empty() && !output.exists());
}

#[tokio::test]
async fn veo_filtered_video_is_a_provider_error_with_the_filters_reasons() {
    let (api, _storage, _) = gemini_fake(VeoMode::Filtered).await;
    let folder = tempfile::tempdir().unwrap();
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    let outcome = veo(&api, KEY).generate(&clip("veo-3", "1080p", "16:9"), &folder.path().join("c.mp4"), &stop).await;

    assert_eq!(
        provider_message(outcome, "gemini-veo"),
        "the video was filtered out: We can't create videos of people whose likeness is protected."
    );
}

#[tokio::test]
async fn veo_refused_parameters_reach_the_provider_error_with_googles_message() {
    let (api, _storage, _) = gemini_fake(VeoMode::DoneAfter(0)).await;
    let folder = tempfile::tempdir().unwrap();
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    let outcome = veo(&api, KEY).generate(&clip("veo-3", "4k", "1:1"), &folder.path().join("c.mp4"), &stop).await;

    assert_eq!(
        provider_message(outcome, "gemini-veo"),
        "400 Bad Request: Unsupported aspect ratio: 1:1. Supported values: 16:9, 9:16."
    );
    assert_eq!(api.received().len(), 1, "a refusal is not retried");
    assert_eq!(api.received()[0].body["parameters"]["resolution"], "4k", "sent as given");
}

#[tokio::test]
async fn veo_wrong_key_gets_googles_message() {
    let (api, _storage, _) = gemini_fake(VeoMode::DoneAfter(0)).await;
    let folder = tempfile::tempdir().unwrap();
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    let veo = veo(&api, "AIza-not-the-key");
    let outcome = veo.generate(&clip("veo-3", "1080p", "16:9"), &folder.path().join("c.mp4"), &stop).await;

    // Google refuses a key it does not know with 400 INVALID_ARGUMENT, not 401.
    assert_eq!(
        provider_message(outcome, "gemini-veo"),
        "400 Bad Request: API key not valid. Please pass a valid API key."
    );
}

#[tokio::test]
async fn veo_operation_never_done_times_out_at_the_deadline() {
    let (api, _storage, _) = gemini_fake(VeoMode::NeverDone).await;
    let folder = tempfile::tempdir().unwrap();
    let (_cancel, stop) = stop_after(Duration::from_secs(2));
    let started = Instant::now();

    let outcome = veo(&api, KEY).generate(&clip("veo-3", "1080p", "16:9"), &folder.path().join("c.mp4"), &stop).await;

    let took = started.elapsed();
    assert!(
        matches!(&outcome, Err(GenerationError::TimedOut { provider, .. }) if provider == "gemini-veo"),
        "{outcome:?}"
    );
    assert!(took >= Duration::from_millis(1900) && took < Duration::from_millis(2500), "{took:?}");
    assert!(api.received().len() > 10, "polled all along: {} requests", api.received().len());
}

#[tokio::test]
async fn veo_cancel_while_polling_is_cancelled() {
    let (api, _storage, _) = gemini_fake(VeoMode::NeverDone).await;
    let veo = veo(&api, KEY);
    let folder = tempfile::tempdir().unwrap();
    let (cancel, stop) = stop_after(Duration::from_secs(20));
    let request = clip("veo-3", "1080p", "16:9");
    let output = folder.path().join("c.mp4");

    let generation = veo.generate(&request, &output, &stop);
    let canceller = async {
        while api.received().len() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.send(true).unwrap();
        Instant::now()
    };
    let (outcome, cancelled_at) = tokio::join!(generation, canceller);

    assert!(matches!(outcome, Err(GenerationError::Cancelled)), "{outcome:?}");
    assert!(cancelled_at.elapsed() < Duration::from_millis(300));
    let polls = api.received().len();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(api.received().len(), polls, "no poll after the cancel");
}

#[tokio::test]
async fn veo_unknown_model_is_refused_without_a_call() {
    let (api, _storage, _) = gemini_fake(VeoMode::DoneAfter(0)).await;
    let folder = tempfile::tempdir().unwrap();
    let (_cancel, stop) = stop_after(Duration::from_secs(20));

    let outcome =
        veo(&api, KEY).generate(&clip("kling-2.1", "1080p", "16:9"), &folder.path().join("c.mp4"), &stop).await;

    assert_eq!(provider_message(outcome, "gemini-veo"), "no Veo model is named \"kling-2.1\"");
    assert!(api.received().is_empty());
}

/// A deployment's providers read their key from its Secrets Manager secret (moto here)
/// when first used: the fake OpenAI sees that key. A secret without the key fails the
/// generation saying what is missing, and nothing reaches the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_kept_in_secrets_manager_is_read_when_the_provider_is_first_used() {
    use shared::adapters::secrets::SecretsManager;
    use shared::config::{GenerationSettings, ProviderAccess, ProviderChoice, ProviderKey};
    assert!(
        std::env::var("AWS_ENDPOINT_URL_SECRETS_MANAGER").is_ok(),
        "AWS_ENDPOINT_URL_SECRETS_MANAGER is not set: run the tests with ./scripts/test.sh"
    );
    let aws = shared::adapters::aws_env::load_defaults().await;
    let client = aws_sdk_secretsmanager::Client::new(&aws);
    let create = |name: String, text: String| {
        let client = client.clone();
        async move {
            let created = client.create_secret().name(name).secret_string(text).send().await.unwrap();
            created.arn().unwrap().to_owned()
        }
    };
    let suffix = uuid::Uuid::new_v4();
    let keys = create(format!("provider-keys-{suffix}"), json!({ "OPENAI_API_KEY": KEY }).to_string()).await;
    let empty = create(format!("no-keys-{suffix}"), "{}".to_owned()).await;

    let (fake, png, _) = openai_fake(OpenAiMode::Serve).await;
    let settings = |secret: String| GenerationSettings {
        image: ProviderChoice::OpenAi,
        openai: Some(ProviderAccess {
            base_url: format!("{}/v1", fake.url),
            key: ProviderKey::Secret { secret, field: "OPENAI_API_KEY" },
        }),
        ..GenerationSettings::default()
    };
    let folder = tempfile::tempdir().unwrap();
    let output = folder.path().join("image.png");
    let (_cancel, stop) = stop_after(Duration::from_secs(20));
    let secrets = Some(SecretsManager::from_config(&aws));

    let generators = shared::adapters::providers::generators(&settings(keys), Path::new("ffmpeg"), secrets.clone());
    let image = generators.of::<ImageRequest>().unwrap();
    assert_eq!(image.name(), "openai");
    image.generate(&square_image("kept key"), &output, &stop).await.unwrap();
    assert_eq!(std::fs::read(&output).unwrap(), png);
    assert_eq!(fake.received()[0].headers["authorization"], format!("Bearer {KEY}"));

    let without = shared::adapters::providers::generators(&settings(empty), Path::new("ffmpeg"), secrets);
    let refused =
        without.of::<ImageRequest>().unwrap().generate(&square_image("no key"), &output, &stop).await.unwrap_err();
    let message = refused.to_string();
    assert!(matches!(refused, GenerationError::Unavailable(_)), "{message}");
    assert!(message.contains("has no OPENAI_API_KEY"), "{message}");
    assert_eq!(fake.requests().len(), 1, "nothing reached the provider without a key");
}

/// Through the engine: a run whose Image Generation uses the OpenAI adapter delivers the
/// picture the provider made; a provider's refusal fails the node with the provider's
/// message in the run's `errors`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_delivers_what_the_configured_provider_made_and_fails_with_its_message() {
    use shared::config::{GenerationSettings, ProviderAccess, ProviderChoice, ProviderKey, Settings};
    use shared::domain::nodes::{DESTINATION, IMAGE_GENERATION};

    let (fake, png, _) = openai_fake(OpenAiMode::Serve).await;
    for (key, works) in [(KEY, true), ("sk-wrong-key-000000", false)] {
        let generation = GenerationSettings {
            image: ProviderChoice::OpenAi,
            openai: Some(ProviderAccess { base_url: format!("{}/v1", fake.url), key: ProviderKey::Value(key.into()) }),
            ..GenerationSettings::default()
        };
        let harness = crate::runs::Harness::tuned(crate::helpers::Backend::Sqlite, |settings| Settings {
            generation: generation.clone(),
            ..settings
        })
        .await;
        let (agent, ids) = harness
            .agent(
                &[("image", IMAGE_GENERATION, json!({"prompt": "a red square"})), ("out", DESTINATION, json!({}))],
                &[("image", "out")],
            )
            .await;
        let run = harness.start(&agent, json!({})).await;
        let record = harness.finished(&run).await;
        if works {
            assert_eq!(record["status"], "completed", "{record}");
            let output = &record["outputs"][0];
            let (bytes, content_type) = crate::generation::fetch(output["video_url"].as_str().unwrap()).await;
            assert_eq!((bytes, content_type.as_str()), (png.clone(), "image/png"));
            assert_eq!(output["sources"][0]["provider"], "openai");
        } else {
            assert_eq!(record["status"], "failed", "{record}");
            assert_eq!(record["errors"][0]["original_node_id"], ids["image"].as_str());
            let message = record["errors"][0]["messages"][0].as_str().unwrap();
            assert!(message.starts_with("openai: 401 Unauthorized: Incorrect API key provided"), "{message}");
        }
    }
}
