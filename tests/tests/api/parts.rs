//! Long edits made in parts through the run engine (issue 35), on both backends: the
//! edit's task plans its parts (the pictures of its segments and its sound), each part
//! is a message claimed, made and recorded once, the last part queues the join, and the
//! output is the one-pass run's. A part delivered twice is made once; a cancel stops the
//! parts and a resume makes only the missing ones.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::config::Settings;
use shared::domain::media::RenderPart;
use shared::domain::nodes::{CLIP, DESTINATION, REFRAME, VIDEO_INPUT};
use shared::domain::runs::{RunId, TaskIndex, TaskStatus};
use shared::domain::work::NodeTask;

use crate::helpers::{http_get, Backend};
use crate::runs::Harness;

/// Segments of 3 s: the 10 s output below is 4 pictures (3, 3, 3 and 1 s) and its sound.
const SEGMENT: Duration = Duration::from_secs(3);
const PARTS: usize = 5;

/// Clip (1 s to 11 s of the 12 s source) → Reframe 9:16 → Destination: one task.
fn long_edit() -> Vec<(&'static str, shared::domain::nodes::NodeTypeId, Value)> {
    vec![
        ("in", VIDEO_INPUT, json!({})),
        ("clip", CLIP, json!({ "start_ms": 1000, "end_ms": 11000 })),
        ("reframe", REFRAME, json!({ "aspect_ratio": "9:16", "mode": "crop" })),
        ("out", DESTINATION, json!({})),
    ]
}

const EDGES: [(&str, &str); 3] = [("in", "clip"), ("clip", "reframe"), ("reframe", "out")];

/// A harness with `workers` workers whose long edits are made in parts of `segment`.
async fn harness(backend: Backend, workers: usize, segment: Option<Duration>) -> Harness {
    Harness::tuned_with(backend, workers, move |settings| Settings { segment, ..settings }).await
}

/// The 12 s source (30 frames a second over a sine sweep) in `folder`, uploaded.
async fn upload_source(harness: &Harness, folder: &Path) -> String {
    crate::segments::source(folder, (30, 1));
    harness.upload_bytes("video", std::fs::read(folder.join("source.mp4")).unwrap()).await
}

