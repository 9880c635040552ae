//! Retry schedules as data, and the one waiting step every retry loop uses, so that no
//! wait in the service is unbounded: each schedule caps its attempts, backs off
//! exponentially with jitter, and stops once its own time budget or the request's
//! deadline would be passed. What gives up returns [`Unavailable`], which callers answer
//! with a 503 (or their contract's 500 body).
//!
//! Every schedule of the service is a constant below, in this one place.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

/// How one kind of failure is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// What is being waited for, in logs and errors.
    pub name: &'static str,
    /// Attempts in all, the first one included.
    pub max_attempts: u32,
    /// Ceiling of the first delay; each later ceiling doubles up to `max_delay`.
    pub first_delay: Duration,
    /// Largest ceiling of one delay.
    pub max_delay: Duration,
    /// No attempt starts later than this after the first one.
    pub budget: Duration,
}

/// Time one request may take before it must answer: inside the 29 s Lambda timeout (and
/// API Gateway's 30 s), with room left to write the answer and release what it holds.
pub const REQUEST_BUDGET: Duration = Duration::from_secs(20);

/// Time a function may take in all, delivering its answer included (a large answer is
/// stored in S3 first): inside its 29 s timeout.
pub const FUNCTION_BUDGET: Duration = Duration::from_secs(27);

/// DynamoDB transactions that lose to concurrent transactions on the same items.
pub const TRANSACTION_CONFLICTS: RetryPolicy = RetryPolicy {
    name: "DynamoDB transaction conflicts",
    max_attempts: 40,
    first_delay: Duration::from_millis(10),
    max_delay: Duration::from_millis(250),
    budget: Duration::from_secs(10),
};

/// Writers of a store's entries waiting while a bulk upsert or a store delete holds the
/// store's lease: slower than conflicts, since a bulk holds a store for a second or more
/// and each refused attempt costs write capacity. A holder may keep the store until its
/// writes in flight end (up to about 18 s), so waiters wait as long as their request's
/// deadline lets them.
pub const STORE_LEASE_WAIT: RetryPolicy = RetryPolicy {
    name: "waiting for a shared store's bulk lease",
    max_attempts: 60,
    first_delay: Duration::from_millis(50),
    max_delay: Duration::from_secs(1),
    budget: Duration::from_secs(18),
};

/// Items DynamoDB leaves unprocessed in BatchGetItem and BatchWriteItem (throttling).
pub const UNPROCESSED_ITEMS: RetryPolicy = RetryPolicy {
    name: "DynamoDB unprocessed batch items",
    max_attempts: 12,
    first_delay: Duration::from_millis(50),
    max_delay: Duration::from_secs(2),
    budget: Duration::from_secs(10),
};

/// One AWS SDK call: throttling and transient transport errors are retried by the SDK
/// itself, configured from this schedule (attempts and backoff); the budget is the
/// call's whole timeout, and [`AWS_ATTEMPT_TIMEOUT`] bounds each attempt.
pub const AWS_SDK_CALLS: RetryPolicy = RetryPolicy {
    name: "AWS SDK call",
    max_attempts: 3,
    first_delay: Duration::from_millis(50),
    max_delay: Duration::from_secs(1),
    budget: Duration::from_secs(8),
};

/// Provider calls answered 429 or 5xx: tried again a few times, never past the task's
/// deadline.
pub const PROVIDER_CALLS: RetryPolicy = RetryPolicy {
    name: "a generation provider's overloaded call",
    max_attempts: 4,
    first_delay: Duration::from_secs(1),
    max_delay: Duration::from_secs(8),
    budget: Duration::from_secs(60),
};

/// How often a provider's long-running operation is polled: from 2 s backing off to
/// 15 s, for as long as the task's deadline allows (the budget here only caps attempts;
/// the task's deadline ends the wait). The wait is a timer: no worker thread is held.
pub const PROVIDER_POLL: RetryPolicy = RetryPolicy {
    name: "polling a generation provider's operation",
    max_attempts: 400,
    first_delay: Duration::from_secs(2),
    max_delay: Duration::from_secs(15),
    budget: Duration::from_secs(60 * 60),
};

