//! The wire shapes of request and response bodies, as OpenAPI schemas. Each type here
//! is the documented form of a body a handler reads or writes; Schemathesis checks in
//! CI that every answer conforms to them, and the handlers' own tests pin the values.
//!
//! Bodies the service reads are closed (`deny_unknown_fields` → `additionalProperties:
//! false`): every handler refuses a property it does not know, naming it. Answers are
//! closed too, so that a field added without being documented fails the fuzzer. An
//! `Option` is nullable; one that may be left out but never null carries
//! `nullable = false`; a field always present, possibly null, is `required = true`.
#![allow(dead_code)] // The fields are read by the schema derive, not by code.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::domain::agents::Visibility;
use crate::domain::asset_manager::Artifact;

/// A UUID string.
type Uuid = uuid::Uuid;

/// An ISO 8601 UTC date-time with milliseconds, e.g. `2026-01-31T12:00:00.000Z`: the
/// domain's timestamp, documented as the component `Time`.
pub use crate::domain::time::Timestamp as Time;

// ---- Errors and common answers -------------------------------------------------------
// The bodies `api::error::ApiError` and the large-response redirect serialize.
pub use crate::api::error::{Detail, LargeResponse, StoreErrorBody, StoreRefusal};
pub use crate::api::Success;

// ---- Shared stores -----------------------------------------------------------------

/// `POST /shared-stores`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateStore {
    /// Non-empty once trimmed; at most 1,000 characters.
    #[schema(min_length = 1, max_length = 1000)]
    pub name: String,
    /// A caller-defined label, possibly empty, kept trimmed; omitted means `manual`
    /// (null is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, max_length = 1000)]
    pub source_type: Option<String>,
}

/// `PATCH /shared-stores/{store_id}`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameStore {
    #[schema(min_length = 1, max_length = 1000)]
    pub name: String,
}

/// `PUT /shared-stores/{store_id}/entries/{entry_id}`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutEntry {
    /// Non-empty once trimmed (it is stored trimmed).
    #[schema(min_length = 1, max_length = 1000)]
    pub display_name: String,
    /// Any JSON object of at most 256,000 bytes; omitted or null is stored as `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `PATCH /shared-stores/{store_id}/entries/{entry_id}`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchEntry {
    /// The entry's new ID.
    #[schema(min_length = 1, max_length = 1024)]
    pub entry_id: String,
    #[schema(min_length = 1, max_length = 1000)]
    pub display_name: String,
    /// Omitted keeps the current metadata; null replaces it with `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// One item of a bulk upsert.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkItem {
    #[schema(min_length = 1, max_length = 1024)]
    pub entry_id: String,
    #[schema(min_length = 1, max_length = 1000)]
    pub display_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `POST /shared-stores/{store_id}/entries/bulk`; the last item of an ID wins.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Bulk {
    #[schema(min_items = 1, max_items = 5000)]
    pub entries: Vec<BulkItem>,
}

// ---- Agents ------------------------------------------------------------------------
// The answers are the domain's (`domain::agents`, `domain::graph`, the catalog's
// `domain::nodes::NodeType`) and `api::agents`'s views of them.

/// `POST /agent/create`; every field optional.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAgent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, min_length = 1, max_length = 120)]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, max_length = 5000)]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub visibility: Option<Visibility>,
    /// A workspace of the key's organization; omitted: its primary workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub workspace_id: Option<Uuid>,
}

/// `POST /agent/{agent_id}/duplicate`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DuplicateAgent {
    /// The copy's name; omitted: the original's with ` (copy)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, min_length = 1, max_length = 120)]
    pub name: Option<String>,
}

/// One graph operation of an update, applied in order, all or nothing; each variant is
/// closed (`document()` marks them: the derive closes only the enum).
#[derive(Serialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Operation {
    CreateNode {
        node_type_id: Uuid,
        /// A name later operations of the same request use for this node.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 100)]
        temp_ref_id: Option<String>,
        /// Null or omitted: `{}`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        params_used: Option<Map<String, Value>>,
    },
    UpdateNode {
        agent_node_id: Uuid,
        params_used: Map<String, Value>,
    },
    DeleteNode {
        agent_node_id: Uuid,
    },
    /// Each end by `*_agent_node_id` or by `*_temp_ref_id`, exactly one of them.
    CreateConnection {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        source_agent_node_id: Option<Uuid>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        source_temp_ref_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        target_agent_node_id: Option<Uuid>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        target_temp_ref_id: Option<String>,
    },
    DeleteConnection {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        source_agent_node_id: Option<Uuid>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        source_temp_ref_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        target_agent_node_id: Option<Uuid>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false)]
        target_temp_ref_id: Option<String>,
    },
}

