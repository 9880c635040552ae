//! A generation node's task: its provider makes the media from the node's parameters
//! into the task's scratch folder; the worker then probes and stores it like a render.

use std::path::Path;

use super::Worker;
use super::{Stop, TaskOutput};
use crate::domain::avatars::{AvatarFile, AvatarStatus};
use crate::domain::generation::{AvatarReference, AvatarRequest, GenerationError, SpeechRequest};
use crate::domain::ids::AvatarProfileId;
use crate::domain::media::MediaType;
use crate::domain::nodes::Generation;
use crate::domain::runs::{NodeIndex, Run, TaskIndex};
use crate::domain::work::Work;

impl Worker {
    /// Task `index` of a generation node: the file its provider made, with the
    /// provider's name; a provider's refusal fails the task with the provider's message.
    pub(super) async fn generate_task(
        &self,
        run: &Run,
        index: TaskIndex,
        scratch: &Path,
        stop: &Stop,
    ) -> anyhow::Result<TaskOutput> {
        let node = *run.tasks[index].nodes.first().unwrap_or(&NodeIndex(0));
        let Some(generation) = run.nodes[node].settings().generation() else {
            return Ok(TaskOutput::Refused(
                format!("{} needs its parameters set", run.nodes[node].type_name()),
                Some(node),
            ));
        };
        let media = generation.media();
        let output = scratch.join(format!("generated.{}", media.extension()));
        let made = match &generation {
            Generation::Media(request) => request.generate(&self.generators, &output, stop).await,
            Generation::Avatar { profile, script, video_model } => {
                let ask = AvatarAsk { profile, script, video_model };
                return self.avatar_task(run, node, &ask, scratch, stop).await;
            }
        };
        Ok(match made {
            (provider, Ok(())) => TaskOutput::Generated { path: output, media, provider },
            (_, Err(GenerationError::Cancelled)) => TaskOutput::Cancelled,
            // An unreachable provider or a missing tool fails the node saying so; a
            // resume tries again.
            (_, Err(error)) => TaskOutput::FailedAt(error.to_string(), node),
        })
    }
}

impl Worker {
    /// An AI Avatar node's task: the profile's reference speaking the script. Waits
    /// (`blocked`) while the profile is processed, for at most [`AVATAR_WAIT`].
    async fn avatar_task(
        &self,
        run: &Run,
        node: NodeIndex,
        ask: &AvatarAsk<'_>,
        scratch: &Path,
        stop: &Stop,
    ) -> anyhow::Result<TaskOutput> {
        let AvatarAsk { profile, script, video_model } = *ask;
        let failed = |message: String| Ok(TaskOutput::FailedAt(format!("AI Avatar: {message}"), node));
        // The caller's profile is the problem: its credits are kept.
        let refused = |message: String| Ok(TaskOutput::Refused(format!("AI Avatar: {message}"), Some(node)));
        let found = match AvatarProfileId::parse(profile) {
            Some(id) => self.avatars.get_avatar(run.organization_id, id).await?,
            None => None,
        };
        let Some(found) = found else { return refused(format!("avatar profile {profile} was not found")) };
        let reference = match (found.status, &found.reference) {
            (AvatarStatus::Ready, Some(reference)) => reference,
            (AvatarStatus::Pending | AvatarStatus::Processing, _) => {
                let waited = self.clock.now().unix_millis().saturating_sub(found.created_at.unix_millis());
                if waited > AVATAR_WAIT.as_millis() as u64 {
                    return failed(format!(
                        "avatar profile {profile} was still being processed after {} minutes",
                        AVATAR_WAIT.as_secs() / 60
                    ));
                }
                return Ok(TaskOutput::Blocked);
            }
            _ => {
                let why = found.status_message.unwrap_or_else(|| "no reason recorded".into());
                return refused(format!("avatar profile {profile} failed: {why}"));
            }
        };
        let speech = scratch.join("speech.wav");
        let (speaker, spoken) =
            self.generators.generate(&SpeechRequest { text: script.to_owned() }, &speech, stop).await;
        match spoken {
            Ok(()) => {}
            Err(GenerationError::Cancelled) => return Ok(TaskOutput::Cancelled),
            Err(error) => return failed(format!("the script could not be spoken: {error}")),
        }
        let speech_ms = match self.probe.probe(&format!("file:{}", speech.display())).await {
            Ok(report) => report.duration_seconds.map_or(0, |seconds| (seconds * 1000.0).round() as u64),
            Err(error) => return failed(format!("{speaker} made no readable speech: {error}")),
        };
        if speech_ms == 0 {
            return failed(format!("{speaker} made speech of no length"));
        }
        let blobs = self.blobs.as_ref();
        let location = |file: &AvatarFile| {
            let (key, version) = (file.key.clone(), file.version.clone());
            async move { blobs.read_location(&key, version.as_deref()).await }
        };
        let source = match (&reference.video, &reference.image) {
            (Some(video), _) => AvatarReference::Video { location: location(video).await? },
            (None, Some(image)) => AvatarReference::Image { location: location(image).await? },
            (None, None) => return failed(format!("avatar profile {profile} has no reference")),
        };
        let request = AvatarRequest {
            reference: source,
            speech,
            speech_ms,
            video_model: video_model.to_owned(),
            width: reference.width,
            height: reference.height,
        };
        let output = scratch.join("generated.mp4");
        Ok(match self.generators.generate(&request, &output, stop).await {
            (provider, Ok(())) => TaskOutput::Generated { path: output, media: MediaType::Video, provider },
            (_, Err(GenerationError::Cancelled)) => TaskOutput::Cancelled,
            (_, Err(error)) => TaskOutput::FailedAt(error.to_string(), node),
        })
    }
}

