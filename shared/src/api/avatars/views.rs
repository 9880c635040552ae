//! The avatar endpoints' answers: the types the handlers serialize and the OpenAPI
//! document describes (the status is the domain's own, with its schema).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::domain::avatars::{self, AvatarStatus};
use crate::domain::media::MediaLinks;
use crate::domain::time::Timestamp;

/// An avatar profile.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AvatarProfile {
    /// Passed as `avatar_profile_id` in an AI Avatar node.
    pub id: Uuid,
    /// Signed, valid 7 days: the first seconds of the avatar, 480 px wide. Null until
    /// processing made it.
    #[schema(required = true)]
    pub video_preview_url: Option<String>,
    pub name: String,
    pub status: AvatarStatus,
    /// Why processing failed; null otherwise.
    #[schema(required = true)]
    pub status_message: Option<String>,
}

/// `GET /avatar-profiles`: the profiles of the organization's primary workspace, newest first.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AvatarProfileList {
    pub avatar_profiles: Vec<AvatarProfile>,
    /// Given when `limit` was: the `cursor` of the next page, null after the last.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub next_cursor: Option<Option<String>>,
}

impl AvatarProfile {
    /// A profile as the API shows it, its preview's link valid 7 days from `now`.
    pub fn new(profile: &avatars::AvatarProfile, links: &MediaLinks, now: Timestamp) -> Self {
        let preview = profile.reference.as_ref().and_then(|reference| reference.preview);
        Self {
            id: profile.id.as_uuid(),
            video_preview_url: preview.map(|id| links.link(id, now)),
            name: profile.name.clone(),
            status: profile.status,
            status_message: profile.status_message.clone(),
        }
    }
}
