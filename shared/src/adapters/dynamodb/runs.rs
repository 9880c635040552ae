//! Runs in DynamoDB, as the records of [`stored`]. The item `RUN#{id}` in the
//! organization's partition is the head: the attributes lists filter on, the version,
//! the write token and the head record. The plan (in parts), the chunks of task state
//! and the outputs are items of the run's own partition, each stamped with the version
//! that wrote it, so a reader that meets a chunk newer than the head it read reads
//! again. A change writes the head and what changed, in one transaction. Run IDs are
//! version 7 IDs of the start time, so the key order of `RUN#{id}` is start order and a
//! `from`/`to` window is a key range: a list page is one query. A head without `form`
//! is a run stored whole before the split: its document, continued in `PART#` items.

use async_trait::async_trait;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use super::table::{build, id, n, number, optional_number, optional_text, query_beyond, s, text, timestamp, Item};
use super::{keys, AttributeValue, DynamoDb};
use crate::domain::credits::AccountWrite;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::{MediaId, RunId};
use crate::domain::media::ports::MediaRecords;
use crate::domain::media::{MediaKind, MediaRecord};
use crate::domain::runs::events::MAX_EVENTS_PER_CHANGE;
use crate::domain::runs::ports::RunQuery;
use crate::domain::runs::ports::{read_run_document, RunRepo, RunningPage, MAX_RUN_BYTES};
use crate::domain::runs::service::MAX_CREDIT_MOVES;
use crate::domain::runs::stored::{self, Encoded, Stored};
use crate::domain::runs::{Run, RunStatus};
use crate::domain::webhooks::WebhookDelivery;

/// Bytes of a plan per item: with the other attributes, well under DynamoDB's 400 KB
/// item limit (as are the other records: [`stored::MAX_RECORD_BYTES`]).
const PART_BYTES: usize = 350_000;
/// The `form` of a head stored as records.
const RECORDS_FORM: u64 = 2;
/// Reads of a run that may meet a concurrent write between its head and its parts.
const TORN_READS: usize = 5;
/// Items one transaction may write.
pub(super) const TRANSACTION_ITEMS: usize = 100;

// Every change of a run fits one transaction by construction, never by a check that fails
// at run time: the head, every chunk, the plan's parts (a start), the webhook deliveries
// of a change's events, the account, the entries of its credit movements (one per task
// movement, or a bounded batch of refunds) and, below the bound, a start's claim.
const _: () = assert!(
    1 + stored::MAX_CHUNKS + MAX_RUN_BYTES.div_ceil(PART_BYTES) + MAX_EVENTS_PER_CHANGE + 1 + MAX_CREDIT_MOVES
        < TRANSACTION_ITEMS
);
/// Items read per list page when filters may drop many of them.
const FILTERED_PAGE_ITEMS: i32 = 200;

fn blob(item: &Item, name: &str) -> anyhow::Result<Vec<u8>> {
    match item.get(name) {
        Some(AttributeValue::B(bytes)) => Ok(bytes.clone().into_inner()),
        _ => anyhow::bail!("stored item has no binary attribute {name}"),
    }
}

/// The head item of a run written as `encoded`. It carries `token`, new for each write,
/// by which a writer whose successful write was answered with an error (and retried by
/// the SDK into a failed condition) recognises its own write.
fn head_item(run: &Run, encoded: &Encoded, token: &str) -> Item {
    let mut head = keys::run(run.organization_id, run.id);
    head.extend([
        ("id".to_owned(), s(run.id.to_string())),
        ("agent_id".to_owned(), s(run.agent_id.to_string())),
        ("status".to_owned(), s(run.status.as_str())),
        ("started_at".to_owned(), s(run.started_at.to_string())),
        ("version".to_owned(), n(run.version)),
        ("write_token".to_owned(), s(token)),
        ("form".to_owned(), n(RECORDS_FORM)),
        ("document".to_owned(), AttributeValue::B(Blob::new(encoded.head.clone()))),
    ]);
    if let Some(trigger) = run.trigger_id() {
        head.insert("trigger_id".to_owned(), s(trigger.to_string()));
    }
    // A run owing refunds (a cancel's, paid in batches) is swept like a running one
    // until they are paid.
    if run.status == crate::domain::runs::RunStatus::Running || run.refunds_owed > 0 {
        head.extend(keys::sweep_running(run.id));
    }
    head
}

