//! Reading URL query parameters.

use std::collections::HashMap;

use http::StatusCode;
use percent_encoding::percent_decode_str;

use super::{ApiError, Request};

/// The request's query parameters, decoded (`+` is a space); a parameter given twice or
/// not valid UTF-8 once decoded is a 400.
pub fn query_params(request: &Request) -> Result<HashMap<String, String>, ApiError> {
    let mut params = HashMap::new();
    for pair in request.uri().query().unwrap_or_default().split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |text: &str| {
            percent_decode_str(&text.replace('+', " ")).decode_utf8().map(|text| text.into_owned()).map_err(|_| {
                ApiError::detail(StatusCode::BAD_REQUEST, "query parameters must be UTF-8 once percent-decoded")
            })
        };
        let name = decode(name)?;
        if params.insert(name.clone(), decode(value)?).is_some() {
            return Err(ApiError::detail(
                StatusCode::BAD_REQUEST,
                format!("query parameter {name} is given more than once"),
            ));
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str) -> Request {
        http::Request::builder().uri(uri).body(lambda_http::Body::Empty).unwrap()
    }

    #[test]
    fn values_are_percent_decoded_and_plus_is_a_space() {
        let params = query_params(&request("/agents?name=a%25b_c+d&limit=5")).unwrap();
        assert_eq!(params["name"], "a%b_c d");
        assert_eq!(params["limit"], "5");
    }

    #[test]
    fn a_repeated_parameter_is_refused() {
        assert_eq!(query_params(&request("/agents?limit=1&limit=2")).unwrap_err().status, StatusCode::BAD_REQUEST);
    }
}
