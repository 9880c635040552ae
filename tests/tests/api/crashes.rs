//! What survives: `serve` restarted on its data folder, `serve` killed with SIGKILL in
//! the middle of writes, and state files that are not this service's (a bulk killed on
//! DynamoDB is in `bulk_faults.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::helpers::{send, try_send};
use futures::future::join_all;
use http::{Method, StatusCode};
use serde_json::{json, Value};

pub(crate) const KEY: &str = "crash-key";

/// The `serve` binary of this checkout, built (once per test run) if it is missing or
/// older than the code: with the tests' features (`--workspace --tests`, as
/// `scripts/test.sh` builds it), so that it is the binary already built, not a second
/// build of the AWS SDK with other features.
pub(crate) fn serve_binary() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut command = Command::new(cargo);
        command.args(["build", "--quiet", "--workspace", "--bin", "serve", "--tests"]).current_dir(&workspace);
        // Not the variables cargo sets for this test binary: build scripts (ring's,
        // rustls's) watch CARGO_MANIFEST_DIR, and a build that saw it would be done
        // again by the next `cargo test` of scripts/test.sh (the chaos step).
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            let set_for_tests = ["CARGO_MANIFEST_", "CARGO_PKG_", "CARGO_CRATE_", "CARGO_BIN_", "CARGO_PRIMARY_"]
                .iter()
                .any(|prefix| name.starts_with(prefix))
                || name == "CARGO_TARGET_TMPDIR";
            if set_for_tests {
                command.env_remove(name.as_ref());
            }
        }
        let status = command.status().expect("cargo runs");
        assert!(status.success(), "building serve");
        let deps = std::env::current_exe().expect("the test binary").parent().expect("deps").to_path_buf();
        deps.parent().expect("the profile folder").join("serve")
    })
}

/// A `serve` process on a data folder; killed (SIGKILL) when dropped.
pub(crate) struct ServeProcess {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
}

fn seed_file(folder: &Path) -> PathBuf {
    let path = folder.join("seed.json");
    let seed = json!({ "organizations": [{ "id": "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e11", "name": "Crash", "slug": "crash", "api_keys": [KEY] }] });
    std::fs::write(&path, seed.to_string()).unwrap();
    path
}

impl ServeProcess {
    /// Starts `serve` on `data_dir` with the test seed and waits until it answers.
    pub(crate) async fn start(data_dir: &Path, extra: &[&str]) -> Self {
        Self::start_limited(data_dir, extra, 0).await
    }

