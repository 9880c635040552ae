//! OpenAI's HTTP API as a generation provider: images from `gpt-image-1` (the PNG comes
//! back base64 inside JSON) and speech from `gpt-4o-mini-tts` (the WAV is the body).
//!
//! The calls' plumbing is here too and the Gemini adapter uses it: both providers answer
//! errors as `{"error": {"message", ...}}`, both are retried on 429 and 5xx, and both
//! run under the task's [`Stop`].

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use base64::Engine;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::core::retry::with_deadline;
use crate::domain::generation::{GenerationError, Generator, ImageRequest, SpeechRequest, Stop};
use crate::domain::media::until_cancelled;

/// The API's address when none is configured (as the SDKs' `OPENAI_BASE_URL`).
pub const DEFAULT_BASE_URL: &str = crate::config::OPENAI_BASE_URL;

const PROVIDER: &str = "openai";
const IMAGE_MODEL: &str = "gpt-image-1";
const SPEECH_MODEL: &str = "gpt-4o-mini-tts";
const VOICE: &str = "alloy";

/// Largest image answer read: the PNG, base64 inside JSON, is a few MB at most.
const MAX_IMAGE_ANSWER_BYTES: u64 = 64 * 1024 * 1024;

/// Largest speech written: a WAV of the longest input (4,096 characters) is far smaller.
const MAX_SPEECH_BYTES: u64 = 512 * 1024 * 1024;

/// The first bytes of every PNG file.
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Longest wait for a connection to a provider.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Most of an error answer read for its message.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Characters of an error answer quoted when it is not the provider's error shape.
const ERROR_EXCERPT_CHARS: usize = 300;

/// OpenAI's image and speech generation.
pub struct OpenAi {
    base_url: String,
    /// `Bearer <key>`, marked sensitive.
    api_key: HeaderValue,
    client: reqwest::Client,
}

impl OpenAi {
    /// A client of the API at `base_url` ([`DEFAULT_BASE_URL`] when empty) with `api_key`.
    pub fn new(base_url: &str, api_key: &str) -> anyhow::Result<Self> {
        let base_url = api_base_url(base_url, DEFAULT_BASE_URL)?;
        let api_key = secret_header(&format!("Bearer {}", non_empty_key(api_key)?))?;
        Ok(Self { base_url, api_key, client: provider_client()? })
    }

    /// Sends a JSON `body` to `path` of the API, with the key, answering the 2xx response.
    async fn post(&self, path: &str, body: &Value) -> Result<reqwest::Response, GenerationError> {
        let url = format!("{}/{path}", self.base_url);
        let body = body.to_string();
        send(PROVIDER, || {
            self.client
                .post(&url)
                .header(AUTHORIZATION, self.api_key.clone())
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone())
        })
        .await
    }
}

#[async_trait]
impl Generator<ImageRequest> for OpenAi {
    fn name(&self) -> &str {
        PROVIDER
    }

    async fn generate(&self, request: &ImageRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        let body = json!({
            "model": IMAGE_MODEL,
            "prompt": request.prompt,
            "size": format!("{}x{}", request.width, request.height),
            "quality": request.quality,
            "n": 1,
            "output_format": "png",
        });
        within_stop(PROVIDER, stop, async {
            let response = self.post("images/generations", &body).await?;
            let answer = read_body(PROVIDER, response, MAX_IMAGE_ANSWER_BYTES).await?;
            let png = png_of(&answer)?;
            tokio::fs::write(output, png)
                .await
                .with_context(|| format!("writing the image to {}", output.display()))
                .map_err(GenerationError::Unavailable)
        })
        .await
    }
}

#[async_trait]
impl Generator<SpeechRequest> for OpenAi {
    fn name(&self) -> &str {
        PROVIDER
    }

    async fn generate(&self, request: &SpeechRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        let body = json!({
            "model": SPEECH_MODEL,
            "input": request.text,
            "voice": VOICE,
            "response_format": "wav",
        });
        within_stop(PROVIDER, stop, async {
            let response = self.post("audio/speech", &body).await?;
            stream_to_file(PROVIDER, response, output, MAX_SPEECH_BYTES).await.map(|_| ())
        })
        .await
    }
}

