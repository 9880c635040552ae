//! The durable local task queue: messages in a table of the state database, received
//! under a lease (a message whose worker stopped becomes visible again when the lease
//! ends), deleted when done. Sending wakes idle workers at once.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use tokio::sync::Notify;

use super::{Db, Sqlite};
use crate::core::queue::Delivery;
use crate::core::queue::Inbox;
use crate::core::queue::Queue;
use crate::domain::time::Clock;
use crate::domain::work::Work;

/// How long a receive waits for a message to be sent when none is visible.
const IDLE_WAIT: Duration = Duration::from_secs(1);

fn row_of(delivery: &Delivery<Work>) -> anyhow::Result<i64> {
    delivery.handle.parse().map_err(|_| anyhow::anyhow!("{:?} is not a task row", delivery.handle))
}

/// The next visible message: in the order of the index (`visible_at, id`), so that a take
/// reads one row whatever the depth of the queue.
const TAKE: &str =
    "SELECT id, message, receives FROM task_queue WHERE visible_at <= ?1 ORDER BY visible_at, id LIMIT 1";

/// The task queue of an embedded backend.
#[derive(Clone)]
pub struct SqliteTaskQueue {
    database: Sqlite,
    wake: Arc<Notify>,
    /// The time leases and delays count from.
    clock: Arc<dyn Clock>,
}

impl SqliteTaskQueue {
    pub fn new(database: Sqlite, clock: Arc<dyn Clock>) -> Self {
        Self { database, wake: Arc::new(Notify::new()), clock }
    }

    /// Runs left `running` in the database whose tasks this queue holds.
    pub async fn running_runs(
        &self,
    ) -> anyhow::Result<Vec<(crate::domain::identity::OrganizationId, crate::domain::runs::RunId)>> {
        self.database.running_runs().await
    }

    /// Waits until a message may have been sent, or `timeout` passed.
    pub async fn wait(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
    }

    /// Takes the message visible the longest (of those queued together, the first) and
    /// hides it for `lease` ([`TAKE`]: ordered by `id` alone, SQLite sorted every visible
    /// message on each take, 990 of them in a 1,000-task fan-out).
    async fn receive_one(&self, lease: Duration) -> anyhow::Result<Option<Delivery<Work>>> {
        let clock = self.clock.clone();
        let found = self
            .database
            .write(move |transaction| {
                let now = super::now_millis(clock.as_ref());
                let row: Option<(i64, String, i64)> = transaction
                    .prepare_cached(TAKE)
                    .db("receiving a task")?
                    .query_row([now], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                    .optional()
                    .db("receiving a task")?;
                let Some((id, text, receives)) = row else { return Ok(None) };
                transaction
                    .prepare_cached("UPDATE task_queue SET visible_at = ?2, receives = receives + 1 WHERE id = ?1")
                    .db("receiving a task")?
                    .execute(params![id, now + lease.as_millis() as i64])
                    .db("receiving a task")?;
                Ok::<_, anyhow::Error>(Some((id, text, receives + 1)))
            })
            .await?;
        let Some((id, text, receives)) = found else { return Ok(None) };
        let message = serde_json::from_str(&text)?;
        Ok(Some(Delivery { handle: id.to_string(), message, receives: receives as u32 }))
    }

    async fn delete(&self, id: i64) -> anyhow::Result<()> {
        self.database
            .write(move |transaction| {
                transaction
                    .prepare_cached("DELETE FROM task_queue WHERE id = ?1")
                    .db("acknowledging a task")?
                    .execute([id])
                    .db("acknowledging a task")?;
                Ok(())
            })
            .await
    }

    async fn show_after(&self, id: i64, delay: Duration) -> anyhow::Result<()> {
        let clock = self.clock.clone();
        self.database
            .write(move |transaction| {
                let now = super::now_millis(clock.as_ref());
                transaction
                    .prepare_cached("UPDATE task_queue SET visible_at = ?2 WHERE id = ?1")
                    .db("delaying a task")?
                    .execute(params![id, now + delay.as_millis() as i64])
                    .db("delaying a task")?;
                Ok(())
            })
            .await
    }

    /// Makes every message visible now: at start, when no worker of an earlier process
    /// can still hold one (the data folder is locked by this process).
    pub async fn release_all(&self) -> anyhow::Result<()> {
        self.database
            .write(|transaction| {
                transaction.execute("UPDATE task_queue SET visible_at = 0", []).db("releasing tasks")?;
                Ok(())
            })
            .await
    }

    /// Messages waiting or in work.
    pub async fn len(&self) -> anyhow::Result<u64> {
        self.database
            .call(|connection| {
                connection
                    .query_row("SELECT count(*) FROM task_queue", [], |row| row.get::<_, i64>(0))
                    .db("counting tasks")
            })
            .await
            .map(|count| count as u64)
    }
}

#[async_trait]
impl Queue<Work> for SqliteTaskQueue {
    async fn send(&self, messages: &[Work]) -> anyhow::Result<()> {
        let texts = messages.iter().map(serde_json::to_string).collect::<Result<Vec<_>, _>>()?;
        self.database
            .write(move |transaction| {
                let mut statement = transaction
                    .prepare_cached("INSERT OR IGNORE INTO task_queue (message, visible_at) VALUES (?1, 0)")
                    .db("queueing a task")?;
                for text in &texts {
                    statement.execute([text]).db("queueing a task")?;
                }
                Ok::<_, anyhow::Error>(())
            })
            .await?;
        self.wake.notify_waiters();
        Ok(())
    }
}

#[async_trait]
impl Inbox<Work> for SqliteTaskQueue {
    /// One message at a time: each worker of the pool receives its own.
    async fn receive(&self, _max: usize, lease: Duration) -> anyhow::Result<Vec<Delivery<Work>>> {
        super::look_or_wait(&self.wake, IDLE_WAIT, || self.receive_one(lease)).await
    }

    async fn acknowledge(&self, delivery: &Delivery<Work>) -> anyhow::Result<()> {
        self.delete(row_of(delivery)?).await
    }

    async fn retry_later(&self, delivery: &Delivery<Work>, delay: Duration) -> anyhow::Result<()> {
        self.show_after(row_of(delivery)?, delay).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A take walks the index to its first row: no sort of the visible messages.
    #[tokio::test]
    async fn a_take_reads_the_first_row_of_its_index_whatever_the_queue_holds() {
        let database = Sqlite::in_memory().unwrap();
        let plan: Vec<String> = database
            .call(|connection| -> anyhow::Result<Vec<String>> {
                let mut statement = connection.prepare(&format!("EXPLAIN QUERY PLAN {TAKE}"))?;
                let rows = statement.query_map([0], |row| row.get::<_, String>(3))?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .unwrap();
        assert_eq!(plan, vec!["SEARCH task_queue USING INDEX task_queue_visible (visible_at<?)"], "{plan:?}");
    }
}
