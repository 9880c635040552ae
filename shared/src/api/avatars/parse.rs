//! Parsing the bodies and queries of the avatar endpoints at the edge, into the domain's
//! typed requests: every refusal names the field.

use serde_json::{Map, Value};

use crate::core::json;
use crate::domain::avatars::{AvatarError, AvatarSource, AvatarSources, ListPage, NewAvatar};
use crate::domain::avatars::{CURSOR_LIST, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, MAX_NAME_CHARS};
use crate::domain::ids::{AvatarProfileId, UploadId};
use crate::domain::uploads::UploadKind;

/// Longest URL source.
const MAX_URL_CHARS: usize = 2_048;

/// A property outside a body's declaration is a 400 `{ detail }`.
impl json::Refusal for AvatarError {
    fn unknown_property(message: String) -> Self {
        AvatarError::Invalid(message)
    }
}

crate::closed_body! {
    /// The sources of a new avatar: a video source (`video_url` or `video_id`), or an image
    /// source and an audio source. Video and voice recordings are 4 to 15 seconds long. Null
    /// is the same as leaving a property out.
    #[schema(as = AvatarSources)]
    pub struct SourcesBody -> AvatarError {
        /// An http(s) URL, fetched when the profile is processed and stored as an upload.
        #[schema(value_type = Option<String>, format = "uri", max_length = 2048)]
        video_url: Option<AvatarSource> = |value| url_source(value, "video_url"),
        /// A ready video upload of the organization.
        #[schema(value_type = Option<uuid::Uuid>)]
        video_id: Option<AvatarSource> = |value| upload_source(value, "video_id"),
        #[schema(value_type = Option<String>, format = "uri", max_length = 2048)]
        image_url: Option<AvatarSource> = |value| url_source(value, "image_url"),
        #[schema(value_type = Option<uuid::Uuid>)]
        image_id: Option<AvatarSource> = |value| upload_source(value, "image_id"),
        #[schema(value_type = Option<String>, format = "uri", max_length = 2048)]
        audio_url: Option<AvatarSource> = |value| url_source(value, "audio_url"),
        #[schema(value_type = Option<uuid::Uuid>)]
        audio_id: Option<AvatarSource> = |value| upload_source(value, "audio_id"),
    }
}

crate::closed_body! {
    /// `POST /avatar-profiles/create`
    #[schema(as = CreateAvatarProfile)]
    pub struct CreateBody -> AvatarError {
        /// Unique in the workspace (compared trimmed, ignoring case).
        #[schema(min_length = 1, max_length = 200)]
        name: String = avatar_name,
        sources: SourcesBody = |value: Option<&Value>| match value {
            Some(Value::Object(sources)) => SourcesBody::parse_at("sources", sources),
            Some(_) => Err(AvatarError::Invalid("sources must be an object".into())),
            None => Err(AvatarError::Invalid("sources is required".into())),
        },
    }
}

/// The trimmed name: 1 to [`MAX_NAME_CHARS`] characters.
fn avatar_name(value: Option<&Value>) -> Result<String, AvatarError> {
    let name = match value {
        Some(Value::String(name)) => name.trim().to_owned(),
        Some(_) => return Err(AvatarError::Invalid("name must be a string".into())),
        None => return Err(AvatarError::Invalid("name is required".into())),
    };
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME_CHARS {
        return Err(AvatarError::Invalid(format!(
            "name must be 1 to {MAX_NAME_CHARS} characters after trimming, got {chars}"
        )));
    }
    Ok(name)
}

/// A URL source of `sources`: null is none.
fn url_source(value: Option<&Value>, field: &str) -> Result<Option<AvatarSource>, AvatarError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => {
            check_url(text, &format!("sources.{field}")).map_err(AvatarError::Invalid)?;
            Ok(Some(AvatarSource::Url { url: text.clone() }))
        }
        Some(_) => Err(AvatarError::Invalid(format!("sources.{field} must be a string or null"))),
    }
}

/// An upload source of `sources`: null is none.
fn upload_source(value: Option<&Value>, field: &str) -> Result<Option<AvatarSource>, AvatarError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => match UploadId::parse(text) {
            Some(id) => Ok(Some(AvatarSource::Upload { id })),
            None => Err(AvatarError::Invalid(format!("sources.{field} must be a UUID, got {}", json::quoted(text)))),
        },
        Some(_) => Err(AvatarError::Invalid(format!("sources.{field} must be a string or null"))),
    }
}

