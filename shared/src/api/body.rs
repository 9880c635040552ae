//! Reading JSON request bodies.

use http::StatusCode;
use serde_json::{Map, Value};

use super::{ApiError, Request};

/// The body as a JSON object; an empty body counts as `{}` so that missing fields are
/// reported by name. Anything else is a 400 `{ error }` (the shared stores' shape).
pub fn json_object(request: &Request) -> Result<Map<String, Value>, ApiError> {
    parse_object(request).map_err(|message| ApiError::error(StatusCode::BAD_REQUEST, message))
}

/// As [`json_object`], with a 400 `{ detail }` (the shape of every other endpoint).
pub fn json_body(request: &Request) -> Result<Map<String, Value>, ApiError> {
    parse_object(request).map_err(|message| ApiError::detail(StatusCode::BAD_REQUEST, message))
}

fn parse_object(request: &Request) -> Result<Map<String, Value>, String> {
    let bytes: &[u8] = request.body();
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("request body must be a JSON object".to_owned()),
        Err(error) => Err(format!("request body is not valid JSON: {error}")),
    }
}
