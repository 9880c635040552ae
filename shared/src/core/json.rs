//! Closed JSON bodies: every request body of the service names its properties, and a
//! property outside them is refused by name rather than silently ignored (a misspelled
//! `"metdata"` must not wipe what `"metadata"` would have kept).

use serde_json::{Map, Value};

/// The message of a refused property: `unknown property: <name>`.
pub fn unknown_property(body: &Map<String, Value>, allowed: &[&str]) -> Option<String> {
    body.keys().find(|key| !allowed.contains(&key.as_str())).map(|key| format!("unknown property: {key}"))
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
    }
}
