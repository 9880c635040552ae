//! Webhook POSTs with reqwest: no redirect followed, the host resolved and checked by
//! the SSRF guard at every attempt and the connection pinned to the addresses checked
//! (so DNS cannot rebind it between the check and the connect), the whole exchange
//! under the attempt's time limit, and at most a few KB of the answer read.

use async_trait::async_trait;

use crate::core::ssrf::resolve_allowed;
use crate::domain::webhooks::RESPONSE_EXCERPT_BYTES;
use crate::ports::{WebhookAnswer, WebhookClient, WebhookPost};

/// Posts webhooks over HTTP(S).
pub struct HttpWebhookClient {
    /// Whether receivers on private addresses may be reached (a local `serve`).
    allow_private: bool,
}

impl HttpWebhookClient {
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private }
    }

    async fn attempt(&self, post: &WebhookPost<'_>) -> Result<WebhookAnswer, String> {
        let url = url::Url::parse(post.url).map_err(|error| format!("the callback URL is not valid: {error}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("the callback URL {url} is not http(s)"));
        }
        let addresses = resolve_allowed(&url, self.allow_private).await.map_err(|problem| format!("refused: {problem}"))?;
        let host = url.host_str().unwrap_or_default().to_owned();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .resolve_to_addrs(&host, &addresses)
            .connect_timeout(post.timeout)
            .build()
            .map_err(|error| format!("the HTTP client could not be built: {error}"))?;
        let mut request = client.post(url).body(post.body.to_vec());
        for (name, value) in post.headers {
            request = request.header(name, value);
        }
        let mut response = request.send().await.map_err(|error| describe(&error))?;
        let status = response.status().as_u16();
        let mut excerpt = Vec::new();
        while excerpt.len() < RESPONSE_EXCERPT_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => excerpt.extend_from_slice(&chunk),
                // The status is the answer; a body cut short does not change it.
                Ok(None) | Err(_) => break,
            }
        }
        excerpt.truncate(RESPONSE_EXCERPT_BYTES);
        Ok(WebhookAnswer { status, excerpt: String::from_utf8_lossy(&excerpt).into_owned() })
    }
}

/// A reqwest error as the delivery log shows it.
fn describe(error: &reqwest::Error) -> String {
    let kind = if error.is_connect() {
        "connection failed"
    } else if error.is_timeout() {
        "timed out"
    } else {
        "request failed"
    };
    let mut text = format!("{kind}: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[async_trait]
impl WebhookClient for HttpWebhookClient {
    async fn post(&self, post: WebhookPost<'_>) -> Result<WebhookAnswer, String> {
        match tokio::time::timeout(post.timeout, self.attempt(&post)).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("timed out: no answer within {} ms", post.timeout.as_millis())),
        }
    }
}
