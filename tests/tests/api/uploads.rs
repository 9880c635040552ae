//! The uploads flow end to end: a signed URL, a real HTTP PUT of real media made by
//! ffmpeg, and finalize with ffprobe — on a local folder served by `serve` (SQLite
//! backend) and on the S3 emulator (DynamoDB Local backend).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use shared::adapters::ffprobe::Ffprobe;
use shared::adapters::fs::signed_put;
use shared::domain::media::ports::BlobStore;
use shared::domain::media::ports::MediaProbe;
use shared::domain::media::ports::ProbeError;
use shared::domain::media::ports::UploadTarget;
use shared::domain::media::{ProbeReport, ProbedStream, SealedBlob};
use shared::domain::time::Timestamp;
use shared::domain::uploads::UploadId;
use shared::serve;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::helpers::{local_media, s3_media, s3_store, Backend, TestApp};

/// Sample files made once per test run by ffmpeg: a 2 s video with sound, a 1 s
/// tone, a PNG, and a text file.
fn samples() -> &'static PathBuf {
    static SAMPLES: OnceLock<PathBuf> = OnceLock::new();
    SAMPLES.get_or_init(|| {
        let folder = tempfile::tempdir().expect("temporary folder").keep();
        let make = |args: &[&str]| crate::helpers::ffmpeg_in(&folder, args);
        make(
            &["-f", "lavfi", "-i", "testsrc=duration=2:size=320x240:rate=10", "-f", "lavfi", "-i", "sine=duration=2"]
                .iter()
                .chain(&["-shortest", "-pix_fmt", "yuv420p", "video.mp4"])
                .copied()
                .collect::<Vec<_>>(),
        );
        make(&["-f", "lavfi", "-i", "testsrc=duration=1:size=160x120:rate=10", "-pix_fmt", "yuv420p", "short.mp4"]);
        make(&["-f", "lavfi", "-i", "sine=duration=1", "audio.mp3"]);
        make(&["-f", "lavfi", "-i", "color=red:size=64x48", "-frames:v", "1", "image.png"]);
        std::fs::write(folder.join("notes.txt"), "just some words, not media\n".repeat(50)).unwrap();
        folder
    })
}

/// The bytes of one sample file.
pub fn sample(name: &str) -> Vec<u8> {
    std::fs::read(samples().join(name)).unwrap()
}

/// PUTs bytes as an upload ticket (the answer of `get_upload_url`) says, as a client
/// would: to its `upload_url`, with its `upload_headers`.
pub async fn put(ticket: &Value, bytes: Vec<u8>) -> StatusCode {
    put_to(ticket["upload_url"].as_str().expect("an upload URL"), &headers_of(ticket), bytes).await
}

/// The `upload_headers` of an upload ticket.
pub fn headers_of(ticket: &Value) -> Vec<(String, String)> {
    let headers = ticket["upload_headers"].as_object().expect("upload_headers");
    headers.iter().map(|(name, value)| (name.clone(), value.as_str().unwrap().to_owned())).collect()
}

/// PUTs bytes to `url` with `headers`.
pub async fn put_to(url: &str, headers: &[(String, String)], bytes: Vec<u8>) -> StatusCode {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = http::Request::builder().method(Method::PUT).uri(url);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let request = request.body(Full::new(Bytes::from(bytes))).unwrap();
    let response = client.request(request).await.expect("upload URL answers");
    let status = response.status();
    let _ = response.into_body().collect().await;
    status
}

/// The bytes of a finalized upload's file, read where runs will read it.
async fn sealed_bytes(app: &TestApp, id: &str) -> Vec<u8> {
    let upload = app.app.uploads().get_upload(app.organization, UploadId::parse(id).unwrap()).await.unwrap().unwrap();
    let location = app.app.blobs().probe_location(upload.blob.as_ref().expect("a sealed file")).await.unwrap();
    if let Some(path) = location.strip_prefix("file:") {
        return std::fs::read(path).unwrap();
    }
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let response = client.get(location.parse().unwrap()).await.expect("the sealed object answers");
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body().collect().await.unwrap().to_bytes().to_vec()
}