/// A record of a run: its key, the version that wrote it and its bytes.
fn record_item(mut key: Item, version: u64, bytes: &[u8]) -> Item {
    key.extend([("version".to_owned(), n(version)), ("document".to_owned(), AttributeValue::B(Blob::new(bytes)))]);
    key
}

/// The plan parts and changed chunks of `encoded` (written with the head), and its new
/// outputs (write-once records).
fn record_items(run: &Run, encoded: &Encoded) -> (Vec<Item>, Vec<Item>) {
    let (organization, id, version) = (run.organization_id, run.id, run.version);
    let mut records: Vec<Item> = encoded
        .plan
        .iter()
        .flat_map(|plan| plan.chunks(PART_BYTES).enumerate())
        .map(|(part, bytes)| record_item(keys::run_plan(organization, id, part), version, bytes))
        .collect();
    records.extend(
        encoded
            .chunks
            .iter()
            .map(|(chunk, bytes)| record_item(keys::run_chunk(organization, id, *chunk), version, bytes)),
    );
    let outputs = encoded
        .outputs
        .iter()
        .map(|(position, bytes)| record_item(keys::run_output(organization, id, *position), version, bytes))
        .collect();
    (records, outputs)
}

/// The condition a write of a run's head is under, and the version it expects.
struct Guard<'a> {
    condition: &'a str,
    expected: Option<u64>,
}

/// The number after a record's sort-key prefix.
fn record_number(item: &Item, prefix: &str) -> anyhow::Result<usize> {
    let sk = text(item, "sk")?;
    sk.strip_prefix(prefix)
        .and_then(|number| number.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("a run record's key {sk:?} is not {prefix}<n>"))
}

pub(super) fn media_item(record: &MediaRecord) -> Item {
    let mut item = keys::media(record.id);
    item.extend([
        ("id".to_owned(), s(record.id.to_string())),
        ("organization_id".to_owned(), s(record.organization_id.to_string())),
        ("run_id".to_owned(), s(record.run_id.to_string())),
        ("kind".to_owned(), s(record.kind.as_str())),
        ("blob_key".to_owned(), s(&record.key)),
        ("content_type".to_owned(), s(&record.content_type)),
        ("created_at".to_owned(), s(record.created_at.to_string())),
    ]);
    if let Some(duration) = record.duration_ms {
        item.insert("duration_ms".to_owned(), n(duration));
    }
    if let Some(version) = &record.version {
        item.insert("blob_version".to_owned(), s(version));
    }
    item
}

fn media_from(item: &Item) -> anyhow::Result<MediaRecord> {
    let kind = text(item, "kind")?;
    Ok(MediaRecord {
        id: id(item, "id")?,
        organization_id: id(item, "organization_id")?,
        run_id: id(item, "run_id")?,
        kind: MediaKind::parse(kind).ok_or_else(|| anyhow::anyhow!("media kind {kind:?} is not known"))?,
        key: text(item, "blob_key")?.to_owned(),
        version: optional_text(item, "blob_version")?.map(str::to_owned),
        content_type: text(item, "content_type")?.to_owned(),
        duration_ms: optional_number(item, "duration_ms")?,
        created_at: timestamp(item, "created_at")?,
    })
}

fn run_from(document: &[u8]) -> anyhow::Result<Run> {
    read_run_document(document)
}

