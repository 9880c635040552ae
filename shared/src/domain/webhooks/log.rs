//! The delivery-log endpoints' operations: a run's deliveries page by page, and a
//! delivery sent again.

use super::ports::WebhookRepo;
use super::{DeliveryId, DeliveryState, WebhookDelivery, WebhookMessage};
use crate::core::queue::Queue;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::RunId;
use crate::domain::rejection::{DomainError, Rejection};
use crate::domain::time::Clock;

/// Why a delivery-log request is refused.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("Run not found")]
    RunNotFound,
    #[error("Webhook delivery not found")]
    NotFound,
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

impl DomainError for DeliveryError {
    fn rejection(self) -> Result<Rejection, anyhow::Error> {
        match self {
            DeliveryError::RunNotFound | DeliveryError::NotFound => Ok(Rejection::NotFound),
            DeliveryError::Invalid(_) => Ok(Rejection::Invalid),
            DeliveryError::Conflict(_) => Ok(Rejection::Conflict),
            DeliveryError::Backend(cause) => Err(cause),
        }
    }
}

/// Most deliveries one page of the log holds.
pub const MAX_LOG_LIMIT: usize = 100;

/// One page of a run's delivery log, by sequence, and the sequence to continue after.
pub async fn delivery_log(
    repo: &dyn WebhookRepo,
    organization: OrganizationId,
    run: RunId,
    after: Option<u64>,
    limit: usize,
) -> Result<(Vec<WebhookDelivery>, Option<u64>), DeliveryError> {
    let mut page = repo.list_deliveries(organization, run, after, limit).await?;
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(|delivery| delivery.sequence)
    } else {
        None
    };
    Ok((page, next))
}

/// `POST /agent_run/{id}/webhooks/{delivery_id}/redeliver`: the delivery is attempted
/// again now, on a new schedule, with the same `webhook-id` and body.
pub async fn redeliver(
    repo: &dyn WebhookRepo,
    queue: &dyn Queue<WebhookMessage>,
    clock: &dyn Clock,
    organization: OrganizationId,
    run: RunId,
    id: DeliveryId,
) -> Result<WebhookDelivery, DeliveryError> {
    let mut delivery = repo.find_delivery(organization, run, id).await?.ok_or(DeliveryError::NotFound)?;
    let now = clock.now();
    delivery.state = DeliveryState::Pending;
    delivery.next_attempt_at = Some(now);
    delivery.schedule_start = delivery.attempts.len();
    if !repo.redeliver(&delivery, now).await? {
        return Err(DeliveryError::Conflict(
            "this delivery is being attempted right now (or just was); look at its log again in a few seconds".into(),
        ));
    }
    queue.send(&[delivery.message()]).await?;
    Ok(delivery)
}
