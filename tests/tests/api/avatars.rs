//! Avatar profiles on both backends: created from a video upload or an image + voice URL
//! pair, processed by the engine's workers with real ffprobe and ffmpeg checks, every
//! refusal with its status or `status_message`, and AI Avatar nodes in runs (blocked
//! while their profile is processed, then completed).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::config::Settings;
use shared::domain::nodes::{AI_AVATAR, DESTINATION};

use crate::conformance;
use crate::generation::{fetch, probe_bytes};
use crate::helpers::Backend;
use crate::runs::{upload, Harness};

conformance!(
    an_avatar_from_a_video_upload_is_processed_to_ready_with_a_preview,
    an_avatar_from_an_image_and_a_voice_url_stores_them_as_uploads,
    refused_creates_name_the_field_and_create_nothing,
    sources_that_fail_processing_say_why,
    profiles_are_the_organizations_own_and_listed_newest_first,
    a_run_on_an_avatar_being_processed_is_blocked_then_completes,
    an_avatar_node_never_shows_running_while_its_profile_is_processed,
    an_avatar_task_failed_by_its_profile_keeps_its_charge,
    a_failed_or_unknown_avatar_is_refused_at_run_start,
    pages_of_profiles_list_each_once_and_bad_limits_or_cursors_are_refused,
);

/// Media made once per test process with ffmpeg (320×240, a few seconds).
fn media() -> &'static PathBuf {
    static MEDIA: OnceLock<PathBuf> = OnceLock::new();
    MEDIA.get_or_init(|| {
        let folder = tempfile::tempdir().unwrap().keep();
        let make = |args: &[&str]| crate::helpers::ffmpeg_in(&folder, args);
        // A voice-like sound: a tone whose loudness moves three times a second.
        let voice = |seconds: u32| format!("aevalsrc=0.5*sin(2*PI*220*t)*(0.6+0.4*sin(2*PI*3*t)):s=48000:d={seconds}");
        let video = |seconds: u32, name: &str, audio: Option<String>| {
            let picture = format!("testsrc=duration={seconds}:size=320x240:rate=15");
            let mut args = vec!["-f".to_owned(), "lavfi".to_owned(), "-i".to_owned(), picture];
            if let Some(audio) = audio {
                args.extend(["-f".to_owned(), "lavfi".to_owned(), "-i".to_owned(), audio]);
            }
            args.extend(["-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", name].map(str::to_owned));
            make(&args.iter().map(String::as_str).collect::<Vec<_>>());
        };
        video(6, "speaking.mp4", Some(voice(6)));
        video(3, "short.mp4", Some(voice(3)));
        video(16, "long.mp4", Some(voice(16)));
        video(6, "mute.mp4", None);
        video(6, "silent.mp4", Some("anullsrc=r=48000:cl=mono:d=6".into()));
        // One second of voice, then five of silence.
        video(6, "mostly_silent.mp4", Some("aevalsrc=if(lt(t\\,1)\\,0.5*sin(2*PI*220*t)\\,0):s=48000:d=6".into()));
        make(&["-f", "lavfi", "-i", &voice(6), "-c:a", "aac", "voice.m4a"]);
        make(&["-f", "lavfi", "-i", &voice(3), "-c:a", "aac", "voice_short.m4a"]);
        make(&["-f", "lavfi", "-i", &voice(16), "-c:a", "aac", "voice_long.m4a"]);
        make(&["-f", "lavfi", "-i", "anullsrc=r=48000:cl=mono:d=6", "-c:a", "aac", "voice_silent.m4a"]);
        make(&["-f", "lavfi", "-i", "color=orange:size=320x240", "-frames:v", "1", "face.png"]);
        folder
    })
}

fn bytes_of(name: &str) -> Vec<u8> {
    std::fs::read(media().join(name)).unwrap()
}

/// A server that answers `/{name}` with the media file of that name, after `delay`.
async fn media_server(delay: Duration) -> String {
    crate::helpers::folder_server(media(), delay).await
}

async fn create(harness: &Harness, body: Value) -> (StatusCode, Value) {
    harness.test.call(Method::POST, "/avatar-profiles/create", Some(body)).await
}

