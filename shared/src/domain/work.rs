//! The work queue's message (part of the kernel): one unit of background work, tagged
//! with its kind. Runs, avatars and social posts each send theirs without knowing the
//! others; `dispatch` hands each to its context, once, for the SQS runtime and for
//! `serve`'s workers alike.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ids::{AvatarProfileId, OrganizationId, PostId, RunId, TaskIndex};

/// A message of the work queue (the `node-tasks` queue on AWS, a table locally).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "Tagged", from = "Wire")]
pub enum Work {
    /// Works one task of a run.
    NodeTask(NodeTask),
    /// Processes an avatar profile's source video.
    ProcessAvatar { organization_id: OrganizationId, avatar_id: AvatarProfileId },
    /// Publishes a social post.
    PublishPost { organization_id: OrganizationId, post_id: PostId },
}

/// One task of a run to work: the `attempt`th try of task `task`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeTask {
    pub organization_id: OrganizationId,
    pub run_id: RunId,
    pub task: TaskIndex,
    pub attempt: u32,
    /// A part of the task (a segment of its output, or its sound): the part's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<u32>,
}

/// What became of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Processed {
    /// Done with: worked, or nothing to do.
    Done,
    /// Deliver it again after this long: it waits for something (another worker's claim,
    /// an avatar profile being processed, a post's publishing held by another worker).
    Later(Duration),
}

/// The message as it is written: tagged with its kind.
#[derive(Serialize, Deserialize)]
#[serde(tag = "work", rename_all = "snake_case")]
enum Tagged {
    NodeTask(NodeTask),
    ProcessAvatar { organization_id: OrganizationId, avatar_id: AvatarProfileId },
    PublishPost { organization_id: OrganizationId, post_id: PostId },
}

/// The message as it may be read: tagged, or as written before the tag (a node task's
/// fields with the avatar or post it was about instead, if any), so that messages queued
/// by an older version are worked after an upgrade.
#[derive(Deserialize)]
#[serde(untagged)]
enum Wire {
    Tagged(Tagged),
    Untagged {
        organization_id: OrganizationId,
        run_id: RunId,
        task: TaskIndex,
        attempt: u32,
        #[serde(default)]
        avatar: Option<AvatarProfileId>,
        #[serde(default)]
        social_post: Option<PostId>,
    },
}

impl From<Work> for Tagged {
    fn from(work: Work) -> Tagged {
        match work {
            Work::NodeTask(task) => Tagged::NodeTask(task),
            Work::ProcessAvatar { organization_id, avatar_id } => Tagged::ProcessAvatar { organization_id, avatar_id },
            Work::PublishPost { organization_id, post_id } => Tagged::PublishPost { organization_id, post_id },
        }
    }
}

impl From<Wire> for Work {
    fn from(wire: Wire) -> Work {
        match wire {
            Wire::Tagged(Tagged::NodeTask(task)) => Work::NodeTask(task),
            Wire::Tagged(Tagged::ProcessAvatar { organization_id, avatar_id }) => {
                Work::ProcessAvatar { organization_id, avatar_id }
            }
            Wire::Tagged(Tagged::PublishPost { organization_id, post_id }) => {
                Work::PublishPost { organization_id, post_id }
            }
            Wire::Untagged { organization_id, avatar: Some(avatar_id), .. } => {
                Work::ProcessAvatar { organization_id, avatar_id }
            }
            Wire::Untagged { organization_id, social_post: Some(post_id), .. } => {
                Work::PublishPost { organization_id, post_id }
            }
            Wire::Untagged { organization_id, run_id, task, attempt, .. } => {
                Work::NodeTask(NodeTask { organization_id, run_id, task, attempt, part: None })
            }
        }
    }
}

impl From<NodeTask> for Work {
    fn from(task: NodeTask) -> Work {
        Work::NodeTask(task)
    }
}

impl Work {
    /// The organization the work is for.
    pub fn organization(&self) -> OrganizationId {
        match self {
            Work::NodeTask(task) => task.organization_id,
            Work::ProcessAvatar { organization_id, .. } | Work::PublishPost { organization_id, .. } => *organization_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ORGANIZATION: &str = "7a000f7a-dbc7-4169-9327-f1cee769bf8c";
    const OTHER: &str = "01a22288-c856-7b9b-85e2-ef00471e8d47";
    const NIL: &str = "00000000-0000-0000-0000-000000000000";

    fn organization() -> OrganizationId {
        OrganizationId::parse(ORGANIZATION).unwrap()
    }

    #[test]
    fn each_kind_is_written_with_its_tag_and_read_back() {
        let task = NodeTask {
            organization_id: organization(),
            run_id: RunId::parse(OTHER).unwrap(),
            task: TaskIndex(3),
            attempt: 1,
            part: None,
        };
        let part = NodeTask { part: Some(2), ..task };
        let kinds = [
            (
                Work::NodeTask(task),
                json!({ "work": "node_task", "organization_id": ORGANIZATION, "run_id": OTHER, "task": 3, "attempt": 1 }),
            ),
            (
                Work::NodeTask(part),
                json!({ "work": "node_task", "organization_id": ORGANIZATION, "run_id": OTHER, "task": 3, "attempt": 1, "part": 2 }),
            ),
            (
                Work::ProcessAvatar {
                    organization_id: organization(),
                    avatar_id: AvatarProfileId::parse(OTHER).unwrap(),
                },
                json!({ "work": "process_avatar", "organization_id": ORGANIZATION, "avatar_id": OTHER }),
            ),
            (
                Work::PublishPost { organization_id: organization(), post_id: PostId::parse(OTHER).unwrap() },
                json!({ "work": "publish_post", "organization_id": ORGANIZATION, "post_id": OTHER }),
            ),
        ];
        for (work, written) in kinds {
            assert_eq!(serde_json::to_value(work).unwrap(), written);
            assert_eq!(serde_json::from_value::<Work>(written).unwrap(), work);
        }
    }

    #[test]
    fn messages_queued_before_the_tag_are_read_as_their_kind() {
        let task = json!({ "organization_id": ORGANIZATION, "run_id": OTHER, "task": 2, "attempt": 0 });
        assert_eq!(
            serde_json::from_value::<Work>(task).unwrap(),
            Work::NodeTask(NodeTask {
                organization_id: organization(),
                run_id: RunId::parse(OTHER).unwrap(),
                task: TaskIndex(2),
                attempt: 0,
                part: None,
            })
        );
        let avatar =
            json!({ "organization_id": ORGANIZATION, "run_id": NIL, "task": 0, "attempt": 0, "avatar": OTHER });
        assert_eq!(
            serde_json::from_value::<Work>(avatar).unwrap(),
            Work::ProcessAvatar { organization_id: organization(), avatar_id: AvatarProfileId::parse(OTHER).unwrap() }
        );
        let post =
            json!({ "organization_id": ORGANIZATION, "run_id": NIL, "task": 0, "attempt": 0, "social_post": OTHER });
        assert_eq!(
            serde_json::from_value::<Work>(post).unwrap(),
            Work::PublishPost { organization_id: organization(), post_id: PostId::parse(OTHER).unwrap() }
        );
    }

    #[test]
    fn a_message_of_an_unknown_kind_is_refused() {
        let unknown = json!({ "work": "mine_bitcoin", "organization_id": ORGANIZATION });
        assert!(serde_json::from_value::<Work>(unknown).is_err());
    }
}
