//! Generation tiles with the local providers: real media made by ffmpeg (and espeak-ng),
//! probed with ffprobe, fed into edits and Destinations, cited in `sources`, the same
//! bytes for the same parameters; and the refusals at run start.

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::domain::nodes::{
    AI_AVATAR, AUDIO_GENERATION, BACKGROUND_MUSIC, DESTINATION, IMAGE_GENERATION, OVERLAY, REFRAME, VIDEO_GENERATION,
    VIDEO_INPUT,
};

use crate::conformance;
use crate::helpers::Backend;
use crate::runs::Harness;

conformance!(
    a_generation_only_run_makes_a_vertical_video_through_reframe,
    each_kind_makes_the_media_it_names_served_with_its_media_type,
    a_mixed_run_overlays_a_generated_image_and_mixes_generated_music,
    the_same_parameters_make_the_same_bytes,
    generation_refusals_name_the_node_and_parameter_and_create_nothing,
);

/// What ffprobe says of a file: its format and streams.
pub(crate) struct Report {
    pub(crate) format: Value,
    pub(crate) streams: Vec<Value>,
}

impl Report {
    pub(crate) fn stream(&self, kind: &str) -> Option<&Value> {
        self.streams.iter().find(|stream| stream["codec_type"] == kind)
    }

    pub(crate) fn duration(&self) -> f64 {
        self.format["duration"].as_str().and_then(|text| text.parse().ok()).unwrap_or(0.0)
    }
}

/// Probes bytes with ffprobe.
pub(crate) fn probe_bytes(bytes: &[u8]) -> Report {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let output = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-print_format", "json", "-show_format", "-show_streams"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "ffprobe reads the file: {}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    Report { format: report["format"].clone(), streams: report["streams"].as_array().cloned().unwrap_or_default() }
}

/// GETs a media link (following S3's redirect): its bytes and `Content-Type`.
pub(crate) async fn fetch(url: &str) -> (Vec<u8>, String) {
    let (status, headers, body) = crate::helpers::http_fetch(url).await;
    assert_eq!(status, StatusCode::OK, "{url}");
    let content_type = headers.get(http::header::CONTENT_TYPE).map_or("", |value| value.to_str().unwrap()).to_owned();
    (body.to_vec(), content_type)
}

fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!((actual - expected).abs() <= 0.1, "{what}: {actual} s, expected {expected} ± 0.1 s");
}

/// The output of `record` made by the template node `node`.
fn output_of<'a>(record: &'a Value, node: &str) -> &'a Value {
    record["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|output| output["original_node_id"] == node)
        .unwrap_or_else(|| panic!("no output of {node} in {record}"))
}

async fn a_generation_only_run_makes_a_vertical_video_through_reframe(backend: Backend) {
    let harness = Harness::new(backend).await;
    let prompt = "a lighthouse at dusk";
    let (agent, ids) = harness
        .agent(
            &[
                (
                    "video",
                    VIDEO_GENERATION,
                    json!({"prompt": prompt, "resolution": "1080p", "aspect_ratio": "9:16", "duration": "5"}),
                ),
                ("reframe", REFRAME, json!({"aspect_ratio": "9:16"})),
                ("out", DESTINATION, json!({})),
            ],
            &[("video", "reframe"), ("reframe", "out")],
        )
        .await;
    // Rule 7: no video inputs at all.
    let run = harness.start(&agent, json!({})).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["inputs"], json!([]));
    let output = output_of(&record, &ids["out"]);
    let (bytes, content_type) = fetch(output["video_url"].as_str().unwrap()).await;
    assert_eq!(content_type, "video/mp4");
    let report = probe_bytes(&bytes);
    let video = report.stream("video").expect("a picture");
    assert_eq!((video["width"].as_u64(), video["height"].as_u64()), (Some(1080), Some(1920)));
    assert_eq!(video["codec_name"], "h264");
    assert_eq!(report.stream("audio").expect("a sound")["codec_name"], "aac");
    assert_close(report.duration(), 5.0, "generated video");
    assert!(output["thumbnail_url"].is_string(), "{output}");
    let sources = output["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 1, "{output}");
    let source = &sources[0];
    assert_eq!(source["source_kind"], "generated");
    assert_eq!(source["provider"], "local");
    assert_eq!(source["media_type"], "video");
    assert_eq!(source["query"], prompt);
    assert_eq!(source["placement"], "main");
    assert_eq!((source["start_ms"].as_u64(), source["end_ms"].as_u64()), (Some(0), Some(5000)));
    // The generated clip itself is a media file of the run, cited as the render asset.
    assert!(uuid::Uuid::parse_str(source["render_asset_id"].as_str().unwrap()).is_ok(), "{source}");
    // The node's view shows it completed, and the timeline zip is there.
    let (status, nodes) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    assert_eq!(status, StatusCode::OK);
    let generation = nodes["nodes"].as_array().unwrap().iter().find(|node| node["original_node_id"] == ids["video"]);
    assert_eq!(generation.unwrap()["status"], "completed", "{nodes}");
    assert!(output["timeline_prproj_url"].is_string());
}

