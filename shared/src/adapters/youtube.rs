//! YouTube as a publisher, from the Data API v3's published formats: `videos.insert`
//! with the resumable upload protocol — a POST of the video's metadata to
//! `{base}/upload/youtube/v3/videos?uploadType=resumable&part=snippet,status` with
//! `X-Upload-Content-Length` and `X-Upload-Content-Type`, answered with the upload
//! session's `Location`; then the bytes PUT there in chunks of [`CHUNK_BYTES`] with
//! `Content-Range` (308 `Resume Incomplete` between chunks, 200 or 201 with the video
//! resource at the end). A video YouTube is still processing (`uploadStatus: uploaded`)
//! is accepted; `status` asks `videos.list?part=status&id=…` where it is.
//!
//! The OAuth access token is the connection's credentials (`access_token`), read from
//! the vault. A connection that kept a `refresh_token` and the `client_id` and
//! `client_secret` of the OAuth client that issued it (older ones kept no client, and
//! their token is used as it is) has its access token refreshed
//! before an upload when it has run out or when its end is unknown ([`Publisher::refresh`]):
//! Google's token endpoint, a form POST of `grant_type=refresh_token`, `client_id`,
//! `client_secret`, `refresh_token`, answering `{access_token, expires_in, token_type}`
//! (kept with `expires_at`, our own field) or a 400 `{error: "invalid_grant", …}` for a
//! refresh token revoked or expired, which fails the destination saying to connect again. Error bodies `{error: {code, message, errors: [{reason, …}]}}` become the
//! destination's message; 401 and 403 are final (credentials or quota), 429 and 5xx are
//! tried again a few times. Exercised only against a local server that follows these
//! formats (`tests/tests/api/social.rs`).

use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, LOCATION};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::core::retry::PROVIDER_CALLS;
use crate::domain::social::publisher::{MediumFile, Published, Publisher, Refreshed};
use crate::domain::social::{SocialConnection, SocialPost};
use crate::domain::time::Timestamp;

/// Bytes sent per PUT of the upload (a multiple of 256 KiB, as the protocol asks).
pub const CHUNK_BYTES: usize = 8 * 1024 * 1024;
/// Longest wait for a connection or an answer.
const TIMEOUT: Duration = Duration::from_secs(120);
/// Chunks in a row of which YouTube may keep nothing before the upload is given up
/// (tried again later from the start).
const MAX_STALLS: u32 = 3;
/// An access token this close to its end is refreshed before an upload.
const EXPIRY_MARGIN: Duration = Duration::from_secs(120);
/// Longest title YouTube takes.
const MAX_TITLE_CHARS: usize = 100;

/// YouTube's Data API at `base_url`.
pub struct YoutubePublisher {
    base_url: String,
    /// Google's OAuth token endpoint.
    token_url: String,
    http: reqwest::Client,
    /// Bytes per PUT ([`CHUNK_BYTES`] unless a test asks for smaller chunks).
    chunk_bytes: usize,
}

/// What a call answered that the adapter does not go on with.
enum Refusal {
    /// Final: the destination fails with this message.
    Final(String),
    /// Transient or ours: tried again later.
    Again(anyhow::Error),
}