impl DynamoDb {
    /// Writes a run's changed records and new media records, in one transaction with
    /// the head (write-once records first when they would not fit it). `condition`
    /// guards the head item. Keeps the run in the cache once it is known stored.
    async fn write_run(
        &self,
        run: &Run,
        (media, deliveries, account): (&[MediaRecord], &[WebhookDelivery], Option<&AccountWrite>),
        condition: &str,
        expected: Option<u64>,
        claim: Option<Item>,
    ) -> anyhow::Result<bool> {
        let mut before = expected.and_then(|expected| self.runs.get(run.organization_id, run.id, expected));
        if let (None, Some(expected)) = (&before, expected) {
            // The version this change was made on left the cache since it was read: read
            // it again, so that only what changed is written. Written whole, the outputs
            // would go ahead of the head (more than a transaction holds), where those of
            // a writer that loses the race could land after the winner's and replace them.
            match self.get(keys::run(run.organization_id, run.id), "reading a run").await? {
                Some(head) if number::<u64>(&head, "version")? == expected => {
                    if head.contains_key("form") && self.records_of(&head).await?.is_some() {
                        before = self.runs.get(run.organization_id, run.id, expected);
                    }
                }
                // Another writer came first: this change is made again on what it stored.
                _ => return Ok(false),
            }
        }
        let encoded = stored::encode(before.as_deref(), run)?;
        let token = uuid::Uuid::new_v4().to_string();
        let guard = Guard { condition, expected };
        let mut written = self.put_run(run, &encoded, (media, deliveries, account), guard, &token, claim).await?;
        if !written {
            // The condition failed: another writer came first, or this write landed and
            // its answer was lost (the SDK's retry then met the version it had written).
            let head = self.get(keys::run(run.organization_id, run.id), "reading a run").await?;
            written = head.is_some_and(|head| {
                optional_text(&head, "write_token").ok().flatten() == Some(token.as_str())
                    && number::<u64>(&head, "version").ok() == Some(run.version)
            });
        }
        if written {
            self.runs.put(Stored { run: run.clone(), sizes: Some(encoded.sizes) });
        }
        Ok(written)
    }

    /// Puts `items` (write-once records) in transactions of at most 100.
    async fn put_records(&self, items: Vec<Item>, what: &'static str) -> anyhow::Result<()> {
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            let puts = items
                .by_ref()
                .take(TRANSACTION_ITEMS)
                .map(|item| {
                    let put = build(Put::builder().table_name(&self.table).set_item(Some(item)).build())?;
                    Ok(TransactWriteItem::builder().put(put).build())
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            anyhow::ensure!(self.transact(puts, what).await?.is_ok(), "{what} failed");
        }
        Ok(())
    }

    /// [`Self::write_run`]'s write under `token`: false when its condition failed.
    async fn put_run(
        &self,
        run: &Run,
        encoded: &Encoded,
        (media, deliveries, account): (&[MediaRecord], &[WebhookDelivery], Option<&AccountWrite>),
        Guard { condition, expected }: Guard<'_>,
        token: &str,
        claim: Option<Item>,
    ) -> anyhow::Result<bool> {
        // The account's change goes in the same transaction (its own condition), marked
        // with the run's token; so does a claim, written only if none was before.
        let mut account = match account {
            Some(write) => super::credits::account_parts(&self.table, write, token)?,
            None => Vec::new(),
        };
        if let Some(claim) = claim {
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(claim))
                .condition_expression("attribute_not_exists(pk)");
            account.push(TransactWriteItem::builder().put(build(put.build())?).build());
        }
        let deliveries = deliveries.iter().map(super::webhooks::delivery_item).collect::<anyhow::Result<Vec<_>>>()?;
        let head = head_item(run, encoded, token);
        let (records, mut outputs) = record_items(run, encoded);
        let mut media: Vec<Item> = media.iter().map(media_item).collect();
        if 1 + records.len() + outputs.len() + media.len() + deliveries.len() + account.len() > TRANSACTION_ITEMS {
            // Write-once records first, the head that counts them after: a failure in
            // between leaves records no head names (outputs beyond its count, media no
            // run links to), never a head naming missing ones.
            self.put_records(std::mem::take(&mut outputs), "recording a run's outputs").await?;
            self.put_records(std::mem::take(&mut media), "recording media").await?;
        }
        anyhow::ensure!(
            1 + records.len() + deliveries.len() + account.len() <= TRANSACTION_ITEMS,
            "run {} would write {} records in one change, over DynamoDB's {TRANSACTION_ITEMS}",
            run.id,
            1 + records.len() + deliveries.len() + account.len()
        );
        let rest: Vec<Item> = records.into_iter().chain(outputs).chain(media).chain(deliveries).collect();
        if rest.is_empty() && account.is_empty() {
            let values: Vec<_> = expected.map(|expected| (":expected", n(expected))).into_iter().collect();
            return self.put_if(head, condition, &values, "storing a run").await;
        }
        let mut head_put = Put::builder().table_name(&self.table).set_item(Some(head)).condition_expression(condition);
        if let Some(expected) = expected {
            head_put = head_put.expression_attribute_values(":expected", n(expected));
        }
        let mut items = vec![TransactWriteItem::builder().put(build(head_put.build())?).build()];
        for item in rest {
            let put = build(Put::builder().table_name(&self.table).set_item(Some(item)).build())?;
            items.push(TransactWriteItem::builder().put(put).build());
        }
        items.extend(account);
        Ok(self.transact(items, "storing a run").await?.is_ok())
    }

