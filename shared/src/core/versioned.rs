//! One versioned change, the way every context changes a record that concurrent writers
//! share (a run, a credit account, an avatar profile, a trigger's state, a social post):
//! read it, edit it, write it on condition that its version is still the one read, and
//! when another writer came first, wait by a [`RetryPolicy`] and start again from a new
//! read. What gives up is [`Unavailable`](super::retry::Unavailable) in the caller's
//! error (ARCHITECTURE §2: every retry backs off and is bounded).

use std::fmt;

use async_trait::async_trait;

use super::retry::RetryPolicy;

/// What an edit makes of the record it read.
pub enum Edit<W, K> {
    /// Write this, on condition that the record is still at the version read.
    Write(W),
    /// Write nothing: the change ends, answering this.
    Keep(K),
}

/// What a change did.
#[derive(Debug)]
pub enum Changed<W, L, K> {
    /// There was no record to change.
    Missing,
    /// The edit wrote nothing, answering this.
    Kept(K),
    /// The write landed: what was written, and what its store answered.
    Written(W, L),
}

impl<W, K> Changed<W, (), K> {
    /// What was written, if anything was.
    pub fn written(self) -> Option<W> {
        match self {
            Changed::Written(written, ()) => Some(written),
            Changed::Missing | Changed::Kept(_) => None,
        }
    }
}

/// One change of a record: how it is read, edited and written. The change is a value (a
/// struct holding its ports and its edit), so that its steps may borrow it mutably and
/// still be `Send`, as a worker's future must be.
#[async_trait]
pub trait Change: Send {
    /// What is read.
    type Record: Send;
    /// What is written (the record itself, or a write made from it).
    type Write: Send;
    /// What the store answers to a write that landed.
    type Landed: Send;
    /// What an edit that writes nothing answers.
    type Kept: Send;
    type Error: From<anyhow::Error> + Send;

    /// The record as stored now; None when there is none.
    async fn read(&mut self) -> Result<Option<Self::Record>, Self::Error>;

    /// What to make of the record read.
    async fn edit(&mut self, record: Self::Record) -> Result<Edit<Self::Write, Self::Kept>, Self::Error>;

    /// Writes on condition that the record is still at the version read: Some when the
    /// write landed, None when another writer came first.
    async fn write(&mut self, write: &mut Self::Write) -> Result<Option<Self::Landed>, Self::Error>;
}

/// What a [`Change`] did.
pub type Outcome<C> = Changed<<C as Change>::Write, <C as Change>::Landed, <C as Change>::Kept>;

/// Reads, edits and writes by `change`, again on a new read after each lost write, by
/// `policy`. `what` names the record in the error of a change that gives up.
pub async fn change<C: Change>(
    policy: &RetryPolicy,
    what: impl fmt::Display + Send,
    change: &mut C,
) -> Result<Outcome<C>, C::Error> {
    let mut retry = policy.start();
    loop {
        let Some(record) = change.read().await? else { return Ok(Changed::Missing) };
        let mut next = match change.edit(record).await? {
            Edit::Write(next) => next,
            Edit::Keep(answer) => return Ok(Changed::Kept(answer)),
        };
        if let Some(landed) = change.write(&mut next).await? {
            return Ok(Changed::Written(next, landed));
        }
        let lost = format!("{what} was changed by another writer");
        retry.wait(lost).await.map_err(|unavailable| C::Error::from(anyhow::Error::from(unavailable)))?;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    const QUICK: RetryPolicy = RetryPolicy {
        name: "test conflicts",
        max_attempts: 5,
        first_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(2),
        budget: Duration::from_secs(5),
    };

    /// A record of `value` at `version`, which another writer bumps `steal` times.
    struct Cell {
        version: AtomicU64,
        value: AtomicU64,
        steal: AtomicUsize,
        reads: AtomicUsize,
    }

    impl Cell {
        fn new(steal: usize) -> Self {
            Self { version: 1.into(), value: 0.into(), steal: steal.into(), reads: 0.into() }
        }
    }

    /// Adds one to the cell's value, or keeps it when `keep`.
    struct AddOne<'a> {
        cell: &'a Cell,
        keep: bool,
    }

    #[async_trait]
    impl Change for AddOne<'_> {
        type Record = (u64, u64);
        type Write = (u64, u64);
        type Landed = ();
        type Kept = &'static str;
        type Error = anyhow::Error;

        async fn read(&mut self) -> anyhow::Result<Option<(u64, u64)>> {
            self.cell.reads.fetch_add(1, Ordering::SeqCst);
            Ok(Some((self.cell.version.load(Ordering::SeqCst), self.cell.value.load(Ordering::SeqCst))))
        }

        async fn edit(&mut self, (version, value): (u64, u64)) -> anyhow::Result<Edit<(u64, u64), &'static str>> {
            Ok(match self.keep {
                true => Edit::Keep("as it is"),
                false => Edit::Write((version, value + 1)),
            })
        }

        async fn write(&mut self, (version, value): &mut (u64, u64)) -> anyhow::Result<Option<()>> {
            let cell = self.cell;
            if cell.steal.load(Ordering::SeqCst) > 0 {
                cell.steal.fetch_sub(1, Ordering::SeqCst);
                cell.version.fetch_add(1, Ordering::SeqCst);
                cell.value.fetch_add(10, Ordering::SeqCst);
            }
            if cell.version.compare_exchange(*version, *version + 1, Ordering::SeqCst, Ordering::SeqCst).is_err() {
                return Ok(None);
            }
            cell.value.store(*value, Ordering::SeqCst);
            Ok(Some(()))
        }
    }

    async fn add_one(cell: &Cell, keep: bool) -> anyhow::Result<Outcome<AddOne<'_>>> {
        change(&QUICK, "the cell", &mut AddOne { cell, keep }).await
    }

    #[tokio::test]
    async fn a_lost_write_is_made_again_on_what_the_other_writer_stored() {
        let cell = Cell::new(2);
        let changed = add_one(&cell, false).await.unwrap();
        assert!(matches!(changed, Changed::Written((3, 21), ())), "{changed:?}");
        assert_eq!((cell.value.load(Ordering::SeqCst), cell.reads.load(Ordering::SeqCst)), (21, 3));
    }

    #[tokio::test]
    async fn a_change_that_keeps_losing_gives_up_after_the_policys_attempts() {
        let cell = Cell::new(usize::MAX);
        let error = add_one(&cell, false).await.unwrap_err();
        assert!(crate::core::retry::is_unavailable(&error), "{error:#}");
        assert!(format!("{error:#}").contains("the cell was changed by another writer"), "{error:#}");
        assert_eq!(cell.reads.load(Ordering::SeqCst), QUICK.max_attempts as usize);
    }

    #[tokio::test]
    async fn a_kept_edit_writes_nothing() {
        let cell = Cell::new(0);
        let kept = add_one(&cell, true).await.unwrap();
        assert!(matches!(kept, Changed::Kept("as it is")), "{kept:?}");
        assert_eq!(cell.version.load(Ordering::SeqCst), 1);
    }
}
