//! Parsing the bodies and queries of the social endpoints at the edge, into the
//! domain's typed requests: every refusal names the field.

use serde_json::{Map, Value};

use crate::core::json;
use crate::domain::social::{NewConnection, NewPost, PostQuery, MAX_LIMIT, MAX_SCHEDULE_AHEAD};
use crate::domain::social::{Platform, PostFilter, PostId, PostStatus, PublisherKind, SandboxBehavior};
use crate::domain::social::{SocialConnectionId, SocialError};
use crate::domain::time::Timestamp;

/// Longest account name and username.
pub const MAX_ACCOUNT_CHARS: usize = 200;
/// Longest URL (profile, media).
pub const MAX_URL_CHARS: usize = 2_048;
/// Longest description, whatever the platform (each has its own, smaller or equal).
pub const MAX_DESCRIPTION_CHARS: usize = 5_000;
/// Most destinations of a post.
pub const MAX_DESTINATIONS: usize = 10;
/// Most media of a post.
pub const MAX_MEDIA: usize = 10;
/// Longest credential value.
pub const MAX_CREDENTIAL_CHARS: usize = 4_096;
/// Default page of the post list.
pub const DEFAULT_LIMIT: usize = 20;

fn invalid(message: impl Into<String>) -> SocialError {
    SocialError::Invalid(message.into())
}

fn text_field(body: &Map<String, Value>, field: &str, max: usize) -> Result<String, SocialError> {
    let text = match body.get(field) {
        Some(Value::String(text)) => text.trim().to_owned(),
        Some(Value::Null) | None => return Err(invalid(format!("{field} is required"))),
        Some(_) => return Err(invalid(format!("{field} must be a string"))),
    };
    let chars = text.chars().count();
    if chars == 0 || chars > max {
        return Err(invalid(format!("{field} must be 1 to {max} characters, got {chars}")));
    }
    Ok(text)
}

/// An http(s) URL of bounded length, or why not.
pub fn check_url(text: &str, field: &str) -> Result<(), SocialError> {
    if text.chars().count() > MAX_URL_CHARS {
        return Err(invalid(format!("{field} must be at most {MAX_URL_CHARS} characters")));
    }
    match url::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(|host| !host.is_empty()) => {
            Ok(())
        }
        _ => Err(invalid(format!("{field} must be an http:// or https:// URL, got {}", json::quoted(text)))),
    }
}

/// Refuses a property of the body outside `allowed` (`at`: the part of the body it is).
fn check_properties(body: &Map<String, Value>, allowed: &[&str], at: Option<&str>) -> Result<(), SocialError> {
    let unknown = match at {
        None => json::unknown_property(body, allowed),
        Some(at) => json::unknown_property_at(at, body, allowed),
    };
    unknown.map_or(Ok(()), |message| Err(invalid(message)))
}

/// Parses `POST /social/connections`.
pub fn new_connection(body: &Map<String, Value>) -> Result<NewConnection, SocialError> {
    const FIELDS: [&str; 8] = [
        "platform",
        "account_name",
        "account_username",
        "profile_url",
        "requires_approval",
        "publisher",
        "credentials",
        "sandbox_behavior",
    ];
    check_properties(body, &FIELDS, None)?;
    let platform = match body.get("platform") {
        Some(Value::String(text)) => Platform::parse(text).ok_or_else(|| {
            invalid(format!(
                "platform must be one of x, linkedin, instagram, facebook, tiktok, youtube; got {}",
                json::quoted(text)
            ))
        })?,
        Some(Value::Null) | None => return Err(invalid("platform is required")),
        Some(_) => return Err(invalid("platform must be a string")),
    };
    let account_name = text_field(body, "account_name", MAX_ACCOUNT_CHARS)?;
    let account_username = text_field(body, "account_username", MAX_ACCOUNT_CHARS)?;
    let profile_url = text_field(body, "profile_url", MAX_URL_CHARS)?;
    check_url(&profile_url, "profile_url")?;
    let requires_approval = match body.get("requires_approval") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(value)) => *value,
        Some(_) => return Err(invalid("requires_approval must be a boolean")),
    };
    let publisher = publisher(body, platform)?;
    let sandbox_behavior = sandbox_behavior(body, publisher)?;
    let credentials = credentials(body, publisher)?;
    Ok(NewConnection {
        platform,
        account_name,
        account_username,
        profile_url,
        requires_approval,
        publisher,
        sandbox_behavior,
        credentials,
    })
}