/// Polls a profile until it leaves `pending` and `processing` (bounded).
async fn processed(harness: &Harness, id: &str) -> Value {
    for _ in 0..600 {
        let (status, body) = harness.test.call(Method::GET, &format!("/avatar-profiles/{id}"), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if !matches!(body["status"].as_str(), Some("pending" | "processing")) {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("avatar profile {id} still processing after 60 s");
}

async fn an_avatar_from_a_video_upload_is_processed_to_ready_with_a_preview(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = upload(&harness.test, "video", bytes_of("speaking.mp4"), None).await;
    let (status, created) = create(&harness, json!({"name": "  Ada  ", "sources": {"video_id": video}})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["name"], "Ada");
    assert!(matches!(created["status"].as_str(), Some("pending" | "processing")), "{created}");
    assert_eq!(created["video_preview_url"], Value::Null);
    assert_eq!(created["status_message"], Value::Null);
    let keys: Vec<&String> = created.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "video_preview_url", "name", "status", "status_message"]);
    let profile = processed(&harness, created["id"].as_str().unwrap()).await;
    assert_eq!(profile["status"], "ready", "{profile}");
    assert_eq!(profile["status_message"], Value::Null);
    // The preview: the first 3 s, 480 px wide, H.264/AAC, served by its signed link.
    let (bytes, content_type) = fetch(profile["video_preview_url"].as_str().expect("a preview")).await;
    assert_eq!(content_type, "video/mp4");
    let report = probe_bytes(&bytes);
    let picture = report.stream("video").unwrap();
    assert_eq!((picture["width"].as_u64(), picture["height"].as_u64()), (Some(480), Some(360)));
    assert_eq!(picture["codec_name"], "h264");
    assert_eq!(report.stream("audio").expect("the voice")["codec_name"], "aac");
    assert!((report.duration() - 3.0).abs() <= 0.1, "preview of {} s", report.duration());
}

async fn an_avatar_from_an_image_and_a_voice_url_stores_them_as_uploads(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server(Duration::ZERO).await;
    let body = json!({"name": "Grace", "sources": {
        "image_url": format!("{base}/face.png"), "audio_url": format!("{base}/voice.m4a"),
        "video_url": null, "video_id": null,
    }});
    let (status, created) = create(&harness, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let profile = processed(&harness, created["id"].as_str().unwrap()).await;
    assert_eq!(profile["status"], "ready", "{profile}");
    let (bytes, _) = fetch(profile["video_preview_url"].as_str().unwrap()).await;
    let report = probe_bytes(&bytes);
    assert_eq!(report.stream("video").unwrap()["width"].as_u64(), Some(480));
    assert!(report.stream("audio").is_some(), "the voice is in the preview");
    // The fetched files are uploads of the organization now: a run reads them as such.
    let stored = harness.test.app.avatars().get_avatar(harness.test.organization, profile_id(&profile)).await;
    let reference = stored.unwrap().unwrap().reference.expect("a reference");
    for (file, kind) in [(reference.image.unwrap(), "image"), (reference.audio.unwrap(), "audio")] {
        let (status, upload) = harness.test.call(Method::GET, &format!("/uploads/{kind}/{}", file.upload), None).await;
        assert_eq!((status, &upload["status"]), (StatusCode::OK, &json!("ready")), "{upload}");
    }
    // An AI Avatar of it: the picture, slowly zoomed, speaking the script for as long as
    // the speech lasts.
    let (agent, _) = harness
        .agent(
            &[
                (
                    "avatar",
                    AI_AVATAR,
                    json!({"avatar_profile_id": profile["id"], "script": "Good morning to you all."}),
                ),
                ("out", DESTINATION, json!({})),
            ],
            &[("avatar", "out")],
        )
        .await;
    let run = harness.start(&agent, json!({})).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let (bytes, _) = fetch(record["outputs"][0]["video_url"].as_str().unwrap()).await;
    let report = probe_bytes(&bytes);
    let picture = report.stream("video").unwrap();
    assert_eq!((picture["width"].as_u64(), picture["height"].as_u64()), (Some(320), Some(240)));
    let voice = report.stream("audio").expect("the avatar speaks");
    let spoken: f64 = voice["duration"].as_str().unwrap().parse().unwrap();
    assert!((report.duration() - spoken).abs() <= 0.1, "as long as the speech: {} s and {spoken} s", report.duration());
    assert!((0.5..5.0).contains(&spoken), "{spoken} s");
}

/// Another organization of the same service, as a client of its own.
async fn other_organization(harness: &Harness) -> crate::helpers::TestApp {
    let (organization, key) = harness.test.add_organization(true).await;
    crate::helpers::TestApp { app: harness.test.app.clone(), key, organization }
}

fn profile_id(profile: &Value) -> shared::domain::avatars::AvatarProfileId {
    shared::domain::avatars::AvatarProfileId::parse(profile["id"].as_str().unwrap()).unwrap()
}

async fn refused_creates_name_the_field_and_create_nothing(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = upload(&harness.test, "video", bytes_of("speaking.mp4"), None).await;
    let image = upload(&harness.test, "image", bytes_of("face.png"), None).await;
    let voice = upload(&harness.test, "audio", bytes_of("voice.m4a"), None).await;
    let other = other_organization(&harness).await;
    let foreign = upload(&other, "video", bytes_of("speaking.mp4"), None).await;
    let cases = [
        (json!({"name": "", "sources": {"video_id": video}}), "name must be 1 to 200"),
        (json!({"name": "a".repeat(201), "sources": {"video_id": video}}), "got 201"),
        (json!({"sources": {"video_id": video}}), "name is required"),
        (json!({"name": "x"}), "sources is required"),
        (json!({"name": "x", "sources": {"video_id": video, "image_id": image, "audio_id": voice}}), "not both"),
        (json!({"name": "x", "sources": {}}), "give a video source"),
        (json!({"name": "x", "sources": {"image_id": image}}), "needs an audio source"),
        (json!({"name": "x", "sources": {"face_id": image}}), "sources: unknown property: face_id"),
        (json!({"name": "x", "sources": {"video_id": voice}}), "sources.video_id: "),
        (json!({"name": "x", "sources": {"video_id": foreign}}), "was not found"),
        (json!({"name": "x", "sources": {"video_id": uuid::Uuid::new_v4()}}), "was not found"),
        (json!({"name": "x", "sources": {"video_url": "file:///etc/passwd"}}), "sources.video_url must be an http"),
        (json!({"name": "x", "sources": {"video_id": video}, "extra": 1}), "unknown property: extra"),
    ];
    for (body, expected) in cases {
        let (status, answer) = create(&harness, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let detail = answer["detail"].as_str().unwrap();
        assert!(detail.contains(expected), "{body}: {detail}");
    }
    let (status, listed) = harness.test.call(Method::GET, "/avatar-profiles", None).await;
    assert_eq!((status, &listed), (StatusCode::OK, &json!({"avatar_profiles": []})));
    // 200 characters is the limit, and a name is unique in the workspace whatever its case.
    let long = "é".repeat(200);
    let (status, _) = create(&harness, json!({"name": long, "sources": {"video_id": video}})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = create(&harness, json!({"name": "Ada", "sources": {"video_id": video}})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, answer) = create(&harness, json!({"name": " ADA ", "sources": {"video_id": video}})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(answer["detail"].as_str().unwrap().contains("already exists"), "{answer}");
    let (_, listed) = harness.test.call(Method::GET, "/avatar-profiles", None).await;
    assert_eq!(listed["avatar_profiles"].as_array().unwrap().len(), 2, "{listed}");
}

async fn sources_that_fail_processing_say_why(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server(Duration::ZERO).await;
    let cases = [
        ("short.mp4", "the video is 3.0 s long; it must be 4 to 15 s"),
        ("long.mp4", "the video is 16.0 s long; it must be 4 to 15 s"),
        ("mute.mp4", "the video has no sound"),
        ("silent.mp4", "the sound is silent"),
        ("mostly_silent.mp4", "the sound is mostly silence"),
    ];
    let mut created = Vec::new();
    for (index, (file, _)) in cases.iter().enumerate() {
        let video = upload(&harness.test, "video", bytes_of(file), None).await;
        let (status, body) =
            create(&harness, json!({"name": format!("v{index}"), "sources": {"video_id": video}})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        created.push(body["id"].as_str().unwrap().to_owned());
    }
    // URL sources: a voice of 3 s given as a video, a page that is not there, a picture
    // given as the voice.
    let url_cases = [
        (json!({"video_url": format!("{base}/short.mp4")}), "the video is 3.0 s long"),
        (json!({"video_url": format!("{base}/missing.mp4")}), "sources.video_url: "),
        (
            json!({"image_url": format!("{base}/face.png"), "audio_url": format!("{base}/face.png")}),
            "sources.audio_url: ",
        ),
        (
            json!({"image_url": format!("{base}/face.png"), "audio_url": format!("{base}/voice_short.m4a")}),
            "the voice recording is 3.0 s long; it must be 4 to 15 s",
        ),
        (
            json!({"image_url": format!("{base}/face.png"), "audio_url": format!("{base}/voice_long.m4a")}),
            "the voice recording is 16.0 s long",
        ),
        (
            json!({"image_url": format!("{base}/face.png"), "audio_url": format!("{base}/voice_silent.m4a")}),
            "the sound is silent",
        ),
    ];
    for (index, (sources, _)) in url_cases.iter().enumerate() {
        let (status, body) = create(&harness, json!({"name": format!("u{index}"), "sources": sources})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        created.push(body["id"].as_str().unwrap().to_owned());
    }
    let expected = cases.iter().map(|(_, why)| *why).chain(url_cases.iter().map(|(_, why)| *why));
    for (id, why) in created.iter().zip(expected) {
        let profile = processed(&harness, id).await;
        assert_eq!(profile["status"], "failed", "{profile}");
        let message = profile["status_message"].as_str().unwrap();
        assert!(message.contains(why), "{why}: {message}");
        assert_eq!(profile["video_preview_url"], Value::Null);
    }
}

async fn profiles_are_the_organizations_own_and_listed_newest_first(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = upload(&harness.test, "video", bytes_of("speaking.mp4"), None).await;
    let mut ids = Vec::new();
    for name in ["first", "second", "third"] {
        let (status, body) = create(&harness, json!({"name": name, "sources": {"video_id": video}})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    // A create repeated with its Idempotency-Key answers the first profile again.
    let authorization = format!("Bearer {}", harness.test.key);
    let key = uuid::Uuid::new_v4().to_string();
    let headers = [("authorization", authorization.as_str()), ("idempotency-key", key.as_str())];
    let body = serde_json::to_vec(&json!({"name": "again", "sources": {"video_id": video}})).unwrap();
    let first = harness.test.raw(Method::POST, "/avatar-profiles/create", &headers, body.clone()).await;
    assert_eq!(first.0, StatusCode::CREATED, "{}", first.1);
    let repeat = harness.test.raw(Method::POST, "/avatar-profiles/create", &headers, body).await;
    assert_eq!((repeat.0, &repeat.1["id"]), (StatusCode::CREATED, &first.1["id"]), "{}", repeat.1);
    ids.push(first.1["id"].as_str().unwrap().to_owned());
    let (_, listed) = harness.test.call(Method::GET, "/avatar-profiles", None).await;
    let names: Vec<&str> =
        listed["avatar_profiles"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["again", "third", "second", "first"]);
    let (_, other_key) = harness.test.add_organization(true).await;
    let (status, theirs) = harness.test.call_as(&other_key, Method::GET, "/avatar-profiles", None).await;
    assert_eq!((status, theirs), (StatusCode::OK, json!({"avatar_profiles": []})));
    for path in [
        format!("/avatar-profiles/{}", ids[0]),
        "/avatar-profiles/not-a-uuid".into(),
        format!("/avatar-profiles/{}", uuid::Uuid::new_v4()),
    ] {
        let (status, body) = harness.test.call_as(&other_key, Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body, json!({"detail": "Avatar profile not found"}));
    }
    let (status, _) = harness.test.call_as("wrong", Method::GET, "/avatar-profiles", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A task failed by what the caller gave keeps its charge: the AI Avatar task, charged
/// when it started, fails because its profile's video is too short (the caller's), and
/// no refund follows; waiting, blocked, for the profile charged it once.
async fn an_avatar_task_failed_by_its_profile_keeps_its_charge(backend: Backend) {
    let harness =
        Harness::tuned(backend, |settings| Settings { blocked_retry: Duration::from_millis(300), ..settings }).await;
    let base = media_server(Duration::from_secs(2)).await;
    let body = json!({"name": "Too short", "sources": {"video_url": format!("{base}/short.mp4")}});
    let (status, created) = create(&harness, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let profile = created["id"].as_str().unwrap().to_owned();
    let (agent, _) = harness
        .agent(
            &[
                ("avatar", AI_AVATAR, json!({"avatar_profile_id": profile, "script": "one two three four five"})),
                ("out", DESTINATION, json!({})),
            ],
            &[("avatar", "out")],
        )
        .await;
    let run = harness.start(&agent, json!({})).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "failed", "{record}");
    let message = record["errors"][0]["messages"][0].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("failed"), "{record}");
    let (_, ledger) = harness.test.call(Method::GET, "/credits/ledger?limit=100", None).await;
    let of_run: Vec<&Value> =
        ledger["entries"].as_array().unwrap().iter().filter(|entry| entry["run_id"] == run.as_str()).collect();
    let reasons: Vec<&str> = of_run.iter().map(|entry| entry["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["task_charge"], "charged once, not refunded: {ledger}");
    // Reserved from the script: 19 letters at 8 a second (longer than its 5 words at 2.5),
    // 3 started seconds at 10 credits.
    assert_eq!(of_run[0]["amount"], -30);
}

async fn a_run_on_an_avatar_being_processed_is_blocked_then_completes(backend: Backend) {
    let harness =
        Harness::tuned(backend, |settings| Settings { blocked_retry: Duration::from_millis(300), ..settings }).await;
    // The sources are slow to fetch: the profile is still processing when the run's task runs.
    let base = media_server(Duration::from_secs(3)).await;
    let body = json!({"name": "Slow", "sources": {"video_url": format!("{base}/speaking.mp4")}});
    let (status, created) = create(&harness, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let profile = created["id"].as_str().unwrap().to_owned();
    let script = "Hello from the avatar.";
    let (agent, ids) = harness
        .agent(
            &[
                ("avatar", AI_AVATAR, json!({"avatar_profile_id": profile, "script": script})),
                ("out", DESTINATION, json!({})),
            ],
            &[("avatar", "out")],
        )
        .await;
    let receiver = crate::webhooks::Receiver::start(crate::webhooks::Mode::Accept).await;
    let run = harness.start(&agent, json!({ "callback_url": receiver.url })).await;
    let mut saw_blocked = false;
    for _ in 0..100 {
        let (_, nodes) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
        let node =
            nodes["nodes"].as_array().unwrap().iter().find(|node| node["original_node_id"] == ids["avatar"]).cloned();
        if node.is_some_and(|node| node["status"] == "blocked") {
            let (_, record) = harness.test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
            assert_eq!(record["status"], "running");
            assert!(record["node_status_counts"]["in_progress"].as_u64().unwrap() >= 1, "{record}");
            saw_blocked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(saw_blocked, "the AI Avatar node waited, blocked, for its profile");
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let output = &record["outputs"][0];
    let (bytes, _) = fetch(output["video_url"].as_str().unwrap()).await;
    let report = probe_bytes(&bytes);
    let picture = report.stream("video").unwrap();
    assert_eq!((picture["width"].as_u64(), picture["height"].as_u64()), (Some(320), Some(240)));
    assert!(report.stream("audio").is_some(), "the avatar speaks");
    // As long as the speech: espeak-ng says the script in one to three seconds.
    assert!((0.5..4.0).contains(&report.duration()), "{} s", report.duration());
    let source = &output["sources"][0];
    assert_eq!((source["source_kind"].as_str(), source["query"].as_str()), (Some("generated"), Some(script)));
    // Webhooks told the node's wait and its end.
    let events = receiver.finished_cycles(1).await;
    let statuses: Vec<String> = events
        .iter()
        .flat_map(|event| event.body["updated_nodes"].as_array().cloned().unwrap_or_default())
        .filter(|node| node["original_node_id"] == ids["avatar"])
        .map(|node| node["status"].as_str().unwrap_or_default().to_owned())
        .collect();
    // Blocked once: looking again at the profile changes nothing (no running/blocked flips).
    assert_eq!(statuses.iter().filter(|status| *status == "blocked").count(), 1, "{statuses:?}");
    assert_eq!(statuses.last().map(String::as_str), Some("completed"), "{statuses:?}");
}

/// The AI Avatar node of a run on a profile still processed goes from queued straight to
/// `blocked` (its profile is looked at before the claim): no read of the nodes view while
/// the profile is processed, and no stored change of its task (each recorded, in the
/// change's own write, as a webhook event), shows it `running` before the profile is
/// ready.
async fn an_avatar_node_never_shows_running_while_its_profile_is_processed(backend: Backend) {
    let harness =
        Harness::tuned(backend, |settings| Settings { blocked_retry: Duration::from_millis(300), ..settings }).await;
    // The sources are slow to fetch: the profile is still processing when the run's task runs.
    let base = media_server(Duration::from_secs(3)).await;
    let body = json!({"name": "Slow", "sources": {"video_url": format!("{base}/speaking.mp4")}});
    let (status, created) = create(&harness, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let profile = created["id"].as_str().unwrap().to_owned();
    let (agent, ids) = harness
        .agent(
            &[
                ("avatar", AI_AVATAR, json!({"avatar_profile_id": profile, "script": "Never running early."})),
                ("out", DESTINATION, json!({})),
            ],
            &[("avatar", "out")],
        )
        .await;
    let receiver = crate::webhooks::Receiver::start(crate::webhooks::Mode::Accept).await;
    let run = harness.start(&agent, json!({ "callback_url": receiver.url })).await;
    // Reads of the node, each followed by a read of the profile: a node read `running`
    // while the profile (read after it) is still processed was running before it was ready.
    let mut read_while_processed = Vec::new();
    let mut processed = false;
    for _ in 0..5_000 {
        let (_, nodes) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
        let node = nodes["nodes"].as_array().unwrap().iter().find(|node| node["original_node_id"] == ids["avatar"]);
        let node_status = node.and_then(|node| node["status"].as_str()).unwrap_or_default().to_owned();
        let (_, read) = harness.test.call(Method::GET, &format!("/avatar-profiles/{profile}"), None).await;
        if !matches!(read["status"].as_str(), Some("pending" | "processing")) {
            processed = true;
            break;
        }
        assert_ne!(node_status, "running", "the node read running while its profile was {}", read["status"]);
        read_while_processed.push(node_status);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(processed, "the profile was processed");
    assert!(
        read_while_processed.iter().any(|status| status == "blocked"),
        "the node was read blocked while its profile was processed: {read_while_processed:?}"
    );
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    // Every stored change of the node, in the order of the run's writes.
    let mut events = receiver.finished_cycles(1).await;
    events.sort_by_key(|event| event.body["sequence"].as_u64());
    let statuses: Vec<String> = events
        .iter()
        .flat_map(|event| event.body["updated_nodes"].as_array().cloned().unwrap_or_default())
        .filter(|node| node["original_node_id"] == ids["avatar"])
        .map(|node| node["status"].as_str().unwrap_or_default().to_owned())
        .collect();
    let blocked = statuses.iter().position(|status| status == "blocked");
    let running = statuses.iter().position(|status| status == "running");
    assert!(blocked.is_some() && running.is_some() && blocked < running, "blocked before it ever ran: {statuses:?}");
    assert_eq!(statuses.iter().filter(|status| *status == "running").count(), 1, "{statuses:?}");
    assert_eq!(statuses.last().map(String::as_str), Some("completed"), "{statuses:?}");
}

async fn a_failed_or_unknown_avatar_is_refused_at_run_start(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = upload(&harness.test, "video", bytes_of("short.mp4"), None).await;
    let (_, created) = create(&harness, json!({"name": "Short", "sources": {"video_id": video}})).await;
    let failed = created["id"].as_str().unwrap().to_owned();
    assert_eq!(processed(&harness, &failed).await["status"], "failed");
    let other = other_organization(&harness).await;
    let their_video = upload(&other, "video", bytes_of("speaking.mp4"), None).await;
    let body = json!({"name": "Theirs", "sources": {"video_id": their_video}});
    let (status, theirs) = other.call(Method::POST, "/avatar-profiles/create", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{theirs}");
    let theirs = theirs["id"].as_str().unwrap().to_owned();
    let unknown = uuid::Uuid::new_v4().to_string();
    let cases =
        [(failed.clone(), "failed (the video is 3.0 s long"), (theirs, "was not found"), (unknown, "was not found")];
    for (profile, expected) in cases {
        let (agent, ids) = harness
            .agent(
                &[
                    ("avatar", AI_AVATAR, json!({"avatar_profile_id": profile, "script": "Hi."})),
                    ("out", DESTINATION, json!({})),
                ],
                &[("avatar", "out")],
            )
            .await;
        let (status, answer) = harness.test.call(Method::POST, &format!("/agent/{agent}/run"), Some(json!({}))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let detail = answer["detail"].as_str().unwrap();
        assert!(detail.starts_with(&format!("node {} (AI Avatar)", ids["avatar"])), "{detail}");
        assert!(detail.contains(expected), "{detail}");
    }
}

/// On Lambda (node-worker's SQS handler, on DynamoDB Local and the SQS emulator), a task
/// blocked on an avatar answers its message as done and comes back as a new message
/// after `blocked_retry` (so the queue's dead-letter count never grows); looking again
/// writes nothing to the run; once the profile is processed the task runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_lambda_a_blocked_task_comes_back_as_a_new_message_and_looking_again_writes_nothing() {
    use shared::app::{App, AppConfig, Media, SqsQueues, Storage};
    use shared::core::queue::Inbox;
    use shared::domain::runs::ports::RunRepo;
    use shared::domain::work::Work;

    let (table, s3, tasks, webhooks) = crate::runs::aws_engine_queues().await;
    let runs = table.clone();
    let settings = Settings {
        scratch: tempfile::tempdir().unwrap().keep(),
        blocked_retry: Duration::from_secs(1),
        allow_private_urls: true,
        ..Settings::default()
    };
    let queues = SqsQueues { tasks: tasks.clone(), webhooks: Some(webhooks), take: false };
    let app = App::build(AppConfig {
        storage: Storage::DynamoDb { table, queues: Some(queues) },
        media: Media::S3(s3),
        links: Some((shared::core::signing::generate_secret(), "http://127.0.0.1:9".into())),
        settings,
        secrets: None,
    });
    let test = crate::helpers::TestApp::seeded(app).await;
    let video = upload(&test, "video", bytes_of("speaking.mp4"), None).await;
    let (status, created) = test
        .call(Method::POST, "/avatar-profiles/create", Some(json!({"name": "Lambda", "sources": {"video_id": video}})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (agent, _) = crate::runs::create_agent(
        &test,
        &[
            ("avatar", AI_AVATAR, json!({"avatar_profile_id": created["id"], "script": "Hello."})),
            ("out", DESTINATION, json!({})),
        ],
        &[("avatar", "out")],
    )
    .await;
    let (status, started) = test.call(Method::POST, &format!("/agent/{agent}/run"), Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let run_id = shared::domain::runs::RunId::parse(started["run_id"].as_str().unwrap()).unwrap();

    // Takes the queue's messages (bounded), keeping the avatar's apart.
    let take = |want_task: bool| {
        let tasks = tasks.clone();
        async move {
            for _ in 0..50 {
                let deliveries = tasks.receive(10, Duration::from_secs(60)).await.unwrap();
                let mut found = Vec::new();
                for delivery in deliveries {
                    if matches!(delivery.message, Work::NodeTask(_)) == want_task {
                        found.push(delivery);
                    } else {
                        // Not yet: back to the queue at once.
                        tasks.retry_later(&delivery, Duration::ZERO).await.unwrap();
                    }
                }
                if !found.is_empty() {
                    return found;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            panic!("no {} message came", if want_task { "task" } else { "avatar" });
        }
    };
    let handle = |deliveries: Vec<shared::core::queue::Delivery<Work>>| {
        let (app, tasks) = (test.app.clone(), tasks.clone());
        async move {
            let records: Vec<Value> = deliveries
                .iter()
                .map(|delivery| json!({ "messageId": delivery.handle, "body": serde_json::to_string(&delivery.message).unwrap(), "eventSource": "aws:sqs" }))
                .collect();
            let answer = shared::runtime::sqs::handle_batch(
                &app,
                serde_json::from_value(json!({ "Records": records })).unwrap(),
            )
            .await;
            assert!(answer.batch_item_failures.is_empty(), "every message answered done: {answer:?}");
            for delivery in &deliveries {
                tasks.acknowledge(delivery).await.unwrap();
            }
        }
    };
    let stored = || async { runs.get_run(test.organization, run_id).await.unwrap().unwrap() };

    let queued = stored().await;
    handle(take(true).await).await;
    let blocked = stored().await;
    assert_eq!(blocked.counts.of(shared::domain::runs::TaskStatus::Blocked), 1, "the task waits, blocked");
    // One write, queued to blocked: the task was never stored running (no claim, then a block).
    assert_eq!(blocked.version, queued.version + 1, "the profile was looked at before the claim");
    // Its new message comes after blocked_retry; looking again changes nothing stored.
    let again = take(true).await;
    assert_eq!(again[0].receives, 1, "a new message, not a receive of the old one");
    handle(again).await;
    assert_eq!(stored().await.version, blocked.version, "looking again wrote nothing");
    // The profile is processed; the task's next look finds it ready and runs.
    handle(take(false).await).await;
    let (_, profile) =
        test.call(Method::GET, &format!("/avatar-profiles/{}", created["id"].as_str().unwrap()), None).await;
    assert_eq!(profile["status"], "ready", "{profile}");
    handle(take(true).await).await;
    let finished = stored().await;
    assert_eq!(finished.status, shared::domain::runs::RunStatus::Completed, "{:?}", finished.status_message);
}

/// Stores `count` profiles in the organization's primary workspace directly (the list is
/// what is tested, not their processing), each with a status message of `message_bytes`.
pub(crate) async fn stored_profiles(test: &crate::helpers::TestApp, count: usize, message_bytes: usize) {
    use shared::api::avatars::parse::new_avatar;
    use shared::domain::avatars::new_profile;
    let app = &test.app;
    let workspace =
        shared::domain::workspaces::ensure_primary(app.identity().as_ref(), test.organization, app.clock.now())
            .await
            .unwrap();
    for index in 0..count {
        let body = json!({"name": format!("p{index}"), "sources": {"video_url": "https://example.com/v.mp4"}});
        let new = new_avatar(body.as_object().unwrap()).unwrap();
        let mut profile = new_profile(test.organization, workspace.id, new, app.clock.now());
        profile.status_message = Some("m".repeat(message_bytes));
        assert!(app.avatars().create_avatar(&profile).await.unwrap());
    }
}

fn names(list: &Value) -> Vec<String> {
    list["avatar_profiles"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_owned()).collect()
}

async fn pages_of_profiles_list_each_once_and_bad_limits_or_cursors_are_refused(backend: Backend) {
    let harness = Harness::new(backend).await;
    stored_profiles(&harness.test, 23, 10).await;
    // Without limit or cursor: every profile, as the contract's list.
    let (status, all) = harness.test.call(Method::GET, "/avatar-profiles", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all.as_object().unwrap().keys().collect::<Vec<_>>(), ["avatar_profiles"]);
    let every = names(&all);
    assert_eq!(every.len(), 23);
    crate::openapi::conforms("list-avatar-profiles", StatusCode::OK, &all);
    // Pages of 5: each profile once, in the same order, and a null cursor after the last.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/avatar-profiles?limit=5&cursor={cursor}"),
            None => "/avatar-profiles?limit=5".to_owned(),
        };
        let (status, page) = harness.test.call(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        crate::openapi::conforms("list-avatar-profiles", StatusCode::OK, &page);
        paged.extend(names(&page));
        pages += 1;
        assert!(pages <= 5, "23 profiles in pages of 5 take 5 pages");
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => {
                assert_eq!(page["next_cursor"], Value::Null);
                break;
            }
        }
    }
    assert_eq!((pages, &paged), (5, &every));
    // A cursor alone pages by 20.
    let (_, first) = harness.test.call(Method::GET, "/avatar-profiles?limit=3", None).await;
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, rest) = harness.test.call(Method::GET, &format!("/avatar-profiles?cursor={cursor}"), None).await;
    assert_eq!(names(&rest), every[3..]);
    assert_eq!(rest["next_cursor"], Value::Null);
    for (query, expected) in [
        ("limit=0", "limit must be an integer from 1 to 100, got \"0\""),
        ("limit=101", "limit must be an integer from 1 to 100"),
        ("limit=ten", "limit must be an integer from 1 to 100"),
        ("cursor=nonsense", "cursor is not a cursor of this list"),
        ("limit=5&cursor=", "cursor is not a cursor of this list"),
    ] {
        let (status, body) = harness.test.call(Method::GET, &format!("/avatar-profiles?{query}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(body["detail"].as_str().unwrap().contains(expected), "{query}: {body}");
        crate::openapi::conforms("list-avatar-profiles", StatusCode::BAD_REQUEST, &body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_profile_past_a_lambda_response_comes_whole_through_a_link() {
    use shared::runtime::http::MAX_INLINE_BODY_BYTES;
    let test = crate::helpers::TestApp::with_media(Backend::DynamoDb, crate::helpers::s3_media().await).await;
    // 100 profiles of 64 KB each: 6.5 MB, more than a Lambda may return.
    stored_profiles(&test, 100, 64 * 1024).await;
    let (status, headers, body) =
        crate::helpers::call_function(&test, "list-avatar-profiles", "GET", "/avatar-profiles", None).await;
    let listed = crate::lambda::follow(status, &headers, &body).await;
    assert!(serde_json::to_vec(&listed).unwrap().len() > MAX_INLINE_BODY_BYTES);
    assert_eq!(names(&listed).len(), 100);
    // A page of them is small, and answered directly.
    let endpoint = shared::api::Endpoint::of("list-avatar-profiles").unwrap();
    let request = crate::helpers::lambda_event("GET", "/avatar-profiles", "limit=10", &test.key, None);
    let response = shared::runtime::http::handle(endpoint, test.app.clone(), request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let page: Value = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(names(&page).len(), 10);
}
