//! Every key of the table, in one place. Keys start with the organization, so one
//! organization's items can never be read through another's.
//!
//! | item            | pk                              | sk                          |
//! |-----------------|---------------------------------|-----------------------------|
//! | API key         | `APIKEY#{sha256}`               | `APIKEY`                    |
//! | organization    | `ORG#{org}`                     | `ORG`                       |
//! | shared store    | `ORG#{org}`                     | `STORE#{store}`             |
//! | store entry     | `ORG#{org}#STORE#{store}`       | `{entry_id}` (≤ 1,024 bytes, DynamoDB's sort-key limit) |
//! | bulk journal    | `ORG#{org}#STORE#{store}#BULK`  | `{lease}#{chunk}`           |
//! | workspace       | `ORG#{org}`                     | `WORKSPACE#{id}`            |
//! | agent + graph   | `ORG#{org}`                     | `AGENT#{id}` (v7 IDs: key order is creation order) |
//! | upload/asset    | `ORG#{org}`                     | `UPLOAD#{id}`               |
//! | run head        | `ORG#{org}`                     | `RUN#{id}` (v7 IDs of the start time: key order is start order) |
//! | run plan part   | `ORG#{org}#RUN#{id}`            | `PLAN#{n:03}`               |
//! | run task chunk  | `ORG#{org}#RUN#{id}`            | `CHUNK#{n:04}`              |
//! | run output      | `ORG#{org}#RUN#{id}`            | `OUTPUT#{position:06}`      |
//! | run part n ≥ 1  | `ORG#{org}#RUN#{id}`            | `PART#{n:03}` (runs stored whole, before the split) |
//! | media record    | `MEDIA#{id}`                    | `MEDIA` (links carry only the ID; the signature is the authority) |
//! | webhook delivery| `ORG#{org}#RUN#{id}`            | `WEBHOOK#{sequence:012}` (key order is sequence order) |
//! | webhook secret  | `ORG#{org}`                     | `WEBHOOK_SECRET`            |
//! | idempotency key | `ORG#{org}`                     | `IDEMPOTENCY#{sha256 of the key}` |
//! | asset connection| `ORG#{org}`                     | `ASSETCONN#{workspace}` (one per workspace) |
//! | asset item      | `ORG#{org}#ASSETS#{connection}` | `ITEM#{item}`               |
//! | avatar profile  | `ORG#{org}`                     | `AVATAR#{id}` (v7 IDs: key order is creation order) |
//! | avatar name     | `ORG#{org}`                     | `AVATARNAME#{workspace}#{name, trimmed, case folded}` (≤ 800 bytes) |
//! | credit account  | `ORG#{org}`                     | `ACCOUNT`                   |
//! | ledger entry    | `ORG#{org}`                     | `LEDGER#{seq:020}#{position:06}` (key order is ledger order) |
//! | applied payment | `BILLINGONCE#{event}`           | `ONCE`                      |
//! | checkout        | `CHECKOUT#{id}`                 | `CHECKOUT` (its ID is its secret: the page has no key) |
//! | social connection | `ORG#{org}`                   | `SOCIALCONN#{id}` (v7 IDs: key order is creation order) |
//! | social post     | `ORG#{org}`                     | `POST#{id}` (v7 IDs of the creation time: key order is creation order); while `scheduled`, in the sweep index as `DUE#post` (`sweep_due`) |
//! | post by status  | `ORG#{org}#POSTS#STATUS#{status}` | `{id}`: a copy of the post for the list's status filter, moved when its status changes |
//! | post by platform| `ORG#{org}#POSTS#PLATFORM#{platform}` | `{id}`: a copy per platform it goes to |
//! | post by account | `ORG#{org}#POSTS#CONN#{connection}` | `{id}`: a copy per connection it goes to |
//! | trigger state   | `ORG#{org}`                     | `TRIGGER#{agent_node_id}`: next due time, last fire and error, a feed's entries seen (JSON) under a write count; while enabled and due, in the sweep index as `DUE#schedule` or `DUE#feed` by its kind (`sweep_due`; items written before the split carry `DUE#trigger`, still read until rewritten) |
//! | run claim       | `ORG#{org}`                     | `RUNCLAIM#{sha256}`: written with the run it lets start, only if absent (a trigger's due time, a feed's entry) |
//!
//! The sparse, keys-only index `sweep` (`sweep_pk`, `sweep_sk`) holds what the scheduled
//! functions walk: running run heads (`RUNNING#{shard}` / run ID), unattempted webhook
//! deliveries (`UNSENT#{shard}` / delivery ID), and items due at a time (`DUE#{kind}` /
//! `{due time}#{org}#{id}`, the 24-character time first so that key order is due order):
//! the scheduler reads each kind's partition (posts; Schedules; Channel Feeds) from its
//! earliest, in bounded pages, what is due at or before its tick.

