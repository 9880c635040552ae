//! Webhook POSTs with reqwest: no redirect followed, every connection's addresses
//! resolved and checked by the SSRF guard at connect time (a resolver of ours, so DNS
//! cannot rebind a name between the check and the connect; literal addresses are
//! checked before the request), the whole exchange under the attempt's time limit, and
//! at most a few KB of the answer read. One client for every delivery: connections to a
//! receiver are kept and reused.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::core::ssrf::is_forbidden;
use crate::domain::webhooks::ports::WebhookAnswer;
use crate::domain::webhooks::ports::WebhookClient;
use crate::domain::webhooks::ports::WebhookPost;
use crate::domain::webhooks::RESPONSE_EXCERPT_BYTES;

/// Longest wait for a connection to a receiver.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolves names for the webhook client, refusing names with a forbidden address.
struct GuardedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addresses.is_empty() {
                return Err(format!("the host {host} has no address").into());
            }
            if let Some(address) = addresses.iter().find(|address| !allow_private && is_forbidden(address.ip())) {
                return Err(refusal(&host, address.ip()).into());
            }
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

fn refusal(host: &str, ip: IpAddr) -> String {
    format!("refused: the host {host} resolves to {ip}, a private or reserved address this service does not connect to")
}

/// Posts webhooks over HTTP(S).
pub struct HttpWebhookClient {
    /// Whether receivers on private addresses may be reached (a local `serve`).
    allow_private: bool,
    client: reqwest::Client,
}

impl HttpWebhookClient {
    pub fn new(allow_private: bool) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // HTTP(S)_PROXY would send the request around the guarded resolver.
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .unwrap_or_else(|error| panic!("the webhook HTTP client cannot be built: {error}"));
        Self { allow_private, client }
    }

    async fn attempt(&self, post: &WebhookPost<'_>) -> Result<WebhookAnswer, String> {
        let url = url::Url::parse(post.url).map_err(|error| format!("the callback URL is not valid: {error}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("the callback URL {url} is not http(s)"));
        }
        let host = url.host_str().ok_or_else(|| format!("the callback URL {url} has no host"))?;
        // Literal addresses do not go through the resolver.
        if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            if !self.allow_private && is_forbidden(ip) {
                return Err(refusal(host, ip));
            }
        }
        let mut request = self.client.post(url).body(post.body.to_vec());
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

/// A reqwest error as the delivery log shows it (a refusal of the resolver as such).
fn describe(error: &reqwest::Error) -> String {
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    if let Some(refused) = causes.iter().find(|cause| cause.starts_with("refused:")) {
        return refused.clone();
    }
    let kind = if error.is_connect() {
        "connection failed"
    } else if error.is_timeout() {
        "timed out"
    } else {
        "request failed"
    };
    let mut text = format!("{kind}: {error}");
    for cause in causes {
        text.push_str(&format!(": {cause}"));
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A server that answers every connection with `answer` (after reading the request);
    /// None: it never answers.
    async fn server(answer: Option<Vec<u8>>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 8192];
                    let _ = socket.read(&mut request).await;
                    match answer {
                        Some(answer) => {
                            let _ = socket.write_all(&answer).await;
                            let _ = socket.shutdown().await;
                        }
                        None => tokio::time::sleep(Duration::from_secs(3600)).await,
                    }
                });
            }
        });
        format!("http://localhost:{port}/hook")
    }

    async fn post(client: &HttpWebhookClient, url: &str, timeout: Duration) -> Result<WebhookAnswer, String> {
        client.post(WebhookPost { url, headers: &[], body: b"{}", timeout }).await
    }

    #[tokio::test]
    async fn a_host_that_resolves_to_a_private_address_is_refused_at_delivery() {
        let url = server(Some(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec())).await;
        let guarded = post(&HttpWebhookClient::new(false), &url, Duration::from_secs(5)).await;
        let refused = guarded.unwrap_err();
        assert!(refused.starts_with("refused:") && refused.contains("private or reserved"), "{refused}");
        let (guarded, literal) = (HttpWebhookClient::new(false), url.replace("localhost", "127.0.0.1"));
        assert!(post(&guarded, &literal, Duration::from_secs(5)).await.unwrap_err().starts_with("refused:"));
        let allowed = post(&HttpWebhookClient::new(true), &url, Duration::from_secs(5)).await.unwrap();
        assert_eq!(allowed.status, 200);
        for url in ["ftp://example.com/hook", "not a url"] {
            assert!(post(&HttpWebhookClient::new(true), url, Duration::from_secs(5)).await.is_err(), "{url}");
        }
    }

    #[tokio::test]
    async fn a_redirect_is_an_answer_not_followed() {
        let url = server(Some(
            b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\nContent-Length: 0\r\n\r\n".to_vec(),
        ))
        .await;
        let answer = post(&HttpWebhookClient::new(true), &url, Duration::from_secs(5)).await.unwrap();
        assert_eq!(answer.status, 302);
    }

    #[tokio::test]
    async fn a_huge_or_garbage_answer_is_read_a_little_and_recorded() {
        let mut huge = b"HTTP/1.1 500 Oops\r\nContent-Length: 20000000\r\n\r\n".to_vec();
        huge.extend(std::iter::repeat_n(b'x', 20_000_000));
        let url = server(Some(huge)).await;
        let answer = post(&HttpWebhookClient::new(true), &url, Duration::from_secs(5)).await.unwrap();
        assert_eq!(answer.status, 500);
        assert_eq!(answer.excerpt.len(), RESPONSE_EXCERPT_BYTES);
        let url = server(Some(b"\x00\x01 this is not HTTP at all\r\n\r\n".to_vec())).await;
        let garbage = post(&HttpWebhookClient::new(true), &url, Duration::from_secs(5)).await.unwrap_err();
        assert!(garbage.starts_with("request failed"), "{garbage}");
    }

    #[tokio::test]
    async fn a_receiver_that_never_answers_times_out() {
        let url = server(None).await;
        let started = std::time::Instant::now();
        let error = post(&HttpWebhookClient::new(true), &url, Duration::from_millis(300)).await.unwrap_err();
        assert!(error.starts_with("timed out"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
