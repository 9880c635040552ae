//! A Schedule trigger's times: a five-field cron expression (croner) read on the wall
//! clock of an IANA time zone (jiff, with the tz database it bundles: 200 KB read at run
//! time, where chrono-tz compiled every zone into 2.6 MB of tables and relocations, which
//! put `update-agent` over its 8 MB goal).
//!
//! The expression is matched against local wall-clock times, never against instants, and
//! each matching wall-clock time is then placed on the time line:
//! - a time skipped by a spring-forward fires once, at the first instant after the gap
//!   (so every skipped time of a `*/15` schedule is that one fire);
//! - a time repeated by a fall-back fires once, at its first occurrence.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeDelta, Timelike, Utc};
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::{AmbiguousOffset, TimeZone};

use crate::domain::time::Timestamp;

/// Matching wall-clock times looked at for one next fire: more than the times a gap or
/// a repeated hour can hide (every minute of two hours), so a fire is always found.
const MAX_CANDIDATES: usize = 300;
/// Longest a gap may be (the tz database has none over a day).
const MAX_GAP_MINUTES: i64 = 24 * 60;

/// A parsed schedule.
#[derive(Clone, Debug)]
pub struct CronSchedule {
    cron: croner::Cron,
    timezone: TimeZone,
}

impl CronSchedule {
    /// Parses `expression` (minute hour day-of-month month day-of-week) in `timezone`.
    /// Err names the problem and the field (`cron` or `timezone`).
    pub fn parse(expression: &str, timezone: &str) -> Result<Self, String> {
        let fields = expression.split_whitespace().count();
        if fields != 5 {
            return Err(format!(
                "cron: {expression:?} has {fields} fields; a cron expression has five (minute hour day-of-month month \
                 day-of-week)"
            ));
        }
        let timezone = TimeZone::get(timezone)
            .map_err(|_| format!("timezone: {timezone:?} is not an IANA time zone name (such as Europe/Paris)"))?;
        let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build();
        let cron = parser.parse(expression).map_err(|error| format!("cron: {expression:?} is not valid: {error}"))?;
        Ok(Self { cron, timezone })
    }

    /// Parses and checks that the schedule ever fires after `now` (`0 0 30 2 *` never does).
    pub fn parse_firing(expression: &str, timezone: &str, now: Timestamp) -> Result<Self, String> {
        let schedule = Self::parse(expression, timezone)?;
        match schedule.next_after(now) {
            Some(_) => Ok(schedule),
            None => Err(format!("cron: {expression:?} never matches a date")),
        }
    }

