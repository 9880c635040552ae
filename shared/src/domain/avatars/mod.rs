//! Avatar profiles: a reusable person an AI Avatar node speaks as, made from a video of
//! them, or a picture of them and a recording of their voice. Created `pending` in the
//! organization's primary workspace, then processed by a queued task (`processing →
//! ready | failed`): the sources are fetched, probed and checked (length, streams,
//! audible speech) and a short preview is made.

pub mod processing;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::identity::IdentityRepo;
use super::time::{Clock, Timestamp};
use super::uploads::{Upload, UploadKind, UploadRepo, UploadStatus};
use super::work::Work;
use super::workspaces::{ensure_primary, find_primary};
use crate::core::queue::Queue;
use crate::core::retry::AVATAR_CONFLICTS;
use crate::core::versioned::{self, Changed, Edit};
pub use crate::domain::ids::AvatarProfileId;
use crate::domain::ids::MediaId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::UploadId;
use crate::domain::ids::WorkspaceId;
use crate::domain::media::MediaRecord;
use crate::domain::rejection::{DomainError, Rejection};

/// Longest avatar name, in characters (the contract's limit).
pub const MAX_NAME_CHARS: usize = 200;
/// Shortest video or voice recording an avatar is made from.
pub const MIN_SOURCE_MS: u64 = 4_000;
/// Longest video or voice recording an avatar is made from.
pub const MAX_SOURCE_MS: u64 = 15_000;

/// An avatar profile's state: `ready` means fully prepared; a `failed` one cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AvatarStatus {
    Pending,
    Processing,
    Ready,
    Failed,
}

impl AvatarStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Processing => "processing",
            Self::Ready => "ready",
            Self::Failed => "failed",
        }
    }
}

/// One source of an avatar as given: an upload of this organization, or a URL fetched
/// when the profile is processed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AvatarSource {
    Upload { id: UploadId },
    Url { url: String },
}

/// The sources of an avatar: a video, or a picture and a voice recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AvatarSources {
    pub video: Option<AvatarSource>,
    pub image: Option<AvatarSource>,
    pub audio: Option<AvatarSource>,
}

/// A stored file of a ready avatar: an upload asset (URL sources become uploads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AvatarFile {
    pub upload: UploadId,
    pub key: String,
    pub version: Option<String>,
}

/// What processing found and made: the files a run's avatar is made from, their size,
/// and the preview's link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AvatarReference {
    pub video: Option<AvatarFile>,
    pub image: Option<AvatarFile>,
    pub audio: Option<AvatarFile>,
    /// The picture's size, even, at most 1080 on its long side.
    pub width: u32,
    pub height: u32,
    pub preview: Option<MediaId>,
}

/// An avatar profile as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AvatarProfile {
    pub id: AvatarProfileId,
    pub organization_id: OrganizationId,
    pub workspace_id: WorkspaceId,
    pub name: String,
    pub status: AvatarStatus,
    pub status_message: Option<String>,
    pub sources: AvatarSources,
    pub reference: Option<AvatarReference>,
    /// Processing attempts started (a worker that stopped leaves its attempt behind).
    pub attempts: u32,
    /// While `processing`, the attempt's claim holds until then.
    pub processing_until: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Incremented by every stored change; a write names the version it read.
    pub version: u64,
}

impl AvatarProfile {
    /// The key two names of a workspace may not share: trimmed, case folded.
    pub fn name_key(&self) -> String {
        name_key(&self.name)
    }
}

/// The uniqueness key of an avatar name.
pub fn name_key(name: &str) -> String {
    name.trim().to_lowercase()
}

/// Avatar profiles as stored.
#[async_trait]
pub trait AvatarRepo: Send + Sync {
    /// Stores a new profile; false (nothing stored) when its workspace has a profile of
    /// the same name (case-insensitive), however many creates run at once.
    async fn create_avatar(&self, profile: &AvatarProfile) -> anyhow::Result<bool>;
    /// A profile of the organization.
    async fn get_avatar(
        &self,
        organization: OrganizationId,
        id: AvatarProfileId,
    ) -> anyhow::Result<Option<AvatarProfile>>;
    /// The profiles of a workspace, newest first, after the profile `after` (a cursor),
    /// at most `limit` (every one when None), and whether more follow.
    async fn list_avatars(
        &self,
        organization: OrganizationId,
        workspace: WorkspaceId,
        after: Option<AvatarProfileId>,
        limit: Option<usize>,
    ) -> anyhow::Result<(Vec<AvatarProfile>, bool)>;
    /// Stores `profile` if the stored one is still at `profile.version - 1`, with the
    /// media record of its preview when it has a new one, in one atomic write; false
    /// when another writer came first.
    async fn update_avatar(&self, profile: &AvatarProfile, preview: Option<&MediaRecord>) -> anyhow::Result<bool>;
}

