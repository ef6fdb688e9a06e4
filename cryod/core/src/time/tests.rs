//! The time grammar against fixed instants: every form `--at` accepts, and
//! the wall-clock edge cases of DST gaps and folds in real zones.

use super::*;
use chrono::{Offset, Timelike};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).expect("test time").with_timezone(&Utc)
}

fn tz(name: &str) -> Tz {
    name.parse().expect("zone")
}

#[test]
fn grammar_table() {
    // Thursday 2026-03-05 12:00 UTC = 13:00 in Berlin (CET, +01:00).
    let now = utc("2026-03-05T12:00:00Z");
    let berlin = tz("Europe/Berlin");
    let cases: &[(&str, &str)] = &[
        ("+30m", "2026-03-05T12:30:00Z"),
        ("+2 hours", "2026-03-05T14:00:00Z"),
        ("90 seconds", "2026-03-05T12:01:30Z"),
        ("1d", "2026-03-06T12:00:00Z"),
        ("2w", "2026-03-19T12:00:00Z"),
        ("+1h30m", "2026-03-05T13:30:00Z"),
        ("1 hour 30 minutes", "2026-03-05T13:30:00Z"),
        ("+ 5 min", "2026-03-05T12:05:00Z"),
        ("3 DAYS", "2026-03-08T12:00:00Z"),
        ("2026-03-05T09:00", "2026-03-05T08:00:00Z"),
        ("2026-03-05T09:00:30", "2026-03-05T08:00:30Z"),
        ("2026-03-05 09:00", "2026-03-05T08:00:00Z"),
        ("2026-03-05 09:00:30", "2026-03-05T08:00:30Z"),
        ("2026-03-05T09:00Z", "2026-03-05T09:00:00Z"),
        ("2026-03-05T09:00:00Z", "2026-03-05T09:00:00Z"),
        ("2026-03-05T09:00+05:30", "2026-03-05T03:30:00Z"),
        ("2026-03-05T09:00:00-08:00", "2026-03-05T17:00:00Z"),
        ("2026-03-06", "2026-03-05T23:00:00Z"),
        ("14:00", "2026-03-05T13:00:00Z"),
        ("13:00", "2026-03-06T12:00:00Z"), // now exactly: next occurrence is tomorrow
        ("09:15", "2026-03-06T08:15:00Z"),
        ("9:15", "2026-03-06T08:15:00Z"),
        ("tomorrow", "2026-03-05T23:00:00Z"),
        ("tomorrow 09:00", "2026-03-06T08:00:00Z"),
        ("Tomorrow 18:30", "2026-03-06T17:30:00Z"),
        ("now", "2026-03-05T12:00:00Z"),
        ("  +30m  ", "2026-03-05T12:30:00Z"),
    ];
    for (expr, want) in cases {
        let got = parse_time(expr, now, berlin).unwrap_or_else(|e| panic!("{expr:?}: {e}"));
        assert_eq!(got, utc(want), "{expr:?}");
    }
}

