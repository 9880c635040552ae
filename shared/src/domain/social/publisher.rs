//! What publishing needs from the outside world: a [`Publisher`] per kind of connection
//! (the local sandbox in `adapters::sandbox_social`, YouTube in `adapters::youtube`), and
//! a [`CredentialVault`] where connections' credentials are kept (`adapters::inline_vault`
//! locally, Secrets Manager on AWS).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::{PublisherKind, SocialConnection, SocialPost};

/// A medium handed to a publisher: a local copy of a stored medium of the post.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediumFile {
    /// The file's path (in the publishing attempt's scratch folder).
    pub path: std::path::PathBuf,
    pub content_type: String,
    pub bytes: u64,
}

/// What a publisher said of one destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Published {
    /// Live on the platform.
    Posted { platform_post_id: String, post_url: String },
    /// Accepted; the platform is still working on it (ask again with
    /// [`Publisher::status`]).
    Accepted { platform_post_id: String },
    /// Refused by the platform, for this reason (final).
    Failed(String),
}

/// What a publisher made of a connection's credentials before publishing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refreshed {
    /// Good as they are.
    Current,
    /// Refreshed (a new access token): keep these in the vault and publish with them.
    New(Map<String, Value>),
    /// The platform refused to refresh them, for this reason (final for the destination).
    Refused(String),
}

/// Posts to one kind of platform account. An `Err` is a failure of ours or a transient
/// one (tried again later); [`Published::Failed`] is the platform's final word.
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Publishes `post`'s media and description to `connection`, whose credentials (when
    /// it has any) are `credentials`.
    async fn publish(
        &self,
        post: &SocialPost,
        connection: &SocialConnection,
        credentials: Option<&Map<String, Value>>,
        media: &[MediumFile],
    ) -> anyhow::Result<Published>;

    /// Refreshes `credentials` when they have run out (or are about to) at `now` and can
    /// be refreshed; the default keeps them as they are.
    async fn refresh(
        &self,
        _credentials: Option<&Map<String, Value>>,
        _now: crate::domain::time::Timestamp,
    ) -> anyhow::Result<Refreshed> {
        Ok(Refreshed::Current)
    }

    /// Where an accepted publication is now.
    async fn status(
        &self,
        post: &SocialPost,
        connection: &SocialConnection,
        credentials: Option<&Map<String, Value>>,
        platform_post_id: &str,
    ) -> anyhow::Result<Published>;
}

/// The publisher of each kind of connection.
#[derive(Clone)]
pub struct Publishers {
    pub sandbox: Arc<dyn Publisher>,
    pub youtube: Arc<dyn Publisher>,
}

impl Publishers {
    /// The publisher of `kind`.
    pub fn of(&self, kind: PublisherKind) -> &dyn Publisher {
        match kind {
            PublisherKind::Sandbox => self.sandbox.as_ref(),
            PublisherKind::Youtube => self.youtube.as_ref(),
        }
    }
}

/// Where connections' credentials are kept: `put` answers the reference stored with the
/// connection, `get` reads them back. Credentials are never shown by the API.
#[async_trait]
pub trait CredentialVault: Send + Sync {
    /// Keeps `credentials` of connection `name` (unique); answers their reference.
    async fn put(&self, name: &str, credentials: &Map<String, Value>) -> anyhow::Result<String>;
    /// The credentials of a reference `put` answered.
    async fn get(&self, reference: &str) -> anyhow::Result<Map<String, Value>>;
    /// Keeps `credentials` in place of those of `reference`; answers their reference
    /// (the same one, unless the vault keeps credentials in the reference itself).
    async fn replace(&self, reference: &str, credentials: &Map<String, Value>) -> anyhow::Result<String>;
    /// Deletes the credentials of `reference` for good; done when they are gone already.
    async fn delete(&self, reference: &str) -> anyhow::Result<()>;
}
