//! Veo through the Gemini API: a video is a long-running operation
//! (`models/{model}:predictLongRunning`), polled until done, whose video is then
//! downloaded. The key goes only to the API's own origin: a download that redirects to
//! storage elsewhere is fetched there without it.

use std::path::Path;

use async_trait::async_trait;
use reqwest::header::{HeaderValue, CONTENT_TYPE, LOCATION};
use serde_json::{json, Value};

use super::openai::{
    api_base_url, json_of, non_empty_key, provider_client, provider_error, read_body, secret_header, send,
    send_answering, stream_to_file, within_stop,
};
use crate::core::retry::RetryPolicy;
use crate::core::retry::PROVIDER_POLL;
use crate::core::ssrf::resolve_allowed;
use crate::domain::generation::{GenerationError, Generator, Stop, VideoRequest};

/// The API's address when none is configured.
pub const DEFAULT_BASE_URL: &str = crate::config::GEMINI_BASE_URL;

const PROVIDER: &str = "gemini-veo";
const API_KEY_HEADER: &str = "x-goog-api-key";

/// Largest operation answer read (a name and a video URI).
const MAX_OPERATION_BYTES: u64 = 1024 * 1024;

/// Largest video written: an 8 s 1080p clip is tens of MB.
const MAX_VIDEO_BYTES: u64 = 512 * 1024 * 1024;

/// Redirects of a video download followed at most.
const MAX_REDIRECTS: usize = 5;

/// Veo video generation through the Gemini API.
pub struct Veo {
    base_url: String,
    /// The `x-goog-api-key` value, marked sensitive.
    api_key: HeaderValue,
    client: reqwest::Client,
    /// When the operation is polled.
    poll: RetryPolicy,
}

impl Veo {
    /// A client of the API at `base_url` ([`DEFAULT_BASE_URL`] when empty) with `api_key`,
    /// polling on [`PROVIDER_POLL`].
    pub fn new(base_url: &str, api_key: &str) -> anyhow::Result<Self> {
        let base_url = api_base_url(base_url, DEFAULT_BASE_URL)?;
        let api_key = secret_header(non_empty_key(api_key)?)?;
        Ok(Self { base_url, api_key, client: provider_client()?, poll: PROVIDER_POLL })
    }

    /// The same adapter polling operations on `policy` (its delays and attempts).
    pub fn with_poll(self, policy: RetryPolicy) -> Self {
        Self { poll: policy, ..self }
    }

    /// Starts the operation making `request` with `model`; answers its name.
    async fn start(&self, model: &str, request: &VideoRequest) -> Result<String, GenerationError> {
        let url = format!("{}/models/{model}:predictLongRunning", self.base_url);
        let body = json!({
            "instances": [{ "prompt": request.prompt }],
            "parameters": {
                "aspectRatio": request.aspect_ratio,
                "resolution": request.resolution,
                "durationSeconds": request.duration_s,
            },
        })
        .to_string();
        let response = send(PROVIDER, || {
            self.client
                .post(&url)
                .header(API_KEY_HEADER, self.api_key.clone())
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone())
        })
        .await?;
        let operation = json_of(PROVIDER, &read_body(PROVIDER, response, MAX_OPERATION_BYTES).await?)?;
        let name = operation
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| provider_error(PROVIDER, "the started operation has no name"))?;
        operation_path(name).map(str::to_owned)
    }

    /// Polls the operation `name` until it is done; answers it.
    async fn wait(&self, name: &str) -> Result<Value, GenerationError> {
        let url = format!("{}/{name}", self.base_url);
        let started = tokio::time::Instant::now();
        for failed in 1..=self.poll.max_attempts {
            tokio::time::sleep(self.poll.delay(failed)).await;
            let response =
                send(PROVIDER, || self.client.get(&url).header(API_KEY_HEADER, self.api_key.clone())).await?;
            let operation = json_of(PROVIDER, &read_body(PROVIDER, response, MAX_OPERATION_BYTES).await?)?;
            if operation.get("done").and_then(Value::as_bool) == Some(true) {
                return Ok(operation);
            }
        }
        Err(GenerationError::TimedOut { provider: PROVIDER.to_owned(), limit: started.elapsed() })
    }

    /// Downloads the video at `uri` to `output`, following redirects by hand so that the
    /// key is sent to the API's origin only.
    async fn download(&self, uri: &str, output: &Path) -> Result<(), GenerationError> {
        let api_origin = url::Url::parse(&self.base_url).map(|base| base.origin()).ok();
        let mut current = url::Url::parse(uri)
            .map_err(|error| provider_error(PROVIDER, format!("the video URI {uri:?} is not a URL: {error}")))?;
        for _ in 0..=MAX_REDIRECTS {
            if !matches!(current.scheme(), "http" | "https") {
                return Err(provider_error(PROVIDER, format!("the video URI {current} is not http(s)")));
            }
            let with_key = api_origin.as_ref() == Some(&current.origin());
            // Off the API's origin the provider names the host: public HTTPS only, unless
            // the API itself is a plain-HTTP server of this machine's network (a local
            // compatible server, the tests').
            let local_api = self.base_url.starts_with("http://");
            if !with_key && !local_api {
                if current.scheme() != "https" {
                    return Err(provider_error(PROVIDER, "the video download is not https".to_owned()));
                }
                if let Err(refused) = resolve_allowed(&current, false).await {
                    return Err(provider_error(PROVIDER, format!("the video download is refused: {refused}")));
                }
            }
            let response = send_answering(
                PROVIDER,
                || {
                    let get = self.client.get(current.clone());
                    if with_key {
                        get.header(API_KEY_HEADER, self.api_key.clone())
                    } else {
                        get
                    }
                },
                true,
            )
            .await?;
            let status = response.status();
            if !status.is_redirection() {
                return stream_to_file(PROVIDER, response, output, MAX_VIDEO_BYTES).await.map(|_| ());
            }
            let location = response.headers().get(LOCATION).and_then(|value| value.to_str().ok()).ok_or_else(|| {
                provider_error(PROVIDER, format!("the video download answered {status} without a Location"))
            })?;
            current = current
                .join(location)
                .map_err(|error| provider_error(PROVIDER, format!("the video download redirects badly: {error}")))?;
        }
        Err(provider_error(PROVIDER, format!("the video download redirects more than {MAX_REDIRECTS} times")))
    }
}

