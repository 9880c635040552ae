//! The local social sandbox: the publishing port played by the service itself (its
//! post pages are `serve::social_sandbox`), the default publisher.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::domain::media::ports::BlobStore;
use crate::domain::social::publisher::{MediumFile, Published, Publisher};
use crate::domain::social::{SandboxBehavior, SocialConnection, SocialPost};

/// The local sandbox: it keeps a copy of each medium under `social-sandbox/` and answers
/// post URLs `{public_url}/sandbox/social/{organization}/{post}/{connection}`, a page
/// `serve` shows. Each connection says what it does ([`SandboxBehavior`]): post, fail,
/// or accept and finish when asked about the post again.
pub struct SandboxPublisher {
    pub public_url: String,
    pub blobs: Arc<dyn BlobStore>,
}

/// Where the sandbox's post pages are.
pub const SANDBOX_PATH_PREFIX: &str = "/sandbox/social/";

impl SandboxPublisher {
    fn url(&self, post: &SocialPost, connection: &SocialConnection) -> String {
        let base = self.public_url.trim_end_matches('/');
        format!("{base}{SANDBOX_PATH_PREFIX}{}/{}/{}", post.organization_id, post.id, connection.id)
    }

    fn platform_post_id(post: &SocialPost, connection: &SocialConnection) -> String {
        format!("sandbox-{}-{}", post.id, connection.id)
    }
}

#[async_trait]
impl Publisher for SandboxPublisher {
    async fn publish(
        &self,
        post: &SocialPost,
        connection: &SocialConnection,
        _credentials: Option<&Map<String, Value>>,
        media: &[MediumFile],
    ) -> anyhow::Result<Published> {
        if connection.sandbox_behavior == SandboxBehavior::Fail {
            return Ok(Published::Failed(format!(
                "the sandbox refused the post: connection {} is set to fail (sandbox_behavior: fail)",
                connection.id
            )));
        }
        for (index, medium) in media.iter().enumerate() {
            let key = sandbox_key(post, connection, index);
            self.blobs.put_file(&key, std::path::Path::new(&medium.path), &medium.content_type).await?;
        }
        let platform_post_id = Self::platform_post_id(post, connection);
        Ok(match connection.sandbox_behavior {
            SandboxBehavior::Async => Published::Accepted { platform_post_id },
            _ => Published::Posted { platform_post_id, post_url: self.url(post, connection) },
        })
    }

    async fn status(
        &self,
        post: &SocialPost,
        connection: &SocialConnection,
        _credentials: Option<&Map<String, Value>>,
        platform_post_id: &str,
    ) -> anyhow::Result<Published> {
        // Asked again: an accepted post is finished now.
        Ok(Published::Posted { platform_post_id: platform_post_id.to_owned(), post_url: self.url(post, connection) })
    }
}

/// The sandbox's copy of medium `index` of a post to a connection.
pub fn sandbox_key(post: &SocialPost, connection: &SocialConnection, index: usize) -> String {
    format!("social-sandbox/{}/{}/{}/{index}", post.organization_id, post.id, connection.id)
}