/// A connection's `publisher` (sandbox by default; youtube for the youtube platform).
fn publisher(body: &Map<String, Value>, platform: Platform) -> Result<PublisherKind, SocialError> {
    let publisher = match body.get("publisher") {
        None | Some(Value::Null) => PublisherKind::Sandbox,
        Some(Value::String(text)) if text == "sandbox" => PublisherKind::Sandbox,
        Some(Value::String(text)) if text == "youtube" => PublisherKind::Youtube,
        Some(Value::String(text)) => {
            return Err(invalid(format!("publisher must be sandbox or youtube, got {}", json::quoted(text))))
        }
        Some(_) => return Err(invalid("publisher must be a string")),
    };
    if publisher == PublisherKind::Youtube && platform != Platform::Youtube {
        return Err(invalid("publisher: youtube publishes to the youtube platform only"));
    }
    Ok(publisher)
}

/// What the sandbox does with a connection's posts (succeed by default); the sandbox
/// publisher's only.
fn sandbox_behavior(body: &Map<String, Value>, publisher: PublisherKind) -> Result<SandboxBehavior, SocialError> {
    Ok(match body.get("sandbox_behavior") {
        None | Some(Value::Null) => SandboxBehavior::Succeed,
        Some(_) if publisher != PublisherKind::Sandbox => {
            return Err(invalid("sandbox_behavior applies to the sandbox publisher only"))
        }
        Some(Value::String(text)) => match text.as_str() {
            "succeed" => SandboxBehavior::Succeed,
            "fail" => SandboxBehavior::Fail,
            "async" => SandboxBehavior::Async,
            _ => {
                return Err(invalid(format!(
                    "sandbox_behavior must be succeed, fail or async, got {}",
                    json::quoted(text)
                )))
            }
        },
        Some(_) => return Err(invalid("sandbox_behavior must be a string")),
    })
}

/// A youtube connection's OAuth `credentials`: an access token, and a refresh token only
/// with the client that issued it.
fn credentials(body: &Map<String, Value>, publisher: PublisherKind) -> Result<Option<Map<String, Value>>, SocialError> {
    let fields = match (body.get("credentials"), publisher) {
        (None | Some(Value::Null), PublisherKind::Sandbox) => return Ok(None),
        (None | Some(Value::Null), PublisherKind::Youtube) => {
            return Err(invalid("credentials is required for the youtube publisher: {access_token}"))
        }
        (Some(_), PublisherKind::Sandbox) => return Err(invalid("credentials apply to the youtube publisher only")),
        (Some(Value::Object(fields)), PublisherKind::Youtube) => fields,
        (Some(_), PublisherKind::Youtube) => return Err(invalid("credentials must be an object")),
    };
    check_properties(fields, &["access_token", "refresh_token", "client_id", "client_secret"], Some("credentials"))?;
    for (field, value) in fields {
        match value {
            Value::String(text) if !text.trim().is_empty() && text.chars().count() <= MAX_CREDENTIAL_CHARS => {}
            _ => {
                return Err(invalid(format!(
                    "credentials.{field} must be a non-empty string of at most {MAX_CREDENTIAL_CHARS} characters"
                )))
            }
        }
    }
    if !fields.contains_key("access_token") {
        return Err(invalid("credentials.access_token is required"));
    }
    let client = ["client_id", "client_secret"].iter().filter(|field| fields.contains_key(**field)).count();
    if fields.contains_key("refresh_token") && client != 2 {
        return Err(invalid(
            "credentials.refresh_token needs credentials.client_id and credentials.client_secret (the OAuth client \
             that issued it), to refresh the access token with",
        ));
    }
    Ok(Some(fields.clone()))
}

