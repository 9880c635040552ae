//! Schema violations as messages a client can act on: the parameter's path first, long
//! values described rather than echoed, cross-parameter rules named.

use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::{Location, LocationSegment};
use jsonschema::ValidationError;
use serde_json::Value;

/// Prefix of every parameter path in validation messages: the field clients send parameters in.
pub(super) const PARAMS_FIELD: &str = "params_used";

/// At most this many problems are reported for one parameter map.
pub(super) const MAX_MESSAGES: usize = 10;
/// Values longer than this are described rather than echoed, so a 100 kB script never
/// comes back inside an error message.
const MAX_ECHOED_CHARS: usize = 64;

/// Turns one schema violation into messages that start with the offending parameter's path.
pub(super) fn describe_error(error: &ValidationError<'_>, schema: &Value) -> Vec<String> {
    let path = parameter_path(error.instance_path());
    if let ValidationErrorKind::AdditionalProperties { unexpected } = error.kind() {
        return unexpected.iter().map(|name| format!("{path}.{}: unknown parameter", shorten(name))).collect();
    }
    let trail = SchemaTrail::walk(schema, error.schema_path());
    let short = is_short(error.instance());
    let shown = if short { error.instance().to_string() } else { placeholder(error.instance()) };
    let message = match (error.kind(), trail.rule, trail.keyword_owner_description) {
        // A bare `not` would only say which sub-schema matched; the rule's description says why.
        (ValidationErrorKind::Not { .. }, Some(rule), _) => rule.to_string(),
        // Echoing a long regular expression would not tell a client what to send; the
        // property's description does.
        (ValidationErrorKind::Pattern { .. }, rule, Some(expected)) => {
            with_rule(format!("{shown} is not {expected}"), rule)
        }
        (_, rule, _) => {
            let base = if short { error.to_string() } else { error.masked_with(shown.as_str()).to_string() };
            with_rule(base, rule)
        }
    };
    vec![format!("{path}: {message}")]
}

fn with_rule(message: String, rule: Option<&str>) -> String {
    match rule {
        Some(rule) => format!("{message} ({rule})"),
        None => message,
    }
}

/// "params_used.style.font_size" for the instance location "/style/font_size".
fn parameter_path(location: &Location) -> String {
    let mut path = String::from(PARAMS_FIELD);
    for segment in location.segments() {
        match segment {
            LocationSegment::Property(name) => {
                path.push('.');
                path.push_str(&name);
            }
            LocationSegment::Index(index) => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// What the schema says around the keyword an error came from.
struct SchemaTrail<'s> {
    /// Description of the cross-parameter rule (an `allOf` item) on the way, if any: such errors
    /// otherwise name one parameter without saying which other one constrained it.
    rule: Option<&'s str>,
    /// Description of the schema that holds the failing keyword, if any.
    keyword_owner_description: Option<&'s str>,
}

impl<'s> SchemaTrail<'s> {
    fn walk(schema: &'s Value, schema_path: &Location) -> Self {
        let segments: Vec<LocationSegment<'_>> = schema_path.segments().collect();
        let mut node = schema;
        let mut rule = None;
        let mut keyword_owner = None;
        for (i, segment) in segments.iter().enumerate() {
            if i + 1 == segments.len() {
                keyword_owner = Some(node);
            }
            let next = match (segment, node) {
                (LocationSegment::Property(key), Value::Object(map)) => map.get(key.as_ref()),
                (LocationSegment::Index(index), Value::Array(items)) => items.get(*index),
                // A numeric property name (e.g. a property called "0") is parsed as an index.
                (LocationSegment::Index(index), Value::Object(map)) => map.get(&index.to_string()),
                _ => None,
            };
            let Some(next) = next else { break };
            let follows_all_of = i > 0 && matches!(&segments[i - 1], LocationSegment::Property(key) if key == "allOf");
            if follows_all_of {
                if let Some(description) = next.get("description").and_then(Value::as_str) {
                    rule = Some(description);
                }
            }
            node = next;
        }
        let keyword_owner_description =
            keyword_owner.and_then(|owner| owner.get("description")).and_then(Value::as_str);
        Self { rule, keyword_owner_description }
    }
}

fn is_short(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => true,
        Value::String(text) => text.chars().count() <= MAX_ECHOED_CHARS,
        Value::Array(_) | Value::Object(_) => false,
    }
}

/// A client-chosen property name, cut short like long values are.
fn shorten(name: &str) -> String {
    match name.char_indices().nth(MAX_ECHOED_CHARS) {
        Some((cut, _)) => format!("{}…", &name[..cut]),
        None => name.to_string(),
    }
}

fn placeholder(value: &Value) -> String {
    match value {
        Value::String(text) => format!("a string of {} characters", text.chars().count()),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
        other => other.to_string(),
    }
}
