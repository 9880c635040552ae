//! The service description, OpenAPI 3.1 at the contract's version: one operation per
//! route of the routes table (paths, methods and which routes exist come from it),
//! described here by [`operation`]; bodies are the [`schemas`] types. `serve` and the
//! `get-openapi` function answer it at `GET /openapi.json`; `docs/openapi.json` is the
//! committed copy (`cargo run --bin openapi > docs/openapi.json` writes it, and a test
//! fails when the two differ).

pub mod schemas;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use http::StatusCode;
use utoipa::openapi::path::{HttpMethod, Operation, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, HeaderBuilder, InfoBuilder, OpenApi, OpenApiBuilder, PathItem, PathsBuilder,
    Ref, RefOr, Required, ResponseBuilder, ServerBuilder,
};
use utoipa::ToSchema;

use self::schemas as s;
use super::routes::{Route, ROUTES};
use super::{ApiError, Call, Response};
use crate::app::App;

/// The contract's version of the service description.
pub const VERSION: &str = "2.0.0";

/// Who may call an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `Authorization: Bearer <key>` only (the shared stores).
    Bearer,
    /// Bearer or `X-API-Key: <key>`.
    BearerOrApiKey,
    /// No API key: a signed link, or the description itself.
    Public,
}

/// The description of one route's operation.
pub struct Doc {
    pub summary: &'static str,
    pub tag: &'static str,
    pub access: Access,
    query: Vec<(&'static str, Schema, &'static str)>,
    body: Option<(RefOr<Schema>, bool)>,
    responses: Vec<(u16, &'static str, Option<RefOr<Schema>>)>,
    /// True for a creating POST that honours `Idempotency-Key`.
    idempotent: bool,
}

/// Collects the schemas the operations refer to.
#[derive(Default)]
struct Schemas(Vec<(String, RefOr<Schema>)>);

impl Schemas {
    /// A reference to `T`, registered with everything it refers to.
    fn of<T: ToSchema>(&mut self) -> RefOr<Schema> {
        T::schemas(&mut self.0);
        self.0.push((T::name().into_owned(), T::schema()));
        RefOr::Ref(Ref::from_schema_name(T::name()))
    }
}

impl Doc {
    fn new(summary: &'static str, tag: &'static str, access: Access) -> Self {
        Self { summary, tag, access, query: Vec::new(), body: None, responses: Vec::new(), idempotent: false }
    }

    fn query(mut self, name: &'static str, schema: impl Into<Schema>, description: &'static str) -> Self {
        self.query.push((name, schema.into(), description));
        self
    }

    /// The request body; a body may also meet `serve`'s (and API Gateway's) 10 MB limit.
    fn body(mut self, schema: RefOr<Schema>, required: bool) -> Self {
        self.body = Some((schema, required));
        self
    }

    fn answer(mut self, status: u16, description: &'static str, schema: RefOr<Schema>) -> Self {
        self.responses.push((status, description, Some(schema)));
        self
    }

    fn empty(mut self, status: u16, description: &'static str) -> Self {
        self.responses.push((status, description, None));
        self
    }

    /// The failures every authenticated operation can answer.
    fn refusals(self, schemas: &mut Schemas) -> Self {
        let detail = schemas.of::<s::Detail>();
        self.answer(401, "The API key is missing, unknown or not tied to an organization", detail.clone())
            .answer(403, "The organization has no API access", detail.clone())
            .answer(503, "A dependency is unavailable; the request may be sent again", detail)
    }

    /// The failures of an endpoint outside the shared stores, `{ detail }`.
    fn general(self, schemas: &mut Schemas, statuses: &[u16]) -> Self {
        let detail = schemas.of::<s::Detail>();
        let mut doc = self.refusals(schemas);
        for &status in statuses {
            doc = doc.answer(status, reason(status), detail.clone());
        }
        doc.answer(500, "The request failed on the service's side", detail)
    }

    /// The failures of a shared-store endpoint, `{ error }` (metadata: `{ detail }`).
    fn store(self, schemas: &mut Schemas, statuses: &[u16]) -> Self {
        let refusal = schemas.of::<s::StoreRefusal>();
        let error = schemas.of::<s::StoreErrorBody>();
        let mut doc = self.refusals(schemas);
        for &status in statuses {
            let schema = if matches!(status, 400 | 413) { refusal.clone() } else { error.clone() };
            doc = doc.answer(status, reason(status), schema);
        }
        doc.answer(500, "The request failed on the service's side", error)
    }