/// Parses `POST /social/post`; `now` bounds `scheduled_at`.
pub fn new_post(body: &Map<String, Value>, now: Timestamp) -> Result<NewPost, SocialError> {
    check_properties(body, &["description", "destinations", "media_urls", "scheduled_at"], None)?;
    let description = text_field(body, "description", MAX_DESCRIPTION_CHARS)?;
    let destinations = match body.get("destinations") {
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(invalid("destinations must name at least one social connection"))
        }
        Some(Value::Array(items)) if items.len() > MAX_DESTINATIONS => {
            return Err(invalid(format!("destinations may name at most {MAX_DESTINATIONS} social connections")))
        }
        Some(Value::Array(items)) => items,
        Some(Value::Null) | None => return Err(invalid("destinations is required")),
        Some(_) => return Err(invalid("destinations must be an array")),
    };
    let mut ids = Vec::with_capacity(destinations.len());
    for (index, item) in destinations.iter().enumerate() {
        let field = format!("destinations[{index}].social_connection_id");
        let Value::Object(item) = item else {
            return Err(invalid(format!("destinations[{index}] must be an object {{social_connection_id}}")));
        };
        check_properties(item, &["social_connection_id"], Some(&format!("destinations[{index}]")))?;
        let id = match item.get("social_connection_id") {
            Some(Value::String(text)) => SocialConnectionId::parse(text)
                .ok_or_else(|| invalid(format!("{field} must be a UUID, got {}", json::quoted(text))))?,
            Some(Value::Null) | None => return Err(invalid(format!("{field} is required"))),
            Some(_) => return Err(invalid(format!("{field} must be a string"))),
        };
        if ids.contains(&id) {
            return Err(invalid(format!("{field}: connection {id} is named twice")));
        }
        ids.push(id);
    }
    let media = match body.get("media_urls") {
        Some(Value::Array(items)) if items.is_empty() => return Err(invalid("media_urls must hold at least one URL")),
        Some(Value::Array(items)) if items.len() > MAX_MEDIA => {
            return Err(invalid(format!("media_urls may hold at most {MAX_MEDIA} URLs")))
        }
        Some(Value::Array(items)) => items,
        Some(Value::Null) | None => return Err(invalid("media_urls is required")),
        Some(_) => return Err(invalid("media_urls must be an array")),
    };
    let mut media_urls = Vec::with_capacity(media.len());
    for (index, item) in media.iter().enumerate() {
        let field = format!("media_urls[{index}]");
        let Value::String(url) = item else { return Err(invalid(format!("{field} must be a string"))) };
        check_url(url, &field)?;
        media_urls.push(url.clone());
    }
    let scheduled_at = match body.get("scheduled_at") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            let at = chrono::DateTime::parse_from_rfc3339(text).map_err(|_| {
                invalid(format!(
                    "scheduled_at must be an ISO 8601 time such as 2030-01-01T09:00:00Z, got {}",
                    json::quoted(text)
                ))
            })?;
            let at = Timestamp::from_datetime(at.with_timezone(&chrono::Utc));
            if at < now {
                return Err(invalid(format!("scheduled_at {at} is in the past (now is {now})")));
            }
            if at > now.after(MAX_SCHEDULE_AHEAD) {
                return Err(invalid(format!("scheduled_at {at} is more than a year ahead")));
            }
            Some(at)
        }
        Some(_) => return Err(invalid("scheduled_at must be a string")),
    };
    Ok(NewPost { description, destinations: ids, media_urls, scheduled_at })
}