impl YoutubePublisher {
    pub fn new(base_url: &str) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .build()
            .unwrap_or_default();
        Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            token_url: crate::config::YOUTUBE_TOKEN_URL.to_owned(),
            http,
            chunk_bytes: CHUNK_BYTES,
        }
    }

    /// The same, refreshing access tokens at `token_url`.
    pub fn with_token_url(mut self, token_url: &str) -> Self {
        token_url.clone_into(&mut self.token_url);
        self
    }

    /// Asks the token endpoint for a new access token with the kept refresh token.
    async fn refresh_token(&self, fields: &Map<String, Value>, now: Timestamp) -> Result<Map<String, Value>, Refusal> {
        let field = |name: &str| fields.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
        let form = [
            ("grant_type", "refresh_token".to_owned()),
            ("client_id", field("client_id")),
            ("client_secret", field("client_secret")),
            ("refresh_token", field("refresh_token")),
        ];
        let mut retry = PROVIDER_CALLS.start();
        let answer = loop {
            let why = match self.http.post(&self.token_url).form(&form).send().await {
                Ok(answer) if answer.status().as_u16() == 429 || answer.status().is_server_error() => {
                    format!("refreshing the access token: Google answered {}", answer.status())
                }
                Ok(answer) => break answer,
                Err(error) => format!("refreshing the access token: Google could not be reached: {error}"),
            };
            if let Err(unavailable) = retry.wait(&why).await {
                return Err(Refusal::Again(anyhow::anyhow!("{why} ({unavailable})")));
            }
        };
        let status = answer.status();
        let text = answer.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() {
            // Google's OAuth errors: `{error, error_description}` (invalid_grant: the
            // refresh token was revoked or expired; invalid_client: the client is wrong).
            let error = body["error"].as_str().map_or_else(|| text.chars().take(200).collect(), str::to_owned);
            let description = body["error_description"].as_str().map(|text| format!(" ({text})")).unwrap_or_default();
            return Err(Refusal::Final(format!(
                "refreshing the YouTube access token: Google answered {status}: {error}{description}; connect the \
                 account again with a new token"
            )));
        }
        let Some(token) = body["access_token"].as_str().filter(|token| !token.is_empty()) else {
            return Err(Refusal::Again(anyhow::anyhow!("Google's token endpoint answered no access_token")));
        };
        let mut refreshed = fields.clone();
        refreshed.insert("access_token".into(), Value::from(token));
        if let Some(seconds) = body["expires_in"].as_u64() {
            let expires_at = now.after(Duration::from_secs(seconds));
            refreshed.insert("expires_at".into(), Value::from(expires_at.to_string()));
        } else {
            refreshed.remove("expires_at");
        }
        // Google may rotate the refresh token: keep the new one when it sends one.
        if let Some(rotated) = body["refresh_token"].as_str().filter(|token| !token.is_empty()) {
            refreshed.insert("refresh_token".into(), Value::from(rotated));
        }
        Ok(refreshed)
    }

    /// The same, sending `chunk_bytes` per PUT, rounded up to the protocol's 256 KiB.
    pub fn with_chunk_bytes(mut self, chunk_bytes: usize) -> Self {
        const QUANTUM: usize = 256 * 1024;
        self.chunk_bytes = chunk_bytes.div_ceil(QUANTUM).max(1) * QUANTUM;
        self
    }

    fn bearer(credentials: Option<&Map<String, Value>>) -> Result<HeaderValue, Refusal> {
        let token = credentials.and_then(|fields| fields.get("access_token")).and_then(Value::as_str);
        let token = token.ok_or_else(|| Refusal::Final("the connection has no YouTube access_token".into()))?;
        HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Refusal::Final("the connection's YouTube access_token is not a valid header value".into()))
    }

    /// Sends `request` (rebuilt by `make` per attempt), trying 429 and 5xx again a few
    /// times; a 4xx is final with YouTube's message.
    async fn send(&self, what: &str, make: impl Fn() -> reqwest::RequestBuilder) -> Result<reqwest::Response, Refusal> {
        let mut retry = PROVIDER_CALLS.start();
        loop {
            let why = match make().send().await {
                Ok(answer) if answer.status().is_success() || answer.status().as_u16() == 308 => return Ok(answer),
                Ok(answer) if answer.status().as_u16() == 429 || answer.status().is_server_error() => {
                    let status = answer.status();
                    format!("{what}: YouTube answered {status}: {}", error_message(answer).await)
                }
                Ok(answer) => {
                    let status = answer.status();
                    let message = error_message(answer).await;
                    let hint = match status.as_u16() {
                        401 => " (the access token was refused: connect the account again)",
                        _ => "",
                    };
                    return Err(Refusal::Final(format!("{what}: YouTube answered {status}: {message}{hint}")));
                }
                Err(error) => format!("{what}: YouTube could not be reached: {error}"),
            };
            if let Err(unavailable) = retry.wait(&why).await {
                return Err(Refusal::Again(anyhow::anyhow!("{why} ({unavailable})")));
            }
        }
    }

    async fn upload(
        &self,
        post: &SocialPost,
        credentials: Option<&Map<String, Value>>,
        media: &[MediumFile],
    ) -> Result<Published, Refusal> {
        let bearer = Self::bearer(credentials)?;
        let video = media
            .iter()
            .find(|medium| medium.content_type.starts_with("video/"))
            .ok_or_else(|| Refusal::Final("YouTube takes a video, and the post has none".into()))?;
        let metadata = json!({
            "snippet": {"title": title(&post.description), "description": post.description, "categoryId": "22"},
            "status": {"privacyStatus": "public", "selfDeclaredMadeForKids": false},
        });
        let session = self.start_session(&bearer, video, &metadata).await?;
        let mut file = tokio::fs::File::open(&video.path).await.map_err(|error| Refusal::Again(error.into()))?;
        let total = video.bytes;
        let mut sent: u64 = 0;
        let mut stalls = 0;
        let mut chunk = vec![0u8; self.chunk_bytes];
        // One PUT per chunk: the loop ends after ⌈total / chunk⌉ of them.
        loop {
            let filled = fill(&mut file, &mut chunk).await?;
            if filled == 0 && sent < total {
                return Err(Refusal::Again(anyhow::anyhow!("the video file ended after {sent} of {total} bytes")));
            }
            let end = sent + filled as u64;
            let range =
                if filled == 0 { format!("bytes */{total}") } else { format!("bytes {sent}-{}/{total}", end - 1) };
            let body = bytes::Bytes::copy_from_slice(&chunk[..filled]);
            let answer = self
                .send("uploading the video", || {
                    self.http
                        .put(&session)
                        .header(AUTHORIZATION, bearer.clone())
                        .header(CONTENT_TYPE, video.content_type.as_str())
                        .header(CONTENT_LENGTH, filled.to_string())
                        .header(CONTENT_RANGE, range.as_str())
                        .body(body.clone())
                })
                .await?;
            if answer.status().as_u16() == 308 {
                // `Range: bytes=0-{last}` is what YouTube kept (none: nothing); the next
                // PUT starts after it, so a chunk it lost is sent again.
                let kept = kept_bytes(&answer);
                if kept >= total || kept > end {
                    return Err(Refusal::Again(anyhow::anyhow!(
                        "YouTube's upload session says it kept {kept} of {total} bytes after {end} were sent"
                    )));
                }
                stalls = if kept <= sent { stalls + 1 } else { 0 };
                if stalls >= MAX_STALLS {
                    return Err(Refusal::Again(anyhow::anyhow!(
                        "YouTube kept nothing of {MAX_STALLS} chunks in a row at byte {sent} of {total}"
                    )));
                }
                if kept != end {
                    file.seek(std::io::SeekFrom::Start(kept)).await.map_err(|error| Refusal::Again(error.into()))?;
                }
                sent = kept;
                continue;
            }
            let resource = json_of(answer, "YouTube's video resource").await?;
            return Ok(published(&resource));
        }
    }

    /// Starts a resumable upload of `video` with its `metadata`: the session's URL.
    async fn start_session(
        &self,
        bearer: &HeaderValue,
        video: &MediumFile,
        metadata: &Value,
    ) -> Result<String, Refusal> {
        let start = format!("{}/upload/youtube/v3/videos?uploadType=resumable&part=snippet,status", self.base_url);
        let answer = self
            .send("starting the upload", || {
                self.http
                    .post(&start)
                    .header(AUTHORIZATION, bearer.clone())
                    .header(CONTENT_TYPE, "application/json; charset=UTF-8")
                    .header("X-Upload-Content-Length", video.bytes.to_string())
                    .header("X-Upload-Content-Type", video.content_type.as_str())
                    .body(metadata.to_string())
            })
            .await?;
        answer
            .headers()
            .get(LOCATION)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| Refusal::Again(anyhow::anyhow!("YouTube started an upload without a Location")))
    }

    async fn ask(&self, credentials: Option<&Map<String, Value>>, video: &str) -> Result<Published, Refusal> {
        let bearer = Self::bearer(credentials)?;
        let url = format!("{}/youtube/v3/videos", self.base_url);
        let answer = self
            .send("reading the video's status", || {
                self.http.get(&url).query(&[("part", "status"), ("id", video)]).header(AUTHORIZATION, bearer.clone())
            })
            .await?;
        let list = json_of(answer, "YouTube's video list").await?;
        match list["items"].as_array().and_then(|items| items.first()) {
            Some(resource) => Ok(published(resource)),
            None => Ok(Published::Failed(format!("video {video} is no longer on YouTube"))),
        }
    }
}