    /// An answer that may be too large for a Lambda response: a 303 to a link.
    fn large(self, schemas: &mut Schemas) -> Self {
        let large = schemas.of::<s::LargeResponse>();
        self.answer(303, "The answer is larger than a function may return: GET it from `location`", large)
    }

    /// A creating POST's `Idempotency-Key` answers: 400 for a malformed key, 409 while
    /// the first request with the key runs, 422 for a key reused with another request;
    /// each `{ detail }`, added beside the endpoint's own body for that status.
    fn idempotent(mut self, schemas: &mut Schemas) -> Self {
        self.idempotent = true;
        let detail = schemas.of::<s::Detail>();
        for (status, description) in [
            (400, "The request or its Idempotency-Key is malformed"),
            (409, "A request with this Idempotency-Key is still running"),
            (422, "This Idempotency-Key was used with another request"),
        ] {
            match self.responses.iter_mut().find(|(code, _, _)| *code == status) {
                Some((_, _, Some(existing))) if !same_schema(existing, &detail) => {
                    let either = AnyOfBuilder::new().item(existing.clone()).item(detail.clone()).build();
                    *existing = RefOr::T(Schema::AnyOf(either));
                }
                Some(_) => {}
                None => self.responses.push((status, description, Some(detail.clone()))),
            }
        }
        self
    }
}

fn same_schema(a: &RefOr<Schema>, b: &RefOr<Schema>) -> bool {
    matches!((a, b), (RefOr::Ref(a), RefOr::Ref(b)) if a.ref_location == b.ref_location)
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "The request is malformed or breaks a rule; the body says which",
        402 => "The payment was declined; nothing changed",
        404 => "Not found, or owned by another organization",
        409 => "The request conflicts with the resource's state or a limit",
        413 => "The body or a part of it is too large",
        _ => "Refused",
    }
}

fn uuid() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Uuid)))
        .into()
}

fn text(max_length: usize) -> Schema {
    ObjectBuilder::new().schema_type(Type::String).max_length(Some(max_length)).into()
}

fn integer(minimum: i64, maximum: i64) -> Schema {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(minimum)).maximum(Some(maximum)).into()
}

fn date_time() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::DateTime)))
        .into()
}

/// Describes the operation of the route served by `function`; None for a route this
/// table does not describe (a test fails on it).
pub fn operation(function: &str) -> Option<Doc> {
    let mut schemas = Schemas::default();
    operation_with(function, &mut schemas)
}

