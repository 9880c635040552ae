//! Triggers on both backends: Schedules firing once per due time under concurrent ticks
//! (the clock of each tick is given: no test waits a minute), missed times fired once,
//! Channel Feeds starting one run per new entry ever, feeds that fail recording why,
//! fires by hand, the trigger's read and run list, and every refusal.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::domain::nodes::{CHANNEL_FEED_TRIGGER, CLIP, DESTINATION, SCHEDULE_TRIGGER, VIDEO_INPUT};
use shared::domain::time::Timestamp;

use crate::conformance;
use crate::helpers::{Backend, TestApp};
use crate::runs::Harness;
use crate::sites::site_server;
use crate::uploads::sample;

conformance!(
    a_schedule_due_every_minute_fires_once_per_minute_under_concurrent_ticks,
    a_channel_feed_starts_one_run_per_new_entry_once,
    a_feed_that_fails_records_why_and_is_polled_again,
    fires_by_hand_reads_and_run_lists_of_triggers,
    trigger_refusals_name_the_operation_and_parameter_and_change_nothing,
    resume_never_requeues_the_trigger_and_keeps_what_started_the_run,
    another_organizations_slow_feeds_never_delay_a_schedule,
    another_organizations_feed_backlog_past_the_scan_never_hides_a_schedule,
    another_organizations_feed_backlog_past_the_scan_never_starves_a_feed,
);

/// A harness whose state no other test shares: a tick acts on every due trigger of its
/// table, so on DynamoDB the harness has a table of its own.
async fn harness(backend: Backend) -> Harness {
    match backend {
        Backend::DynamoDb => Harness::own_table(2).await,
        Backend::Sqlite => Harness::new(backend).await,
    }
}

