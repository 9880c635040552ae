//! The routes table: the one list of endpoints, as data, that drives the local router,
//! the OpenAPI document, the Lambda binaries (by function name) and the `template.yaml`
//! and IAM checks. It names no handler, so that reading it links none: each function
//! binary names its own handler (`api::handlers`), and only `serve` links them all.

use http::Method;
use percent_encoding::percent_decode_str;

use super::PathParams;

/// One endpoint.
pub struct Route {
    pub method: Method,
    /// Path template; `{name}` matches one segment.
    pub path: &'static str,
    /// The Lambda function (and binary) name.
    pub function: &'static str,
    /// The DynamoDB actions the function's IAM policy grants, and no others.
    pub dynamodb_actions: &'static [&'static str],
    /// The S3 actions on the media bucket the function's IAM policy grants, and no others.
    pub s3_actions: &'static [&'static str],
    /// True when the function may answer more than a Lambda response holds (6 MB): it
    /// then stores the body under `responses/` and answers a 303 to a short-lived link,
    /// which takes `s3:PutObject` and `s3:GetObject` (see `runtime::http`).
    pub large_responses: bool,
    /// The SQS actions the function's IAM policy grants on `queues`.
    pub sqs_actions: &'static [&'static str],
    /// The queues (template logical IDs) it sends to: `TaskQueue` when it queues node
    /// tasks, `WebhookQueue` when it changes runs (their events) or redelivers.
    pub queues: &'static [&'static str],
    /// True for a POST that creates something: it honours `Idempotency-Key` (claims and
    /// answers are items of the table written with PutItem, waits read with GetItem).
    pub idempotent: bool,
}

macro_rules! route {
    ($method:ident $path:literal => $function:literal, [$($action:literal),* $(,)?]
        $(, s3: [$($s3:literal),* $(,)?])? $(, sqs: [$($sqs:literal),* $(,)?] on [$($queue:literal),* $(,)?])?
        $(, large_responses: $large:literal)? $(, idempotent: $idempotent:literal)?) => {
        Route {
            method: Method::$method,
            path: $path,
            function: $function,
            dynamodb_actions: &[$($action),*],
            s3_actions: &[$($($s3),*)?],
            large_responses: false $(|| $large)?,
            sqs_actions: &[$($($sqs),*)?],
            queues: &[$($($queue),*)?],
            idempotent: false $(|| $idempotent)?,
        }
    };
}

