//! Social connections and posts in DynamoDB. A post is its item (`POST#{id}` in the
//! organization's partition, the JSON document beside the attributes its rules need),
//! and a copy per filter value in that value's partition — its status, each platform and
//! each connection it goes to (`keys::post_by`) — written in the same transaction, so
//! that a filtered list is one query of one partition, newest first from the cursor
//! (with a filter expression for the other filters of a combined list). An update is
//! conditional on the version it read; it writes the copies again and deletes the copies
//! under the other statuses. While `scheduled`, the item carries the sweep index's
//! `DUE#post` attributes, which the scheduler reads.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem, Update};

use super::runs::media_item;
use super::table::{condition_failed, n, query_beyond, s, text, Item, TransactPart};
use super::{keys, AttributeValue, DynamoDb};
use crate::domain::ids::OrganizationId;
use crate::domain::ids::{PostId, SocialConnectionId};
use crate::domain::media::MediaRecord;
use crate::domain::social::{PostFilter, PostPage, PostStatus, SocialConnection};
use crate::domain::social::{SocialPost, SocialRepo};
use crate::domain::time::Timestamp;

fn document_of<T: serde::de::DeserializeOwned>(item: &Item) -> anyhow::Result<T> {
    Ok(serde_json::from_str(text(item, "document")?)?)
}

/// The filter values of a post's copies.
fn filters_of(post: &SocialPost) -> Vec<String> {
    let mut filters = vec![format!("STATUS#{}", post.status.as_str())];
    filters.extend(post.platforms().into_iter().map(|platform| format!("PLATFORM#{}", platform.as_str())));
    filters.extend(post.connection_ids().into_iter().map(|id| format!("CONN#{id}")));
    filters
}

/// The attributes a list's filter expression reads, on the item and each copy.
fn listed_attributes(post: &SocialPost, document: &str) -> Vec<(String, AttributeValue)> {
    // A connection filter is always its own partition's query: only these two filter.
    let platforms = post.platforms().into_iter().map(|platform| s(platform.as_str())).collect();
    vec![
        ("post_status".to_owned(), s(post.status.as_str())),
        ("platforms".to_owned(), AttributeValue::L(platforms)),
        ("document".to_owned(), s(document)),
    ]
}

impl DynamoDb {
    /// The puts of a post's item (under `condition`) and its copies, and, for a post
    /// stored before (`moved`), the deletes of its copies under the statuses it does not
    /// have.
    fn post_parts(
        &self,
        post: &SocialPost,
        condition: (&str, Option<AttributeValue>),
        moved: bool,
    ) -> anyhow::Result<Vec<TransactWriteItem>> {
        let document = serde_json::to_string(post)?;
        let attributes = listed_attributes(post, &document);
        let mut item = keys::social_post(post.organization_id, post.id);
        item.extend(attributes.clone());
        item.insert("version".to_owned(), n(post.version));
        if let Some(at) = post.due_at() {
            item.extend(keys::sweep_due(keys::DUE_POST, at, post.organization_id, post.id));
        }
        let mut main = Put::builder().table_name(&self.table).set_item(Some(item)).condition_expression(condition.0);
        if let Some(expected) = condition.1 {
            main = main.expression_attribute_values(":expected", expected);
        }
        let mut parts = vec![main.build().into_part()?];
        for filter in filters_of(post) {
            let mut copy = keys::post_by(post.organization_id, &filter, post.id);
            copy.extend(attributes.clone());
            parts.push(Put::builder().table_name(&self.table).set_item(Some(copy)).build().into_part()?);
        }
        for status in PostStatus::ALL.into_iter().filter(|status| moved && *status != post.status) {
            let key = keys::post_by(post.organization_id, &format!("STATUS#{}", status.as_str()), post.id);
            parts.push(Delete::builder().table_name(&self.table).set_key(Some(key)).build().into_part()?);
        }
        Ok(parts)
    }
}

/// Tries of a connection's create: the usual one, and one more after its
/// organization's count is started.
const COUNT_ATTEMPTS: usize = 2;