/// The list of posts' cursors.
const CURSOR_LIST: &str = "social_posts";

/// The cursor of the page after the post `last`.
pub fn cursor_after(last: PostId) -> String {
    crate::core::cursor::encode(CURSOR_LIST, &last.to_string())
}

/// Parses the query parameters of `GET /social/posts` (name, value pairs).
pub fn post_query<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<PostQuery, SocialError> {
    let mut query = PostQuery { limit: DEFAULT_LIMIT, cursor: None, filter: PostFilter::default() };
    for (name, value) in pairs {
        match name {
            "limit" => {
                query.limit = value.parse().ok().filter(|limit| (1..=MAX_LIMIT).contains(limit)).ok_or_else(|| {
                    invalid(format!("limit must be an integer from 1 to {MAX_LIMIT}, got {}", json::quoted(value)))
                })?
            }
            "cursor" => {
                let position = crate::core::cursor::decode(CURSOR_LIST, value);
                query.cursor = Some(
                    position
                        .as_deref()
                        .and_then(PostId::parse)
                        .ok_or_else(|| invalid("cursor is not a cursor of this list (use next_cursor as given)"))?,
                );
            }
            "status" => {
                query.filter.status = Some(PostStatus::parse(value).ok_or_else(|| {
                    invalid(format!(
                        "status must be one of scheduled, pending_approval, processing, posted, partial_failure, \
                         failed, rejected; got {}",
                        json::quoted(value)
                    ))
                })?)
            }
            "platform" => {
                query.filter.platform = Some(Platform::parse(value).ok_or_else(|| {
                    invalid(format!(
                        "platform must be one of x, linkedin, instagram, facebook, tiktok, youtube; got {}",
                        json::quoted(value)
                    ))
                })?)
            }
            "social_connection_id" => {
                query.filter.connection = Some(SocialConnectionId::parse(value).ok_or_else(|| {
                    invalid(format!("social_connection_id must be a UUID, got {}", json::quoted(value)))
                })?)
            }
            other => return Err(invalid(format!("{} is not a parameter of this list", json::quoted(other)))),
        }
    }
    Ok(query)
}

// ---- Request bodies ------------------------------------------------------------------
// The documented form of the bodies read above: the OpenAPI schemas of this context's
// requests (the parser is the authority; the fuzzer checks that the two agree).