    /// The first fire strictly after `after`, or None when there is none.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let after = after.as_datetime();
        let mut cursor = self.wall_clock(after)?;
        for _ in 0..MAX_CANDIDATES {
            cursor = self.cron.find_next_occurrence(&cursor, false).ok()?;
            let at = self.place(cursor)?;
            if at > after {
                return Some(Timestamp::from_datetime(at));
            }
        }
        None
    }

    /// The instant of a wall-clock time: its first occurrence when repeated, the first
    /// instant after the gap when skipped.
    fn place(&self, local: NaiveDateTime) -> Option<DateTime<Utc>> {
        self.earliest(local)?.or_else(|| {
            (1..=MAX_GAP_MINUTES).find_map(|minutes| {
                let probe = local.checked_add_signed(TimeDelta::minutes(minutes))?;
                // The first wall-clock minute that exists again is the gap's end.
                self.earliest(probe)?
            })
        })
    }

    /// The wall-clock time of an instant in the zone.
    fn wall_clock(&self, at: DateTime<Utc>) -> Option<NaiveDateTime> {
        let instant = jiff::Timestamp::new(at.timestamp(), at.timestamp_subsec_nanos() as i32).ok()?;
        let local = self.timezone.to_datetime(instant);
        let date = NaiveDate::from_ymd_opt(i32::from(local.year()), local.month() as u32, local.day() as u32)?;
        date.and_hms_nano_opt(
            local.hour() as u32,
            local.minute() as u32,
            local.second() as u32,
            local.subsec_nanosecond() as u32,
        )
    }

    /// The first instant showing the wall-clock time `local`: Some(None) when a gap
    /// skips it, None when it is outside the dates the zone can place.
    fn earliest(&self, local: NaiveDateTime) -> Option<Option<DateTime<Utc>>> {
        let civil = jiff::civil::DateTime::new(
            i16::try_from(local.year()).ok()?,
            local.month() as i8,
            local.day() as i8,
            local.hour() as i8,
            local.minute() as i8,
            local.second() as i8,
            local.nanosecond() as i32,
        )
        .ok()?;
        let offset_seconds = match self.timezone.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset.seconds(),
            // The larger offset reaches the repeated time first.
            AmbiguousOffset::Fold { before, after } => before.seconds().max(after.seconds()),
            AmbiguousOffset::Gap { .. } => return Some(None),
        };
        let utc = local.checked_sub_signed(TimeDelta::seconds(i64::from(offset_seconds)))?;
        Some(Some(utc.and_utc()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    fn fires(expression: &str, timezone: &str, from: &str, count: usize) -> Vec<String> {
        let schedule = CronSchedule::parse(expression, timezone).unwrap();
        let mut now = at(from);
        let mut fired = Vec::new();
        for _ in 0..count {
            now = schedule.next_after(now).unwrap();
            fired.push(now.to_string());
        }
        fired
    }

    #[test]
    fn every_minute_fires_on_each_minute() {
        assert_eq!(
            fires("* * * * *", "UTC", "2026-05-01T10:00:30.000Z", 3),
            ["2026-05-01T10:01:00.000Z", "2026-05-01T10:02:00.000Z", "2026-05-01T10:03:00.000Z"]
        );
    }

    #[test]
    fn times_are_read_on_the_zones_wall_clock() {
        // 09:00 in Paris is 07:00 UTC in summer, 08:00 in winter.
        assert_eq!(fires("0 9 * * *", "Europe/Paris", "2026-07-01T00:00:00.000Z", 1), ["2026-07-01T07:00:00.000Z"]);
        assert_eq!(fires("0 9 * * *", "Europe/Paris", "2026-12-01T00:00:00.000Z", 1), ["2026-12-01T08:00:00.000Z"]);
        // Weekdays only: Friday 2026-05-01, then Monday 2026-05-04.
        assert_eq!(
            fires("30 8 * * MON-FRI", "America/New_York", "2026-05-01T00:00:00.000Z", 2),
            ["2026-05-01T12:30:00.000Z", "2026-05-04T12:30:00.000Z"]
        );
    }

    #[test]
    fn a_time_skipped_by_spring_forward_fires_once_after_the_gap() {
        // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC); 02:30 does not exist.
        assert_eq!(
            fires("30 2 * * *", "America/New_York", "2026-03-07T12:00:00.000Z", 3),
            ["2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z", "2026-03-10T06:30:00.000Z"]
        );
        // Every quarter hour: the four skipped times and 03:00 are one fire at 03:00 EDT.
        assert_eq!(
            fires("*/15 * * * *", "America/New_York", "2026-03-08T06:40:00.000Z", 3),
            ["2026-03-08T06:45:00.000Z", "2026-03-08T07:00:00.000Z", "2026-03-08T07:15:00.000Z"]
        );
    }

    #[test]
    fn a_time_repeated_by_fall_back_fires_once_at_its_first_occurrence() {
        // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
        assert_eq!(
            fires("30 1 * * *", "America/New_York", "2026-10-31T12:00:00.000Z", 2),
            ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]
        );
        // Every half hour: the repeated hour is not fired again.
        assert_eq!(
            fires("*/30 * * * *", "America/New_York", "2026-11-01T04:50:00.000Z", 4),
            [
                "2026-11-01T05:00:00.000Z",
                "2026-11-01T05:30:00.000Z",
                "2026-11-01T07:00:00.000Z",
                "2026-11-01T07:30:00.000Z"
            ]
        );
    }

    #[test]
    fn refusals_name_the_field() {
        let now = at("2026-05-01T00:00:00.000Z");
        for (expression, timezone, expected) in [
            ("* * * * * *", "UTC", "cron: \"* * * * * *\" has 6 fields"),
            ("* * * *", "UTC", "has 4 fields"),
            ("61 * * * *", "UTC", "cron: \"61 * * * *\" is not valid"),
            ("0 0 30 2 *", "UTC", "never matches a date"),
            ("0 0 * * *", "Mars/Olympus", "timezone: \"Mars/Olympus\" is not an IANA time zone"),
        ] {
            let error = CronSchedule::parse_firing(expression, timezone, now).unwrap_err();
            assert!(error.contains(expected), "{expression} {timezone}: {error}");
        }
        assert!(CronSchedule::parse_firing("0 0 29 2 *", "UTC", now).is_ok(), "leap days happen");
    }
}
