//! Social connections and posts on both backends: every status reached through the
//! sandbox publisher (posted, partial_failure, failed, scheduled, pending_approval,
//! rejected, processing until a read refreshes it), the list's filters and cursors over
//! 250 posts, the scheduler's `publish_due` (once, however many run at once), the
//! organization's isolation, refusals naming their field (the platforms' media limits
//! checked with media made by ffmpeg), the service's own links read from the store, and
//! the YouTube adapter against a local server that follows the Data API's formats.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};
use shared::api::social::parse;
use shared::config::Settings;
use shared::domain::social::service::Social;
use shared::domain::social::{NewPost, PostId, PostStatus, SocialPost};
use shared::domain::time::Timestamp;

use crate::conformance;
use crate::helpers::Backend;
use crate::providers::{json_reply, Answer, Fake};
use crate::runs::Harness;

conformance!(
    every_status_is_reached_through_the_sandbox,
    approval_and_rejection_move_only_pending_posts,
    an_async_post_is_processing_until_it_is_read_again,
    lists_filter_and_page_250_posts_exactly_once,
    scheduled_posts_are_published_once_by_publish_due,
    posts_and_connections_are_the_organizations_own,
    refused_posts_name_the_field_and_create_nothing,
    youtube_posts_go_through_the_resumable_upload,
    youtube_refusals_fail_the_destination_with_youtubes_message,
    a_repeated_create_with_one_idempotency_key_makes_one_post,
    a_post_whose_message_was_lost_is_sent_again_by_publish_due,
    a_message_that_cannot_be_sent_is_sent_again_by_a_later_tick,
    connections_are_capped_per_organization_even_when_created_at_once,
    a_deleted_connection_fails_its_pending_posts_and_nothing_else,
    a_deleted_connection_is_gone_at_once_and_publishing_fails_the_posts_it_left,
    an_expired_youtube_token_is_refreshed_before_the_upload_and_kept,
    a_revoked_refresh_token_fails_the_destination_saying_so,
    a_read_asks_every_destination_at_once_within_one_wait,
    a_post_of_slow_media_answers_processing_and_a_worker_prepares_it,
);

/// Media made once per test process with ffmpeg (320×240 unless said).
fn media() -> &'static PathBuf {
    static MEDIA: OnceLock<PathBuf> = OnceLock::new();
    MEDIA.get_or_init(|| {
        let folder = tempfile::tempdir().unwrap().keep();
        let make = |args: &[&str]| crate::helpers::ffmpeg_in(&folder, args);
        let video = |seconds: u32, size: &str, rate: u32, name: &str| {
            let source = format!("testsrc=duration={seconds}:size={size}:rate={rate}");
            make(&["-f", "lavfi", "-i", &source, "-pix_fmt", "yuv420p", name]);
        };
        video(4, "320x240", 15, "clip.mp4");
        video(2, "320x240", 15, "short.mp4");
        video(150, "320x240", 1, "long.mp4");
        video(4, "320x80", 15, "wide.mp4");
        make(&["-f", "lavfi", "-i", "color=orange:size=320x240", "-frames:v", "1", "picture.png"]);
        folder
    })
}

/// A harness for a test that ticks: a tick acts on every due post of its table, so on
/// DynamoDB the harness has a table of its own (no other test's posts are published by
/// this test's ticks, nor this test's by theirs).
async fn ticked(backend: Backend) -> Harness {
    match backend {
        Backend::DynamoDb => Harness::own_table(2).await,
        Backend::Sqlite => Harness::new(backend).await,
    }
}

/// A server that answers `/{name}` with the media file of that name.
async fn media_server() -> String {
    crate::helpers::folder_server(media(), Duration::ZERO).await
}