use std::collections::HashMap;

use uuid::Uuid;

use super::table::{s, Item};
use super::AttributeValue;
use crate::domain::ids::AgentId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::StoreId;
use crate::domain::ids::UploadId;
use crate::domain::ids::WorkspaceId;
use crate::domain::ids::{MediaId, RunId};
use crate::domain::shared_stores::EntryId;

/// Sort-key prefix of stores in an organization's partition.
pub const STORE_PREFIX: &str = "STORE#";
/// Sort-key prefix of workspaces in an organization's partition.
pub const WORKSPACE_PREFIX: &str = "WORKSPACE#";
/// Sort-key prefix of asset-manager connections in an organization's partition.
pub const ASSET_CONNECTION_PREFIX: &str = "ASSETCONN#";
/// Sort-key prefix of agents in an organization's partition.
pub const AGENT_PREFIX: &str = "AGENT#";
/// Sort-key prefix of runs in an organization's partition.
pub const RUN_PREFIX: &str = "RUN#";

fn key(pk: String, sk: impl Into<String>) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

/// The partition of an organization's own items (stores, workspaces, agents, uploads).
pub fn organization_pk(organization: OrganizationId) -> String {
    format!("ORG#{organization}")
}

/// An API key, by the hash of the key.
pub fn api_key(key_hash: &str) -> Item {
    key(format!("APIKEY#{key_hash}"), "APIKEY")
}

/// The organization item, which also counts its stores.
pub fn organization(organization: OrganizationId) -> Item {
    key(organization_pk(organization), "ORG")
}

/// A store item, which also counts its entries and carries its lease.
pub fn store(organization: OrganizationId, store: StoreId) -> Item {
    key(organization_pk(organization), format!("{STORE_PREFIX}{store}"))
}

/// The partition of a store's entries, which holds nothing else.
pub fn entries_pk(organization: OrganizationId, store: StoreId) -> String {
    format!("ORG#{organization}#STORE#{store}")
}

/// One entry.
pub fn entry(organization: OrganizationId, store: StoreId, entry_id: &EntryId) -> Item {
    key(entries_pk(organization, store), entry_id.as_str())
}

/// The partition of the journals of a store's bulk upserts.
pub fn journal_pk(organization: OrganizationId, store: StoreId) -> String {
    format!("ORG#{organization}#STORE#{store}#BULK")
}

/// The sort-key prefix of the journal of the bulk upsert holding `lease`.
pub fn journal_prefix(lease: Uuid) -> String {
    format!("{lease}#")
}

/// One chunk of a bulk upsert's journal.
pub fn journal(organization: OrganizationId, store: StoreId, lease: Uuid, chunk: usize) -> Item {
    key(journal_pk(organization, store), format!("{}{chunk:05}", journal_prefix(lease)))
}

/// A workspace.
pub fn workspace(organization: OrganizationId, id: WorkspaceId) -> Item {
    key(organization_pk(organization), format!("{WORKSPACE_PREFIX}{id}"))
}

/// An agent with its graph.
pub fn agent(organization: OrganizationId, id: AgentId) -> Item {
    key(organization_pk(organization), format!("{AGENT_PREFIX}{id}"))
}

/// Sort-key prefix of avatar profiles in an organization's partition.
pub const AVATAR_PREFIX: &str = "AVATAR#";

/// An avatar profile.
pub fn avatar(organization: OrganizationId, id: crate::domain::avatars::AvatarProfileId) -> Item {
    key(organization_pk(organization), format!("{AVATAR_PREFIX}{id}"))
}

/// An organization's credit account.
pub fn account(organization: OrganizationId) -> Item {
    key(organization_pk(organization), "ACCOUNT")
}