/// The run's one output, downloaded to `folder/name`.
async fn output_file(record: &Value, folder: &Path, name: &str) -> PathBuf {
    let outputs = record["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "{record}");
    let (status, bytes) = http_get(outputs[0]["video_url"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let path = folder.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

async fn a_long_edit_is_made_in_parts_and_joined_into_the_one_pass_output(backend: Backend) {
    let folder = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (segment, name) in [(None, "whole.mp4"), (Some(SEGMENT), "joined.mp4")] {
        let harness = harness(backend, 2, segment).await;
        let video = upload_source(&harness, folder.path()).await;
        let (agent, nodes) = harness.agent(&long_edit(), &EDGES).await;
        let run = harness.start(&agent, json!({ "video_ids": [video] })).await;
        let record = harness.finished(&run).await;
        assert_eq!(record["status"], "completed", "{record}");
        files.push(output_file(&record, folder.path(), name).await);
        let (status, view) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        let node = |name: &str| {
            view["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|node| node["original_node_id"] == nodes[name])
                .unwrap()
                .clone()
        };
        match segment {
            None => {
                assert!(node("reframe").get("progress").is_none(), "a one-pass edit shows no progress: {view}");
                assert!(record.get("progress").is_none(), "{record}");
            }
            Some(_) => {
                assert_eq!(record["progress"], json!({ "done": PARTS, "total": PARTS }), "{record}");
                for name in ["clip", "reframe", "out"] {
                    assert_eq!(node(name)["progress"], json!({ "done": PARTS, "total": PARTS }), "{view}");
                }
                assert!(node("in").get("progress").is_none(), "{view}");
                let stored = stored_run(&harness, &run).await;
                let parts: Vec<RenderPart> = stored.tasks[1].parts.iter().map(|part| part.part).collect();
                assert_eq!(
                    parts,
                    [(0, 3000), (3000, 6000), (6000, 9000), (9000, 10000)]
                        .map(|(start_ms, end_ms)| RenderPart::Picture { start_ms, end_ms })
                        .into_iter()
                        .chain([RenderPart::Sound])
                        .collect::<Vec<_>>()
                );
                let parts = &stored.tasks[1].parts;
                assert!(parts.iter().all(|part| part.claims == 1 && part.key.is_none()), "joined: {parts:?}");
            }
        }
    }
    crate::segments::assert_seamless(folder.path(), &files[0], &files[1], 1.0 / 30.0);
    // The join writes its index in room kept at the start: first, as in a one-pass output.
    for file in &files {
        let boxes = top_level_boxes(file);
        let (moov, mdat) = (boxes.iter().position(|name| name == "moov"), boxes.iter().position(|name| name == "mdat"));
        assert!(moov.is_some() && moov < mdat, "{}: {boxes:?}", file.display());
    }
}

/// The names of an MP4's top-level boxes, in order.
fn top_level_boxes(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let (mut names, mut at) = (Vec::new(), 0usize);
    while at + 8 <= bytes.len() {
        let size = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as u64;
        names.push(String::from_utf8_lossy(&bytes[at + 4..at + 8]).into_owned());
        let size = match size {
            1 => u64::from_be_bytes(bytes[at + 8..at + 16].try_into().unwrap()),
            0 => (bytes.len() - at) as u64,
            size => size,
        };
        at += size.max(8) as usize;
    }
    names
}

/// Whether the media store still holds a file at `key` (read where the toolkit reads it).
async fn stored_file(harness: &Harness, key: &str) -> bool {
    let location = harness.test.app.blobs().read_location(key, None).await.unwrap();
    match location.strip_prefix("file:") {
        Some(path) => Path::new(path).exists(),
        None => http_get(&location).await.0 == StatusCode::OK,
    }
}

async fn stored_run(harness: &Harness, run: &str) -> shared::domain::runs::Run {
    let engine = harness.test.app.engine();
    engine.runs.get_run(harness.test.organization, RunId::parse(run).unwrap()).await.unwrap().unwrap()
}

/// A run whose workers are this test's hands: the input and the edit's planning done,
/// its parts queued.
async fn planned(backend: Backend) -> (Harness, String, shared::app::Engine, NodeTask, tempfile::TempDir) {
    planned_with(backend, json!({})).await
}

/// [`planned`], the run started with `more` in its body besides its video.
async fn planned_with(
    backend: Backend,
    more: Value,
) -> (Harness, String, shared::app::Engine, NodeTask, tempfile::TempDir) {
    let (harness, run, engine, edit, folder) = input_done(backend, more).await;
    engine.worker.process(edit).await.unwrap();
    let stored = stored_run(&harness, &run).await;
    assert_eq!(stored.tasks[1].status, TaskStatus::Running, "making its parts");
    assert_eq!(stored.tasks[1].parts.len(), PARTS);
    assert!(stored.tasks[1].parts.iter().all(|part| part.status == TaskStatus::Queued));
    (harness, run, engine, edit, folder)
}

/// A run started with `more` in its body besides its video, whose workers are this
/// test's hands: its input done, the message of its edit's task returned.
async fn input_done(
    backend: Backend,
    more: Value,
) -> (Harness, String, shared::app::Engine, NodeTask, tempfile::TempDir) {
    let folder = tempfile::tempdir().unwrap();
    let harness = harness(backend, 0, Some(SEGMENT)).await;
    let video = upload_source(&harness, folder.path()).await;
    let (agent, _) = harness.agent(&long_edit(), &EDGES).await;
    let mut body = json!({ "video_ids": [video] });
    body.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
    let run = harness.start(&agent, body).await;
    let engine = harness.test.app.engine().clone();
    let (organization_id, run_id) = (harness.test.organization, RunId::parse(&run).unwrap());
    let task = move |index| NodeTask { organization_id, run_id, task: TaskIndex(index), attempt: 0, part: None };
    engine.worker.process(task(0)).await.unwrap();
    (harness, run, engine, task(1), folder)
}

/// Deliveries of each part at once: 6 × 5 = 30 workers write the one run record together.
const COPIES: usize = 6;

async fn each_part_delivered_six_times_at_once_is_made_once(backend: Backend) {
    let (harness, run, engine, edit, _folder) = planned(backend).await;
    let messages: Vec<NodeTask> = (0..PARTS as u32)
        .flat_map(|number| std::iter::repeat_n(NodeTask { part: Some(number), ..edit }, COPIES))
        .collect();
    // One delivery of each part claims it; the others wait for its claim or find it made.
    let answers = futures::future::join_all(messages.iter().map(|message| engine.worker.process(*message))).await;
    for answer in answers {
        answer.unwrap();
    }
    for number in 0..PARTS as u32 {
        engine.worker.process(NodeTask { part: Some(number), ..edit }).await.unwrap();
    }
    let stored = stored_run(&harness, &run).await;
    assert!(stored.tasks[1].parts.iter().all(|part| part.status == TaskStatus::Completed && part.claims == 1));
    assert_eq!(stored.tasks[1].status, TaskStatus::Queued, "the last part queued the join");
    let keys: Vec<String> = stored.tasks[1].parts.iter().map(|part| part.key.clone().unwrap()).collect();
    for key in &keys {
        assert!(
            key.starts_with(&format!(
                "{}{}/{run}/",
                shared::domain::runs::parts::PARTS_PREFIX,
                harness.test.organization
            )),
            "{key}"
        );
        assert!(stored_file(&harness, key).await, "{key} is stored");
    }
    // The join, delivered twice.
    let (first, second) = tokio::join!(engine.worker.process(edit), engine.worker.process(edit));
    first.unwrap();
    second.unwrap();
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1, "{record}");
    let probed = crate::runs::fetch_and_probe(record["outputs"][0]["video_url"].as_str().unwrap()).await;
    assert!((probed.duration - 10.0).abs() < 0.05, "{}", probed.duration);
    // Joined: the parts' files are deleted, and the record forgets them.
    for key in &keys {
        assert!(!stored_file(&harness, key).await, "{key} is deleted after the join");
    }
    assert!(stored_run(&harness, &run).await.tasks[1].parts.iter().all(|part| part.key.is_none()));
}

async fn a_resume_makes_only_the_parts_a_cancel_left(backend: Backend) {
    let (harness, run, engine, edit, _folder) = planned(backend).await;
    engine.worker.process(NodeTask { part: Some(0), ..edit }).await.unwrap();
    let made = stored_run(&harness, &run).await.tasks[1].parts[0].clone();
    assert_eq!(made.status, TaskStatus::Completed);
    let (status, record) = harness.test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["progress"], json!({ "done": 1, "total": PARTS }), "{record}");
    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A part delivered after the cancel is not made.
    engine.worker.process(NodeTask { part: Some(1), ..edit }).await.unwrap();
    let stored = stored_run(&harness, &run).await;
    assert_eq!(stored.tasks[1].status, TaskStatus::Cancelled);
    assert_eq!(stored.tasks[1].parts[1].status, TaskStatus::Queued, "not claimed after the cancel");
    assert!(stored_file(&harness, made.key.as_deref().unwrap()).await, "a cancelled task's parts stay for a resume");
    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{run}/resume"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let resumed = NodeTask { attempt: 1, ..edit };
    engine.worker.process(resumed).await.unwrap();
    let stored = stored_run(&harness, &run).await;
    let parts = &stored.tasks[1].parts;
    assert_eq!(parts[0], made, "the part made before the cancel is kept");
    assert!(parts[1..].iter().all(|part| part.status == TaskStatus::Queued), "{parts:?}");
    let workers = shared::serve::workers::start(&harness.test.app, 2).await.unwrap();
    let record = harness.finished(&run).await;
    // The worker that joined the parts deletes them once the join is stored, while the
    // run goes on: the run may end first.
    assert!(parts_deleted(&harness, made.key.as_deref().unwrap()).await, "used by the join, then deleted");
    drop(workers);
    assert_eq!(record["status"], "completed", "{record}");
    let stored = stored_run(&harness, &run).await;
    let joined = &stored.tasks[1].parts[0];
    assert_eq!((joined.claims, joined.status), (made.claims, made.status), "made once");
}

/// Whether the part stored at `key` is gone within 30 s (its deletion follows the join).
async fn parts_deleted(harness: &Harness, key: &str) -> bool {
    for _ in 0..300 {
        if !stored_file(harness, key).await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

/// Parts made are told by `RUN_PROGRESS` events, with the nodes' progress, at most
/// one a second per node for its parts alone (a change of status is always told).
async fn parts_made_are_told_by_progress_events_at_most_one_a_second(backend: Backend) {
    let receiver = crate::webhooks::Receiver::start(crate::webhooks::Mode::Accept).await;
    let (harness, run, engine, edit, _folder) = planned_with(backend, json!({ "callback_url": receiver.url })).await;
    // The split told of 0 parts made: a part made a second later is told too.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    engine.worker.process(NodeTask { part: Some(0), ..edit }).await.unwrap();
    let workers = shared::serve::workers::start(&harness.test.app, 2).await.unwrap();
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let events = receiver.finished_cycles(1).await;
    drop(workers);
    crate::webhooks::assert_sequences(&events);
    // Each event's view of the edit's node: (when, status, progress).
    let mut seen: Vec<(String, Value, Value)> = Vec::new();
    for event in events.iter().filter(|event| event.body["flag"] == "RUN_PROGRESS") {
        for node in event.body["updated_nodes"].as_array().unwrap() {
            if node["node_type"]["node_type_id"] == REFRAME.to_string() {
                let at = event.body["occurred_at"].as_str().unwrap().to_owned();
                seen.push((at, node["status"].clone(), node.get("progress").cloned().unwrap_or(Value::Null)));
            }
        }
    }
    assert!(
        seen.iter()
            .any(|(_, _, progress)| progress["done"].as_u64().is_some_and(|done| done > 0 && done < PARTS as u64)),
        "an event told of parts made before the last: {seen:?}"
    );
    assert_eq!(
        seen.last().map(|(_, status, progress)| (status.clone(), progress.clone())),
        Some((json!("completed"), json!({ "done": PARTS, "total": PARTS })))
    );
    // Events for parts alone (the node's status unchanged since the event before) are
    // a second apart or more.
    let time = |at: &str| chrono::DateTime::parse_from_rfc3339(at).unwrap();
    let parts_alone: Vec<_> =
        seen.windows(2).filter(|pair| pair[0].1 == pair[1].1).map(|pair| time(&pair[1].0)).collect();
    for pair in parts_alone.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= chrono::Duration::milliseconds(1000), "two progress events {gap} apart: {seen:?}");
    }
}

/// The edit's worker records its parts but cannot send them (killed between the two
/// steps, or its queue failed); its message, not acknowledged, is delivered again: that
/// delivery sends the parts still queued instead of being dropped (the task is making
/// its parts, so its claim is refused), and the run completes, each part made once.
async fn a_worker_that_stops_between_splitting_and_sending_the_parts_loses_none(backend: Backend) {
    use std::sync::Arc;

    use shared::domain::runs::worker::Worker;
    use shared::domain::work::Work;

    use crate::runs::{Recording, Unreachable};
    let (harness, run, engine, edit, _folder) = input_done(backend, json!({})).await;
    let cut_off = Worker { queue: Arc::new(Unreachable), ..engine.worker.clone() };
    let error = cut_off.process(edit).await.expect_err("the parts could not be sent");
    assert!(format!("{error:#}").contains("cannot be reached"), "{error:#}");
    let stored = stored_run(&harness, &run).await;
    assert_eq!(stored.tasks[1].parts.len(), PARTS, "the parts are recorded");
    assert!(stored.tasks[1].parts.iter().all(|part| part.status == TaskStatus::Queued), "but never sent");
    let part = |number: u32| Work::NodeTask(NodeTask { part: Some(number), ..edit });
    // Delivered again: every part is sent.
    let recording = Arc::new(Recording::default());
    Worker { queue: recording.clone(), ..engine.worker.clone() }.process(edit).await.unwrap();
    assert_eq!(*recording.0.lock().unwrap(), (0..PARTS as u32).map(part).collect::<Vec<_>>());
    // Once a part is made, another delivery sends only the parts still queued.
    engine.worker.process(NodeTask { part: Some(0), ..edit }).await.unwrap();
    let recording = Arc::new(Recording::default());
    Worker { queue: recording.clone(), ..engine.worker.clone() }.process(edit).await.unwrap();
    let sent = recording.0.lock().unwrap().clone();
    assert_eq!(sent, (1..PARTS as u32).map(part).collect::<Vec<_>>());
    engine.queue.send(&sent).await.unwrap();
    let workers = shared::serve::workers::start(&harness.test.app, 2).await.unwrap();
    let record = harness.finished(&run).await;
    drop(workers);
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().unwrap().len(), 1, "{record}");
    let stored = stored_run(&harness, &run).await;
    let claims: Vec<u32> = stored.tasks[1].parts.iter().map(|part| part.claims).collect();
    assert_eq!(claims, vec![1; PARTS], "each part made once");
}

crate::conformance!(
    a_worker_that_stops_between_splitting_and_sending_the_parts_loses_none,
    a_url_input_is_streamed_into_the_media_store_not_onto_the_tasks_disk,
    parts_made_are_told_by_progress_events_at_most_one_a_second,
    a_long_edit_is_made_in_parts_and_joined_into_the_one_pass_output,
    each_part_delivered_six_times_at_once_is_made_once,
    a_resume_makes_only_the_parts_a_cancel_left,
);

/// Bytes of padding after the video in the large URL input: a `free` box, which
/// players and ffprobe skip without reading.
const PADDING: u64 = 96 * 1024 * 1024;

/// Serves `video` followed by a `free` box of [`PADDING`] zeros, a megabyte at a time
/// with a pause between them (the download lasts a few seconds): its URL.
async fn padded_server(video: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let video = std::sync::Arc::new(video);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let video = video.clone();
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let _ = socket.read(&mut request).await;
                let length = video.len() as u64 + PADDING;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
                );
                let box_size = u32::try_from(PADDING).unwrap().to_be_bytes();
                let mut written = [head.as_bytes(), &video[..], &box_size, b"free"].concat();
                let zeros = vec![0u8; 1024 * 1024];
                let mut left = PADDING - 8;
                while left > 0 {
                    let take = left.min(zeros.len() as u64) as usize;
                    written.extend_from_slice(&zeros[..take]);
                    left -= take as u64;
                    if socket.write_all(&written).await.is_err() {
                        return;
                    }
                    written.clear();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    format!("http://{address}/long.mp4")
}

/// The bytes under `folder`, counted file by file.
fn bytes_under(folder: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(folder) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => bytes_under(&entry.path()),
            _ => entry.metadata().map(|metadata| metadata.len()).unwrap_or(0),
        })
        .sum()
}