async fn each_kind_makes_the_media_it_names_served_with_its_media_type(backend: Backend) {
    let harness = Harness::new(backend).await;
    let (agent, ids) = harness
        .agent(
            &[
                ("image", IMAGE_GENERATION, json!({"prompt": "a red fox logo", "image_size": "1024x1536", "quality": "low"})),
                ("music", AUDIO_GENERATION, json!({"mode": "music", "music_prompt": "calm piano", "music_length_ms": 4000})),
                ("effect", AUDIO_GENERATION, json!({"mode": "sound_effect", "music_prompt": "a door", "music_length_ms": 1500})),
                ("video", VIDEO_GENERATION, json!({"prompt": "waves", "model": "kling-2.1", "resolution": "480p", "aspect_ratio": "1:1", "duration": "5"})),
                ("image out", DESTINATION, json!({})),
                ("music out", DESTINATION, json!({})),
                ("effect out", DESTINATION, json!({})),
                ("video out", DESTINATION, json!({})),
            ],
            &[("image", "image out"), ("music", "music out"), ("effect", "effect out"), ("video", "video out")],
        )
        .await;
    let run = harness.start(&agent, json!({})).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 4, "{record}");

    let image = output_of(&record, &ids["image out"]);
    let (bytes, content_type) = fetch(image["video_url"].as_str().unwrap()).await;
    assert_eq!(content_type, "image/png");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let picture = probe_bytes(&bytes);
    let stream = picture.stream("video").unwrap();
    assert_eq!((stream["width"].as_u64(), stream["height"].as_u64()), (Some(1024), Some(1536)));
    assert_eq!(stream["codec_name"], "png");
    assert!(image["thumbnail_url"].is_string(), "{image}");
    assert_eq!(image["sources"][0]["media_type"], "image");
    assert_eq!(image["sources"][0]["query"], "a red fox logo");

    for (node, seconds) in [("music out", 4.0), ("effect out", 1.5)] {
        let sound = output_of(&record, &ids[node]);
        let (bytes, content_type) = fetch(sound["video_url"].as_str().unwrap()).await;
        assert_eq!(content_type, "audio/mp4", "{node}");
        let report = probe_bytes(&bytes);
        assert!(report.stream("video").is_none(), "{node} is sound only");
        assert_eq!(report.stream("audio").expect("a sound")["codec_name"], "aac");
        assert_close(report.duration(), seconds, node);
        // Its thumbnail is a picture of the waveform.
        let (thumbnail, content_type) = fetch(sound["thumbnail_url"].as_str().expect("a waveform")).await;
        assert_eq!(content_type, "image/jpeg");
        assert!(probe_bytes(&thumbnail).stream("video").is_some());
        assert_eq!(sound["sources"][0]["media_type"], "audio");
        assert_eq!(sound["sources"][0]["layout"], "audio_only");
    }

    let video = output_of(&record, &ids["video out"]);
    let (bytes, _) = fetch(video["video_url"].as_str().unwrap()).await;
    let report = probe_bytes(&bytes);
    let stream = report.stream("video").unwrap();
    assert_eq!((stream["width"].as_u64(), stream["height"].as_u64()), (Some(480), Some(480)));
    assert_close(report.duration(), 5.0, "video");
    assert!(moves(&bytes), "the generated video has visible motion");
}