fn operation_with(function: &str, sc: &mut Schemas) -> Option<Doc> {
    use Access::{Bearer, BearerOrApiKey, Public};
    const STORES: &str = "Shared stores";
    const AGENTS: &str = "Agents";
    const RUNS: &str = "Agent runs";
    const UPLOADS: &str = "Uploads";
    const WEBHOOKS: &str = "Webhooks";
    const AVATARS: &str = "Avatar profiles";
    const PLANS: &str = "Plans and credits";
    const TRIGGERS: &str = "Triggers";
    const SOCIAL: &str = "Social posts";
    let run_filters = |doc: Doc| {
        doc.query("limit", integer(1, 100), "Runs per page, 1 to 100 (default 25)")
            .query("cursor", text(4096), "The `next_cursor` of the previous page")
            .query("status", text(200), "Comma-separated run statuses to keep")
            .query("from", date_time(), "Runs started at or after this time (RFC 3339)")
            .query("to", date_time(), "Runs started before this time (RFC 3339)")
    };
    let mut doc = match function {
        "whoami" => Doc::new("The organization of the API key", "Identity", BearerOrApiKey)
            .answer(200, "The organization", sc.of::<s::Whoami>())
            .general(sc, &[]),
        "list-shared-stores" => Doc::new("List shared stores, by name", STORES, Bearer)
            .answer(200, "At most 10 stores", sc.of::<s::StoreList>())
            .store(sc, &[]),
        "create-shared-store" => Doc::new("Create a shared store", STORES, Bearer)
            .body(sc.of::<s::CreateStore>(), true)
            .answer(200, "The store", sc.of::<s::StoreAnswer>())
            .store(sc, &[400, 409])
            .idempotent(sc),
        "rename-shared-store" => Doc::new("Rename a shared store", STORES, Bearer)
            .body(sc.of::<s::RenameStore>(), true)
            .answer(200, "The store", sc.of::<s::StoreAnswer>())
            .store(sc, &[400, 404]),
        "delete-shared-store" => Doc::new("Delete a shared store and its entries", STORES, Bearer)
            .answer(200, "Deleted", sc.of::<s::Success>())
            .store(sc, &[404]),
        "list-shared-store-entries" => Doc::new("List a store's entries, by display name", STORES, Bearer)
            .answer(200, "Up to 10,000 entries with their metadata", sc.of::<s::EntryList>())
            .large(sc)
            .store(sc, &[404]),
        "bulk-upsert-shared-store-entries" => Doc::new("Create or replace up to 5,000 entries", STORES, Bearer)
            .body(sc.of::<s::Bulk>(), true)
            .answer(200, "The entries written", sc.of::<s::BulkAnswer>())
            .large(sc)
            .store(sc, &[400, 404, 409, 413]),
        "get-shared-store-entry" => Doc::new("Read an entry", STORES, Bearer)
            .answer(200, "The entry", sc.of::<s::EntryAnswer>())
            .store(sc, &[400, 404]),
        "put-shared-store-entry" => Doc::new("Create or replace an entry", STORES, Bearer)
            .body(sc.of::<s::PutEntry>(), true)
            .answer(200, "The entry", sc.of::<s::EntryAnswer>())
            .store(sc, &[400, 404, 409, 413]),
        "rename-shared-store-entry" => Doc::new("Rename an entry, and maybe replace its metadata", STORES, Bearer)
            .body(sc.of::<s::PatchEntry>(), true)
            .answer(200, "The entry", sc.of::<s::EntryAnswer>())
            .store(sc, &[400, 404, 409, 413]),
        "delete-shared-store-entry" => Doc::new("Delete an entry", STORES, Bearer)
            .answer(200, "Deleted", sc.of::<s::Success>())
            .store(sc, &[400, 404]),
        "list-agents" => Doc::new("List agents, newest first", AGENTS, BearerOrApiKey)
            .query("limit", integer(1, 100), "Agents per page, 1 to 100 (default 25)")
            .query(
                "cursor",
                date_time(),
                "The `next_cursor` of the previous page (keep the same filters), or any RFC 3339 date-time: \
                 the agents created before it",
            )
            .query("workspace_id", uuid(), "Only agents of this workspace of the key's organization")
            .query("name", text(200), "Case-insensitive substring of the name; `%` and `_` match literally")
            .answer(200, "One page", sc.of::<s::AgentPage>())
            .general(sc, &[400]),
        "create-agent" => Doc::new("Create an agent (an empty graph)", AGENTS, BearerOrApiKey)
            .body(sc.of::<s::CreateAgent>(), false)
            .answer(201, "The agent", sc.of::<s::AgentCreated>())
            .general(sc, &[400])
            .idempotent(sc),
        "get-agent" => Doc::new("Read an agent with its graph", AGENTS, BearerOrApiKey)
            .answer(200, "The agent, its nodes and connections", sc.of::<s::AgentDetail>())
            .general(sc, &[404]),
        "update-agent" => Doc::new("Change an agent's metadata and apply graph operations", AGENTS, BearerOrApiKey)
            .body(sc.of::<s::UpdateAgent>(), true)
            .answer(200, "Every operation applied", sc.of::<s::UpdateAnswer>())
            .general(sc, &[400, 404])
            .idempotent(sc),
        "duplicate-agent" => Doc::new("Copy an agent and its graph", AGENTS, BearerOrApiKey)
            .body(sc.of::<s::DuplicateAgent>(), false)
            .answer(201, "The copy", sc.of::<s::AgentCreated>())
            .general(sc, &[400, 404])
            .idempotent(sc),
        "delete-agent" => Doc::new("Delete an agent", AGENTS, BearerOrApiKey)
            .answer(200, "Deleted", sc.of::<s::Success>())
            .general(sc, &[404]),
        "list-node-types" => Doc::new("The node-type catalog", AGENTS, BearerOrApiKey)
            .answer(200, "Every node type with its parameter schema and price", sc.of::<s::NodeTypeList>())
            .general(sc, &[]),
        "get-upload-url" => Doc::new("A URL to PUT a video, audio or image file to", UPLOADS, BearerOrApiKey)
            .body(sc.of::<s::UploadUrlRequest>(), false)
            .answer(200, "Where and how to PUT the file", sc.of::<s::UploadTicket>())
            .general(sc, &[400, 404])
            .idempotent(sc),
        "finalize-upload" => Doc::new("Check an uploaded file and make it usable", UPLOADS, BearerOrApiKey)
            .body(sc.of::<s::FinalizeUpload>(), true)
            .answer(200, "The upload, ready", sc.of::<s::Upload>())
            .general(sc, &[400, 404, 409]),
        "get-upload" => Doc::new("Read an upload", UPLOADS, BearerOrApiKey)
            .answer(200, "The upload", sc.of::<s::Upload>())
            .general(sc, &[404]),
        "create-asset-connection" => Doc::new("Connect an asset manager to a workspace", UPLOADS, BearerOrApiKey)
            .body(sc.of::<s::CreateAssetConnection>(), false)
            .answer(201, "The connection", sc.of::<s::AssetConnectionAnswer>())
            .general(sc, &[400, 409])
            .idempotent(sc),
        "create-asset-item" => Doc::new("Add an item to a `local` asset manager", UPLOADS, BearerOrApiKey)
            .body(sc.of::<s::CreateAssetItem>(), true)
            .answer(201, "The item", sc.of::<s::AssetItemAnswer>())
            .general(sc, &[400, 404])
            .idempotent(sc),
        "list-avatar-profiles" => {
            Doc::new("List the avatar profiles of the primary workspace", AVATARS, BearerOrApiKey)
                .query(
                    "limit",
                    integer(1, 100),
                    "Profiles per page, 1 to 100; without it (and without `cursor`) every profile",
                )
                .query("cursor", text(4096), "The `next_cursor` of the previous page")
                .answer(200, "The profiles, newest first (`next_cursor` when paged)", sc.of::<s::AvatarProfileList>())
                .large(sc)
                .general(sc, &[400])
        }
        "create-avatar-profile" => Doc::new("Create an avatar profile; its processing starts", AVATARS, BearerOrApiKey)
            .body(sc.of::<s::CreateAvatarProfile>(), true)
            .answer(201, "The profile, pending", sc.of::<s::AvatarProfile>())
            .general(sc, &[400, 409])
            .idempotent(sc),
        "get-avatar-profile" => Doc::new("Read an avatar profile", AVATARS, BearerOrApiKey)
            .answer(200, "The profile", sc.of::<s::AvatarProfile>())
            .general(sc, &[404]),
        "create-social-connection" => Doc::new("Connect a social account", SOCIAL, BearerOrApiKey)
            .body(sc.of::<s::CreateSocialConnection>(), true)
            .answer(201, "The connection (never its credentials)", sc.of::<s::SocialConnection>())
            .general(sc, &[400, 409])
            .idempotent(sc),
        "list-social-connections" => Doc::new("The organization's social accounts", SOCIAL, BearerOrApiKey)
            .answer(200, "The connections, oldest first", sc.of::<s::SocialConnectionList>())
            .general(sc, &[]),
        "delete-social-connection" => Doc::new(
            "Delete a social account: its credentials are deleted and its pending posts' destinations fail",
            SOCIAL,
            BearerOrApiKey,
        )
        .answer(200, "Deleted", sc.of::<s::Success>())
        .general(sc, &[404]),
        "create-social-post" => Doc::new("Post media to social accounts, now or later", SOCIAL, BearerOrApiKey)
            .body(sc.of::<s::CreateSocialPost>(), true)
            .answer(
                201,
                "The post: processing, scheduled, or pending_approval when a destination requires it",
                sc.of::<s::SocialPost>(),
            )
            .general(sc, &[400])
            .idempotent(sc),
        "list-social-posts" => Doc::new("The organization's social posts, newest first", SOCIAL, BearerOrApiKey)
            .query("limit", integer(1, 100), "Posts per page, 1 to 100 (default 20)")
            .query("cursor", text(4096), "The `next_cursor` of the previous page")
            .query("status", text(32), "Only posts in this status")
            .query("platform", text(32), "Only posts to this platform")
            .query("social_connection_id", uuid(), "Only posts to this connected account")
            .answer(200, "One page, as stored (not refreshed from the platforms)", sc.of::<s::SocialPostPage>())
            .general(sc, &[400]),
        "get-social-post" => Doc::new("A social post, refreshed from its platforms", SOCIAL, BearerOrApiKey)
            .answer(200, "The post", sc.of::<s::SocialPost>())
            .general(sc, &[404]),
        "approve-social-post" => Doc::new("Approve a post pending approval", SOCIAL, BearerOrApiKey)
            .answer(200, "The post, publishing (or scheduled until its time)", sc.of::<s::SocialPost>())
            .general(sc, &[404, 409]),
        "reject-social-post" => Doc::new("Reject a post pending approval", SOCIAL, BearerOrApiKey)
            .answer(200, "The post, rejected: it is never published", sc.of::<s::SocialPost>())
            .general(sc, &[404, 409]),
        "get-plan" => Doc::new("The organization's plan and credits", PLANS, BearerOrApiKey)
            .answer(200, "The plan", sc.of::<s::PlanAnswer>())
            .general(sc, &[]),
        "list-plans" => Doc::new("The plans", PLANS, BearerOrApiKey)
            .answer(200, "Every plan with its price and credits", sc.of::<s::PlanList>())
            .general(sc, &[]),
        "upgrade-plan" => Doc::new("Change the plan (from free: a checkout)", PLANS, BearerOrApiKey)
            .body(sc.of::<s::UpgradePlan>(), true)
            .answer(200, "A checkout to finish, or the change made", sc.of::<s::UpgradeAnswer>())
            .general(sc, &[400, 402, 409])
            .idempotent(sc),
        "get-credits" => Doc::new("The credit balance and auto top-up settings", PLANS, BearerOrApiKey)
            .answer(200, "The credits", sc.of::<s::CreditsAnswer>())
            .general(sc, &[]),
        "update-credit-settings" => Doc::new("Change the auto top-up settings", PLANS, BearerOrApiKey)
            .body(sc.of::<s::CreditSettings>(), true)
            .answer(200, "The credits with the new settings", sc.of::<s::CreditsAnswer>())
            .general(sc, &[400, 403]),
        "list-credit-ledger" => Doc::new("Every movement of credits, newest first", PLANS, BearerOrApiKey)
            .query("limit", integer(1, 100), "Entries per page, 1 to 100 (default 25)")
            .query("cursor", text(4096), "The `next_cursor` of the previous page")
            .answer(200, "One page", sc.of::<s::LedgerPage>())
            .general(sc, &[400]),
        "stripe-webhook" => Doc::new("Stripe's events (verified by their Stripe-Signature)", PLANS, Public)
            .body(sc.of::<s::StripeEvent>(), true)
            .answer(200, "Received (applied once; an event sent again changes nothing)", sc.of::<s::EventReceived>())
            .answer(400, "Not verified (forged, stale, unsigned): nothing changed", sc.of::<s::Detail>())
            .answer(500, "The request failed on the service's side", sc.of::<s::Detail>())
            .answer(503, "A dependency is unavailable; Stripe sends the event again", sc.of::<s::Detail>()),
        "start-run" => Doc::new("Start a run of an agent", RUNS, BearerOrApiKey)
            .body(sc.of::<s::StartRun>(), false)
            .answer(200, "The run started", sc.of::<s::RunStarted>())
            .general(sc, &[400, 404])
            .idempotent(sc),
        "get-run" => Doc::new("A run's record (for polling)", RUNS, BearerOrApiKey)
            .answer(200, "The run", sc.of::<s::RunRecord>())
            .general(sc, &[404]),
        "get-run-nodes" => Doc::new("A run's runtime nodes", RUNS, BearerOrApiKey)
            .answer(200, "The nodes", sc.of::<s::RunNodes>())
            .general(sc, &[404]),
        "cancel-run" => Doc::new("Cancel a run", RUNS, BearerOrApiKey)
            .answer(200, "Cancelled", sc.of::<s::Cancelled>())
            .general(sc, &[404, 409]),
        "resume-run" => Doc::new("Resume a failed or cancelled run", RUNS, BearerOrApiKey)
            .answer(200, "Re-queued", sc.of::<s::Resumed>())
            .general(sc, &[404, 409]),
        "list-agent-runs" => run_filters(Doc::new("An agent's runs, newest first", RUNS, BearerOrApiKey))
            .answer(200, "One page", sc.of::<s::RunPage>())
            .general(sc, &[400, 404]),
        "list-runs" => run_filters(Doc::new("The organization's runs, newest first", RUNS, BearerOrApiKey))
            .query("agent_id", uuid(), "Only this agent's runs")
            .answer(200, "One page", sc.of::<s::RunPage>())
            .general(sc, &[400, 404]),
        "fire-trigger" => {
            Doc::new("Fire a trigger now (a Schedule starts its run; a feed is polled)", TRIGGERS, BearerOrApiKey)
                .answer(200, "The runs started", sc.of::<s::TriggerFired>())
                .general(sc, &[400, 404, 409])
        }
        "get-trigger" => Doc::new("Read a trigger", TRIGGERS, BearerOrApiKey)
            .answer(200, "The trigger", sc.of::<s::Trigger>())
            .general(sc, &[404]),
        "list-trigger-runs" => {
            run_filters(Doc::new("The runs a trigger started, newest first", TRIGGERS, BearerOrApiKey))
                .answer(200, "One page", sc.of::<s::RunPage>())
                .general(sc, &[400, 404])
        }
        "list-run-webhooks" => Doc::new("A run's webhook deliveries and their attempts", WEBHOOKS, BearerOrApiKey)
            .query("limit", integer(1, 100), "Deliveries per page, 1 to 100 (default 100)")
            .query("cursor", text(4096), "The `next_cursor` of the previous page")
            .answer(200, "One page, by sequence", sc.of::<s::DeliveryPage>())
            .general(sc, &[400, 404]),
        "redeliver-run-webhook" => Doc::new("Send a delivery again now", WEBHOOKS, BearerOrApiKey)
            .answer(200, "The delivery, pending", sc.of::<s::Redelivered>())
            .general(sc, &[404, 409]),
        "rotate-webhook-secret" => Doc::new("Create or replace the webhook secret", WEBHOOKS, BearerOrApiKey)
            .answer(200, "The secret, shown only here", sc.of::<s::WebhookSecret>())
            .general(sc, &[])
            .idempotent(sc),
        "delete-webhook-secret" => Doc::new("Remove the webhook secret", WEBHOOKS, BearerOrApiKey)
            .answer(200, "Removed", sc.of::<s::Success>())
            .general(sc, &[404]),
        "get-media" => {
            let detail = sc.of::<s::Detail>();
            Doc::new("A signed media link of a run (7 days)", RUNS, Public)
                .query("expires", integer(0, i64::MAX), "When the link expires (seconds since the epoch)")
                .query("signature", text(128), "The link's signature")
                .empty(200, "The file (`serve`), whole")
                .empty(206, "The part of the file a `Range` asked for (`serve`)")
                .empty(302, "A 15-minute link to the file (AWS)")
                .answer(403, "The signature does not match or the link expired", detail.clone())
                .answer(404, "No such media", detail.clone())
                .empty(416, "The `Range` is outside the file (`serve`)")
                .answer(500, "The media could not be read", detail.clone())
                .answer(503, "A dependency is unavailable; the request may be sent again", detail)
        }
        "get-openapi" => Doc::new("This service description (OpenAPI 3.1)", "Service", Public).answer(
            200,
            "The document",
            RefOr::T(ObjectBuilder::new().schema_type(Type::Object).into()),
        ),
        _ => return None,
    };
    if doc.body.is_some() && !doc.responses.iter().any(|(status, _, _)| *status == 413) {
        let detail = sc.of::<s::Detail>();
        doc = doc.answer(413, "The request body is larger than 10 MB", detail);
    }
    Some(doc)
}

