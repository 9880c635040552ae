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

fn text_field(value: Option<&Value>, field: &str, max: usize) -> Result<String, SocialError> {
    let text = match value {
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

/// A property outside a body's declaration is a 400 `{ detail }`.
impl json::Refusal for SocialError {
    fn unknown_property(message: String) -> Self {
        invalid(message)
    }
}

crate::closed_body! {
    /// The publisher's credentials (YouTube: an OAuth access token with the
    /// `youtube.upload` scope). Write-only: kept in the deployment's secret store, never shown.
    #[schema(as = SocialCredentials)]
    pub struct CredentialsBody -> SocialError {
        #[schema(min_length = 1, max_length = 4096)]
        access_token: String = |value| {
            credential(value, "access_token")?.ok_or_else(|| invalid("credentials.access_token is required"))
        },
        /// Kept to refresh the access token before an upload once it has run out (with
        /// `client_id` and `client_secret`, which it requires).
        #[schema(min_length = 1, max_length = 4096, nullable = false)]
        refresh_token: Option<String> = |value| credential(value, "refresh_token"),
        /// The OAuth client that issued the tokens (required with `refresh_token`).
        #[schema(min_length = 1, max_length = 4096, nullable = false)]
        client_id: Option<String> = |value| credential(value, "client_id"),
        /// The OAuth client's secret (required with `refresh_token`).
        #[schema(min_length = 1, max_length = 4096, nullable = false)]
        client_secret: Option<String> = |value| credential(value, "client_secret"),
    }
}

/// A credential: a non-empty string of at most [`MAX_CREDENTIAL_CHARS`]; None when absent.
fn credential(value: Option<&Value>, field: &str) -> Result<Option<String>, SocialError> {
    match value {
        None => Ok(None),
        Some(Value::String(text)) if !text.trim().is_empty() && text.chars().count() <= MAX_CREDENTIAL_CHARS => {
            Ok(Some(text.clone()))
        }
        Some(_) => Err(invalid(format!(
            "credentials.{field} must be a non-empty string of at most {MAX_CREDENTIAL_CHARS} characters"
        ))),
    }
}

crate::closed_body! {
    /// `POST /social/connections`
    #[schema(as = CreateSocialConnection)]
    pub struct ConnectionBody -> SocialError {
        platform: Platform = |value: Option<&Value>| match value {
            Some(Value::String(text)) => Platform::parse(text).ok_or_else(|| {
                invalid(format!(
                    "platform must be one of x, linkedin, instagram, facebook, tiktok, youtube; got {}",
                    json::quoted(text)
                ))
            }),
            Some(Value::Null) | None => Err(invalid("platform is required")),
            Some(_) => Err(invalid("platform must be a string")),
        },
        #[schema(min_length = 1, max_length = 200)]
        account_name: String = |value| text_field(value, "account_name", MAX_ACCOUNT_CHARS),
        #[schema(min_length = 1, max_length = 200)]
        account_username: String = |value| text_field(value, "account_username", MAX_ACCOUNT_CHARS),
        #[schema(format = "uri", min_length = 1, max_length = 2048)]
        profile_url: String = |value| {
            let url = text_field(value, "profile_url", MAX_URL_CHARS)?;
            check_url(&url, "profile_url")?;
            Ok(url)
        },
        /// Posts to this account wait for `POST /social/post/{post_id}/approve` (default false).
        requires_approval: Option<bool> = |value: Option<&Value>| match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(value)) => Ok(Some(*value)),
            Some(_) => Err(invalid("requires_approval must be a boolean")),
        },
        /// Default `sandbox`.
        publisher: Option<PublisherKind> = |value: Option<&Value>| match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) if text == "sandbox" => Ok(Some(PublisherKind::Sandbox)),
            Some(Value::String(text)) if text == "youtube" => Ok(Some(PublisherKind::Youtube)),
            Some(Value::String(text)) => {
                Err(invalid(format!("publisher must be sandbox or youtube, got {}", json::quoted(text))))
            }
            Some(_) => Err(invalid("publisher must be a string")),
        },
        // These two are read once the publisher is known: given to another publisher,
        // they are refused whatever they hold.
        /// The sandbox publisher only; default `succeed`.
        #[schema(value_type = Option<SandboxBehavior>)]
        sandbox_behavior: Option<Value> = given,
        /// Required by the youtube publisher, refused by the sandbox.
        #[schema(value_type = Option<CredentialsBody>)]
        credentials: Option<Value> = given,
    }
}