/// Connects an account on `platform` with the extra fields given; its ID.
async fn connect(test: &crate::helpers::TestApp, platform: &str, extra: Value) -> String {
    let mut body = json!({"platform": platform, "account_name": format!("Ada on {platform}"),
        "account_username": "ada", "profile_url": format!("https://{platform}.example/ada")});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (status, created) = test.call(Method::POST, "/social/connections", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["social_connection_id"].as_str().unwrap().to_owned()
}

async fn post(test: &crate::helpers::TestApp, body: Value) -> (StatusCode, Value) {
    test.call(Method::POST, "/social/post", Some(body)).await
}

/// A post of `clip.mp4` to `connections`, created (201).
async fn post_clip(harness: &Harness, base: &str, connections: &[&str], extra: Value) -> Value {
    let destinations: Vec<Value> = connections.iter().map(|id| json!({"social_connection_id": id})).collect();
    let mut body = json!({"description": "Launch day", "destinations": destinations,
        "media_urls": [format!("{base}/clip.mp4")]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (status, created) = post(&harness.test, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created
}

async fn get_post(harness: &Harness, id: &str) -> Value {
    let (status, body) = harness.test.call(Method::GET, &format!("/social/post/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// A time 30 days ahead, as the API writes times.
fn in_30_days(harness: &Harness) -> String {
    harness.test.app.clock.now().after(Duration::from_secs(30 * 24 * 3600)).to_string()
}

/// Reads a post until it leaves `processing` (bounded).
async fn settled(harness: &Harness, id: &str) -> Value {
    for _ in 0..300 {
        let body = get_post(harness, id).await;
        if body["status"] != "processing" {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("social post {id} still processing after 30 s");
}

fn statuses(post: &Value) -> Vec<&str> {
    post["results"].as_array().unwrap().iter().map(|result| result["status"].as_str().unwrap()).collect()
}

async fn every_status_is_reached_through_the_sandbox(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server().await;
    let ok = connect(&harness.test, "x", json!({})).await;
    let failing = connect(&harness.test, "linkedin", json!({"sandbox_behavior": "fail"})).await;
    let (_, listed) = harness.test.call(Method::GET, "/social/connections", None).await;
    let connections = listed["social_connections"].as_array().unwrap();
    assert_eq!(connections.len(), 2, "{listed}");
    let keys: Vec<&String> = connections[0].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "social_connection_id",
            "platform",
            "account_name",
            "account_username",
            "profile_url",
            "requires_approval",
            "publisher",
            "sandbox_behavior",
            "created_at"
        ]
    );
    assert_eq!(
        (&connections[0]["publisher"], &connections[1]["sandbox_behavior"]),
        (&json!("sandbox"), &json!("fail"))
    );

    // Posted: processing at first, then a success with a link the sandbox serves.
    let created = post_clip(&harness, &base, &[&ok], json!({})).await;
    let keys: Vec<&String> = created.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "post_id",
            "status",
            "description",
            "thumbnail_url",
            "scheduled_at",
            "platforms",
            "destinations",
            "links",
            "results",
            "destination_results",
            "error",
            "created_at",
            "updated_at"
        ]
    );
    assert_eq!(created["status"], "processing", "{created}");
    crate::openapi::conforms("create-social-post", StatusCode::CREATED, &created);
    crate::openapi::conforms("list-social-connections", StatusCode::OK, &listed);
    assert_eq!(created["scheduled_at"], created["created_at"], "an immediate post is scheduled at its creation");
    assert_eq!(statuses(&created), ["processing"]);
    assert_eq!(created["platforms"], json!(["x"]));
    assert_eq!(created["destinations"][0]["account_username"], "ada");
    let posted = settled(&harness, created["post_id"].as_str().unwrap()).await;
    assert_eq!(posted["status"], "posted", "{posted}");
    crate::openapi::conforms("get-social-post", StatusCode::OK, &posted);
    assert_eq!(posted["results"], posted["destination_results"]);
    let result = &posted["results"][0];
    assert_eq!((&result["status"], &result["message"]), (&json!("success"), &Value::Null), "{posted}");
    let url = result["post_url"].as_str().unwrap();
    assert_eq!(posted["links"], json!([{"platform": "x", "post_url": url, "social_connection_id": ok}]));
    assert_eq!(posted["error"], Value::Null);
    let (status, page) = crate::helpers::http_get(url).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&page).contains("Launch day"), "the sandbox's page shows the post");
    // The sandbox kept the medium it was given.
    let kept = format!("social-sandbox/{}/{}/{ok}/0", harness.test.organization, posted["post_id"].as_str().unwrap());
    let location = harness.test.app.blobs().read_location(&kept, None).await.unwrap();
    let bytes = match location.strip_prefix("file:") {
        Some(path) => std::fs::read(path).unwrap(),
        None => crate::helpers::http_get(&location).await.1.to_vec(),
    };
    assert_eq!(bytes, std::fs::read(media().join("clip.mp4")).unwrap());
    let (status, _) = crate::helpers::http_get(&url.replace(&ok, &failing)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no page for an account the post did not go to");
    // The thumbnail: a JPEG of the first medium, 320 wide.
    let (bytes, content_type) = crate::generation::fetch(posted["thumbnail_url"].as_str().unwrap()).await;
    assert_eq!(content_type, "image/jpeg");
    let report = crate::generation::probe_bytes(&bytes);
    assert_eq!(report.stream("video").unwrap()["width"].as_u64(), Some(320));

    // Failed, and partially failed.
    let created = post_clip(&harness, &base, &[&failing], json!({})).await;
    let failed = settled(&harness, created["post_id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["results"][0]["message"].as_str().unwrap().contains("sandbox_behavior: fail"), "{failed}");
    assert!(failed["error"].as_str().unwrap().starts_with("1 of 1 destinations failed"), "{failed}");
    assert_eq!(failed["links"], json!([]));
    let created = post_clip(&harness, &base, &[&ok, &failing], json!({})).await;
    let partial = settled(&harness, created["post_id"].as_str().unwrap()).await;
    assert_eq!(partial["status"], "partial_failure", "{partial}");
    assert_eq!(statuses(&partial), ["success", "failed"]);
    assert_eq!(partial["links"].as_array().unwrap().len(), 1);
    assert_eq!(partial["platforms"], json!(["x", "linkedin"]));

    // Scheduled.
    let later = in_30_days(&harness);
    let scheduled = post_clip(&harness, &base, &[&ok], json!({"scheduled_at": later})).await;
    assert_eq!((&scheduled["status"], &scheduled["scheduled_at"]), (&json!("scheduled"), &json!(later)));
    assert_eq!(statuses(&scheduled), ["scheduled"]);
    assert_eq!(get_post(&harness, scheduled["post_id"].as_str().unwrap()).await["status"], "scheduled");
}

async fn approval_and_rejection_move_only_pending_posts(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server().await;
    let reviewed = connect(&harness.test, "instagram", json!({"requires_approval": true})).await;
    let open = connect(&harness.test, "facebook", json!({})).await;
    let action = |id: &str, what: &str| format!("/social/post/{id}/{what}");

    let pending = post_clip(&harness, &base, &[&reviewed, &open], json!({})).await;
    assert_eq!(pending["status"], "pending_approval", "{pending}");
    assert_eq!(statuses(&pending), ["scheduled", "scheduled"]);
    let id = pending["post_id"].as_str().unwrap();
    let (status, approved) = harness.test.call(Method::POST, &action(id, "approve"), None).await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["status"], "processing", "{approved}");
    let posted = settled(&harness, id).await;
    assert_eq!((posted["status"].as_str(), statuses(&posted)), (Some("posted"), vec!["success", "success"]));
    for what in ["approve", "reject"] {
        let (status, refused) = harness.test.call(Method::POST, &action(id, what), None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused}");
        crate::openapi::conforms(&format!("{what}-social-post"), StatusCode::CONFLICT, &refused);
        assert_eq!(refused, json!({"detail": "the post is posted, not pending_approval"}));
    }

    let pending = post_clip(&harness, &base, &[&reviewed], json!({})).await;
    let id = pending["post_id"].as_str().unwrap();
    let (status, rejected) = harness.test.call(Method::POST, &action(id, "reject"), None).await;
    assert_eq!(status, StatusCode::OK, "{rejected}");
    assert_eq!((rejected["status"].as_str(), statuses(&rejected)), (Some("rejected"), vec!["failed"]));
    assert_eq!(get_post(&harness, id).await["status"], "rejected");
    let (status, refused) = harness.test.call(Method::POST, &action(id, "approve"), None).await;
    assert_eq!(
        (status, refused),
        (StatusCode::CONFLICT, json!({"detail": "the post is rejected, not pending_approval"}))
    );

    // Two approvals at once: one moves the post, the other is refused.
    let pending = post_clip(&harness, &base, &[&reviewed], json!({})).await;
    let path = action(pending["post_id"].as_str().unwrap(), "approve");
    let (one, two) =
        tokio::join!(harness.test.call(Method::POST, &path, None), harness.test.call(Method::POST, &path, None));
    let mut statuses_seen = [one.0, two.0];
    statuses_seen.sort();
    assert_eq!(statuses_seen, [StatusCode::OK, StatusCode::CONFLICT], "{one:?} {two:?}");

    // Approved before its time, a post waits for it.
    let pending = post_clip(&harness, &base, &[&reviewed], json!({"scheduled_at": in_30_days(&harness)})).await;
    assert_eq!(pending["status"], "pending_approval");
    let (_, approved) =
        harness.test.call(Method::POST, &action(pending["post_id"].as_str().unwrap(), "approve"), None).await;
    assert_eq!((approved["status"].as_str(), statuses(&approved)), (Some("scheduled"), vec!["scheduled"]));
    let (status, missing) =
        harness.test.call(Method::POST, &action(&uuid::Uuid::new_v4().to_string(), "approve"), None).await;
    assert_eq!((status, missing), (StatusCode::NOT_FOUND, json!({"detail": "Social post not found"})));
}

async fn an_async_post_is_processing_until_it_is_read_again(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server().await;
    let later = connect(&harness.test, "tiktok", json!({"sandbox_behavior": "async"})).await;
    let created = post_clip(&harness, &base, &[&later], json!({})).await;
    let id = created["post_id"].as_str().unwrap();
    // The list does not refresh: the sandbox accepted the post, and it stays processing.
    let list = format!("/social/posts?social_connection_id={later}");
    let mut accepted = None;
    for _ in 0..300 {
        let (status, listed) = harness.test.call(Method::GET, &list, None).await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        let listed_post = &listed["posts"][0];
        if !listed_post["results"][0]["platform_post_id"].is_null() {
            accepted = Some(listed_post.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let accepted = accepted.expect("the sandbox accepts the post within 30 s");
    assert_eq!((accepted["status"].as_str(), statuses(&accepted)), (Some("processing"), vec!["processing"]));
    assert_eq!(accepted["results"][0]["post_url"], Value::Null);
    let (_, again) = harness.test.call(Method::GET, &list, None).await;
    assert_eq!(again["posts"][0]["status"], "processing", "a list never refreshes");
    // Read by its ID, the post is refreshed from the sandbox: posted.
    let read = get_post(&harness, id).await;
    assert_eq!((read["status"].as_str(), statuses(&read)), (Some("posted"), vec!["success"]), "{read}");
    assert_eq!(read["links"][0]["social_connection_id"], later);
    let (_, listed) = harness.test.call(Method::GET, &list, None).await;
    assert_eq!(listed["posts"][0]["status"], "posted", "the refresh was stored");
}

async fn lists_filter_and_page_250_posts_exactly_once(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server().await;
    let connections = [
        connect(&harness.test, "x", json!({})).await,
        connect(&harness.test, "linkedin", json!({})).await,
        connect(&harness.test, "youtube", json!({})).await,
    ];
    let first = post_clip(&harness, &base, &[&connections[0]], json!({"scheduled_at": in_30_days(&harness)})).await;
    let app = &harness.test.app;
    let organization = harness.test.organization;
    let template =
        app.social_posts().get_post(organization, PostId::parse(first["post_id"].as_str().unwrap()).unwrap());
    let template: SocialPost = template.await.unwrap().unwrap();
    // 250 more, one a millisecond apart, each to one, two or three accounts in every status.
    let start = template.created_at.unix_millis() + 1;
    let made: Vec<SocialPost> = (0..250u64)
        .map(|index| {
            let at = Timestamp::from_unix_millis(start + index);
            let mut post = SocialPost {
                id: PostId::v7_at(at.unix_millis()),
                status: PostStatus::ALL[index as usize % 7],
                created_at: at,
                updated_at: at,
                ..template.clone()
            };
            let destination = template.destinations[0].clone();
            let to = |which: usize| {
                let mut destination = destination.clone();
                let stored = &app_connections(&connections)[which];
                destination.connection.id = *stored;
                destination.connection.platform = ["x", "linkedin", "youtube"]
                    .map(|name| shared::domain::social::Platform::parse(name).unwrap())[which];
                destination
            };
            post.destinations = match index % 4 {
                0 => vec![to(0)],
                1 => vec![to(1), to(2)],
                2 => vec![to(0), to(1), to(2)],
                _ => vec![to(2)],
            };
            // Processing ones were accepted by their publisher (waiting for a read): never
            // due, so no scheduler tick of another test moves them while this one lists.
            let (result, accepted) = match post.status {
                PostStatus::Processing => (shared::domain::social::ResultStatus::Processing, Some("accepted".into())),
                _ => (shared::domain::social::ResultStatus::Scheduled, None),
            };
            post.results = post
                .destinations
                .iter()
                .map(|destination| shared::domain::social::DestinationResult {
                    social_connection_id: destination.connection.id,
                    platform: destination.connection.platform,
                    status: result,
                    platform_post_id: accepted.clone(),
                    post_url: None,
                    message: None,
                })
                .collect();
            post
        })
        .collect();
    let repo = app.social_posts().clone();
    futures::future::try_join_all(made.chunks(25).map(|chunk| {
        let repo = repo.clone();
        async move {
            for post in chunk {
                repo.create_post(post, &[]).await?;
            }
            anyhow::Ok(())
        }
    }))
    .await
    .unwrap();
    let mut all = made.clone();
    all.push(template.clone());
    all.sort_by_key(|post| std::cmp::Reverse(post.id));

    let platform =
        |post: &SocialPost, name: &str| post.destinations.iter().any(|d| d.connection.platform.as_str() == name);
    let account = |post: &SocialPost, id: &str| post.destinations.iter().any(|d| d.connection.id.to_string() == id);
    let cases: Vec<(String, Admits)> = vec![
        (String::new(), Box::new(|_| true)),
        ("status=posted".into(), Box::new(|post| post.status == PostStatus::Posted)),
        ("platform=youtube".into(), Box::new(move |post| platform(post, "youtube"))),
        (
            format!("social_connection_id={}", connections[0]),
            Box::new({
                let id = connections[0].clone();
                move |post| account(post, &id)
            }),
        ),
        (
            "status=scheduled&platform=x".into(),
            Box::new(move |post| post.status == PostStatus::Scheduled && platform(post, "x")),
        ),
        (
            format!("platform=linkedin&social_connection_id={}&status=failed", connections[2]),
            Box::new({
                let id = connections[2].clone();
                move |post| post.status == PostStatus::Failed && platform(post, "linkedin") && account(post, &id)
            }),
        ),
        ("platform=facebook".into(), Box::new(|_| false)),
    ];
    for (filter, admits) in cases {
        let expected: Vec<String> = all.iter().filter(|post| admits(post)).map(|post| post.id.to_string()).collect();
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..60 {
            let mut path = format!("/social/posts?limit=13&{filter}");
            if let Some(cursor) = &cursor {
                path.push_str(&format!("&cursor={cursor}"));
            }
            let (status, page) = harness.test.call(Method::GET, &path, None).await;
            assert_eq!(status, StatusCode::OK, "{path}: {page}");
            let pagination = &page["pagination"];
            let posts = page["posts"].as_array().unwrap();
            assert_eq!(pagination["limit"], 13);
            assert_eq!(pagination["returned"].as_u64(), Some(posts.len() as u64));
            assert_eq!(pagination["sort"], "created_at_desc");
            seen.extend(posts.iter().map(|post| post["post_id"].as_str().unwrap().to_owned()));
            if pagination["has_more"] == false {
                assert_eq!(pagination["next_cursor"], Value::Null);
                break;
            }
            assert_eq!(posts.len(), 13, "{path}: a page that has more is full");
            cursor = Some(pagination["next_cursor"].as_str().unwrap().to_owned());
        }
        assert_eq!(seen, expected, "{filter}: each post once, newest first");
    }
    let (_, page) = harness.test.call(Method::GET, "/social/posts", None).await;
    assert_eq!((page["pagination"]["limit"].as_u64(), page["posts"].as_array().unwrap().len()), (Some(20), 20));
    assert_eq!(page["posts"][0]["post_id"].as_str(), Some(all[0].id.to_string().as_str()));
    let (_, page) = harness.test.call(Method::GET, "/social/posts?limit=100", None).await;
    assert_eq!(page["posts"].as_array().unwrap().len(), 100);
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=ten", "limit"),
        ("cursor=bm90IGEgY3Vyc29y", "cursor"),
        ("status=done", "status"),
        ("platform=myspace", "platform"),
        ("social_connection_id=12", "social_connection_id"),
    ] {
        let (status, refused) = harness.test.call(Method::GET, &format!("/social/posts?{query}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {refused}");
        assert!(refused["detail"].as_str().unwrap().starts_with(field), "{query}: {refused}");
    }
}

/// Which posts a list's filter shows.
type Admits = Box<dyn Fn(&SocialPost) -> bool>;

/// The connections' IDs as the domain's type.
fn app_connections(connections: &[String; 3]) -> Vec<shared::domain::social::SocialConnectionId> {
    connections.iter().map(|id| shared::domain::social::SocialConnectionId::parse(id).unwrap()).collect()
}

async fn scheduled_posts_are_published_once_by_publish_due(backend: Backend) {
    let harness = ticked(backend).await;
    let base = media_server().await;
    let ok = connect(&harness.test, "youtube", json!({})).await;
    // Two minutes ahead: a tick is never past the lease of the publishing it started.
    let at = harness.test.app.clock.now().after(Duration::from_secs(120));
    let scheduled = post_clip(&harness, &base, &[&ok], json!({"scheduled_at": at.to_string()})).await;
    assert_eq!(scheduled["status"], "scheduled");
    let id = scheduled["post_id"].as_str().unwrap();
    let social = harness.test.app.social();
    let post_id = PostId::parse(id).unwrap();
    // The due index is every organization's (other tests' posts share DynamoDB's): each
    // tick is judged by what it did with this post.
    let sent = social.publish_due_posts(harness.test.app.clock.now()).await.unwrap();
    assert!(!sent.contains(&post_id), "not due yet");
    // Due: two ticks at once publish it once.
    let tick = at.after(Duration::from_secs(60));
    let (one, two) = tokio::join!(social.publish_due_posts(tick), social.publish_due_posts(tick));
    let times = one.unwrap().into_iter().chain(two.unwrap()).filter(|sent| *sent == post_id).count();
    assert_eq!(times, 1);
    let posted = settled(&harness, id).await;
    assert_eq!((posted["status"].as_str(), statuses(&posted)), (Some("posted"), vec!["success"]), "{posted}");
    assert_eq!(posted["scheduled_at"], json!(at.to_string()));
    // Published: a later tick finds nothing of it (also while the index catches up).
    let sent = social.publish_due_posts(tick.after(Duration::from_secs(60))).await.unwrap();
    assert!(!sent.contains(&post_id));
    let (_, listed) = harness.test.call(Method::GET, "/social/posts?status=scheduled", None).await;
    assert_eq!(listed["posts"], json!([]));

    // The scheduler's tick (the `scheduler` function, serve's loop) is what calls it.
    let at = harness.test.app.clock.now().after(Duration::from_secs(120));
    let scheduled = post_clip(&harness, &base, &[&ok], json!({"scheduled_at": at.to_string()})).await;
    let id = scheduled["post_id"].as_str().unwrap();
    let tick = at.after(Duration::from_secs(60));
    let report = shared::runtime::schedule::scheduler_tick(&harness.test.app, tick).await.unwrap();
    assert!(report["posts"].as_u64().unwrap() >= 1, "{report}");
    let posted = settled(&harness, id).await;
    assert_eq!(posted["status"], "posted", "{posted}");
}

async fn posts_and_connections_are_the_organizations_own(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server().await;
    let mine = connect(&harness.test, "x", json!({"requires_approval": true})).await;
    let created = post_clip(&harness, &base, &[&mine], json!({})).await;
    let id = created["post_id"].as_str().unwrap();
    let (organization, key) = harness.test.add_organization(true).await;
    let other = crate::helpers::TestApp { app: harness.test.app.clone(), key, organization };
    for (method, path) in [
        (Method::GET, format!("/social/post/{id}")),
        (Method::POST, format!("/social/post/{id}/approve")),
        (Method::POST, format!("/social/post/{id}/reject")),
    ] {
        let (status, body) = other.call(method, &path, None).await;
        assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({"detail": "Social post not found"})), "{path}");
    }
    let (status, refused) = post(
        &other,
        json!({"description": "mine now", "destinations": [{"social_connection_id": mine}],
               "media_urls": [format!("{base}/clip.mp4")]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let detail = refused["detail"].as_str().unwrap();
    assert!(detail.starts_with("destinations[0].social_connection_id: social connection"), "{detail}");
    assert!(detail.contains(&mine), "{detail}");
    for path in ["/social/posts", &format!("/social/posts?social_connection_id={mine}")] {
        let (_, listed) = other.call(Method::GET, path, None).await;
        assert_eq!(listed["posts"], json!([]), "{path}");
    }
    let (_, listed) = other.call(Method::GET, "/social/connections", None).await;
    assert_eq!(listed, json!({"social_connections": []}));
    // Still the owner's, untouched.
    assert_eq!(get_post(&harness, id).await["status"], "pending_approval");
}

async fn refused_posts_name_the_field_and_create_nothing(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server().await;
    let x = connect(&harness.test, "x", json!({})).await;
    let tiktok = connect(&harness.test, "tiktok", json!({})).await;
    let youtube = connect(&harness.test, "youtube", json!({})).await;
    let body = |to: &str, media: &str| {
        json!({"description": "Launch", "destinations": [{"social_connection_id": to}],
               "media_urls": [format!("{base}/clip.mp4"), format!("{base}/{media}")]})
    };
    let with = |mut body: Value, field: &str, value: Value| {
        body[field] = value;
        body
    };
    let cases = [
        (body(&x, "long.mp4"), "media_urls[1]: the video is 150.0 s long; x takes videos of 0.5 to 140 s"),
        (body(&tiktok, "short.mp4"), "media_urls[1]: the video is 2.0 s long; tiktok takes videos of 3 to 600 s"),
        (body(&x, "wide.mp4"), "media_urls[1]: the medium is 320×80 (aspect ratio 4.00); x takes aspect ratios"),
        (body(&youtube, "picture.png"), "media_urls[1]: youtube takes videos only"),
        (body(&x, "missing.mp4"), "media_urls[1]"),
        (with(body(&x, "clip.mp4"), "description", json!("a".repeat(281))), "description is 281 characters; x"),
        (with(body(&x, "clip.mp4"), "description", json!("  ")), "description must be 1 to 5000"),
        (with(body(&youtube, "clip.mp4"), "description", json!("é".repeat(2600))), "description is 5200 bytes"),
        (with(body(&youtube, "clip.mp4"), "description", json!("Launch <day>")), "description: youtube refuses"),
        (with(body(&x, "clip.mp4"), "scheduled_at", json!("2001-01-01T00:00:00Z")), "scheduled_at 2001-01-01"),
        (with(body(&x, "clip.mp4"), "media_urls", json!([])), "media_urls must hold at least one URL"),
        (with(body(&x, "clip.mp4"), "destinations", json!([])), "destinations must name at least one"),
        (
            with(body(&x, "clip.mp4"), "destinations", json!([{"social_connection_id": uuid::Uuid::new_v4()}])),
            "destinations[0].social_connection_id: social connection",
        ),
        (json!({"destinations": [{"social_connection_id": x}], "media_urls": []}), "description is required"),
    ];
    for (body, expected) in cases {
        let (status, refused) = post(&harness.test, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {refused}");
        let detail = refused["detail"].as_str().unwrap();
        assert!(detail.starts_with(expected), "{expected}: {detail}");
    }
    let (_, listed) = harness.test.call(Method::GET, "/social/posts", None).await;
    assert_eq!(listed["posts"], json!([]), "nothing was created");
    // A picture goes to x; the same clip to tiktok.
    let (status, fine) = post(&harness.test, body(&x, "picture.png")).await;
    assert_eq!(status, StatusCode::CREATED, "{fine}");
    let (status, fine) = post(&harness.test, body(&tiktok, "clip.mp4")).await;
    assert_eq!(status, StatusCode::CREATED, "{fine}");
    // Connections: an unknown platform and the other refusals name their field.
    for (body, expected) in [
        (
            json!({"platform": "myspace", "account_name": "a", "account_username": "a", "profile_url": "https://a.test"}),
            "platform must be one of x, linkedin, instagram, facebook, tiktok, youtube",
        ),
        (
            json!({"platform": "x", "account_name": "a".repeat(201), "account_username": "a",
                "profile_url": "https://a.test"}),
            "account_name must be 1 to 200 characters",
        ),
        (
            json!({"platform": "x", "account_name": "a", "profile_url": "https://a.test"}),
            "account_username is required",
        ),
        (
            json!({"platform": "youtube", "account_name": "a", "account_username": "a", "profile_url": "https://a.test",
                "publisher": "youtube"}),
            "credentials is required",
        ),
    ] {
        let (status, refused) = harness.test.call(Method::POST, "/social/connections", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {refused}");
        assert!(refused["detail"].as_str().unwrap().starts_with(expected), "{refused}");
    }
    let (_, listed) = harness.test.call(Method::GET, "/social/connections", None).await;
    assert_eq!(listed["social_connections"].as_array().unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_services_own_links_are_read_from_the_store_past_the_guard() {
    // The guard of a deployment refuses loopback URLs; a link of the service's own (here
    // served on loopback) is read from the store instead.
    let harness = Harness::guarded().await;
    let base = media_server().await;
    let x = connect(&harness.test, "x", json!({})).await;
    let body = |url: String| {
        json!({"description": "again", "destinations": [{"social_connection_id": x}],
        "media_urls": [url]})
    };
    let (status, refused) = post(&harness.test, body(format!("{base}/clip.mp4"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused["detail"].as_str().unwrap().starts_with("media_urls[0]: "), "{refused}");
    // An output link of the service: a rendered file's signed link.
    let app = &harness.test.app;
    let links = app.links.clone();
    let now = app.clock.now();
    let record = shared::domain::media::MediaRecord {
        id: shared::domain::runs::MediaId::new_v4(),
        organization_id: harness.test.organization,
        run_id: shared::domain::runs::RunId::from_uuid(uuid::Uuid::nil()),
        kind: shared::domain::media::MediaKind::Render,
        key: format!("renders/{}/own-clip.mp4", harness.test.organization),
        version: None,
        content_type: "video/mp4".into(),
        duration_ms: Some(4_000),
        created_at: now,
    };
    app.blobs().put_file(&record.key, &media().join("clip.mp4"), "video/mp4").await.unwrap();
    // The record is stored with a post that holds it (any write of media records would do).
    let connection = shared::domain::social::SocialConnectionId::parse(&x).unwrap();
    let connection = app.social_posts().get_connection(harness.test.organization, connection).await.unwrap().unwrap();
    let holder = SocialPost {
        id: PostId::now_v7(),
        organization_id: harness.test.organization,
        status: PostStatus::Rejected,
        description: "holds a render's record".into(),
        media: vec![],
        thumbnail: record.id,
        scheduled_at: now,
        destinations: vec![shared::domain::social::Destination { connection }],
        results: vec![],
        error: None,
        attempts: 0,
        publishing_until: None,
        created_at: now,
        updated_at: now,
        version: 0,
        pending_media: None,
    };
    app.social_posts().create_post(&holder, std::slice::from_ref(&record)).await.unwrap();
    let link = links.link(record.id, harness.test.app.clock.now());
    let (status, created) = post(&harness.test, body(link.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let posted = settled(&harness, created["post_id"].as_str().unwrap()).await;
    assert_eq!(posted["status"], "posted", "{posted}");
    // Its thumbnail, a JPEG the service signed, is a picture x takes.
    let (status, again) = post(&harness.test, body(posted["thumbnail_url"].as_str().unwrap().to_owned())).await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_eq!(settled(&harness, again["post_id"].as_str().unwrap()).await["status"], "posted");
    // A forged signature is refused, naming the field.
    let (status, refused) = post(&harness.test, body(link.replace("signature=", "signature=00"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("cannot be used"), "{refused}");
}

// ---------------------------------------------------------------------------------------
// YouTube's Data API, as a local server following its published formats.

/// The token the fake accepts.
const TOKEN: &str = "ya29.test-token";

fn youtube_reply(status: u16, headers: &[(&str, String)], body: Value) -> Answer {
    let mut reply = http::Response::builder().status(status).header(http::header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        reply = reply.header(*name, value.as_str());
    }
    Answer::Reply(Box::new(reply.body(Full::new(Bytes::from(body.to_string()))).unwrap()))
}

fn youtube_error(code: u16, message: &str, reason: &str) -> Answer {
    json_reply(
        StatusCode::from_u16(code).unwrap(),
        json!({"error": {"code": code, "message": message, "errors": [{"message": message, "domain": "youtube.video", "reason": reason}]}}),
    )
}

/// A fake of `videos.insert` (resumable) and `videos.list`: a video is `uploaded` when
/// its bytes arrive and `processed` when listed after that. `refuse` answers the upload's
/// start with an error instead.
async fn youtube_fake(refuse: Option<(u16, &'static str, &'static str)>) -> Fake {
    let uploaded = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let fake_url = Arc::new(Mutex::new(String::new()));
    let url = fake_url.clone();
    let fake = Fake::start(move |request, _| {
        if request.method == "POST" && request.path == "/token" {
            return token_endpoint(request);
        }
        if request.headers.get("authorization").map(String::as_str) != Some(&format!("Bearer {TOKEN}")) {
            return youtube_error(401, "Request had invalid authentication credentials.", "authError");
        }
        let path = request.path.as_str();
        if request.method == "POST" && path == "/upload/youtube/v3/videos?uploadType=resumable&part=snippet,status" {
            if let Some((code, message, reason)) = refuse {
                return youtube_error(code, message, reason);
            }
            let size = request.headers.get("x-upload-content-length").cloned().unwrap_or_default();
            let title = request.body["snippet"]["title"].as_str().unwrap_or_default();
            if size.parse::<u64>().is_err() || title.is_empty() || request.body["status"]["privacyStatus"].is_null() {
                return youtube_error(400, "Bad request", "invalid");
            }
            let session =
                format!("{}/upload/youtube/v3/videos?uploadType=resumable&upload_id=s{size}", url.lock().unwrap());
            return youtube_reply(200, &[("location", session)], json!({}));
        }
        if request.method == "PUT" && path.starts_with("/upload/youtube/v3/videos?uploadType=resumable&upload_id=s") {
            let size: u64 = path.rsplit('s').next().unwrap().parse().unwrap();
            let range = request.headers.get("content-range").cloned().unwrap_or_default();
            if range != format!("bytes 0-{}/{size}", size - 1) || request.raw.is_empty() {
                return youtube_error(400, "Invalid Content-Range", "badContent");
            }
            let id = format!("vid{size}");
            uploaded.lock().unwrap().insert(id.clone());
            return youtube_reply(
                201,
                &[],
                json!({"kind": "youtube#video", "id": id, "status": {"uploadStatus": "uploaded"}}),
            );
        }
        if request.method == "GET" && path.starts_with("/youtube/v3/videos?part=status&id=") {
            let id = path.rsplit('=').next().unwrap().to_owned();
            let items = if uploaded.lock().unwrap().contains(&id) {
                vec![json!({"kind": "youtube#video", "id": id, "status": {"uploadStatus": "processed"}})]
            } else {
                vec![]
            };
            return youtube_reply(200, &[], json!({"kind": "youtube#videoListResponse", "items": items}));
        }
        youtube_error(404, "Not Found", "notFound")
    })
    .await;
    *fake_url.lock().unwrap() = fake.url.clone();
    fake
}

/// The refresh token the fake's token endpoint honours, and the OAuth client it knows.
const REFRESH: &str = "1//refresh-token";
const CLIENT_ID: &str = "client-1.apps.googleusercontent.com";
const CLIENT_SECRET: &str = "client-secret";

/// Google's OAuth token endpoint as published: a form POST of `grant_type=refresh_token`,
/// `client_id`, `client_secret`, `refresh_token`, answering `{access_token, expires_in,
/// token_type}`, or 400 `{error: "invalid_grant", error_description}` for a refresh token
/// it does not honour.
fn token_endpoint(request: &crate::providers::Received) -> Answer {
    let form: std::collections::BTreeMap<String, String> =
        url::form_urlencoded::parse(request.raw.as_bytes()).into_owned().collect();
    let field = |name: &str| form.get(name).map(String::as_str).unwrap_or_default();
    let form_type = request.headers.get("content-type").map(String::as_str).unwrap_or_default();
    if form_type != "application/x-www-form-urlencoded" || field("grant_type") != "refresh_token" {
        return json_reply(StatusCode::BAD_REQUEST, json!({"error": "unsupported_grant_type"}));
    }
    if (field("client_id"), field("client_secret")) != (CLIENT_ID, CLIENT_SECRET) {
        return json_reply(
            StatusCode::UNAUTHORIZED,
            json!({"error": "invalid_client", "error_description": "The OAuth client was not found."}),
        );
    }
    if field("refresh_token") != REFRESH {
        return json_reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_grant", "error_description": "Token has been expired or revoked."}),
        );
    }
    json_reply(
        StatusCode::OK,
        json!({"access_token": TOKEN, "expires_in": 3599, "scope": "https://www.googleapis.com/auth/youtube.upload",
               "token_type": "Bearer"}),
    )
}

async fn youtube_harness(backend: Backend, fake: &Fake) -> Harness {
    let (url, token_url) = (fake.url.clone(), format!("{}/token", fake.url));
    Harness::tuned(backend, move |settings| Settings { youtube_api_url: url, youtube_token_url: token_url, ..settings })
        .await
}

async fn youtube_posts_go_through_the_resumable_upload(backend: Backend) {
    let fake = youtube_fake(None).await;
    let harness = youtube_harness(backend, &fake).await;
    let base = media_server().await;
    let channel =
        connect(&harness.test, "youtube", json!({"publisher": "youtube", "credentials": {"access_token": TOKEN}}))
            .await;
    let (_, listed) = harness.test.call(Method::GET, "/social/connections", None).await;
    assert!(!listed.to_string().contains(TOKEN), "credentials are never shown: {listed}");
    let created = post_clip(&harness, &base, &[&channel], json!({"description": "Launch day\nThe whole story"})).await;
    let id = created["post_id"].as_str().unwrap();
    // Uploaded, still processed by YouTube: processing in the list; read, it is posted.
    let size = std::fs::metadata(media().join("clip.mp4")).unwrap().len();
    for _ in 0..300 {
        if fake.requests().iter().any(|request| request.starts_with("PUT ")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut read = get_post(&harness, id).await;
    for _ in 0..300 {
        if read["status"] != "processing" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        read = get_post(&harness, id).await;
    }
    assert_eq!(read["status"], "posted", "{read}");
    let video = format!("vid{size}");
    assert_eq!(read["results"][0]["platform_post_id"], json!(video));
    assert_eq!(read["links"][0]["post_url"], json!(format!("https://www.youtube.com/watch?v={video}")));
    let received = fake.received();
    let start = received.iter().find(|request| request.method == "POST").unwrap();
    assert_eq!(start.headers["x-upload-content-length"], size.to_string());
    assert_eq!(start.headers["x-upload-content-type"], "video/mp4");
    assert!(start.headers["content-type"].starts_with("application/json"));
    assert_eq!(start.body["snippet"]["title"], "Launch day");
    assert_eq!(start.body["snippet"]["description"], "Launch day\nThe whole story");
    let put = received.iter().find(|request| request.method == "PUT").unwrap();
    assert_eq!(put.headers["content-length"], size.to_string());
    assert_eq!(put.headers["content-type"], "video/mp4");
}

async fn youtube_refusals_fail_the_destination_with_youtubes_message(backend: Backend) {
    let fake =
        youtube_fake(Some((403, "The user has exceeded the number of videos they may upload.", "uploadLimitExceeded")))
            .await;
    let harness = youtube_harness(backend, &fake).await;
    let base = media_server().await;
    let refused =
        connect(&harness.test, "youtube", json!({"publisher": "youtube", "credentials": {"access_token": TOKEN}}))
            .await;
    let wrong = connect(
        &harness.test,
        "youtube",
        json!({"publisher": "youtube", "credentials": {"access_token": "ya29.revoked"}}),
    )
    .await;
    let created = post_clip(&harness, &base, &[&refused, &wrong], json!({})).await;
    let failed = settled(&harness, created["post_id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let messages: Vec<&str> =
        failed["results"].as_array().unwrap().iter().map(|r| r["message"].as_str().unwrap()).collect();
    assert!(
        messages[0].contains(
            "403 Forbidden: The user has exceeded the number of videos they may upload. (uploadLimitExceeded)"
        ),
        "{}",
        messages[0]
    );
    assert!(
        messages[1].contains("401 Unauthorized: Request had invalid authentication credentials. (authError)"),
        "{}",
        messages[1]
    );
    assert!(messages[1].contains("connect the account again"), "{}", messages[1]);
    assert_eq!(fake.requests().iter().filter(|request| request.starts_with("PUT")).count(), 0);
}

async fn a_repeated_create_with_one_idempotency_key_makes_one_post(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server().await;
    let x = connect(&harness.test, "x", json!({"requires_approval": true})).await;
    let body = json!({"description": "once", "destinations": [{"social_connection_id": x}],
        "media_urls": [format!("{base}/clip.mp4")]});
    let key = format!("social-{}", uuid::Uuid::new_v4());
    let first = crate::idempotency::post(&harness.test, &key, "/social/post", Some(&body)).await;
    assert_eq!(first.0, StatusCode::CREATED, "{first:?}");
    let again = crate::idempotency::post(&harness.test, &key, "/social/post", Some(&body)).await;
    assert_eq!(again, first, "a repeat gets the first answer");
    let other = crate::idempotency::post(&harness.test, "another-key", "/social/post", Some(&body)).await;
    assert_ne!(other.1["post_id"], first.1["post_id"]);
    let (_, listed) = harness.test.call(Method::GET, "/social/posts", None).await;
    assert_eq!(listed["posts"].as_array().unwrap().len(), 2, "{listed}");
    crate::openapi::conforms("create-social-post", StatusCode::CREATED, &first.1);
    crate::openapi::conforms("list-social-posts", StatusCode::OK, &listed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn youtube_credentials_are_a_secret_of_their_own_in_secrets_manager() {
    use shared::adapters::secrets::SecretsManager;
    assert!(
        std::env::var("AWS_ENDPOINT_URL_SECRETS_MANAGER").is_ok(),
        "AWS_ENDPOINT_URL_SECRETS_MANAGER is not set: run the tests with ./scripts/test.sh"
    );
    let fake = youtube_fake(None).await;
    let url = fake.url.clone();
    // No workers: this test publishes with its own service, whose vault is Secrets Manager.
    let harness =
        Harness::tuned_with(Backend::DynamoDb, 0, move |settings| Settings { youtube_api_url: url, ..settings }).await;
    let base = media_server().await;
    let aws = shared::adapters::aws_env::load_defaults().await;
    let prefix = format!("tests-{}/social", uuid::Uuid::new_v4());
    let vault = SecretsManager::from_config(&aws).vault(&prefix);
    let social = Social { vault: &vault, ..harness.test.app.social() };
    let organization = harness.test.organization;
    let body = json!({"platform": "youtube", "account_name": "Channel", "account_username": "channel",
        "profile_url": "https://www.youtube.com/@channel", "publisher": "youtube",
        "credentials": {"access_token": TOKEN}});
    let connection = social
        .create_connection(organization, parse::new_connection(body.as_object().unwrap()).unwrap())
        .await
        .unwrap();
    let arn = connection.credentials.clone().expect("a reference to the secret");
    assert!(arn.starts_with("arn:"), "{arn}");
    let kept = aws_sdk_secretsmanager::Client::new(&aws).get_secret_value().secret_id(&arn).send().await.unwrap();
    assert_eq!(kept.name(), Some(format!("{prefix}/{organization}/{}", connection.id).as_str()));
    assert_eq!(serde_json::from_str::<Value>(kept.secret_string().unwrap()).unwrap(), json!({"access_token": TOKEN}));
    let stored = harness.test.app.social_posts().get_connection(organization, connection.id).await.unwrap().unwrap();
    assert_eq!(stored.credentials.as_deref(), Some(arn.as_str()), "the record keeps the reference alone");
    let shown = serde_json::to_string(&shared::api::social::views::SocialConnection::from(&stored)).unwrap();
    assert!(!shown.contains(TOKEN));
    // Published with the token read back from the secret.
    let body = json!({"description": "From the vault", "destinations": [{"social_connection_id": connection.id}],
        "media_urls": [format!("{base}/clip.mp4")]});
    let links = harness.test.app.links.clone();
    let post = social.create_post(organization, new_post(&harness.test.app, &body), &links).await.unwrap();
    let published = social.publish(organization, post.id).await.unwrap();
    assert_eq!(published, shared::domain::social::publishing::Publishing::Done);
    let read = social.get_post(organization, &post.id.to_string()).await.unwrap();
    assert_eq!(read.status, PostStatus::Posted, "{read:?}");
    let authorizations: BTreeSet<String> =
        fake.received().iter().map(|request| request.headers["authorization"].clone()).collect();
    assert_eq!(authorizations, BTreeSet::from([format!("Bearer {TOKEN}")]));
}

async fn a_post_whose_message_was_lost_is_sent_again_by_publish_due(backend: Backend) {
    let harness = ticked(backend).await;
    let base = media_server().await;
    let reviewed = connect(&harness.test, "facebook", json!({"requires_approval": true})).await;
    let pending = post_clip(&harness, &base, &[&reviewed], json!({})).await;
    let id = PostId::parse(pending["post_id"].as_str().unwrap()).unwrap();
    // As a process that stopped after writing `processing` and before sending: the post
    // is processing, and no message was sent.
    let app = &harness.test.app;
    let repo = app.social_posts();
    let mut post = repo.get_post(harness.test.organization, id).await.unwrap().unwrap();
    let written = app.clock.now();
    post.status = PostStatus::Processing;
    for result in &mut post.results {
        result.status = shared::domain::social::ResultStatus::Processing;
    }
    post.updated_at = written;
    post.version += 1;
    assert!(repo.update_post(&post).await.unwrap());
    let social = app.social();
    // Judged by what each tick did with this post (the due index is every organization's).
    assert!(!social.publish_due_posts(written).await.unwrap().contains(&id), "not lost yet");
    // Five minutes on, one of two ticks sends it again.
    let later = written.after(shared::domain::social::REQUEUE_AFTER + Duration::from_secs(1));
    let (one, two) = tokio::join!(social.publish_due_posts(later), social.publish_due_posts(later));
    let times = one.unwrap().into_iter().chain(two.unwrap()).filter(|sent| *sent == id).count();
    assert_eq!(times, 1);
    let posted = settled(&harness, &id.to_string()).await;
    assert_eq!((posted["status"].as_str(), statuses(&posted)), (Some("posted"), vec!["success"]), "{posted}");
    let after = later.after(shared::domain::social::REQUEUE_AFTER * 3);
    assert!(!social.publish_due_posts(after).await.unwrap().contains(&id), "a posted post is never due");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn youtube_uploads_in_chunks_and_resumes_from_what_the_session_kept() {
    use shared::adapters::youtube::YoutubePublisher;
    use shared::domain::social::publisher::{MediumFile, Published, Publisher};
    const KIB: u64 = 1024;
    let total: u64 = 1_782_579;
    // Per PUT: the range it carried, and what the fake answered.
    let log = Arc::new(Mutex::new(Vec::<(String, u16)>::new()));
    let kept = Arc::new(Mutex::new(0u64));
    let fake_url = Arc::new(Mutex::new(String::new()));
    let (url, put_log, put_kept) = (fake_url.clone(), log.clone(), kept.clone());
    let fake = Fake::start(move |request, _| {
        if request.method == "POST" {
            let session =
                format!("{}/upload/youtube/v3/videos?uploadType=resumable&upload_id=big", url.lock().unwrap());
            return youtube_reply(200, &[("location", session)], json!({}));
        }
        let range = request.headers["content-range"].clone();
        let length: u64 = request.headers["content-length"].parse().unwrap();
        let (first, last) = range.strip_prefix("bytes ").unwrap().split_once('/').unwrap().0.split_once('-').unwrap();
        let (first, last): (u64, u64) = (first.parse().unwrap(), last.parse().unwrap());
        let mut log = put_log.lock().unwrap();
        let mut kept = put_kept.lock().unwrap();
        let status = if first != *kept || last - first + 1 != length {
            400
        } else if first == 512 * KIB && !log.iter().any(|(_, status)| *status == 503) {
            // The second chunk meets a server error once.
            503
        } else if first == 1024 * KIB {
            // Of the third, only its first 256 KiB are kept.
            *kept = 1280 * KIB;
            308
        } else if last + 1 < total {
            *kept = last + 1;
            308
        } else {
            *kept = total;
            201
        };
        log.push((range, status));
        match status {
            308 => youtube_reply(308, &[("range", format!("bytes=0-{}", *kept - 1))], json!({})),
            201 => youtube_reply(201, &[], json!({"id": "big1", "status": {"uploadStatus": "processed"}})),
            503 => youtube_error(503, "Backend Error", "backendError"),
            _ => youtube_error(400, "Invalid Content-Range", "badContent"),
        }
    })
    .await;
    *fake_url.lock().unwrap() = fake.url.clone();
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("big.mp4");
    std::fs::write(&path, (0..total).map(|i| (i % 251) as u8).collect::<Vec<u8>>()).unwrap();
    let publisher = YoutubePublisher::new(&fake.url).with_chunk_bytes(512 * 1024);
    let (post, connection) = bare_post();
    let credentials = json!({"access_token": TOKEN});
    let media = [MediumFile { path, content_type: "video/mp4".into(), bytes: total }];
    let answer = publisher.publish(&post, &connection, credentials.as_object(), &media).await.unwrap();
    assert_eq!(
        answer,
        Published::Posted { platform_post_id: "big1".into(), post_url: "https://www.youtube.com/watch?v=big1".into() }
    );
    let log = log.lock().unwrap().clone();
    let expected = [
        ("bytes 0-524287/1782579", 308),
        ("bytes 524288-1048575/1782579", 503),
        ("bytes 524288-1048575/1782579", 308),
        ("bytes 1048576-1572863/1782579", 308),
        ("bytes 1310720-1782578/1782579", 201),
    ];
    let log: Vec<(&str, u16)> = log.iter().map(|(range, status)| (range.as_str(), *status)).collect();
    assert_eq!(log, expected);
}

/// A post and a YouTube connection as stored, for the adapter alone.
fn bare_post() -> (SocialPost, shared::domain::social::SocialConnection) {
    use shared::domain::social::{Destination, Platform, PublisherKind, SandboxBehavior, SocialConnection};
    let now = Timestamp::parse("2030-01-01T00:00:00.000Z").unwrap();
    let organization = shared::domain::identity::OrganizationId::new_v4();
    let connection = SocialConnection {
        id: shared::domain::social::SocialConnectionId::new_v4(),
        organization_id: organization,
        platform: Platform::Youtube,
        account_name: "Channel".into(),
        account_username: "channel".into(),
        profile_url: "https://www.youtube.com/@channel".into(),
        requires_approval: false,
        publisher: PublisherKind::Youtube,
        sandbox_behavior: SandboxBehavior::Succeed,
        credentials: None,
        created_at: now,
    };
    let post = SocialPost {
        id: PostId::new_v4(),
        organization_id: organization,
        status: PostStatus::Processing,
        description: "A long one".into(),
        media: vec![],
        thumbnail: shared::domain::runs::MediaId::new_v4(),
        scheduled_at: now,
        destinations: vec![Destination { connection: connection.clone() }],
        results: vec![],
        error: None,
        attempts: 1,
        publishing_until: None,
        created_at: now,
        updated_at: now,
        version: 1,
        pending_media: None,
    };
    (post, connection)
}

/// A task queue that refuses every message.
struct Unreachable;

#[async_trait::async_trait]
impl shared::core::queue::Queue<shared::domain::work::Work> for Unreachable {
    async fn send(&self, _: &[shared::domain::work::Work]) -> anyhow::Result<()> {
        anyhow::bail!("the queue is unreachable")
    }
}

async fn a_message_that_cannot_be_sent_is_sent_again_by_a_later_tick(backend: Backend) {
    let harness = ticked(backend).await;
    let base = media_server().await;
    let x = connect(&harness.test, "x", json!({})).await;
    let app = &harness.test.app;
    let cut_off = Social { queue: &Unreachable, ..app.social() };
    let organization = harness.test.organization;
    let body = |extra: Value| {
        let mut body = json!({"description": "queued?", "destinations": [{"social_connection_id": x}],
            "media_urls": [format!("{base}/clip.mp4")]});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    // A create is answered (the post is stored, `processing`), and the scheduler's repair
    // sends its message once it has waited REQUEUE_AFTER: nothing is lost.
    let links = app.links.clone();
    let created = cut_off.create_post(organization, new_post(app, &body(json!({}))), &links).await.unwrap();
    assert_eq!(created.status, PostStatus::Processing, "{created:?}");
    let soon = app.clock.now().after(Duration::from_secs(10));
    assert!(!app.social().publish_due_posts(soon).await.unwrap().contains(&created.id), "not before REQUEUE_AFTER");
    let repaired = app.clock.now().after(shared::domain::social::REQUEUE_AFTER + Duration::from_secs(1));
    let sent = app.social().publish_due_posts(repaired).await.unwrap();
    assert_eq!(sent.iter().filter(|id| **id == created.id).count(), 1);
    let posted = settled(&harness, &created.id.to_string()).await;
    assert_eq!(posted["status"], "posted", "{posted}");
    // A due post whose message cannot be sent stays due, and the next tick sends it.
    let at = app.clock.now().after(Duration::from_secs(60));
    let later = body(json!({"scheduled_at": at.to_string()}));
    let scheduled = cut_off.create_post(organization, new_post(app, &later), &links).await.unwrap();
    let tick = at.after(Duration::from_secs(1));
    assert!(!cut_off.publish_due_posts(tick).await.unwrap().contains(&scheduled.id), "not sent");
    let stored = app.social_posts().get_post(organization, scheduled.id).await.unwrap().unwrap();
    assert_eq!(stored.status, PostStatus::Processing, "claimed, its message unsent");
    let next = tick.after(shared::domain::social::REQUEUE_AFTER + Duration::from_secs(1));
    let sent = app.social().publish_due_posts(next).await.unwrap();
    assert_eq!(sent.iter().filter(|id| **id == scheduled.id).count(), 1);
    let posted = settled(&harness, &scheduled.id.to_string()).await;
    assert_eq!(posted["status"], "posted", "{posted}");
}

// ---------------------------------------------------------------------------------------
// Connections: the cap, deletes, refreshed tokens; reads that ask every platform at once.

async fn connections_are_capped_per_organization_even_when_created_at_once(backend: Backend) {
    use shared::domain::social::MAX_CONNECTIONS_PER_ORGANIZATION as MAX;
    let harness = Harness::new(backend).await;
    let body = |index: usize| {
        json!({"platform": "x", "account_name": format!("a{index}"), "account_username": "a",
            "profile_url": "https://x.example/a"})
    };
    let below = MAX as usize - 5;
    for index in 0..below {
        let (status, created) = harness.test.call(Method::POST, "/social/connections", Some(body(index))).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
    }
    // Twelve at once for the last five places: five are made, seven refused.
    let creates =
        (below..below + 12).map(|index| harness.test.call(Method::POST, "/social/connections", Some(body(index))));
    let answers = futures::future::join_all(creates).await;
    let made = answers.iter().filter(|(status, _)| *status == StatusCode::CREATED).count();
    let refused: Vec<&Value> =
        answers.iter().filter(|(status, _)| *status == StatusCode::CONFLICT).map(|(_, body)| body).collect();
    assert_eq!((made, refused.len()), (5, 7), "{answers:?}");
    for body in refused {
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains(&format!("has {MAX} social connections, the most it may have")), "{detail}");
        crate::openapi::conforms("create-social-connection", StatusCode::CONFLICT, body);
    }
    let (_, listed) = harness.test.call(Method::GET, "/social/connections", None).await;
    let connections = listed["social_connections"].as_array().unwrap();
    assert_eq!(connections.len(), MAX as usize);
    // A delete makes room for one, and one only.
    let first = connections[0]["social_connection_id"].as_str().unwrap();
    let (status, deleted) = harness.test.call(Method::DELETE, &format!("/social/connections/{first}"), None).await;
    assert_eq!((status, &deleted), (StatusCode::OK, &json!({"success": true})));
    let (status, _) = harness.test.call(Method::POST, "/social/connections", Some(body(100))).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = harness.test.call(Method::POST, "/social/connections", Some(body(101))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    // The cap is each organization's own.
    let (organization, key) = harness.test.add_organization(true).await;
    let other = crate::helpers::TestApp { app: harness.test.app.clone(), key, organization };
    let (status, _) = other.call(Method::POST, "/social/connections", Some(body(0))).await;
    assert_eq!(status, StatusCode::CREATED);
}

/// An organization whose connections were made before its item counted them: the count
/// starts from them, so the cap holds (and a delete never takes it below zero).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_dynamodb_connections_made_before_the_count_are_counted_against_the_cap() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use shared::domain::social::MAX_CONNECTIONS_PER_ORGANIZATION as MAX;
    let table = shared::adapters::dynamodb::DynamoDb::connect(format!("own-{}", uuid::Uuid::new_v4())).await;
    table.ensure_table().await.unwrap();
    let raw = table.clone();
    let harness = Harness::through_table(move |_| table).await;
    let body = |index: usize| {
        json!({"platform": "x", "account_name": format!("a{index}"), "account_username": "a",
            "profile_url": "https://x.example/a"})
    };
    let before = MAX as usize - 3;
    for index in 0..before {
        let (status, created) = harness.test.call(Method::POST, "/social/connections", Some(body(index))).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
    }
    // As an earlier build left it: connections, no count.
    let organization = harness.test.organization;
    let key = [
        ("pk".to_owned(), AttributeValue::S(format!("ORG#{organization}"))),
        ("sk".to_owned(), AttributeValue::S("ORG".to_owned())),
    ];
    raw.client()
        .update_item()
        .table_name(raw.table())
        .set_key(Some(key.clone().into()))
        .update_expression("REMOVE social_connection_count")
        .condition_expression("attribute_exists(social_connection_count)")
        .send()
        .await
        .expect("the organization's item counted its connections");
    // Six at once for the last three places: three are made, three refused.
    let creates =
        (before..before + 6).map(|index| harness.test.call(Method::POST, "/social/connections", Some(body(index))));
    let answers = futures::future::join_all(creates).await;
    let made = answers.iter().filter(|(status, _)| *status == StatusCode::CREATED).count();
    let refused = answers.iter().filter(|(status, _)| *status == StatusCode::CONFLICT).count();
    assert_eq!((made, refused), (3, 3), "{answers:?}");
    let (_, listed) = harness.test.call(Method::GET, "/social/connections", None).await;
    let connections = listed["social_connections"].as_array().unwrap();
    assert_eq!(connections.len(), MAX as usize);
    let count = |item: &aws_sdk_dynamodb::operation::get_item::GetItemOutput| {
        item.item().unwrap()["social_connection_count"].as_n().unwrap().parse::<u32>().unwrap()
    };
    let read = || {
        raw.client().get_item().table_name(raw.table()).set_key(Some(key.clone().into())).consistent_read(true).send()
    };
    assert_eq!(count(&read().await.unwrap()), MAX);
    // Deleting them all brings the count to zero, never below.
    for connection in connections {
        let path = format!("/social/connections/{}", connection["social_connection_id"].as_str().unwrap());
        let (status, deleted) = harness.test.call(Method::DELETE, &path, None).await;
        assert_eq!((status, &deleted), (StatusCode::OK, &json!({"success": true})));
    }
    assert_eq!(count(&read().await.unwrap()), 0);
    let (status, _) = harness.test.call(Method::POST, "/social/connections", Some(body(100))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(count(&read().await.unwrap()), 1);
}

async fn a_deleted_connection_fails_its_pending_posts_and_nothing_else(backend: Backend) {
    let harness = ticked(backend).await;
    let base = media_server().await;
    let gone = connect(&harness.test, "x", json!({})).await;
    let kept = connect(&harness.test, "linkedin", json!({})).await;
    let reviewed = connect(&harness.test, "facebook", json!({"requires_approval": true})).await;
    let later = in_30_days(&harness);
    let posted = post_clip(&harness, &base, &[&gone], json!({})).await;
    let posted_id = posted["post_id"].as_str().unwrap().to_owned();
    assert_eq!(settled(&harness, &posted_id).await["status"], "posted");
    let alone = post_clip(&harness, &base, &[&gone], json!({"scheduled_at": later})).await;
    let shared = post_clip(&harness, &base, &[&gone, &kept], json!({"scheduled_at": later})).await;
    let pending = post_clip(&harness, &base, &[&gone, &reviewed], json!({})).await;
    let untouched = post_clip(&harness, &base, &[&kept], json!({"scheduled_at": later})).await;
    // As stored (a read's signed thumbnail link changes with the second it is read at).
    let stored_post = |id: &str| {
        let id = PostId::parse(id).unwrap();
        let (repo, organization) = (harness.test.app.social_posts().clone(), harness.test.organization);
        async move { repo.get_post(organization, id).await.unwrap().unwrap() }
    };
    let before = stored_post(&posted_id).await;

    let path = format!("/social/connections/{gone}");
    // Another organization's delete finds nothing, and changes nothing.
    let (organization, key) = harness.test.add_organization(true).await;
    let other = crate::helpers::TestApp { app: harness.test.app.clone(), key, organization };
    let (status, body) = other.call(Method::DELETE, &path, None).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({"detail": "Social connection not found"})));
    assert_eq!(get_post(&harness, alone["post_id"].as_str().unwrap()).await["status"], "scheduled");
    let (status, deleted) = harness.test.call(Method::DELETE, &path, None).await;
    assert_eq!((status, &deleted), (StatusCode::OK, &json!({"success": true})));
    crate::openapi::conforms("delete-social-connection", StatusCode::OK, &deleted);
    for path in [path.clone(), "/social/connections/not-an-id".to_owned()] {
        let (status, body) = harness.test.call(Method::DELETE, &path, None).await;
        assert_eq!((status, &body), (StatusCode::NOT_FOUND, &json!({"detail": "Social connection not found"})));
        crate::openapi::conforms("delete-social-connection", StatusCode::NOT_FOUND, &body);
    }
    let (_, listed) = harness.test.call(Method::GET, "/social/connections", None).await;
    let ids: Vec<&str> = listed["social_connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["social_connection_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [kept.as_str(), reviewed.as_str()]);

    let deleted_message = shared::domain::social::CONNECTION_DELETED;
    // Its only destination gone: failed, saying why.
    let alone = get_post(&harness, alone["post_id"].as_str().unwrap()).await;
    assert_eq!((alone["status"].as_str(), statuses(&alone)), (Some("failed"), vec!["failed"]), "{alone}");
    assert_eq!(alone["results"][0]["message"], deleted_message);
    assert!(alone["error"].as_str().unwrap().contains(deleted_message), "{alone}");
    // One destination of two gone: still scheduled (pending) for the other.
    let shared_id = shared["post_id"].as_str().unwrap().to_owned();
    let shared = get_post(&harness, &shared_id).await;
    assert_eq!((shared["status"].as_str(), statuses(&shared)), (Some("scheduled"), vec!["failed", "scheduled"]));
    assert_eq!(shared["results"][0]["message"], deleted_message);
    let pending_id = pending["post_id"].as_str().unwrap().to_owned();
    let pending = get_post(&harness, &pending_id).await;
    assert_eq!(
        (pending["status"].as_str(), statuses(&pending)),
        (Some("pending_approval"), vec!["failed", "scheduled"])
    );
    // What was published, and what never went to it, are as they were.
    assert_eq!(stored_post(&posted_id).await, before);
    assert_eq!(statuses(&get_post(&harness, untouched["post_id"].as_str().unwrap()).await), ["scheduled"]);
    // A new post to it is refused, naming it.
    let (status, refused) = post(
        &harness.test,
        json!({"description": "d", "destinations": [{"social_connection_id": gone}],
               "media_urls": [format!("{base}/clip.mp4")]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains(&gone), "{refused}");
    // Published later, what is left goes out and the failed destination stays failed.
    let (status, approved) = harness.test.call(Method::POST, &format!("/social/post/{pending_id}/approve"), None).await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    let approved = settled(&harness, &pending_id).await;
    assert_eq!(
        (approved["status"].as_str(), statuses(&approved)),
        (Some("partial_failure"), vec!["failed", "success"])
    );
    let due = harness.test.app.clock.now().after(Duration::from_secs(31 * 24 * 3600));
    let sent = harness.test.app.social().publish_due_posts(due).await.unwrap();
    assert!(sent.contains(&PostId::parse(&shared_id).unwrap()), "{sent:?}");
    let published = settled(&harness, &shared_id).await;
    assert_eq!(
        (published["status"].as_str(), statuses(&published)),
        (Some("partial_failure"), vec!["failed", "success"])
    );
    assert_eq!(published["results"][0]["message"], deleted_message);
}

/// A delete whose time for pending posts is over (none here: a connection with thousands)
/// has still deleted the connection first: nothing is published with it, and the posts
/// it did not reach fail that destination when they are published.
async fn a_deleted_connection_is_gone_at_once_and_publishing_fails_the_posts_it_left(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server().await;
    let reviewed = connect(&harness.test, "facebook", json!({"requires_approval": true})).await;
    let kept = connect(&harness.test, "x", json!({})).await;
    let pending = post_clip(&harness, &base, &[&reviewed, &kept], json!({"scheduled_at": in_30_days(&harness)})).await;
    let pending_id = pending["post_id"].as_str().unwrap().to_owned();
    assert_eq!(pending["status"], "pending_approval", "{pending}");
    let app = &harness.test.app;
    let social = Social { delete_budget: Duration::ZERO, ..app.social() };
    social.delete_connection(harness.test.organization, &reviewed).await.unwrap();
    let (_, listed) = harness.test.call(Method::GET, "/social/connections", None).await;
    assert_eq!(listed["social_connections"].as_array().unwrap().len(), 1, "{listed}");
    let (status, body) = harness.test.call(Method::DELETE, &format!("/social/connections/{reviewed}"), None).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({"detail": "Social connection not found"})));
    // Not reached by the delete: as it was until it is published.
    let left = get_post(&harness, &pending_id).await;
    assert_eq!((left["status"].as_str(), statuses(&left)), (Some("pending_approval"), vec!["scheduled", "scheduled"]));
    let (status, approved) = harness.test.call(Method::POST, &format!("/social/post/{pending_id}/approve"), None).await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    let due = app.clock.now().after(Duration::from_secs(31 * 24 * 3600));
    app.social().publish_due_posts(due).await.unwrap();
    let published = settled(&harness, &pending_id).await;
    assert_eq!(
        (published["status"].as_str(), statuses(&published)),
        (Some("partial_failure"), vec!["failed", "success"]),
        "{published}"
    );
    assert_eq!(published["results"][0]["message"], shared::domain::social::CONNECTION_DELETED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_youtube_connection_deletes_its_secret_in_secrets_manager() {
    use shared::adapters::secrets::SecretsManager;
    assert!(
        std::env::var("AWS_ENDPOINT_URL_SECRETS_MANAGER").is_ok(),
        "AWS_ENDPOINT_URL_SECRETS_MANAGER is not set: run the tests with ./scripts/test.sh"
    );
    let harness = Harness::tuned_with(Backend::DynamoDb, 0, |settings| settings).await;
    let base = media_server().await;
    let aws = shared::adapters::aws_env::load_defaults().await;
    let prefix = format!("tests-{}/social", uuid::Uuid::new_v4());
    let vault = SecretsManager::from_config(&aws).vault(&prefix);
    let social = Social { vault: &vault, ..harness.test.app.social() };
    let organization = harness.test.organization;
    let body = json!({"platform": "youtube", "account_name": "Channel", "account_username": "channel",
        "profile_url": "https://www.youtube.com/@channel", "publisher": "youtube", "requires_approval": true,
        "credentials": {"access_token": TOKEN}});
    let connection = social
        .create_connection(organization, parse::new_connection(body.as_object().unwrap()).unwrap())
        .await
        .unwrap();
    let arn = connection.credentials.clone().expect("a reference to the secret");
    let secrets = aws_sdk_secretsmanager::Client::new(&aws);
    assert!(secrets.get_secret_value().secret_id(&arn).send().await.is_ok());
    let body = json!({"description": "Waits", "destinations": [{"social_connection_id": connection.id}],
        "media_urls": [format!("{base}/clip.mp4")]});
    let post =
        social.create_post(organization, new_post(&harness.test.app, &body), &harness.test.app.links).await.unwrap();
    assert_eq!(post.status, PostStatus::PendingApproval);
    social.delete_connection(organization, &connection.id.to_string()).await.unwrap();
    let gone = secrets.get_secret_value().secret_id(&arn).send().await.unwrap_err();
    assert!(
        gone.as_service_error().is_some_and(|error| error.is_resource_not_found_exception()),
        "the secret is deleted for good: {gone:?}"
    );
    let failed = social.get_post(organization, &post.id.to_string()).await.unwrap();
    assert_eq!(failed.status, PostStatus::Failed, "{failed:?}");
    assert_eq!(failed.results[0].message.as_deref(), Some(shared::domain::social::CONNECTION_DELETED));
    assert!(harness.test.app.social_posts().get_connection(organization, connection.id).await.unwrap().is_none());
    // Done again (a repeat after a failure): not found, nothing else happens.
    let again = social.delete_connection(organization, &connection.id.to_string()).await.unwrap_err();
    assert!(matches!(again, shared::domain::social::SocialError::NotFound(_)), "{again:?}");
}

/// A YouTube connection whose access token has run out, with a refresh token of `refresh`.
async fn expired_channel(harness: &Harness, refresh: &str) -> String {
    let credentials = json!({"access_token": "ya29.expired", "refresh_token": refresh,
        "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET});
    connect(&harness.test, "youtube", json!({"publisher": "youtube", "credentials": credentials})).await
}

async fn an_expired_youtube_token_is_refreshed_before_the_upload_and_kept(backend: Backend) {
    let fake = youtube_fake(None).await;
    let harness = youtube_harness(backend, &fake).await;
    let base = media_server().await;
    // A refresh token needs the OAuth client that issued it.
    let (status, refused) = harness
        .test
        .call(
            Method::POST,
            "/social/connections",
            Some(json!({"platform": "youtube", "account_name": "c", "account_username": "c",
                "profile_url": "https://www.youtube.com/@c", "publisher": "youtube",
                "credentials": {"access_token": "a", "refresh_token": REFRESH}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("client_id"), "{refused}");
    let channel = expired_channel(&harness, REFRESH).await;
    let created = post_clip(&harness, &base, &[&channel], json!({})).await;
    let id = created["post_id"].as_str().unwrap();
    let mut read = get_post(&harness, id).await;
    for _ in 0..300 {
        if read["status"] != "processing" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        read = get_post(&harness, id).await;
    }
    assert_eq!(read["status"], "posted", "{read}");
    let received = fake.received();
    let refreshes: Vec<_> = received.iter().filter(|request| request.path == "/token").collect();
    assert_eq!(refreshes.len(), 1, "{:?}", fake.requests());
    let form: std::collections::BTreeMap<String, String> =
        url::form_urlencoded::parse(refreshes[0].raw.as_bytes()).into_owned().collect();
    assert_eq!(form.get("refresh_token").map(String::as_str), Some(REFRESH));
    // Every call to YouTube carried the refreshed token (none the expired one).
    let authorizations: BTreeSet<&str> = received
        .iter()
        .filter(|request| request.path != "/token")
        .map(|request| request.headers["authorization"].as_str())
        .collect();
    assert_eq!(authorizations, BTreeSet::from([format!("Bearer {TOKEN}").as_str()]));
    // Kept in the vault, with its end: the next upload uses it without a refresh.
    let app = &harness.test.app;
    let connection_id = shared::domain::social::SocialConnectionId::parse(&channel).unwrap();
    let stored = app.social_posts().get_connection(harness.test.organization, connection_id).await.unwrap().unwrap();
    let kept = app.social().vault.get(stored.credentials.as_deref().unwrap()).await.unwrap();
    assert_eq!(kept["access_token"], TOKEN);
    assert_eq!(kept["refresh_token"], REFRESH);
    assert!(kept["expires_at"].as_str().is_some(), "{kept:?}");
    let again = post_clip(&harness, &base, &[&channel], json!({})).await;
    let id = again["post_id"].as_str().unwrap();
    for _ in 0..300 {
        if get_post(&harness, id).await["status"] != "processing" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(get_post(&harness, id).await["status"], "posted");
    assert_eq!(fake.requests().iter().filter(|request| request.as_str() == "POST /token").count(), 1);
}

async fn a_revoked_refresh_token_fails_the_destination_saying_so(backend: Backend) {
    let fake = youtube_fake(None).await;
    let harness = youtube_harness(backend, &fake).await;
    let base = media_server().await;
    let channel = expired_channel(&harness, "1//revoked").await;
    let created = post_clip(&harness, &base, &[&channel], json!({})).await;
    let failed = settled(&harness, created["post_id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["results"][0]["message"].as_str().unwrap();
    assert!(message.contains("refreshing the YouTube access token"), "{message}");
    assert!(message.contains("invalid_grant (Token has been expired or revoked.)"), "{message}");
    assert!(message.contains("connect the account again"), "{message}");
    // Nothing was uploaded with the expired token.
    assert_eq!(fake.requests(), ["POST /token"]);
}

/// Answers a read's question about each accepted destination once every one of `asked`
/// destinations is being asked at the same time (so it answers only when they are asked
/// in parallel), and never for the account named `hang`.
struct Gathering {
    sandbox: Arc<dyn shared::domain::social::publisher::Publisher>,
    all_asked: Arc<tokio::sync::Barrier>,
}

#[async_trait::async_trait]
impl shared::domain::social::publisher::Publisher for Gathering {
    async fn publish(
        &self,
        post: &SocialPost,
        connection: &shared::domain::social::SocialConnection,
        credentials: Option<&serde_json::Map<String, Value>>,
        media: &[shared::domain::social::publisher::MediumFile],
    ) -> anyhow::Result<shared::domain::social::publisher::Published> {
        self.sandbox.publish(post, connection, credentials, media).await
    }

    async fn status(
        &self,
        post: &SocialPost,
        connection: &shared::domain::social::SocialConnection,
        credentials: Option<&serde_json::Map<String, Value>>,
        platform_post_id: &str,
    ) -> anyhow::Result<shared::domain::social::publisher::Published> {
        if connection.account_name == "hang" {
            return std::future::pending().await;
        }
        self.all_asked.wait().await;
        self.sandbox.status(post, connection, credentials, platform_post_id).await
    }
}

async fn a_read_asks_every_destination_at_once_within_one_wait(backend: Backend) {
    let harness = Harness::new(backend).await;
    let base = media_server().await;
    let mut accounts = Vec::new();
    for name in ["a", "b", "c", "d", "hang"] {
        let body = json!({"platform": "x", "account_name": name, "account_username": name,
            "profile_url": "https://x.example/a", "sandbox_behavior": "async"});
        let (status, created) = harness.test.call(Method::POST, "/social/connections", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        accounts.push(created["social_connection_id"].as_str().unwrap().to_owned());
    }
    let to: Vec<&str> = accounts.iter().map(String::as_str).collect();
    let created = post_clip(&harness, &base, &to, json!({})).await;
    let id = PostId::parse(created["post_id"].as_str().unwrap()).unwrap();
    // Published by the workers: every destination accepted, none finished.
    let repo = harness.test.app.social_posts();
    for _ in 0..300 {
        let post = repo.get_post(harness.test.organization, id).await.unwrap().unwrap();
        if post.results.iter().all(|result| result.platform_post_id.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let app = &harness.test.app;
    let sandbox = app.social().publishers.sandbox.clone();
    let gathering = Arc::new(Gathering { sandbox, all_asked: Arc::new(tokio::sync::Barrier::new(4)) });
    let publishers = shared::domain::social::publisher::Publishers {
        sandbox: gathering.clone(),
        youtube: app.social().publishers.youtube.clone(),
    };
    let social = Social { publishers: &publishers, ..app.social() };
    // One read: the four that answer only together are recorded; the one that never
    // answers is left processing once the read's one wait is over, and the read answers.
    let read = social.get_post(harness.test.organization, &id.to_string()).await.unwrap();
    let statuses: Vec<&str> = read.results.iter().map(|result| result.status.as_str()).collect();
    assert_eq!(statuses, ["success", "success", "success", "success", "processing"], "{read:?}");
    assert_eq!(read.status, PostStatus::Processing);
}

async fn a_post_of_slow_media_answers_processing_and_a_worker_prepares_it(backend: Backend) {
    let harness = Harness::new(backend).await;
    // Each file comes 3 s after it is asked for: more than this create's 1 s of its own
    // work on media (8 s in a deployment), so the workers take them over.
    let slow = crate::helpers::folder_server(media(), Duration::from_secs(3)).await;
    let x = connect(&harness.test, "x", json!({})).await;
    let reviewed = connect(&harness.test, "facebook", json!({"requires_approval": true})).await;
    let app = &harness.test.app;
    let social = Social { inline_media: Duration::from_secs(1), ..app.social() };
    let organization = harness.test.organization;
    let create = |to: &str, file: &str| {
        let body = json!({"description": "Slow", "destinations": [{"social_connection_id": to}],
            "media_urls": [format!("{slow}/{file}")]});
        let new = new_post(app, &body);
        let links = app.links.clone();
        async move { social.create_post(organization, new, &links).await }
    };
    // Answered at once as processing, then published by the workers with its thumbnail.
    let post = create(&x, "clip.mp4").await.unwrap();
    assert_eq!((post.status, post.media.len()), (PostStatus::Processing, 0), "{post:?}");
    assert!(post.pending_media.is_some());
    let posted = settled(&harness, &post.id.to_string()).await;
    assert_eq!((posted["status"].as_str(), statuses(&posted)), (Some("posted"), vec!["success"]), "{posted}");
    let stored = app.social_posts().get_post(organization, post.id).await.unwrap().unwrap();
    assert_eq!((stored.media.len(), stored.pending_media.is_none()), (1, true));
    assert_eq!(stored.media[0].duration_ms, Some(4_000));
    let (bytes, content_type) = crate::generation::fetch(posted["thumbnail_url"].as_str().unwrap()).await;
    assert_eq!(content_type, "image/jpeg");
    assert!(!bytes.is_empty());
    // Media the checks refuse fail every destination, saying why.
    let long = create(&x, "long.mp4").await.unwrap();
    assert_eq!(long.status, PostStatus::Processing);
    let failed = settled(&harness, &long.id.to_string()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["results"][0]["message"].as_str().unwrap();
    assert!(message.contains("media_urls[0]: the video is 150.0 s long; x takes videos of 0.5 to 140 s"), "{message}");
    let missing = create(&x, "missing.mp4").await.unwrap();
    let failed = settled(&harness, &missing.id.to_string()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(
        failed["results"][0]["message"].as_str().unwrap().contains("media_urls[0]: the server answered 404 Not Found"),
        "{failed}"
    );
    // Prepared, a post for approval waits for it.
    let waiting = create(&reviewed, "clip.mp4").await.unwrap();
    assert_eq!(waiting.status, PostStatus::Processing);
    let pending = settled(&harness, &waiting.id.to_string()).await;
    assert_eq!((pending["status"].as_str(), statuses(&pending)), (Some("pending_approval"), vec!["scheduled"]));
    // What is quick to check is still refused at once, naming the field.
    let refused = create(&uuid::Uuid::new_v4().to_string(), "clip.mp4").await.unwrap_err();
    assert!(refused.to_string().contains("destinations[0].social_connection_id"), "{refused}");
}

/// A post create's body parsed at the edge, as its handler parses it, on the app's clock.
fn new_post(app: &shared::app::App, body: &Value) -> NewPost {
    parse::new_post(body.as_object().unwrap(), app.clock.now()).unwrap()
}