/// Sort-key prefix of ledger entries in an organization's partition.
pub const LEDGER_PREFIX: &str = "LEDGER#";

/// A ledger entry, at its place in the ledger.
pub fn ledger_entry(organization: OrganizationId, seq: u64, position: u32) -> Item {
    key(organization_pk(organization), format!("{LEDGER_PREFIX}{seq:020}#{position:06}"))
}

/// The record that a payment (a checkout, a provider's event) was applied.
pub fn billing_once(event: &str) -> Item {
    key(format!("BILLINGONCE#{event}"), "ONCE")
}

/// A checkout.
pub fn checkout(id: crate::domain::credits::CheckoutId) -> Item {
    key(format!("CHECKOUT#{id}"), "CHECKOUT")
}

/// The claim of an avatar name in a workspace (`name_key`: trimmed, case folded).
pub fn avatar_name(organization: OrganizationId, workspace: WorkspaceId, name_key: &str) -> Item {
    key(organization_pk(organization), format!("AVATARNAME#{workspace}#{name_key}"))
}

/// An upload (an asset once finalized).
pub fn upload(organization: OrganizationId, id: UploadId) -> Item {
    key(organization_pk(organization), format!("UPLOAD#{id}"))
}

/// A run: its searchable attributes and the first part of its document.
pub fn run(organization: OrganizationId, id: RunId) -> Item {
    key(organization_pk(organization), format!("{RUN_PREFIX}{id}"))
}

/// The partition of a run's further document parts.
pub fn run_parts_pk(organization: OrganizationId, id: RunId) -> String {
    format!("ORG#{organization}#RUN#{id}")
}

/// Part `part` (from 1) of a run's document.
pub fn run_part(organization: OrganizationId, id: RunId, part: usize) -> Item {
    key(run_parts_pk(organization, id), format!("PART#{part:03}"))
}

/// Sort-key prefixes of a run's records in its own partition (domain::runs::stored).
pub const PLAN_PREFIX: &str = "PLAN#";
pub const CHUNK_PREFIX: &str = "CHUNK#";
pub const OUTPUT_PREFIX: &str = "OUTPUT#";

/// Part `part` (from 0) of a run's plan.
pub fn run_plan(organization: OrganizationId, id: RunId, part: usize) -> Item {
    key(run_parts_pk(organization, id), format!("{PLAN_PREFIX}{part:03}"))
}

/// Chunk `chunk` of a run's task state.
pub fn run_chunk(organization: OrganizationId, id: RunId, chunk: usize) -> Item {
    key(run_parts_pk(organization, id), format!("{CHUNK_PREFIX}{chunk:04}"))
}

/// A run's output by position.
pub fn run_output(organization: OrganizationId, id: RunId, position: usize) -> Item {
    key(run_parts_pk(organization, id), run_output_sk(position))
}

/// The sort key of a run's output by position (in its run's partition).
pub fn run_output_sk(position: usize) -> String {
    format!("{OUTPUT_PREFIX}{position:06}")
}

/// Sort-key prefix of a run's webhook deliveries in its own partition.
pub const WEBHOOK_PREFIX: &str = "WEBHOOK#";

/// A run's webhook delivery by sequence.
pub fn webhook_delivery(organization: OrganizationId, id: RunId, sequence: u64) -> Item {
    key(run_parts_pk(organization, id), format!("{WEBHOOK_PREFIX}{sequence:012}"))
}

/// The sparse index the sweeper reads (`sweep_pk`, `sweep_sk`; keys only): the heads of
/// running runs and the webhook deliveries not yet attempted carry its attributes, and
/// nothing else does. Its partitions are split in [`SWEEP_SHARDS`] so that no one of
/// them takes every run's writes.
pub const SWEEP_INDEX: &str = "sweep";
/// Partitions of each kind in the sweep index.
pub const SWEEP_SHARDS: u8 = 4;

fn shard(id: Uuid) -> u8 {
    id.as_bytes()[15] % SWEEP_SHARDS
}

/// A running run's attributes in the sweep index.
pub fn sweep_running(id: RunId) -> [(String, AttributeValue); 2] {
    [("sweep_pk".to_owned(), s(format!("RUNNING#{}", shard(id.as_uuid())))), ("sweep_sk".to_owned(), s(id.to_string()))]
}