/// A URL input is streamed into the media store (multipart on S3) as it arrives, never
/// held on the task's disk: the scratch folder, polled while the input is fetched, stays
/// under a megabyte for an input of about 100 MB, and the stored object (the run's output:
/// an MP4 in the output format, used as it is) has every byte served.
async fn a_url_input_is_streamed_into_the_media_store_not_onto_the_tasks_disk(backend: Backend) {
    let folder = tempfile::tempdir().unwrap();
    let harness = harness(backend, 1, None).await;
    let url = padded_server(crate::uploads::sample("video.mp4")).await;
    let (agent, _) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let run = harness.start(&agent, json!({ "video_urls": [url] })).await;
    let mut largest = 0;
    let record = loop {
        largest = largest.max(bytes_under(&harness.scratch));
        let (status, record) = harness.test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
        assert_eq!(status, StatusCode::OK, "{record}");
        if record["status"] != "running" {
            break record;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(record["status"], "completed", "{record}");
    assert!(largest < 1024 * 1024, "the task's scratch held {largest} bytes of a {PADDING}-byte download");
    let output = output_file(&record, folder.path(), "stored.mp4").await;
    let size = std::fs::metadata(&output).unwrap().len();
    assert_eq!(size, crate::uploads::sample("video.mp4").len() as u64 + PADDING, "every byte stored");
    let probed = crate::runs::fetch_and_probe(record["outputs"][0]["video_url"].as_str().unwrap()).await;
    assert!((probed.duration - 2.0).abs() < 0.1, "{}", probed.duration);
}

/// A file stored on S3 while its writer appends to it, as a join's ffmpeg writes its MP4
/// (appended a MiB at a time past room kept for its index, the room written when it
/// ends): each part is sent and its disk given back while the writer goes on, so the
/// file never takes more than the held first part and two others; the object is the
/// file as it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_growing_file_is_stored_while_written_and_its_disk_given_back() {
    use shared::adapters::growing::allocated;
    use shared::adapters::s3::MULTIPART_PART_BYTES as PART;
    use shared::domain::media::ports::BlobStore;
    use tokio::io::{AsyncSeekExt, AsyncWriteExt};
    const MIB: usize = 1 << 20;
    let total = 7 * PART + 3 * MIB;
    // Held: the index room, past a part, so that the first part is longer than the others.
    let (room, held) = (PART + 2 * MIB, PART + 2 * MIB + 4096);
    let first = PART + 3 * MIB;
    let s3 = crate::helpers::s3_store().await;
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("output.mp4");
    let key = format!("parts/growing-{}.mp4", uuid::Uuid::new_v4());
    let content = |at: usize| (at / MIB * 7 + at % 251) as u8;
    let (ended, finished) = tokio::sync::oneshot::channel();
    let writer = {
        let path = path.clone();
        tokio::spawn(async move {
            let mut file = tokio::fs::File::create(&path).await.unwrap();
            file.write_all(b"HEADER??").await.unwrap();
            // The room, skipped as ffmpeg's `-moov_size` skips it, and the data after it.
            file.seek(std::io::SeekFrom::Start(room as u64)).await.unwrap();
            let mut written = room;
            while written < total {
                let piece: Vec<u8> = (written..(written + MIB).min(total)).map(content).collect();
                file.write_all(&piece).await.unwrap();
                file.flush().await.unwrap();
                written += piece.len();
                // Past the held first part and two more, the parts sent give their disk
                // back while the writing goes on (waited for, within a bound).
                if written >= first + 2 * PART {
                    let mut waits = 0;
                    while allocated(&path).unwrap() > (first + 2 * PART) as u64 {
                        waits += 1;
                        assert!(waits < 600, "{} bytes on disk after {written} written", allocated(&path).unwrap());
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            // The end: the index written in its room and the header rewritten, as ffmpeg
            // writes them.
            file.seek(std::io::SeekFrom::Start(8)).await.unwrap();
            file.write_all(&vec![9u8; room - 8]).await.unwrap();
            file.seek(std::io::SeekFrom::Start(0)).await.unwrap();
            file.write_all(b"HEADER!!").await.unwrap();
            file.flush().await.unwrap();
            let _ = ended.send(true);
        })
    };
    let finished = Box::pin(async { finished.await.unwrap_or(false) });
    let stored = s3.put_growing(&key, &path, "video/mp4", held as u64, finished).await.unwrap();
    writer.await.unwrap();
    assert!(stored);
    let url = s3.download_url(&key, None, Duration::from_secs(600)).await.unwrap();
    let (status, bytes) = http_get(&url).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bytes.len(), total, "the whole file");
    assert_eq!(&bytes[..8], b"HEADER!!", "the first part as it ended");
    assert!(bytes[8..room].iter().all(|&byte| byte == 9), "the room as it ended");
    let first_wrong = (room..total).find(|&at| bytes[at] != content(at));
    assert_eq!(first_wrong, None, "every byte as written");

    // A writer that fails stores nothing.
    let failed = format!("parts/failed-{}.mp4", uuid::Uuid::new_v4());
    std::fs::write(&path, vec![1u8; 3 * PART]).unwrap();
    assert!(!s3.put_growing(&failed, &path, "video/mp4", 0, Box::pin(async { false })).await.unwrap());
    let url = s3.download_url(&failed, None, Duration::from_secs(600)).await.unwrap();
    assert_eq!(http_get(&url).await.0, StatusCode::NOT_FOUND);
}
