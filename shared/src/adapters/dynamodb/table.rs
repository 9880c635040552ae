//! The table helpers every resource uses, each in one place: consistent get, query of a
//! whole partition, batch reads and writes that retry what DynamoDB leaves unprocessed,
//! transactions that retry conflicts, conditional writes, attribute readers, and the
//! classification of SDK failures. Every retry follows a schedule of `core::retry`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    CancellationReason, ConditionCheck, Delete, DeleteRequest, KeysAndAttributes, Put, PutRequest,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update, WriteRequest,
};
use futures::stream::{self, StreamExt, TryStreamExt};

use super::DynamoDb;
use crate::core::retry::{Unavailable, TRANSACTION_CONFLICTS, UNPROCESSED_ITEMS};
use crate::domain::time::Timestamp;

pub use aws_sdk_dynamodb::types::AttributeValue;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// Keys per BatchGetItem (DynamoDB's limit).
const BATCH_GET_KEYS: usize = 100;
/// Requests per BatchWriteItem (DynamoDB's limit).
pub const BATCH_WRITE_REQUESTS: usize = 25;
/// Requests kept in flight by batch reads and writes (16 measured slower for reads).
pub const PARALLEL_REQUESTS: usize = 8;

/// Error codes meaning DynamoDB is overloaded or failing, not that the request is wrong:
/// after the SDK's own retries they make the request [`Unavailable`].
const UNAVAILABLE_CODES: [&str; 6] = [
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "LimitExceededException",
];

/// Reasons of a cancelled transaction that another attempt may not meet: another
/// transaction on the same items, or throttling.
const RETRIED_CANCELLATIONS: [&str; 3] = ["TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"];

/// Turns a failed SDK call into an error in the context `what`: a timeout, a network
/// failure or throttling that outlasted the SDK's retries is [`Unavailable`].
pub fn failure<E, R>(error: SdkError<E, R>, what: &'static str) -> anyhow::Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let unavailable = match &error {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => true,
        SdkError::ServiceError(service) => UNAVAILABLE_CODES.contains(&service.err().code().unwrap_or_default()),
        _ => false,
    };
    if unavailable {
        let reason = format!("DynamoDB did not serve {what}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(&error));
        return anyhow::Error::new(Unavailable(reason));
    }
    anyhow::Error::new(error).context(what)
}

/// The output of a conditional write, or None when its condition did not hold; other
/// failures are errors in the context `what`.
pub fn unless_condition_failed<T, E, R>(
    result: Result<T, SdkError<E, R>>,
    what: &'static str,
) -> anyhow::Result<Option<T>>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match result {
        Ok(output) => Ok(Some(output)),
        Err(error) if error.code() == Some("ConditionalCheckFailedException") => Ok(None),
        Err(error) => Err(failure(error, what)),
    }
}

/// True when the reason says a condition of that item failed.
pub fn condition_failed(reason: Option<&CancellationReason>) -> bool {
    reason.and_then(CancellationReason::code) == Some("ConditionalCheckFailed")
}

/// Reports a request the code itself built wrong.
pub fn build<T>(built: Result<T, aws_sdk_dynamodb::error::BuildError>) -> anyhow::Result<T> {
    built.context("building a DynamoDB request")
}

/// A built put, update, delete or condition check, as one part of a transaction.
pub trait TransactPart {
    /// Wraps the part, or reports why it could not be built.
    fn into_part(self) -> anyhow::Result<TransactWriteItem>;
}

macro_rules! transact_part {
    ($($kind:ty => $setter:ident),*) => {$(
        impl TransactPart for Result<$kind, aws_sdk_dynamodb::error::BuildError> {
            fn into_part(self) -> anyhow::Result<TransactWriteItem> {
                Ok(TransactWriteItem::builder().$setter(build(self)?).build())
            }
        }
    )*};
}

transact_part!(Put => put, Update => update, Delete => delete, ConditionCheck => condition_check);