/// Marks every object variant of a `oneOf` closed, as the body parser refuses what a
/// variant does not name (utoipa closes an internally tagged enum's variants only with
/// `deny_unknown_fields` on each, which serde does not allow there).
fn close_variants(schema: &mut RefOr<Schema>) {
    use utoipa::openapi::schema::AdditionalProperties;
    if let RefOr::T(Schema::OneOf(one_of)) = schema {
        for item in &mut one_of.items {
            if let RefOr::T(Schema::Object(object)) = item {
                object.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
            }
        }
    }
}

/// Path parameters of a template: `{name}`, each a string.
fn path_parameters(route: &Route) -> Vec<utoipa::openapi::path::Parameter> {
    route
        .path
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let (schema, description) = match name {
                "entry_id" => (
                    ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(1024)).into(),
                    "The caller's entry ID, percent-encoded",
                ),
                "kind" => (
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .enum_values(Some(["video", "audio", "image"]))
                        .into(),
                    "The kind of media",
                ),
                _ if super::routes::is_uuid_parameter(name) => (uuid(), "A UUID"),
                _ => (text(1024), "Text"),
            };
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .description(Some(description))
                .schema(Some::<Schema>(schema))
                .build()
        })
        .collect()
}

fn method_of(route: &Route) -> HttpMethod {
    match route.method.as_str() {
        "GET" => HttpMethod::Get,
        "POST" => HttpMethod::Post,
        "PUT" => HttpMethod::Put,
        "PATCH" => HttpMethod::Patch,
        "DELETE" => HttpMethod::Delete,
        other => unreachable!("the routes table has no {other} route"),
    }
}

