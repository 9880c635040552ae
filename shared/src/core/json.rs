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

/// The error a context refuses a body with, made from the message of a property outside
/// the body's declaration ([`closed_body!`](crate::closed_body)).
pub trait Refusal {
    fn unknown_property(message: String) -> Self;
}

impl Refusal for String {
    fn unknown_property(message: String) -> Self {
        message
    }
}

/// The message of a property outside `allowed` of the object at `at` (the body itself
/// when `at` is empty), as [`unknown_property`] or [`unknown_property_at`] word it.
pub fn refused_property(at: &str, body: &Map<String, Value>, allowed: &[&str]) -> Option<String> {
    match at {
        "" => unknown_property(body, allowed),
        at => unknown_property_at(at, body, allowed),
    }
}

/// Declares a closed request body once: the struct the handler gets, documented by
/// `utoipa::ToSchema` (so the OpenAPI schema is the type that is parsed), and its parser.
/// Each field names the function that reads it from the body, `fn(Option<&Value>) ->
/// Result<T, E>`, which words the contract's messages; the properties the body may have
/// are the fields, so a field added is parsed, documented and allowed at once.
///
/// ```ignore
/// closed_body! {
///     /// `PATCH /shared-stores/{store_id}`
///     pub struct StoreRename -> StoreError {
///         #[schema(value_type = String, min_length = 1, max_length = 1000)]
///         name: StoreName = StoreName::parse,
///     }
/// }
/// ```
///
/// `parse(body)` refuses a property outside the fields (`unknown property: <name>`), then
/// reads the fields in order. A body nested in another is read by `parse_at(at, body)`,
/// which names `at` in that refusal (`<at>: unknown property: <name>`); with `, at <name>`
/// after the error type, the field readers see `at` under that name.
#[macro_export]
macro_rules! closed_body {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident -> $error:ty, at $at:ident {
            $( $(#[$field_meta:meta])* $field:ident: $type:ty = $parse:expr ),* $(,)?
        }
    ) => {
        $crate::closed_body!(@declare [$(#[$meta])*] $vis $name $error, $at {
            $( [$(#[$field_meta])*] $field: $type = $parse ),*
        });
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident -> $error:ty {
            $( $(#[$field_meta:meta])* $field:ident: $type:ty = $parse:expr ),* $(,)?
        }
    ) => {
        $crate::closed_body!(@declare [$(#[$meta])*] $vis $name $error, at {
            $( [$(#[$field_meta])*] $field: $type = $parse ),*
        });
    };
    (@declare [$($meta:tt)*] $vis:vis $name:ident $error:ty, $at:ident {
        $( [$($field_meta:tt)*] $field:ident: $type:ty = $parse:expr ),*
    }) => {
        #[derive(utoipa::ToSchema)]
        #[serde(deny_unknown_fields)]
        $($meta)*
        $vis struct $name {
            $( $($field_meta)* pub $field: $type, )*
        }

        impl $name {
            /// The properties the body may have: its fields.
            pub const PROPERTIES: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Parses the body: a property outside its fields is refused by name, then
            /// each field is read in order.
            #[allow(dead_code)]
            pub fn parse(body: &serde_json::Map<String, serde_json::Value>) -> Result<Self, $error> {
                Self::parse_at("", body)
            }

            /// As `parse`, for a body nested at `at`, which the refusal names.
            #[allow(unused_variables)]
            pub fn parse_at(
                $at: &str,
                body: &serde_json::Map<String, serde_json::Value>,
            ) -> Result<Self, $error> {
                if let Some(message) = $crate::core::json::refused_property($at, body, Self::PROPERTIES) {
                    return Err(<$error as $crate::core::json::Refusal>::unknown_property(message));
                }
                Ok(Self { $( $field: ($parse)(body.get(stringify!($field)))?, )* })
            }
        }
    };
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