/// A string attribute.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// A number attribute.
pub fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A string attribute of an item.
pub fn text<'a>(item: &'a Item, name: &str) -> anyhow::Result<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(value)) => Ok(value),
        _ => anyhow::bail!("item attribute {name} is missing or not a string"),
    }
}

/// A string attribute that may be absent.
pub fn optional_text<'a>(item: &'a Item, name: &str) -> anyhow::Result<Option<&'a str>> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(_) => text(item, name).map(Some),
    }
}

/// A number attribute of an item.
pub fn number<T: std::str::FromStr>(item: &Item, name: &str) -> anyhow::Result<T> {
    match item.get(name) {
        Some(AttributeValue::N(value)) => {
            value.parse().ok().with_context(|| format!("item attribute {name} is not a number of the expected range"))
        }
        _ => anyhow::bail!("item attribute {name} is missing or not a number"),
    }
}

/// A number attribute that may be absent.
pub fn optional_number<T: std::str::FromStr>(item: &Item, name: &str) -> anyhow::Result<Option<T>> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(_) => number(item, name).map(Some),
    }
}

/// A timestamp attribute, stored as its text.
pub fn timestamp(item: &Item, name: &str) -> anyhow::Result<Timestamp> {
    Ok(Timestamp::parse(text(item, name)?)?)
}

/// A timestamp attribute that may be absent.
pub fn optional_timestamp(item: &Item, name: &str) -> anyhow::Result<Option<Timestamp>> {
    optional_text(item, name)?.map(Timestamp::parse).transpose().map_err(anyhow::Error::from)
}

/// A parsed ID attribute.
pub fn id<T: std::str::FromStr>(item: &Item, name: &str) -> anyhow::Result<T> {
    text(item, name)?.parse().ok().with_context(|| format!("item attribute {name} is not an ID"))
}

