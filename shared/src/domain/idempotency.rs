//! `Idempotency-Key` on the POSTs that create something: the first successful answer
//! to a key is kept 24 hours and given again to every request that repeats it (same
//! method, path and body bytes); the same key with another request is refused (422).
//! Keys belong to an organization.
//!
//! A request claims its key before it runs, so concurrent repeats wait for the first
//! one's answer instead of creating again. Only a success spends a key: after a refusal
//! or a failure of ours the claim is released and a corrected request may use the key.
//! A claim is renewed while its request runs ([`renew_while`]), so however long the
//! request takes, a repeat waits for it; a claim whose process died is taken over once
//! its lease ([`CLAIM_LEASE`]) runs out.

use async_trait::async_trait;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::time::Timestamp;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Clock;

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// The header that marks a repeated answer.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// Longest key accepted.
pub const MAX_KEY_CHARS: usize = 255;
/// How long an answer is kept.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a claim holds the key without being renewed: a request renews its claim
/// every third of this while it runs, so only a claim whose process died lapses.
pub const CLAIM_LEASE: Duration = Duration::from_secs(120);
/// How long a repeat waits for the first request's answer: short of the request's own
/// budget, so that a repeat that takes the key over still has time to run.
pub const MAX_WAIT: Duration = Duration::from_secs(10);
/// How often a waiting repeat reads the key again: from the first step, doubling to the
/// last.
const WAIT_STEPS: (Duration, Duration) = (Duration::from_millis(25), Duration::from_millis(400));
/// Largest answer kept: the creating endpoints answer a few KB; an answer beyond this is
/// given once and the key released.
pub const MAX_KEPT_BODY: usize = 256 * 1024;

/// An answer, as kept for repeats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptAnswer {
    pub status: u16,
    pub body: String,
}

/// What a key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// A request holds it until `lease_until`.
    Claimed {
        token: String,
        lease_until: Timestamp,
    },
    Answered(KeptAnswer),
}

/// One organization's use of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecord {
    pub organization: OrganizationId,
    /// The key as the caller sent it.
    pub key: String,
    /// SHA-256 (hex) of the method, path and body of the request that claimed it.
    pub fingerprint: String,
    pub state: KeyState,
    pub expires_at: Timestamp,
}

impl KeyRecord {
    /// The token of the claim that holds the key, while it is claimed (not answered).
    pub fn token(&self) -> Option<&str> {
        match &self.state {
            KeyState::Claimed { token, .. } => Some(token),
            KeyState::Answered(_) => None,
        }
    }

    /// Whether the record still holds its key at `now`: unexpired, and answered or
    /// claimed by a request whose lease runs.
    pub fn holds(&self, now: Timestamp) -> bool {
        self.expires_at > now
            && match &self.state {
                KeyState::Answered(_) => true,
                KeyState::Claimed { lease_until, .. } => *lease_until > now,
            }
    }
}

/// Checks a key's form: 1 to 255 visible ASCII characters.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_CHARS || !key.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_CHARS} visible ASCII characters (a UUID is a good key)"
        ));
    }
    Ok(())
}

/// What identifies a request for its key: method, path and the exact body bytes.
pub fn fingerprint(method: &str, path: &str, body: &[u8]) -> String {
    let mut digest = Sha256::new();
    digest.update(method.as_bytes());
    digest.update(b" ");
    digest.update(path.as_bytes());
    digest.update(b"\n");
    digest.update(body);
    hex::encode(digest.finalize())
}

/// How a request with a key goes on.
#[derive(Debug, PartialEq, Eq)]
pub enum Begun {
    /// This request holds the key: run it, then [`finish`].
    Run(KeyClaim),
    /// The key's first request answered this: give it again.
    Replay(KeptAnswer),
    /// The key was used with another request (422).
    Mismatch,
    /// The key's first request still runs after [`MAX_WAIT`] (409).
    StillRunning,
}

/// A held key: the claim as stored.
#[derive(Debug, PartialEq, Eq)]
pub struct KeyClaim(KeyRecord);

/// Claims `key` for a request, or finds the answer of the request that holds it
/// (waiting, bounded, while that one still runs).
pub async fn begin(
    repo: &dyn IdempotencyRepo,
    clock: &dyn Clock,
    lease: Duration,
    organization: OrganizationId,
    key: &str,
    fingerprint: &str,
) -> anyhow::Result<Begun> {
    let waited_until = tokio::time::Instant::now() + MAX_WAIT;
    let mut step = WAIT_STEPS.0;
    loop {
        let now = clock.now();
        let record = KeyRecord {
            organization,
            key: key.to_owned(),
            fingerprint: fingerprint.to_owned(),
            state: KeyState::Claimed { token: uuid::Uuid::new_v4().to_string(), lease_until: now.after(lease) },
            expires_at: now.after(REMEMBERED_FOR),
        };
        let mut holder = match repo.claim_key(&record, now).await? {
            None => return Ok(Begun::Run(KeyClaim(record))),
            // This claim itself: its write was done but the store's answer lost (a 500
            // after the write), and the client's retry found it.
            Some(holder) if holder.token() == record.token() => return Ok(Begun::Run(KeyClaim(record))),
            Some(holder) => holder,
        };
        // Held by a running request: read (not write) until it answers or lets go.
        loop {
            if holder.fingerprint != fingerprint {
                return Ok(Begun::Mismatch);
            }
            if let KeyState::Answered(answer) = holder.state {
                return Ok(Begun::Replay(answer));
            }
            if tokio::time::Instant::now() + step > waited_until {
                return Ok(Begun::StillRunning);
            }
            tokio::time::sleep(step).await;
            step = (step * 2).min(WAIT_STEPS.1);
            match repo.get_key(organization, key).await? {
                Some(read) if read.holds(clock.now()) => holder = read,
                // Released, lapsed or expired: claim it.
                _ => break,
            }
        }
    }
}

