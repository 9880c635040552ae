//! Downloads of URL inputs with reqwest: streamed to a file with a size limit, redirects
//! followed by hand so that every hop passes the SSRF guard, and each connection pinned
//! to the addresses the guard checked.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use crate::core::ssrf::resolve_allowed;
use crate::domain::media::ports::Downloader;
use crate::domain::media::ports::{Chunks, DownloadError};

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 5;
/// Longest a connection of a media download may take to be made.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetches HTTP(S) URLs.
pub struct HttpDownloader {
    /// Whether private addresses may be reached (a local `serve` fetching from the laptop).
    allow_private: bool,
}

impl HttpDownloader {
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private }
    }

    /// Like [`Downloader::download`], sending `headers` with every request (the
    /// `User-Agent` and `Referer` a video site expects, say).
    pub async fn download_with_headers(
        &self,
        url: &str,
        headers: &[(String, String)],
        output: &Path,
        max_bytes: u64,
    ) -> Result<u64, DownloadError> {
        self.fetch(url, headers, output, max_bytes, CONNECT_TIMEOUT).await
    }

    /// The download, a connection given up after `connect`.
    async fn fetch(
        &self,
        url: &str,
        headers: &[(String, String)],
        output: &Path,
        max_bytes: u64,
        connect: Duration,
    ) -> Result<u64, DownloadError> {
        let mut response = self.response(url, headers, max_bytes, connect).await?;
        let mut file = tokio::fs::File::create(output).await.map_err(|error| DownloadError::Failed(error.into()))?;
        let mut written: u64 = 0;
        while let Some(chunk) = response.chunk().await.map_err(|error| DownloadError::Failed(error.into()))? {
            written += chunk.len() as u64;
            if written > max_bytes {
                return Err(too_large(max_bytes));
            }
            file.write_all(&chunk).await.map_err(|error| DownloadError::Failed(error.into()))?;
        }
        file.flush().await.map_err(|error| DownloadError::Failed(error.into()))?;
        Ok(written)
    }

    /// The answer to `url` whose body is to be read: redirects followed (each hop through
    /// the SSRF guard), refused when it is not a success, a web page, or announced larger
    /// than `max_bytes`.
    async fn response(
        &self,
        url: &str,
        headers: &[(String, String)],
        max_bytes: u64,
        connect: Duration,
    ) -> Result<reqwest::Response, DownloadError> {
        let headers = header_map(headers).map_err(DownloadError::Failed)?;
        let refused = |message: String| DownloadError::Refused(message);
        let mut current = url::Url::parse(url).map_err(|error| refused(format!("not a valid URL: {error}")))?;
        for _ in 0..=MAX_REDIRECTS {
            if !matches!(current.scheme(), "http" | "https") {
                return Err(refused(format!("{current} is not an http(s) URL")));
            }
            let addresses = resolve_allowed(&current, self.allow_private).await.map_err(refused)?;
            let host = current.host_str().unwrap_or_default().to_owned();
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                // HTTP(S)_PROXY would send the request around the pinned addresses.
                .no_proxy()
                .resolve_to_addrs(&host, &addresses)
                .connect_timeout(connect)
                .read_timeout(Duration::from_secs(60))
                .build()
                .map_err(|error| DownloadError::Failed(error.into()))?;
            let response = client
                .get(current.clone())
                .headers(headers.clone())
                .send()
                .await
                .map_err(|error| DownloadError::Failed(error.into()))?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|value| value.to_str().ok())
                    .ok_or_else(|| refused(format!("the server answered {status} without a Location")))?;
                current = current.join(location).map_err(|error| refused(format!("bad redirect: {error}")))?;
                continue;
            }
            if !status.is_success() {
                return Err(refused(format!("the server answered {status}")));
            }
            let content_type = response.headers().get(reqwest::header::CONTENT_TYPE);
            if content_type.and_then(|value| value.to_str().ok()).is_some_and(|value| value.starts_with("text/html")) {
                return Err(refused(crate::domain::media::ports::WEB_PAGE_REFUSAL.into()));
            }
            if response.content_length().is_some_and(|length| length > max_bytes) {
                return Err(too_large(max_bytes));
            }
            return Ok(response);
        }
        Err(refused(format!("more than {MAX_REDIRECTS} redirects")))
    }
}

#[async_trait]
impl Downloader for HttpDownloader {
    async fn download(&self, url: &str, output: &Path, max_bytes: u64) -> Result<u64, DownloadError> {
        self.download_with_headers(url, &[], output, max_bytes).await
    }

    async fn download_connecting_within(
        &self,
        url: &str,
        output: &Path,
        max_bytes: u64,
        connect: Duration,
    ) -> Result<u64, DownloadError> {
        self.fetch(url, &[], output, max_bytes, connect).await
    }

