//! The service description, OpenAPI 3.1 at the contract's version: one operation per
//! route of the routes table (paths, methods and which routes exist come from it), as
//! each endpoint's declaration in its context's api module describes it (`endpoints!`;
//! [`operation`] finds it); bodies are the [`schemas`] types. `serve` and the
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
use crate::domain::runs::views;

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
pub(crate) struct Schemas(Vec<(String, RefOr<Schema>)>);

impl Schemas {
    /// A reference to `T`, registered with everything it refers to.
    pub(crate) fn of<T: ToSchema>(&mut self) -> RefOr<Schema> {
        T::schemas(&mut self.0);
        self.0.push((T::name().into_owned(), T::schema()));
        RefOr::Ref(Ref::from_schema_name(T::name()))
    }
}

impl Doc {
    pub(crate) fn new(summary: &'static str, tag: &'static str, access: Access) -> Self {
        Self { summary, tag, access, query: Vec::new(), body: None, responses: Vec::new(), idempotent: false }
    }

    pub(crate) fn query(mut self, name: &'static str, schema: impl Into<Schema>, description: &'static str) -> Self {
        self.query.push((name, schema.into(), description));
        self
    }

    /// The request body; a body may also meet `serve`'s (and API Gateway's) 10 MB limit.
    pub(crate) fn body(mut self, schema: RefOr<Schema>, required: bool) -> Self {
        self.body = Some((schema, required));
        self
    }

    pub(crate) fn answer(mut self, status: u16, description: &'static str, schema: RefOr<Schema>) -> Self {
        self.responses.push((status, description, Some(schema)));
        self
    }

    pub(crate) fn empty(mut self, status: u16, description: &'static str) -> Self {
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
    pub(crate) fn general(self, schemas: &mut Schemas, statuses: &[u16]) -> Self {
        let detail = schemas.of::<s::Detail>();
        let mut doc = self.refusals(schemas);
        for &status in statuses {
            doc = doc.answer(status, reason(status), detail.clone());
        }
        doc.answer(500, "The request failed on the service's side", detail)
    }

    /// The failures of a shared-store endpoint, `{ error }` (metadata: `{ detail }`).
    pub(crate) fn store(self, schemas: &mut Schemas, statuses: &[u16]) -> Self {
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
    pub(crate) fn large(self, schemas: &mut Schemas) -> Self {
        let large = schemas.of::<s::LargeResponse>();
        self.answer(303, "The answer is larger than a function may return: GET it from `location`", large)
    }

    /// A creating POST's `Idempotency-Key` answers: 400 for a malformed key, 409 while
    /// the first request with the key runs, 422 for a key reused with another request;
    /// each `{ detail }`, added beside the endpoint's own body for that status.
    pub(crate) fn idempotent(mut self, schemas: &mut Schemas) -> Self {
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

pub(crate) fn uuid() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Uuid)))
        .into()
}

pub(crate) fn text(max_length: usize) -> Schema {
    ObjectBuilder::new().schema_type(Type::String).max_length(Some(max_length)).into()
}

pub(crate) fn integer(minimum: i64, maximum: i64) -> Schema {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(minimum)).maximum(Some(maximum)).into()
}

pub(crate) fn date_time() -> Schema {
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

/// Each context's operations (its `endpoints!`), in the routes table's order.
const CONTEXT_OPERATIONS: [fn(&str, &mut Schemas) -> Option<Doc>; 13] = [
    super::identity::operation,
    super::shared_stores::operation,
    super::agents::operation,
    super::uploads::operation,
    super::assets::operation,
    super::avatars::operation,
    super::social::operation,
    super::credits::operation,
    super::runs::operation,
    super::triggers::operation,
    super::webhooks::operation,
    super::media::operation,
    document_endpoint::operation,
];

/// This module's own endpoint: the document itself.
mod document_endpoint {
    use super::prelude::*;
    use super::{Arc, StatusCode};
    use crate::api::{ApiError, Call, Response};
    use crate::app::App;

    endpoints! {
        // The service description (no API key, no state).
        get_openapi: GET "/openapi.json" => "get-openapi", handler: get_document,
            dynamodb: [],
            operation(_sc): Doc::new("This service description (OpenAPI 3.1)", "Service", Public).answer(
                200,
                "The document",
                RefOr::T(ObjectBuilder::new().schema_type(Type::Object).into()),
            );
    }

    /// `GET /openapi.json` (no API key).
    pub async fn get_document(_app: Arc<App>, _call: Call) -> Result<Response, ApiError> {
        Ok(http::Response::builder()
            .status(StatusCode::OK)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::CACHE_CONTROL, "public, max-age=300")
            .body(lambda_http::Body::Text(super::json().to_owned()))
            .unwrap_or_default())
    }
}

pub use document_endpoint::{endpoints, handler_of, ROUTES as DOCUMENT_ROUTES};

fn operation_with(function: &str, sc: &mut Schemas) -> Option<Doc> {
    let mut doc = CONTEXT_OPERATIONS.iter().find_map(|operation| operation(function, sc))?;
    if doc.body.is_some() && !doc.responses.iter().any(|(status, _, _)| *status == 413) {
        let detail = sc.of::<s::Detail>();
        doc = doc.answer(413, "The request body is larger than 10 MB", detail);
    }
    Some(doc)
}

/// The tags of the operations.
pub(crate) const STORES: &str = "Shared stores";
pub(crate) const AGENTS: &str = "Agents";
pub(crate) const RUNS: &str = "Agent runs";
pub(crate) const UPLOADS: &str = "Uploads";
pub(crate) const WEBHOOKS: &str = "Webhooks";
pub(crate) const AVATARS: &str = "Avatar profiles";
pub(crate) const PLANS: &str = "Plans and credits";
pub(crate) const TRIGGERS: &str = "Triggers";
pub(crate) const SOCIAL: &str = "Social posts";

/// The query parameters of a list of runs.
pub(crate) fn run_filters(doc: Doc) -> Doc {
    doc.query("limit", integer(1, 100), "Runs per page, 1 to 100 (default 25)")
        .query("cursor", text(4096), "The `next_cursor` of the previous page")
        .query("status", text(200), "Comma-separated run statuses to keep")
        .query("from", date_time(), "Runs started at or after this time (RFC 3339)")
        .query("to", date_time(), "Runs started before this time (RFC 3339)")
}

/// What an endpoint's declaration describes its operation with.
pub(crate) mod prelude {
    pub(crate) use super::schemas as s;
    pub(crate) use super::Access::{Bearer, BearerOrApiKey, Public};
    pub(crate) use super::{date_time, integer, run_filters, text, uuid, Doc};
    pub(crate) use super::{AGENTS, AVATARS, PLANS, RUNS, SOCIAL, STORES, TRIGGERS, UPLOADS, WEBHOOKS};
    pub(crate) use utoipa::openapi::schema::{ObjectBuilder, Type};
    pub(crate) use utoipa::openapi::RefOr;
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
        ("RUN_STARTED", "The run began (again, after a resume)", sc.of::<views::RunStartedEvent>()),
        ("RUN_PROGRESS", "Nodes changed status", sc.of::<views::RunProgressEvent>()),
        ("RUN_FINISHED", "The run ended", sc.of::<views::RunFinishedEvent>()),
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
    for route in ROUTES.iter() {
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
            if name == crate::domain::graph::Operation::name() {
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