fn build_operation(route: &Route, doc: Doc) -> Operation {
    let mut operation = OperationBuilder::new()
        .operation_id(Some(route.function))
        .summary(Some(doc.summary))
        .tag(doc.tag)
        .parameters(Some(path_parameters(route)));
    for (name, schema, description) in doc.query {
        let parameter = ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Query)
            .required(Required::False)
            .description(Some(description))
            .schema(Some(schema))
            .build();
        operation = operation.parameter(parameter);
    }
    if doc.idempotent {
        let key = ParameterBuilder::new()
            .name("Idempotency-Key")
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some(
                "Makes a repeat of this request (within 24 hours) answer the first one's result instead of acting again",
            ))
            .schema(Some::<Schema>(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(255))
                    .pattern(Some("^[!-~]+$"))
                    .into(),
            ))
            .build();
        operation = operation.parameter(key);
    }
    if let Some((schema, required)) = doc.body {
        let body = RequestBodyBuilder::new()
            .content("application/json", ContentBuilder::new().schema(Some(schema)).build())
            .required(Some(if required { Required::True } else { Required::False }))
            .build();
        operation = operation.request_body(Some(body));
    }
    for (status, description, schema) in doc.responses {
        let mut response = ResponseBuilder::new().description(description);
        if let Some(schema) = schema {
            response = response.content("application/json", ContentBuilder::new().schema(Some(schema)).build());
        }
        if status == 401 {
            let challenge = HeaderBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                .description(Some("The bearer challenge (RFC 9110)"))
                .build();
            response = response.header("WWW-Authenticate", challenge);
        }
        if status == 303 || status == 302 {
            let location = HeaderBuilder::new().schema(Some(ObjectBuilder::new().schema_type(Type::String))).build();
            response = response.header("Location", location);
        }
        operation = operation.response(status.to_string(), response.build());
    }
    let security = match doc.access {
        Access::Bearer => vec![SecurityRequirement::new("bearerAuth", Vec::<String>::new())],
        Access::BearerOrApiKey => vec![
            SecurityRequirement::new("bearerAuth", Vec::<String>::new()),
            SecurityRequirement::new("apiKeyAuth", Vec::<String>::new()),
        ],
        Access::Public => return operation.build(),
    };
    operation.securities(Some(security)).build()
}

