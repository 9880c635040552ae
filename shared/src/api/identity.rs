//! `GET /whoami`.

use std::sync::Arc;

use http::StatusCode;

use super::auth::{authenticate, Scheme};
use super::openapi::prelude::*;
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::domain::identity;

endpoints! {
    whoami: GET "/whoami" => "whoami", handler: whoami,
        dynamodb: ["dynamodb:GetItem", "dynamodb:UpdateItem"],
        operation(sc): Doc::new("The organization of the API key", "Identity", BearerOrApiKey)
            .answer(200, "The organization", sc.of::<s::Whoami>())
            .general(sc, &[]);
}

/// Describes the organization of the caller's key and records the key's use.
pub async fn whoami(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let principal = authenticate(&app, call.request.headers(), Scheme::BearerOrApiKey).await?;
    let record = identity::whoami(app.identity().as_ref(), app.clock.as_ref(), &principal)
        .await
        .map_err(|error| ApiError::backend(&error, "Failed to read the caller's identity".to_owned()))?;
    Ok(json_response(StatusCode::OK, &record))
}
