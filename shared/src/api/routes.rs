//! The routes table: the one list of endpoints, as data, that drives the local router,
//! the OpenAPI document, the Lambda binaries (by function name) and the `template.yaml`
//! and IAM checks, made of the contexts' declarations (`endpoints!`). It names no
//! handler, so that reading it links none: each function binary names its own handler
//! (`api::handlers`), and only `serve` links them all.

use std::sync::LazyLock;

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

/// Each context's endpoints (its `endpoints!`), in the table's order.
const CONTEXT_ROUTES: [&[Route]; 13] = [
    super::identity::ROUTES,
    super::shared_stores::ROUTES,
    super::agents::ROUTES,
    super::uploads::ROUTES,
    super::assets::ROUTES,
    super::avatars::ROUTES,
    super::social::ROUTES,
    super::credits::ROUTES,
    super::runs::ROUTES,
    super::triggers::ROUTES,
    super::webhooks::ROUTES,
    super::media::ROUTES,
    super::openapi::DOCUMENT_ROUTES,
];

/// Every endpoint of the service.
pub static ROUTES: LazyLock<Vec<&'static Route>> =
    LazyLock::new(|| CONTEXT_ROUTES.iter().flat_map(|routes| routes.iter()).collect());

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
        for route in ROUTES.iter() {
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
    ROUTES.iter().find(|route| route.function == function).copied()
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
