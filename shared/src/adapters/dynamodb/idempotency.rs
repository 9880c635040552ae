//! Idempotency keys in DynamoDB: an item of the organization's partition, claimed by a
//! conditional put that hands back the holder when it loses, and settled by a put
//! conditional on the claim's token. `expires_s` is the table's TTL attribute.

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::table::{failure, n, number, optional_number, optional_text, s, text, unless_condition_failed, Item};
use super::{keys, DynamoDb};
use crate::domain::idempotency::IdempotencyRepo;
use crate::domain::idempotency::{KeptAnswer, KeyRecord, KeyState};
use crate::domain::ids::OrganizationId;
use crate::domain::time::Timestamp;

/// A claim may take the key: none stored, expired, or a claim whose lease ran out.
const KEY_FREE: &str =
    "attribute_not_exists(pk) OR expires_ms <= :now OR (attribute_not_exists(#status) AND lease_until_ms <= :now)";

fn item_of(record: &KeyRecord) -> Item {
    let mut item = keys::idempotency_key(record.organization, &record.key);
    item.extend([
        ("key".to_owned(), s(&record.key)),
        ("fingerprint".to_owned(), s(&record.fingerprint)),
        ("expires_ms".to_owned(), n(record.expires_at.unix_millis())),
        ("expires_s".to_owned(), n(record.expires_at.unix_millis() / 1000)),
    ]);
    match &record.state {
        KeyState::Claimed { token, lease_until } => {
            item.extend([("token".to_owned(), s(token)), ("lease_until_ms".to_owned(), n(lease_until.unix_millis()))])
        }
        KeyState::Answered(answer) => {
            item.extend([("status".to_owned(), n(answer.status)), ("body".to_owned(), s(&answer.body))])
        }
    }
    item
}

fn record_from(organization: OrganizationId, item: &Item) -> anyhow::Result<KeyRecord> {
    let state = match optional_number::<u16>(item, "status")? {
        Some(status) => KeyState::Answered(KeptAnswer { status, body: text(item, "body")?.to_owned() }),
        None => KeyState::Claimed {
            token: optional_text(item, "token")?.unwrap_or_default().to_owned(),
            lease_until: Timestamp::from_unix_millis(number(item, "lease_until_ms")?),
        },
    };
    Ok(KeyRecord {
        organization,
        key: text(item, "key")?.to_owned(),
        fingerprint: text(item, "fingerprint")?.to_owned(),
        state,
        expires_at: Timestamp::from_unix_millis(number(item, "expires_ms")?),
    })
}

#[async_trait]
impl IdempotencyRepo for DynamoDb {
    async fn claim_key(&self, record: &KeyRecord, now: Timestamp) -> anyhow::Result<Option<KeyRecord>> {
        let claimed = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item_of(record)))
            .condition_expression(KEY_FREE)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":now", n(now.unix_millis()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match claimed {
            Ok(_) => Ok(None),
            Err(error) => match error.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(failed)) => match failed.item() {
                    Some(holder) => record_from(record.organization, holder).map(Some),
                    None => anyhow::bail!("a lost idempotency claim came back without the key's holder"),
                },
                _ => Err(failure(error, "claiming an idempotency key")),
            },
        }
    }

    async fn get_key(&self, organization: OrganizationId, key: &str) -> anyhow::Result<Option<KeyRecord>> {
        let item = self.get(keys::idempotency_key(organization, key), "reading an idempotency key").await?;
        item.as_ref().map(|item| record_from(organization, item)).transpose()
    }

    async fn settle_key(&self, claim: &KeyRecord, answer: Option<&KeptAnswer>) -> anyhow::Result<()> {
        let KeyState::Claimed { token, .. } = &claim.state else { anyhow::bail!("only a claim is settled") };
        // Released: the claim lapses at once (a put, not a delete: one action fewer to grant).
        let state = match answer {
            Some(answer) => KeyState::Answered(answer.clone()),
            None => KeyState::Claimed { token: token.clone(), lease_until: Timestamp::from_unix_millis(0) },
        };
        let settled = KeyRecord { state, ..claim.clone() };
        let written = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item_of(&settled)))
            .condition_expression("#token = :token")
            .expression_attribute_names("#token", "token")
            .expression_attribute_values(":token", s(token))
            .send()
            .await;
        unless_condition_failed(written, "settling an idempotency key")?;
        Ok(())
    }

    async fn renew_key(&self, claim: &KeyRecord, lease_until: Timestamp) -> anyhow::Result<bool> {
        let KeyState::Claimed { token, .. } = &claim.state else { anyhow::bail!("only a claim is renewed") };
        // A put, like the claim and the settle: no further action to grant.
        let renewed = KeyRecord { state: KeyState::Claimed { token: token.clone(), lease_until }, ..claim.clone() };
        let written = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item_of(&renewed)))
            .condition_expression("#token = :token AND attribute_not_exists(#status)")
            .expression_attribute_names("#token", "token")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":token", s(token))
            .send()
            .await;
        Ok(unless_condition_failed(written, "renewing an idempotency claim")?.is_some())
    }
}