/// Parses a create body `{name, sources}`: every refusal names the field.
pub fn new_avatar(body: &Map<String, Value>) -> Result<NewAvatar, AvatarError> {
    let CreateBody { name, sources } = CreateBody::parse(body)?;
    let invalid = |message: String| AvatarError::Invalid(message);
    let mut parsed = AvatarSources::default();
    let given = [
        (UploadKind::Video, sources.video_url, sources.video_id),
        (UploadKind::Image, sources.image_url, sources.image_id),
        (UploadKind::Audio, sources.audio_url, sources.audio_id),
    ];
    for (kind, url, id) in given {
        let slot = match kind {
            UploadKind::Video => &mut parsed.video,
            UploadKind::Image => &mut parsed.image,
            UploadKind::Audio => &mut parsed.audio,
        };
        *slot = match (url, id) {
            (Some(_), Some(_)) => {
                let kind = kind.as_str();
                return Err(invalid(format!("sources: give one of {kind}_url and {kind}_id, not both")));
            }
            (url, id) => url.or(id),
        };
    }
    match (&parsed.video, &parsed.image, &parsed.audio) {
        (Some(_), None, None) | (None, Some(_), Some(_)) => Ok(NewAvatar { name, sources: parsed }),
        (Some(_), _, _) => Err(invalid(
            "sources: give either a video source (video_url or video_id) or an image source and an audio source, \
             not both"
                .into(),
        )),
        (None, Some(_), None) => {
            Err(invalid("sources: an image source needs an audio source (audio_url or audio_id)".into()))
        }
        (None, None, Some(_)) => {
            Err(invalid("sources: an audio source needs an image source (image_url or image_id)".into()))
        }
        (None, None, None) => Err(invalid(
            "sources: give a video source (video_url or video_id), or an image source and an audio source".into(),
        )),
    }
}

/// An http(s) URL of bounded length, or why not.
fn check_url(text: &str, field: &str) -> Result<(), String> {
    if text.chars().count() > MAX_URL_CHARS {
        return Err(format!("{field} must be at most {MAX_URL_CHARS} characters"));
    }
    match url::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(|host| !host.is_empty()) => {
            Ok(())
        }
        _ => Err(format!("{field} must be an http:// or https:// URL, got {}", json::quoted(text))),
    }
}

/// The `limit` and `cursor` query parameters of `GET /avatar-profiles` (others are not
/// this list's and are ignored, as the contract names none).
pub fn list_page<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<ListPage, AvatarError> {
    let mut page = ListPage::default();
    for (name, value) in pairs {
        match name {
            "limit" => {
                let limit = value.parse().ok().filter(|limit| (1..=MAX_LIST_LIMIT).contains(limit));
                page.limit = Some(limit.ok_or_else(|| {
                    AvatarError::Invalid(format!(
                        "limit must be an integer from 1 to {MAX_LIST_LIMIT}, got {}",
                        json::quoted(value)
                    ))
                })?);
            }
            "cursor" => {
                let position = crate::core::cursor::decode(CURSOR_LIST, value);
                page.after = Some(position.as_deref().and_then(AvatarProfileId::parse).ok_or_else(|| {
                    AvatarError::Invalid("cursor is not a cursor of this list (use next_cursor as given)".into())
                })?);
            }
            _ => {}
        }
    }
    if page.after.is_some() && page.limit.is_none() {
        page.limit = Some(DEFAULT_LIST_LIMIT);
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(body: Value) -> Result<NewAvatar, String> {
        new_avatar(body.as_object().unwrap()).map_err(|error| error.to_string())
    }

    const ID: &str = "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01";

    #[test]
    fn a_video_or_an_image_and_a_voice() {
        let video = parse(json!({"name": " Ada ", "sources": {"video_id": ID, "image_url": null}})).unwrap();
        assert_eq!(video.name, "Ada");
        assert!(video.sources.video.is_some() && video.sources.image.is_none());
        let pair = parse(json!({"name": "Ada", "sources": {"image_url": "https://x.test/a.png", "audio_id": ID}}));
        assert!(pair.is_ok());
    }

    #[test]
    fn every_refusal_names_its_field() {
        let cases = [
            (json!({"sources": {"video_id": ID}}), "name is required"),
            (json!({"name": "  ", "sources": {"video_id": ID}}), "name must be 1 to 200"),
            (json!({"name": "a".repeat(201), "sources": {"video_id": ID}}), "got 201"),
            (json!({"name": "a", "sources": {"video_id": ID}, "x": 1}), "unknown property: x"),
            (json!({"name": "a", "sources": {"face_url": "https://x.test"}}), "sources: unknown property: face_url"),
            (json!({"name": "a", "sources": {}}), "give a video source"),
            (json!({"name": "a", "sources": {"video_id": ID, "image_id": ID}}), "not both"),
            (
                json!({"name": "a", "sources": {"video_id": ID, "video_url": "https://x.test/v.mp4"}}),
                "one of video_url",
            ),
            (json!({"name": "a", "sources": {"image_id": ID}}), "needs an audio source"),
            (json!({"name": "a", "sources": {"audio_id": ID}}), "needs an image source"),
            (json!({"name": "a", "sources": {"video_id": "nope"}}), "sources.video_id must be a UUID"),
            (json!({"name": "a", "sources": {"video_url": "ftp://x.test/v"}}), "sources.video_url must be an http"),
            (json!({"name": "a", "sources": {"video_url": 3}}), "sources.video_url must be a string or null"),
            (json!({"name": "a", "sources": []}), "sources must be an object"),
        ];
        for (body, expected) in cases {
            let message = parse(body.clone()).unwrap_err();
            assert!(message.contains(expected), "{body}: {message}");
        }
        assert!(parse(json!({"name": "a".repeat(200), "sources": {"video_id": ID}})).is_ok());
    }
}