#[test]
fn refusals_list_the_accepted_forms() {
    let now = utc("2026-03-05T12:00:00Z");
    type Check = fn(&TimeError) -> bool;
    let cases: &[(&str, Check)] = &[
        ("", |e| matches!(e, TimeError::Empty)),
        ("-5m", |e| matches!(e, TimeError::Negative(_))),
        ("-2 hours", |e| matches!(e, TimeError::Negative(_))),
        ("next tuesday", |e| matches!(e, TimeError::Unrecognized(_))),
        ("5", |e| matches!(e, TimeError::Unrecognized(_))),
        ("5 fortnights", |e| matches!(e, TimeError::Unrecognized(_))),
        ("25:00", |e| matches!(e, TimeError::Unrecognized(_))),
        ("12:60", |e| matches!(e, TimeError::Unrecognized(_))),
        ("2026-02-30", |e| matches!(e, TimeError::Unrecognized(_))),
        ("2026-13-01T09:00", |e| matches!(e, TimeError::Unrecognized(_))),
        ("2026-03-05T09", |e| matches!(e, TimeError::Unrecognized(_))),
        ("0000-01-01", |e| matches!(e, TimeError::Unrecognized(_) | TimeError::OutOfRange(_))),
        ("99999999999999 days", |e| matches!(e, TimeError::Unrecognized(_))),
        ("1000000 weeks", |e| matches!(e, TimeError::Unrecognized(_))),
        ("tomorrow noon", |e| matches!(e, TimeError::Unrecognized(_))),
        ("+", |e| matches!(e, TimeError::Unrecognized(_))),
        ("m", |e| matches!(e, TimeError::Unrecognized(_))),
        ("2026-03-05T09:00+99:00", |e| matches!(e, TimeError::Unrecognized(_))),
    ];
    for (expr, ok) in cases {
        let err = parse_time(expr, now, chrono_tz::UTC).expect_err(expr);
        assert!(ok(&err), "{expr:?} gave {err:?}");
        if !matches!(err, TimeError::OutOfRange(_)) {
            assert!(err.to_string().contains("accepted forms"), "{expr:?}: {err}");
        }
    }
}

/// 2026's transitions, worked out by hand from each zone's rules.
#[test]
fn dst_table_2026() {
    let cases: &[(&str, &str, &str)] = &[
        // zone, local wall time, the instant it runs
        // New York: spring forward 2026-03-08 02:00 -> 03:00, fall back 2026-11-01 02:00 -> 01:00.
        ("America/New_York", "2026-03-08T02:30", "2026-03-08T07:00:00Z"),
        ("America/New_York", "2026-03-08T03:00", "2026-03-08T07:00:00Z"),
        ("America/New_York", "2026-11-01T01:30", "2026-11-01T05:30:00Z"),
        ("America/New_York", "2026-11-01T02:00", "2026-11-01T07:00:00Z"),
        // Berlin: 2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00.
        ("Europe/Berlin", "2026-03-29T02:30", "2026-03-29T01:00:00Z"),
        ("Europe/Berlin", "2026-10-25T02:30", "2026-10-25T00:30:00Z"),
        // London: 2026-03-29 01:00 -> 02:00, 2026-10-25 02:00 -> 01:00.
        ("Europe/London", "2026-03-29T01:30", "2026-03-29T01:00:00Z"),
        ("Europe/London", "2026-10-25T01:30", "2026-10-25T00:30:00Z"),
        // Sydney (southern): 2026-04-05 03:00 -> 02:00, 2026-10-04 02:00 -> 03:00.
        ("Australia/Sydney", "2026-04-05T02:30", "2026-04-04T15:30:00Z"),
        ("Australia/Sydney", "2026-10-04T02:30", "2026-10-03T16:00:00Z"),
        // Lord Howe: a 30-minute shift. 2026-04-05 02:00 -> 01:30, 2026-10-04 02:00 -> 02:30.
        ("Australia/Lord_Howe", "2026-04-05T01:45", "2026-04-04T14:45:00Z"),
        ("Australia/Lord_Howe", "2026-10-04T02:15", "2026-10-03T15:30:00Z"),
        ("Australia/Lord_Howe", "2026-10-04T02:30", "2026-10-03T15:30:00Z"),
        // Kolkata: no DST at all.
        ("Asia/Kolkata", "2026-03-29T02:30", "2026-03-28T21:00:00Z"),
    ];
    let now = utc("2026-01-01T00:00:00Z");
    for (zone, local, want) in cases {
        let got = parse_time(local, now, tz(zone)).unwrap_or_else(|e| panic!("{zone} {local}: {e}"));
        assert_eq!(got, utc(want), "{zone} {local}");
    }
}

