//! Credit accounts in DynamoDB: the account item (a JSON document under its write
//! count), one item per ledger entry in the organization's partition (key order is
//! ledger order), an item per payment applied, and checkouts. An account write is one
//! transaction: the account under `seq = :expected`, its entries, and its payment's item
//! under `attribute_not_exists`; a run's claim adds the same parts to its own transaction.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use super::table::{condition_failed, n, number, optional_text, s, text, Item, TransactPart};
use super::{keys, DynamoDb};
use crate::domain::credits::plans::PlanId;
use crate::domain::credits::{Account, AccountWrite, Checkout, CreditRepo, LedgerEntry, Written};
use crate::domain::ids::CheckoutId;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;

/// The transaction parts of an account write: the account (index 0), its entries, and
/// its payments' items last. `token` marks the account item, so that a write whose answer
/// was lost can be recognised.
pub(super) fn account_parts(table: &str, write: &AccountWrite, token: &str) -> anyhow::Result<Vec<TransactWriteItem>> {
    let account = &write.account;
    let mut item = keys::account(account.organization_id);
    item.extend([
        ("seq".to_owned(), n(account.seq)),
        ("document".to_owned(), s(serde_json::to_string(account)?)),
        ("write_token".to_owned(), s(token)),
    ]);
    let put = Put::builder().table_name(table).set_item(Some(item));
    let put = match write.expected {
        0 => put.condition_expression("attribute_not_exists(pk)"),
        expected => put.condition_expression("seq = :expected").expression_attribute_values(":expected", n(expected)),
    };
    let mut parts = vec![put.build().into_part()?];
    for entry in &write.entries {
        let mut item = keys::ledger_entry(account.organization_id, entry.seq, entry.position);
        item.insert("document".to_owned(), s(serde_json::to_string(entry)?));
        parts.push(Put::builder().table_name(table).set_item(Some(item)).build().into_part()?);
    }
    for once in &write.once {
        let mut item = keys::billing_once(once);
        item.insert("organization_id".to_owned(), s(account.organization_id.to_string()));
        let put =
            Put::builder().table_name(table).set_item(Some(item)).condition_expression("attribute_not_exists(pk)");
        parts.push(put.build().into_part()?);
    }
    Ok(parts)
}

fn account_of(organization: OrganizationId, item: &Item) -> anyhow::Result<Account> {
    let account: Account = serde_json::from_str(text(item, "document")?)?;
    Ok(Account { seq: number(item, "seq")?, organization_id: organization, ..account })
}

impl DynamoDb {
    /// Whether the account item carries this write: its answer was lost and the SDK's
    /// retry met the count it had written.
    async fn account_written(&self, write: &AccountWrite, token: &str) -> anyhow::Result<bool> {
        let item = self.get(keys::account(write.account.organization_id), "reading a credit account").await?;
        Ok(item.is_some_and(|item| {
            optional_text(&item, "write_token").ok().flatten() == Some(token)
                && number::<u64>(&item, "seq").ok() == Some(write.account.seq)
        }))
    }
}

#[async_trait]
impl CreditRepo for DynamoDb {
    async fn account(&self, organization: OrganizationId) -> anyhow::Result<Account> {
        if let Some(item) = self.get(keys::account(organization), "reading a credit account").await? {
            return account_of(organization, &item);
        }
        // Never opened: as the organization's item has it (seq 0; opened on first use).
        let Some(record) = self.get(keys::organization(organization), "reading an organization").await? else {
            return Ok(Account::empty(organization, Timestamp::now()));
        };
        let plan = optional_text(&record, "plan")?.and_then(PlanId::parse).unwrap_or(PlanId::Free);
        let credits: i64 = number(&record, "credits").unwrap_or(0);
        let created = optional_text(&record, "created_at")?.and_then(|text| Timestamp::parse(text).ok());
        Ok(Account::opened(organization, plan, credits.max(0), created.unwrap_or_else(Timestamp::now)))
    }

    async fn write_account(&self, write: &AccountWrite) -> anyhow::Result<Written> {
        let token = uuid::Uuid::new_v4().to_string();
        let parts = account_parts(&self.table, write, &token)?;
        // The payments' items are the last parts.
        let payments = parts.len() - write.once.len()..parts.len();
        anyhow::ensure!(parts.len() <= super::runs::TRANSACTION_ITEMS, "an account write of {} items", parts.len());
        match self.transact(parts, "writing a credit account").await? {
            Ok(()) => Ok(Written::Done),
            Err(reasons) if payments.clone().any(|at| condition_failed(reasons.get(at))) => Ok(Written::AlreadyDone),
            Err(reasons) if condition_failed(reasons.first()) => match self.account_written(write, &token).await? {
                true => Ok(Written::Done),
                false => Ok(Written::Conflict),
            },
            Err(reasons) => anyhow::bail!("writing the credit account was cancelled: {reasons:?}"),
        }
    }

    async fn ledger(
        &self,
        organization: OrganizationId,
        after: Option<(u64, u32)>,
        limit: usize,
    ) -> anyhow::Result<Vec<LedgerEntry>> {
        // Keys at or below `after`'s (strictly below it is kept), newest first.
        let high = match after {
            Some((seq, position)) => format!("{}{seq:020}#{position:06}", keys::LEDGER_PREFIX),
            None => format!("{}~", keys::LEDGER_PREFIX),
        };
        let mut request = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :low AND :high")
            .expression_attribute_values(":pk", s(keys::organization_pk(organization)))
            .expression_attribute_values(":low", s(keys::LEDGER_PREFIX))
            .expression_attribute_values(":high", s(high))
            .scan_index_forward(false)
            .consistent_read(true)
            .limit(limit as i32 + 1);
        let mut entries = Vec::new();
        loop {
            let page =
                request.clone().send().await.map_err(|error| super::table::failure(error, "reading the ledger"))?;
            for item in page.items() {
                let entry: LedgerEntry = serde_json::from_str(text(item, "document")?)?;
                let before = after.is_none_or(|after| (entry.seq, entry.position) < after);
                if before && entries.len() < limit {
                    entries.push(entry);
                }
            }
            match page.last_evaluated_key {
                Some(key) if entries.len() < limit => request = request.set_exclusive_start_key(Some(key)),
                _ => return Ok(entries),
            }
        }
    }

    async fn put_checkout(&self, checkout: &Checkout) -> anyhow::Result<()> {
        let mut item = keys::checkout(checkout.id);
        item.extend([
            ("organization_id".to_owned(), s(checkout.organization_id.to_string())),
            ("document".to_owned(), s(serde_json::to_string(checkout)?)),
        ]);
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|error| super::table::failure(error, "storing a checkout"))?;
        Ok(())
    }

    async fn checkout(&self, id: CheckoutId) -> anyhow::Result<Option<Checkout>> {
        let item = self.get(keys::checkout(id), "reading a checkout").await?;
        item.map(|item| Ok(serde_json::from_str(text(&item, "document")?)?)).transpose()
    }
}
