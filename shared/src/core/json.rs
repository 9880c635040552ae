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
                Ok(Self {
                    $( $field: {
                        let read: Result<$type, $error> = ($parse)(body.get(stringify!($field)));
                        read?
                    }, )*
                })
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
    fn long_names_are_cut() {
        let long = "x".repeat(100);
        let Value::Object(body) = json!({ long.clone(): 1 }) else { unreachable!() };
        let refused = unknown_property_at("the body", &body, &["a"]).unwrap();
        assert_eq!(refused, format!("the body: unknown property: {}…", &long[..60]));
        assert_eq!(excerpt("émoji ✓"), "émoji ✓");
    }

    crate::closed_body! {
        /// A body of two fields, the second optional.
        pub struct Probe -> String, at at {
            /// Required.
            #[schema(min_length = 1)]
            name: String = |value: Option<&Value>| match value {
                Some(Value::String(text)) => Ok(text.clone()),
                _ => Err(format!("{at}{}name is required", if at.is_empty() { "" } else { "." })),
            },
            count: Option<u64> = |value: Option<&Value>| match value {
                None => Ok(None),
                Some(value) => value.as_u64().map(Some).ok_or_else(|| "count must be a whole number".to_owned()),
            },
        }
    }

    #[test]
    fn a_closed_body_is_parsed_documented_and_closed_by_its_one_declaration() {
        let Value::Object(body) = json!({"name": "a", "count": 2}) else { unreachable!() };
        let probe = Probe::parse(&body).unwrap();
        assert_eq!((probe.name.as_str(), probe.count), ("a", Some(2)));
        let Value::Object(body) = json!({"name": "a", "cuont": 2}) else { unreachable!() };
        assert_eq!(Probe::parse(&body).err().as_deref(), Some("unknown property: cuont"));
        assert_eq!(Probe::parse_at("items[3]", &body).err().as_deref(), Some("items[3]: unknown property: cuont"));
        // Fields are read in order: the first refusal is the first field's.
        let Value::Object(body) = json!({"count": "x"}) else { unreachable!() };
        assert_eq!(Probe::parse_at("items[3]", &body).err().as_deref(), Some("items[3].name is required"));
        // The schema is the struct's: its properties, the required one, and closed.
        let schema = serde_json::to_value(<Probe as utoipa::PartialSchema>::schema()).unwrap();
        let properties: Vec<&str> = schema["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(properties, Probe::PROPERTIES);
        assert_eq!(schema["required"], json!(["name"]));
        assert_eq!(schema["additionalProperties"], json!(false));
    }
}
