//! Publishing social posts: the node-task queue's message ([`Social::publish`]: claim
//! the attempt under a lease, hand each destination not yet published to its publisher,
//! record each answer as it comes, settle the status), and the scheduler's tick
//! ([`Social::publish_due`]: claim each due post with a conditional write and queue it,
//! so one tick of many publishes a post once, and send again what a stopped process left).

use std::path::Path;

use super::publisher::{MediumFile, Published, Refreshed};
use super::service::MAX_MEDIUM_BYTES;
use super::service::{local_file, record, settle, waiting_status, PostEdit, Social};
use super::PendingMedia;
use super::CONNECTION_DELETED;
use super::{PostId, PostStatus, ResultStatus, SocialConnection, SocialError, SocialPost};
use crate::core::versioned::Changed;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;
use crate::domain::work::Work;

/// Publishing attempts a post is given (workers that stopped each used one).
pub const MAX_ATTEMPTS: u32 = 3;
/// Due posts one scheduler tick claims at most, per read of the due index.
pub const DUE_BATCH: usize = 100;
/// Reads of the due index one tick makes at most.
pub const DUE_BATCHES: usize = 10;

/// What became of a publishing message.
#[derive(Debug, PartialEq, Eq)]
pub enum Publishing {
    /// Published, or nothing to do.
    Done,
    /// Another attempt's claim holds until then: deliver the message again after it.
    Held(Timestamp),
}

