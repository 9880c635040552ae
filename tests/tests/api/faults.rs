//! DynamoDB clients that fail on purpose, for the tests of bounded retries and of the
//! bulk protocol: an interceptor that replaces DynamoDB's answer to chosen calls with an
//! error (the call itself still reaches DynamoDB Local and may be applied), and one that
//! cuts a bulk upsert off right after it reserved its slots.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeSerializationInterceptorContextRef,
    BeforeTransmitInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemInput;
use aws_sdk_dynamodb::operation::put_item::PutItemInput;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput;
use aws_sdk_dynamodb::operation::update_item::UpdateItemInput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::client::interceptors::context::Input;
use aws_smithy_runtime_api::client::retries::RequestAttempts;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use shared::adapters::dynamodb::DynamoDb;

use crate::helpers::TestApp;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The [`Refuse`] interceptors that chose a call (across the SDK's attempts at it); one
/// client may run several.
#[derive(Clone, Debug, Default)]
struct Chosen(Vec<usize>);

impl Storable for Chosen {
    type Storer = StoreReplace<Self>;
}

/// The [`Refuse`] interceptors that refuse the current attempt at a call.
#[derive(Clone, Debug, Default)]
struct Refusing(Vec<usize>);

impl Storable for Refusing {
    type Storer = StoreReplace<Self>;
}

/// Gives each [`Refuse`] its own ID.
static NEXT_REFUSE: AtomicUsize = AtomicUsize::new(0);

/// Answers the calls `choose` picks with the error `error_type` (HTTP `status`, extra
/// JSON `fields`), for the first `times` attempts at those calls, or all of them. With
/// `applied`, the request still reaches DynamoDB Local and is applied, as when an answer
/// is lost; without, it reaches DynamoDB Local under an operation name that does not
/// exist, so nothing is applied, as when DynamoDB throttles or fails.
pub struct Refuse {
    id: usize,
    choose: Box<dyn Fn(&Input) -> bool + Send + Sync>,
    status: u16,
    error_type: &'static str,
    fields: &'static str,
    applied: bool,
    times: Option<usize>,
    /// Only the SDK's first attempt at each chosen call is refused (its retry goes through).
    first_attempts: bool,
    /// Chosen calls answered so far, and how many of those answers were replaced.
    seen: AtomicUsize,
    refused: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Refuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refuse").field("error_type", &self.error_type).finish()
    }
}

impl Refuse {
    fn new(
        choose: impl Fn(&Input) -> bool + Send + Sync + 'static,
        applied: bool,
        status: u16,
        error_type: &'static str,
    ) -> Self {
        Self {
            id: NEXT_REFUSE.fetch_add(1, Ordering::SeqCst),
            choose: Box::new(choose),
            status,
            error_type,
            fields: "",
            applied,
            times: None,
            first_attempts: false,
            seen: AtomicUsize::new(0),
            refused: Arc::default(),
        }
    }

    /// Refuses only the first `times` answers.
    pub fn times(self, times: usize) -> Self {
        Self { times: Some(times), ..self }
    }

    fn with_fields(self, fields: &'static str) -> Self {
        Self { fields, ..self }
    }

    /// A counter of the answers replaced, to read once the interceptor is in a client.
    pub fn refused(&self) -> Arc<AtomicUsize> {
        self.refused.clone()
    }
}

impl Intercept for Refuse {
    fn name(&self) -> &'static str {
        "Refuse"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if (self.choose)(context.input()) {
            let mut chosen = cfg.load::<Chosen>().cloned().unwrap_or_default();
            chosen.0.push(self.id);
            cfg.interceptor_state().store_put(chosen);
        }
        Ok(())
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let chosen = cfg.load::<Chosen>().is_some_and(|chosen| chosen.0.contains(&self.id));
        let first = cfg.load::<RequestAttempts>().is_none_or(|attempts| attempts.attempts() <= 1);
        let refusing = chosen
            && (first || !self.first_attempts)
            && self.times.is_none_or(|times| self.seen.fetch_add(1, Ordering::SeqCst) < times);
        let mut attempt = cfg.load::<Refusing>().cloned().unwrap_or_default();
        attempt.0.retain(|id| *id != self.id);
        if refusing {
            attempt.0.push(self.id);
        }
        cfg.interceptor_state().store_put(attempt);
        if refusing && !self.applied {
            context.request_mut().headers_mut().insert("x-amz-target", "DynamoDB_20120810.RefusedByTheTest");
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if !cfg.load::<Refusing>().is_some_and(|refusing| refusing.0.contains(&self.id)) {
            return Ok(());
        }
        self.refused.fetch_add(1, Ordering::SeqCst);
        let body = format!(
            r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{}","message":"injected by the test"{}}}"#,
            self.error_type, self.fields
        );
        let response = context.response_mut();
        *response.status_mut() = StatusCode::try_from(self.status).expect("status");
        response.headers_mut().insert("content-length", body.len().to_string());
        *response.body_mut() = SdkBody::from(body);
        Ok(())
    }
}