/// The PNG in an image answer, `{"data": [{"b64_json": "..."}]}`.
fn png_of(answer: &[u8]) -> Result<Vec<u8>, GenerationError> {
    let answer = json_of(PROVIDER, answer)?;
    let encoded = answer
        .pointer("/data/0/b64_json")
        .and_then(Value::as_str)
        .ok_or_else(|| provider_error(PROVIDER, "the answer has no data[0].b64_json"))?;
    let png = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|error| provider_error(PROVIDER, format!("data[0].b64_json is not base64: {error}")))?;
    if !png.starts_with(PNG_SIGNATURE) {
        return Err(provider_error(PROVIDER, "data[0].b64_json is not a PNG"));
    }
    Ok(png)
}

/// Runs `work`, one generation, under `stop`: [`GenerationError::Cancelled`] as soon as
/// the run is cancelled, [`GenerationError::TimedOut`] at the deadline; the retries
/// inside give up rather than sleep past it.
pub(crate) async fn within_stop<T>(
    provider: &str,
    stop: &Stop,
    work: impl Future<Output = Result<T, GenerationError>>,
) -> Result<T, GenerationError> {
    let limit = stop.remaining();
    let work = with_deadline(stop.deadline.into_std(), work);
    tokio::select! {
        biased;
        () = until_cancelled(stop.cancelled.clone()) => Err(GenerationError::Cancelled),
        finished = tokio::time::timeout_at(stop.deadline, work) => {
            finished.unwrap_or_else(|_| Err(GenerationError::TimedOut { provider: provider.to_owned(), limit }))
        }
    }
}

/// Sends the request `build` makes, again after a 429 or 5xx answer (on the
/// [`PROVIDER_CALLS`](crate::core::retry::PROVIDER_CALLS) schedule), and answers the response once it is a 2xx or 3xx (a
/// 3xx only reaches a client that follows no redirects); any other answer, or the last
/// overloaded one, is the provider's error with its message.
pub(crate) async fn send(
    provider: &str,
    build: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, GenerationError> {
    send_answering(provider, build, false).await
}

/// As [`send`], a redirect answered as it is (a download follows it by hand); [`send`]
/// takes one as a refusal (an API call is never redirected).
pub(crate) async fn send_answering(
    provider: &str,
    build: impl Fn() -> reqwest::RequestBuilder,
    redirects: bool,
) -> Result<reqwest::Response, GenerationError> {
    let mut retry = crate::core::retry::PROVIDER_CALLS.start();
    loop {
        let response = build().send().await.map_err(|error| unavailable(provider, error))?;
        let status = response.status();
        if status.is_success() || (redirects && status.is_redirection()) {
            return Ok(response);
        }
        let message = refusal_message(status, &error_body(response).await);
        let overloaded = status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
        if !overloaded {
            return Err(provider_error(provider, message));
        }
        tracing::warn!(provider, %status, attempt = retry.attempts(), "the generation provider is overloaded");
        if retry.wait(&message).await.is_err() {
            return Err(provider_error(provider, message));
        }
    }
}

/// The message of a refusal: the status, then the provider's `error.message`, else the
/// start of the body.
fn refusal_message(status: StatusCode, body: &[u8]) -> String {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|body| body.pointer("/error/message").and_then(Value::as_str).map(str::to_owned));
    let detail =
        message.unwrap_or_else(|| String::from_utf8_lossy(body).trim().chars().take(ERROR_EXCERPT_CHARS).collect());
    if detail.is_empty() {
        status.to_string()
    } else {
        format!("{status}: {detail}")
    }
}

/// The start of an error answer's body, as much as arrives.
async fn error_body(mut response: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body
}

