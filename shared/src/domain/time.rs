//! UTC timestamps rendered as ISO 8601 with millisecond precision.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.3fZ";
/// Characters of the text form, e.g. `2026-01-01T00:00:00.000Z`.
const TEXT_LENGTH: usize = 24;

/// A UTC instant, truncated to milliseconds so it survives a round trip through storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

/// Text that is not a timestamp in the stored form.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a UTC timestamp of the form 2026-01-01T00:00:00.000Z")]
pub struct TimestampError(String);

impl Timestamp {
    /// The current time.
    pub fn now() -> Self {
        Self::from_datetime(Utc::now())
    }

    /// Truncates any instant to milliseconds.
    pub fn from_datetime(at: DateTime<Utc>) -> Self {
        Self(DateTime::from_timestamp_millis(at.timestamp_millis()).unwrap_or(at))
    }

    /// Parses the form produced by [`Timestamp::to_string`], and only that form.
    pub fn parse(text: &str) -> Result<Self, TimestampError> {
        if text.len() != TEXT_LENGTH {
            return Err(TimestampError(text.to_owned()));
        }
        NaiveDateTime::parse_from_str(text, FORMAT)
            .map(|at| Self(at.and_utc()))
            .map_err(|_| TimestampError(text.to_owned()))
    }

    /// The instant as a chrono date-time.
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }

    /// Whole seconds since the Unix epoch (the unit of signed URLs' expiry).
    pub fn unix_seconds(&self) -> i64 {
        self.0.timestamp()
    }

    /// Milliseconds since the Unix epoch (0 for earlier instants).
    pub fn unix_millis(&self) -> u64 {
        self.0.timestamp_millis().max(0) as u64
    }

    /// The instant `millis` milliseconds after the Unix epoch.
    pub fn from_unix_millis(millis: u64) -> Self {
        let millis = i64::try_from(millis).unwrap_or(i64::MAX);
        Self(DateTime::from_timestamp_millis(millis).unwrap_or(DateTime::<Utc>::MAX_UTC))
    }

    /// This instant plus `duration` (saturating at the end of representable time).
    pub fn after(&self, duration: Duration) -> Self {
        let delta = chrono::TimeDelta::from_std(duration).unwrap_or(chrono::TimeDelta::MAX);
        Self::from_datetime(self.0.checked_add_signed(delta).unwrap_or(DateTime::<Utc>::MAX_UTC))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl std::str::FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Documented as the component `Time`: a date-time string.
impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some("An ISO 8601 UTC date-time"))
            .into()
    }
}

impl utoipa::ToSchema for Timestamp {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("Time")
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The source of "now", replaceable in tests.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_text_with_milliseconds() {
        let now = Timestamp::now();
        let text = now.to_string();
        assert_eq!(text.len(), TEXT_LENGTH);
        assert!(text.ends_with('Z'));
        assert_eq!(Timestamp::parse(&text).unwrap(), now);
        assert_eq!(Timestamp::parse("2026-01-02T03:04:05.006Z").unwrap().to_string(), "2026-01-02T03:04:05.006Z");
    }

    #[test]
    fn other_forms_are_refused() {
        for text in ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05.006+00:00", "2026-01-02 03:04:05.006Z", "x"] {
            assert!(Timestamp::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn after_adds_a_duration() {
        let start = Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap();
        assert_eq!(start.after(Duration::from_secs(3600)).to_string(), "2026-01-01T01:00:00.000Z");
        assert_eq!(start.unix_seconds(), 1_767_225_600);
    }
}
