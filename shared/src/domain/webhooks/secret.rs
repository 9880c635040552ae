//! An organization's webhook secret: created or rotated, and removed.

use super::ports::WebhookRepo;
use super::WebhookSecret;
use crate::domain::ids::OrganizationId;
use crate::domain::time::Clock;

/// `POST /webhooks/secret`: a new secret for the organization, replacing any other.
pub async fn rotate_secret(
    repo: &dyn WebhookRepo,
    clock: &dyn Clock,
    organization: OrganizationId,
) -> anyhow::Result<WebhookSecret> {
    let secret = WebhookSecret { secret: crate::core::signing::generate_webhook_secret(), created_at: clock.now() };
    repo.put_webhook_secret(organization, Some(&secret)).await?;
    Ok(secret)
}

/// `DELETE /webhooks/secret`: false when the organization had none.
pub async fn delete_secret(repo: &dyn WebhookRepo, organization: OrganizationId) -> anyhow::Result<bool> {
    let had = repo.webhook_secret(organization).await?.is_some();
    repo.put_webhook_secret(organization, None).await?;
    Ok(had)
}