impl DynamoDb {
    /// Writes `item` when `condition` holds (`values` bind its `:names`); true when the
    /// item is stored. A put DynamoDB applied whose answer was lost (a 500 or a timeout
    /// after the write) is retried by the SDK, and the retry fails its condition on the
    /// very item it wrote: an item in the way equal to `item` is that write, and counts as
    /// done. (Every item written this way carries a fresh ID, a version or a time, so an
    /// equal item is this write, or one whose outcome is exactly this one's.)
    pub(super) async fn put_if(
        &self,
        item: Item,
        condition: &str,
        values: &[(&str, AttributeValue)],
        what: &'static str,
    ) -> anyhow::Result<bool> {
        let mut request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item.clone()))
            .condition_expression(condition)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (name, value) in values {
            request = request.expression_attribute_values(*name, value.clone());
        }
        match request.send().await {
            Ok(_) => Ok(true),
            Err(error) => match error.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(failed)) => Ok(failed.item() == Some(&item)),
                _ => Err(failure(error, what)),
            },
        }
    }

    /// One item, read strongly consistent.
    pub(super) async fn get(&self, key: Item, what: &'static str) -> anyhow::Result<Option<Item>> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| failure(error, what))?;
        Ok(output.item)
    }

    /// Every item of a partition (optionally with a sort-key prefix), page after page,
    /// strongly consistent.
    pub(super) async fn query_all(
        &self,
        pk: String,
        sk_prefix: Option<&str>,
        projection: Option<&str>,
        what: &'static str,
    ) -> anyhow::Result<Vec<Item>> {
        let mut query = self
            .client
            .query()
            .table_name(&self.table)
            .expression_attribute_values(":pk", s(&pk))
            .consistent_read(true)
            .set_projection_expression(projection.map(str::to_owned));
        query = match sk_prefix {
            Some(prefix) => query
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":prefix", s(prefix)),
            None => query.key_condition_expression("pk = :pk"),
        };
        self.all_pages(query, what).await
    }

    /// Every item of partition `pk` whose sort key is at least `from` and starts with what
    /// `from` starts with up to its `#` (`OUTPUT#000010`: outputs from 10 on; `CHUNK#`:
    /// every chunk), strongly consistent, all pages; with `newer_than`, only those whose
    /// `version` is greater (the others are read but not returned).
    pub(super) async fn query_from(
        &self,
        pk: String,
        from: &str,
        newer_than: Option<u64>,
        what: &'static str,
    ) -> anyhow::Result<Vec<Item>> {
        let prefix = from.split_inclusive('#').next().unwrap_or(from);
        let mut query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :from AND :to")
            .expression_attribute_values(":pk", s(&pk))
            .expression_attribute_values(":from", s(from))
            // '~' sorts after the digits that follow the prefix.
            .expression_attribute_values(":to", s(format!("{prefix}~")))
            .consistent_read(true);
        if let Some(version) = newer_than {
            query = query
                .filter_expression("#version > :version")
                .expression_attribute_names("#version", "version")
                .expression_attribute_values(":version", AttributeValue::N(version.to_string()));
        }
        self.all_pages(query, what).await
    }

    /// The table keys (`pk`, `sk`) of items of `kind` due at or before `now` in the
    /// sweep index ([`super::keys::sweep_due`]), earliest first, at most `limit`. The index
    /// is eventually consistent: the caller reads each item again and claims it with a
    /// conditional write.
    pub(super) async fn due_keys(
        &self,
        kind: &str,
        now: Timestamp,
        limit: usize,
        what: &'static str,
    ) -> anyhow::Result<Vec<Item>> {
        let page = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(super::keys::SWEEP_INDEX)
            // '$' sorts right after the '#' that ends the time.
            .key_condition_expression("sweep_pk = :pk AND sweep_sk < :bound")
            .expression_attribute_values(":pk", s(format!("DUE#{kind}")))
            .expression_attribute_values(":bound", s(format!("{now}$")))
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|error| failure(error, what))?;
        Ok(page.items().iter().map(key_of).collect())
    }

    /// A page of the sweep index's partition `DUE#<kind>`: the items due at or before
    /// `now` after the sort key `after` (None: from the earliest), at most `limit`, in
    /// due order, with their index keys (`sweep_sk` is where a next page starts).
    pub(super) async fn due_page(
        &self,
        kind: &str,
        now: Timestamp,
        after: Option<&str>,
        limit: usize,
        what: &'static str,
    ) -> anyhow::Result<Vec<Item>> {
        // '!' sorts right after the end of a key (no key is another's prefix); '$' right
        // after the '#' that ends the time.
        // (A key's value may not be empty: the first page has no lower bound.)
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(super::keys::SWEEP_INDEX)
            .expression_attribute_values(":pk", s(format!("DUE#{kind}")))
            .expression_attribute_values(":bound", s(format!("{now}$")))
            .limit(i32::try_from(limit).unwrap_or(i32::MAX));
        let query = match after {
            None => query.key_condition_expression("sweep_pk = :pk AND sweep_sk < :bound"),
            Some(after) => query
                .key_condition_expression("sweep_pk = :pk AND sweep_sk BETWEEN :from AND :bound")
                .expression_attribute_values(":from", s(format!("{after}!"))),
        };
        let page = query.send().await.map_err(|error| failure(error, what))?;
        Ok(page.items.unwrap_or_default())
    }

    async fn all_pages(
        &self,
        query: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
        what: &'static str,
    ) -> anyhow::Result<Vec<Item>> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = query
                .clone()
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|error| failure(error, what))?;
            items.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(next) => start = Some(next),
                None => return Ok(items),
            }
        }
    }

    /// Reads many keys with strongly consistent BatchGetItem calls, several in flight;
    /// keys with no item are left out.
    pub(super) async fn batch_get(&self, keys: Vec<Item>, projection: Option<&str>) -> anyhow::Result<Vec<Item>> {
        let chunks: Vec<Vec<Item>> = keys.chunks(BATCH_GET_KEYS).map(<[Item]>::to_vec).collect();
        let pages: Vec<Vec<Item>> = stream::iter(chunks)
            .map(|chunk| self.batch_get_chunk(chunk, projection))
            .buffer_unordered(PARALLEL_REQUESTS)
            .try_collect()
            .await?;
        Ok(pages.into_iter().flatten().collect())
    }

    async fn batch_get_chunk(&self, keys: Vec<Item>, projection: Option<&str>) -> anyhow::Result<Vec<Item>> {
        let mut found = Vec::with_capacity(keys.len());
        let mut pending = build(
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(true)
                .set_projection_expression(projection.map(str::to_owned))
                .build(),
        )?;
        let mut retry = UNPROCESSED_ITEMS.start();
        loop {
            let output = self
                .client
                .batch_get_item()
                .request_items(&self.table, pending)
                .send()
                .await
                .map_err(|error| failure(error, "batch reading"))?;
            if let Some(items) = output.responses.and_then(|mut tables| tables.remove(&self.table)) {
                found.extend(items);
            }
            match output.unprocessed_keys.and_then(|mut tables| tables.remove(&self.table)) {
                Some(rest) if !rest.keys.is_empty() => {
                    retry.wait(format!("{} keys left unprocessed", rest.keys.len())).await?;
                    pending = rest;
                }
                _ => return Ok(found),
            }
        }
    }

    /// Writes requests with BatchWriteItem, several calls in flight, retrying what
    /// DynamoDB leaves unprocessed. `keep_going` is asked before every call: once it says
    /// no, no new call starts. When a call fails, no new call starts either, and the
    /// writes end with the error only after every call already started has finished, so
    /// that whoever counts what landed afterwards sees all of it.
    pub(super) async fn batch_write(
        &self,
        requests: Vec<WriteRequest>,
        keep_going: &(dyn Fn() -> bool + Sync),
    ) -> anyhow::Result<()> {
        let chunks: Vec<Vec<WriteRequest>> =
            requests.chunks(BATCH_WRITE_REQUESTS).map(<[WriteRequest]>::to_vec).collect();
        let failed = AtomicBool::new(false);
        let outcomes: Vec<Option<anyhow::Result<()>>> = stream::iter(chunks)
            .map(|chunk| {
                let failed = &failed;
                async move {
                    if failed.load(Ordering::SeqCst) || !keep_going() {
                        return None;
                    }
                    let written = self.batch_write_chunk(chunk, keep_going).await;
                    if written.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    Some(written)
                }
            })
            .buffer_unordered(PARALLEL_REQUESTS)
            .collect()
            .await;
        let skipped = outcomes.iter().any(Option::is_none);
        for outcome in outcomes.into_iter().flatten() {
            outcome?;
        }
        anyhow::ensure!(!skipped, "batch writes stopped at their deadline");
        Ok(())
    }

    async fn batch_write_chunk(
        &self,
        mut requests: Vec<WriteRequest>,
        keep_going: &(dyn Fn() -> bool + Sync),
    ) -> anyhow::Result<()> {
        let mut retry = UNPROCESSED_ITEMS.start();
        loop {
            let output = self
                .client
                .batch_write_item()
                .request_items(&self.table, requests)
                .send()
                .await
                .map_err(|error| failure(error, "batch writing"))?;
            requests = output.unprocessed_items.and_then(|mut tables| tables.remove(&self.table)).unwrap_or_default();
            if requests.is_empty() {
                return Ok(());
            }
            anyhow::ensure!(
                keep_going(),
                "batch writes stopped at their deadline, {} left unprocessed",
                requests.len()
            );
            retry.wait(format!("{} writes left unprocessed", requests.len())).await?;
        }
    }

    /// Runs a transaction, retrying while it only loses to concurrent transactions or is
    /// throttled. Returns the cancellation reasons when a condition failed; any other
    /// cancellation is an error.
    ///
    /// Every send carries a client request token, which makes DynamoDB apply the
    /// transaction at most once per token (for ten minutes); the SDK would draw one per
    /// send, and retries "in progress" itself under it. A send answered "still in
    /// progress" (the SDK's own retries, under the same token, found an earlier attempt
    /// running) is sent again under that token: that attempt may yet commit, and under a
    /// new token it would be applied twice or fail on its own writes. A cancelled
    /// transaction was applied nowhere, so its next send takes a new token.
    pub(super) async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
        what: &'static str,
    ) -> anyhow::Result<Result<(), Vec<CancellationReason>>> {
        let mut retry = TRANSACTION_CONFLICTS.start();
        let mut token = uuid::Uuid::new_v4().to_string();
        loop {
            let sent = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .client_request_token(&token)
                .send()
                .await;
            let error = match sent {
                Ok(_) => return Ok(Ok(())),
                Err(SdkError::ServiceError(context)) => context.into_err(),
                Err(other) => return Err(failure(other, what)),
            };
            match error {
                TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                    let reasons = cancelled.cancellation_reasons().to_vec();
                    let code = |reason: &CancellationReason| reason.code().unwrap_or("None").to_owned();
                    if reasons.iter().any(|reason| code(reason) == "ConditionalCheckFailed") {
                        return Ok(Err(reasons));
                    }
                    match reasons.iter().map(code).find(|code| RETRIED_CANCELLATIONS.contains(&code.as_str())) {
                        Some(code) => {
                            token = uuid::Uuid::new_v4().to_string();
                            retry.wait(format!("{what}: cancelled ({code})")).await?
                        }
                        None => {
                            let codes: Vec<String> = reasons.iter().map(code).collect();
                            anyhow::bail!("{what}: the transaction was cancelled: {codes:?}");
                        }
                    }
                }
                TransactWriteItemsError::TransactionInProgressException(_) => {
                    // The same token again (see above).
                    retry.wait(format!("{what}: the same transaction is still in progress")).await?;
                }
                other => {
                    let code = other.code().unwrap_or_default().to_owned();
                    if UNAVAILABLE_CODES.contains(&code.as_str()) {
                        return Err(Unavailable(format!("DynamoDB did not serve {what}: {code}")).into());
                    }
                    return Err(anyhow::Error::new(other).context(what));
                }
            }
        }
    }
}