#[async_trait]
impl Generator<VideoRequest> for Veo {
    fn name(&self) -> &str {
        PROVIDER
    }

    async fn generate(&self, request: &VideoRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        let model = model_id(&request.model)
            .ok_or_else(|| provider_error(PROVIDER, format!("no Veo model is named {:?}", request.model)))?;
        within_stop(PROVIDER, stop, async {
            let name = self.start(model, request).await?;
            let operation = self.wait(&name).await?;
            let uri = video_uri(&operation)?;
            self.download(uri, output).await
        })
        .await
    }
}

/// The Gemini API's model of a tile's Veo model.
fn model_id(model: &str) -> Option<&'static str> {
    match model {
        "veo-3" => Some("veo-3.0-generate-001"),
        "veo-3-fast" => Some("veo-3.0-fast-generate-001"),
        _ => None,
    }
}

/// An operation's name, checked to be a path under the API (`models/.../operations/...`)
/// before it is put in a URL.
fn operation_path(name: &str) -> Result<&str, GenerationError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.');
    let valid = !name.is_empty()
        && name.chars().all(allowed)
        && name.split('/').all(|segment| !segment.is_empty() && segment != "." && segment != "..");
    if valid {
        Ok(name)
    } else {
        Err(provider_error(PROVIDER, format!("the operation's name {name:?} is not a resource path")))
    }
}

/// The video of a done operation, or its error: the provider's message, its filter's
/// reasons, or what the answer lacks.
fn video_uri(operation: &Value) -> Result<&str, GenerationError> {
    if let Some(error) = operation.get("error") {
        let message = error.get("message").and_then(Value::as_str).unwrap_or("the operation failed without a message");
        return Err(provider_error(PROVIDER, message));
    }
    let missing = |what: &str| provider_error(PROVIDER, format!("the done operation has no {what}"));
    let answer = operation
        .pointer("/response/generateVideoResponse")
        .ok_or_else(|| missing("response.generateVideoResponse"))?;
    let Some(sample) = answer.pointer("/generatedSamples/0") else {
        let reasons: Vec<&str> = answer
            .get("raiMediaFilteredReasons")
            .and_then(Value::as_array)
            .map(|reasons| reasons.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !reasons.is_empty() {
            return Err(provider_error(PROVIDER, format!("the video was filtered out: {}", reasons.join(" "))));
        }
        return Err(missing("response.generateVideoResponse.generatedSamples[0]"));
    };
    sample
        .pointer("/video/uri")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("response.generateVideoResponse.generatedSamples[0].video.uri"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(error: GenerationError) -> String {
        match error {
            GenerationError::Provider { message, .. } => message,
            other => panic!("not a provider error: {other:?}"),
        }
    }

    #[test]
    fn operation_names_are_paths_under_the_api() {
        assert!(operation_path("models/veo-3.0-generate-001/operations/abc_1").is_ok());
        for name in ["", "/models/x", "models/../../x", "https://elsewhere/x", "models/x?y", "models//x"] {
            assert!(operation_path(name).is_err(), "{name}");
        }
    }

    #[test]
    fn a_done_operation_answers_its_video_or_says_what_is_missing() {
        let done = json!({ "done": true, "response": { "generateVideoResponse": {
            "generatedSamples": [{ "video": { "uri": "https://host/files/a:download?alt=media" } }] } } });
        assert_eq!(video_uri(&done).unwrap(), "https://host/files/a:download?alt=media");
        let failed = json!({ "done": true, "error": { "code": 3, "message": "unsafe prompt" } });
        assert_eq!(message(video_uri(&failed).unwrap_err()), "unsafe prompt");
        let filtered = json!({ "done": true, "response": { "generateVideoResponse": {
            "raiMediaFilteredCount": 1, "raiMediaFilteredReasons": ["Celebrity likeness."] } } });
        assert_eq!(message(video_uri(&filtered).unwrap_err()), "the video was filtered out: Celebrity likeness.");
        let no_uri = json!({ "done": true, "response": { "generateVideoResponse": {
            "generatedSamples": [{ "video": {} }] } } });
        assert!(message(video_uri(&no_uri).unwrap_err()).contains("generatedSamples[0].video.uri"));
        assert!(message(video_uri(&json!({ "done": true })).unwrap_err()).contains("response.generateVideoResponse"));
    }
}