/// `POST /agent/{agent_id}/update`: metadata, operations, or both.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(min_properties = 1)]
pub struct UpdateAgent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, min_length = 1, max_length = 120)]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, max_length = 5000)]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub visibility: Option<Visibility>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, min_items = 1, max_items = 1000)]
    pub operations: Option<Vec<Operation>>,
}

// ---- Uploads and asset managers ---------------------------------------------------------
// The answers are the domain's (`domain::uploads`, `domain::asset_manager`) and
// `api::uploads::UploadView`.

/// `POST /uploads/{kind}/get_upload_url`; the body is optional.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadUrlRequest {
    /// The media type the URL pins (default: the kind's usual one, e.g. `video/mp4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub content_type: Option<String>,
}

/// `POST /uploads/{kind}/finalize_upload`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FinalizeUpload {
    pub id: Uuid,
}

/// `POST /asset_connections`; null for a field is the same as leaving it out.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAssetConnection {
    /// Default: the primary workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<Uuid>,
    /// Default and only provider: `local` (items made of this organization's uploads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Default: `Asset manager`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 200)]
    pub name: Option<String>,
}

/// `POST /asset_connections/{connection_id}/items`: a ready video upload as the
/// high-resolution file, the proxy, or both (null is the same as leaving it out).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAssetItem {
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highres_video_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_video_id: Option<Uuid>,
}

// ---- Runs --------------------------------------------------------------------------
// The answers are `domain::runs::views` (the record, nodes, list items and webhook
// payloads) and `api::runs`'s start, page, cancel and resume answers.

/// An input by ID with its own clip window.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IdInput {
    pub id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 18000000)]
    pub input_clip_start_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 18000000)]
    pub input_clip_end_ms: Option<u64>,
}

/// An input by URL with its own clip window.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UrlInput {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 18000000)]
    pub input_clip_start_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 18000000)]
    pub input_clip_end_ms: Option<u64>,
}

/// An asset-manager item as an input.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssetInput {
    pub id: Uuid,
    /// Default `highres`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 18000000)]
    pub input_clip_start_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 18000000)]
    pub input_clip_end_ms: Option<u64>,
}

/// Declares a closed body with the input arrays a run takes at the top level or in a
/// `video_inputs` entry (`video_ids` … `asset_manager_assets`, and the clip window),
/// after its own fields.
macro_rules! with_input_arrays {
    ($(#[$meta:meta])* pub struct $name:ident { $($field:tt)* }) => {
        $(#[$meta])*
        #[derive(Serialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($field)*
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub video_ids: Option<Vec<Uuid>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub node_render_ids: Option<Vec<Uuid>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub video_urls: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 18000000)]
    pub input_clip_start_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 18000000)]
    pub input_clip_end_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub video_id_inputs: Option<Vec<IdInput>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub node_render_inputs: Option<Vec<IdInput>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub video_url_inputs: Option<Vec<UrlInput>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub youtube_url_inputs: Option<Vec<UrlInput>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub asset_manager_assets: Option<Vec<AssetInput>>,
        }
    };
}

with_input_arrays! {
    /// The inputs of one Video Input tile (`video_inputs`).
    pub struct TileInputs {
        pub agent_node_id: Uuid,
    }
}

with_input_arrays! {
    /// `POST /agent/{agent_id}/run`: either `video_inputs` or the top-level input arrays.
    pub struct StartRun {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(nullable = false, min_items = 1)]
        pub video_inputs: Option<Vec<TileInputs>>,
        /// Where run events are POSTed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub callback_url: Option<String>,
        /// `agent_node_id` → parameters to override for this run (null: none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub update_params: Option<std::collections::BTreeMap<String, Map<String, Value>>>,
        /// `agent_node_id`s bypassed in this run (null: none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ignore_nodes: Option<Vec<Uuid>>,
    }
}

// The answers are `api::avatars::views`; the status is the domain's `AvatarStatus`.

/// The sources of a new avatar: a video source (`video_url` or `video_id`), or an image
/// source and an audio source. Video and voice recordings are 4 to 15 seconds long. Null
/// is the same as leaving a property out.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AvatarSources {
    /// An http(s) URL, fetched when the profile is processed and stored as an upload.
    #[serde(default)]
    #[schema(format = "uri", max_length = 2048)]
    pub video_url: Option<String>,
    #[serde(default)]
    #[schema(format = "uri", max_length = 2048)]
    pub audio_url: Option<String>,
    #[serde(default)]
    #[schema(format = "uri", max_length = 2048)]
    pub image_url: Option<String>,
    /// A ready video upload of the organization.
    #[serde(default)]
    pub video_id: Option<Uuid>,
    #[serde(default)]
    pub audio_id: Option<Uuid>,
    #[serde(default)]
    pub image_id: Option<Uuid>,
}

