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

            /// A new version 7 ID whose time is `unix_ms`: IDs made at a later
            /// millisecond sort after, so key order is time order.
            pub fn v7_at(unix_ms: u64) -> Self {
                let random = uuid::Uuid::new_v4().into_bytes();
                let mut tail = [0u8; 10];
                tail.copy_from_slice(&random[..10]);
                Self(uuid::Builder::from_unix_timestamp_millis(unix_ms, &tail).into_uuid())
            }

            /// The lowest (`last: false`) or highest version 7 ID of the millisecond
            /// `unix_ms`: the bounds of a key range over a time window.
            pub fn v7_bound(unix_ms: u64, last: bool) -> Self {
                let tail = if last { [0xff; 10] } else { [0; 10] };
                Self(uuid::Builder::from_unix_timestamp_millis(unix_ms, &tail).into_uuid())
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

    #[test]
    fn ids_at_a_time_sort_by_time_as_text_and_fall_between_their_bounds() {
        let earlier = ThingId::v7_at(1_700_000_000_000);
        let later = ThingId::v7_at(1_700_000_000_001);
        assert!(earlier.to_string() < later.to_string());
        assert!(ThingId::v7_bound(1_700_000_000_000, false).to_string() <= earlier.to_string());
        assert!(earlier.to_string() <= ThingId::v7_bound(1_700_000_000_000, true).to_string());
        assert!(ThingId::v7_bound(1_700_000_000_000, true).to_string() < later.to_string());
        assert_eq!(earlier.as_uuid().get_version_num(), 7);
    }
}
