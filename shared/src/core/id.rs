//! Typed identifiers: one newtype over a UUID per kind of thing, so that an agent's ID
//! cannot be passed where a store's is expected. The domain declares its own with
//! [`typed_id!`](crate::typed_id).

/// Declares a UUID newtype: `Copy`, ordered, hashed, shown and (de)serialized as the
/// hyphenated UUID, parsed from text with `parse`.
#[macro_export]
macro_rules! typed_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(uuid::Uuid);

        impl $name {
            /// A new random ID (version 4).
            pub fn new_v4() -> Self {
                Self(uuid::Uuid::new_v4())
            }

            /// A new ID that starts with the current time (version 7), so that IDs made
            /// later sort after earlier ones.
            pub fn now_v7() -> Self {
                Self(uuid::Uuid::now_v7())
            }

            /// Wraps a UUID.
            pub const fn from_uuid(uuid: uuid::Uuid) -> Self {
                Self(uuid)
            }

            /// The UUID inside.
            pub const fn as_uuid(&self) -> uuid::Uuid {
                self.0
            }

            /// Parses the text form of a UUID; None for anything else.
            pub fn parse(text: &str) -> Option<Self> {
                uuid::Uuid::parse_str(text).ok().map(Self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.0, f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                uuid::Uuid::parse_str(text).map(Self)
            }
        }
    };
}

#[cfg(test)]
#[allow(dead_code)]
mod tests {
    crate::typed_id!(
        /// An ID for the test.
        ThingId
    );

    #[test]
    fn typed_ids_show_parse_and_serialize_as_their_uuid() {
        let id = ThingId::now_v7();
        let text = id.to_string();
        assert_eq!(ThingId::parse(&text), Some(id));
        assert_eq!(text.parse::<ThingId>().unwrap(), id);
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<ThingId>(&format!("\"{text}\"")).unwrap(), id);
        assert_eq!(ThingId::parse("nope"), None);
        assert!(ThingId::now_v7() > id, "version 7 IDs sort by creation");
    }
}
