//! `GET /whoami`.

use std::sync::Arc;

use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::auth::{authenticate, Scheme};
use super::openapi::prelude::*;
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::domain::identity::{self, WhoAmI};
use crate::domain::time::Timestamp;

endpoints! {
    whoami: GET "/whoami" => "whoami", handler: whoami,
        dynamodb: ["dynamodb:GetItem", "dynamodb:UpdateItem"],
        operation(sc): Doc::new("The organization of the API key", "Identity", BearerOrApiKey)
            .answer(200, "The organization", sc.of::<Whoami>())
            .general(sc, &[]);
}

/// Describes the organization of the caller's key and records the key's use.
pub async fn whoami(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let principal = authenticate(&app, call.request.headers(), Scheme::BearerOrApiKey).await?;
    let record = identity::whoami(app.identity().as_ref(), app.clock.as_ref(), &principal)
        .await
        .map_err(|error| ApiError::backend(&error, "Failed to read the caller's identity".to_owned()))?;
    Ok(json_response(StatusCode::OK, &Whoami::from(record)))
}

/// The organization the API key belongs to.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Whoami {
    pub organization_id: Uuid,
    pub organization_name: String,
    pub organization_slug: String,
    pub created_at: Timestamp,
    /// When a key of the organization was last used (this request's time, at the latest).
    #[schema(required = true)]
    pub last_used_at: Option<Timestamp>,
}

impl From<WhoAmI> for Whoami {
    fn from(record: WhoAmI) -> Self {
        Self {
            organization_id: record.organization_id.as_uuid(),
            organization_name: record.organization_name,
            organization_slug: record.organization_slug,
            created_at: record.created_at,
            last_used_at: Some(record.last_used_at),
        }
    }
}
