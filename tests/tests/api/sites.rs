//! Video-sharing-site URLs, read with yt-dlp (installed from PyPI into `.local/venv` by
//! `./scripts/test.sh`), offline: a local server's page that embeds a video file is what
//! yt-dlp's generic extractor reads. The run input is the site's video cut to its clip
//! window; the run says which video started it (`triggered_by`) and the output cites it.

use std::collections::HashMap;
use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::domain::nodes::{DESTINATION, VIDEO_INPUT};

use crate::conformance;
use crate::helpers::{http_get, Backend};
use crate::runs::{video_over_5_hours, Harness};
use crate::uploads::sample;

conformance!(a_sites_video_is_fetched_cut_cited_and_names_the_run_trigger);

/// A local site: `/watch` embeds `/clip.mp4`, `/empty` has no video; anything else is a 404.
pub(crate) async fn site_server(clip: Vec<u8>) -> String {
    slow_site_server(clip, std::time::Duration::ZERO).await
}

/// [`site_server`], whose pages answer after `delay`.
pub(crate) async fn slow_site_server(clip: Vec<u8>, delay: std::time::Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let pages: Arc<HashMap<&str, (&str, Vec<u8>)>> = Arc::new(HashMap::from([
        (
            "/watch",
            (
                "text/html; charset=utf-8",
                b"<html><head><title>Launch day</title></head><body><h1>Launch day</h1>\
                  <video src=\"/clip.mp4\" controls></video></body></html>"
                    .to_vec(),
            ),
        ),
        (
            "/empty",
            (
                "text/html; charset=utf-8",
                b"<html><head><title>Nothing</title></head><body>words</body></html>".to_vec(),
            ),
        ),
        ("/clip.mp4", ("video/mp4", clip)),
    ]));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let pages = pages.clone();
            tokio::spawn(async move {
                let mut request = vec![0u8; 8192];
                let Ok(read) = socket.read(&mut request).await else { return };
                let head = String::from_utf8_lossy(&request[..read]).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/").split('?').next().unwrap_or("/").to_owned();
                if path != "/clip.mp4" {
                    tokio::time::sleep(delay).await;
                }
                let (status, content_type, body) = match pages.get(path.as_str()) {
                    Some((content_type, body)) => ("200 OK", *content_type, body.clone()),
                    None => ("404 Not Found", "text/plain", b"not here".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    base
}

async fn a_sites_video_is_fetched_cut_cited_and_names_the_run_trigger(backend: Backend) {
    let harness = Harness::new(backend).await;
    // The harness reads `localhost` as a video-sharing site, 127.0.0.1 as any other host.
    let site = site_server(sample("video.mp4")).await.replace("127.0.0.1", "localhost");
    let page = format!("{site}/watch");
    let (agent, nodes) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let body =
        json!({ "youtube_url_inputs": [{ "url": page, "input_clip_start_ms": 500, "input_clip_end_ms": 1500 }] });
    let run = harness.start(&agent, body).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");

    // Started from a site's video: triggered_by names it.
    let trigger = &record["triggered_by"];
    assert_eq!(trigger["type"], "generic", "{trigger}");
    assert_eq!(trigger["video_url"], page.as_str());
    assert!(trigger["video_id"].as_str().is_some_and(|id| !id.is_empty()), "{trigger}");
    assert!(trigger["video_title"].as_str().unwrap().contains("Launch day"), "{trigger}");
    assert!(trigger["triggered_at"].is_string() && trigger["trigger_id"].is_null(), "{trigger}");

    // The output is the site's video cut to 500–1500 ms, cited with where it plays.
    let output = &record["outputs"][0];
    let (status, bytes) = http_get(output["video_url"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let length = duration_ms(&bytes);
    assert!(length.abs_diff(1_000) <= 100, "the 1 s window of the site's video: {length} ms");
    let sources = output["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 1, "{output}");
    assert_eq!(sources[0]["provider"], "generic");
    assert_eq!(sources[0]["source_kind"], "video_site");
    assert_eq!(sources[0]["provider_asset_id"], trigger["video_id"]);
    assert_eq!(sources[0]["query"], page.as_str());
    assert_eq!(sources[0]["start_ms"], 0);

    // Refused before any run: a page without a video, a page that is not there, and a
    // page the clip window starts after.
    for (url, reason) in [(format!("{site}/empty"), "no video"), (format!("{site}/gone"), "404")] {
        let (status, body) = harness
            .test
            .call(Method::POST, &format!("/agent/{agent}/run"), Some(json!({ "youtube_url_inputs": [{ "url": url }] })))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("youtube_url_inputs[0]") && detail.contains(reason), "{detail}");
    }
    let (_, runs) = harness.test.call(Method::GET, &format!("/agent/{agent}/runs"), None).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "no run for the refused pages");

    // video_urls of a site's host are read as its pages: the same video.
    let run = harness.start(&agent, json!({ "video_urls": [page] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["triggered_by"]["video_url"], page.as_str());

    // youtube_url_inputs of a host that is no video-sharing site: refused, yt-dlp not run.
    let (status, body) = harness
        .test
        .call(
            Method::POST,
            &format!("/agent/{agent}/run"),
            Some(json!({ "youtube_url_inputs": [{ "url": page.replace("localhost", "127.0.0.1") }] })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("is not a video-sharing site"), "{body}");

    // A page given as a plain video URL of another host is not a video file: its task says so.
    let run = harness.start(&agent, json!({ "video_urls": [page.replace("localhost", "127.0.0.1")] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(record["errors"][0]["original_node_id"], nodes["in"].as_str());
    let message = record["errors"][0]["messages"][0].as_str().unwrap();
    assert!(message.contains("web page") && message.contains("youtube_url_inputs"), "{message}");
}

fn duration_ms(bytes: &[u8]) -> u64 {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let output = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "format=duration", "-of", "json"])
        .arg(file.path())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    (report["format"]["duration"].as_str().unwrap().parse::<f64>().unwrap() * 1000.0).round() as u64
}

/// A site video longer than 5 hours (the page does not say how long) fails its Video
/// Input task with the limit in the message; the run does not stay `running`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sites_video_over_5_hours_fails_its_video_input_task() {
    let site = site_server(video_over_5_hours()).await;
    let harness = Harness::new(Backend::Sqlite).await;
    let (agent, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let page = format!("{}/watch", site.replace("127.0.0.1", "localhost"));
    let run = harness.start(&agent, json!({ "youtube_url_inputs": [{ "url": page }] })).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    let message = record["errors"][0]["messages"][0].as_str().unwrap();
    assert!(message.contains("at most 5 hours (18000 s) are accepted"), "{message}");
}