/// `POST /avatar-profiles/create`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAvatarProfile {
    /// Unique in the workspace (compared trimmed, ignoring case).
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    pub sources: AvatarSources,
}

// ---- Social posts ----------------------------------------------------------------
// The answers are `api::social::views`; the enums are the domain's (`domain::social`).

use crate::domain::social::{Platform as SocialPlatform, PublisherKind as SocialPublisher, SandboxBehavior};

/// The publisher's credentials (YouTube: an OAuth access token with the
/// `youtube.upload` scope). Write-only: kept in the deployment's secret store, never shown.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SocialCredentials {
    #[schema(min_length = 1, max_length = 4096)]
    pub access_token: String,
    /// Kept to refresh the access token before an upload once it has run out (with
    /// `client_id` and `client_secret`, which it requires).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 4096, nullable = false)]
    pub refresh_token: Option<String>,
    /// The OAuth client that issued the tokens (required with `refresh_token`).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 4096, nullable = false)]
    pub client_id: Option<String>,
    /// The OAuth client's secret (required with `refresh_token`).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 4096, nullable = false)]
    pub client_secret: Option<String>,
}

/// `POST /social/connections`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSocialConnection {
    pub platform: SocialPlatform,
    #[schema(min_length = 1, max_length = 200)]
    pub account_name: String,
    #[schema(min_length = 1, max_length = 200)]
    pub account_username: String,
    #[schema(format = "uri", min_length = 1, max_length = 2048)]
    pub profile_url: String,
    /// Posts to this account wait for `POST /social/post/{post_id}/approve` (default false).
    #[serde(default)]
    pub requires_approval: Option<bool>,
    /// Default `sandbox`.
    #[serde(default)]
    pub publisher: Option<SocialPublisher>,
    /// The sandbox publisher only; default `succeed`.
    #[serde(default)]
    pub sandbox_behavior: Option<SandboxBehavior>,
    /// Required by the youtube publisher, refused by the sandbox.
    #[serde(default)]
    pub credentials: Option<SocialCredentials>,
}

/// A destination of a new post.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostDestinationRef {
    /// A connection of the organization.
    pub social_connection_id: Uuid,
}

/// `POST /social/post`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSocialPost {
    /// At most what every destination's platform takes (x 280, linkedin 3000, instagram
    /// and tiktok 2200, facebook and youtube 5000 characters).
    #[schema(min_length = 1, max_length = 5000)]
    pub description: String,
    /// 1 to 10 connections, each once.
    #[schema(min_items = 1, max_items = 10)]
    pub destinations: Vec<PostDestinationRef>,
    /// 1 to 10 http(s) URLs of videos (MP4, MOV, WebM) or pictures (PNG, JPEG, WebP), at
    /// most 512 MB each, within each destination's limits; the service's own signed
    /// links are read from its store.
    #[schema(min_items = 1, max_items = 10)]
    pub media_urls: Vec<String>,
    /// A future time (within a year) to publish at; now when left out.
    #[serde(default)]
    pub scheduled_at: Option<Time>,
}

// ---- Plans and credits -----------------------------------------------------------
// The answers are `domain::credits::views` and `api::credits`'s.

/// `POST /plan/upgrade`
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpgradePlan {
    /// `free`, `creator`, `creator_annual`, `professional` or `professional_annual`.
    #[schema(max_length = 100)]
    pub plan_id: String,
    /// Where the checkout sends the caller once paid (http or https).
    #[serde(default)]
    #[schema(format = "uri", max_length = 2048, nullable = false)]
    pub success_url: Option<String>,
    /// Where the checkout sends the caller when it is canceled.
    #[serde(default)]
    #[schema(format = "uri", max_length = 2048, nullable = false)]
    pub cancel_url: Option<String>,
}

/// Auto top-up settings to change; those left out keep their value.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AutoTopUpChange {
    #[serde(default)]
    #[schema(nullable = false)]
    pub enabled: Option<bool>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1000000, nullable = false)]
    pub threshold: Option<u64>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1000000, nullable = false)]
    pub quantity: Option<u64>,
    /// At least `quantity` (default 5,000).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1000000, nullable = false)]
    pub monthly_limit: Option<u64>,
    #[serde(default)]
    #[schema(nullable = false)]
    pub cover_shortfall: Option<bool>,
}

/// `POST /credits/settings` (creator, creator_annual, professional and
/// professional_annual plans only).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreditSettings {
    pub auto_topup: AutoTopUpChange,
}

/// A Stripe event as Stripe sends it (`checkout.session.completed` and `invoice.paid`
/// are applied; others are received and ignored).
#[derive(Serialize, Deserialize)]
pub struct StripeEvent(Value);

impl utoipa::PartialSchema for StripeEvent {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some("A Stripe event, verified by its `Stripe-Signature` header"))
            .into()
    }
}

impl ToSchema for StripeEvent {}
