//! Lambda events and answers in their published formats: API Gateway HTTP API (v2)
//! requests and responses, SQS events as an event source mapping builds them and the
//! batch responses that name their failed records.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use lambda_http::aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use lambda_http::aws_lambda_events::encodings::Body;
use lambda_http::aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use serde_json::{json, Value};

/// An API Gateway HTTP API (v2) event for a request to `raw_path` (query string
/// without `?`), as API Gateway sends it to the function of a route in the routes table:
/// `routeKey` and `pathParameters` of the route it matches.
pub fn api_gateway_event(
    method: &Method,
    raw_path: &str,
    query: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Value {
    let mut event = crate::helpers::api_gateway_event_json(method.as_str(), raw_path, query, headers, body);
    let matched = shared::api::ROUTES.iter().filter(|route| route.method == *method).find_map(|route| {
        let template: Vec<&str> = route.path.trim_matches('/').split('/').collect();
        let segments: Vec<&str> = raw_path.trim_matches('/').split('/').collect();
        if template.len() != segments.len() {
            return None;
        }
        let mut parameters = serde_json::Map::new();
        for (pattern, segment) in template.iter().zip(&segments) {
            match pattern.strip_prefix('{').and_then(|name| name.strip_suffix('}')) {
                Some(name) => {
                    let decoded = percent_encoding::percent_decode_str(segment).decode_utf8_lossy();
                    parameters.insert(name.to_owned(), Value::String(decoded.into_owned()));
                }
                None if pattern == segment => {}
                None => return None,
            }
        }
        Some((format!("{method} {}", route.path), parameters))
    });
    if let Some((route_key, parameters)) = matched {
        event["routeKey"] = json!(route_key);
        event["requestContext"]["routeKey"] = json!(route_key);
        if !parameters.is_empty() {
            event["pathParameters"] = Value::Object(parameters);
        }
    }
    let parsed: Result<ApiGatewayV2httpRequest, _> = serde_json::from_value(event.clone());
    assert!(parsed.is_ok(), "an API Gateway v2 event: {parsed:?}");
    event
}

/// A function's answer to an API Gateway event, read as API Gateway reads it: status,
/// headers and body (base64 decoded when the function says it is).
pub fn http_answer(answer: Value) -> (StatusCode, HeaderMap, Bytes) {
    use base64::Engine;
    let response: ApiGatewayV2httpResponse = serde_json::from_value(answer.clone())
        .unwrap_or_else(|error| panic!("an API Gateway response ({error}): {answer}"));
    let status = StatusCode::from_u16(response.status_code as u16).expect("an HTTP status");
    let body = match response.body {
        None | Some(Body::Empty) => Bytes::new(),
        Some(Body::Text(text)) if response.is_base64_encoded => {
            Bytes::from(base64::engine::general_purpose::STANDARD.decode(text).expect("a base64 body"))
        }
        Some(Body::Text(text)) => Bytes::from(text),
        Some(Body::Binary(bytes)) => Bytes::from(bytes),
        Some(_) => panic!("a body of an unknown kind: {answer}"),
    };
    (status, response.headers, body)
}

/// An SQS event source's event: the records, checked against the published format.
pub fn sqs_event(records: Vec<Value>) -> Value {
    let event = json!({ "Records": records });
    let parsed: Result<SqsEvent, _> = serde_json::from_value(event.clone());
    assert!(parsed.is_ok(), "an SQS event: {parsed:?}");
    event
}

/// The record of one received SQS message, as the event source mapping writes it.
pub fn sqs_record(message: &aws_sdk_sqs::types::Message, queue_arn: &str) -> Value {
    let attributes: serde_json::Map<String, Value> = message
        .attributes()
        .map(|attributes| attributes.iter().map(|(name, value)| (name.as_str().to_owned(), json!(value))).collect())
        .unwrap_or_default();
    json!({
        "messageId": message.message_id(),
        "receiptHandle": message.receipt_handle(),
        "body": message.body(),
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": message.md5_of_body(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(':').nth(3).unwrap_or("us-east-1"),
    })
}

/// A function's answer to an SQS event: the batch item failures.
pub fn batch_answer(answer: Value) -> SqsBatchResponse {
    serde_json::from_value(answer.clone()).unwrap_or_else(|error| panic!("an SQS batch response ({error}): {answer}"))
}