/// A property read after the publisher is known: its value when given (null is not).
fn given(value: Option<&Value>) -> Result<Option<Value>, SocialError> {
    Ok(value.filter(|value| !value.is_null()).cloned())
}

/// What the sandbox does with a connection's posts (succeed by default); the sandbox
/// publisher's only.
fn sandbox_behavior(value: Option<Value>, publisher: PublisherKind) -> Result<SandboxBehavior, SocialError> {
    match value {
        None => Ok(SandboxBehavior::Succeed),
        Some(_) if publisher != PublisherKind::Sandbox => {
            Err(invalid("sandbox_behavior applies to the sandbox publisher only"))
        }
        Some(Value::String(text)) => match text.as_str() {
            "succeed" => Ok(SandboxBehavior::Succeed),
            "fail" => Ok(SandboxBehavior::Fail),
            "async" => Ok(SandboxBehavior::Async),
            _ => Err(invalid(format!("sandbox_behavior must be succeed, fail or async, got {}", json::quoted(&text)))),
        },
        Some(_) => Err(invalid("sandbox_behavior must be a string")),
    }
}

/// Parses `POST /social/connections`: the body, then the rules between its fields.
pub fn new_connection(body: &Map<String, Value>) -> Result<NewConnection, SocialError> {
    let body = ConnectionBody::parse(body)?;
    let publisher = body.publisher.unwrap_or(PublisherKind::Sandbox);
    if publisher == PublisherKind::Youtube && body.platform != Platform::Youtube {
        return Err(invalid("publisher: youtube publishes to the youtube platform only"));
    }
    let sandbox_behavior = sandbox_behavior(body.sandbox_behavior, publisher)?;
    Ok(NewConnection {
        platform: body.platform,
        account_name: body.account_name,
        account_username: body.account_username,
        profile_url: body.profile_url,
        requires_approval: body.requires_approval.unwrap_or(false),
        publisher,
        sandbox_behavior,
        credentials: credentials(body.credentials, publisher)?,
    })
}

/// A youtube connection's OAuth `credentials`, as stored: an access token, and a refresh
/// token only with the client that issued it.
fn credentials(
    credentials: Option<Value>,
    publisher: PublisherKind,
) -> Result<Option<Map<String, Value>>, SocialError> {
    let fields = match (credentials, publisher) {
        (None, PublisherKind::Sandbox) => return Ok(None),
        (None, PublisherKind::Youtube) => {
            return Err(invalid("credentials is required for the youtube publisher: {access_token}"))
        }
        (Some(_), PublisherKind::Sandbox) => return Err(invalid("credentials apply to the youtube publisher only")),
        (Some(Value::Object(fields)), PublisherKind::Youtube) => fields,
        (Some(_), PublisherKind::Youtube) => return Err(invalid("credentials must be an object")),
    };
    let CredentialsBody { access_token, refresh_token, client_id, client_secret } =
        CredentialsBody::parse_at("credentials", &fields)?;
    if refresh_token.is_some() && (client_id.is_none() || client_secret.is_none()) {
        return Err(invalid(
            "credentials.refresh_token needs credentials.client_id and credentials.client_secret (the OAuth client \
             that issued it), to refresh the access token with",
        ));
    }
    let mut stored = Map::new();
    stored.insert("access_token".into(), Value::String(access_token));
    let optional = [("refresh_token", refresh_token), ("client_id", client_id), ("client_secret", client_secret)];
    for (field, value) in optional {
        if let Some(value) = value {
            stored.insert(field.into(), Value::String(value));
        }
    }
    Ok(Some(stored))
}

crate::closed_body! {
    /// A destination of a new post.
    #[schema(as = PostDestinationRef)]
    pub struct DestinationBody -> SocialError, at at {
        /// A connection of the organization.
        #[schema(value_type = uuid::Uuid)]
        social_connection_id: SocialConnectionId = |value: Option<&Value>| {
            let field = format!("{at}.social_connection_id");
            match value {
                Some(Value::String(text)) => SocialConnectionId::parse(text)
                    .ok_or_else(|| invalid(format!("{field} must be a UUID, got {}", json::quoted(text)))),
                Some(Value::Null) | None => Err(invalid(format!("{field} is required"))),
                Some(_) => Err(invalid(format!("{field} must be a string"))),
            }
        },
    }
}