    /// The run whose head item (as records) is `head`: from the cache at the head's
    /// version, else its records read (None when one is newer than the head: a write
    /// landed in between, read again).
    async fn records_of(&self, head: &Item) -> anyhow::Result<Option<Run>> {
        let version: u64 = number(head, "version")?;
        let run: RunId = id(head, "id")?;
        let organization: OrganizationId = {
            let pk = text(head, "pk")?;
            pk.strip_prefix("ORG#").and_then(OrganizationId::parse).ok_or_else(|| anyhow::anyhow!("run key {pk:?}"))?
        };
        if let Some(cached) = self.runs.get(organization, run, version) {
            return Ok(Some(cached.run.clone()));
        }
        // A version this process read or wrote before: its plan and outputs are write-once,
        // so only the chunks stamped after it and the outputs past its count are needed.
        // (On Lambda consecutive changes of a run land on different instances: this keeps
        // such a read from costing the whole run.)
        let older =
            self.runs.latest(organization, run).filter(|older| older.sizes.is_some() && older.run.version < version);
        if let Some(older) = older {
            match self.read_records(head, (organization, run, version), Some(&older)).await {
                Ok(found) => return Ok(found),
                Err(error) => tracing::warn!(
                    run_id = %run,
                    error = %format!("{error:#}"),
                    "a run could not be brought up to date from the version read before; reading it whole"
                ),
            }
        }
        self.read_records(head, (organization, run, version), None).await
    }

    /// [`Self::records_of`]'s read of the records of run `key` (at the head's version):
    /// all of them, or what was written since `older`.
    async fn read_records(
        &self,
        head: &Item,
        (organization, run, version): (OrganizationId, RunId, u64),
        older: Option<&Stored>,
    ) -> anyhow::Result<Option<Run>> {
        let pk = keys::run_parts_pk(organization, run);
        let outputs_from = keys::run_output_sk(older.map_or(0, |older| older.run.outputs.len()));
        let plan = async {
            match older {
                Some(_) => Ok(Vec::new()),
                None => self.query_all(pk.clone(), Some(keys::PLAN_PREFIX), None, "reading a run's plan").await,
            }
        };
        // Chunks newer than the head (a write landed in between) are among those asked for.
        let (plan, chunks, outputs) = tokio::try_join!(
            plan,
            self.query_from(
                pk.clone(),
                keys::CHUNK_PREFIX,
                older.map(|older| older.run.version),
                "reading a run's tasks"
            ),
            self.query_from(pk.clone(), &outputs_from, None, "reading a run's outputs"),
        )?;
        let mut plan_bytes = Vec::new();
        for part in &plan {
            plan_bytes.extend(blob(part, "document")?);
        }
        let mut chunk_bytes = Vec::with_capacity(chunks.len());
        for chunk in &chunks {
            let written: u64 = number(chunk, "version")?;
            if written > version {
                return Ok(None);
            }
            chunk_bytes.push((record_number(chunk, keys::CHUNK_PREFIX)?, blob(chunk, "document")?));
        }
        let mut output_bytes = Vec::with_capacity(outputs.len());
        for output in &outputs {
            output_bytes.push((record_number(output, keys::OUTPUT_PREFIX)?, blob(output, "document")?));
        }
        let chunks: Vec<(usize, &[u8])> = chunk_bytes.iter().map(|(chunk, bytes)| (*chunk, bytes.as_slice())).collect();
        let outputs: Vec<(usize, &[u8])> =
            output_bytes.iter().map(|(position, bytes)| (*position, bytes.as_slice())).collect();
        let head = blob(head, "document")?;
        let stored = match older {
            Some(older) => stored::refresh(older, &head, &chunks, &outputs)?,
            None => stored::decode(&plan_bytes, &head, &chunks, &outputs)?,
        };
        anyhow::ensure!(stored.run.version == version, "run {run}: its head record is not at the head's version");
        let found = stored.run.clone();
        self.runs.put(stored);
        Ok(Some(found))
    }