/// Longest single attempt of an AWS SDK call.
pub const AWS_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);

/// SQLite writers waiting for the database's write lock (SQLite's own busy handler waits,
/// up to this budget; its attempts and delays are SQLite's).
pub const SQLITE_BUSY: RetryPolicy = RetryPolicy {
    name: "waiting for the SQLite write lock",
    max_attempts: u32::MAX,
    first_delay: Duration::from_millis(1),
    max_delay: Duration::from_millis(100),
    budget: Duration::from_secs(10),
};

/// Agent updates re-applied because another update of the same agent landed first.
pub const AGENT_UPDATE_CONFLICTS: RetryPolicy = RetryPolicy {
    name: "concurrent updates of one agent",
    max_attempts: 25,
    first_delay: Duration::from_millis(5),
    max_delay: Duration::from_millis(200),
    budget: Duration::from_secs(5),
};

/// Changes of one run re-applied because another change of it landed first (the tasks
/// of a wide graph finish together).
pub const RUN_UPDATE_CONFLICTS: RetryPolicy = RetryPolicy {
    name: "concurrent changes of one run",
    max_attempts: 100,
    first_delay: Duration::from_millis(2),
    max_delay: Duration::from_millis(100),
    budget: Duration::from_secs(15),
};

/// Concurrent changes of one organization's credit account (charges of tasks running at
/// once, grants, top-ups): each write names the account's sequence number it read.
pub const ACCOUNT_CONFLICTS: RetryPolicy = RetryPolicy {
    name: "concurrent changes of one credit account",
    max_attempts: 100,
    first_delay: Duration::from_millis(2),
    max_delay: Duration::from_millis(100),
    budget: Duration::from_secs(15),
};

/// Changes of one avatar profile (its processing's claim and outcome, a failed queueing)
/// made again because another change of it landed first.
pub const AVATAR_CONFLICTS: RetryPolicy = RetryPolicy {
    name: "concurrent changes of one avatar profile",
    max_attempts: 10,
    first_delay: Duration::from_millis(5),
    max_delay: Duration::from_millis(200),
    budget: Duration::from_secs(5),
};

/// Changes of one social post (its media prepared, an attempt's claim and results, an
/// approval, a connection deleted) made again because another change of it landed first.
pub const POST_CONFLICTS: RetryPolicy = RetryPolicy {
    name: "concurrent changes of one social post",
    max_attempts: 12,
    first_delay: Duration::from_millis(5),
    max_delay: Duration::from_millis(200),
    budget: Duration::from_secs(5),
};

/// Writes of one trigger's state (a fire, a poll's cursor) made again on a newer state
/// because another write of it landed first.
pub const TRIGGER_STATE_CONFLICTS: RetryPolicy = RetryPolicy {
    name: "concurrent writes of one trigger's state",
    max_attempts: 10,
    first_delay: Duration::from_millis(5),
    max_delay: Duration::from_millis(200),
    budget: Duration::from_secs(5),
};

/// `serve`'s start: its table checked (or made) and the seed (or the development
/// organization) written again while DynamoDB throttles, fails or times out, each
/// attempt with the SDK's own retries inside. A process that gave up at once would die
/// at start on one throttled write; a DynamoDB that stays down still ends the start,
/// with why. An endpoint that cannot be reached at the table's check ends it at once
/// (a wrong endpoint); after that check, it is taken as a passing failure.
pub const STARTUP: RetryPolicy = RetryPolicy {
    name: "serve's start",
    max_attempts: 8,
    first_delay: Duration::from_millis(250),
    max_delay: Duration::from_secs(4),
    budget: Duration::from_secs(30),
};

