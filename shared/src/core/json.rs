//! Closed JSON bodies: every request body of the service names its properties, and a
//! property outside them is refused by name rather than silently ignored (a misspelled
//! `"metdata"` must not wipe what `"metadata"` would have kept).

use serde_json::{Map, Value};

/// The message of a refused property of a body: `unknown property: <name>`; None when
/// every property is `allowed`.
pub fn unknown_property(body: &Map<String, Value>, allowed: &[&str]) -> Option<String> {
    first_unknown(body, allowed).map(|key| format!("unknown property: {}", excerpt(key)))
}

/// The message of a refused property of a part of a body, `at` naming the part:
/// `<at>: unknown property: <name>`.
pub fn unknown_property_at(at: &str, body: &Map<String, Value>, allowed: &[&str]) -> Option<String> {
    first_unknown(body, allowed).map(|key| format!("{at}: unknown property: {}", excerpt(key)))
}

/// `value` as a closed object: refused when it is not an object (`<what> must be a JSON
/// object`) or names a property outside `allowed` (as [`unknown_property_at`]).
pub fn closed_object<'a>(value: &'a Value, what: &str, allowed: &[&str]) -> Result<&'a Map<String, Value>, String> {
    let object = value.as_object().ok_or_else(|| format!("{what} must be a JSON object"))?;
    match unknown_property_at(what, object, allowed) {
        Some(message) => Err(message),
        None => Ok(object),
    }
}

fn first_unknown<'a>(body: &'a Map<String, Value>, allowed: &[&str]) -> Option<&'a str> {
    body.keys().map(String::as_str).find(|key| !allowed.contains(key))
}

/// Longest part of a caller's text a message echoes.
const EXCERPT_CHARS: usize = 60;

/// A caller's text as a message names it: at most 60 characters (`…` after), so that a
/// huge property name is not echoed back whole.
pub fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// A caller's value as a message quotes it: a JSON-style string of at most 60 characters
/// (`…` after the quote when cut).
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}…", &text[..end]),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_first_property_outside_the_list_is_named() {
        let Value::Object(body) = json!({"name": "a", "metdata": {}}) else { unreachable!() };
        assert_eq!(unknown_property(&body, &["name", "metadata"]).as_deref(), Some("unknown property: metdata"));
        assert_eq!(unknown_property(&body, &["name", "metdata"]), None);
        assert_eq!(unknown_property(&Map::new(), &[]), None);
        assert_eq!(
            unknown_property_at("sources", &body, &["name"]).as_deref(),
            Some("sources: unknown property: metdata")
        );
    }

    #[test]
    fn a_closed_object_refuses_other_types_and_long_names_are_cut() {
        assert_eq!(closed_object(&json!([1]), "auto_topup", &[]), Err("auto_topup must be a JSON object".to_owned()));
        let long = "x".repeat(100);
        let refused = closed_object(&json!({ long.clone(): 1 }), "the body", &["a"]).unwrap_err();
        assert_eq!(refused, format!("the body: unknown property: {}…", &long[..60]));
        assert_eq!(excerpt("émoji ✓"), "émoji ✓");
    }
}
