//! DynamoDB adapter: one table, keys that start with the organization ID, conditional
//! writes and transactions for every limit.
//!
//! | item          | pk                         | sk                 |
//! |---------------|----------------------------|--------------------|
//! | API key       | `APIKEY#{sha256}`          | `APIKEY`           |
//! | organization  | `ORG#{org}`                | `ORG`              |
//! | shared store  | `ORG#{org}`                | `STORE#{store}`    |
//! | store entry   | `ORG#{org}#STORE#{store}`  | `ENTRY#{entry_id}` |
//! | workspace     | `ORG#{org}`                | `WORKSPACE#{id}`   |
//! | agent + graph | `ORG#{org}`                | `AGENT#{id}` (v7 IDs: key order is creation order) |
//! | upload/asset  | `ORG#{org}`                | `UPLOAD#{id}`      |

mod agents;
mod bulk;
mod identity;
mod shared_stores;
mod uploads;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CancellationReason, KeySchemaElement, KeyType, ScalarAttributeType,
    TransactWriteItem,
};
use aws_sdk_dynamodb::Client;

use super::ActionLog;
use crate::domain::time::Timestamp;

pub use aws_sdk_dynamodb::types::AttributeValue;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// Attempts at a transaction that keeps losing to concurrent writers of the same items.
const MAX_CONFLICT_ATTEMPTS: u32 = 60;

/// The DynamoDB backend; cheap to clone.
#[derive(Clone)]
pub struct DynamoDb {
    client: Client,
    table: String,
}

impl DynamoDb {
    /// Connects with the standard AWS settings of the environment (region, credentials,
    /// `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_DYNAMODB`).
    pub async fn connect(table: impl Into<String>) -> Self {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Self::from_config(&config, table)
    }

    /// Uses AWS settings loaded already (one load per process serves every client).
    pub fn from_config(config: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
        Self { client: Client::new(config), table: table.into() }
    }

    /// Wraps an already configured SDK client.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    /// The SDK client, for tools that compare against raw calls.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the table when it does not exist yet (local use; AWS gets it from SAM).
    pub async fn ensure_table(&self) -> anyhow::Result<()> {
        match self.client.describe_table().table_name(&self.table).send().await {
            Ok(_) => return Ok(()),
            Err(error) => {
                let service = error.into_service_error();
                if !service.is_resource_not_found_exception() {
                    return Err(anyhow::Error::new(service).context("describing the table"));
                }
            }
        }
        let key = |name: &str, kind: KeyType| KeySchemaElement::builder().attribute_name(name).key_type(kind).build();
        let attribute = |name: &str| {
            AttributeDefinition::builder().attribute_name(name).attribute_type(ScalarAttributeType::S).build()
        };
        let created = self
            .client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key("pk", KeyType::Hash)?)
            .key_schema(key("sk", KeyType::Range)?)
            .attribute_definitions(attribute("pk")?)
            .attribute_definitions(attribute("sk")?)
            .send()
            .await;
        if let Err(error) = created {
            let service = error.into_service_error();
            // Another process created it at the same moment: that is what we wanted.
            if !service.is_resource_in_use_exception() {
                return Err(anyhow::Error::new(service).context("creating the table"));
            }
        }
        Ok(())
    }

    /// Runs a transaction, retrying while it only loses to concurrent transactions.
    /// Returns the cancellation reasons when a condition failed.
    async fn transact(&self, items: Vec<TransactWriteItem>) -> anyhow::Result<Result<(), Vec<CancellationReason>>> {
        let mut attempt = 0;
        loop {
            let sent = self.client.transact_write_items().set_transact_items(Some(items.clone())).send().await;
            let error = match sent {
                Ok(_) => return Ok(Ok(())),
                Err(SdkError::ServiceError(context)) => context.into_err(),
                Err(other) => return Err(anyhow::Error::new(other).context("transaction")),
            };
            attempt += 1;
            match error {
                TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                    let reasons = cancelled.cancellation_reasons().to_vec();
                    let conflict = reasons.iter().any(|reason| reason.code() == Some("TransactionConflict"));
                    if !conflict || attempt >= MAX_CONFLICT_ATTEMPTS {
                        if conflict {
                            anyhow::bail!("transaction still conflicting after {attempt} attempts");
                        }
                        return Ok(Err(reasons));
                    }
                }
                TransactWriteItemsError::TransactionInProgressException(_) if attempt < MAX_CONFLICT_ATTEMPTS => {}
                other => return Err(anyhow::Error::new(other).context("transaction")),
            }
            backoff(attempt).await;
        }
    }
}

