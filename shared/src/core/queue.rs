//! One queue abstraction for every kind of message: a sending side and a receiving side,
//! generic over the message, implemented once per transport (SQS, the SQLite tables).

use std::time::Duration;

use async_trait::async_trait;

/// Where messages of type `M` go.
#[async_trait]
pub trait Queue<M>: Send + Sync {
    /// Sends the messages (at least once each).
    async fn send(&self, messages: &[M]) -> anyhow::Result<()>;

    /// Sends the messages to be received after `delay` (at most [`MAX_SEND_DELAY`]): a
    /// new message each, so that a message looked at again later is not a receive of
    /// the old one (which a queue counts towards its dead-letter limit). A queue whose
    /// workers take a message back with a delay of their own (the local ones) says so.
    async fn send_after(&self, messages: &[M], delay: Duration) -> anyhow::Result<()>
    where
        M: Sync,
    {
        let _ = (messages, delay);
        anyhow::bail!("this queue takes messages back with a delay rather than sending them again")
    }
}

/// Longest delay of [`Queue::send_after`] (SQS's `DelaySeconds` limit).
pub const MAX_SEND_DELAY: Duration = Duration::from_secs(900);

/// A message taken from a queue, with what settles it.
#[derive(Clone, Debug)]
pub struct Delivery<M> {
    /// The queue's handle for acknowledging this delivery (row ID, SQS receipt).
    pub handle: String,
    pub message: M,
    /// Times the message was received, this one included.
    pub receives: u32,
}

/// The receiving side of a queue, for workers that poll it (`serve`).
#[async_trait]
pub trait Inbox<M>: Send + Sync {
    /// Takes up to `max` visible (due) messages, hiding each for `lease`; waits a little
    /// (bounded) when there are none, then returns what it has, maybe nothing.
    async fn receive(&self, max: usize, lease: Duration) -> anyhow::Result<Vec<Delivery<M>>>;
    /// Deletes a delivered message: its work is done.
    async fn acknowledge(&self, delivery: &Delivery<M>) -> anyhow::Result<()>;
    /// Makes a delivered message visible again after `delay`.
    async fn retry_later(&self, delivery: &Delivery<M>, delay: Duration) -> anyhow::Result<()>;
}