/// Every endpoint of the service.
pub static ROUTES: &[Route] = &[
    route!(GET "/whoami" => "whoami", ["dynamodb:GetItem", "dynamodb:UpdateItem"]),
    route!(GET "/shared-stores" => "list-shared-stores", ["dynamodb:GetItem", "dynamodb:Query"]),
    route!(POST "/shared-stores" => "create-shared-store",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"], idempotent: true),
    route!(PATCH "/shared-stores/{store_id}" => "rename-shared-store",
        ["dynamodb:GetItem", "dynamodb:UpdateItem"]),
    route!(DELETE "/shared-stores/{store_id}" => "delete-shared-store",
        ["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:DeleteItem", "dynamodb:BatchGetItem",
         "dynamodb:BatchWriteItem"]),
    // A list of 10,000 entries, and a bulk's answer, can be larger than a Lambda response.
    route!(GET "/shared-stores/{store_id}/entries" => "list-shared-store-entries",
        ["dynamodb:GetItem", "dynamodb:Query"], s3: ["s3:PutObject", "s3:GetObject"], large_responses: true),
    // Query: a bulk repairing the store a killed bulk left reads that bulk's journal.
    route!(POST "/shared-stores/{store_id}/entries/bulk" => "bulk-upsert-shared-store-entries",
        ["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"],
        s3: ["s3:PutObject", "s3:GetObject"], large_responses: true),
    route!(GET "/shared-stores/{store_id}/entries/{entry_id}" => "get-shared-store-entry",
        ["dynamodb:GetItem"]),
    // Writers of one entry repair a store a dead bulk left first (lease, journal, counts):
    // UpdateItem, Query, BatchGetItem and BatchWriteItem.
    route!(PUT "/shared-stores/{store_id}/entries/{entry_id}" => "put-shared-store-entry",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem", "dynamodb:Query",
         "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"]),
    route!(PATCH "/shared-stores/{store_id}/entries/{entry_id}" => "rename-shared-store-entry",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem",
         "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"]),
    route!(DELETE "/shared-stores/{store_id}/entries/{entry_id}" => "delete-shared-store-entry",
        ["dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem",
         "dynamodb:BatchWriteItem"]),
    route!(GET "/agents" => "list-agents", ["dynamodb:GetItem", "dynamodb:Query"]),
    // UpdateItem: an organization stored before workspaces existed gets its primary one.
    route!(POST "/agent/create" => "create-agent",
        ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"], idempotent: true),
    route!(GET "/agent/{agent_id}" => "get-agent", ["dynamodb:GetItem"]),
    // Its create_node operations create nodes: a repeat must not create them twice.
    // Triggers' states are saved with the graph (puts and deletes of one transaction);
    // a trigger's run request is checked as a start checks it (Query: asset connections).
    route!(POST "/agent/{agent_id}/update" => "update-agent",
        ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"], idempotent: true),
    route!(POST "/agent/{agent_id}/duplicate" => "duplicate-agent",
        ["dynamodb:GetItem", "dynamodb:PutItem"], idempotent: true),
    route!(POST "/agent/{agent_id}/delete" => "delete-agent", ["dynamodb:GetItem", "dynamodb:UpdateItem"]),
    route!(GET "/node_types" => "list-node-types", ["dynamodb:GetItem"]),
    route!(POST "/uploads/{kind}/get_upload_url" => "get-upload-url",
        ["dynamodb:GetItem", "dynamodb:PutItem"], s3: ["s3:PutObject", "s3:PutObjectTagging"], idempotent: true),
    route!(POST "/uploads/{kind}/finalize_upload" => "finalize-upload",
        ["dynamodb:GetItem", "dynamodb:PutItem"],
        s3: ["s3:GetObject", "s3:GetObjectVersion", "s3:ListBucket", "s3:PutObjectVersionTagging"]),
    route!(GET "/uploads/{kind}/{upload_id}" => "get-upload", ["dynamodb:GetItem"]),
    // Asset managers (rule 10): a connection per workspace (Query lists the
    // organization's), and the `local` provider's items made of ready video uploads.
    route!(POST "/asset_connections" => "create-asset-connection",
        ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"], idempotent: true),
    route!(POST "/asset_connections/{connection_id}/items" => "create-asset-item",
        ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"], idempotent: true),
    // Avatar profiles: the primary workspace is read (Query); a create (which makes the
    // primary workspace of an organization that has none) claims its name and stores the
    // profile in one transaction of puts, and queues its processing on the task queue.
    // Every profile (no `limit`) may be more than a Lambda response holds.
    route!(GET "/avatar-profiles" => "list-avatar-profiles", ["dynamodb:GetItem", "dynamodb:Query"],
        s3: ["s3:PutObject", "s3:GetObject"], large_responses: true),
    route!(POST "/avatar-profiles/create" => "create-avatar-profile",
        ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"], sqs: ["sqs:SendMessage"] on ["TaskQueue"],
        idempotent: true),
    route!(GET "/avatar-profiles/{id}" => "get-avatar-profile", ["dynamodb:GetItem"]),
    // Social posts. A connection is one put (its credentials, for YouTube, a secret of
    // its own in Secrets Manager: the template's policy). A post is its item and its
    // copies per status, platform and connection (puts and deletes of one transaction,
    // with its thumbnail's media record), its media stored in the bucket (the service's
    // own links read from it); publishing is queued on the task queue. A list is one
    // Query of one partition; a read may record the publishers' news (the transaction).
    // The organization's item counts its connections (UpdateItem in the create's
    // transaction: at most 50; started by a Query of them when it has no count yet). A
    // delete deletes the connection's secret, then the connection with the count's
    // decrement (one transaction), then fails its pending posts (Query of its partition,
    // each post's transaction).
    route!(POST "/social/connections" => "create-social-connection",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"], idempotent: true),
    route!(GET "/social/connections" => "list-social-connections", ["dynamodb:GetItem", "dynamodb:Query"]),
    route!(DELETE "/social/connections/{social_connection_id}" => "delete-social-connection",
        ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:UpdateItem"]),
    route!(POST "/social/post" => "create-social-post",
        ["dynamodb:GetItem", "dynamodb:PutItem"],
        s3: ["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject"], sqs: ["sqs:SendMessage"] on ["TaskQueue"],
        idempotent: true),
    route!(GET "/social/posts" => "list-social-posts", ["dynamodb:GetItem", "dynamodb:Query"]),
    route!(GET "/social/post/{post_id}" => "get-social-post",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"]),
    route!(POST "/social/post/{post_id}/approve" => "approve-social-post",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"], sqs: ["sqs:SendMessage"] on ["TaskQueue"]),
    route!(POST "/social/post/{post_id}/reject" => "reject-social-post",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"]),
    // Plans and credits: the account item is read (GetItem) and, when a monthly period
    // began since its last grant, written with the grant's ledger entry in one
    // transaction of puts; the ledger is a Query of the organization's partition.
    route!(GET "/plan" => "get-plan", ["dynamodb:GetItem", "dynamodb:PutItem"]),
    route!(GET "/plan/list" => "list-plans", ["dynamodb:GetItem"]),
    // An upgrade from free opens a checkout: it honours Idempotency-Key (one checkout).
    route!(POST "/plan/upgrade" => "upgrade-plan", ["dynamodb:GetItem", "dynamodb:PutItem"], idempotent: true),
    route!(GET "/credits" => "get-credits", ["dynamodb:GetItem", "dynamodb:PutItem"]),
    route!(POST "/credits/settings" => "update-credit-settings", ["dynamodb:GetItem", "dynamodb:PutItem"]),
    route!(GET "/credits/ledger" => "list-credit-ledger", ["dynamodb:GetItem", "dynamodb:Query"]),
    // Stripe's events: a paid checkout or top-up is an account write (puts of one
    // transaction) and its checkout's update.
    route!(POST "/billing/stripe/webhook" => "stripe-webhook", ["dynamodb:GetItem", "dynamodb:PutItem"]),
    // The run engine. A run with many inputs records their media in transactions of
    // puts before the run itself. A run is read by its head (GetItem), then, unless the
    // process has that version cached, its plan, chunks and outputs (Query of the run's
    // partition); runs stored whole before the split read extra parts with GetItem.
    // Changes of runs record webhook deliveries in the same transaction and queue them
    // (SendMessage on the webhook queue as well).
    // Query: asset-manager inputs read the organization's connections.
    route!(POST "/agent/{agent_id}/run" => "start-run",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"], sqs: ["sqs:SendMessage"] on ["TaskQueue", "WebhookQueue"],
        idempotent: true),
    route!(GET "/agent_run/{run_id}" => "get-run", ["dynamodb:GetItem", "dynamodb:Query"]),
    route!(GET "/agent_run/{run_id}/nodes" => "get-run-nodes", ["dynamodb:GetItem", "dynamodb:Query"]),
    route!(POST "/agent_run/{run_id}/cancel" => "cancel-run",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"], sqs: ["sqs:SendMessage"] on ["WebhookQueue"]),
    route!(POST "/agent_run/{run_id}/resume" => "resume-run",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"], sqs: ["sqs:SendMessage"] on ["TaskQueue", "WebhookQueue"]),
    route!(GET "/agent/{agent_id}/runs" => "list-agent-runs", ["dynamodb:GetItem", "dynamodb:Query"]),
    route!(GET "/agent_runs" => "list-runs", ["dynamodb:GetItem", "dynamodb:Query"]),
    // Triggers: a fire starts runs as start-run does (a feed is read first); a run is
    // created with its claim in one transaction of puts.
    route!(POST "/trigger/{trigger_id}/fire" => "fire-trigger",
        ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"], sqs: ["sqs:SendMessage"] on ["TaskQueue", "WebhookQueue"],
        idempotent: true),
    route!(GET "/trigger/{trigger_id}" => "get-trigger", ["dynamodb:GetItem"]),
    route!(GET "/trigger/{trigger_id}/runs" => "list-trigger-runs", ["dynamodb:GetItem", "dynamodb:Query"]),
    route!(GET "/agent_run/{run_id}/webhooks" => "list-run-webhooks",
        ["dynamodb:GetItem", "dynamodb:Query"]),
    route!(POST "/agent_run/{run_id}/webhooks/{delivery_id}/redeliver" => "redeliver-run-webhook",
        ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"], sqs: ["sqs:SendMessage"] on ["WebhookQueue"]),
    route!(POST "/webhooks/secret" => "rotate-webhook-secret",
        ["dynamodb:GetItem", "dynamodb:PutItem"], idempotent: true),
    route!(DELETE "/webhooks/secret" => "delete-webhook-secret",
        ["dynamodb:GetItem", "dynamodb:DeleteItem"]),
    // A signed link is its own authority (no API key): one read, then a presigned GET.
    route!(GET "/media/{media_id}" => "get-media", ["dynamodb:GetItem"], s3: ["s3:GetObject", "s3:GetObjectVersion"]),
    // The service description (no API key, no state).
    route!(GET "/openapi.json" => "get-openapi", []),
];

/// The result of looking a request up in the table.
pub enum Match {
    Found(&'static Route, PathParams),
    /// The path is a route's, with other methods: these.
    MethodNotAllowed(Vec<&'static Method>),
    NotFound,
}

/// Finds the route for a method and a raw (percent-encoded) path.
///
/// A concrete segment beats an ID parameter, as OpenAPI matches concrete paths before
/// templated ones: `GET /agent/create` is a 405 (`/agent/create` answers POST only), not
/// a read of an agent called `create`. Parameters that are UUIDs ([`is_uuid_parameter`])
/// match UUIDs first; a path that no route matches that way is matched with any text in
/// them, so that `/agent/not-a-uuid` still reaches its endpoint's own 404. An entry ID is
/// any text: `PUT /shared-stores/{id}/entries/bulk` writes the entry `bulk`, as API
/// Gateway routes it.
pub fn find(method: &Method, path: &str) -> Match {
    for typed in [true, false] {
        let mut allowed = Vec::new();
        for route in ROUTES {
            if let Some(params) = route.match_path_as(path, typed) {
                if route.method == *method {
                    return Match::Found(route, params);
                }
                allowed.push(&route.method);
            }
        }
        if !allowed.is_empty() {
            return Match::MethodNotAllowed(allowed);
        }
    }
    Match::NotFound
}

/// True for a path parameter that holds a UUID: every `*_id` but the caller's
/// `entry_id`. The router and the OpenAPI document read it from here.
pub fn is_uuid_parameter(name: &str) -> bool {
    name.ends_with("_id") && name != "entry_id"
}

/// The route served by a Lambda function.
pub fn by_function(function: &str) -> Option<&'static Route> {
    ROUTES.iter().find(|route| route.function == function)
}

impl Route {
    /// Matches a whole raw path against the template.
    pub fn match_path(&self, path: &str) -> Option<PathParams> {
        self.match_path_as(path, false)
    }

    /// Matches a whole raw path; `typed`: UUID parameters match UUIDs only.
    fn match_path_as(&self, path: &str, typed: bool) -> Option<PathParams> {
        let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
        self.match_segments(&segments, typed)
    }

    /// Matches the end of a raw path, so that an API Gateway stage prefix is ignored.
    pub fn match_path_suffix(&self, path: &str) -> Option<PathParams> {
        let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
        let wanted = self.template_segments().count();
        let skip = segments.len().checked_sub(wanted)?;
        self.match_segments(&segments[skip..], false)
    }

    fn template_segments(&self) -> impl Iterator<Item = &'static str> {
        self.path.trim_start_matches('/').split('/')
    }

    fn match_segments(&self, segments: &[&str], typed: bool) -> Option<PathParams> {
        if segments.len() != self.template_segments().count() {
            return None;
        }
        let mut params = Vec::new();
        for (template, segment) in self.template_segments().zip(segments) {
            match template.strip_prefix('{').and_then(|rest| rest.strip_suffix('}')) {
                Some(name) => {
                    let value = percent_decode_str(segment).decode_utf8().ok()?.into_owned();
                    if typed && is_uuid_parameter(name) && uuid::Uuid::try_parse(&value).is_err() {
                        return None;
                    }
                    params.push((name, value));
                }
                None if template == *segment => {}
                None => return None,
            }
        }
        Some(PathParams(params))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_names_are_unique() {
        let mut names: Vec<&str> = ROUTES.iter().map(|route| route.function).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ROUTES.len());
    }

    #[test]
    fn entry_ids_are_percent_decoded() {
        let Match::Found(route, params) = find(&Method::GET, "/shared-stores/s1/entries/a%2Fb%20c%3F") else {
            panic!("route not found");
        };
        assert_eq!(route.function, "get-shared-store-entry");
        assert_eq!(params.get("entry_id"), "a/b c?");
        assert_eq!(params.get("store_id"), "s1");
    }

    #[test]
    fn bulk_is_a_post_and_other_methods_reach_the_entry() {
        let Match::Found(route, _) = find(&Method::POST, "/shared-stores/s/entries/bulk") else { panic!() };
        assert_eq!(route.function, "bulk-upsert-shared-store-entries");
        let Match::Found(route, params) = find(&Method::PUT, "/shared-stores/s/entries/bulk") else { panic!() };
        assert_eq!(route.function, "put-shared-store-entry");
        assert_eq!(params.get("entry_id"), "bulk");
        let Match::MethodNotAllowed(allowed) = find(&Method::POST, "/shared-stores/s/entries/x") else { panic!() };
        assert_eq!(allowed, [&Method::GET, &Method::PUT, &Method::PATCH, &Method::DELETE]);
        assert!(matches!(find(&Method::GET, "/nowhere"), Match::NotFound));
    }

    #[test]
    fn a_concrete_segment_beats_an_id_parameter_but_not_an_entry_id() {
        let Match::MethodNotAllowed(allowed) = find(&Method::GET, "/agent/create") else { panic!() };
        assert_eq!(allowed, [&Method::POST]);
        let Match::MethodNotAllowed(allowed) = find(&Method::GET, "/uploads/video/get_upload_url") else { panic!() };
        assert_eq!(allowed, [&Method::POST]);
        let Match::Found(route, params) = find(&Method::GET, "/agent/not-a-uuid") else { panic!() };
        assert_eq!((route.function, params.get("agent_id")), ("get-agent", "not-a-uuid"));
        let Match::Found(route, _) = find(&Method::GET, "/shared-stores/nope/entries") else { panic!() };
        assert_eq!(route.function, "list-shared-store-entries", "a malformed store ID gets the store's own 404");
        let store = "/shared-stores/5f2d8c1e-3b7a-4c9d-8e6f-0a1b2c3d4e5f/entries/bulk";
        let Match::Found(route, params) = find(&Method::GET, store) else { panic!() };
        assert_eq!((route.function, params.get("entry_id")), ("get-shared-store-entry", "bulk"));
    }

    #[test]
    fn a_stage_prefix_is_ignored_by_lambda_matching() {
        let route = by_function("get-shared-store-entry").unwrap();
        let params = route.match_path_suffix("/prod/shared-stores/s/entries/e").unwrap();
        assert_eq!(params.get("entry_id"), "e");
        assert!(route.match_path_suffix("/shared-stores/s/entries").is_none());
    }
}