/// Maps every call to the IAM actions it needs; a transaction needs the action of each
/// of its parts, not one of its own.
#[derive(Debug)]
struct RecordActions(ActionLog);

impl aws_sdk_dynamodb::config::Intercept for RecordActions {
    fn name(&self) -> &'static str {
        "RecordActions"
    }

    fn read_before_execution(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        use aws_sdk_dynamodb::operation as op;
        let input = context.input();
        let mut actions: Vec<&str> = Vec::new();
        if let Some(transaction) = input.downcast_ref::<op::transact_write_items::TransactWriteItemsInput>() {
            for item in transaction.transact_items() {
                if item.put().is_some() {
                    actions.push("PutItem");
                }
                if item.update().is_some() {
                    actions.push("UpdateItem");
                }
                if item.delete().is_some() {
                    actions.push("DeleteItem");
                }
                if item.condition_check().is_some() {
                    actions.push("ConditionCheckItem");
                }
            }
        } else {
            let single = [
                (input.downcast_ref::<op::get_item::GetItemInput>().is_some(), "GetItem"),
                (input.downcast_ref::<op::put_item::PutItemInput>().is_some(), "PutItem"),
                (input.downcast_ref::<op::update_item::UpdateItemInput>().is_some(), "UpdateItem"),
                (input.downcast_ref::<op::delete_item::DeleteItemInput>().is_some(), "DeleteItem"),
                (input.downcast_ref::<op::query::QueryInput>().is_some(), "Query"),
                (input.downcast_ref::<op::batch_get_item::BatchGetItemInput>().is_some(), "BatchGetItem"),
                (input.downcast_ref::<op::batch_write_item::BatchWriteItemInput>().is_some(), "BatchWriteItem"),
                (input.downcast_ref::<op::describe_table::DescribeTableInput>().is_some(), "DescribeTable"),
                (input.downcast_ref::<op::create_table::CreateTableInput>().is_some(), "CreateTable"),
            ];
            actions
                .push(single.iter().find(|(matched, _)| *matched).map_or("unrecognized-operation", |(_, name)| name));
        }
        self.0.record(actions.into_iter().map(|action| format!("dynamodb:{action}")));
        Ok(())
    }
}

impl DynamoDb {
    /// A copy of this backend whose client records the IAM action of every call, so
    /// that tests can hold each function's least-privilege policy to what it really does.
    pub fn recording_actions(&self) -> (Self, ActionLog) {
        let log = ActionLog::default();
        let config = self.client.config().to_builder().interceptor(RecordActions(log.clone())).build();
        (Self { client: Client::from_conf(config), table: self.table.clone() }, log)
    }
}

/// Sleeps a jittered, growing delay before attempt `attempt + 1`.
async fn backoff(attempt: u32) {
    let ceiling_ms = (5u64 << attempt.min(6)).min(250);
    let jitter = (uuid::Uuid::new_v4().as_u128() % u128::from(ceiling_ms)) as u64;
    tokio::time::sleep(Duration::from_millis(ceiling_ms / 2 + jitter)).await;
}

/// The output of a conditional write, or None when its condition did not hold; other
/// failures are errors in the context `what`.
fn unless_condition_failed<T, E, R>(result: Result<T, SdkError<E, R>>, what: &'static str) -> anyhow::Result<Option<T>>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    use aws_sdk_dynamodb::error::ProvideErrorMetadata;
    match result {
        Ok(output) => Ok(Some(output)),
        Err(error) if error.code() == Some("ConditionalCheckFailedException") => Ok(None),
        Err(error) => Err(anyhow::Error::new(error).context(what)),
    }
}

/// True when the reason says a condition of that item failed.
fn condition_failed(reason: Option<&CancellationReason>) -> bool {
    reason.and_then(CancellationReason::code) == Some("ConditionalCheckFailed")
}

fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn key(pk: String, sk: impl Into<String>) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

fn text<'a>(item: &'a Item, name: &str) -> anyhow::Result<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(value)) => Ok(value),
        _ => anyhow::bail!("item attribute {name} is missing or not a string"),
    }
}

fn number<T: std::str::FromStr>(item: &Item, name: &str) -> anyhow::Result<T> {
    match item.get(name) {
        Some(AttributeValue::N(value)) => {
            value.parse().ok().with_context(|| format!("item attribute {name} is not a number"))
        }
        _ => anyhow::bail!("item attribute {name} is missing or not a number"),
    }
}

fn timestamp(item: &Item, name: &str) -> anyhow::Result<Timestamp> {
    Timestamp::parse(text(item, name)?).with_context(|| format!("item attribute {name} is not a timestamp"))
}