    /// The whole document of a run whose head item is `head`, reading its further parts
    /// when it has some; None when they belong to another version than the head (a write
    /// landed in between: read again).
    async fn document_of(&self, head: &Item) -> anyhow::Result<Option<Vec<u8>>> {
        let mut document = blob(head, "document")?;
        let parts: usize = number(head, "parts")?;
        if parts <= 1 {
            return Ok(Some(document));
        }
        let version: u64 = number(head, "version")?;
        let run: RunId = id(head, "id")?;
        let organization: OrganizationId = {
            let pk = text(head, "pk")?;
            pk.strip_prefix("ORG#").and_then(OrganizationId::parse).ok_or_else(|| anyhow::anyhow!("run key {pk:?}"))?
        };
        // One GetItem per part: a rare path (runs of thousands of tasks), on the action
        // every reader of runs has already.
        for part in 1..parts {
            let Some(item) = self.get(keys::run_part(organization, run, part), "reading a run").await? else {
                return Ok(None);
            };
            if number::<u64>(&item, "version")? != version {
                return Ok(None);
            }
            document.extend(blob(&item, "document")?);
        }
        Ok(Some(document))
    }

    /// A run from its head item (either form), reading again (a few times) when a write
    /// tore the read.
    async fn run_from_head(&self, mut head: Item) -> anyhow::Result<Run> {
        for _ in 0..TORN_READS {
            if head.contains_key("form") {
                if let Some(run) = self.records_of(&head).await? {
                    return Ok(run);
                }
            } else if let Some(document) = self.document_of(&head).await? {
                return run_from(&document);
            }
            let key = super::table::key_of(&head);
            head = self
                .get(key, "reading a run")
                .await?
                .ok_or_else(|| anyhow::anyhow!("a run disappeared while it was read"))?;
        }
        anyhow::bail!("a run kept changing while it was read ({TORN_READS} reads)")
    }
}

#[async_trait]
impl RunRepo for DynamoDb {
    async fn create_run(
        &self,
        run: &Run,
        media: &[MediaRecord],
        deliveries: &[WebhookDelivery],
        claim: Option<&str>,
    ) -> anyhow::Result<bool> {
        let claim = claim.map(|claim| {
            let mut item = keys::run_claim(run.organization_id, claim);
            item.insert("run_id".to_owned(), s(run.id.to_string()));
            item
        });
        let created =
            self.write_run(run, (media, deliveries, None), "attribute_not_exists(pk)", None, claim.clone()).await?;
        anyhow::ensure!(created || claim.is_some(), "run {} already exists", run.id);
        Ok(created)
    }