/// An unattempted delivery's attributes in the sweep index (its ID orders by creation).
pub fn sweep_unsent(id: crate::domain::webhooks::DeliveryId) -> [(String, AttributeValue); 2] {
    [("sweep_pk".to_owned(), s(format!("UNSENT#{}", shard(id.as_uuid())))), ("sweep_sk".to_owned(), s(id.to_string()))]
}

/// A claim that lets one run only be started for it (a trigger's due time, a feed's
/// entry): written with the run, only if absent. Claims are 64-character digests.
pub fn run_claim(organization: OrganizationId, claim: &str) -> Item {
    key(organization_pk(organization), format!("RUNCLAIM#{claim}"))
}

/// A trigger's state (`domain::triggers::TriggerState`).
pub fn trigger(organization: OrganizationId, id: crate::domain::graph::AgentNodeId) -> Item {
    key(organization_pk(organization), format!("TRIGGER#{id}"))
}

/// An item due at a time, in the sweep index: the partition `DUE#<kind>` holds the items
/// the scheduler acts on (a trigger's next fire, a scheduled post), sorted by due time
/// (`<timestamp>#<organization>#<id>`: the fixed-width time text sorts as the time).
/// An item that is not due any more drops the two attributes.
pub fn sweep_due(
    kind: &str,
    at: crate::domain::time::Timestamp,
    organization: OrganizationId,
    id: impl std::fmt::Display,
) -> [(String, AttributeValue); 2] {
    [("sweep_pk".to_owned(), s(format!("DUE#{kind}"))), ("sweep_sk".to_owned(), s(format!("{at}#{organization}#{id}")))]
}

/// Sort-key prefix of social connections in an organization's partition.
pub const SOCIAL_CONNECTION_PREFIX: &str = "SOCIALCONN#";
/// Sort-key prefix of social posts in an organization's partition.
pub const POST_PREFIX: &str = "POST#";
/// The kind of scheduled posts in the sweep index's due partitions.
pub const DUE_POST: &str = "post";

/// A social connection.
pub fn social_connection(organization: OrganizationId, id: crate::domain::social::SocialConnectionId) -> Item {
    key(organization_pk(organization), format!("{SOCIAL_CONNECTION_PREFIX}{id}"))
}

/// A social post.
pub fn social_post(organization: OrganizationId, id: crate::domain::social::PostId) -> Item {
    key(organization_pk(organization), format!("{POST_PREFIX}{id}"))
}

/// The partition of an organization's posts of one filter value (`STATUS#posted`,
/// `PLATFORM#x`, `CONN#{id}`): copies of the posts, keyed by post ID.
pub fn posts_by_pk(organization: OrganizationId, filter: &str) -> String {
    format!("ORG#{organization}#POSTS#{filter}")
}

/// A post's copy in the partition of one filter value.
pub fn post_by(organization: OrganizationId, filter: &str, id: crate::domain::social::PostId) -> Item {
    key(posts_by_pk(organization, filter), id.to_string())
}

/// An organization's webhook secret.
pub fn webhook_secret(organization: OrganizationId) -> Item {
    key(organization_pk(organization), "WEBHOOK_SECRET")
}

/// An organization's idempotency key (hashed: keys may hold any visible character).
pub fn idempotency_key(organization: OrganizationId, idempotency_key: &str) -> Item {
    use sha2::Digest;
    let hash = hex::encode(sha2::Sha256::digest(idempotency_key.as_bytes()));
    key(organization_pk(organization), format!("IDEMPOTENCY#{hash}"))
}

/// A workspace's asset-manager connection.
pub fn asset_connection(organization: OrganizationId, workspace: WorkspaceId) -> Item {
    key(organization_pk(organization), format!("{ASSET_CONNECTION_PREFIX}{workspace}"))
}

/// An item of a `local` asset-manager connection.
pub fn asset_item(
    organization: OrganizationId,
    connection: impl std::fmt::Display,
    item: impl std::fmt::Display,
) -> Item {
    key(format!("{}#ASSETS#{connection}", organization_pk(organization)), format!("ITEM#{item}"))
}

/// A media record.
pub fn media(id: MediaId) -> Item {
    key(format!("MEDIA#{id}"), "MEDIA")
}
