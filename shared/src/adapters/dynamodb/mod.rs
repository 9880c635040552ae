//! DynamoDB adapter: one table, keys that start with the organization ID (`keys.rs`),
//! conditional writes and transactions for every limit, and table helpers whose every
//! retry follows a schedule of `core::retry` (`table.rs`).

mod agents;
mod assets;
mod avatars;
mod bulk;
mod credits;
mod idempotency;
mod identity;
pub mod keys;
mod runs;
mod shared_stores;
mod social;
pub mod table;
mod triggers;
mod uploads;
mod webhooks;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;

use super::ActionLog;
use crate::core::retry::{RetryPolicy, AWS_ATTEMPT_TIMEOUT, AWS_SDK_CALLS};

pub use bulk::{LEASE, WRITE_WINDOW};

use std::sync::Arc;

use crate::domain::time::{Clock, SystemClock};
pub use table::{AttributeValue, Item};

/// The DynamoDB backend; cheap to clone.
#[derive(Clone)]
pub struct DynamoDb {
    client: Client,
    table: String,
    /// The time store leases are taken and checked at.
    clock: Arc<dyn Clock>,
    /// Runs as this process last read or wrote them.
    runs: Arc<crate::domain::runs::stored::RunCache>,
}

/// The SDK's retry settings for a schedule: standard mode (which retries throttling and
/// transient errors), its attempts and its backoff.
pub fn sdk_retry_config(policy: &RetryPolicy) -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(policy.max_attempts)
        .with_initial_backoff(policy.first_delay)
        .with_max_backoff(policy.max_delay)
}

/// The SDK's timeouts for a schedule: each attempt, and the whole call with its retries.
pub fn sdk_timeout_config(policy: &RetryPolicy, attempt: std::time::Duration) -> TimeoutConfig {
    TimeoutConfig::builder().operation_attempt_timeout(attempt).operation_timeout(policy.budget).build()
}

/// A failed call of a start's check of the table: an endpoint that cannot be reached
/// (a wrong `AWS_ENDPOINT_URL_DYNAMODB`, nothing listening) fails at once; throttling,
/// DynamoDB's own failures and timeouts are [`Unavailable`](crate::core::retry::Unavailable),
/// which a start tries again.
fn start_failure<E, R>(error: SdkError<E, R>, what: &'static str) -> anyhow::Error
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match error {
        SdkError::DispatchFailure(_) => anyhow::Error::new(error).context(what),
        _ => table::failure(error, what),
    }
}

/// Every repository of the service, in this table.
impl crate::domain::Backend for DynamoDb {}

impl DynamoDb {
    /// Milliseconds since the Unix epoch by the backend's clock, the unit of `lease_until`.
    pub(super) fn now_millis(&self) -> u64 {
        self.clock.now().unix_millis()
    }

    /// Connects with the standard AWS settings of the environment (region, credentials,
    /// `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_DYNAMODB`).
    pub async fn connect(table: impl Into<String>) -> Self {
        let config = crate::adapters::aws_env::load_defaults().await;
        Self::from_config(&config, table)
    }

    /// Uses AWS settings loaded already (one load per process serves every client), with
    /// the retries and timeouts of [`AWS_SDK_CALLS`].
    pub fn from_config(config: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
        let config = aws_sdk_dynamodb::config::Builder::from(config)
            .retry_config(sdk_retry_config(&AWS_SDK_CALLS))
            .timeout_config(sdk_timeout_config(&AWS_SDK_CALLS, AWS_ATTEMPT_TIMEOUT))
            .build();
        Self {
            client: Client::from_conf(config),
            table: table.into(),
            clock: Arc::new(SystemClock),
            runs: Default::default(),
        }
    }

    /// Wraps an already configured SDK client.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into(), clock: Arc::new(SystemClock), runs: Default::default() }
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
    /// Fails as [`start_failure`] says.
    pub async fn ensure_table(&self) -> anyhow::Result<()> {
        match self.client.describe_table().table_name(&self.table).send().await {
            Ok(_) => return Ok(()),
            // Missing: made below.
            Err(error) if error.as_service_error().is_some_and(|service| service.is_resource_not_found_exception()) => {
            }
            Err(error) => return Err(start_failure(error, "describing the table")),
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
            .attribute_definitions(attribute("sweep_pk")?)
            .attribute_definitions(attribute("sweep_sk")?)
            .global_secondary_indexes(
                GlobalSecondaryIndex::builder()
                    .index_name(keys::SWEEP_INDEX)
                    .key_schema(key("sweep_pk", KeyType::Hash)?)
                    .key_schema(key("sweep_sk", KeyType::Range)?)
                    .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
                    .build()?,
            )
            .send()
            .await;
        match created {
            Ok(_) => Ok(()),
            // Another process created it at the same moment: that is what we wanted.
            Err(error) if error.as_service_error().is_some_and(|service| service.is_resource_in_use_exception()) => {
                Ok(())
            }
            Err(error) => Err(start_failure(error, "creating the table")),
        }
    }

    /// A copy of this backend whose client records the IAM action of every call, so
    /// that tests can hold each function's least-privilege policy to what it really does.
    pub fn recording_actions(&self) -> (Self, ActionLog) {
        let log = ActionLog::default();
        let config = self.client.config().to_builder().interceptor(RecordActions(log.clone())).build();
        // A process of its own: its own cache of runs.
        let recording = Self {
            client: Client::from_conf(config),
            table: self.table.clone(),
            clock: self.clock.clone(),
            runs: Default::default(),
        };
        (recording, log)
    }

    /// Forgets the runs this process read or wrote, as a new process starts: the next
    /// read of each reads its records (tests hold policies to what a cold read does).
    pub fn forget_runs(&self) {
        self.runs.clear();
    }

    /// A copy of this backend whose client also runs `interceptor` (tests use one to
    /// inject failures).
    pub fn with_interceptor(&self, interceptor: impl aws_sdk_dynamodb::config::Intercept + 'static) -> Self {
        let config = self.client.config().to_builder().interceptor(interceptor).build();
        Self {
            client: Client::from_conf(config),
            table: self.table.clone(),
            clock: self.clock.clone(),
            runs: self.runs.clone(),
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