/// Runs `request` while renewing `claim` every third of `lease`, so that the key stays
/// held for as long as the request runs. A renewal that fails is logged and tried again
/// at the next step (the claim still holds until its lease ends); a claim another request
/// took over is no longer renewed.
pub async fn renew_while<T>(
    repo: &dyn IdempotencyRepo,
    clock: &dyn Clock,
    lease: Duration,
    claim: &KeyClaim,
    request: impl std::future::Future<Output = T>,
) -> T {
    let renew = async {
        let mut held = true;
        while held {
            tokio::time::sleep(lease / 3).await;
            match repo.renew_key(&claim.0, clock.now().after(lease)).await {
                Ok(still) => held = still,
                Err(error) => {
                    tracing::warn!(error = %format!("{error:#}"), "an idempotency claim could not be renewed")
                }
            }
        }
        tracing::warn!(key = %claim.0.key, "an idempotency claim was taken over while its request ran");
        std::future::pending::<()>().await
    };
    tokio::select! {
        answer = request => answer,
        () = renew => unreachable!("renewing never ends"),
    }
}

/// Keeps a success for repeats; releases the key after anything else (a refusal or a
/// failure of ours), so that the caller may try again with it.
pub async fn finish(repo: &dyn IdempotencyRepo, claim: &KeyClaim, answer: KeptAnswer) -> anyhow::Result<()> {
    let keep = (200..300).contains(&answer.status) && answer.body.len() <= MAX_KEPT_BODY;
    let answer = keep.then_some(answer);
    repo.settle_key(&claim.0, answer.as_ref()).await
}

/// Organizations' idempotency keys (see [`crate::domain::idempotency`]).
#[async_trait]
pub trait IdempotencyRepo: Send + Sync {
    /// Stores `record` (a claim) unless a record that still holds its key at `now`
    /// ([`KeyRecord::holds`]) is stored for the organization and key: then returns that
    /// one and stores nothing. Atomic: of concurrent claims one is stored.
    async fn claim_key(&self, record: &KeyRecord, now: Timestamp) -> anyhow::Result<Option<KeyRecord>>;
    /// The organization's record of `key`, whatever its state (a consistent read).
    async fn get_key(&self, organization: OrganizationId, key: &str) -> anyhow::Result<Option<KeyRecord>>;
    /// Ends `claim` (a record this process stored with [`Self::claim_key`]): keeps
    /// `answer` for repeats, or (None) releases the key. Does nothing when another claim
    /// took the key over meanwhile (its token differs).
    async fn settle_key(&self, claim: &KeyRecord, answer: Option<&KeptAnswer>) -> anyhow::Result<()>;
    /// Moves the lease of `claim` (still held under its token, unanswered) to
    /// `lease_until`; false when it is no longer this claim's.
    async fn renew_key(&self, claim: &KeyRecord, lease_until: Timestamp) -> anyhow::Result<bool>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_short_visible_ascii() {
        assert!(check_key("4f1c2a8e-0b7d-4a57-9d1e-2f1b3c4d5e6f").is_ok());
        assert!(check_key("order-17").is_ok());
        for bad in ["", "order 17", " ", "tab\there", "é", &"k".repeat(256)] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_fingerprint_covers_method_path_and_body() {
        let base = fingerprint("POST", "/agent/a/run", b"{}");
        assert_eq!(base, fingerprint("POST", "/agent/a/run", b"{}"));
        assert_ne!(base, fingerprint("POST", "/agent/b/run", b"{}"));
        assert_ne!(base, fingerprint("POST", "/agent/a/run", b"{ }"));
        assert_ne!(base, fingerprint("PUT", "/agent/a/run", b"{}"));
    }

    #[test]
    fn a_record_holds_its_key_until_it_expires_or_its_claim_lapses() {
        let now = Timestamp::from_unix_millis(1_000_000);
        let answered = KeyRecord {
            organization: OrganizationId::new_v4(),
            key: "k".into(),
            fingerprint: "f".into(),
            state: KeyState::Answered(KeptAnswer { status: 200, body: "{}".into() }),
            expires_at: now.after(Duration::from_secs(1)),
        };
        assert!(answered.holds(now));
        assert!(!answered.holds(now.after(Duration::from_secs(1))));
        let claimed = KeyRecord {
            state: KeyState::Claimed { token: "t".into(), lease_until: now.after(Duration::from_millis(10)) },
            ..answered
        };
        assert!(claimed.holds(now));
        assert!(!claimed.holds(now.after(Duration::from_millis(10))));
    }
}