pub mod requests {
    use crate::domain::time::Timestamp as Time;
    use serde::Serialize;
    use utoipa::ToSchema;
    type Uuid = uuid::Uuid;
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
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refusal(result: Result<impl std::fmt::Debug, SocialError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn a_refresh_token_comes_with_the_oauth_client_that_issued_it() {
        let with = |credentials: Value| {
            let body = json!({"platform": "youtube", "account_name": "C", "account_username": "c",
                "profile_url": "https://www.youtube.com/@c", "publisher": "youtube", "credentials": credentials});
            new_connection(body.as_object().unwrap())
        };
        let alone = refusal(with(json!({"access_token": "a", "refresh_token": "r", "client_id": "c"})));
        assert!(alone.contains("credentials.refresh_token needs credentials.client_id and"), "{alone}");
        let whole = json!({"access_token": "a", "refresh_token": "r", "client_id": "c", "client_secret": "s"});
        assert_eq!(with(whole.clone()).unwrap().credentials, whole.as_object().cloned());
        let extra = refusal(with(json!({"access_token": "a", "expires_at": "x"})));
        assert!(extra.contains("expires_at"), "{extra}");
    }

    #[test]
    fn connections_refuse_each_field_by_name() {
        let good = json!({"platform": "x", "account_name": "Ada", "account_username": "ada",
            "profile_url": "https://x.com/ada"});
        let parsed = new_connection(good.as_object().unwrap()).unwrap();
        assert_eq!((parsed.publisher, parsed.sandbox_behavior), (PublisherKind::Sandbox, SandboxBehavior::Succeed));
        let cases = [
            (json!({"platform": "myspace"}), "platform must be one of"),
            (json!({"platform": "x", "account_name": ""}), "account_name must be 1 to 200"),
            (
                json!({"platform": "x", "account_name": "a", "account_username": "b", "profile_url": "ftp://x"}),
                "profile_url must be an http",
            ),
            (
                json!({"platform": "x", "account_name": "a", "account_username": "b", "profile_url": "https://x.test",
                    "publisher": "youtube"}),
                "youtube platform only",
            ),
            (
                json!({"platform": "youtube", "account_name": "a", "account_username": "b",
                    "profile_url": "https://x.test", "publisher": "youtube"}),
                "credentials is required",
            ),
            (
                json!({"platform": "x", "account_name": "a", "account_username": "b", "profile_url": "https://x.test",
                    "sandbox_behavior": "later"}),
                "sandbox_behavior must be",
            ),
            (json!({"platform": "x", "extra": 1}), "unknown property: extra"),
        ];
        for (body, expected) in cases {
            let message = refusal(new_connection(body.as_object().unwrap()));
            assert!(message.contains(expected), "{body}: {message}");
        }
    }

    #[test]
    fn posts_refuse_each_field_by_name() {
        let now = Timestamp::parse("2030-01-01T00:00:00.000Z").unwrap();
        let id = SocialConnectionId::new_v4();
        let base = |extra: Value| {
            let mut body = json!({"description": "hi", "destinations": [{"social_connection_id": id}],
                "media_urls": ["https://cdn.test/a.mp4"]});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            body
        };
        assert!(new_post(base(json!({})).as_object().unwrap(), now).unwrap().scheduled_at.is_none());
        let later = new_post(base(json!({"scheduled_at": "2030-01-01T01:00:00+01:00"})).as_object().unwrap(), now);
        assert_eq!(later.unwrap().scheduled_at, Some(now));
        let cases = [
            (json!({"description": ""}), "description must be 1 to 5000"),
            (json!({"destinations": []}), "at least one"),
            (
                json!({"destinations": [{"social_connection_id": "nope"}]}),
                "destinations[0].social_connection_id must be a UUID",
            ),
            (json!({"destinations": [{"social_connection_id": id}, {"social_connection_id": id}]}), "named twice"),
            (json!({"media_urls": []}), "media_urls must hold at least one"),
            (json!({"media_urls": ["file:///etc/passwd"]}), "media_urls[0] must be an http"),
            (json!({"scheduled_at": "2029-12-31T23:59:59Z"}), "scheduled_at 2029-12-31T23:59:59.000Z is in the past"),
            (json!({"scheduled_at": "tomorrow"}), "scheduled_at must be an ISO 8601"),
        ];
        for (extra, expected) in cases {
            let message = refusal(new_post(base(extra.clone()).as_object().unwrap(), now));
            assert!(message.contains(expected), "{extra}: {message}");
        }
    }

    #[test]
    fn list_queries_are_checked_and_cursors_round_trip() {
        let id = super::PostId::now_v7();
        let cursor = cursor_after(id);
        let query = post_query([("limit", "5"), ("cursor", cursor.as_str()), ("status", "posted"), ("platform", "x")]);
        let query = query.unwrap();
        assert_eq!((query.limit, query.cursor), (5, Some(id)));
        for (pairs, expected) in [
            (vec![("limit", "0")], "limit must be an integer from 1 to 100"),
            (vec![("limit", "101")], "limit must be"),
            (vec![("cursor", "xyz")], "cursor is not a cursor"),
            (vec![("status", "done")], "status must be one of"),
            (vec![("platform", "myspace")], "platform must be one of"),
            (vec![("social_connection_id", "1")], "social_connection_id must be a UUID"),
        ] {
            assert!(refusal(post_query(pairs)).contains(expected), "{expected}");
        }
    }
}
