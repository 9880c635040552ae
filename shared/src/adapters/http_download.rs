//! Downloads of URL inputs with reqwest: streamed to a file with a size limit, redirects
//! followed by hand so that every hop passes the SSRF guard, and each connection pinned
//! to the addresses the guard checked.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use crate::core::ssrf::resolve_allowed;
use crate::ports::{DownloadError, Downloader};

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 5;

/// Fetches HTTP(S) URLs.
pub struct HttpDownloader {
    /// Whether private addresses may be reached (a local `serve` fetching from the laptop).
    allow_private: bool,
}

impl HttpDownloader {
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private }
    }
}

#[async_trait]
impl Downloader for HttpDownloader {
    async fn download(&self, url: &str, output: &Path, max_bytes: u64) -> Result<u64, DownloadError> {
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
                .resolve_to_addrs(&host, &addresses)
                .connect_timeout(Duration::from_secs(10))
                .read_timeout(Duration::from_secs(60))
                .build()
                .map_err(|error| DownloadError::Failed(error.into()))?;
            let mut response =
                client.get(current.clone()).send().await.map_err(|error| DownloadError::Failed(error.into()))?;
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
            let too_large = || refused(format!("the file is larger than the limit of {max_bytes} bytes (5 GB)"));
            if response.content_length().is_some_and(|length| length > max_bytes) {
                return Err(too_large());
            }
            let mut file =
                tokio::fs::File::create(output).await.map_err(|error| DownloadError::Failed(error.into()))?;
            let mut written: u64 = 0;
            while let Some(chunk) = response.chunk().await.map_err(|error| DownloadError::Failed(error.into()))? {
                written += chunk.len() as u64;
                if written > max_bytes {
                    return Err(too_large());
                }
                file.write_all(&chunk).await.map_err(|error| DownloadError::Failed(error.into()))?;
            }
            file.flush().await.map_err(|error| DownloadError::Failed(error.into()))?;
            return Ok(written);
        }
        Err(refused(format!("more than {MAX_REDIRECTS} redirects")))
    }
}