impl Worker {
    /// Whether a task blocked on avatar profile `profile` should go on waiting: the
    /// profile is still being processed, and not for longer than [`AVATAR_WAIT`]. A
    /// profile whose processing looks lost (pending, or its claim run out, for
    /// [`STALE_PROFILE`]) is queued for processing again.
    pub(super) async fn still_waiting(
        &self,
        organization: crate::domain::identity::OrganizationId,
        wait: &super::WaitFor,
    ) -> anyhow::Result<bool> {
        let profile = match wait {
            super::WaitFor::Avatar(profile) => profile,
            super::WaitFor::Credits { price, until } => {
                // Looked at without a write: claimed once the balance covers the price,
                // or once the wait for the top-up is over (then blocked for a resume).
                let account = self.runs.account(organization).await?;
                let price = i64::try_from(*price).unwrap_or(i64::MAX);
                if account.balance >= price {
                    return Ok(false);
                }
                if self.clock.now() >= *until {
                    return Ok(false);
                }
                // A purchase that failed (or none yet): ask again; while one awaits its
                // payment this buys nothing.
                let shortfall = price.saturating_sub(account.balance.max(0)) as u64;
                let bought = self.top_up(organization, shortfall).await;
                return Ok(bought != Some(crate::domain::credits::service::ToppedUp::Granted));
            }
        };
        let Some(id) = AvatarProfileId::parse(profile) else { return Ok(false) };
        let Some(found) = self.avatars.get_avatar(organization, id).await? else { return Ok(false) };
        let now = self.clock.now().unix_millis();
        let waited = now.saturating_sub(found.created_at.unix_millis());
        let quiet = now.saturating_sub(found.updated_at.unix_millis());
        let stale = quiet > STALE_PROFILE.as_millis() as u64
            && (found.status == AvatarStatus::Pending
                || found.processing_until.is_some_and(|until| until.unix_millis() < now));
        match found.status {
            AvatarStatus::Pending | AvatarStatus::Processing if waited <= AVATAR_WAIT.as_millis() as u64 => {
                if stale {
                    tracing::warn!(avatar = %id, "queueing again an avatar profile whose processing looks lost");
                    self.queue.send(&[Work::ProcessAvatar { organization_id: organization, avatar_id: id }]).await?;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// How long an avatar profile may stay pending, or processing past its claim, before a
/// task waiting for it queues its processing again.
pub const STALE_PROFILE: std::time::Duration = std::time::Duration::from_secs(120);

/// What an AI Avatar node asks for.
#[derive(Clone, Copy)]
struct AvatarAsk<'a> {
    profile: &'a str,
    script: &'a str,
    video_model: &'a str,
}

/// Longest an AI Avatar task waits for its profile's processing.
pub const AVATAR_WAIT: std::time::Duration = std::time::Duration::from_secs(2 * 60 * 60);

/// What the probe of a generated file must find, by what it should hold.
pub(super) fn expected(media: MediaType) -> &'static str {
    match media {
        MediaType::Video => "video",
        MediaType::Image => "image",
        MediaType::Audio => "sound",
    }
}