#[async_trait]
impl SocialRepo for DynamoDb {
    async fn create_connection(&self, connection: &SocialConnection, max: u32) -> anyhow::Result<bool> {
        // The organization's item counts its connections; the count and the connection
        // are one transaction, so concurrent creates never pass `max`. An organization
        // whose connections were made before the count existed has its count started
        // from them first, alone (no connection is written while it has no count, so
        // the connections counted are all there are; the first start wins).
        let organization = connection.organization_id;
        let mut item = keys::social_connection(organization, connection.id);
        item.insert("document".to_owned(), s(serde_json::to_string(connection)?));
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .into_part()?;
        for _ in 0..COUNT_ATTEMPTS {
            let count = Update::builder()
                .table_name(&self.table)
                .set_key(Some(keys::organization(organization)))
                .update_expression("SET social_connection_count = social_connection_count + :one")
                .condition_expression("social_connection_count < :max")
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":max", n(max))
                .build()
                .into_part()?;
            match self.transact(vec![count, put.clone()], "recording a social connection").await? {
                Ok(()) => return Ok(true),
                Err(reasons) if condition_failed(reasons.first()) => {}
                Err(reasons) => {
                    anyhow::bail!("recording social connection {} was cancelled: {reasons:?}", connection.id)
                }
            }
            // At the cap, or no count yet: the organization's item says which.
            let found = self
                .client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(keys::organization(organization)))
                .projection_expression("social_connection_count")
                .consistent_read(true)
                .send()
                .await
                .map_err(|error| super::table::failure(error, "reading the social connection count"))?;
            if found.item().is_some_and(|item| item.contains_key("social_connection_count")) {
                return Ok(false);
            }
            let existing = self.list_connections(organization).await?.len();
            let started = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(keys::organization(organization)))
                .update_expression("SET social_connection_count = :count")
                .condition_expression("attribute_not_exists(social_connection_count)")
                .expression_attribute_values(":count", n(existing))
                .send()
                .await;
            match started {
                Ok(_) => {}
                // Started by another create meanwhile.
                Err(error)
                    if error.as_service_error().is_some_and(|error| error.is_conditional_check_failed_exception()) => {}
                Err(error) => return Err(super::table::failure(error, "starting the social connection count")),
            }
        }
        anyhow::bail!("recording social connection {}: its organization's count kept changing", connection.id)
    }

    async fn update_connection(&self, connection: &SocialConnection) -> anyhow::Result<bool> {
        let mut item = keys::social_connection(connection.organization_id, connection.id);
        item.insert("document".to_owned(), s(serde_json::to_string(connection)?));
        let written = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_exists(pk)")
            .send()
            .await;
        match written {
            Ok(_) => Ok(true),
            Err(error)
                if error.as_service_error().is_some_and(|error| error.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(error) => Err(super::table::failure(error, "updating a social connection")),
        }
    }

    async fn delete_connection(&self, organization: OrganizationId, id: SocialConnectionId) -> anyhow::Result<bool> {
        // The delete and the count's decrement are one transaction (a connection stored
        // before the count existed frees no place it never took).
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(keys::social_connection(organization, id)))
            .condition_expression("attribute_exists(pk)")
            .build();
        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(keys::organization(organization)))
            .update_expression("SET social_connection_count = social_connection_count - :one")
            .condition_expression("social_connection_count > :zero")
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .build();
        match self.transact(vec![delete.into_part()?, count.into_part()?], "deleting a social connection").await? {
            Ok(()) => Ok(true),
            Err(reasons) if condition_failed(reasons.first()) => Ok(false),
            Err(reasons) if condition_failed(reasons.get(1)) => {
                // Counted from zero after it was made: delete it alone.
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .set_key(Some(keys::social_connection(organization, id)))
                    .send()
                    .await
                    .map_err(|error| super::table::failure(error, "deleting a social connection"))?;
                Ok(true)
            }
            Err(reasons) => anyhow::bail!("deleting social connection {id} was cancelled: {reasons:?}"),
        }
    }

    async fn list_connections(&self, organization: OrganizationId) -> anyhow::Result<Vec<SocialConnection>> {
        let items = self
            .query_all(
                keys::organization_pk(organization),
                Some(keys::SOCIAL_CONNECTION_PREFIX),
                None,
                "listing social connections",
            )
            .await?;
        items.iter().map(document_of).collect()
    }

    async fn get_connection(
        &self,
        organization: OrganizationId,
        id: SocialConnectionId,
    ) -> anyhow::Result<Option<SocialConnection>> {
        let item = self.get(keys::social_connection(organization, id), "reading a social connection").await?;
        item.as_ref().map(document_of).transpose()
    }

    async fn create_post(&self, post: &SocialPost, media: &[MediaRecord]) -> anyhow::Result<()> {
        let mut parts = Vec::new();
        for record in media {
            parts.push(Put::builder().table_name(&self.table).set_item(Some(media_item(record))).build().into_part()?);
        }
        parts.extend(self.post_parts(post, ("attribute_not_exists(pk)", None), false)?);
        match self.transact(parts, "recording a social post").await? {
            Ok(()) => Ok(()),
            Err(reasons) => anyhow::bail!("recording social post {} was cancelled: {reasons:?}", post.id),
        }
    }

    async fn get_post(&self, organization: OrganizationId, id: PostId) -> anyhow::Result<Option<SocialPost>> {
        let item = self.get(keys::social_post(organization, id), "reading a social post").await?;
        item.as_ref().map(document_of).transpose()
    }

    async fn update_post_with_media(&self, post: &SocialPost, media: &[MediaRecord]) -> anyhow::Result<bool> {
        let expected = n(post.version.saturating_sub(1));
        // The post's own put first: its condition is the first cancellation reason.
        let mut parts = self.post_parts(post, ("version = :expected", Some(expected)), true)?;
        for record in media {
            parts.push(Put::builder().table_name(&self.table).set_item(Some(media_item(record))).build().into_part()?);
        }
        match self.transact(parts, "updating a social post").await? {
            Ok(()) => Ok(true),
            Err(reasons) if condition_failed(reasons.first()) => Ok(false),
            Err(reasons) => anyhow::bail!("updating social post {} was cancelled: {reasons:?}", post.id),
        }
    }

    async fn list_posts(
        &self,
        organization: OrganizationId,
        filter: &PostFilter,
        after: Option<PostId>,
        limit: usize,
    ) -> anyhow::Result<PostPage> {
        // The partition of the most selective filter given; the others filter its items.
        let (pk, sk_prefix, rest) = match (filter.connection, filter.platform, filter.status) {
            (Some(connection), platform, status) => (
                keys::posts_by_pk(organization, &format!("CONN#{connection}")),
                "",
                PostFilter { connection: None, platform, status },
            ),
            (None, Some(platform), status) => (
                keys::posts_by_pk(organization, &format!("PLATFORM#{}", platform.as_str())),
                "",
                PostFilter { connection: None, platform: None, status },
            ),
            (None, None, Some(status)) => {
                (keys::posts_by_pk(organization, &format!("STATUS#{}", status.as_str())), "", PostFilter::default())
            }
            (None, None, None) => (keys::organization_pk(organization), keys::POST_PREFIX, PostFilter::default()),
        };
        let mut request = self
            .client
            .query()
            .table_name(&self.table)
            .expression_attribute_values(":pk", s(&pk))
            .consistent_read(true)
            .scan_index_forward(false);
        request = if sk_prefix.is_empty() {
            request.key_condition_expression("pk = :pk")
        } else {
            request
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":prefix", s(sk_prefix))
        };
        let mut conditions = Vec::new();
        if let Some(status) = rest.status {
            conditions.push("post_status = :status");
            request = request.expression_attribute_values(":status", s(status.as_str()));
        }
        if let Some(platform) = rest.platform {
            conditions.push("contains(platforms, :platform)");
            request = request.expression_attribute_values(":platform", s(platform.as_str()));
        }
        if !conditions.is_empty() {
            request = request.filter_expression(conditions.join(" AND "));
        }
        if rest == PostFilter::default() {
            // No filter expression: a page reads no more items than it shows (and one to
            // tell whether more follow).
            request = request.limit(i32::try_from(limit + 1).unwrap_or(i32::MAX));
        }
        let start = after.map(|id| {
            let mut key = Item::new();
            key.insert("pk".to_owned(), s(&pk));
            key.insert("sk".to_owned(), s(format!("{sk_prefix}{id}")));
            key
        });
        let mut posts: Vec<SocialPost> =
            query_beyond(request, start, limit, "listing social posts", |item| async move { document_of(&item) })
                .await?;
        let more = posts.len() > limit;
        posts.truncate(limit);
        Ok((posts, more))
    }

    async fn due_posts(&self, now: Timestamp, limit: usize) -> anyhow::Result<Vec<(OrganizationId, PostId)>> {
        let keys_due = self.due_keys(keys::DUE_POST, now, limit, "reading due social posts").await?;
        keys_due
            .iter()
            .map(|key| {
                let pk = text(key, "pk")?;
                let sk = text(key, "sk")?;
                let organization = pk.strip_prefix("ORG#").and_then(OrganizationId::parse);
                let id = sk.strip_prefix(keys::POST_PREFIX).and_then(PostId::parse);
                match (organization, id) {
                    (Some(organization), Some(id)) => Ok((organization, id)),
                    _ => anyhow::bail!("a due post's key {pk:?} {sk:?} is not a post's"),
                }
            })
            .collect()
    }
}
