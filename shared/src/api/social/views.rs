//! The social endpoints' answers: the types the handlers serialize and the OpenAPI
//! document describes (the enums are the domain's own, with their schemas).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::domain::media::MediaLinks;
use crate::domain::social::{self, Platform as SocialPlatform, PostStatus as SocialPostStatus, PublisherKind};
use crate::domain::social::{PublisherKind as SocialPublisher, ResultStatus as DestinationStatus, SandboxBehavior};
use crate::domain::time::Timestamp;

/// A connected social account.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SocialConnection {
    pub social_connection_id: Uuid,
    pub platform: SocialPlatform,
    pub account_name: String,
    pub account_username: String,
    pub profile_url: String,
    pub requires_approval: bool,
    pub publisher: SocialPublisher,
    /// Null for the youtube publisher.
    #[schema(required = true)]
    pub sandbox_behavior: Option<SandboxBehavior>,
    pub created_at: Timestamp,
}

/// `GET /social/connections`: the organization's connections, oldest first.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SocialConnectionList {
    pub social_connections: Vec<SocialConnection>,
}

/// A destination of a post: the account as it was when the post was made.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostDestination {
    pub social_connection_id: Uuid,
    pub platform: SocialPlatform,
    pub account_name: String,
    pub account_username: String,
    pub profile_url: String,
}

/// Where a post went.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostLink {
    pub platform: SocialPlatform,
    pub post_url: String,
    pub social_connection_id: Uuid,
}

/// What became of one destination.
#[derive(Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DestinationResult {
    pub social_connection_id: Uuid,
    pub platform: SocialPlatform,
    pub status: DestinationStatus,
    #[schema(required = true)]
    pub platform_post_id: Option<String>,
    #[schema(required = true)]
    pub post_url: Option<String>,
    /// Why it failed; null otherwise.
    #[schema(required = true)]
    pub message: Option<String>,
}

/// A social post.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SocialPost {
    pub post_id: Uuid,
    pub status: SocialPostStatus,
    pub description: String,
    /// Signed, valid 7 days: a JPEG of the first medium.
    pub thumbnail_url: String,
    /// When it is (or was) published; its creation time when it was not scheduled.
    pub scheduled_at: Timestamp,
    pub platforms: Vec<SocialPlatform>,
    pub destinations: Vec<PostDestination>,
    /// One per destination posted; empty when nothing is posted.
    pub links: Vec<PostLink>,
    pub results: Vec<DestinationResult>,
    /// The same as `results`.
    pub destination_results: Vec<DestinationResult>,
    #[schema(required = true)]
    pub error: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The pagination of the post list.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostPagination {
    pub limit: u32,
    pub returned: u32,
    pub has_more: bool,
    /// Opaque; null when there are no more posts.
    #[schema(required = true)]
    pub next_cursor: Option<String>,
    /// Always `created_at_desc`.
    pub sort: String,
}

/// `GET /social/posts`: one page, newest first, as stored (not refreshed).
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SocialPostPage {
    pub posts: Vec<SocialPost>,
    pub pagination: PostPagination,
}

impl From<&social::SocialConnection> for SocialConnection {
    /// A connection as the API shows it (never its credentials).
    fn from(connection: &social::SocialConnection) -> Self {
        Self {
            social_connection_id: connection.id.as_uuid(),
            platform: connection.platform,
            account_name: connection.account_name.clone(),
            account_username: connection.account_username.clone(),
            profile_url: connection.profile_url.clone(),
            requires_approval: connection.requires_approval,
            publisher: connection.publisher,
            sandbox_behavior: match connection.publisher {
                PublisherKind::Sandbox => Some(connection.sandbox_behavior),
                PublisherKind::Youtube => None,
            },
            created_at: connection.created_at,
        }
    }
}

impl From<&social::DestinationResult> for DestinationResult {
    fn from(result: &social::DestinationResult) -> Self {
        Self {
            social_connection_id: result.social_connection_id.as_uuid(),
            platform: result.platform,
            status: result.status,
            platform_post_id: result.platform_post_id.clone(),
            post_url: result.post_url.clone(),
            message: result.message.clone(),
        }
    }
}

impl SocialPost {
    /// A post as the API shows it, its thumbnail's link valid 7 days from `now`.
    pub fn new(post: &social::SocialPost, links: &MediaLinks, now: Timestamp) -> Self {
        let results: Vec<DestinationResult> = post.results.iter().map(DestinationResult::from).collect();
        let posted = post.results.iter().filter(|result| result.status == DestinationStatus::Success);
        let links_view = posted
            .filter_map(|result| {
                let post_url = result.post_url.clone()?;
                Some(PostLink {
                    platform: result.platform,
                    post_url,
                    social_connection_id: result.social_connection_id.as_uuid(),
                })
            })
            .collect();
        let destinations = post
            .destinations
            .iter()
            .map(|destination| {
                let connection = &destination.connection;
                PostDestination {
                    social_connection_id: connection.id.as_uuid(),
                    platform: connection.platform,
                    account_name: connection.account_name.clone(),
                    account_username: connection.account_username.clone(),
                    profile_url: connection.profile_url.clone(),
                }
            })
            .collect();
        Self {
            post_id: post.id.as_uuid(),
            status: post.status,
            description: post.description.clone(),
            thumbnail_url: links.link(post.thumbnail, now),
            scheduled_at: post.scheduled_at,
            platforms: post.platforms(),
            destinations,
            links: links_view,
            destination_results: results.clone(),
            results,
            error: post.error.clone(),
            created_at: post.created_at,
            updated_at: post.updated_at,
        }
    }
}