/// An app whose media is a local folder served by a running `serve`.
async fn local_app() -> (TestApp, tokio::sync::oneshot::Sender<()>) {
    local_app_probing_with(None).await
}

/// As [`local_app`], with another media probe when given.
async fn local_app_probing_with(probe: Option<Arc<dyn MediaProbe>>) -> (TestApp, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (media, _) = local_media(&format!("http://{}", listener.local_addr().unwrap()));
    let mut test = TestApp::with_media(Backend::Sqlite, media).await;
    if let Some(probe) = probe {
        Arc::get_mut(&mut test.app).expect("the test holds the only handle").replace_probe(probe);
    }
    let (_, stop) = serve::spawn_on(test.app.clone(), listener).unwrap();
    (test, stop)
}

/// An app on DynamoDB Local with media in the S3 emulator.
async fn s3_app() -> TestApp {
    TestApp::with_media(Backend::DynamoDb, s3_media().await).await
}

/// A new upload of `kind`: its ID and its ticket (URL and headers to PUT with).
async fn upload_url(app: &TestApp, kind: &str) -> (String, Value) {
    let (status, body) = app.call(Method::POST, &format!("/uploads/{kind}/get_upload_url"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["upload_method"], "PUT");
    let expires = Timestamp::parse(body["expires_at"].as_str().unwrap()).unwrap();
    let from_now = expires.unix_seconds() - Timestamp::now().unix_seconds();
    assert!((3540..=3600).contains(&from_now), "valid for one hour: {from_now} s");
    let content_type = body["upload_headers"]["Content-Type"].as_str().unwrap_or_default();
    assert!(content_type.starts_with(&format!("{kind}/")), "the URL pins a type of its kind: {body}");
    (body["id"].as_str().unwrap().to_owned(), body)
}

async fn finalize(app: &TestApp, kind: &str, id: &str) -> (StatusCode, Value) {
    app.call(Method::POST, &format!("/uploads/{kind}/finalize_upload"), Some(json!({ "id": id }))).await
}

/// Runs the whole flow for each kind and every refusal, on one app.
async fn upload_flow(app: &TestApp) {
    for (kind, file, codec, width, duration) in [
        ("video", "video.mp4", "h264", Some(320), Some(2000)),
        ("audio", "audio.mp3", "mp3", None, Some(1000)),
        ("image", "image.png", "png", Some(64), None),
    ] {
        let (id, url) = upload_url(app, kind).await;
        let (status, body) = finalize(app, kind, &id).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "finalize before the upload: {body}");
        assert!(body["detail"].as_str().unwrap().starts_with("no file has been uploaded"), "{body}");
        assert_eq!(put(&url, sample(file)).await, StatusCode::OK, "{kind} PUT");
        let (status, asset) = finalize(app, kind, &id).await;
        assert_eq!(status, StatusCode::OK, "{asset}");
        assert_eq!(
            (asset["id"].as_str(), asset["kind"].as_str(), asset["status"].as_str()),
            (Some(id.as_str()), Some(kind), Some("ready"))
        );
        assert_eq!(asset["codec"], codec);
        assert_eq!(asset["width"].as_u64(), width);
        assert_eq!(asset["size_bytes"].as_u64(), Some(sample(file).len() as u64));
        match duration {
            Some(ms) => {
                let measured = asset["duration_ms"].as_u64().expect("a duration");
                assert!(measured.abs_diff(ms) <= 100, "{kind}: {measured} ms");
            }
            None => assert!(asset["duration_ms"].is_null()),
        }
        let (status, again) = finalize(app, kind, &id).await;
        assert_eq!((status, &again), (StatusCode::OK, &asset), "finalize is idempotent");
        // The URL still takes a PUT, but the asset stays the file that was checked.
        assert_eq!(put(&url, sample("notes.txt")).await, StatusCode::OK);
        let (status, again) = finalize(app, kind, &id).await;
        assert_eq!((status, &again), (StatusCode::OK, &asset), "a PUT after finalize changes nothing");
        assert_eq!(sealed_bytes(app, &id).await, sample(file), "the asset's file is the one that was checked");
        let (status, read) = app.call(Method::GET, &format!("/uploads/{kind}/{id}"), None).await;
        assert_eq!((status, read), (StatusCode::OK, asset));
    }

    // Not media at all, and media of another kind.
    for (kind, file, reason) in [
        ("video", "notes.txt", "the uploaded file is not a media file ffprobe can read"),
        ("video", "image.png", "the uploaded file is not a video"),
        ("video", "audio.mp3", "the uploaded file is not a video"),
        ("audio", "video.mp4", "the uploaded file is not audio"),
        ("image", "video.mp4", "the uploaded file is not an image"),
    ] {
        let (id, url) = upload_url(app, kind).await;
        assert_eq!(put(&url, sample(file)).await, StatusCode::OK);
        let (status, body) = finalize(app, kind, &id).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{kind} from {file}: {body}");
        assert!(body["detail"].as_str().unwrap().starts_with(reason), "{kind} from {file}: {body}");
        let (_, pending) = app.call(Method::GET, &format!("/uploads/{kind}/{id}"), None).await;
        assert_eq!(pending["status"], "pending_upload", "a refused file is not an asset");
        if let Some(local) = &app.app.local_blobs {
            // A refused finalize leaves no sealed copy behind.
            let prefix =
                shared::domain::uploads::Upload::sealed_prefix(app.organization, UploadId::parse(&id).unwrap());
            let folder = local.path(&prefix).unwrap();
            let left = std::fs::read_dir(&folder).map(|entries| entries.count()).unwrap_or(0);
            assert_eq!(left, 0, "{kind} from {file}: nothing left in {}", folder.display());
        }
    }

    // Unknown IDs, IDs of another kind, malformed requests.
    let not_found = (StatusCode::NOT_FOUND, json!({ "detail": "Upload not found" }));
    let unknown = Uuid::new_v4().to_string();
    assert_eq!(finalize(app, "video", &unknown).await, not_found);
    assert_eq!(finalize(app, "video", "not-a-uuid").await, not_found);
    assert_eq!(app.call(Method::GET, &format!("/uploads/video/{unknown}"), None).await, not_found);
    let (image, _) = upload_url(app, "image").await;
    assert_eq!(finalize(app, "video", &image).await, not_found, "an image upload is not a video upload");
    let (status, body) = app.call(Method::POST, "/uploads/video/finalize_upload", Some(json!({}))).await;
    assert_eq!((status, body), (StatusCode::BAD_REQUEST, json!({ "detail": "id is required" })));
    let (status, body) = app.call(Method::POST, "/uploads/video/finalize_upload", Some(json!({ "id": 5 }))).await;
    assert_eq!((status, body), (StatusCode::BAD_REQUEST, json!({ "detail": "id must be a UUID string" })));
    let (status, body) = app.call(Method::POST, "/uploads/document/get_upload_url", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // The type an upload URL pins: one of its kind's family, the kind's default when none is asked.
    let ask = |content_type: Value| async move {
        app.call(Method::POST, "/uploads/video/get_upload_url", Some(json!({ "content_type": content_type }))).await
    };
    let (status, body) = ask(json!("video/QuickTime")).await;
    assert_eq!((status, &body["upload_headers"]["Content-Type"]), (StatusCode::OK, &json!("video/quicktime")));
    let detail = "content_type must be a video media type such as video/mp4 (got \"text/html\")";
    assert_eq!(ask(json!("text/html")).await, (StatusCode::BAD_REQUEST, json!({ "detail": detail })));
    for refused in [json!("video/"), json!("video/mp4; x=1"), json!("videos/mp4"), json!("image/png")] {
        assert_eq!(ask(refused.clone()).await.0, StatusCode::BAD_REQUEST, "{refused}");
    }
    let detail = json!({ "detail": "content_type must be a string" });
    assert_eq!(ask(json!(5)).await, (StatusCode::BAD_REQUEST, detail));

    // Another organization sees none of it.
    let (_, other_key) = app.add_organization(true).await;
    let (id, url) = upload_url(app, "image").await;
    assert_eq!(put(&url, sample("image.png")).await, StatusCode::OK);
    let finalize_path = "/uploads/image/finalize_upload";
    let (status, _) = app.call_as(&other_key, Method::POST, finalize_path, Some(json!({ "id": id }))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app.call_as(&other_key, Method::GET, &format!("/uploads/image/{id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(finalize(app, "image", &id).await.0, StatusCode::OK, "the owner still can");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_through_the_local_folder_of_serve() {
    let (app, _stop) = local_app().await;
    upload_flow(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_through_the_s3_emulator() {
    let app = s3_app().await;
    let (id, ticket) = upload_url(&app, "video").await;
    let url = ticket["upload_url"].as_str().unwrap();
    assert!(url.contains("X-Amz-Expires=3600"), "the presigned PUT lives one hour: {url}");
    // S3 refuses a PUT whose signed headers differ: the type is pinned, and so is the
    // tag the lifecycle rule expires never-finalized uploads by.
    let signed = url.split("X-Amz-SignedHeaders=").nth(1).unwrap().split('&').next().unwrap();
    assert!(signed.contains("content-type") && signed.contains("x-amz-tagging"), "signed headers: {signed}");
    assert_eq!(
        headers_of(&ticket),
        [
            ("Content-Type".to_owned(), "video/mp4".to_owned()),
            ("x-amz-tagging".to_owned(), "upload=pending".to_owned())
        ]
    );
    assert_eq!(put(&ticket, sample("video.mp4")).await, StatusCode::OK);
    let store = s3_store().await;
    let key = format!("uploads/{}/{id}", app.organization);
    let tag = |value: &str| vec![("upload".to_owned(), value.to_owned())];
    assert_eq!(store.tags(&key, None).await.unwrap(), tag("pending"), "an upload not finalized yet");
    assert_eq!(finalize(&app, "video", &id).await.0, StatusCode::OK);
    let upload = app.app.uploads().get_upload(app.organization, UploadId::parse(&id).unwrap()).await.unwrap().unwrap();
    let version = upload.blob.as_ref().unwrap().version.clone();
    assert!(version.is_some(), "the bucket is versioned");
    assert_eq!(store.tags(&key, version.as_deref()).await.unwrap(), tag("finalized"), "out of the expiry rule");
    upload_flow(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_upload_urls_refuse_tampering_and_expiry() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (media, store) = local_media(&base);
    let app = TestApp::with_media(Backend::Sqlite, media).await;
    let (_, _stop) = serve::spawn_on(app.app.clone(), listener).unwrap();
    let (id, ticket) = upload_url(&app, "image").await;
    let url = ticket["upload_url"].as_str().unwrap().to_owned();
    let headers = headers_of(&ticket);

    let tampered_signature = {
        let (head, signature) = url.rsplit_once('=').unwrap();
        let flipped = if signature.starts_with('0') { "1" } else { "0" };
        format!("{head}={flipped}{}", &signature[1..])
    };
    let other_key = url.replace(&id, &Uuid::new_v4().to_string());
    let later = url.replace("expires=", "expires=9");
    for refused in [tampered_signature, other_key, later] {
        assert_eq!(put_to(&refused, &headers, sample("image.png")).await, StatusCode::FORBIDDEN, "{refused}");
    }
    let key = format!("uploads/{}/{id}", app.organization);
    let expired = store.signed_url(&signed_put("image/png"), &key, Timestamp::now().unix_seconds() - 1);
    assert_eq!(put_to(&expired, &headers, sample("image.png")).await, StatusCode::FORBIDDEN);
    // The URL pins its Content-Type: a page, or no type at all, is refused.
    let page = [("Content-Type".to_owned(), "text/html".to_owned())];
    assert_eq!(put_to(&url, &page, sample("image.png")).await, StatusCode::FORBIDDEN, "another type");
    assert_eq!(put_to(&url, &[], sample("image.png")).await, StatusCode::FORBIDDEN, "no type");
    let (status, _) = finalize(&app, "image", &id).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "nothing was stored by refused PUTs");
    assert_eq!(put(&ticket, sample("image.png")).await, StatusCode::OK);
    assert_eq!(finalize(&app, "image", &id).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_over_the_size_limit_are_refused_at_finalize() {
    let (app, _stop) = local_app().await;
    let (id, url) = upload_url(&app, "image").await;
    let mut big = sample("image.png");
    big.resize(50_000_001, 0);
    assert_eq!(put(&url, big).await, StatusCode::OK);
    let (status, body) = finalize(&app, "image", &id).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({ "detail": "image uploads may be at most 50 MB; this file is 50000001 bytes" })
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_finalizes_record_one_asset() {
    let app = Arc::new(s3_app().await);
    let (id, url) = upload_url(&app, "audio").await;
    assert_eq!(put(&url, sample("audio.mp3")).await, StatusCode::OK);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (app, id) = (app.clone(), id.clone());
            tokio::spawn(async move { finalize(&app, "audio", &id).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        answers.push(body);
    }
    assert!(answers.windows(2).all(|pair| pair[0] == pair[1]), "every finalize reports the same asset: {answers:?}");
}

/// A blob store that reports every upload with a given size, and a probe that reports
/// what it is told: the limits are checked without writing gigabytes.
struct Sized(u64);
struct Probed(ProbeReport);

#[async_trait::async_trait]
impl BlobStore for Sized {
    async fn upload_url(&self, key: &str, kind: &str, _: std::time::Duration) -> anyhow::Result<UploadTarget> {
        let headers = vec![("Content-Type".to_owned(), kind.to_owned())];
        Ok(UploadTarget { url: format!("http://blobs.invalid/{key}"), headers })
    }
    async fn seal(&self, key: &str, _: &str) -> anyhow::Result<Option<SealedBlob>> {
        Ok(Some(SealedBlob { key: key.to_owned(), version: None, size: self.0 }))
    }
    async fn probe_location(&self, blob: &SealedBlob) -> anyhow::Result<String> {
        Ok(blob.key.clone())
    }
    async fn put(&self, _: &str, _: Bytes, _: &str) -> anyhow::Result<()> {
        anyhow::bail!("not used by these tests")
    }
    async fn download_url(&self, key: &str, _: Option<&str>, _: std::time::Duration) -> anyhow::Result<String> {
        Ok(format!("http://blobs.invalid/{key}"))
    }
    async fn put_file(&self, _: &str, _: &std::path::Path, _: &str) -> anyhow::Result<()> {
        anyhow::bail!("not used by these tests")
    }
    async fn put_stream(&self, _: &str, _: shared::domain::media::ports::Chunks, _: &str) -> anyhow::Result<u64> {
        anyhow::bail!("not used by these tests")
    }
    async fn read_location(&self, key: &str, _: Option<&str>) -> anyhow::Result<String> {
        Ok(format!("http://blobs.invalid/{key}"))
    }
    async fn delete(&self, _: &str) -> anyhow::Result<()> {
        anyhow::bail!("not used by these tests")
    }
}

#[async_trait::async_trait]
impl MediaProbe for Probed {
    async fn probe(&self, _: &str) -> Result<ProbeReport, ProbeError> {
        Ok(self.0.clone())
    }
}

fn probed(format_name: &str, seconds: f64, codec_type: &str) -> ProbeReport {
    let stream = ProbedStream { codec_type: codec_type.into(), codec_name: "c".into(), ..Default::default() };
    ProbeReport { format_name: format_name.into(), duration_seconds: Some(seconds), streams: vec![stream] }
}

/// An embedded app whose media storage and probe are the given fakes.
async fn faked(size: u64, report: ProbeReport) -> TestApp {
    let mut test = TestApp::new(Backend::Sqlite).await;
    let app = Arc::get_mut(&mut test.app).expect("the test holds the only handle");
    app.replace_blobs(Arc::new(Sized(size)));
    app.replace_probe(Arc::new(Probed(report)));
    test
}

#[tokio::test]
async fn size_and_duration_limits_are_checked_at_finalize() {
    let five_hours = 5.0 * 3600.0;
    let refused = [
        (
            "video",
            5_000_000_001,
            probed("mov,mp4", 10.0, "video"),
            "video uploads may be at most 5 GB; this file is 5000000001 bytes",
        ),
        (
            "audio",
            500_000_001,
            probed("mp3", 10.0, "audio"),
            "audio uploads may be at most 500 MB; this file is 500000001 bytes",
        ),
        (
            "video",
            1_000,
            probed("mov,mp4", five_hours + 1.0, "video"),
            "videos may be at most 5 hours long; this one is 5.0 hours",
        ),
    ];
    for (kind, size, report, detail) in refused {
        let test = faked(size, report).await;
        let (id, _) = upload_url(&test, kind).await;
        let (status, body) = finalize(&test, kind, &id).await;
        assert_eq!((status, body), (StatusCode::BAD_REQUEST, json!({ "detail": detail })), "{kind} {size}");
    }
    let at_the_limits = [
        ("video", 5_000_000_000, probed("mov,mp4", five_hours, "video")),
        ("audio", 500_000_000, probed("mp3", 1.0, "audio")),
    ];
    for (kind, size, report) in at_the_limits {
        let test = faked(size, report).await;
        let (id, _) = upload_url(&test, kind).await;
        let (status, body) = finalize(&test, kind, &id).await;
        assert_eq!(status, StatusCode::OK, "{kind} {size}: {body}");
    }
}

/// ffprobe whose first two calls each report only once the test lets them go, so that
/// the test decides the order in which two finalizes record.
struct HeldProbe {
    probe: Ffprobe,
    calls: std::sync::atomic::AtomicUsize,
    probed: [Arc<Notify>; 2],
    go: [Arc<Notify>; 2],
}

#[async_trait::async_trait]
impl MediaProbe for HeldProbe {
    async fn probe(&self, location: &str) -> Result<ProbeReport, ProbeError> {
        let report = self.probe.probe(location).await;
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if call < 2 {
            self.probed[call].notify_one();
            self.go[call].notified().await;
        }
        report
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizes_racing_a_new_put_record_the_probe_of_the_file_they_sealed() {
    let (probed, go) =
        ([Arc::new(Notify::new()), Arc::new(Notify::new())], [Arc::new(Notify::new()), Arc::new(Notify::new())]);
    let probe = Arc::new(HeldProbe {
        probe: Ffprobe::new("ffprobe"),
        calls: Default::default(),
        probed: probed.clone(),
        go: go.clone(),
    });
    let (app, _stop) = local_app_probing_with(Some(probe)).await;
    let app = Arc::new(app);
    let (id, url) = upload_url(&app, "video").await;
    assert_eq!(put(&url, sample("video.mp4")).await, StatusCode::OK);
    let finalize_in_background =
        |app: Arc<TestApp>, id: String| tokio::spawn(async move { finalize(&app, "video", &id).await });
    // The first finalize seals and probes the 2 s video, and is held before recording.
    let first = finalize_in_background(app.clone(), id.clone());
    probed[0].notified().await;
    // The URL receives a 1 s video; a second finalize seals and probes that, and is held.
    assert_eq!(put(&url, sample("short.mp4")).await, StatusCode::OK);
    let second = finalize_in_background(app.clone(), id.clone());
    probed[1].notified().await;
    // The first records now, after the second sealed: the order that, with one sealed
    // file for both, recorded the 2 s probe for a file holding the 1 s video.
    go[0].notify_one();
    let first = first.await.unwrap();
    go[1].notify_one();
    let second = second.await.unwrap();
    assert_eq!(first.0, StatusCode::OK, "{}", first.1);
    assert_eq!((second.0, &second.1), (StatusCode::OK, &first.1), "one asset is recorded: the first's");
    let recorded_ms = first.1["duration_ms"].as_u64().unwrap();
    assert!(recorded_ms.abs_diff(2000) <= 100, "the first finalize probed the 2 s video: {recorded_ms}");
    // The recorded probe describes the file the asset points to.
    let sealed = sealed_bytes(&app, &id).await;
    assert_eq!(sealed, sample("video.mp4"));
    assert_eq!(first.1["size_bytes"].as_u64(), Some(sealed.len() as u64));
}
