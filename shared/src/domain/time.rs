//! UTC timestamps rendered as ISO 8601 with millisecond precision.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::FormatItem;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

const FORMAT: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// A UTC instant, truncated to milliseconds so it survives a round trip through storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(OffsetDateTime);

impl Timestamp {
    /// The current time.
    pub fn now() -> Self {
        Self::from_datetime(OffsetDateTime::now_utc())
    }

    /// Truncates any instant to milliseconds in UTC.
    pub fn from_datetime(at: OffsetDateTime) -> Self {
        let at = at.to_offset(time::UtcOffset::UTC);
        let millis = at.millisecond();
        Self(at.replace_millisecond(millis).unwrap_or(at))
    }

    /// Parses the format produced by [`Timestamp::to_string`].
    pub fn parse(text: &str) -> Result<Self, time::error::Parse> {
        let at = PrimitiveDateTime::parse(text, FORMAT)?;
        Ok(Self(at.assume_utc()))
    }

    /// The underlying date-time.
    pub fn datetime(&self) -> OffsetDateTime {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.format(FORMAT).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_text_with_milliseconds() {
        let now = Timestamp::now();
        let text = now.to_string();
        assert_eq!(text.len(), "2026-01-01T00:00:00.000Z".len());
        assert!(text.ends_with('Z'));
        assert_eq!(Timestamp::parse(&text).unwrap(), now);
    }
}
