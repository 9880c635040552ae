//! What every node type's catalog entry is built with: the schema's shape, the patterns
//! of identifiers, colours and cron expressions, and the entry itself.

use serde_json::{json, Value};

use super::tile::{no_settings, CreditCost, ItemFlow, NodeKind, NodeType};
use crate::domain::ids::NodeTypeId;

/// Identifiers are referenced by their canonical text; JSON Schema `format` is only an
/// annotation in draft 2020-12, so a pattern is what actually enforces the shape.
const UUID_PATTERN: &str = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
/// A colour as ffmpeg's filters accept it without any name lookup.
const HEX_COLOR_PATTERN: &str = "^#[0-9a-fA-F]{6}$";
/// IANA zone names ("Europe/Paris", "Etc/GMT+5"); whether the zone exists is checked when scheduling.
pub(super) const TIMEZONE_PATTERN: &str = "^[A-Za-z][A-Za-z0-9_+\\-/]*$";

/// A parameter schema: an object with exactly these optional properties.
/// Nothing is `required` because graphs are built one step at a time; whether a node has
/// everything it needs is checked when a run starts.
pub(super) fn params_schema(description: &str, properties: Value, rules: Value) -> Value {
    let mut schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": description,
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    if rules.as_array().is_some_and(|rules| !rules.is_empty()) {
        schema["allOf"] = rules;
    }
    schema
}

// Descriptions of patterned strings complete the sentence "<value> is not …" in error messages.

pub(super) fn uuid_string() -> Value {
    json!({"type": "string", "pattern": UUID_PATTERN, "description": "a UUID"})
}

pub(super) fn hex_color() -> Value {
    json!({"type": "string", "pattern": HEX_COLOR_PATTERN, "description": "a colour written as #RRGGBB"})
}

/// Five space-separated cron fields (minute hour day-of-month month day-of-week), each a list of
/// `*`, numbers, three-letter names or ranges, with an optional step. Field ranges (minute ≤ 59…)
/// are checked when the schedule is registered, which knows the exact cron dialect.
pub(super) fn cron_pattern() -> String {
    let value = "(?:[0-9]{1,2}|[A-Za-z]{3})";
    let item = format!("(?:\\*|{value}(?:-{value})?)(?:/[0-9]{{1,2}})?");
    let field = format!("{item}(?:,{item})*");
    format!("^{field} {field} {field} {field} {field}$")
}

/// A catalog entry whose nodes take each item in turn and have no typed parameters the
/// engine reads; a node type sets `flow` and `settings` over it where it differs.
pub(super) fn node(
    id: NodeTypeId,
    name: &'static str,
    kind: NodeKind,
    schema: Value,
    credit_cost: CreditCost,
) -> NodeType {
    // Triggers, inputs and destinations decide where a run comes from and goes to; letting a
    // run rewrite them would redirect it.
    let protected = matches!(kind, NodeKind::Trigger | NodeKind::Input | NodeKind::Destination);
    NodeType {
        id,
        name,
        kind,
        protected,
        params_schema: schema,
        credit_cost,
        flow: ItemFlow::EachItem,
        produces: None,
        connectable: None,
        settings: no_settings,
        validator: Default::default(),
    }
}

/// No cross-parameter rules.
pub(super) fn no_rules() -> Value {
    json!([])
}