/// The webhooks a run sends to its `callback_url` (the document's `webhooks`), by their
/// `flag`: each a POST of the event's payload with the Standard Webhooks headers.
fn webhooks(sc: &mut Schemas) -> utoipa::openapi::Paths {
    let header = |name: &'static str, required: bool, description: &'static str| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(if required { Required::True } else { Required::False })
            .description(Some(description))
            .schema(Some::<Schema>(ObjectBuilder::new().schema_type(Type::String).into()))
            .build()
    };
    let events = [
        ("RUN_STARTED", "The run began (again, after a resume)", sc.of::<s::RunStartedEvent>()),
        ("RUN_PROGRESS", "Nodes changed status", sc.of::<s::RunProgressEvent>()),
        ("RUN_FINISHED", "The run ended", sc.of::<s::RunFinishedEvent>()),
    ];
    let mut paths = PathsBuilder::new();
    for (flag, summary, schema) in events {
        let body = RequestBodyBuilder::new()
            .content("application/json", ContentBuilder::new().schema(Some(schema)).build())
            .required(Some(Required::True))
            .build();
        let operation = OperationBuilder::new()
            .operation_id(Some(format!("webhook-{}", flag.to_lowercase().replace('_', "-"))))
            .summary(Some(summary))
            .tag("Webhooks")
            .parameter(header("webhook-id", true, "The delivery's ID: the same on every attempt (deduplicate on it)"))
            .parameter(header("webhook-timestamp", true, "Unix seconds of the attempt"))
            .parameter(header(
                "webhook-signature",
                false,
                "With a webhook secret: `v1,<base64 HMAC-SHA256 of \"{webhook-id}.{webhook-timestamp}.{body}\">`",
            ))
            .parameter(header("X-Service-Signature", false, "With a webhook secret: the secret itself"))
            .request_body(Some(body))
            .response(
                "2XX",
                ResponseBuilder::new()
                    .description(
                        "Delivered. Anything else within 10 s (or none) is retried after 1, 2, 4, 8 and 16 minutes",
                    )
                    .build(),
            )
            .build();
        paths = paths.path(flag, PathItem::new(HttpMethod::Post, operation));
    }
    paths.build()
}