    /// As [`Self::start`], with at most `descriptors` open files (0: as inherited).
    pub(crate) async fn start_limited(data_dir: &Path, extra: &[&str], descriptors: u64) -> Self {
        use std::os::unix::process::CommandExt;
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut command = Command::new(serve_binary());
        if descriptors > 0 {
            // SAFETY: setrlimit is async-signal-safe.
            unsafe {
                command.pre_exec(move || {
                    let limit = libc::rlimit { rlim_cur: descriptors, rlim_max: descriptors };
                    libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                    Ok(())
                });
            }
        }
        let child = command
            .args(["--addr", &addr.to_string(), "--data-dir"])
            .arg(data_dir)
            .arg("--seed")
            .arg(seed_file(data_dir))
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts");
        let process = Self { child, addr };
        for _ in 0..150 {
            if try_send(addr, Method::GET, "/whoami", KEY, vec![]).await.is_some() {
                return process;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("serve did not answer within 15 s");
    }

    pub(crate) async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        send(self.addr, method, path, KEY, body.map(|body| body.to_string().into_bytes()).unwrap_or_default()).await
    }

    /// The record of `run` once it is no longer running (bounded: two minutes).
    async fn ended(&self, run: &str) -> Value {
        for _ in 0..1200 {
            let (status, body) = self.call(Method::GET, &format!("/agent_run/{run}"), None).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            if body["status"] != "running" {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("run {run} still running after two minutes");
    }

    /// SIGKILL: nothing of the process runs after this.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The run's one output (exactly one), fetched into `folder`.
async fn only_output(record: &Value, folder: &Path) -> PathBuf {
    let outputs = record["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1, "exactly one output: {record}");
    let (status, bytes) = crate::helpers::http_get(outputs[0]["video_url"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let file = folder.join("fetched.mp4");
    std::fs::write(&file, &bytes).unwrap();
    file
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_serve_reads_back_everything_it_wrote() {
    let data = tempfile::tempdir().unwrap();
    let mut first = ServeProcess::start(data.path(), &[]).await;
    let (_, created) =
        first.call(Method::POST, "/shared-stores", Some(json!({ "name": "Products", "source_type": "crm" }))).await;
    let store = created["store"]["id"].as_str().unwrap().to_owned();
    let (status, entry) = first
        .call(
            Method::PUT,
            &format!("/shared-stores/{store}/entries/sku%2F1"),
            Some(json!({ "display_name": "One", "metadata": { "price": 5 } })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, agent) = first.call(Method::POST, "/agent/create", Some(json!({ "name": "Promo" }))).await;
    let agent = agent["agent_id"].as_str().unwrap().to_owned();
    let speed = json!({ "operations": [{ "op": "create_node", "node_type_id": shared::domain::nodes::SPEED, "params_used": { "factor": 2 } }] });
    assert_eq!(first.call(Method::POST, &format!("/agent/{agent}/update"), Some(speed)).await.0, StatusCode::OK);
    let (_, graph) = first.call(Method::GET, &format!("/agent/{agent}"), None).await;
    let (_, ticket) = first.call(Method::POST, "/uploads/image/get_upload_url", None).await;
    let upload = ticket["id"].as_str().unwrap().to_owned();
    assert_eq!(crate::uploads::put(&ticket, crate::uploads::sample("image.png")).await, StatusCode::OK);
    let (status, asset) =
        first.call(Method::POST, "/uploads/image/finalize_upload", Some(json!({ "id": upload }))).await;
    assert_eq!(status, StatusCode::OK, "{asset}");
    let (_, whoami) = first.call(Method::GET, "/whoami", None).await;
    first.kill();

    let second = ServeProcess::start(data.path(), &[]).await;
    let (_, again) = second.call(Method::GET, "/whoami", None).await;
    assert_eq!(again["organization_id"], whoami["organization_id"], "the organization and its key are kept");
    assert_eq!(again["created_at"], whoami["created_at"], "seeding again changes nothing");
    let (_, stores) = second.call(Method::GET, "/shared-stores", None).await;
    assert_eq!(stores["stores"][0]["name"], "Products");
    assert_eq!(stores["stores"][0]["entry_count"], 1);
    let (_, read) = second.call(Method::GET, &format!("/shared-stores/{store}/entries/sku%2F1"), None).await;
    assert_eq!(read, entry);
    assert_eq!(second.call(Method::GET, &format!("/agent/{agent}"), None).await.1, graph);
    assert_eq!(second.call(Method::GET, &format!("/uploads/image/{upload}"), None).await.1, asset);
    assert!(data.path().join("state.sqlite").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_in_the_middle_of_40_concurrent_puts_keeps_an_exact_store() {
    let data = tempfile::tempdir().unwrap();
    let mut server = ServeProcess::start(data.path(), &[]).await;
    let (_, created) = server.call(Method::POST, "/shared-stores", Some(json!({ "name": "s" }))).await;
    let store = created["store"]["id"].as_str().unwrap().to_owned();
    let addr = server.addr;
    // Large metadata makes each commit take a while, so the kill lands among them.
    let metadata = json!({ "blob": "x".repeat(200_000) });
    let (acknowledged_tx, mut acknowledged_rx) = tokio::sync::mpsc::unbounded_channel();
    let puts: Vec<_> = (0..40)
        .map(|i| {
            let (path, body, acknowledged) = (
                format!("/shared-stores/{store}/entries/e{i}"),
                json!({ "display_name": "d", "metadata": metadata }),
                acknowledged_tx.clone(),
            );
            tokio::spawn(async move {
                let answer = try_send(addr, Method::PUT, &path, KEY, body.to_string().into_bytes()).await;
                if matches!(answer, Some((StatusCode::OK, _))) {
                    let _ = acknowledged.send(i);
                }
                (i, answer)
            })
        })
        .collect();
    for _ in 0..3 {
        acknowledged_rx.recv().await.expect("a first few writes are answered");
    }
    server.kill();
    let answers: Vec<_> = join_all(puts).await.into_iter().map(|joined| joined.unwrap()).collect();
    let acknowledged: Vec<usize> =
        answers.iter().filter(|(_, answer)| matches!(answer, Some((StatusCode::OK, _)))).map(|(i, _)| *i).collect();
    assert!(acknowledged.len() < 40, "the kill landed in the middle of the writes");

    let restarted = ServeProcess::start(data.path(), &[]).await;
    let (_, stores) = restarted.call(Method::GET, "/shared-stores", None).await;
    let (_, entries) = restarted.call(Method::GET, &format!("/shared-stores/{store}/entries"), None).await;
    let ids: Vec<&str> =
        entries["entries"].as_array().unwrap().iter().map(|entry| entry["entry_id"].as_str().unwrap()).collect();
    assert_eq!(stores["stores"][0]["entry_count"], ids.len(), "the count equals the entries");
    for i in acknowledged {
        assert!(ids.contains(&format!("e{i}").as_str()), "acknowledged write e{i} survived");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_in_memory_keeps_nothing_on_disk() {
    let data = tempfile::tempdir().unwrap();
    let mut server = ServeProcess::start(data.path(), &["--in-memory"]).await;
    assert_eq!(server.call(Method::POST, "/shared-stores", Some(json!({ "name": "s" }))).await.0, StatusCode::OK);
    server.kill();
    assert!(!data.path().join("state.sqlite").exists());
    let again = ServeProcess::start(data.path(), &["--in-memory"]).await;
    assert_eq!(again.call(Method::GET, "/shared-stores", None).await.1, json!({ "stores": [] }));
}

/// Runs `serve` on a data folder whose state file is `contents` and returns its exit
/// status and what it printed.
fn serve_on_state_file(write_state: impl FnOnce(&Path)) -> (std::process::ExitStatus, String) {
    let data = tempfile::tempdir().unwrap();
    write_state(&data.path().join("state.sqlite"));
    let output = Command::new(serve_binary())
        .args(["--addr", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .output()
        .expect("serve runs");
    (output.status, format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

fn garbage_state(path: &Path) {
    std::fs::write(path, "these are notes, not a database\n".repeat(200)).unwrap();
}

fn foreign_state(path: &Path) {
    let connection = rusqlite::Connection::open(path).unwrap();
    connection.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello');").unwrap();
}

/// This service's own database, with 300 organizations, whose pages after the first
/// are then overwritten: only SQLite's integrity check can tell.
fn damaged_state(path: &Path) {
    drop(shared::adapters::sqlite::Sqlite::open(path).unwrap());
    let connection = rusqlite::Connection::open(path).unwrap();
    connection
        .execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
             INSERT INTO organizations SELECT hex(randomblob(16)), hex(randomblob(200)), 'slug', 1, 'free', 1000,
                 '2026-01-01T00:00:00.000Z' FROM n;",
        )
        .unwrap();
    drop(connection);
    let mut bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() > 8 * 4096, "several pages were written");
    bytes[4096..].iter_mut().enumerate().for_each(|(i, byte)| *byte = (i % 251) as u8);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_corrupt_or_foreign_state_file_stops_serve_with_a_message_naming_it() {
    type WriteState = fn(&Path);
    let cases = [
        ("garbage", garbage_state as WriteState, "it is not a SQLite database"),
        ("foreign", foreign_state, "it belongs to another program"),
        ("damaged", damaged_state, "SQLite finds it corrupt"),
    ];
    for (name, write, reason) in cases {
        let (status, printed) = serve_on_state_file(write);
        assert_eq!(status.code(), Some(1), "{name}: serve refused to start: {printed}");
        assert!(printed.contains("state.sqlite") && printed.contains(reason), "{name}: {printed}");
        assert!(!printed.contains("panicked"), "{name}: {printed}");
    }
}

/// `serve` killed with SIGKILL while ffmpeg works on a task, then started again on the
/// same folder: the task runs again from its input and the run ends with exactly one
/// output, whole and playable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_in_the_middle_of_an_ffmpeg_task_still_finishes_the_run_once() {
    use shared::domain::nodes::{DESTINATION, SPEED, VIDEO_INPUT};
    let data = tempfile::tempdir().unwrap();
    let video = data.path().join("long.mp4");
    let status = Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=duration=8:size=640x480:rate=30"])
        .args(["-f", "lavfi", "-i", "sine=duration=8", "-shortest", "-pix_fmt", "yuv420p"])
        .arg(&video)
        .status()
        .unwrap();
    assert!(status.success());
    let mut first = ServeProcess::start(data.path(), &["--workers", "1"]).await;
    let (_, ticket) = first.call(Method::POST, "/uploads/video/get_upload_url", None).await;
    let id = ticket["id"].as_str().unwrap().to_owned();
    assert_eq!(crate::uploads::put(&ticket, std::fs::read(&video).unwrap()).await, StatusCode::OK);
    let (status, body) = first.call(Method::POST, "/uploads/video/finalize_upload", Some(json!({ "id": id }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, created) = first.call(Method::POST, "/agent/create", Some(json!({ "name": "slow" }))).await;
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let operations = json!([
        { "op": "create_node", "node_type_id": VIDEO_INPUT.to_string(), "temp_ref_id": "in" },
        { "op": "create_node", "node_type_id": SPEED.to_string(), "temp_ref_id": "slow", "params_used": { "factor": 0.25 } },
        { "op": "create_node", "node_type_id": DESTINATION.to_string(), "temp_ref_id": "out" },
        { "op": "create_connection", "source_temp_ref_id": "in", "target_temp_ref_id": "slow" },
        { "op": "create_connection", "source_temp_ref_id": "slow", "target_temp_ref_id": "out" },
    ]);
    let (status, body) =
        first.call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) =
        first.call(Method::POST, &format!("/agent/{agent}/run"), Some(json!({ "video_ids": [id] }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    // Wait until the Speed task is running (ffmpeg at work), then kill the server.
    let mut running = false;
    for _ in 0..300 {
        let (_, nodes) = first.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
        let speed = nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|node| node["node_type"]["node_type_name"] == "Speed")
            .cloned();
        if speed.is_some_and(|node| node["status"] == "running") {
            running = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running, "the Speed task started");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let scratch = data.path().join("scratch");
    let left: Vec<std::ffi::OsString> =
        std::fs::read_dir(&scratch).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert!(!left.is_empty(), "the task works in a scratch folder");
    first.kill();
    // Its ffmpeg child dies with it (parent-death signal), not at the next start.
    let mut orphans = usize::MAX;
    for _ in 0..40 {
        orphans = crate::runs::ffmpeg_under(data.path());
        if orphans == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(orphans, 0, "no ffmpeg outlives the killed serve");

    let second = ServeProcess::start(data.path(), &["--workers", "1"]).await;
    for name in &left {
        assert!(!scratch.join(name).exists(), "the killed process's scratch folder {name:?} was removed at start");
    }
    let record = second.ended(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let file = only_output(&record, data.path()).await;
    let probe = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "format=duration", "-of", "default=nw=1:nk=1"])
        .arg(&file)
        .output()
        .unwrap();
    let duration: f64 = String::from_utf8_lossy(&probe.stdout).trim().parse().unwrap();
    assert!((duration - 32.0).abs() <= 0.1, "8 s at quarter speed: {duration}");
}

/// `serve` killed after a run's state changes were stored but before their webhooks were
/// delivered (the receiver held the first one unanswered): after a restart on the same
/// folder every event arrives, each once, in sequence order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_between_state_changes_and_their_webhooks_delivers_them_after_restart() {
    use crate::webhooks::{Mode, Receiver};
    use shared::domain::nodes::{DESTINATION, VIDEO_INPUT};
    let data = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(Mode::Hang).await;
    let mut first = ServeProcess::start(data.path(), &["--workers", "1"]).await;
    let (_, ticket) = first.call(Method::POST, "/uploads/video/get_upload_url", None).await;
    let id = ticket["id"].as_str().unwrap().to_owned();
    assert_eq!(crate::uploads::put(&ticket, crate::uploads::sample("video.mp4")).await, StatusCode::OK);
    let (status, body) = first.call(Method::POST, "/uploads/video/finalize_upload", Some(json!({ "id": id }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, created) = first.call(Method::POST, "/agent/create", Some(json!({ "name": "hooks" }))).await;
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let operations = json!([
        { "op": "create_node", "node_type_id": VIDEO_INPUT.to_string(), "temp_ref_id": "in" },
        { "op": "create_node", "node_type_id": DESTINATION.to_string(), "temp_ref_id": "out" },
        { "op": "create_connection", "source_temp_ref_id": "in", "target_temp_ref_id": "out" },
    ]);
    let (status, body) =
        first.call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let start = json!({ "video_ids": [id], "callback_url": receiver.url });
    let (status, body) = first.call(Method::POST, &format!("/agent/{agent}/run"), Some(start)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let mut finished = false;
    for _ in 0..600 {
        let (_, record) = first.call(Method::GET, &format!("/agent_run/{run}"), None).await;
        if record["status"] == "completed" {
            finished = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(finished, "the run completed while its webhooks waited");
    let (_, log) = first.call(Method::GET, &format!("/agent_run/{run}/webhooks"), None).await;
    let recorded = log["deliveries"].as_array().unwrap().len();
    assert!(recorded >= 3, "{log}");
    assert!(receiver.accepted().is_empty(), "nothing was delivered before the kill");
    first.kill();

    receiver.set_mode(Mode::Accept);
    let second = ServeProcess::start(data.path(), &["--workers", "1"]).await;
    let events = receiver.finished_cycles(1).await;
    let sequences: Vec<u64> = events.iter().map(|event| event.body["sequence"].as_u64().unwrap()).collect();
    assert_eq!(sequences, (1..=recorded as u64).collect::<Vec<_>>(), "every event, once");
    assert_eq!(events[0].body["flag"], "RUN_STARTED");
    assert_eq!(events.last().unwrap().body["flag"], "RUN_FINISHED");
    // The receiver answers before the sender records the answer: poll for the records.
    let mut log = Value::Null;
    for _ in 0..100 {
        log = second.call(Method::GET, &format!("/agent_run/{run}/webhooks"), None).await.1;
        if log["deliveries"].as_array().unwrap().iter().all(|delivery| delivery["state"] == "delivered") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("every delivery recorded as delivered within 10 s: {log}");
}

/// `serve`'s own scheduler loop (ticking each second here; each minute by default)
/// polls a Channel Feed that is due as soon as it is saved: its next poll moves on, with
/// no error, without anything calling the tick from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_scheduler_loop_polls_a_due_feed_by_itself() {
    use shared::domain::nodes::{CHANNEL_FEED_TRIGGER, DESTINATION, VIDEO_INPUT};
    let data = tempfile::tempdir().unwrap();
    let serve = ServeProcess::start(data.path(), &["--scheduler-tick-seconds", "1"]).await;
    let feed = crate::triggers::FeedServer::start().await;
    feed.set(200, "application/atom+xml", crate::triggers::atom(&[("v1", "Undated", "http://127.0.0.1:9/v1", None)]));
    let (_, agent) = serve.call(Method::POST, "/agent/create", Some(json!({ "name": "Feed" }))).await;
    let agent = agent["agent_id"].as_str().unwrap().to_owned();
    let operations = json!({ "operations": [
        { "op": "create_node", "node_type_id": CHANNEL_FEED_TRIGGER, "temp_ref_id": "feed",
          "params_used": { "feed_url": feed.url, "poll_minutes": 5 } },
        { "op": "create_node", "node_type_id": VIDEO_INPUT, "temp_ref_id": "in" },
        { "op": "create_node", "node_type_id": DESTINATION, "temp_ref_id": "out" },
        { "op": "create_connection", "source_temp_ref_id": "in", "target_temp_ref_id": "out" },
    ] });
    let (status, saved) = serve.call(Method::POST, &format!("/agent/{agent}/update"), Some(operations)).await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    let trigger = saved["created_nodes"][0]["agent_node_id"].as_str().unwrap().to_owned();
    let (_, before) = serve.call(Method::GET, &format!("/trigger/{trigger}"), None).await;
    let saved_at = before["next_fire_at"].as_str().unwrap().to_owned();
    for _ in 0..100 {
        let (_, view) = serve.call(Method::GET, &format!("/trigger/{trigger}"), None).await;
        if view["next_fire_at"].as_str() != Some(saved_at.as_str()) {
            assert!(view["last_error"].is_null(), "{view}");
            let next = shared::domain::time::Timestamp::parse(view["next_fire_at"].as_str().unwrap()).unwrap();
            assert!(next > shared::domain::time::Timestamp::now().after(Duration::from_secs(240)), "{view}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("serve's scheduler did not poll the feed within 10 s");
}

/// `serve` killed while a long edit's parts are made (some made, others not): after a
/// restart on the same folder the parts left are made, the parts made are kept, and the
/// run ends once with its one output, of the one-pass length and frame count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_in_the_middle_of_a_long_edits_parts_finishes_it_once() {
    use shared::domain::nodes::{CLIP, DESTINATION, REFRAME, VIDEO_INPUT};
    let data = tempfile::tempdir().unwrap();
    crate::segments::source(data.path(), (30, 1));
    let flags = ["--workers", "1", "--segment-seconds", "1"];
    let mut first = ServeProcess::start(data.path(), &flags).await;
    let (_, ticket) = first.call(Method::POST, "/uploads/video/get_upload_url", None).await;
    let id = ticket["id"].as_str().unwrap().to_owned();
    assert_eq!(
        crate::uploads::put(&ticket, std::fs::read(data.path().join("source.mp4")).unwrap()).await,
        StatusCode::OK
    );
    let (status, body) = first.call(Method::POST, "/uploads/video/finalize_upload", Some(json!({ "id": id }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, created) = first.call(Method::POST, "/agent/create", Some(json!({ "name": "long" }))).await;
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let operations = json!([
        { "op": "create_node", "node_type_id": VIDEO_INPUT.to_string(), "temp_ref_id": "in" },
        { "op": "create_node", "node_type_id": CLIP.to_string(), "temp_ref_id": "clip", "params_used": { "start_ms": 1000, "end_ms": 11000 } },
        { "op": "create_node", "node_type_id": REFRAME.to_string(), "temp_ref_id": "reframe", "params_used": { "aspect_ratio": "9:16", "mode": "crop" } },
        { "op": "create_node", "node_type_id": DESTINATION.to_string(), "temp_ref_id": "out" },
        { "op": "create_connection", "source_temp_ref_id": "in", "target_temp_ref_id": "clip" },
        { "op": "create_connection", "source_temp_ref_id": "clip", "target_temp_ref_id": "reframe" },
        { "op": "create_connection", "source_temp_ref_id": "reframe", "target_temp_ref_id": "out" },
    ]);
    let (status, body) =
        first.call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) =
        first.call(Method::POST, &format!("/agent/{agent}/run"), Some(json!({ "video_ids": [id] }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    // 10 s in parts of 1 s: 10 pictures and the sound. Kill once some are made.
    let progress = |record: &Value| (record["progress"]["done"].as_u64(), record["progress"]["total"].as_u64());
    let mut made = None;
    for _ in 0..600 {
        let (_, record) = first.call(Method::GET, &format!("/agent_run/{run}"), None).await;
        if let (Some(done), Some(total)) = progress(&record) {
            assert_eq!(total, 11, "{record}");
            if done >= 1 && done < total {
                made = Some(done);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let made = made.expect("the parts were seen being made");
    first.kill();
    let second = ServeProcess::start(data.path(), &flags).await;
    let (_, record) = second.call(Method::GET, &format!("/agent_run/{run}"), None).await;
    assert!(progress(&record).0 >= Some(made), "the parts made before the kill are kept: {record}");
    let record = second.ended(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(progress(&record), (Some(11), Some(11)), "{record}");
    let file = only_output(&record, data.path()).await;
    let probe = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v"])
        .args(["-show_entries", "stream=nb_read_frames,duration", "-of", "csv=p=0"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&probe.stdout);
    let (duration, frames) = text.trim().split_once(',').unwrap();
    assert_eq!(frames, "300", "10 s at 30 frames a second");
    assert!((duration.parse::<f64>().unwrap() - 10.0).abs() < 0.01, "{duration}");
}
