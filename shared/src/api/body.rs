//! Reading JSON request bodies.

use http::StatusCode;
use serde_json::{Map, Value};

use super::{ApiError, Request};

/// The body as a JSON object; an empty body counts as `{}` so that missing fields are
/// reported by name. Anything else is a 400 `{ error }`.
pub fn json_object(request: &Request) -> Result<Map<String, Value>, ApiError> {
    let bytes: &[u8] = request.body();
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::error(StatusCode::BAD_REQUEST, "request body must be a JSON object")),
        Err(error) => Err(ApiError::error(StatusCode::BAD_REQUEST, format!("request body is not valid JSON: {error}"))),
    }
}

/// Refuses properties outside `allowed`, for bodies the contract closes.
pub fn deny_unknown(body: &Map<String, Value>, allowed: &[&str]) -> Result<(), ApiError> {
    match body.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(ApiError::error(StatusCode::BAD_REQUEST, format!("unknown property: {key}"))),
        None => Ok(()),
    }
}