/// The 40×40 grey pixels at (`x`, `y`) of a video's frame at 1 s.
fn region(bytes: &[u8], x: &str, y: &str) -> Vec<u8> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let output = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-ss", "1", "-i"])
        .arg(file.path())
        .args(["-frames:v", "1", "-vf", &format!("crop=40:40:{x}:{y}"), "-f", "rawvideo", "-pix_fmt", "gray", "-"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// Whether two pictures differ by more than encoding noise (a mean of 12 grey levels).
fn differs(a: &[u8], b: &[u8]) -> bool {
    let total: u64 = a.iter().zip(b).map(|(a, b)| u64::from(a.abs_diff(*b))).sum();
    total > 12 * a.len().min(b.len()) as u64
}

/// Whether a video's picture moves: more than 1% of the pixels of its frames at 0.2 s
/// and 4.5 s differ by more than a few levels (more than encoding noise).
fn moves(bytes: &[u8]) -> bool {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let frame = |at: &str| {
        let output = std::process::Command::new("ffmpeg")
            .args(["-v", "error", "-ss", at, "-i"])
            .arg(file.path())
            .args(["-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "gray", "-"])
            .output()
            .unwrap();
        assert!(output.status.success());
        output.stdout
    };
    let (first, last) = (frame("0.2"), frame("4.5"));
    assert_eq!(first.len(), last.len());
    let changed = first.iter().zip(&last).filter(|(a, b)| a.abs_diff(**b) > 16).count();
    changed * 100 > first.len()
}

async fn a_mixed_run_overlays_a_generated_image_and_mixes_generated_music(backend: Backend) {
    let harness = Harness::new(backend).await;
    let video = harness.upload("video", "video.mp4").await;
    let (agent, ids) = harness
        .agent(
            &[
                ("in", VIDEO_INPUT, json!({})),
                ("logo", IMAGE_GENERATION, json!({"prompt": "a small logo", "quality": "low"})),
                ("music", AUDIO_GENERATION, json!({"music_prompt": "upbeat", "music_length_ms": 3000})),
                ("overlay", OVERLAY, json!({"position": "top_right", "scale": 0.25})),
                ("bgm", BACKGROUND_MUSIC, json!({"volume": 0.5})),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "overlay"), ("logo", "overlay"), ("overlay", "bgm"), ("music", "bgm"), ("bgm", "out")],
        )
        .await;
    let run = harness.start(&agent, json!({"video_ids": [video]})).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let outputs = record["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "only the Destination delivers: {record}");
    let output = &outputs[0];
    let (bytes, _) = fetch(output["video_url"].as_str().unwrap()).await;
    let report = probe_bytes(&bytes);
    let stream = report.stream("video").unwrap();
    assert_eq!((stream["width"].as_u64(), stream["height"].as_u64()), (Some(320), Some(240)));
    assert!(report.stream("audio").is_some());
    assert_close(report.duration(), 2.0, "the uploaded video's length");
    // The generated picture is drawn in the top right corner, and only there.
    let input = crate::uploads::sample("video.mp4");
    let corner = |bytes: &[u8], x: &str| region(bytes, x, "0");
    assert!(differs(&corner(&bytes, "iw-40"), &corner(&input, "iw-40")), "the overlay is in the top right corner");
    assert!(!differs(&region(&bytes, "0", "ih-40"), &region(&input, "0", "ih-40")), "the rest is the input");
    let sources = output["sources"].as_array().unwrap();
    let generated: Vec<&Value> = sources.iter().filter(|source| source["source_kind"] == "generated").collect();
    assert_eq!(generated.len(), 2, "{output}");
    let image = generated.iter().find(|source| source["media_type"] == "image").expect("the image is cited");
    assert_eq!(image["placement"], "overlay");
    assert_eq!(image["query"], "a small logo");
    assert_eq!((image["start_ms"].as_u64(), image["end_ms"].as_u64()), (Some(0), Some(2000)));
    let music = generated.iter().find(|source| source["media_type"] == "audio").expect("the music is cited");
    assert_eq!(music["placement"], "background");
    assert_eq!(music["query"], "upbeat");
    assert_eq!(music["provider"], "local");
    // Both generation nodes completed; each made one file.
    let (_, nodes) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    for node in ["logo", "music", "overlay", "bgm"] {
        let view = nodes["nodes"].as_array().unwrap().iter().find(|view| view["original_node_id"] == ids[node]);
        assert_eq!(view.unwrap()["status"], "completed", "{node}: {nodes}");
    }
}

async fn the_same_parameters_make_the_same_bytes(backend: Backend) {
    let harness = Harness::new(backend).await;
    let (agent, ids) = harness
        .agent(
            &[
                ("image", IMAGE_GENERATION, json!({"prompt": "same every time", "quality": "low"})),
                ("music", AUDIO_GENERATION, json!({"music_prompt": "same tune", "music_length_ms": 2000})),
                ("video", VIDEO_GENERATION, json!({"prompt": "same clip", "resolution": "480p", "duration": "5"})),
                ("image out", DESTINATION, json!({})),
                ("music out", DESTINATION, json!({})),
                ("video out", DESTINATION, json!({})),
            ],
            &[("image", "image out"), ("music", "music out"), ("video", "video out")],
        )
        .await;
    let mut made: Vec<Vec<Vec<u8>>> = Vec::new();
    for _ in 0..2 {
        let run = harness.start(&agent, json!({})).await;
        let record = harness.finished(&run).await;
        assert_eq!(record["status"], "completed", "{record}");
        let mut files = Vec::new();
        for node in ["image out", "music out", "video out"] {
            files.push(fetch(output_of(&record, &ids[node])["video_url"].as_str().unwrap()).await.0);
        }
        made.push(files);
    }
    for (index, node) in ["image", "music", "video"].iter().enumerate() {
        assert!(made[0][index] == made[1][index], "two runs made different {node} bytes");
    }
    // A different prompt makes a different image.
    let body = json!({
        "update_params": {ids["image"].clone(): {"prompt": "something else"}},
        "ignore_nodes": [ids["music"].clone(), ids["video"].clone()],
    });
    let run = harness.start(&agent, body).await;
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let other = fetch(output_of(&record, &ids["image out"])["video_url"].as_str().unwrap()).await.0;
    assert!(other != made[0][0], "another prompt, another image");
}

async fn generation_refusals_name_the_node_and_parameter_and_create_nothing(backend: Backend) {
    let harness = Harness::new(backend).await;
    let refused = |agent: String, body: Value| {
        let test = &harness.test;
        async move {
            let (status, answer) = test.call(Method::POST, &format!("/agent/{agent}/run"), Some(body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
            answer["detail"].as_str().unwrap().to_owned()
        }
    };
    // A prompt the run needs.
    let (agent, ids) = harness
        .agent(&[("video", VIDEO_GENERATION, json!({})), ("out", DESTINATION, json!({}))], &[("video", "out")])
        .await;
    let detail = refused(agent.clone(), json!({})).await;
    assert_eq!(detail, format!("node {} (Video Generation) needs prompt", ids["video"]));
    // Given by update_params, the same agent runs.
    let (status, _) = harness
        .test
        .call(
            Method::POST,
            &format!("/agent/{agent}/run"),
            Some(json!({"update_params": {ids["video"].clone(): {"prompt": "now it has one", "resolution": "480p", "duration": "5"}}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (agent, ids) = harness
        .agent(
            &[("music", AUDIO_GENERATION, json!({"mode": "music"})), ("out", DESTINATION, json!({}))],
            &[("music", "out")],
        )
        .await;
    assert_eq!(refused(agent, json!({})).await, format!("node {} (Audio Generation) needs music_prompt", ids["music"]));
    // Video inputs are refused by a generation-only agent.
    let (agent, _) = harness
        .agent(
            &[("image", IMAGE_GENERATION, json!({"prompt": "x"})), ("out", DESTINATION, json!({}))],
            &[("image", "out")],
        )
        .await;
    let detail = refused(agent, json!({"video_urls": ["https://example.com/a.mp4"]})).await;
    assert!(detail.contains("generation-only"), "{detail}");
    // A generation node takes no input.
    let (agent, ids) = harness
        .agent(
            &[
                ("in", VIDEO_INPUT, json!({})),
                ("image", IMAGE_GENERATION, json!({"prompt": "x"})),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "image"), ("image", "out")],
        )
        .await;
    let video = harness.upload("video", "video.mp4").await;
    let detail = refused(agent, json!({"video_ids": [video.clone()]})).await;
    assert!(detail.starts_with(&format!("node {} (Image Generation) makes its media", ids["image"])), "{detail}");
    // An image is not a video to reframe; audio is not what Overlay takes.
    let (agent, ids) = harness
        .agent(
            &[
                ("image", IMAGE_GENERATION, json!({"prompt": "x"})),
                ("reframe", REFRAME, json!({})),
                ("out", DESTINATION, json!({})),
            ],
            &[("image", "reframe"), ("reframe", "out")],
        )
        .await;
    assert_eq!(refused(agent, json!({})).await, format!("node {} (Reframe) edits video, not an image", ids["reframe"]));
    let (agent, ids) = harness
        .agent(
            &[
                ("in", VIDEO_INPUT, json!({})),
                ("music", AUDIO_GENERATION, json!({"music_prompt": "x"})),
                ("overlay", OVERLAY, json!({})),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "overlay"), ("music", "overlay"), ("overlay", "out")],
        )
        .await;
    let detail = refused(agent, json!({"video_ids": [video.clone()]})).await;
    assert!(detail.starts_with(&format!("node {} (Overlay)", ids["overlay"])), "{detail}");
    assert!(detail.ends_with("takes a connected image, not an audio"), "{detail}");
    // A connected image with no video to put it on.
    let (agent, ids) = harness
        .agent(
            &[
                ("logo", IMAGE_GENERATION, json!({"prompt": "x"})),
                ("overlay", OVERLAY, json!({})),
                ("out", DESTINATION, json!({})),
            ],
            &[("logo", "overlay"), ("overlay", "out")],
        )
        .await;
    assert_eq!(
        refused(agent, json!({})).await,
        format!("node {} (Overlay) has a connected image but no video reaches it to edit", ids["overlay"])
    );
    // image_id and a connected image: one or the other.
    let image = harness.upload("image", "image.png").await;
    let (agent, ids) = harness
        .agent(
            &[
                ("in", VIDEO_INPUT, json!({})),
                ("logo", IMAGE_GENERATION, json!({"prompt": "x"})),
                ("overlay", OVERLAY, json!({"image_id": image})),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "overlay"), ("logo", "overlay"), ("overlay", "out")],
        )
        .await;
    assert_eq!(
        refused(agent, json!({"video_ids": [video]})).await,
        format!("node {} (Overlay): give image_id or a connected image, not both", ids["overlay"])
    );
    // An AI Avatar names a profile that must exist (none does on a new organization).
    let profile = uuid::Uuid::new_v4();
    let (agent, ids) = harness
        .agent(
            &[
                ("avatar", AI_AVATAR, json!({"avatar_profile_id": profile, "script": "Hello."})),
                ("out", DESTINATION, json!({})),
            ],
            &[("avatar", "out")],
        )
        .await;
    assert_eq!(
        refused(agent.clone(), json!({})).await,
        format!("node {} (AI Avatar): avatar_profile_id {profile} was not found", ids["avatar"])
    );
    let body = json!({"update_params": {ids["avatar"].clone(): {"script": null}}});
    assert_eq!(refused(agent, body).await, format!("node {} (AI Avatar) needs script", ids["avatar"]));
    // Only the one run that was accepted exists.
    let (status, runs) = harness.test.call(Method::GET, "/agent_runs", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
}
