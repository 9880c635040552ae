//! What a media ID points at, and the signed links that reach it: the records and links
//! every context that makes or shows media shares (runs, avatars, social).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::signing::{SignatureError, UrlSigner};
use crate::domain::ids::{MediaId, OrganizationId, RunId};
use crate::domain::time::Timestamp;

/// How long a link handed out stays valid.
pub const LINK_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// The path under which links are answered.
pub const MEDIA_PATH_PREFIX: &str = "/media/";

/// Signs and checks media links.
#[derive(Clone, Debug)]
pub struct MediaLinks {
    signer: UrlSigner,
    public_url: String,
}

impl MediaLinks {
    pub fn new(secret: &[u8], public_url: &str) -> Self {
        Self { signer: UrlSigner::new(secret), public_url: public_url.trim_end_matches('/').to_owned() }
    }

    /// The address links start with (empty: the request's host, on Lambda).
    pub fn public_url(&self) -> &str {
        &self.public_url
    }

    /// These links, starting with `https://{host}` when no public address was
    /// configured (a Lambda function learns its API's address from the request: the
    /// template cannot give it without a dependency cycle).
    pub fn for_host(&self, host: Option<&str>) -> Self {
        match host {
            Some(host) if self.public_url.is_empty() => {
                Self { signer: self.signer.clone(), public_url: format!("https://{host}") }
            }
            _ => self.clone(),
        }
    }

    fn path(id: MediaId) -> String {
        format!("{MEDIA_PATH_PREFIX}{id}")
    }

    /// A link to the media valid for [`LINK_TTL`] from `now`.
    pub fn link(&self, id: MediaId, now: Timestamp) -> String {
        let path = Self::path(id);
        format!("{}{path}?{}", self.public_url, self.signer.query("GET", &path, now.after(LINK_TTL).unix_seconds()))
    }

    /// Checks a link's `expires` and `signature` query values.
    pub fn verify(&self, id: MediaId, expires: &str, signature: &str, now: Timestamp) -> Result<(), SignatureError> {
        self.signer.verify("GET", &Self::path(id), expires, signature, now.unix_seconds())
    }
}

/// What a media ID points at, for links and for later runs' `node_render_ids`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MediaRecord {
    pub id: MediaId,
    pub organization_id: OrganizationId,
    pub run_id: RunId,
    pub kind: MediaKind,
    pub key: String,
    /// The object version to serve (the stored file's version).
    pub version: Option<String>,
    pub content_type: String,
    pub duration_ms: Option<u64>,
    pub created_at: Timestamp,
}

/// What kind of file a media record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    /// A run output: usable as `node_render_ids`.
    Render,
    Thumbnail,
    /// A run's (clipped) input, or the source it was bound to (a video, or an uploaded
    /// sound or picture a node uses).
    Input,
    /// An output's timeline project (a zip).
    Timeline,
    /// An avatar profile's preview (its `run_id` is the profile's ID).
    Preview,
}

impl MediaKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Render => "render",
            Self::Thumbnail => "thumbnail",
            Self::Input => "input",
            Self::Timeline => "timeline",
            Self::Preview => "preview",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Render, Self::Thumbnail, Self::Input, Self::Timeline, Self::Preview]
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}