    async fn open(&self, url: &str, max_bytes: u64) -> Result<Chunks, DownloadError> {
        let response = self.response(url, &[], max_bytes, CONNECT_TIMEOUT).await?;
        let chunks = futures::stream::try_unfold((response, 0u64), move |(mut response, read)| async move {
            let Some(chunk) = response.chunk().await? else { return Ok(None) };
            let read = read + chunk.len() as u64;
            if read > max_bytes {
                return Err(anyhow::Error::new(too_large(max_bytes)));
            }
            Ok(Some((chunk, (response, read))))
        });
        Ok(Box::pin(chunks))
    }
}

/// The refusal of a body larger than `max_bytes`.
fn too_large(max_bytes: u64) -> DownloadError {
    DownloadError::Refused(format!("the file is larger than the limit of {}", size_text(max_bytes)))
}

fn header_map(headers: &[(String, String)]) -> anyhow::Result<reqwest::header::HeaderMap> {
    let mut map = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .with_context(|| format!("{name:?} is not a valid header name"))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .with_context(|| format!("the value of the header {name} is not valid"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// A size limit as people write it: whole gigabytes as such, anything else in bytes.
pub(crate) fn size_text(bytes: u64) -> String {
    const GB: u64 = 1024 * 1024 * 1024;
    if bytes >= GB && bytes.is_multiple_of(GB) {
        format!("{} GB", bytes / GB)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A server that answers every connection with `answer(path)` (the raw HTTP
    /// response head and body), then closes it.
    async fn server(answer: fn(&str) -> Vec<u8>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = vec![0u8; 4096];
                    let read = socket.read(&mut request).await.unwrap_or(0);
                    let text = String::from_utf8_lossy(&request[..read]).into_owned();
                    let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
                    let _ = socket.write_all(&answer(&path)).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        format!("http://{address}")
    }

    fn ok(body: &[u8], length: bool) -> Vec<u8> {
        let head = if length {
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
        } else {
            "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_owned()
        };
        [head.as_bytes(), body].concat()
    }

    fn refusal(result: Result<u64, DownloadError>) -> String {
        match result {
            Err(DownloadError::Refused(message)) => message,
            Err(DownloadError::Failed(error)) => panic!("failed, not refused: {error:#}"),
            Ok(bytes) => panic!("downloaded {bytes} bytes"),
        }
    }

    #[tokio::test]
    async fn a_file_within_the_limit_is_stored_and_one_over_it_is_refused_with_or_without_a_length() {
        let base = server(|path| match path {
            "/declared" => ok(&[7u8; 2000], true),
            "/streamed" => ok(&[7u8; 2000], false),
            _ => ok(&[7u8; 1000], true),
        })
        .await;
        let folder = tempfile::tempdir().unwrap();
        let output = folder.path().join("file");
        let downloader = HttpDownloader::new(true);
        assert_eq!(downloader.download(&format!("{base}/small"), &output, 1500).await.unwrap(), 1000);
        assert_eq!(std::fs::read(&output).unwrap(), vec![7u8; 1000]);
        for path in ["/declared", "/streamed"] {
            let message = refusal(downloader.download(&format!("{base}{path}"), &output, 1500).await);
            assert_eq!(message, "the file is larger than the limit of 1500 bytes", "{path}");
        }
    }

    #[tokio::test]
    async fn redirects_are_followed_a_few_times_and_errors_are_named() {
        let base = server(|path| {
            let hop =
                |to: &str| format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n").into_bytes();
            match path {
                "/moved" => hop("/file"),
                "/file" => ok(b"media", true),
                "/loop" => hop("/loop"),
                "/gone" => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
                _ => hop("ftp://example.com/file"),
            }
        })
        .await;
        let folder = tempfile::tempdir().unwrap();
        let output = folder.path().join("file");
        let downloader = HttpDownloader::new(true);
        assert_eq!(downloader.download(&format!("{base}/moved"), &output, 100).await.unwrap(), 5);
        let message = refusal(downloader.download(&format!("{base}/loop"), &output, 100).await);
        assert_eq!(message, "more than 5 redirects");
        let message = refusal(downloader.download(&format!("{base}/gone"), &output, 100).await);
        assert_eq!(message, "the server answered 404 Not Found");
        let message = refusal(downloader.download(&format!("{base}/elsewhere"), &output, 100).await);
        assert!(message.contains("is not an http(s) URL"), "{message}");
    }

    #[test]
    fn the_5_gb_limit_reads_as_such() {
        assert_eq!(size_text(crate::domain::runs::worker::MAX_DOWNLOAD_BYTES), "5 GB");
    }

    #[tokio::test]
    async fn private_addresses_are_refused_unless_allowed() {
        let base = server(|_| ok(b"media", true)).await;
        let folder = tempfile::tempdir().unwrap();
        let message = refusal(HttpDownloader::new(false).download(&base, &folder.path().join("file"), 100).await);
        assert!(message.contains("127.0.0.1"), "{message}");
    }
}
