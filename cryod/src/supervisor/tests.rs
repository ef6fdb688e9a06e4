use std::time::Duration;

use chrono::{DateTime, Utc};

#[test]
fn the_told_instant_leads_only_within_the_head_start() {
    let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
    let due = Some(t("2026-11-24T10:00:00Z"));
    assert_eq!(super::lead(due, t("2026-11-24T09:59:59.990Z")), Some(Duration::from_millis(10)));
    assert_eq!(super::lead(due, t("2026-11-24T10:00:00Z")), Some(Duration::ZERO));
    assert_eq!(super::lead(due, t("2026-11-24T10:00:00.001Z")), None, "reached: the clock's own time");
    assert_eq!(super::lead(due, t("2026-11-24T09:00:00Z")), None, "the clock set back an hour");
    assert_eq!(super::lead(None, t("2026-11-24T10:00:00Z")), None);
}

/// A supervisor lives as long as its chamber, mostly at rest: what it
/// holds inline is paid once per chamber (1,000 chambers, a megabyte
/// per kilobyte). What only a session needs is boxed.
#[test]
fn a_supervisor_at_rest_stays_small() {
    let size = std::mem::size_of::<super::Sup>();
    assert!(size <= 2304, "Sup is {size} bytes inline");
}
