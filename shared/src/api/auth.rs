//! Reading the caller's API key from the request headers.

use http::header::AUTHORIZATION;
use http::{HeaderMap, StatusCode};

use super::ApiError;
use crate::app::App;
use crate::domain::identity::Principal;

/// Which credentials an endpoint accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// `Authorization: Bearer <key>` only (shared stores).
    Bearer,
    /// Bearer, or `X-API-Key: <key>` (general endpoints).
    BearerOrApiKey,
}

const MUST_START_WITH_BEARER: &str = "Authorization header must start with Bearer";

/// Verifies the request's key and returns whom it acts for.
/// The organization is recorded on the request's span, so every later log line of the
/// request carries it.
pub async fn authenticate(app: &App, headers: &HeaderMap, scheme: Scheme) -> Result<Principal, ApiError> {
    let key = presented_key(headers, scheme)?;
    let principal = app.auth().authenticate(key).await?;
    tracing::Span::current().record("organization_id", tracing::field::display(principal.organization_id()));
    Ok(principal)
}

fn presented_key(headers: &HeaderMap, scheme: Scheme) -> Result<&str, ApiError> {
    let bearer = headers.get(AUTHORIZATION).and_then(|value| value.to_str().ok()).and_then(|text| {
        let (word, key) = text.trim_start().split_once(' ')?;
        word.eq_ignore_ascii_case("bearer").then(|| key.trim())
    });
    if let Some(key) = bearer {
        return Ok(key);
    }
    if scheme == Scheme::BearerOrApiKey {
        if let Some(value) = headers.get("x-api-key") {
            let key = value.to_str().map_err(|_| ApiError::detail(StatusCode::UNAUTHORIZED, "invalid_api_key"))?;
            return Ok(key.trim());
        }
    }
    Err(ApiError::detail(StatusCode::UNAUTHORIZED, MUST_START_WITH_BEARER))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn bearer_scheme_word_is_case_insensitive() {
        assert_eq!(presented_key(&headers(&[("authorization", "bearer k1")]), Scheme::Bearer).unwrap(), "k1");
        assert_eq!(presented_key(&headers(&[("authorization", "Bearer  k1 ")]), Scheme::Bearer).unwrap(), "k1");
    }

    #[test]
    fn api_key_header_counts_only_where_allowed() {
        let only_api_key = headers(&[("x-api-key", "k2")]);
        assert_eq!(presented_key(&only_api_key, Scheme::BearerOrApiKey).unwrap(), "k2");
        let refused = presented_key(&only_api_key, Scheme::Bearer).unwrap_err();
        assert_eq!(refused.body["detail"], MUST_START_WITH_BEARER);
    }

    #[test]
    fn other_schemes_are_refused() {
        let refused = presented_key(&headers(&[("authorization", "Basic abc")]), Scheme::Bearer).unwrap_err();
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert_eq!(refused.body["detail"], MUST_START_WITH_BEARER);
    }
}