/// A refused create, or a failure of ours.
#[derive(Debug, thiserror::Error)]
pub enum AvatarError {
    /// 400, naming the field.
    #[error("{0}")]
    Invalid(String),
    /// 409.
    #[error("an avatar profile named {0:?} already exists in this workspace")]
    NameTaken(String),
    /// 404.
    #[error("Avatar profile not found")]
    NotFound,
    #[error("avatar storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

impl DomainError for AvatarError {
    fn rejection(self) -> Result<Rejection, anyhow::Error> {
        match self {
            AvatarError::Invalid(_) => Ok(Rejection::Invalid),
            AvatarError::NameTaken(_) => Ok(Rejection::Conflict),
            AvatarError::NotFound => Ok(Rejection::NotFound),
            AvatarError::Backend(cause) => Err(cause),
        }
    }
}

/// What a create asks for, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewAvatar {
    pub name: String,
    pub sources: AvatarSources,
}

/// Checks that every upload source is a ready upload of its kind of the organization
/// (400 naming the field otherwise).
pub async fn check_uploads(
    uploads: &dyn UploadRepo,
    organization: OrganizationId,
    sources: &AvatarSources,
) -> Result<(), AvatarError> {
    let named = [("video_id", UploadKind::Video, &sources.video), ("image_id", UploadKind::Image, &sources.image)];
    let named = named.into_iter().chain([("audio_id", UploadKind::Audio, &sources.audio)]);
    for (field, kind, source) in named {
        let Some(AvatarSource::Upload { id }) = source else { continue };
        match uploads.get_upload(organization, *id).await? {
            Some(Upload { kind: found, status: UploadStatus::Ready, .. }) if found == kind => {}
            Some(Upload { kind: found, .. }) if found != kind => {
                return Err(AvatarError::Invalid(format!(
                    "sources.{field}: {id} is an upload of kind {}, not {}",
                    found.as_str(),
                    kind.as_str()
                )))
            }
            Some(_) => {
                return Err(AvatarError::Invalid(format!(
                    "sources.{field}: upload {id} is not ready (finalize it first)"
                )))
            }
            None => return Err(AvatarError::Invalid(format!("sources.{field}: upload {id} was not found"))),
        }
    }
    Ok(())
}

/// A new profile, `pending`.
pub fn new_profile(
    organization: OrganizationId,
    workspace: WorkspaceId,
    new: NewAvatar,
    now: Timestamp,
) -> AvatarProfile {
    AvatarProfile {
        id: AvatarProfileId::v7_at(now.unix_millis()),
        organization_id: organization,
        workspace_id: workspace,
        name: new.name,
        status: AvatarStatus::Pending,
        status_message: None,
        sources: new.sources,
        reference: None,
        attempts: 0,
        processing_until: None,
        created_at: now,
        updated_at: now,
        version: 0,
    }
}

/// What the avatar endpoints need.
pub struct AvatarPorts<'a> {
    pub avatars: &'a dyn AvatarRepo,
    pub uploads: &'a dyn UploadRepo,
    pub identity: &'a dyn IdentityRepo,
    /// Where processing is queued (the node-task queue).
    pub queue: &'a dyn Queue<Work>,
    pub clock: &'a dyn Clock,
}

/// Creates a profile in the organization's primary workspace and queues its
/// processing. Every refusal creates nothing.
pub async fn create(
    ports: &AvatarPorts<'_>,
    organization: OrganizationId,
    new: NewAvatar,
) -> Result<AvatarProfile, AvatarError> {
    check_uploads(ports.uploads, organization, &new.sources).await?;
    let now = ports.clock.now();
    let workspace = ensure_primary(ports.identity, organization, now).await?;
    let profile = new_profile(organization, workspace.id, new, now);
    if !ports.avatars.create_avatar(&profile).await? {
        return Err(AvatarError::NameTaken(profile.name));
    }
    if let Err(error) =
        ports.queue.send(&[Work::ProcessAvatar { organization_id: organization, avatar_id: profile.id }]).await
    {
        tracing::error!(avatar = %profile.id, error = %format!("{error:#}"), "avatar processing could not be queued");
        if let Some(failed) = unqueued(ports.avatars, &profile, now).await? {
            return Ok(failed);
        }
    }
    tracing::info!(avatar = %profile.id, "avatar profile created");
    Ok(profile)
}

/// Most profiles one page of `GET /avatar-profiles` shows.
pub const MAX_LIST_LIMIT: usize = 100;
/// Profiles per page when a `cursor` is given without a `limit`.
pub const DEFAULT_LIST_LIMIT: usize = 20;
/// The name of the avatar list's cursors.
pub const CURSOR_LIST: &str = "avatar_profiles";

/// Which profiles a list shows: every one (no `limit` nor `cursor`, as the contract's
/// list), or a page of `limit` after `cursor`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    pub limit: Option<usize>,
    pub after: Option<AvatarProfileId>,
}

impl ListPage {
    /// Whether the caller asked for pages (the answer then has `next_cursor`).
    pub fn paged(&self) -> bool {
        self.limit.is_some()
    }
}