/// A BatchWriteItem put of `item`.
pub fn put_request(item: Item) -> anyhow::Result<WriteRequest> {
    Ok(WriteRequest::builder().put_request(build(PutRequest::builder().set_item(Some(item)).build())?).build())
}

/// A BatchWriteItem delete of the item at `key`.
pub fn delete_request(key: Item) -> anyhow::Result<WriteRequest> {
    Ok(WriteRequest::builder().delete_request(build(DeleteRequest::builder().set_key(Some(key)).build())?).build())
}

/// Pages through `request` from `start` until more than `limit` items were read (so the
/// caller can tell whether a page follows) or the query ends; `read` makes each item a
/// value.
pub async fn query_beyond<T, F, Fut>(
    request: aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
    mut start: Option<Item>,
    limit: usize,
    what: &'static str,
    mut read: F,
) -> anyhow::Result<Vec<T>>
where
    F: FnMut(Item) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut values = Vec::new();
    loop {
        let page =
            request.clone().set_exclusive_start_key(start.take()).send().await.map_err(|error| failure(error, what))?;
        for item in page.items.unwrap_or_default() {
            values.push(read(item).await?);
            if values.len() > limit {
                return Ok(values);
            }
        }
        match page.last_evaluated_key {
            Some(last) => start = Some(last),
            None => return Ok(values),
        }
    }
}

/// Only the `pk` and `sk` attributes of an item.
pub fn key_of(item: &Item) -> Item {
    item.iter().filter(|(name, _)| *name == "pk" || *name == "sk").map(|(k, v)| (k.clone(), v.clone())).collect()
}