/// Runs `attempt` again while it fails with [`Unavailable`], as `policy` allows; any
/// other failure, or the schedule giving up, ends it with that error. Only for steps
/// that can be done twice: an attempt may have written before it failed.
pub async fn while_unavailable<T, F, Fut>(policy: RetryPolicy, mut attempt: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let mut retry = policy.start();
    loop {
        match attempt().await {
            Err(error) if is_unavailable(&error) => {
                let why = format!("{error:#}");
                retry.wait(&why).await?;
                tracing::warn!(schedule = policy.name, attempt = retry.attempts(), "{why}; trying again");
            }
            done => return done,
        }
    }
}

/// A dependency kept failing, or did not answer in time: the request cannot be served
/// now but may be later (HTTP 503, or the endpoint's contract 500 body).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// True when `error`, or anything in its chain of causes, is [`Unavailable`].
pub fn is_unavailable(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<Unavailable>())
}

tokio::task_local! {
    static DEADLINE: Instant;
}

/// Runs `future` with a deadline that every retry inside it respects, whatever its own
/// schedule allows: a request's retries together never outlast [`REQUEST_BUDGET`].
pub async fn with_deadline<F: Future>(deadline: Instant, future: F) -> F::Output {
    DEADLINE.scope(deadline, future).await
}

/// The deadline of the current request, if one was set.
pub fn deadline() -> Option<Instant> {
    DEADLINE.try_with(|deadline| *deadline).ok()
}

impl RetryPolicy {
    /// Starts counting attempts and time: call it just before the first attempt.
    pub fn start(self) -> Retry {
        Retry { policy: self, attempts: 1, started: Instant::now() }
    }

    /// The ceiling of the delay after the `failed`-th failed attempt: doubling from
    /// `first_delay`, capped at `max_delay`.
    pub fn ceiling(&self, failed: u32) -> Duration {
        let doublings = failed.saturating_sub(1).min(20);
        self.first_delay.saturating_mul(1 << doublings).min(self.max_delay)
    }

    /// A jittered delay after the `failed`-th failed attempt: half the ceiling, plus a
    /// random part of the other half, so that writers who collided do not collide again.
    pub fn delay(&self, failed: u32) -> Duration {
        let ceiling = self.ceiling(failed);
        let half = ceiling / 2;
        let jitter_nanos = random_below(u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1));
        half + Duration::from_nanos(jitter_nanos)
    }
}

/// The attempts made so far under one schedule.
#[derive(Debug)]
pub struct Retry {
    policy: RetryPolicy,
    attempts: u32,
    started: Instant,
}

impl Retry {
    /// After a failed attempt (`why` it failed), sleeps before the next one; refuses,
    /// sleeping nothing, when the attempts are used up or the next one would start past
    /// the schedule's budget or the request's deadline.
    pub async fn wait(&mut self, why: impl fmt::Display) -> Result<(), Unavailable> {
        let delay = self.policy.delay(self.attempts);
        let now = Instant::now();
        let budget_end = self.started + self.policy.budget;
        let end = deadline().map_or(budget_end, |deadline| deadline.min(budget_end));
        if self.attempts >= self.policy.max_attempts || now + delay > end {
            let elapsed = now - self.started;
            return Err(Unavailable(format!(
                "{}: gave up after {} attempts in {} ms; last failure: {why}",
                self.policy.name,
                self.attempts,
                elapsed.as_millis()
            )));
        }
        tokio::time::sleep(delay).await;
        self.attempts += 1;
        Ok(())
    }