    async fn get_run(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<Run>> {
        match self.get(keys::run(organization, id), "reading a run").await? {
            Some(head) => Ok(Some(self.run_from_head(head).await?)),
            None => Ok(None),
        }
    }

    async fn run_status(&self, organization: OrganizationId, id: RunId) -> anyhow::Result<Option<RunStatus>> {
        let found = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(keys::run(organization, id)))
            .projection_expression("#status")
            .expression_attribute_names("#status", "status")
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| super::table::failure(error, "reading a run's status"))?;
        let Some(item) = found.item else { return Ok(None) };
        let status = text(&item, "status")?;
        RunStatus::parse(status).map(Some).ok_or_else(|| anyhow::anyhow!("run status {status:?} is not known"))
    }

    async fn update_run(
        &self,
        run: &Run,
        media: &[MediaRecord],
        deliveries: &[WebhookDelivery],
        account: Option<&AccountWrite>,
    ) -> anyhow::Result<bool> {
        let expected = run.version.checked_sub(1).ok_or_else(|| anyhow::anyhow!("an update names version 0"))?;
        self.write_run(run, (media, deliveries, account), "version = :expected", Some(expected), None).await
    }

    async fn list_runs(&self, organization: OrganizationId, query: &RunQuery) -> anyhow::Result<Vec<Run>> {
        let bound = |at: Option<crate::domain::time::Timestamp>, last: bool| match at {
            Some(at) => format!("{}{}", keys::RUN_PREFIX, RunId::v7_bound(at.unix_millis(), last)),
            // '~' sorts after every character of a UUID.
            None => format!("{}{}", keys::RUN_PREFIX, if last { "~" } else { "" }),
        };
        let mut filter = Vec::new();
        let mut request = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND sk BETWEEN :low AND :high")
            .expression_attribute_values(":pk", s(keys::organization_pk(organization)))
            .expression_attribute_values(":low", s(bound(query.from, false)))
            .expression_attribute_values(":high", s(bound(query.to, true)))
            .scan_index_forward(false)
            .consistent_read(true);
        if let Some(agent) = query.agent_id {
            filter.push("agent_id = :agent".to_owned());
            request = request.expression_attribute_values(":agent", s(agent.to_string()));
        }
        if let Some(trigger) = query.trigger_id {
            filter.push("trigger_id = :trigger".to_owned());
            request = request.expression_attribute_values(":trigger", s(trigger.to_string()));
        }
        if !query.statuses.is_empty() {
            let names: Vec<String> = (0..query.statuses.len()).map(|index| format!(":status{index}")).collect();
            for (name, status) in names.iter().zip(&query.statuses) {
                request = request.expression_attribute_values(name, s(status.as_str()));
            }
            filter.push(format!("#status IN ({})", names.join(", ")));
            request = request.expression_attribute_names("#status", "status");
        }
        request = if filter.is_empty() {
            // limit + 1 tells whether another page follows.
            request.limit(query.limit as i32 + 1)
        } else {
            request.filter_expression(filter.join(" AND ")).limit(FILTERED_PAGE_ITEMS)
        };
        let start = query.after.map(|(_, after)| keys::run(organization, after));
        query_beyond(request, start, query.limit, "listing runs", |item| self.run_from_head(item)).await
    }

    async fn running_runs(&self, cursor: Option<String>, limit: usize) -> anyhow::Result<RunningPage> {
        // The cursor: the shard, and the last run read of it.
        let (mut shard, mut after) = match cursor.as_deref().and_then(|cursor| cursor.split_once('/')) {
            Some((shard, run)) => {
                (shard.parse::<u8>().unwrap_or(0), Some(run.to_owned()).filter(|run| !run.is_empty()))
            }
            None => (0, None),
        };
        let mut found = Vec::new();
        while shard < keys::SWEEP_SHARDS && found.len() < limit {
            let mut request = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(keys::SWEEP_INDEX)
                .expression_attribute_values(":pk", s(format!("RUNNING#{shard}")))
                .limit((limit - found.len()) as i32);
            request = match &after {
                Some(run) => request
                    .key_condition_expression("sweep_pk = :pk AND sweep_sk > :after")
                    .expression_attribute_values(":after", s(run)),
                None => request.key_condition_expression("sweep_pk = :pk"),
            };
            let page = request.send().await.map_err(|error| super::table::failure(error, "listing running runs"))?;
            for item in page.items() {
                let organization = text(item, "pk")?
                    .strip_prefix("ORG#")
                    .and_then(OrganizationId::parse)
                    .ok_or_else(|| anyhow::anyhow!("a running run's key has no organization"))?;
                let run: RunId = id(item, "sweep_sk")?;
                after = Some(run.to_string());
                found.push((organization, run));
            }
            if page.last_evaluated_key().is_none() {
                (shard, after) = (shard + 1, None);
            }
        }
        let next = (shard < keys::SWEEP_SHARDS).then(|| format!("{shard}/{}", after.unwrap_or_default()));
        Ok((found, next))
    }
}

#[async_trait]
impl MediaRecords for DynamoDb {
    async fn get_media(&self, id: MediaId) -> anyhow::Result<Option<MediaRecord>> {
        self.get(keys::media(id), "reading media").await?.as_ref().map(media_from).transpose()
    }
}