/// An agent of a Schedule with `params` beside a Video Input `in` connected to a
/// Destination `out`; returns (agent, node IDs by name).
async fn schedule_agent(harness: &Harness, params: Value) -> (String, std::collections::HashMap<String, String>) {
    harness
        .agent(
            &[("tick", SCHEDULE_TRIGGER, params), ("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))],
            &[("in", "out")],
        )
        .await
}

/// Two ticks of the scheduler at once, at `now`; returns the runs they started.
async fn tick_twice(harness: &Harness, now: Timestamp) -> u64 {
    let app = &harness.test.app;
    let (first, second) = tokio::join!(
        shared::runtime::schedule::scheduler_tick(app, now),
        shared::runtime::schedule::scheduler_tick(app, now)
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    first["triggers"]["started"].as_u64().unwrap() + second["triggers"]["started"].as_u64().unwrap()
}

async fn trigger(test: &TestApp, id: &str) -> Value {
    let (status, body) = test.call(Method::GET, &format!("/trigger/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Every run the trigger started, newest first, read page by page.
async fn trigger_runs(test: &TestApp, id: &str) -> Vec<Value> {
    let mut runs = Vec::new();
    let mut path = format!("/trigger/{id}/runs?limit=2");
    for _ in 0..50 {
        let (status, page) = test.call(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        runs.extend(page["runs"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/trigger/{id}/runs?limit=2&cursor={cursor}"),
            None => return runs,
        }
    }
    panic!("too many pages");
}

fn at(value: &Value) -> Timestamp {
    Timestamp::parse(value.as_str().unwrap_or_else(|| panic!("not a time: {value}"))).unwrap()
}

fn minutes(count: u64) -> Duration {
    Duration::from_secs(60 * count)
}

async fn a_schedule_due_every_minute_fires_once_per_minute_under_concurrent_ticks(backend: Backend) {
    let harness = harness(backend).await;
    let video = harness.upload("video", "video.mp4").await;
    // The Video Input the run request needs is created in the same update.
    let schedule = json!({ "cron": "* * * * *", "run_request": { "video_ids": [video] } });
    let (agent, nodes) = schedule_agent(&harness, schedule).await;
    let id = nodes["tick"].clone();
    let saved = Timestamp::now();
    let view = trigger(&harness.test, &id).await;
    assert_eq!(view["agent_id"], agent.as_str());
    assert_eq!(
        view["node_type"],
        json!({ "node_type_id": SCHEDULE_TRIGGER.to_string(), "node_type_name": "Schedule" })
    );
    assert_eq!(
        (&view["enabled"], &view["last_fired_at"], &view["last_error"]),
        (&json!(true), &Value::Null, &Value::Null)
    );
    let first = at(&view["next_fire_at"]);
    assert_eq!(first.unix_millis() % 60_000, 0, "on a minute: {first}");
    assert!(first <= saved.after(minutes(1)), "the next minute: {first}");

    // At each minute, two ticks at once fire it once.
    assert_eq!(tick_twice(&harness, first).await, 1);
    assert_eq!(tick_twice(&harness, first.after(Duration::from_secs(30))).await, 0, "a minute's second tick");
    assert_eq!(tick_twice(&harness, first.after(minutes(1))).await, 1);
    assert_eq!(tick_twice(&harness, first.after(minutes(2)).after(Duration::from_secs(5))).await, 1);
    // Ten minutes down: the missed times fire once, at the first of them, then it goes on.
    assert_eq!(tick_twice(&harness, first.after(minutes(12)).after(Duration::from_secs(1))).await, 1);
    let view = trigger(&harness.test, &id).await;
    assert_eq!(at(&view["last_fired_at"]), first.after(minutes(3)));
    assert_eq!(at(&view["next_fire_at"]), first.after(minutes(13)));

    let runs = trigger_runs(&harness.test, &id).await;
    let fired: Vec<Timestamp> = runs.iter().map(|run| at(&run["triggered_by"]["triggered_at"])).collect();
    let expected: Vec<Timestamp> = [3, 2, 1, 0].iter().map(|minute| first.after(minutes(*minute))).collect();
    assert_eq!(fired, expected, "one run per due time, newest first");
    for run in &runs {
        let by = &run["triggered_by"];
        assert_eq!(by["type"], "schedule", "{by}");
        assert_eq!(by["trigger_id"], id.as_str());
        for field in ["channel_id", "video_id", "video_title", "video_url"] {
            assert!(by[field].is_null(), "{field}: {by}");
        }
    }
    // A fired run runs: the trigger is a runtime node shown completed.
    let run = runs[3]["run_id"].as_str().unwrap().to_owned();
    let record = harness.finished(&run).await;
    assert_eq!(record["status"], "completed", "{record}");
    let (_, nodes_view) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    let node = nodes_view["nodes"].as_array().unwrap().iter().find(|node| node["original_node_id"] == id.as_str());
    assert_eq!(node.map(|node| &node["status"]), Some(&json!("completed")), "{nodes_view}");
}

/// A feed server whose answer a test changes: (status, content type, body).
#[derive(Clone)]
pub(crate) struct FeedServer {
    pub(crate) url: String,
    answer: Arc<Mutex<(u16, &'static str, String)>>,
}

impl FeedServer {
    pub(crate) async fn start() -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/feed.xml", listener.local_addr().unwrap());
        let answer = Arc::new(Mutex::new((200, "application/atom+xml", String::new())));
        let served = answer.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (status, content_type, body) = served.lock().unwrap().clone();
                tokio::spawn(async move {
                    let mut request = vec![0u8; 8192];
                    let _ = socket.read(&mut request).await;
                    let head = format!(
                        "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(body.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Self { url, answer }
    }

    pub(crate) fn set(&self, status: u16, content_type: &'static str, body: String) {
        *self.answer.lock().unwrap() = (status, content_type, body);
    }
}

/// An Atom feed of YouTube's form: entries `(video id, title, link, published)`.
pub(crate) fn atom(entries: &[(&str, &str, &str, Option<Timestamp>)]) -> String {
    let entries: String = entries
        .iter()
        .map(|(id, title, link, published)| {
            let published = published.map(|at| format!("<published>{at}</published>")).unwrap_or_default();
            format!(
                "<entry><id>yt:video:{id}</id><yt:videoId>{id}</yt:videoId><title>{title}</title>\
                 <link rel=\"alternate\" href=\"{link}\"/>{published}</entry>"
            )
        })
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><feed xmlns:yt=\"http://www.youtube.com/xml/schemas/2015\" \
         xmlns=\"http://www.w3.org/2005/Atom\"><id>yt:channel:UCchan</id><yt:channelId>UCchan</yt:channelId>\
         <title>Channel</title>{entries}</feed>"
    )
}

/// An agent whose Channel Feed reads `feed`; returns (agent, trigger ID).
async fn feed_agent(harness: &Harness, feed: &str, poll_minutes: u64) -> (String, String) {
    let params = json!({ "feed_url": feed, "poll_minutes": poll_minutes, "run_request": { "update_params": {} } });
    let (agent, nodes) = harness
        .agent(
            &[("feed", CHANNEL_FEED_TRIGGER, params), ("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))],
            &[("in", "out")],
        )
        .await;
    (agent, nodes["feed"].clone())
}

async fn a_channel_feed_starts_one_run_per_new_entry_once(backend: Backend) {
    let harness = harness(backend).await;
    // `localhost` is a video site in the harness: entries' links are read with yt-dlp.
    let site = site_server(sample("video.mp4")).await.replace("127.0.0.1", "localhost");
    let feed = FeedServer::start().await;
    let saved = Timestamp::now();
    let (later, earlier) =
        (Some(saved.after(minutes(60))), Some(Timestamp::parse("2020-01-01T00:00:00.000Z").unwrap()));
    let (one, two, three) =
        (format!("{site}/watch?v=one"), format!("{site}/watch?v=two"), format!("{site}/watch?v=three"));
    let old = format!("{site}/watch?v=old");
    // Present at the first poll: two entries published after the save start runs; one
    // published before, and one without a date, are only recorded.
    let entries = vec![
        ("two", "Second video", two.as_str(), later),
        ("one", "First video", one.as_str(), later),
        ("old", "An old video", old.as_str(), earlier),
        ("undated", "No date", old.as_str(), None),
    ];
    feed.set(200, "application/atom+xml", atom(&entries));
    let (agent, id) = feed_agent(&harness, &feed.url, 5).await;
    let view = trigger(&harness.test, &id).await;
    let first_poll = at(&view["next_fire_at"]);
    assert!(first_poll <= Timestamp::now(), "a new feed is polled at the next tick: {view}");

    let now = Timestamp::now().after(Duration::from_secs(1));
    assert_eq!(tick_twice(&harness, now).await, 2, "two new entries, two runs, whatever the ticks");
    let view = trigger(&harness.test, &id).await;
    assert_eq!(at(&view["next_fire_at"]), now.after(minutes(5)), "{view}");
    assert!(view["last_error"].is_null(), "{view}");
    assert_eq!(tick_twice(&harness, now.after(minutes(2))).await, 0, "not due before poll_minutes");
    // A third entry: the next poll starts its run, and the others never again.
    let mut entries = entries;
    entries.insert(0, ("three", "Third video", three.as_str(), later));
    feed.set(200, "application/atom+xml", atom(&entries));
    assert_eq!(tick_twice(&harness, now.after(minutes(5))).await, 1);
    assert_eq!(tick_twice(&harness, now.after(minutes(10))).await, 0);
    let (status, fired) = harness.test.call(Method::POST, &format!("/trigger/{id}/fire"), None).await;
    assert_eq!((status, &fired["run_ids"]), (StatusCode::OK, &json!([])), "{fired}");
    // Off, an entry is published; on again, it is not new: the record starts anew.
    let enabled = |on: bool| {
        let (test, agent, id) = (harness.test.clone(), agent.clone(), id.clone());
        async move {
            let operations = json!([{ "op": "update_node", "agent_node_id": id, "params_used": { "enabled": on } }]);
            let (status, body) = test
                .call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations })))
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    };
    enabled(false).await;
    let while_off = format!("{site}/watch?v=off");
    entries.insert(0, ("off", "Published while off", while_off.as_str(), Some(Timestamp::now())));
    feed.set(200, "application/atom+xml", atom(&entries));
    tokio::time::sleep(Duration::from_millis(5)).await;
    enabled(true).await;
    assert_eq!(tick_twice(&harness, Timestamp::now().after(minutes(30))).await, 0, "published while off");

    let runs = trigger_runs(&harness.test, &id).await;
    assert_eq!(runs.len(), 3, "{runs:?}");
    let mut seen: Vec<(String, String)> = runs
        .iter()
        .map(|run| {
            let by = &run["triggered_by"];
            assert_eq!(by["type"], "generic", "the site as yt-dlp names it: {by}");
            assert_eq!(by["channel_id"], "UCchan");
            assert_eq!(by["trigger_id"], id.as_str());
            assert!(by["triggered_at"].is_string());
            (by["video_id"].as_str().unwrap().to_owned(), by["video_url"].as_str().unwrap().to_owned())
        })
        .collect();
    seen.sort();
    assert_eq!(seen, [("one".into(), one.clone()), ("three".into(), three.clone()), ("two".into(), two.clone())]);
    let titled = runs.iter().find(|run| run["triggered_by"]["video_id"] == "three").unwrap();
    assert_eq!(titled["triggered_by"]["video_title"], "Third video");
    // Each run read its entry's video through its Video Input.
    let record = harness.finished(titled["run_id"].as_str().unwrap()).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["outputs"].as_array().map(Vec::len), Some(1), "{record}");
}

async fn a_feed_that_fails_records_why_and_is_polled_again(backend: Backend) {
    let harness = harness(backend).await;
    let feed = FeedServer::start().await;
    feed.set(500, "text/plain", "down".into());
    let (_, id) = feed_agent(&harness, &feed.url, 15).await;
    let now = Timestamp::now().after(Duration::from_secs(1));
    assert_eq!(tick_twice(&harness, now).await, 0);
    let view = trigger(&harness.test, &id).await;
    let error = view["last_error"].as_str().unwrap_or_else(|| panic!("{view}"));
    assert!(error.contains("feed_url") && error.contains("500"), "{error}");
    assert_eq!(at(&view["next_fire_at"]), now.after(minutes(15)), "polled again at the next interval");

    feed.set(200, "application/atom+xml", "<feed><entry><title>cut short".into());
    assert_eq!(tick_twice(&harness, now.after(minutes(15))).await, 0);
    let view = trigger(&harness.test, &id).await;
    let error = view["last_error"].as_str().unwrap_or_else(|| panic!("{view}"));
    assert!(error.contains("not valid Atom or RSS"), "{error}");
    // A fire by hand reads it now and answers why it could not.
    let (status, body) = harness.test.call(Method::POST, &format!("/trigger/{id}/fire"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("not valid Atom or RSS"), "{body}");

    feed.set(200, "application/atom+xml", atom(&[]));
    assert_eq!(tick_twice(&harness, now.after(minutes(30))).await, 0);
    let view = trigger(&harness.test, &id).await;
    assert!(view["last_error"].is_null(), "a good poll clears it: {view}");
}

async fn fires_by_hand_reads_and_run_lists_of_triggers(backend: Backend) {
    let harness = harness(backend).await;
    let video = harness.upload("video", "video.mp4").await;
    let schedule = json!({ "cron": "0 3 * * *", "timezone": "Europe/Paris", "run_request": { "video_ids": [video] } });
    let (agent, nodes) = harness
        .agent(
            &[
                ("tick", SCHEDULE_TRIGGER, schedule),
                ("in", VIDEO_INPUT, json!({})),
                ("cut", CLIP, json!({ "start_ms": 0, "end_ms": 1000 })),
                ("out", DESTINATION, json!({})),
            ],
            &[("in", "cut"), ("cut", "out")],
        )
        .await;
    let id = nodes["tick"].clone();
    let fire = |id: String| {
        let test = harness.test.clone();
        async move { test.call(Method::POST, &format!("/trigger/{id}/fire"), None).await }
    };
    // By hand: a run now, `manual`.
    let before = Timestamp::now();
    let mut started = Vec::new();
    for _ in 0..3 {
        let (status, body) = fire(id.clone()).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["trigger_id"], id.as_str());
        started.push(body["run_ids"][0].as_str().unwrap().to_owned());
    }
    // With an Idempotency-Key a repeat answers the first fire's runs and starts none.
    let authorization = format!("Bearer {}", harness.test.key);
    let headers = [("authorization", authorization.as_str()), ("idempotency-key", "fire-once")];
    let path = format!("/trigger/{id}/fire");
    let first = harness.test.raw(Method::POST, &path, &headers, Vec::new()).await;
    assert_eq!(first.0, StatusCode::OK, "{first:?}");
    assert_eq!(harness.test.raw(Method::POST, &path, &headers, Vec::new()).await, first);
    started.push(first.1["run_ids"][0].as_str().unwrap().to_owned());
    let runs = trigger_runs(&harness.test, &id).await;
    let listed: Vec<&str> = runs.iter().map(|run| run["run_id"].as_str().unwrap()).collect();
    started.reverse();
    assert_eq!(listed, started, "newest first, each once over pages");
    let by = &runs[0]["triggered_by"];
    assert_eq!((&by["type"], &by["trigger_id"]), (&json!("manual"), &json!(id)), "{by}");
    assert!(at(&by["triggered_at"]) >= before);
    let view = trigger(&harness.test, &id).await;
    assert!(at(&view["last_fired_at"]) >= before, "{view}");
    // 03:00 in Paris is 01:00 or 02:00 UTC.
    let next = at(&view["next_fire_at"]).to_string();
    assert!(next.ends_with("T01:00:00.000Z") || next.ends_with("T02:00:00.000Z"), "{next}");
    // Filters as the other run lists: status, and a bad limit.
    let (status, page) = harness.test.call(Method::GET, &format!("/trigger/{id}/runs?status=failed"), None).await;
    assert_eq!((status, page["runs"].as_array().map(Vec::len)), (StatusCode::OK, Some(0)), "{page}");
    let (status, _) = harness.test.call(Method::GET, &format!("/trigger/{id}/runs?limit=0"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Disabled: 409, and no next fire.
    let update = |operations: Value| {
        let test = harness.test.clone();
        let agent = agent.clone();
        async move {
            test.call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations }))).await
        }
    };
    let (status, body) =
        update(json!([{ "op": "update_node", "agent_node_id": id, "params_used": { "enabled": false } }])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view = trigger(&harness.test, &id).await;
    assert_eq!((&view["enabled"], &view["next_fire_at"]), (&json!(false), &Value::Null), "{view}");
    let (status, body) = fire(id.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("disabled"), "{body}");
    // A later change that leaves it unable to start is allowed; the fire says why.
    let (status, body) =
        update(json!([{ "op": "update_node", "agent_node_id": id, "params_used": { "enabled": true } }])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = update(json!([{ "op": "delete_node", "agent_node_id": nodes["in"] }])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = fire(id.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let detail = body["detail"].as_str().unwrap().to_owned();
    let view = trigger(&harness.test, &id).await;
    assert_eq!(view["last_error"].as_str(), Some(detail.as_str()), "{view}");

    // 404 on all three: unknown, another organization's, not a trigger, deleted node, deleted agent.
    let (_, other_key) = harness.test.add_organization(true).await;
    let stranger = TestApp { key: other_key, ..harness.test.clone() };
    let (feed_owner, feed_nodes) = harness
        .agent(&[("feed", CHANNEL_FEED_TRIGGER, json!({ "feed_url": "http://127.0.0.1:9/feed.xml" }))], &[])
        .await;
    let deleted_node = feed_nodes["feed"].clone();
    let (second_agent, second_nodes) =
        harness.agent(&[("tick", SCHEDULE_TRIGGER, json!({ "timezone": "Asia/Tokyo" }))], &[]).await;
    let (status, _) = harness.test.call(Method::POST, &format!("/agent/{second_agent}/delete"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = harness
        .test
        .call(
            Method::POST,
            &format!("/agent/{feed_owner}/update"),
            Some(json!({ "operations": [{ "op": "delete_node", "agent_node_id": deleted_node }] })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A duplicate's trigger does not fire until its node is saved in the copy.
    let (status, copy) = harness.test.call(Method::POST, &format!("/agent/{agent}/duplicate"), None).await;
    assert_eq!(status, StatusCode::CREATED, "{copy}");
    let (_, copied) =
        harness.test.call(Method::GET, &format!("/agent/{}", copy["agent_id"].as_str().unwrap()), None).await;
    let copied_trigger = copied["agent_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["node_type"]["node_type_id"] == SCHEDULE_TRIGGER.to_string())
        .map(|node| node["agent_node_id"].as_str().unwrap().to_owned())
        .unwrap();
    let unknown = uuid::Uuid::new_v4().to_string();
    let cases: Vec<(&TestApp, String, &str)> = vec![
        (&harness.test, copied_trigger, "a duplicate's trigger not saved since"),
        (&harness.test, unknown, "an unknown ID"),
        (&harness.test, "not-a-uuid".into(), "not an ID"),
        (&stranger, id.clone(), "another organization's trigger"),
        (&harness.test, nodes["out"].clone(), "a node that is not a trigger"),
        (&harness.test, deleted_node, "a deleted trigger node"),
        (&harness.test, second_nodes["tick"].clone(), "a trigger of a deleted agent"),
    ];
    for (test, trigger_id, case) in cases {
        for (method, path) in [
            (Method::GET, format!("/trigger/{trigger_id}")),
            (Method::GET, format!("/trigger/{trigger_id}/runs")),
            (Method::POST, format!("/trigger/{trigger_id}/fire")),
        ] {
            let (status, body) = test.call(method, &path, None).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{case}: {path}: {body}");
            assert_eq!(body, json!({ "detail": "Trigger not found" }), "{case}");
        }
    }
}

async fn trigger_refusals_name_the_operation_and_parameter_and_change_nothing(backend: Backend) {
    let harness = harness(backend).await;
    let (agent, nodes) =
        harness.agent(&[("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))], &[("in", "out")]).await;
    let missing_upload = uuid::Uuid::new_v4().to_string();
    let cases = [
        (SCHEDULE_TRIGGER, json!({ "cron": "* * * * * *" }), "params_used.cron"),
        (SCHEDULE_TRIGGER, json!({ "cron": "0 0 30 2 *" }), "never matches a date"),
        (SCHEDULE_TRIGGER, json!({ "cron": "61 * * * *" }), "params_used.cron"),
        (SCHEDULE_TRIGGER, json!({ "cron": "0 9 * * *", "timezone": "Mars/Olympus" }), "params_used.timezone"),
        (SCHEDULE_TRIGGER, json!({ "timezone": "Nowhere/Land" }), "params_used.timezone"),
        (
            SCHEDULE_TRIGGER,
            json!({ "cron": "0 9 * * *", "run_request": { "video_ids": [missing_upload] } }),
            "params_used.run_request: video_ids[0]",
        ),
        (SCHEDULE_TRIGGER, json!({ "cron": "0 9 * * *", "run_request": { "colour": 1 } }), "params_used.run_request"),
        (SCHEDULE_TRIGGER, json!({ "cron": "0 9 * * *", "run_request": {} }), "params_used.run_request"),
        (CHANNEL_FEED_TRIGGER, json!({ "feed_url": "ftp://example.com/feed" }), "params_used.feed_url"),
        (CHANNEL_FEED_TRIGGER, json!({ "feed_url": "http://127.0.0.1:9/f", "poll_minutes": 4 }), "poll_minutes"),
        (CHANNEL_FEED_TRIGGER, json!({ "feed_url": "http://127.0.0.1:9/f", "poll_minutes": 1441 }), "poll_minutes"),
        (CHANNEL_FEED_TRIGGER, json!({ "feed_url": format!("http://127.0.0.1:9/{}", "x".repeat(2100)) }), "feed_url"),
        (
            CHANNEL_FEED_TRIGGER,
            json!({ "feed_url": "http://127.0.0.1:9/f", "run_request": { "video_ids": [] } }),
            "params_used.run_request",
        ),
        (
            CHANNEL_FEED_TRIGGER,
            json!({ "feed_url": "http://127.0.0.1:9/f", "run_request": { "update_params": { "nope": {} } } }),
            "params_used.run_request",
        ),
    ];
    let (_, before) = harness.test.call(Method::GET, &format!("/agent/{agent}"), None).await;
    for (kind, params, expected) in cases {
        // The refused node is the second operation: the refusal names it.
        let operations = json!([
            { "op": "update_node", "agent_node_id": nodes["out"], "params_used": {} },
            { "op": "create_node", "node_type_id": kind.to_string(), "params_used": params },
        ]);
        let (status, body) = harness
            .test
            .call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations })))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{params}: {body}");
        let detail = body["detail"].as_str().unwrap_or_else(|| panic!("{body}"));
        assert!(detail.starts_with("operations[1]: ") && detail.contains(expected), "{params}: {detail}");
    }
    let (_, after) = harness.test.call(Method::GET, &format!("/agent/{agent}"), None).await;
    assert_eq!(before, after, "nothing was saved");
    // An agent may have at most 20 triggers.
    let operations: Vec<Value> = (0..21)
        .map(|_| json!({ "op": "create_node", "node_type_id": SCHEDULE_TRIGGER.to_string(), "params_used": {} }))
        .collect();
    let (status, body) = harness
        .test
        .call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations })))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("operations[20]: an agent may have at most 20 trigger nodes"));
}

/// With the SSRF guard of a deployment, a feed on a private address is refused when saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_on_a_private_address_is_refused_when_the_deployment_guards() {
    let harness = Harness::guarded().await;
    let (agent, _) = harness.agent(&[("out", DESTINATION, json!({}))], &[]).await;
    for url in ["http://127.0.0.1:8080/feed.xml", "http://10.0.0.8/feed.xml", "http://[::1]/feed.xml"] {
        let operations = json!([{ "op": "create_node", "node_type_id": CHANNEL_FEED_TRIGGER.to_string(), "params_used": { "feed_url": url } }]);
        let (status, body) = harness
            .test
            .call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations })))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.starts_with("operations[0]: params_used.feed_url: "), "{detail}");
    }
}

async fn resume_never_requeues_the_trigger_and_keeps_what_started_the_run(backend: Backend) {
    // No workers: the fired run waits, is cancelled, then resumed.
    let harness = match backend {
        Backend::Sqlite => Harness::with_workers(backend, 0).await,
        Backend::DynamoDb => Harness::own_table(0).await,
    };
    let video = harness.upload("video", "video.mp4").await;
    let schedule = json!({ "cron": "0 0 1 1 *", "run_request": { "video_ids": [video] } });
    let (_, nodes) = schedule_agent(&harness, schedule).await;
    let id = nodes["tick"].clone();
    let (status, fired) = harness.test.call(Method::POST, &format!("/trigger/{id}/fire"), None).await;
    assert_eq!(status, StatusCode::OK, "{fired}");
    let run = fired["run_ids"][0].as_str().unwrap().to_owned();
    let (_, before) = harness.test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
    let (status, body) = harness.test.call(Method::POST, &format!("/agent_run/{run}/cancel"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, resumed) = harness.test.call(Method::POST, &format!("/agent_run/{run}/resume"), None).await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    let (_, nodes_view) = harness.test.call(Method::GET, &format!("/agent_run/{run}/nodes"), None).await;
    let runtime_trigger = nodes_view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["original_node_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{nodes_view}"));
    assert_eq!(runtime_trigger["status"], "completed", "{nodes_view}");
    let requeued = resumed["requeued_nodes"].to_string();
    assert!(!requeued.contains(runtime_trigger["agent_node_id"].as_str().unwrap()), "{resumed}");
    assert!(resumed["nodes_queued"].as_u64().unwrap() >= 1, "{resumed}");
    let (_, after) = harness.test.call(Method::GET, &format!("/agent_run/{run}"), None).await;
    assert_eq!(after["triggered_by"], before["triggered_by"], "{after}");
    assert_eq!(after["triggered_by"]["type"], "manual");
}

/// A fire that fails for a reason of ours (DynamoDB failing the run's write) says so in
/// `last_error`, is tried again by the ticks of the next 10 minutes, then gives that
/// time up and fires at the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_schedule_whose_run_cannot_be_stored_says_why_and_is_tried_again_for_a_while() {
    let table = shared::adapters::dynamodb::DynamoDb::connect(format!("own-{}", uuid::Uuid::new_v4())).await;
    table.ensure_table().await.unwrap();
    let failing = table.with_interceptor(crate::faults::failing_claimed_run_starts());
    let harness = Harness::through_table(move |_| failing).await;
    let video = harness.upload("video", "video.mp4").await;
    let schedule = json!({ "cron": "0 * * * *", "run_request": { "video_ids": [video] } });
    let (_, nodes) = schedule_agent(&harness, schedule).await;
    let id = nodes["tick"].clone();
    let due = at(&trigger(&harness.test, &id).await["next_fire_at"]);
    assert_eq!(tick_twice(&harness, due).await, 0);
    let view = trigger(&harness.test, &id).await;
    assert!(view["last_error"].as_str().unwrap().contains("tried again"), "{view}");
    assert_eq!(at(&view["next_fire_at"]), due, "still due: {view}");
    assert_eq!(tick_twice(&harness, due.after(minutes(9))).await, 0);
    assert_eq!(at(&trigger(&harness.test, &id).await["next_fire_at"]), due);
    // Past the window: that time is given up, the next hour is due.
    assert_eq!(tick_twice(&harness, due.after(minutes(11))).await, 0);
    let view = trigger(&harness.test, &id).await;
    assert_eq!(at(&view["next_fire_at"]), due.after(minutes(60)), "{view}");
    assert!(view["last_error"].is_string(), "{view}");
    assert!(trigger_runs(&harness.test, &id).await.is_empty());
}

/// A server whose every answer trickles, one byte every 10 s (a feed that never finishes
/// within a read's deadline): one listener, a task per connection, ended when its reader
/// goes or after a bounded number of bytes.
async fn slow_feed_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/feed.xml", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0u8; 8192];
                let _ = socket.read(&mut request).await;
                for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/atom+xml\r\n".iter().take(30) {
                    if socket.write_all(&[*byte]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
            });
        }
    });
    url
}

