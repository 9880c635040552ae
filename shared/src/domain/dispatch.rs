//! Hands each message of the work queue to the context it is for: a run's task to the
//! runs worker, an avatar profile to its processing, a social post to its publishing.
//! The one place that knows every kind of [`Work`]: the SQS runtime and `serve`'s
//! workers both call [`Dispatch::process`]. It sits above the contexts it dispatches to.

use std::time::Duration;

use super::avatars::processing::{self, AvatarWork};
use super::ids::{AvatarProfileId, OrganizationId};
use super::runs::worker::Worker;
use super::social::publishing::Publishing;
use super::social::service::Social;
use super::time::Timestamp;
use super::work::{Processed, Work};

/// The contexts a work message may be for.
pub struct Dispatch<'a> {
    /// Works run tasks; its tools (scratch folder, probe, toolkit, budget) also process
    /// avatar profiles.
    pub runs: &'a Worker,
    pub social: Social<'a>,
}

impl Dispatch<'_> {
    /// Works one message. Ok says whether it is done with or should come back after a
    /// while; an error means it should be delivered again later.
    pub async fn process(&self, work: Work) -> anyhow::Result<Processed> {
        match work {
            Work::NodeTask(task) => self.runs.process(task).await,
            Work::ProcessAvatar { organization_id, avatar_id } => self.process_avatar(organization_id, avatar_id).await,
            Work::PublishPost { organization_id, post_id } => {
                match self.social.publish(organization_id, post_id).await? {
                    Publishing::Done => Ok(Processed::Done),
                    Publishing::Held(until) => Ok(self.after(until)),
                }
            }
        }
    }

    /// Processes an avatar profile's source video.
    async fn process_avatar(&self, organization: OrganizationId, id: AvatarProfileId) -> anyhow::Result<Processed> {
        let worker = self.runs;
        tokio::fs::create_dir_all(&worker.scratch).await?;
        let scratch = tempfile::Builder::new().prefix("avatar-").tempdir_in(&worker.scratch)?;
        let work = AvatarWork {
            avatars: worker.avatars.as_ref(),
            uploads: worker.uploads.as_ref(),
            blobs: worker.blobs.as_ref(),
            probe: worker.probe.as_ref(),
            downloader: worker.downloader.as_ref(),
            toolkit: worker.toolkit.as_ref(),
            clock: worker.clock.as_ref(),
            scratch: scratch.path(),
            budget: worker.task_budget,
        };
        match processing::process(&work, organization, id).await {
            Ok(processing::Processed::Done) => Ok(Processed::Done),
            Ok(processing::Processed::Held(until)) => Ok(self.after(until)),
            Err(error) => Err(anyhow::anyhow!("processing avatar profile {id}: {error}")),
        }
    }

    /// Comes back a second after another worker's hold on the work ends.
    fn after(&self, until: Timestamp) -> Processed {
        let wait = until.unix_millis().saturating_sub(self.runs.clock.now().unix_millis()) + 1_000;
        Processed::Later(Duration::from_millis(wait))
    }
}