/// Builds the document from the routes table.
pub fn document() -> OpenApi {
    let mut schemas = Schemas::default();
    let mut paths = PathsBuilder::new();
    let mut tags = BTreeMap::new();
    for route in ROUTES {
        let doc = operation_with(route.function, &mut schemas)
            .unwrap_or_else(|| panic!("the route of {} has no documented operation", route.function));
        tags.entry(doc.tag).or_insert(());
        paths = paths.path(route.path, PathItem::new(method_of(route), build_operation(route, doc)));
    }
    let webhooks = webhooks(&mut schemas);
    let mut components = ComponentsBuilder::new()
        .security_scheme(
            "bearerAuth",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`Authorization: Bearer <API key>`; the only scheme of the shared-store endpoints",
                    ))
                    .build(),
            ),
        )
        .security_scheme(
            "apiKeyAuth",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-API-Key",
                "`X-API-Key: <API key>`, on every endpoint outside the shared stores",
            ))),
        );
    let mut seen = std::collections::BTreeSet::new();
    for (name, mut schema) in schemas.0 {
        if seen.insert(name.clone()) {
            if name == s::Operation::name() {
                close_variants(&mut schema);
            }
            components = components.schema(name, schema);
        }
    }
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Video Editing Workflow Service API")
                .version(VERSION)
                .description(Some(
                    "Build agents (graphs of editing and generation tiles), run them on videos, follow runs by \
                     polling or signed webhooks, and keep organization-scoped shared stores.",
                ))
                .build(),
        )
        .servers(Some(vec![ServerBuilder::new().url("/").build()]))
        .paths(paths.build())
        .webhooks(Some(webhooks))
        .components(Some(components.build()))
        .tags(Some(tags.into_keys().map(|tag| TagBuilder::new().name(tag).build()).collect::<Vec<_>>()))
        .build()
}

/// The document as the pretty JSON that is served and committed.
pub fn json() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut text = document().to_pretty_json().unwrap_or_else(|error| panic!("the document is JSON: {error}"));
        text.push('\n');
        text
    })
}

/// `GET /openapi.json` (no API key).
pub async fn get_document(_app: Arc<App>, _call: Call) -> Result<Response, ApiError> {
    Ok(http::Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CACHE_CONTROL, "public, max-age=300")
        .body(lambda_http::Body::Text(json().to_owned()))
        .unwrap_or_default())
}
