//! Avatar profiles in DynamoDB: the profile as a JSON document in its item, and an item
//! claiming its name in its workspace, written together in one transaction (each under
//! `attribute_not_exists`), so two creates of one name make one profile. An update is
//! conditional on the version it read, written with its preview's media record.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::Put;

use super::runs::media_item;
use super::table::{condition_failed, n, s, text, Item, TransactPart};
use super::{keys, AttributeValue, DynamoDb};
use crate::domain::avatars::{AvatarProfile, AvatarRepo};
use crate::domain::ids::AvatarProfileId;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::WorkspaceId;
use crate::domain::media::MediaRecord;

fn avatar_item(profile: &AvatarProfile) -> anyhow::Result<Item> {
    let mut item = keys::avatar(profile.organization_id, profile.id);
    item.extend([
        ("workspace_id".to_owned(), s(profile.workspace_id.to_string())),
        ("version".to_owned(), n(profile.version)),
        ("document".to_owned(), s(serde_json::to_string(profile)?)),
    ]);
    Ok(item)
}

fn profile_of(item: &Item) -> anyhow::Result<AvatarProfile> {
    Ok(serde_json::from_str(text(item, "document")?)?)
}

#[async_trait]
impl AvatarRepo for DynamoDb {
    async fn create_avatar(&self, profile: &AvatarProfile) -> anyhow::Result<bool> {
        let name = keys::avatar_name(profile.organization_id, profile.workspace_id, &profile.name_key());
        let mut claim = name;
        claim.insert("avatar_id".to_owned(), s(profile.id.to_string()));
        let put = |item: Item| {
            Put::builder().table_name(&self.table).set_item(Some(item)).condition_expression("attribute_not_exists(pk)")
        };
        let items = vec![put(claim).build().into_part()?, put(avatar_item(profile)?).build().into_part()?];
        match self.transact(items, "recording an avatar profile").await? {
            Ok(()) => Ok(true),
            Err(reasons) if condition_failed(reasons.first()) => Ok(false),
            Err(reasons) => anyhow::bail!("recording avatar profile {} was cancelled: {reasons:?}", profile.id),
        }
    }

    async fn get_avatar(
        &self,
        organization: OrganizationId,
        id: AvatarProfileId,
    ) -> anyhow::Result<Option<AvatarProfile>> {
        let item = self.get(keys::avatar(organization, id), "reading an avatar profile").await?;
        item.as_ref().map(profile_of).transpose()
    }

    async fn list_avatars(
        &self,
        organization: OrganizationId,
        workspace: WorkspaceId,
        after: Option<AvatarProfileId>,
        limit: Option<usize>,
    ) -> anyhow::Result<(Vec<AvatarProfile>, bool)> {
        // One query of the organization's avatar items, newest first (v7 IDs), paged from
        // the cursor's profile; one more than the page read, to tell whether more follow.
        let request = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .filter_expression("workspace_id = :workspace")
            .expression_attribute_values(":pk", s(keys::organization_pk(organization)))
            .expression_attribute_values(":prefix", s(keys::AVATAR_PREFIX))
            .expression_attribute_values(":workspace", s(workspace.to_string()))
            .scan_index_forward(false);
        let start = after.map(|id| keys::avatar(organization, id));
        let most = limit.unwrap_or(usize::MAX - 1);
        let mut profiles =
            super::table::query_beyond(request, start, most, "listing avatar profiles", |item| async move {
                profile_of(&item)
            })
            .await?;
        let more = profiles.len() > most;
        profiles.truncate(most);
        Ok((profiles, more))
    }

    async fn update_avatar(&self, profile: &AvatarProfile, preview: Option<&MediaRecord>) -> anyhow::Result<bool> {
        let expected: AttributeValue = n(profile.version.saturating_sub(1));
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(avatar_item(profile)?))
            .condition_expression("version = :expected")
            .expression_attribute_values(":expected", expected.clone());
        let Some(preview) = preview else {
            let values = [(":expected", expected)];
            return self
                .put_if(avatar_item(profile)?, "version = :expected", &values, "updating an avatar profile")
                .await;
        };
        let media = Put::builder().table_name(&self.table).set_item(Some(media_item(preview)));
        let items = vec![put.build().into_part()?, media.build().into_part()?];
        match self.transact(items, "updating an avatar profile").await? {
            Ok(()) => Ok(true),
            Err(reasons) if condition_failed(reasons.first()) => Ok(false),
            Err(reasons) => anyhow::bail!("updating avatar profile {} was cancelled: {reasons:?}", profile.id),
        }
    }
}