crate::closed_body! {
    /// `POST /social/post`
    #[schema(as = CreateSocialPost)]
    pub struct PostBody -> SocialError {
        /// At most what every destination's platform takes (x 280, linkedin 3000, instagram
        /// and tiktok 2200, facebook and youtube 5000 characters).
        #[schema(min_length = 1, max_length = 5000)]
        description: String = |value| text_field(value, "description", MAX_DESCRIPTION_CHARS),
        /// 1 to 10 connections, each once.
        #[schema(min_items = 1, max_items = 10)]
        destinations: Vec<DestinationBody> = destinations,
        /// 1 to 10 http(s) URLs of videos (MP4, MOV, WebM) or pictures (PNG, JPEG, WebP), at
        /// most 512 MB each, within each destination's limits; the service's own signed
        /// links are read from its store.
        #[schema(min_items = 1, max_items = 10)]
        media_urls: Vec<String> = media_urls,
        /// A future time (within a year) to publish at; now when left out.
        scheduled_at: Option<Timestamp> = |value: Option<&Value>| match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => {
                let at = chrono::DateTime::parse_from_rfc3339(text).map_err(|_| {
                    invalid(format!(
                        "scheduled_at must be an ISO 8601 time such as 2030-01-01T09:00:00Z, got {}",
                        json::quoted(text)
                    ))
                })?;
                Ok(Some(Timestamp::from_datetime(at.with_timezone(&chrono::Utc))))
            }
            Some(_) => Err(invalid("scheduled_at must be a string")),
        },
    }
}

/// A post's destinations: 1 to [`MAX_DESTINATIONS`] connections, each once.
fn destinations(value: Option<&Value>) -> Result<Vec<DestinationBody>, SocialError> {
    let items = match value {
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
    let mut destinations: Vec<DestinationBody> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let at = format!("destinations[{index}]");
        let Value::Object(item) = item else {
            return Err(invalid(format!("{at} must be an object {{social_connection_id}}")));
        };
        let destination = DestinationBody::parse_at(&at, item)?;
        let id = destination.social_connection_id;
        if destinations.iter().any(|known| known.social_connection_id == id) {
            return Err(invalid(format!("{at}.social_connection_id: connection {id} is named twice")));
        }
        destinations.push(destination);
    }
    Ok(destinations)
}

/// A post's media: 1 to [`MAX_MEDIA`] http(s) URLs.
fn media_urls(value: Option<&Value>) -> Result<Vec<String>, SocialError> {
    let media = match value {
        Some(Value::Array(items)) if items.is_empty() => return Err(invalid("media_urls must hold at least one URL")),
        Some(Value::Array(items)) if items.len() > MAX_MEDIA => {
            return Err(invalid(format!("media_urls may hold at most {MAX_MEDIA} URLs")))
        }
        Some(Value::Array(items)) => items,
        Some(Value::Null) | None => return Err(invalid("media_urls is required")),
        Some(_) => return Err(invalid("media_urls must be an array")),
    };
    media
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let field = format!("media_urls[{index}]");
            let Value::String(url) = item else { return Err(invalid(format!("{field} must be a string"))) };
            check_url(url, &field)?;
            Ok(url.clone())
        })
        .collect()
}

/// Parses `POST /social/post`; `now` bounds `scheduled_at`.
pub fn new_post(body: &Map<String, Value>, now: Timestamp) -> Result<NewPost, SocialError> {
    let PostBody { description, destinations, media_urls, scheduled_at } = PostBody::parse(body)?;
    if let Some(at) = scheduled_at {
        if at < now {
            return Err(invalid(format!("scheduled_at {at} is in the past (now is {now})")));
        }
        if at > now.after(MAX_SCHEDULE_AHEAD) {
            return Err(invalid(format!("scheduled_at {at} is more than a year ahead")));
        }
    }
    let destinations = destinations.into_iter().map(|destination| destination.social_connection_id).collect();
    Ok(NewPost { description, destinations, media_urls, scheduled_at })
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
            // Credentials given to the sandbox are refused for that, whatever they hold.
            (
                json!({"platform": "x", "account_name": "a", "account_username": "b", "profile_url": "https://x.test",
                    "credentials": {}}),
                "credentials apply to the youtube publisher only",
            ),
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