/// For every transition of 2024–2030 in several zones: a time inside a gap
/// runs at the gap's end, and an ambiguous time runs at its first occurrence.
#[test]
fn dst_rules_hold_for_every_transition_of_several_years() {
    let zones = [
        "America/New_York",
        "Europe/Berlin",
        "Europe/London",
        "Australia/Sydney",
        "Australia/Lord_Howe",
        "America/Santiago",
        "Pacific/Auckland",
    ];
    for zone in zones {
        let z = tz(zone);
        let mut t = utc("2024-01-01T00:00:00Z");
        let end = utc("2031-01-01T00:00:00Z");
        let mut transitions = 0;
        let offset = |t: DateTime<Utc>| t.with_timezone(&z).offset().fix().local_minus_utc();
        while t < end {
            let next = t + Duration::minutes(15);
            let (before, after) = (offset(t), offset(next));
            if before != after {
                // Find the exact transition instant to the minute.
                let mut at = t;
                while offset(at) == before {
                    at += Duration::minutes(1);
                }
                transitions += 1;
                let shift = i64::from(after - before);
                let wall_before = (at - Duration::minutes(1)).with_timezone(&z).naive_local() + Duration::minutes(1);
                if shift > 0 {
                    // Gap: every wall time in [wall_before, wall_before + shift) is missing.
                    let inside = wall_before + Duration::seconds(shift / 2);
                    let got =
                        parse_time(&inside.format("%Y-%m-%dT%H:%M:%S").to_string(), utc("2000-01-01T00:00:00Z"), z)
                            .expect("gap time");
                    assert_eq!(got, at, "{zone}: {inside} (gap) should run at the gap's end");
                } else {
                    // Overlap: wall times in [wall_before + shift, wall_before) happen twice.
                    let inside = wall_before + Duration::seconds(shift / 2);
                    let got =
                        parse_time(&inside.format("%Y-%m-%dT%H:%M:%S").to_string(), utc("2000-01-01T00:00:00Z"), z)
                            .expect("ambiguous time");
                    assert!(got < at, "{zone}: {inside} (ambiguous) should run before the transition");
                    assert_eq!(got.with_timezone(&z).naive_local(), inside, "{zone}: {inside}");
                }
                t = at;
            } else {
                t = next;
            }
        }
        assert!(transitions >= 12, "{zone}: only {transitions} transitions found");
    }
}

#[test]
fn next_occurrence_crosses_a_gap() {
    // 02:30 does not exist on 2026-03-08 in New York: the next "02:30" after
    // 2026-03-07 12:00 runs at the gap's end, 03:00 EDT.
    let got = parse_time("02:30", utc("2026-03-07T17:00:00Z"), tz("America/New_York")).unwrap();
    assert_eq!(got, utc("2026-03-08T07:00:00Z"));
    assert_eq!(got.with_timezone(&tz("America/New_York")).hour(), 3);
}

#[test]
fn durations() {
    assert_eq!(parse_duration("6h"), Some(Duration::hours(6)));
    assert_eq!(parse_duration("1d 12h"), Some(Duration::hours(36)));
    assert_eq!(parse_duration("x"), None);
    assert_eq!(humanize(Duration::seconds(45)), "45s");
    assert_eq!(humanize(Duration::seconds(3700)), "1h 1m");
    assert_eq!(humanize(Duration::seconds(-120)), "-2m");
    assert_eq!(humanize(Duration::hours(50)), "2d 2h");
}

/// Issue 39, item 8: what `cryo-agent time` prints is accepted back.
#[test]
fn what_time_prints_is_accepted_back() {
    let now = Utc.with_ymd_and_hms(2026, 11, 25, 17, 26, 59).unwrap();
    let want = Utc.with_ymd_and_hms(2026, 11, 26, 17, 26, 59).unwrap();
    for printed in [
        "2026-11-26T17:26:59+00:00 (Etc/UTC), in 1d",
        "2026-11-26T17:26:59+00:00 (Etc/UTC)",
        "2026-11-26T18:26:59+01:00 (Europe/Berlin), in 1d",
    ] {
        assert_eq!(parse_time(printed, now, chrono_tz::UTC).unwrap(), want, "{printed}");
    }
    assert!(parse_time("tomorrow (Etc/UTC)", now, chrono_tz::UTC).is_err());
}
