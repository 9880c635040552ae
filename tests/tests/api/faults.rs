//! DynamoDB clients that fail on purpose, for the tests of bounded retries and of crash
//! repair: an interceptor that replaces DynamoDB's answer to one operation with an
//! error, and one that cuts a bulk upsert off right after it reserved its slots.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeSerializationInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use shared::adapters::dynamodb::DynamoDb;

use crate::helpers::TestApp;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Replaces every answer to `operation` with the DynamoDB error `error_type` and its
/// extra JSON fields: the request still reaches DynamoDB Local, the client sees a
/// failure every time.
#[derive(Debug)]
pub struct Refuse {
    pub operation: &'static str,
    pub error_type: &'static str,
    pub fields: &'static str,
}

impl Intercept for Refuse {
    fn name(&self) -> &'static str {
        "Refuse"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<Metadata>().map(Metadata::name) != Some(self.operation) {
            return Ok(());
        }
        let body = format!(
            r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{}","message":"injected by the test"{}}}"#,
            self.error_type, self.fields
        );
        let response = context.response_mut();
        *response.status_mut() = StatusCode::try_from(400).expect("status");
        response.headers_mut().insert("content-length", body.len().to_string());
        *response.body_mut() = SdkBody::from(body);
        Ok(())
    }
}

/// Every TransactWriteItems loses to a concurrent transaction.
pub fn conflicting_transactions() -> Refuse {
    Refuse {
        operation: "TransactWriteItems",
        error_type: "TransactionCanceledException",
        fields: r#","CancellationReasons":[{"Code":"TransactionConflict"},{"Code":"TransactionConflict"}]"#,
    }
}

/// Every BatchWriteItem is throttled.
pub fn throttled_batch_writes() -> Refuse {
    Refuse { operation: "BatchWriteItem", error_type: "ProvisionedThroughputExceededException", fields: "" }
}

/// Lets calls through until a bulk upsert has reserved its slots, then fails every
/// call, as if the process had been killed at that moment: nothing after it (writes,
/// giving slots back, releasing the lease) reaches the table.
#[derive(Debug, Default)]
pub struct DieAfterReserving {
    dead: Arc<AtomicBool>,
    dying: Arc<AtomicBool>,
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
        use aws_sdk_dynamodb::operation::update_item::UpdateItemInput;
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
/// raised by the new IDs, their entries missing.
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
        .expression_attribute_values(":past", shared::adapters::dynamodb::AttributeValue::N("0".into()))
        .send()
        .await
        .expect("ending the dead bulk's lease");
}
