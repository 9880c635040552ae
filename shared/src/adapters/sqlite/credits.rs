//! Credit accounts in SQLite: one row per organization (the account as a JSON document
//! under its write count), the ledger's entries keyed by the write and their place in
//! it, the payments applied once, and checkouts. A write is conditional on the count it
//! read, inside the caller's transaction (a run's claim writes it with the run).

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use super::{Db, Sqlite};
use crate::domain::credits::plans::PlanId;
use crate::domain::credits::{Account, AccountWrite, Checkout, CreditRepo, LedgerEntry, Written};
use crate::domain::ids::CheckoutId;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;

/// Reads the organization's account within the caller's transaction.
pub(super) fn read_account(connection: &Connection, organization: OrganizationId) -> anyhow::Result<Account> {
    let row: Option<(i64, String)> = connection
        .prepare_cached("SELECT seq, document FROM credit_accounts WHERE organization_id = ?1")
        .db("reading a credit account")?
        .query_row([organization.to_string()], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
        .db("reading a credit account")?;
    if let Some((seq, document)) = row {
        return Ok(Account { seq: seq as u64, ..serde_json::from_str(&document)? });
    }
    // Never opened: as the organization's record has it (seq 0; opened on first use).
    let record: Option<(String, i64, String)> = connection
        .prepare_cached("SELECT plan, credits, created_at FROM organizations WHERE id = ?1")
        .db("reading an organization")?
        .query_row([organization.to_string()], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()
        .db("reading an organization")?;
    Ok(match record {
        Some((plan, credits, created_at)) => Account::opened(
            organization,
            PlanId::parse(&plan).unwrap_or(PlanId::Free),
            credits.max(0),
            Timestamp::parse(&created_at).unwrap_or_else(|_| Timestamp::now()),
        ),
        None => Account::empty(organization, Timestamp::now()),
    })
}

/// Writes an account change inside the caller's transaction: nothing is written unless
/// the account is still at `write.expected` and its `once` event is new.
pub(super) fn write_account_in(connection: &Connection, write: &AccountWrite) -> anyhow::Result<Written> {
    let account = &write.account;
    let organization = account.organization_id.to_string();
    for once in &write.once {
        let seen: Option<i64> = connection
            .prepare_cached("SELECT 1 FROM billing_once WHERE key = ?1")
            .db("reading applied payments")?
            .query_row([once], |row| row.get(0))
            .optional()
            .db("reading applied payments")?;
        if seen.is_some() {
            return Ok(Written::AlreadyDone);
        }
    }
    let document = serde_json::to_string(account)?;
    let changed = if write.expected == 0 {
        connection
            .prepare_cached(
                "INSERT INTO credit_accounts (organization_id, seq, document) VALUES (?1, ?2, ?3)
                 ON CONFLICT (organization_id) DO NOTHING",
            )
            .db("opening a credit account")?
            .execute(params![organization, account.seq as i64, document])
            .db("opening a credit account")?
    } else {
        connection
            .prepare_cached(
                "UPDATE credit_accounts SET seq = ?2, document = ?3 WHERE organization_id = ?1 AND seq = ?4",
            )
            .db("writing a credit account")?
            .execute(params![organization, account.seq as i64, document, write.expected as i64])
            .db("writing a credit account")?
    };
    if changed == 0 {
        return Ok(Written::Conflict);
    }
    let mut insert = connection
        .prepare_cached("INSERT INTO credit_ledger (organization_id, seq, position, document) VALUES (?1, ?2, ?3, ?4)")
        .db("recording ledger entries")?;
    for entry in &write.entries {
        insert
            .execute(params![organization, entry.seq as i64, entry.position as i64, serde_json::to_string(entry)?])
            .db("recording ledger entries")?;
    }
    for once in &write.once {
        connection
            .prepare_cached("INSERT INTO billing_once (key, organization_id) VALUES (?1, ?2)")
            .db("recording an applied payment")?
            .execute(params![once, organization])
            .db("recording an applied payment")?;
    }
    Ok(Written::Done)
}

#[async_trait]
impl CreditRepo for Sqlite {
    async fn account(&self, organization: OrganizationId) -> anyhow::Result<Account> {
        self.call(move |connection| read_account(connection, organization)).await
    }

    async fn write_account(&self, write: &AccountWrite) -> anyhow::Result<Written> {
        let write = write.clone();
        self.write(move |transaction| write_account_in(transaction, &write)).await
    }

    async fn ledger(
        &self,
        organization: OrganizationId,
        after: Option<(u64, u32)>,
        limit: usize,
    ) -> anyhow::Result<Vec<LedgerEntry>> {
        let (seq, position) = after.map_or((i64::MAX, i64::MAX), |(seq, position)| (seq as i64, position as i64));
        self.call(move |connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT document FROM credit_ledger WHERE organization_id = ?1 AND (seq, position) < (?2, ?3)
                     ORDER BY seq DESC, position DESC LIMIT ?4",
                )
                .db("reading the ledger")?;
            let documents = statement
                .query_map(params![organization.to_string(), seq, position, limit as i64], |row| {
                    row.get::<_, String>(0)
                })
                .db("reading the ledger")?
                .collect::<Result<Vec<_>, _>>()
                .db("reading the ledger")?;
            documents.iter().map(|document| Ok(serde_json::from_str(document)?)).collect()
        })
        .await
    }

    async fn put_checkout(&self, checkout: &Checkout) -> anyhow::Result<()> {
        let (id, organization, document) =
            (checkout.id.to_string(), checkout.organization_id.to_string(), serde_json::to_string(checkout)?);
        self.write(move |transaction| {
            transaction
                .prepare_cached(
                    "INSERT INTO checkouts (id, organization_id, document) VALUES (?1, ?2, ?3)
                     ON CONFLICT (id) DO UPDATE SET document = excluded.document",
                )
                .db("storing a checkout")?
                .execute(params![id, organization, document])
                .db("storing a checkout")
                .map(drop)
        })
        .await
    }

    async fn checkout(&self, id: CheckoutId) -> anyhow::Result<Option<Checkout>> {
        self.call(move |connection| {
            let document: Option<String> = connection
                .prepare_cached("SELECT document FROM checkouts WHERE id = ?1")
                .db("reading a checkout")?
                .query_row([id.to_string()], |row| row.get(0))
                .optional()
                .db("reading a checkout")?;
            document.map(|document| Ok(serde_json::from_str(&document)?)).transpose()
        })
        .await
    }
}