    /// Attempts made, the current one included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// A uniformly random number below `bound` (at least 1), from the operating system's
/// random source by way of a version 4 UUID.
pub fn random_below(bound: u64) -> u64 {
    (uuid::Uuid::new_v4().as_u128() % u128::from(bound.max(1))) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUICK: RetryPolicy = RetryPolicy {
        name: "test",
        max_attempts: 4,
        first_delay: Duration::from_millis(2),
        max_delay: Duration::from_millis(5),
        budget: Duration::from_secs(5),
    };

    #[test]
    fn ceilings_double_up_to_the_cap_and_delays_stay_within_them() {
        let ceilings: Vec<u128> = (1..=5).map(|failed| QUICK.ceiling(failed).as_millis()).collect();
        assert_eq!(ceilings, [2, 4, 5, 5, 5]);
        for failed in 1..=5 {
            for _ in 0..50 {
                let delay = QUICK.delay(failed);
                let ceiling = QUICK.ceiling(failed);
                assert!(delay >= ceiling / 2 && delay <= ceiling, "{delay:?} for ceiling {ceiling:?}");
            }
        }
    }

    #[tokio::test]
    async fn attempts_are_capped() {
        let mut retry = QUICK.start();
        for _ in 1..QUICK.max_attempts {
            retry.wait("boom").await.unwrap();
        }
        assert_eq!(retry.attempts(), 4);
        let spent = retry.wait("boom").await.unwrap_err();
        assert!(spent.0.contains("gave up after 4 attempts") && spent.0.contains("boom"), "{spent}");
    }

    #[tokio::test]
    async fn the_budget_stops_retries_before_a_sleep_would_pass_it() {
        let slow = RetryPolicy { max_attempts: 1000, budget: Duration::from_millis(20), ..QUICK };
        let started = Instant::now();
        let mut retry = slow.start();
        while retry.wait("boom").await.is_ok() {}
        assert!(started.elapsed() <= Duration::from_millis(20) + Duration::from_millis(15));
    }

    #[tokio::test]
    async fn a_request_deadline_cuts_every_schedule_short() {
        let long = RetryPolicy { max_attempts: 1000, budget: Duration::from_secs(60), ..QUICK };
        let end = Instant::now() + Duration::from_millis(20);
        let spent = with_deadline(end, async {
            let mut retry = long.start();
            while retry.wait("boom").await.is_ok() {}
            Instant::now()
        })
        .await;
        assert!(spent <= end + Duration::from_millis(15));
        assert!(deadline().is_none(), "the deadline belongs to the scope only");
    }

    #[tokio::test]
    async fn while_unavailable_tries_again_only_what_may_pass_and_only_as_often_as_allowed() {
        let calls = std::sync::atomic::AtomicU32::new(0);
        let count = || calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        // Unavailable twice, then done: done, after three attempts.
        let done = while_unavailable(QUICK, || async {
            match count() {
                call @ 1..=2 => Err(anyhow::Error::new(Unavailable(format!("throttled {call}"))).context("writing")),
                call => Ok(call),
            }
        })
        .await;
        assert_eq!(done.unwrap(), 3);
        // Another failure ends it at once, as it is.
        calls.store(0, std::sync::atomic::Ordering::SeqCst);
        let refused = while_unavailable(QUICK, || async {
            count();
            anyhow::Result::<()>::Err(anyhow::anyhow!("the seed names no organization"))
        })
        .await;
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(refused.unwrap_err().to_string(), "the seed names no organization");
        // Unavailable every time: the schedule's attempts, then its own Unavailable
        // naming the last failure.
        calls.store(0, std::sync::atomic::Ordering::SeqCst);
        let down = while_unavailable(QUICK, || async {
            count();
            anyhow::Result::<()>::Err(anyhow::Error::new(Unavailable("DynamoDB did not serve".into())))
        })
        .await
        .unwrap_err();
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), QUICK.max_attempts);
        assert!(is_unavailable(&down), "{down:#}");
        let message = down.to_string();
        assert!(
            message.contains("gave up after 4 attempts") && message.contains("DynamoDB did not serve"),
            "{message}"
        );
    }

    #[test]
    fn unavailable_is_found_anywhere_in_a_chain() {
        let error = anyhow::Error::new(Unavailable("down".into())).context("reading").context("listing");
        assert!(is_unavailable(&error));
        assert!(!is_unavailable(&anyhow::anyhow!("other")));
    }
}
