//! Each function's IAM policy grants exactly the DynamoDB and S3 actions its endpoint
//! performs: every endpoint runs its paths against DynamoDB Local and the S3 emulator with
//! clients that record the action of each call (of each part of a transaction, and of
//! each presigned URL, which is used with the signer's permissions).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shared::api::ROUTES;
use shared::app::{App, Media};
use shared::domain::identity::{hash_api_key, Organization, OrganizationId};
use uuid::Uuid;

use crate::faults::kill_a_bulk_after_it_reserved;
use crate::helpers::{call_function, dynamodb, large_entries, s3_store, TestApp};

/// The run engine's functions (and those of triggers, avatars and social posts, which
/// start runs or which node-worker processes), held to their policies by `runs::aws`
/// (which drives runs through an API and a node-worker with recording clients).
pub const RUN_ROUTES: [&str; 26] = [
    "start-run",
    "get-run",
    "get-run-nodes",
    "cancel-run",
    "resume-run",
    "list-agent-runs",
    "list-runs",
    "get-media",
    "list-run-webhooks",
    "redeliver-run-webhook",
    "rotate-webhook-secret",
    "delete-webhook-secret",
    "list-avatar-profiles",
    "create-avatar-profile",
    "get-avatar-profile",
    "fire-trigger",
    "get-trigger",
    "list-trigger-runs",
    "create-social-connection",
    "list-social-connections",
    "delete-social-connection",
    "create-social-post",
    "list-social-posts",
    "get-social-post",
    "approve-social-post",
    "reject-social-post",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_function_is_granted_exactly_the_actions_it_performs() {
    let (backend, log) = dynamodb().await.recording_actions();
    let (media, s3_log) = s3_store().await.recording_actions();
    let mut test = TestApp {
        app: Arc::new(App::dynamodb(backend.clone(), Media::S3(media))),
        key: String::new(),
        organization: OrganizationId::new_v4(),
    };
    let (organization, key) = test.add_organization(true).await;
    (test.organization, test.key) = (organization, key);
    let mut performed: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut run = |function: &'static str, expected: StatusCode, (status, body): (StatusCode, Value)| {
        assert_eq!(status, expected, "{function}: {body}");
        let done = performed.entry(function).or_default();
        done.extend(log.take());
        done.extend(s3_log.take());
        body
    };
    log.take();
    s3_log.take();

    run("whoami", StatusCode::OK, test.call(Method::GET, "/whoami", None).await);
    run("get-openapi", StatusCode::OK, test.raw(Method::GET, "/openapi.json", &[], vec![]).await);
    let created = run(
        "create-shared-store",
        StatusCode::OK,
        test.call(Method::POST, "/shared-stores", Some(json!({ "name": "s" }))).await,
    );
    let store = created["store"]["id"].as_str().unwrap().to_owned();
    // With an Idempotency-Key: the claim, the kept answer and the repeat are puts.
    let authorization = format!("Bearer {}", test.key);
    let headers = [("authorization", authorization.as_str()), ("idempotency-key", "iam-check")];
    for _ in 0..2 {
        let answer = test.raw(Method::POST, "/shared-stores", &headers, br#"{"name": "keyed"}"#.to_vec()).await;
        run("create-shared-store", StatusCode::OK, answer);
    }
    let base = format!("/shared-stores/{store}");
    run("list-shared-stores", StatusCode::OK, test.call(Method::GET, "/shared-stores", None).await);
    run("rename-shared-store", StatusCode::OK, test.call(Method::PATCH, &base, Some(json!({ "name": "t" }))).await);
    let entry = |id: &str| format!("{base}/entries/{id}");
    let put = json!({ "display_name": "d" });
    run("put-shared-store-entry", StatusCode::OK, test.call(Method::PUT, &entry("e1"), Some(put.clone())).await);
    run("put-shared-store-entry", StatusCode::OK, test.call(Method::PUT, &entry("e1"), Some(put.clone())).await);
    run("get-shared-store-entry", StatusCode::OK, test.call(Method::GET, &entry("e1"), None).await);
    run("get-shared-store-entry", StatusCode::NOT_FOUND, test.call(Method::GET, &entry("none"), None).await);
    run("list-shared-store-entries", StatusCode::OK, test.call(Method::GET, &format!("{base}/entries"), None).await);
    let rename = json!({ "entry_id": "e2", "display_name": "d2" });
    run("rename-shared-store-entry", StatusCode::OK, test.call(Method::PATCH, &entry("e1"), Some(rename)).await);
    let same = json!({ "entry_id": "e2", "display_name": "d3" });
    run("rename-shared-store-entry", StatusCode::OK, test.call(Method::PATCH, &entry("e2"), Some(same)).await);
    run("delete-shared-store-entry", StatusCode::OK, test.call(Method::DELETE, &entry("e2"), None).await);
    let bulk =
        json!({ "entries": [{ "entry_id": "b1", "display_name": "b" }, { "entry_id": "b2", "display_name": "b" }] });
    let bulk_path = format!("{base}/entries/bulk");
    // Into an empty store (no read), then the same IDs again (the existing ones are read).
    run(
        "bulk-upsert-shared-store-entries",
        StatusCode::OK,
        test.call(Method::POST, &bulk_path, Some(bulk.clone())).await,
    );
    run("bulk-upsert-shared-store-entries", StatusCode::OK, test.call(Method::POST, &bulk_path, Some(bulk)).await);
    run("delete-shared-store", StatusCode::OK, test.call(Method::DELETE, &base, None).await);

    // A bulk that died after reserving slots is repaired by the next writer of the store:
    // a bulk, a store delete, or a writer of one entry (the dying bulk runs on a client of
    // its own, so its calls are not recorded).
    let plain = dynamodb().await;
    let next_bulk = json!({ "entries": [{ "entry_id": "next", "display_name": "n" }] });
    let repairers = [
        ("bulk-upsert-shared-store-entries", Method::POST, "/entries/bulk", Some(next_bulk)),
        ("delete-shared-store", Method::DELETE, "", None),
        ("put-shared-store-entry", Method::PUT, "/entries/kept", Some(json!({ "display_name": "d" }))),
        (
            "rename-shared-store-entry",
            Method::PATCH,
            "/entries/kept",
            Some(json!({ "entry_id": "moved", "display_name": "d" })),
        ),
        ("delete-shared-store-entry", Method::DELETE, "/entries/kept", None),
    ];
    for (function, method, path, body) in repairers {
        let store = test.create_store("repaired").await;
        let kept = format!("/shared-stores/{store}/entries/kept");
        assert_eq!(test.call(Method::PUT, &kept, Some(json!({ "display_name": "k" }))).await.0, StatusCode::OK);
        let lost: Vec<String> = (0..3).map(|i| format!("lost-{i}")).collect();
        kill_a_bulk_after_it_reserved(&test, &plain, &store, &lost).await;
        log.take();
        run(function, StatusCode::OK, test.call(method, &format!("/shared-stores/{store}{path}"), body).await);
        if function != "delete-shared-store" {
            assert_eq!(test.call(Method::DELETE, &format!("/shared-stores/{store}"), None).await.0, StatusCode::OK);
        }
    }

    // Answers larger than a Lambda response go through the bucket.
    let big = test.create_store("big").await;
    log.take();
    let bulk = json!({ "entries": large_entries("e", 26, 255_000) });
    let bulk_path = format!("/shared-stores/{big}/entries/bulk");
    let (status, _, body) =
        call_function(&test, "bulk-upsert-shared-store-entries", "POST", &bulk_path, Some(&bulk)).await;
    run("bulk-upsert-shared-store-entries", StatusCode::SEE_OTHER, (status, body));
    let list_path = format!("/shared-stores/{big}/entries");
    let (status, _, body) = call_function(&test, "list-shared-store-entries", "GET", &list_path, None).await;
    run("list-shared-store-entries", StatusCode::SEE_OTHER, (status, body));

    let created = run("create-agent", StatusCode::CREATED, test.call(Method::POST, "/agent/create", None).await);
    // An organization stored before workspaces existed: its first agent makes its primary.
    let (older, older_key) = (OrganizationId::new_v4(), format!("older-{}", Uuid::new_v4()));
    let now = shared::domain::time::Timestamp::now();
    let organization = Organization {
        id: older,
        name: "Older".into(),
        slug: format!("older-{older}"),
        api_access: true,
        plan: "free".into(),
        credits: 0,
        created_at: now,
    };
    test.app.identity().upsert_organization(&organization).await.unwrap();
    test.app.identity().upsert_api_key(&hash_api_key(&older_key), Some(older), now).await.unwrap();
    log.take();
    run("create-agent", StatusCode::CREATED, test.call_as(&older_key, Method::POST, "/agent/create", None).await);
    let agent = created["agent_id"].as_str().unwrap().to_owned();
    let workspace = created["agent"]["workspace_id"].as_str().unwrap().to_owned();
    run(
        "list-agents",
        StatusCode::OK,
        test.call(Method::GET, &format!("/agents?workspace_id={workspace}"), None).await,
    );
    run("get-agent", StatusCode::OK, test.call(Method::GET, &format!("/agent/{agent}"), None).await);
    let operations = json!({ "operations": [{ "op": "create_node", "node_type_id": shared::domain::nodes::SPEED }] });
    run(
        "update-agent",
        StatusCode::OK,
        test.call(Method::POST, &format!("/agent/{agent}/update"), Some(operations)).await,
    );
    // Triggers' states go with the graph: a Schedule saved (a put of the transaction),
    // one whose run request names an asset-manager item (the check reads the
    // workspace's connections, and refuses), and the first deleted (a delete).
    let update = |operations: Value| {
        let (test, agent) = (test.clone(), agent.clone());
        async move {
            test.call(Method::POST, &format!("/agent/{agent}/update"), Some(json!({ "operations": operations }))).await
        }
    };
    let schedule = shared::domain::nodes::SCHEDULE_TRIGGER;
    let saved = run(
        "update-agent",
        StatusCode::OK,
        update(json!([{ "op": "create_node", "node_type_id": schedule, "params_used": { "timezone": "UTC" } }])).await,
    );
    let trigger = saved["created_nodes"][0]["agent_node_id"].as_str().unwrap().to_owned();
    let asset = json!({ "asset_manager_assets": [{ "id": Uuid::new_v4().to_string() }] });
    run(
        "update-agent",
        StatusCode::BAD_REQUEST,
        update(json!([
            { "op": "create_node", "node_type_id": shared::domain::nodes::VIDEO_INPUT },
            { "op": "create_node", "node_type_id": schedule, "params_used": { "cron": "0 0 * * *", "run_request": asset } },
        ]))
        .await,
    );
    run("update-agent", StatusCode::OK, update(json!([{ "op": "delete_node", "agent_node_id": trigger }])).await);
    run(
        "duplicate-agent",
        StatusCode::CREATED,
        test.call(Method::POST, &format!("/agent/{agent}/duplicate"), None).await,
    );
    run("delete-agent", StatusCode::OK, test.call(Method::POST, &format!("/agent/{agent}/delete"), None).await);
    run("list-node-types", StatusCode::OK, test.call(Method::GET, "/node_types", None).await);

    let ticket =
        run("get-upload-url", StatusCode::OK, test.call(Method::POST, "/uploads/image/get_upload_url", None).await);
    let upload = ticket["id"].as_str().unwrap().to_owned();
    let finalize = || test.call(Method::POST, "/uploads/image/finalize_upload", Some(json!({ "id": upload })));
    run("finalize-upload", StatusCode::BAD_REQUEST, finalize().await);
    assert_eq!(crate::uploads::put(&ticket, crate::uploads::sample("image.png")).await, StatusCode::OK);
    run("finalize-upload", StatusCode::OK, finalize().await);
    run("finalize-upload", StatusCode::OK, finalize().await);
    run("get-upload", StatusCode::OK, test.call(Method::GET, &format!("/uploads/image/{upload}"), None).await);

    // Asset-manager connections: one for a new organization, whose primary workspace is
    // made first (UpdateItem), one for this one's; then an item of a ready video.
    let (_, newest_key) = test.add_organization(true).await;
    run(
        "create-asset-connection",
        StatusCode::CREATED,
        test.call_as(&newest_key, Method::POST, "/asset_connections", None).await,
    );
    let connected = run(
        "create-asset-connection",
        StatusCode::CREATED,
        test.call(Method::POST, "/asset_connections", Some(json!({ "name": "dam" }))).await,
    );
    let connection = connected["connection"]["id"].as_str().unwrap().to_owned();
    let video = test.call(Method::POST, "/uploads/video/get_upload_url", None).await.1;
    let video_id = video["id"].as_str().unwrap().to_owned();
    assert_eq!(crate::uploads::put(&video, crate::uploads::sample("video.mp4")).await, StatusCode::OK);
    let finalized = test.call(Method::POST, "/uploads/video/finalize_upload", Some(json!({ "id": video_id }))).await;
    assert_eq!(finalized.0, StatusCode::OK, "{}", finalized.1);
    log.take();
    s3_log.take();
    run(
        "create-asset-item",
        StatusCode::CREATED,
        test.call(
            Method::POST,
            &format!("/asset_connections/{connection}/items"),
            Some(json!({ "name": "clip", "highres_video_id": video_id })),
        )
        .await,
    );

    // Plans and credits: a read that grants a period's credits writes the account and
    // its entry (puts of one transaction); an upgrade from free stores a checkout.
    let old = shared::domain::time::Timestamp::from_unix_millis(
        shared::domain::time::Timestamp::now().unix_millis() - 40 * 24 * 3600 * 1000,
    );
    let (_, due) = test.add_organization_with(true, "free", 5, Some(old)).await;
    let (_, also_due) = test.add_organization_with(true, "free", 5, Some(old)).await;
    let (_, paid) = test.add_organization_with(true, "creator", 5, None).await;
    log.take();
    run("get-plan", StatusCode::OK, test.call_as(&due, Method::GET, "/plan", None).await);
    run("get-credits", StatusCode::OK, test.call_as(&also_due, Method::GET, "/credits", None).await);
    run("list-plans", StatusCode::OK, test.call(Method::GET, "/plan/list", None).await);
    run("list-credit-ledger", StatusCode::OK, test.call(Method::GET, "/credits/ledger", None).await);
    let upgrade = json!({ "plan_id": "creator" });
    run("upgrade-plan", StatusCode::OK, test.call(Method::POST, "/plan/upgrade", Some(upgrade)).await);
    let settings = json!({ "auto_topup": { "enabled": true } });
    run(
        "update-credit-settings",
        StatusCode::OK,
        test.call_as(&paid, Method::POST, "/credits/settings", Some(settings)).await,
    );
    // Stripe's event of that checkout, paid: the account's write and the checkout's.
    let upgrade = json!({ "plan_id": "professional" });
    let opened = test.call(Method::POST, "/plan/upgrade", Some(upgrade)).await.1;
    let checkout = opened["checkout_url"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
    let stripe = TestApp { app: Arc::new(crate::stripe::app_of(&backend, "http://127.0.0.1:9")), ..test.clone() };
    let event = crate::stripe::checkout_completed(test.organization, &checkout, "professional");
    log.take();
    run("stripe-webhook", StatusCode::OK, crate::stripe::deliver(&stripe, &event).await);

    for route in ROUTES.iter().filter(|route| !RUN_ROUTES.contains(&route.function)) {
        let granted: BTreeSet<String> =
            route.dynamodb_actions.iter().chain(route.s3_actions).map(|action| (*action).to_owned()).collect();
        let done = performed.get(route.function).unwrap_or_else(|| panic!("{} was not exercised", route.function));
        assert_eq!(done, &granted, "{} performs exactly what its policy grants", route.function);
    }
}