/// Organization A has 200 Channel Feeds that each answer a byte every 10 s, all due
/// before organization B's every-minute Schedule: one tick fires B's Schedule for its
/// due time (its phase comes first), and polls A's feeds only within A's share of the
/// tick, each read given up at its deadline; the rest of A's wait for the next tick.
async fn another_organizations_slow_feeds_never_delay_a_schedule(backend: Backend) {
    use shared::domain::triggers::{FEED_READ_BUDGET, ORG_SHARE_PER_TICK};
    let harness = harness(backend).await;
    let feed = slow_feed_server().await;
    let (organization, key) = harness.test.add_organization(true).await;
    let a = TestApp { app: harness.test.app.clone(), key, organization };
    // 10 agents of 20 feeds (an agent's most triggers): 200 feeds, due at once.
    let params = json!({ "feed_url": feed, "poll_minutes": 5, "run_request": { "update_params": {} } });
    let mut feeds = Vec::new();
    for _ in 0..10 {
        let names: Vec<String> = (0..20).map(|i| format!("feed{i}")).collect();
        let mut nodes: Vec<(&str, shared::domain::nodes::NodeTypeId, Value)> =
            names.iter().map(|name| (name.as_str(), CHANNEL_FEED_TRIGGER, params.clone())).collect();
        nodes.extend([("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))]);
        let (_, ids) = crate::runs::create_agent(&a, &nodes, &[("in", "out")]).await;
        feeds.extend(names.iter().map(|name| ids[name].clone()));
    }
    // B's Schedule, saved after: its first due time is the next minute, after A's feeds'.
    let video = harness.upload("video", "video.mp4").await;
    let schedule = json!({ "cron": "* * * * *", "run_request": { "video_ids": [video] } });
    let (_, nodes) = schedule_agent(&harness, schedule).await;
    let id = nodes["tick"].clone();
    let due = at(&trigger(&harness.test, &id).await["next_fire_at"]);

    let report = shared::runtime::schedule::scheduler_tick(&harness.test.app, due).await.unwrap();
    let triggers = &report["triggers"];
    assert_eq!((&triggers["due"], &triggers["organizations"]), (&json!(201), &json!(2)), "{report}");
    assert_eq!((&triggers["schedules"], &triggers["started"]), (&json!(1), &json!(1)), "B fired: {report}");
    // A's share was polled, each read given up at its deadline (the tick bounded by it);
    // the rest wait for the next tick.
    let share = ORG_SHARE_PER_TICK as u64;
    assert_eq!((&triggers["feeds"], &triggers["feeds_timed_out"]), (&json!(share), &json!(share)), "{report}");
    assert_eq!(triggers["deferred"], 200 - share, "{report}");
    assert_eq!(triggers["failed"], share, "{report}");

    // B's run exists for that due time.
    let runs = trigger_runs(&harness.test, &id).await;
    let fired: Vec<Timestamp> = runs.iter().map(|run| at(&run["triggered_by"]["triggered_at"])).collect();
    assert_eq!(fired, [due], "{runs:?}");
    // Each polled feed says why it was not read; the others are still due.
    let mut timed_out = 0;
    for feed in &feeds {
        let view = trigger(&a, feed).await;
        match view["last_error"].as_str() {
            Some(error) => {
                let deadline = format!("within {} s", FEED_READ_BUDGET.as_secs());
                assert!(error.contains("feed_url") && error.contains(&deadline), "{error}");
                assert_eq!(at(&view["next_fire_at"]), due.after(minutes(5)), "{view}");
                timed_out += 1;
            }
            None => assert!(at(&view["next_fire_at"]) <= due, "still due: {view}"),
        }
    }
    assert_eq!(timed_out, share);
}

/// Organization A (a second organization of `harness`) with `count` Channel Feeds of
/// one agent, all due now (before anything saved after); returns A and their IDs.
async fn feed_backlog(harness: &Harness, feed: &FeedServer, count: usize) -> (TestApp, Vec<String>) {
    let (organization, key) = harness.test.add_organization(true).await;
    let a = TestApp { app: harness.test.app.clone(), key, organization };
    let params = json!({ "feed_url": feed.url, "poll_minutes": 5, "run_request": { "update_params": {} } });
    let names: Vec<String> = (0..count).map(|i| format!("feed{i}")).collect();
    let mut nodes: Vec<(&str, shared::domain::nodes::NodeTypeId, Value)> =
        names.iter().map(|name| (name.as_str(), CHANNEL_FEED_TRIGGER, params.clone())).collect();
    nodes.extend([("in", VIDEO_INPUT, json!({})), ("out", DESTINATION, json!({}))]);
    let (_, ids) = crate::runs::create_agent(&a, &nodes, &[("in", "out")]).await;
    (a, names.iter().map(|name| ids[name].clone()).collect())
}

/// Organization A has more overdue Channel Feeds than a tick's scan (here a scan of 2,
/// A 4 feeds; the bound is the same rule at 1,000), all due before organization B's
/// every-minute Schedule: one tick fires B's Schedule (Schedules have their own due
/// index, read with their own bound), and polls no more of A's feeds than the scan.
async fn another_organizations_feed_backlog_past_the_scan_never_hides_a_schedule(backend: Backend) {
    use shared::domain::triggers::TickLimits;
    let harness = harness(backend).await;
    let feed = FeedServer::start().await;
    feed.set(200, "application/atom+xml", atom(&[]));
    let (a, feeds) = feed_backlog(&harness, &feed, 4).await;
    let video = harness.upload("video", "video.mp4").await;
    let schedule = json!({ "cron": "* * * * *", "run_request": { "video_ids": [video] } });
    let (_, nodes) = schedule_agent(&harness, schedule).await;
    let id = nodes["tick"].clone();
    let due = at(&trigger(&harness.test, &id).await["next_fire_at"]);
    for feed in &feeds {
        assert!(at(&trigger(&a, feed).await["next_fire_at"]) < due, "A's feeds are due first");
    }

    let limits = TickLimits { scan: 2, pages: 1, ..TickLimits::default() };
    let report = shared::runtime::schedule::scheduler_tick_within(&harness.test.app, due, limits).await.unwrap();
    let triggers = &report["triggers"];
    assert_eq!((&triggers["schedules"], &triggers["started"]), (&json!(1), &json!(1)), "B fired: {report}");
    assert_eq!(triggers["feeds"], 2, "the feeds' scan keeps to its bound: {report}");
    let runs = trigger_runs(&harness.test, &id).await;
    let fired: Vec<Timestamp> = runs.iter().map(|run| at(&run["triggered_by"]["triggered_at"])).collect();
    assert_eq!(fired, [due], "{runs:?}");
}

/// Organization A has more overdue Channel Feeds than a tick's scan, all due before
/// organization B's feed: the tick passes over A's past its share (here a scan of 2, a
/// share of 1 and at most 3 pages) and reads on, so B's feed is polled in the first tick
/// while A's backlog waits its turn; A's are all polled within the ticks its share allows.
async fn another_organizations_feed_backlog_past_the_scan_never_starves_a_feed(backend: Backend) {
    use shared::domain::triggers::TickLimits;
    let harness = harness(backend).await;
    let feed = FeedServer::start().await;
    feed.set(200, "application/atom+xml", atom(&[]));
    let (a, feeds) = feed_backlog(&harness, &feed, 4).await;
    // Due times are in milliseconds: B's is after A's.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (_, b_feed) = feed_agent(&harness, &feed.url, 5).await;
    let due = at(&trigger(&harness.test, &b_feed).await["next_fire_at"]);
    for feed in &feeds {
        assert!(at(&trigger(&a, feed).await["next_fire_at"]) < due, "A's feeds are due first");
    }

    let limits = TickLimits { scan: 2, pages: 3, share: 1 };
    let report = shared::runtime::schedule::scheduler_tick_within(&harness.test.app, due, limits).await.unwrap();
    let triggers = &report["triggers"];
    assert_eq!((&triggers["feeds"], &triggers["organizations"]), (&json!(2), &json!(2)), "{report}");
    assert_eq!((&triggers["due"], &triggers["deferred"]), (&json!(5), &json!(3)), "{report}");
    let view = trigger(&harness.test, &b_feed).await;
    assert_eq!(at(&view["next_fire_at"]), due.after(minutes(5)), "B's feed was polled: {view}");
    assert!(view["last_error"].is_null(), "{view}");

    // A's backlog drains at its share a tick: its other 3 within 3 more ticks.
    for _ in 0..3 {
        let report = shared::runtime::schedule::scheduler_tick_within(&harness.test.app, due, limits).await.unwrap();
        assert_eq!(report["triggers"]["feeds"], 1, "{report}");
    }
    for feed in &feeds {
        assert_eq!(at(&trigger(&a, feed).await["next_fire_at"]), due.after(minutes(5)), "polled: {feed}");
    }
}

/// A trigger state written before the kinds had due partitions of their own is in the
/// sweep index's `DUE#trigger` partition: the scheduler still reads it (each phase its
/// own kind, so a Schedule and a feed each fire once), and the fire's write moves it to
/// its kind's partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn triggers_in_the_due_partition_of_before_the_kinds_still_fire_and_move() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let table = shared::adapters::dynamodb::DynamoDb::connect(format!("own-{}", uuid::Uuid::new_v4())).await;
    table.ensure_table().await.unwrap();
    let raw = table.clone();
    let harness = Harness::through_table(move |_| table).await;
    let feed = FeedServer::start().await;
    feed.set(200, "application/atom+xml", atom(&[]));
    let (_, feed_id) = feed_agent(&harness, &feed.url, 5).await;
    let video = harness.upload("video", "video.mp4").await;
    let schedule = json!({ "cron": "* * * * *", "run_request": { "video_ids": [video] } });
    let (_, nodes) = schedule_agent(&harness, schedule).await;
    let id = nodes["tick"].clone();
    let due = at(&trigger(&harness.test, &id).await["next_fire_at"]);
    let organization = harness.test.organization;
    let key = |id: &str| {
        [
            ("pk".to_owned(), AttributeValue::S(format!("ORG#{organization}"))),
            ("sk".to_owned(), AttributeValue::S(format!("TRIGGER#{id}"))),
        ]
    };
    let partition = |id: String| {
        let raw = raw.clone();
        let key = key(&id);
        async move {
            let item = raw.client().get_item().table_name(raw.table()).set_key(Some(key.into())).send().await.unwrap();
            item.item().unwrap()["sweep_pk"].as_s().unwrap().clone()
        }
    };
    assert_eq!(partition(id.clone()).await, "DUE#schedule");
    assert_eq!(partition(feed_id.clone()).await, "DUE#feed");
    for trigger_id in [&id, &feed_id] {
        raw.client()
            .update_item()
            .table_name(raw.table())
            .set_key(Some(key(trigger_id).into()))
            .update_expression("SET sweep_pk = :legacy")
            .expression_attribute_values(":legacy", AttributeValue::S("DUE#trigger".into()))
            .send()
            .await
            .unwrap();
    }

    let report = shared::runtime::schedule::scheduler_tick(&harness.test.app, due).await.unwrap();
    let triggers = &report["triggers"];
    assert_eq!((&triggers["schedules"], &triggers["feeds"]), (&json!(1), &json!(1)), "each once: {report}");
    assert_eq!(triggers["started"], 1, "{report}");
    assert_eq!(partition(id).await, "DUE#schedule", "moved by its fire");
    assert_eq!(partition(feed_id).await, "DUE#feed", "moved by its poll");
}