/// Fills `chunk` from `file` (less at its end): the bytes read.
async fn fill(file: &mut tokio::fs::File, chunk: &mut [u8]) -> Result<usize, Refusal> {
    let mut filled = 0;
    while filled < chunk.len() {
        let read = file.read(&mut chunk[filled..]).await.map_err(|error| Refusal::Again(error.into()))?;
        if read == 0 {
            break;
        }
        filled += read;
    }
    Ok(filled)
}

/// What a resumable upload's 308 says YouTube kept: `Range: bytes=0-{last}` (none:
/// nothing), as the number of bytes.
fn kept_bytes(answer: &reqwest::Response) -> u64 {
    answer
        .headers()
        .get("range")
        .and_then(|value| value.to_str().ok())
        .and_then(|range| range.strip_prefix("bytes=0-"))
        .and_then(|last| last.parse::<u64>().ok())
        .map_or(0, |last| last + 1)
}

/// A title from a description: its first line, at most 100 characters, without the
/// angle brackets YouTube refuses.
fn title(description: &str) -> String {
    let line = description.lines().find(|line| !line.trim().is_empty()).unwrap_or("Video");
    let cleaned: String = line.chars().filter(|c| *c != '<' && *c != '>').take(MAX_TITLE_CHARS).collect();
    if cleaned.trim().is_empty() {
        "Video".into()
    } else {
        cleaned.trim().to_owned()
    }
}