/// An answer's whole body, refused past `max_bytes`.
pub(crate) async fn read_body(
    provider: &str,
    mut response: reqwest::Response,
    max_bytes: u64,
) -> Result<Vec<u8>, GenerationError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|error| unavailable(provider, error))? {
        if (body.len() + chunk.len()) as u64 > max_bytes {
            return Err(provider_error(provider, format!("the answer is larger than {max_bytes} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A JSON answer, parsed.
pub(crate) fn json_of(provider: &str, body: &[u8]) -> Result<Value, GenerationError> {
    serde_json::from_slice(body).map_err(|error| provider_error(provider, format!("the answer is not JSON: {error}")))
}

/// Writes an answer's body to `output` as it arrives, refusing an empty one or one past
/// `max_bytes`; answers the bytes written.
pub(crate) async fn stream_to_file(
    provider: &str,
    mut response: reqwest::Response,
    output: &Path,
    max_bytes: u64,
) -> Result<u64, GenerationError> {
    let local = |error: std::io::Error| {
        GenerationError::Unavailable(anyhow::Error::new(error).context(format!("writing {}", output.display())))
    };
    let mut file = tokio::fs::File::create(output).await.map_err(local)?;
    let mut written: u64 = 0;
    while let Some(chunk) = response.chunk().await.map_err(|error| unavailable(provider, error))? {
        written += chunk.len() as u64;
        if written > max_bytes {
            return Err(provider_error(provider, format!("the file is larger than {max_bytes} bytes")));
        }
        file.write_all(&chunk).await.map_err(local)?;
    }
    file.flush().await.map_err(local)?;
    if written == 0 {
        return Err(provider_error(provider, "the answer is an empty file"));
    }
    Ok(written)
}

/// The provider refused or failed, saying `message`.
pub(crate) fn provider_error(provider: &str, message: impl Into<String>) -> GenerationError {
    GenerationError::Provider { provider: provider.to_owned(), message: message.into() }
}

/// The provider could not be reached, or the connection broke.
fn unavailable(provider: &str, error: reqwest::Error) -> GenerationError {
    GenerationError::Unavailable(anyhow::Error::new(error).context(format!("calling {provider}")))
}

/// The client of a provider's API: redirects are left to the caller, who decides where
/// the key goes.
pub(crate) fn provider_client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .context("building the generation provider's HTTP client")
}

/// An API's base URL without its trailing slash, `default` when `text` is empty.
pub(crate) fn api_base_url(text: &str, default: &str) -> anyhow::Result<String> {
    let text = match text.trim() {
        "" => default,
        text => text,
    };
    let url = url::Url::parse(text).with_context(|| format!("the API base URL {text:?} is not a URL"))?;
    anyhow::ensure!(matches!(url.scheme(), "http" | "https"), "the API base URL {text:?} is not http(s)");
    anyhow::ensure!(
        url.query().is_none() && url.fragment().is_none(),
        "the API base URL {text:?} has a query or fragment"
    );
    Ok(text.trim_end_matches('/').to_owned())
}

/// An API key, refused when empty.
pub(crate) fn non_empty_key(api_key: &str) -> anyhow::Result<&str> {
    let api_key = api_key.trim();
    anyhow::ensure!(!api_key.is_empty(), "the API key is empty");
    Ok(api_key)
}

/// A header carrying a secret, kept out of debug output.
pub(crate) fn secret_header(value: &str) -> anyhow::Result<HeaderValue> {
    let mut header = HeaderValue::from_str(value).context("the API key is not a valid header value")?;
    header.set_sensitive(true);
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_the_status_and_the_providers_message_or_the_start_of_the_body() {
        let shaped = br#"{"error": {"message": "Invalid size", "type": "invalid_request_error", "param": "size"}}"#;
        assert_eq!(refusal_message(StatusCode::BAD_REQUEST, shaped), "400 Bad Request: Invalid size");
        let page = format!("<html>{}</html>", "x".repeat(1000));
        let message = refusal_message(StatusCode::BAD_GATEWAY, page.as_bytes());
        assert_eq!(message, format!("502 Bad Gateway: {}", &page[..300]));
        assert_eq!(refusal_message(StatusCode::SERVICE_UNAVAILABLE, b""), "503 Service Unavailable");
    }

    #[test]
    fn base_urls_tolerate_a_trailing_slash_and_default_when_empty() {
        assert_eq!(api_base_url("http://127.0.0.1:9/v1/", DEFAULT_BASE_URL).unwrap(), "http://127.0.0.1:9/v1");
        assert_eq!(api_base_url("", DEFAULT_BASE_URL).unwrap(), DEFAULT_BASE_URL);
        assert!(api_base_url("ftp://host/v1", DEFAULT_BASE_URL).is_err());
        assert!(OpenAi::new("", " ").is_err(), "an empty key is refused");
    }

    #[test]
    fn an_image_answer_must_hold_a_png() {
        let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let png = [PNG_SIGNATURE, b"rest"].concat();
        let answer = json!({ "created": 1, "data": [{ "b64_json": encode(&png) }] }).to_string();
        assert_eq!(png_of(answer.as_bytes()).unwrap(), png);
        let jpeg = json!({ "data": [{ "b64_json": encode(b"\xff\xd8\xff\xe0") }] }).to_string();
        assert!(matches!(png_of(jpeg.as_bytes()), Err(GenerationError::Provider { .. })));
        assert!(matches!(png_of(br#"{"data": []}"#), Err(GenerationError::Provider { .. })));
    }
}