impl Social<'_> {
    /// The scheduler's work: publishes the scheduled posts due at or before `now`, each
    /// once (a conditional write claims it, `scheduled → processing`, and queues its
    /// publishing; a second or concurrent call finds it claimed), and sends again the
    /// publishing message of a post left `processing` with no change for
    /// [`super::REQUEUE_AFTER`] (its sender stopped before sending; the same conditional
    /// write makes one tick send it). `now` is the tick's time. Answers how many posts
    /// this call sent to publishing ([`Social::publish_due_posts`] says which).
    pub async fn publish_due(&self, now: Timestamp) -> anyhow::Result<usize> {
        Ok(self.publish_due_posts(now).await?.len())
    }

    /// As [`Social::publish_due`], answering the posts this call sent to publishing. A
    /// post that cannot be claimed or queued is logged and left for the next tick, so one
    /// post never holds up the others; only a failed read of the due index is an error.
    /// Reads the due index at most [`DUE_BATCHES`] times.
    pub async fn publish_due_posts(&self, now: Timestamp) -> anyhow::Result<Vec<PostId>> {
        let mut sent = Vec::new();
        // Page after page of the earliest due: each post once a call, those just claimed
        // (which an eventually consistent index may still list) skipped.
        let mut attempted: std::collections::HashSet<PostId> = std::collections::HashSet::new();
        for _ in 0..DUE_BATCHES {
            let due = self.repo.due_posts(now, attempted.len() + DUE_BATCH).await?;
            let fresh: Vec<_> = due.into_iter().filter(|(_, id)| attempted.insert(*id)).collect();
            if fresh.is_empty() {
                break;
            }
            for (organization, id) in fresh {
                match self.send_due(organization, id, now).await {
                    Ok(true) => sent.push(id),
                    Ok(false) => {}
                    Err(error) => {
                        tracing::error!(post = %id, error = %error, "a due social post could not be sent to publishing")
                    }
                }
            }
        }
        Ok(sent)
    }

    /// Claims one due post and queues its publishing; false when it was not due (any
    /// more: another tick came first, or the index was stale).
    async fn send_due(&self, organization: OrganizationId, id: PostId, now: Timestamp) -> Result<bool, SocialError> {
        let changed = self
            .change(organization, id, |post| {
                match post.status {
                    PostStatus::Scheduled if post.scheduled_at <= now => {
                        post.status = PostStatus::Processing;
                        // A destination failed already (its connection deleted) stays failed.
                        for result in post.results.iter_mut().filter(|result| result.status != ResultStatus::Failed) {
                            result.status = ResultStatus::Processing;
                        }
                    }
                    // Lost: sent again, and due again a period later.
                    PostStatus::Processing if post.due_at().is_some_and(|due| due <= now) => {}
                    _ => return PostEdit::Keep,
                }
                post.updated_at = now;
                PostEdit::Write
            })
            .await?;
        let Changed::Written(post, ()) = changed else { return Ok(false) };
        // Unsent, the post stays due: the next tick sends it (the claim moved its time).
        let message = Work::PublishPost { organization_id: post.organization_id, post_id: post.id };
        self.queue.send(&[message]).await?;
        tracing::info!(post = %post.id, attempts = post.attempts, "social post sent to publishing");
        Ok(true)
    }

    /// Publishes a `processing` post (the node-task queue's message): claims the attempt
    /// under a lease, hands each destination not yet published to its publisher,
    /// recording each answer as it comes, then settles the post's status.
    pub async fn publish(&self, organization: OrganizationId, id: PostId) -> anyhow::Result<Publishing> {
        let post = match self.claim_attempt(organization, id).await? {
            Ok(post) => post,
            Err(answer) => return Ok(answer),
        };
        let attempt = post.attempts;
        let post = match post.pending_media.clone() {
            None => post,
            Some(pending) => match self.prepare_pending(post, pending, attempt).await? {
                Some(post) => post,
                None => return Ok(Publishing::Done),
            },
        };
        tokio::fs::create_dir_all(self.scratch).await?;
        let scratch = tempfile::Builder::new().prefix("publish-").tempdir_in(self.scratch)?;
        let files = self.local_media(&post, scratch.path()).await?;
        for index in 0..post.results.len() {
            let result = &post.results[index];
            if result.status != ResultStatus::Processing || result.platform_post_id.is_some() {
                continue;
            }
            let destination = &post.destinations[index].connection;
            let answer = match self.publish_to(&post, destination, &files).await {
                Ok(answer) => answer,
                Err(error) => {
                    // Ours or transient: the claim runs out and the message comes back.
                    return Err(error.context(format!("publishing post {id} to connection {}", destination.id)));
                }
            };
            tracing::info!(post = %id, connection = %destination.id, answer = ?answer, "social post published");
            if !self.record_answer(&post, index, answer).await? {
                // Another attempt owns the post now: it goes on from here.
                return Ok(Publishing::Done);
            }
        }
        let finished = self.clock.now();
        self.change(organization, id, |stored| {
            if stored.attempts != attempt || stored.status != PostStatus::Processing {
                return PostEdit::Keep;
            }
            stored.publishing_until = None;
            settle(stored, finished);
            PostEdit::Write
        })
        .await
        .map_err(|error| anyhow::anyhow!("{error}"))?;
        Ok(Publishing::Done)
    }

    /// Claims an attempt at publishing the post: Ok with the post as claimed, or Err with
    /// the answer when there is nothing to attempt (not publishing, held by another
    /// attempt, or failed for good after [`MAX_ATTEMPTS`]).
    async fn claim_attempt(
        &self,
        organization: OrganizationId,
        id: PostId,
    ) -> anyhow::Result<Result<SocialPost, Publishing>> {
        let now = self.clock.now();
        let lease = self.lease;
        let mut held = None;
        let claimed = self
            .change(organization, id, |post| {
                if post.status != PostStatus::Processing {
                    return PostEdit::Keep;
                }
                if let Some(until) = post.publishing_until.filter(|until| *until > now) {
                    held = Some(until);
                    return PostEdit::Keep;
                }
                if post.attempts >= MAX_ATTEMPTS {
                    for result in &mut post.results {
                        if result.status == ResultStatus::Processing && result.platform_post_id.is_none() {
                            result.status = ResultStatus::Failed;
                            result.message =
                                Some(format!("publishing stopped {MAX_ATTEMPTS} times before it finished"));
                        }
                    }
                    post.publishing_until = None;
                    post.pending_media = None;
                    settle(post, now);
                    return PostEdit::Write;
                }
                post.attempts += 1;
                post.publishing_until = Some(now.after(lease));
                post.updated_at = now;
                PostEdit::Write
            })
            .await
            .map_err(|error| anyhow::anyhow!("{error}"))?;
        if let Some(until) = held {
            return Ok(Err(Publishing::Held(until)));
        }
        Ok(match claimed {
            Changed::Written(post, ()) if post.publishing_until.is_some() => Ok(post),
            _ => Err(Publishing::Done),
        })
    }

    /// Records a platform's answer for destination `index` of the post (attempt
    /// `post.attempts`); false when another attempt owns the post now.
    async fn record_answer(&self, post: &SocialPost, index: usize, answer: Published) -> anyhow::Result<bool> {
        let attempt = post.attempts;
        let changed = self
            .change(post.organization_id, post.id, |stored| {
                // A later attempt (this one outlived its claim) that has not handed this
                // destination over yet still gets its answer: the platform has the post,
                // and recording it keeps the later attempt from posting it again.
                let ours = stored.attempts == attempt;
                match stored.results.get_mut(index) {
                    Some(result)
                        if result.status == ResultStatus::Processing && (ours || result.platform_post_id.is_none()) =>
                    {
                        record(result, answer.clone())
                    }
                    _ => return PostEdit::Keep,
                }
                stored.updated_at = self.clock.now();
                PostEdit::Write
            })
            .await
            .map_err(|error| anyhow::anyhow!("{error}"))?;
        Ok(matches!(&changed, Changed::Written(stored, ()) if stored.attempts == attempt))
    }

    /// Prepares the media a create handed over (attempt `attempt` holds the post):
    /// fetched, probed, checked, stored with the thumbnail's record in the post's write.
    /// Media that pass make the post what its create asked for (`pending_approval`,
    /// `scheduled`, or publishing now: the post answered, to publish in this attempt);
    /// media the checks refuse fail every destination with the reason. A failure of ours
    /// is an error: the message comes back after the claim.
    async fn prepare_pending(
        &self,
        post: SocialPost,
        pending: PendingMedia,
        attempt: u32,
    ) -> anyhow::Result<Option<SocialPost>> {
        let (organization, id) = (post.organization_id, post.id);
        let now = self.clock.now();
        let prepared = self.prepare(organization, id, post.thumbnail, &pending.sources, &post.destinations, now).await;
        let (media, records, refusal) = match prepared {
            Ok((media, record)) => (media, vec![record], None),
            Err(SocialError::Invalid(reason)) => (Vec::new(), Vec::new(), Some(reason)),
            Err(error) => return Err(anyhow::anyhow!("preparing the media of post {id}: {error}")),
        };
        let finished = self.clock.now();
        let changed = self
            .change_with(organization, id, &records, |stored| {
                if stored.attempts != attempt || stored.pending_media.is_none() {
                    // Another attempt took the post over.
                    return PostEdit::Keep;
                }
                stored.pending_media = None;
                stored.updated_at = finished;
                match &refusal {
                    Some(reason) => {
                        for result in &mut stored.results {
                            if result.status == ResultStatus::Processing && result.platform_post_id.is_none() {
                                result.status = ResultStatus::Failed;
                                result.message = Some(reason.clone());
                            }
                        }
                        stored.publishing_until = None;
                        settle(stored, finished);
                    }
                    None => {
                        stored.media = media.clone();
                        let (status, result) = waiting_status(pending.approval, pending.later);
                        stored.status = status;
                        // A destination failed meanwhile (its connection deleted) stays failed.
                        for stored_result in stored.results.iter_mut().filter(|r| r.status == ResultStatus::Processing)
                        {
                            stored_result.status = result;
                        }
                        if let Some(at) = pending.later {
                            stored.scheduled_at = at;
                        }
                        if status != PostStatus::Processing {
                            stored.publishing_until = None;
                        }
                        let open = stored
                            .results
                            .iter()
                            .any(|r| matches!(r.status, ResultStatus::Processing | ResultStatus::Scheduled));
                        if !open {
                            stored.publishing_until = None;
                            settle(stored, finished);
                        }
                    }
                }
                PostEdit::Write
            })
            .await
            .map_err(|error| anyhow::Error::new(error).context(format!("preparing the media of post {id}")))?;
        let Changed::Written(stored, ()) = changed else { return Ok(None) };
        tracing::info!(post = %id, status = stored.status.as_str(), "a post's media were prepared");
        let publish_now = stored.status == PostStatus::Processing && stored.publishing_until.is_some();
        Ok(publish_now.then_some(stored))
    }

    /// Publishes `post` to one destination: the connection as stored now (a deleted one
    /// fails the destination with [`CONNECTION_DELETED`]; its credentials may have been
    /// refreshed since the post was made), its credentials refreshed first when they
    /// ran out (the new ones kept in the vault before they are used).
    async fn publish_to(
        &self,
        post: &SocialPost,
        destination: &SocialConnection,
        files: &[MediumFile],
    ) -> anyhow::Result<Published> {
        let Some(mut connection) = self.repo.get_connection(post.organization_id, destination.id).await? else {
            return Ok(Published::Failed(CONNECTION_DELETED.to_owned()));
        };
        let publisher = self.publishers.of(connection.publisher);
        let mut credentials = self.credentials(&connection).await?;
        match publisher.refresh(credentials.as_ref(), self.clock.now()).await? {
            Refreshed::Current => {}
            Refreshed::Refused(message) => return Ok(Published::Failed(message)),
            Refreshed::New(fields) => {
                if let Some(reference) = &connection.credentials {
                    let kept = self.vault.replace(reference, &fields).await?;
                    if &kept != reference {
                        // A vault whose reference is the credentials: the record changes.
                        connection.credentials = Some(kept);
                        if !self.repo.update_connection(&connection).await? {
                            return Ok(Published::Failed(CONNECTION_DELETED.to_owned()));
                        }
                    }
                    tracing::info!(connection = %connection.id, "a connection's access token was refreshed");
                }
                credentials = Some(fields);
            }
        }
        publisher.publish(post, &connection, credentials.as_ref(), files).await
    }

    /// Local copies of a post's stored media, for its publishers.
    async fn local_media(&self, post: &SocialPost, scratch: &Path) -> anyhow::Result<Vec<MediumFile>> {
        let mut files = Vec::with_capacity(post.media.len());
        for (index, medium) in post.media.iter().enumerate() {
            let location = self.blobs.read_location(&medium.key, medium.version.as_deref()).await?;
            let path = if let Some(local) = local_file(&location) {
                local
            } else {
                let path = scratch.join(format!("{index}"));
                self.downloader
                    .download(&location, &path, MAX_MEDIUM_BYTES)
                    .await
                    .map_err(|error| anyhow::anyhow!("reading the post's medium {index}: {error}"))?;
                path
            };
            files.push(MediumFile { path, content_type: medium.content_type.clone(), bytes: medium.bytes });
        }
        Ok(files)
    }
}
