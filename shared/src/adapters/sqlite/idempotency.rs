//! Idempotency keys in SQLite: a claim is a row written in a write transaction that
//! first reads the key's row, so of concurrent claims one wins. Expired rows are removed
//! a few at a time by later claims.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use super::{Db, Sqlite};
use crate::domain::idempotency::IdempotencyRepo;
use crate::domain::idempotency::{KeptAnswer, KeyRecord, KeyState};
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;

/// Expired keys a claim removes at most.
const SWEEP: i64 = 50;

type Row = (String, Option<String>, Option<i64>, Option<i64>, Option<String>, i64);

fn record_of(organization: OrganizationId, key: &str, row: Row) -> anyhow::Result<KeyRecord> {
    let (fingerprint, token, lease_until, status, body, expires) = row;
    let at = |millis: i64| Timestamp::from_unix_millis(millis.max(0) as u64);
    let state = match (status, body, token, lease_until) {
        (Some(status), Some(body), _, _) => {
            KeyState::Answered(KeptAnswer { status: u16::try_from(status).unwrap_or(500), body })
        }
        (_, _, Some(token), Some(lease_until)) => KeyState::Claimed { token, lease_until: at(lease_until) },
        _ => anyhow::bail!("the stored idempotency key {key:?} is neither claimed nor answered"),
    };
    Ok(KeyRecord { organization, key: key.to_owned(), fingerprint, state, expires_at: at(expires) })
}

#[async_trait]
impl IdempotencyRepo for Sqlite {
    async fn claim_key(&self, record: &KeyRecord, now: Timestamp) -> anyhow::Result<Option<KeyRecord>> {
        let record = record.clone();
        let KeyState::Claimed { token, lease_until } = &record.state else {
            anyhow::bail!("a claim must be in the claimed state");
        };
        let (token, lease_until) = (token.clone(), lease_until.unix_millis() as i64);
        self.write(move |transaction| {
            let organization = record.organization.to_string();
            let now_ms = now.unix_millis() as i64;
            transaction
                .prepare_cached(
                    "DELETE FROM idempotency_keys WHERE rowid IN
                     (SELECT rowid FROM idempotency_keys WHERE expires_ms <= ?1 LIMIT ?2)",
                )
                .db("removing expired idempotency keys")?
                .execute(params![now_ms, SWEEP])
                .db("removing expired idempotency keys")?;
            let stored: Option<Row> = transaction
                .prepare_cached(
                    "SELECT fingerprint, token, lease_until_ms, status, body, expires_ms FROM idempotency_keys
                     WHERE organization_id = ?1 AND key = ?2",
                )
                .db("reading an idempotency key")?
                .query_row(params![organization, record.key], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
                })
                .optional()
                .db("reading an idempotency key")?;
            if let Some(row) = stored {
                let holder = record_of(record.organization, &record.key, row)?;
                if holder.holds(now) {
                    return Ok(Some(holder));
                }
            }
            transaction
                .prepare_cached(
                    "INSERT INTO idempotency_keys
                       (organization_id, key, fingerprint, token, lease_until_ms, status, body, expires_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL, ?6)
                     ON CONFLICT (organization_id, key) DO UPDATE SET fingerprint = ?3, token = ?4,
                       lease_until_ms = ?5, status = NULL, body = NULL, expires_ms = ?6",
                )
                .db("claiming an idempotency key")?
                .execute(params![
                    organization,
                    record.key,
                    record.fingerprint,
                    token,
                    lease_until,
                    record.expires_at.unix_millis() as i64
                ])
                .db("claiming an idempotency key")?;
            Ok(None)
        })
        .await
    }

    async fn get_key(&self, organization: OrganizationId, key: &str) -> anyhow::Result<Option<KeyRecord>> {
        let key = key.to_owned();
        self.call(move |connection| {
            let row: Option<Row> = connection
                .prepare_cached(
                    "SELECT fingerprint, token, lease_until_ms, status, body, expires_ms FROM idempotency_keys
                     WHERE organization_id = ?1 AND key = ?2",
                )
                .db("reading an idempotency key")?
                .query_row(params![organization.to_string(), key], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
                })
                .optional()
                .db("reading an idempotency key")?;
            row.map(|row| record_of(organization, &key, row)).transpose()
        })
        .await
    }

    async fn settle_key(&self, claim: &KeyRecord, answer: Option<&KeptAnswer>) -> anyhow::Result<()> {
        let KeyState::Claimed { token, .. } = &claim.state else { anyhow::bail!("only a claim is settled") };
        let (organization, key, token, answer) =
            (claim.organization.to_string(), claim.key.clone(), token.clone(), answer.cloned());
        self.write(move |transaction| {
            match answer {
                Some(answer) => transaction
                    .prepare_cached(
                        "UPDATE idempotency_keys SET status = ?4, body = ?5, token = NULL, lease_until_ms = NULL
                         WHERE organization_id = ?1 AND key = ?2 AND token = ?3",
                    )
                    .db("keeping an idempotent answer")?
                    .execute(params![organization, key, token, answer.status, answer.body])
                    .db("keeping an idempotent answer")?,
                None => transaction
                    .prepare_cached(
                        "DELETE FROM idempotency_keys WHERE organization_id = ?1 AND key = ?2 AND token = ?3",
                    )
                    .db("releasing an idempotency key")?
                    .execute(params![organization, key, token])
                    .db("releasing an idempotency key")?,
            };
            Ok(())
        })
        .await
    }

    async fn renew_key(&self, claim: &KeyRecord, lease_until: Timestamp) -> anyhow::Result<bool> {
        let KeyState::Claimed { token, .. } = &claim.state else { anyhow::bail!("only a claim is renewed") };
        let (organization, key, token) = (claim.organization.to_string(), claim.key.clone(), token.clone());
        self.write(move |transaction| {
            let renewed = transaction
                .prepare_cached(
                    "UPDATE idempotency_keys SET lease_until_ms = ?4
                     WHERE organization_id = ?1 AND key = ?2 AND token = ?3 AND status IS NULL",
                )
                .db("renewing an idempotency claim")?
                .execute(params![organization, key, token, lease_until.unix_millis() as i64])
                .db("renewing an idempotency claim")?;
            Ok(renewed == 1)
        })
        .await
    }
}