/// What a video resource says: processed (posted), still uploaded (accepted), or
/// failed / rejected with YouTube's reason.
fn published(resource: &Value) -> Published {
    let Some(id) = resource["id"].as_str() else {
        return Published::Failed("YouTube answered a video resource without an id".into());
    };
    let platform_post_id = id.to_owned();
    match resource["status"]["uploadStatus"].as_str() {
        Some("processed") => {
            Published::Posted { platform_post_id, post_url: format!("https://www.youtube.com/watch?v={id}") }
        }
        Some("failed") => Published::Failed(format!(
            "YouTube could not process the video: {}",
            resource["status"]["failureReason"].as_str().unwrap_or("no reason given")
        )),
        Some("rejected") => Published::Failed(format!(
            "YouTube rejected the video: {}",
            resource["status"]["rejectionReason"].as_str().unwrap_or("no reason given")
        )),
        Some("deleted") => Published::Failed(format!("video {id} was deleted from YouTube")),
        _ => Published::Accepted { platform_post_id },
    }
}

/// An answer's JSON body.
async fn json_of(answer: reqwest::Response, what: &str) -> Result<Value, Refusal> {
    let bytes =
        answer.bytes().await.map_err(|error| Refusal::Again(anyhow::anyhow!("{what} could not be read: {error}")))?;
    serde_json::from_slice(&bytes).map_err(|error| Refusal::Again(anyhow::anyhow!("{what} is not JSON: {error}")))
}

/// The message of an error body `{error: {code, message, errors: [{reason}]}}`, or the
/// start of whatever else was answered.
async fn error_message(answer: reqwest::Response) -> String {
    let text = answer.text().await.unwrap_or_default();
    match serde_json::from_str::<Value>(&text) {
        Ok(body) if body["error"].is_object() => {
            let error = &body["error"];
            let message = error["message"].as_str().unwrap_or("no message");
            match error["errors"]
                .as_array()
                .and_then(|errors| errors.first())
                .and_then(|first| first["reason"].as_str())
            {
                Some(reason) => format!("{message} ({reason})"),
                None => message.to_owned(),
            }
        }
        _ => text.chars().take(200).collect(),
    }
}