/// Every TransactWriteItems loses to a concurrent transaction.
pub fn conflicting_transactions() -> Refuse {
    Refuse::new(
        |input| input.downcast_ref::<TransactWriteItemsInput>().is_some(),
        false,
        400,
        "TransactionCanceledException",
    )
    .with_fields(r#","CancellationReasons":[{"Code":"TransactionConflict"},{"Code":"TransactionConflict"}]"#)
}

/// The first `attempts` sends of TransactWriteItems are applied (the first; the others
/// carry its token, so DynamoDB applies them no more) and answered "still in progress",
/// as when DynamoDB is slow to commit and the SDK's retries find it busy.
pub fn applied_transactions_said_in_progress(attempts: usize) -> Refuse {
    Refuse::new(
        |input| input.downcast_ref::<TransactWriteItemsInput>().is_some(),
        true,
        400,
        "TransactionInProgressException",
    )
    .times(attempts)
}

/// The entry IDs a BatchWriteItem puts.
fn batch_put_ids(input: &Input) -> Vec<String> {
    let Some(batch) = input.downcast_ref::<BatchWriteItemInput>() else { return Vec::new() };
    batch
        .request_items()
        .into_iter()
        .flat_map(|tables| tables.values().flatten())
        .filter_map(|request| request.put_request())
        .filter_map(|put| match put.item().get("entry_id") {
            Some(AttributeValue::S(id)) => Some(id.clone()),
            _ => None,
        })
        .collect()
}

/// Every BatchWriteItem that writes one of these entry IDs is throttled (the journal
/// and other batch writes go through).
pub fn throttled_entry_writes(ids: &[&str]) -> Refuse {
    let ids: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    Refuse::new(
        move |input| batch_put_ids(input).iter().any(|id| ids.contains(id)),
        false,
        400,
        "ProvisionedThroughputExceededException",
    )
}

/// Every BatchWriteItem that writes any entry is throttled.
pub fn throttled_batch_writes() -> Refuse {
    Refuse::new(|input| !batch_put_ids(input).is_empty(), false, 400, "ProvisionedThroughputExceededException")
}

/// Every BatchWriteItem that deletes (a bulk's journal, once settled) fails.
pub fn failing_batch_deletes() -> Refuse {
    Refuse::new(
        |input| {
            input.downcast_ref::<BatchWriteItemInput>().is_some_and(|batch| {
                batch
                    .request_items()
                    .into_iter()
                    .flat_map(|tables| tables.values().flatten())
                    .any(|r| r.delete_request().is_some())
            })
        },
        false,
        500,
        "InternalServerError",
    )
}

/// The answer to UpdateItems whose update expression contains `part` is lost (a 500
/// the SDK retries) after DynamoDB applied the update.
pub fn lost_update_answers(part: &'static str) -> Refuse {
    Refuse::new(
        move |input| {
            input
                .downcast_ref::<UpdateItemInput>()
                .and_then(UpdateItemInput::update_expression)
                .is_some_and(|expression| expression.contains(part))
        },
        true,
        500,
        "InternalServerError",
    )
}

/// Every transaction that starts a run under a claim (a trigger's fire) fails with a 500,
/// as DynamoDB does when it is having trouble, and is not applied; other writes go through.
pub fn failing_claimed_run_starts() -> Refuse {
    Refuse::new(
        |input| {
            input.downcast_ref::<TransactWriteItemsInput>().is_some_and(|transaction| {
                transaction.transact_items().iter().filter_map(|item| item.put()).any(
                    |put| matches!(put.item().get("sk"), Some(AttributeValue::S(sk)) if sk.starts_with("RUNCLAIM#")),
                )
            })
        },
        false,
        500,
        "InternalServerError",
    )
}

/// The first answer to every conditional write of a run's head (a change under its
/// version: a PutItem, or a transaction with the records it changed) is lost after
/// DynamoDB applied the write: the SDK's retry then meets the version the write stored,
/// and fails its condition (or is answered as the transaction it repeats).
pub fn lost_run_write_answers() -> Refuse {
    fn is_run_change(
        condition: Option<&str>,
        item: Option<&std::collections::HashMap<String, AttributeValue>>,
    ) -> bool {
        condition == Some("version = :expected")
            && item
                .and_then(|item| item.get("sk"))
                .is_some_and(|sk| matches!(sk, AttributeValue::S(sk) if sk.starts_with("RUN#")))
    }
    Refuse {
        first_attempts: true,
        ..Refuse::new(
            |input| {
                input
                    .downcast_ref::<PutItemInput>()
                    .is_some_and(|put| is_run_change(put.condition_expression(), put.item()))
                    || input.downcast_ref::<TransactWriteItemsInput>().is_some_and(|transaction| {
                        transaction
                            .transact_items()
                            .first()
                            .and_then(|first| first.put())
                            .is_some_and(|put| is_run_change(put.condition_expression(), Some(put.item())))
                    })
            },
            true,
            500,
            "InternalServerError",
        )
    }
}

/// The first answer to every conditional PutItem (a create, a replace under a version)
/// and to every UpdateItem that marks an item deleted is lost after DynamoDB applied the
/// write: the SDK's retry then fails its condition on the item its first attempt wrote.
pub fn lost_conditional_write_answers() -> Refuse {
    Refuse {
        first_attempts: true,
        ..Refuse::new(
            |input| {
                input.downcast_ref::<PutItemInput>().is_some_and(|put| put.condition_expression().is_some())
                    || input
                        .downcast_ref::<UpdateItemInput>()
                        .and_then(UpdateItemInput::update_expression)
                        .is_some_and(|expression| expression.contains("deleted_at"))
            },
            true,
            500,
            "InternalServerError",
        )
    }
}

/// Lets calls through until a bulk upsert has reserved its slots, then fails every
/// call, as if the process had been killed at that moment: nothing after it (writes,
/// giving slots back, releasing the lease) reaches the table.
#[derive(Debug, Default)]
pub struct DieAfterReserving {
    dead: AtomicBool,
    dying: AtomicBool,
}

impl Intercept for DieAfterReserving {
    fn name(&self) -> &'static str {
        "DieAfterReserving"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if self.dead.load(Ordering::SeqCst) {
            return Err("the process is gone".into());
        }
        if self.dying.load(Ordering::SeqCst) {
            self.dead.store(true, Ordering::SeqCst);
            return Err("the process is gone".into());
        }
        let reserving = context
            .input()
            .downcast_ref::<UpdateItemInput>()
            .and_then(UpdateItemInput::update_expression)
            .is_some_and(|expression| expression.contains("reserved_by = :lease"));
        if reserving {
            self.dying.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// Runs a bulk upsert of `ids` into `store` that dies right after reserving its slots,
/// then lets its lease run out (by moving its end into the past: the time it would
/// take is not what is tested). Leaves the store as a killed bulk does: the counter
/// raised by the new IDs, their entries missing, the store marked with the reservation.
pub async fn kill_a_bulk_after_it_reserved(test: &TestApp, dynamodb: &DynamoDb, store: &str, ids: &[String]) {
    use http::{Method, StatusCode};
    let dying = test.through(dynamodb.with_interceptor(DieAfterReserving::default()));
    let entries: Vec<_> = ids.iter().map(|id| serde_json::json!({ "entry_id": id, "display_name": "lost" })).collect();
    let (status, body) = dying
        .call(
            Method::POST,
            &format!("/shared-stores/{store}/entries/bulk"),
            Some(serde_json::json!({ "entries": entries })),
        )
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "the bulk died: {body}");
    let store_key = shared::adapters::dynamodb::keys::store(test.organization, store.parse().expect("store id"));
    dynamodb
        .client()
        .update_item()
        .table_name(dynamodb.table())
        .set_key(Some(store_key))
        .update_expression("SET lease_until = :past")
        .expression_attribute_values(":past", AttributeValue::N("0".into()))
        .send()
        .await
        .expect("ending the dead bulk's lease");
}