/// The profiles of the organization's primary workspace, newest first: the page asked
/// for, and the cursor of the next one when more follow.
pub async fn list(
    avatars: &dyn AvatarRepo,
    identity: &dyn IdentityRepo,
    organization: OrganizationId,
    page: &ListPage,
) -> Result<(Vec<AvatarProfile>, Option<String>), AvatarError> {
    // An organization without a primary workspace has no profiles yet (a create makes it).
    let Some(workspace) = find_primary(identity, organization).await? else { return Ok((Vec::new(), None)) };
    let (profiles, more) = avatars.list_avatars(organization, workspace.id, page.after, page.limit).await?;
    let next =
        profiles.last().filter(|_| more).map(|last| crate::core::cursor::encode(CURSOR_LIST, &last.id.to_string()));
    Ok((profiles, next))
}

/// A profile of the organization by its ID as given (not a UUID: not found).
pub async fn get(
    avatars: &dyn AvatarRepo,
    organization: OrganizationId,
    id: &str,
) -> Result<AvatarProfile, AvatarError> {
    let id = AvatarProfileId::parse(id).ok_or(AvatarError::NotFound)?;
    avatars.get_avatar(organization, id).await?.ok_or(AvatarError::NotFound)
}

/// What a change of a profile wrote: the profile as stored; or, when it wrote nothing,
/// why (see [`Kept`]).
type ProfileChange = Changed<AvatarProfile, (), Kept>;

/// Why a change of a profile wrote nothing.
#[derive(Debug)]
enum Kept {
    /// The edit left the profile as it was.
    Unchanged,
    /// A claim holds the profile until then.
    Held(Timestamp),
}

/// Reads the profile, applies `edit` and stores it under its version, again when another
/// writer came first ([`AVATAR_CONFLICTS`]). `edit` answers Ok(None) to leave it,
/// Err(until) when a claim holds it.
async fn change(
    avatars: &dyn AvatarRepo,
    organization: OrganizationId,
    id: AvatarProfileId,
    edit: impl Fn(&mut AvatarProfile) -> Result<Option<()>, Timestamp> + Send,
) -> Result<ProfileChange, AvatarError> {
    change_with(avatars, organization, id, None, edit).await
}

/// [`change`], storing `preview` (the profile's preview video) with the profile.
async fn change_with(
    avatars: &dyn AvatarRepo,
    organization: OrganizationId,
    id: AvatarProfileId,
    preview: Option<&MediaRecord>,
    edit: impl Fn(&mut AvatarProfile) -> Result<Option<()>, Timestamp> + Send,
) -> Result<ProfileChange, AvatarError> {
    let mut change = EditProfile { avatars, organization, id, preview, edit };
    versioned::change(&AVATAR_CONFLICTS, format!("avatar profile {id}"), &mut change).await
}

/// A change of one profile, by its `edit`.
struct EditProfile<'a, F> {
    avatars: &'a dyn AvatarRepo,
    organization: OrganizationId,
    id: AvatarProfileId,
    preview: Option<&'a MediaRecord>,
    edit: F,
}

#[async_trait]
impl<F> versioned::Change for EditProfile<'_, F>
where
    F: Fn(&mut AvatarProfile) -> Result<Option<()>, Timestamp> + Send,
{
    type Record = AvatarProfile;
    type Write = AvatarProfile;
    type Landed = ();
    type Kept = Kept;
    type Error = AvatarError;

    async fn read(&mut self) -> Result<Option<AvatarProfile>, AvatarError> {
        Ok(self.avatars.get_avatar(self.organization, self.id).await?)
    }

    async fn edit(&mut self, mut profile: AvatarProfile) -> Result<Edit<AvatarProfile, Kept>, AvatarError> {
        Ok(match (self.edit)(&mut profile) {
            Err(until) => Edit::Keep(Kept::Held(until)),
            Ok(None) => Edit::Keep(Kept::Unchanged),
            Ok(Some(())) => {
                profile.version += 1;
                Edit::Write(profile)
            }
        })
    }

    async fn write(&mut self, profile: &mut AvatarProfile) -> Result<Option<()>, AvatarError> {
        Ok(self.avatars.update_avatar(profile, self.preview).await?.then_some(()))
    }
}

/// Marks a profile whose processing could not be queued as failed, saying so.
async fn unqueued(
    avatars: &dyn AvatarRepo,
    profile: &AvatarProfile,
    now: Timestamp,
) -> Result<Option<AvatarProfile>, AvatarError> {
    let changed = change(avatars, profile.organization_id, profile.id, |stored| {
        if stored.status != AvatarStatus::Pending {
            return Ok(None);
        }
        stored.status = AvatarStatus::Failed;
        stored.status_message =
            Some("processing could not be queued; create the avatar again under another name".into());
        stored.updated_at = now;
        Ok(Some(()))
    })
    .await?;
    Ok(changed.written())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_compare_trimmed_and_case_folded() {
        assert_eq!(name_key(" Ada Lovelace "), name_key("ada lovelace"));
    }
}