fn outcome(result: Result<Published, Refusal>) -> anyhow::Result<Published> {
    match result {
        Ok(published) => Ok(published),
        Err(Refusal::Final(message)) => Ok(Published::Failed(message)),
        Err(Refusal::Again(error)) => Err(error),
    }
}

#[async_trait]
impl Publisher for YoutubePublisher {
    async fn publish(
        &self,
        post: &SocialPost,
        _connection: &SocialConnection,
        credentials: Option<&Map<String, Value>>,
        media: &[MediumFile],
    ) -> anyhow::Result<Published> {
        outcome(self.upload(post, credentials, media).await)
    }

    async fn refresh(&self, credentials: Option<&Map<String, Value>>, now: Timestamp) -> anyhow::Result<Refreshed> {
        // Without the OAuth client (connections stored before it was kept) Google refuses
        // the refresh as `invalid_client`: the token is used as it is, and a 401 from the
        // upload still fails the destination.
        let refreshable = |fields: &&Map<String, Value>| {
            ["refresh_token", "client_id", "client_secret"]
                .iter()
                .all(|name| fields.get(*name).and_then(Value::as_str).is_some_and(|text| !text.is_empty()))
        };
        let Some(fields) = credentials.filter(refreshable) else {
            return Ok(Refreshed::Current);
        };
        // A token whose end is unknown (as given at connection) is refreshed too: one
        // call per upload at most, never a failed upload for a token already expired.
        let expires_at = fields.get("expires_at").and_then(Value::as_str).and_then(|text| Timestamp::parse(text).ok());
        if expires_at.is_some_and(|at| at > now.after(EXPIRY_MARGIN)) {
            return Ok(Refreshed::Current);
        }
        match self.refresh_token(fields, now).await {
            Ok(refreshed) => Ok(Refreshed::New(refreshed)),
            Err(Refusal::Final(message)) => Ok(Refreshed::Refused(message)),
            Err(Refusal::Again(error)) => Err(error),
        }
    }

    async fn status(
        &self,
        _post: &SocialPost,
        _connection: &SocialConnection,
        credentials: Option<&Map<String, Value>>,
        platform_post_id: &str,
    ) -> anyhow::Result<Published> {
        // A refused read (an expired token, a spent quota) says nothing of the video: the
        // post stays as stored. Only the video's own status fails it.
        match self.ask(credentials, platform_post_id).await {
            Ok(published) => Ok(published),
            Err(Refusal::Final(message)) => Err(anyhow::anyhow!(message)),
            Err(Refusal::Again(error)) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_a_token_that_ran_out_and_can_be_refreshed_is_refreshed() {
        // An address nothing answers at: a refresh attempted here would be an error.
        let publisher = YoutubePublisher::new("http://127.0.0.1:9").with_token_url("http://127.0.0.1:9/token");
        let now = Timestamp::parse("2030-01-01T00:00:00.000Z").unwrap();
        let fields = |value: Value| value.as_object().unwrap().clone();
        assert_eq!(publisher.refresh(None, now).await.unwrap(), Refreshed::Current);
        let plain = fields(json!({"access_token": "a"}));
        assert_eq!(publisher.refresh(Some(&plain), now).await.unwrap(), Refreshed::Current);
        let fresh = fields(json!({"access_token": "a", "refresh_token": "r", "client_id": "c", "client_secret": "s",
            "expires_at": now.after(Duration::from_secs(600)).to_string()}));
        assert_eq!(publisher.refresh(Some(&fresh), now).await.unwrap(), Refreshed::Current);
        // A connection stored before the OAuth client was kept: no client, no end.
        let older = fields(json!({"access_token": "a", "refresh_token": "r"}));
        assert_eq!(publisher.refresh(Some(&older), now).await.unwrap(), Refreshed::Current);
    }

    #[test]
    fn titles_are_the_first_line_cut_and_cleaned() {
        assert_eq!(title("\n  Launch <day>!\nmore"), "Launch day!");
        assert_eq!(title(&"a".repeat(150)).chars().count(), 100);
        assert_eq!(title("<>"), "Video");
    }
}
