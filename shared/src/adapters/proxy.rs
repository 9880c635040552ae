//! A local HTTP proxy that puts the SSRF guard in front of every connection a child
//! program makes (yt-dlp, and the ffmpeg it starts): started for one run of the program
//! and handed to it with `--proxy`. For each `CONNECT host:port` (https) or absolute-form
//! request (http) it resolves the host, checks every address with the guard, and
//! connects to a checked address itself (so a second lookup cannot swap it); a refused
//! host gets a `403` and is counted, so that the caller can answer with a generic refusal
//! instead of the program's error text.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::core::ssrf::resolve_allowed;

/// Largest request head the proxy reads.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Longest a client may take to send its request head, and a connection to open.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A running proxy; dropping it stops it and every connection through it.
pub struct GuardedProxy {
    url: String,
    refused: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GuardedProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GuardedProxy {
    /// Listens on a loopback port of its own; `allow_private` lets every address through
    /// (a local `serve`), as the guard does elsewhere.
    pub async fn start(allow_private: bool) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let refused = Arc::new(AtomicUsize::new(0));
        let counted = refused.clone();
        let task = tokio::spawn(async move {
            // Connections live in the set: aborting this task drops (and stops) them all.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        };
                        connections.spawn(serve(client, allow_private, counted.clone()));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(Self { url, refused, task })
    }

    /// The proxy's URL, for `--proxy`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Connections refused by the guard so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

/// One client connection: its request's target checked, then piped to it.
async fn serve(mut client: TcpStream, allow_private: bool, refused: Arc<AtomicUsize>) {
    let Ok(Ok((head, rest))) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await else { return };
    let Some((target, forwarded)) = parse(&head) else {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
        return;
    };
    let addresses = match resolve_allowed(&target, allow_private).await {
        Ok(addresses) => addresses,
        Err(reason) => {
            refused.fetch_add(1, Ordering::SeqCst);
            tracing::warn!(target = %target, reason, "the guarded proxy refused a connection");
            let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
            return;
        }
    };
    let Some(mut upstream) = connect(&addresses).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
        return;
    };
    let opened = match &forwarded {
        // CONNECT: the tunnel is open; the client speaks TLS through it.
        None => client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await,
        // A plain request: sent on in origin form, the connection closed after it.
        Some(request) => upstream.write_all(request).await,
    };
    if opened.is_err() || upstream.write_all(&rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Reads up to the end of the request head: the head, and any bytes after it.
async fn read_head(client: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut data = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = client.read(&mut buffer).await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        data.extend_from_slice(&buffer[..read]);
        if let Some(end) = data.windows(4).position(|window| window == b"\r\n\r\n") {
            let rest = data.split_off(end + 4);
            return Ok((String::from_utf8_lossy(&data).into_owned(), rest));
        }
        if data.len() > MAX_HEAD_BYTES {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
}

/// The target of a request head, and (for a plain http request) the request to send on.
fn parse(head: &str) -> Option<(url::Url, Option<Vec<u8>>)> {
    let mut lines = head.split("\r\n");
    let mut words = lines.next()?.split(' ');
    let (method, target, version) = (words.next()?, words.next()?, words.next()?);
    if method.eq_ignore_ascii_case("CONNECT") {
        let url = url::Url::parse(&format!("https://{target}/")).ok()?;
        return Some((url, None));
    }
    let url = url::Url::parse(target).ok().filter(|url| url.scheme() == "http")?;
    let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let mut request = format!("{method} {path} {version}\r\n");
    for line in lines.filter(|line| !line.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
        if !matches!(name.as_str(), "connection" | "proxy-connection" | "proxy-authorization" | "keep-alive") {
            request.push_str(line);
            request.push_str("\r\n");
        }
    }
    request.push_str("Connection: close\r\n\r\n");
    Some((url, Some(request.into_bytes())))
}

/// A connection to the first of the checked addresses that answers.
async fn connect(addresses: &[SocketAddr]) -> Option<TcpStream> {
    for address in addresses {
        if let Ok(Ok(stream)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            return Some(stream);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_as_a_target_and_sent_on_in_origin_form() {
        let (url, forwarded) = parse("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n").unwrap();
        assert_eq!((url.as_str(), forwarded), ("https://example.com/", None));
        let head = "GET http://example.com:8080/a/b?c=d HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        let (url, forwarded) = parse(head).unwrap();
        assert_eq!(url.port(), Some(8080));
        let forwarded = String::from_utf8(forwarded.unwrap()).unwrap();
        assert_eq!(
            forwarded,
            "GET /a/b?c=d HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        assert!(parse("GET ftp://example.com/ HTTP/1.1\r\n\r\n").is_none(), "http and CONNECT only");
        assert!(parse("GET /relative HTTP/1.1\r\n\r\n").is_none());
    }

    #[tokio::test]
    async fn a_private_target_is_refused_without_a_connection() {
        let private = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = private.local_addr().unwrap();
        let proxy = GuardedProxy::start(false).await.unwrap();
        let mut client = TcpStream::connect(proxy.url().trim_start_matches("http://")).await.unwrap();
        client.write_all(format!("CONNECT {address} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(proxy.refused(), 1);
        let none = tokio::time::timeout(Duration::from_millis(100), private.accept()).await;
        assert!(none.is_err(), "nothing connected to the private listener");
    }
}
