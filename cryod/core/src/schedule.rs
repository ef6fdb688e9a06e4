//! What a chamber will wake for next, and when: its TODOs' coming slots in
//! order, each with its recurrence, its pre-check, and a note where a
//! daylight-saving change moves a slot, makes its hour happen twice, or
//! shifts an interval's wall-clock time.

use chrono::{DateTime, Duration, LocalResult, Offset, TimeZone, Utc};
use chrono_tz::Tz;

use crate::todo::{Repeat, Todo, TodoList, next_slot};

/// One coming wake of a TODO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upcoming {
    pub at: DateTime<Utc>,
    pub todo: u64,
    pub text: String,
    /// `every 1h` or `cron 0 9 * * 1-5`; none for a one-shot TODO.
    pub repeat: Option<String>,
    /// The command run before it (its own, else the chamber's).
    pub precheck: Option<String>,
    /// What a daylight-saving change does to it.
    pub note: Option<String>,
    /// It is due already (it waits: for a session, a pause, a hold).
    pub overdue: bool,
}

/// The next `count` wakes of `list`'s pending TODOs after `now` (and the
/// ones due already), in order.
pub fn upcoming(list: &TodoList, now: DateTime<Utc>, tz: Tz, count: usize, precheck: Option<&str>) -> Vec<Upcoming> {
    let mut out = Vec::new();
    for t in list.items.iter().filter(|t| t.is_pending()) {
        let Some(first) = t.at else { continue };
        let mut prev: Option<DateTime<Utc>> = None;
        let mut at = Some(first);
        let mut n = 0;
        while let Some(slot) = at {
            n += 1;
            let note = dst_note(t, slot, prev.unwrap_or(now.min(slot)), tz);
            out.push(Upcoming {
                at: slot,
                todo: t.id,
                text: t.text.clone(),
                repeat: t.repeat.as_ref().map(describe),
                precheck: t.precheck.clone().or_else(|| precheck.map(str::to_string)),
                note,
                overdue: slot <= now,
            });
            let Some(repeat) = &t.repeat else { break };
            if n >= count {
                break;
            }
            prev = Some(slot);
            // A series due already waits as one wake (its missed slots run
            // as one, or are skipped): its next slots come after now.
            at = next_slot(repeat, first, slot.max(now), tz);
        }
    }
    out.sort_by_key(|u| (u.at, u.todo));
    out.truncate(count);
    out
}

/// `every 1h30m`, `cron 0 9 * * 1-5`.
pub fn describe(r: &Repeat) -> String {
    match r {
        Repeat::Every(d) => format!("every {}", crate::time::format_duration(*d)),
        Repeat::Cron(c) => format!("cron {c}"),
    }
}

/// The UTC offset of `tz` at `t`, in seconds.
fn offset(t: DateTime<Utc>, tz: Tz) -> i32 {
    t.with_timezone(&tz).offset().fix().local_minus_utc()
}

/// The instant the offset changed between `a` (before) and `b`.
fn transition(mut a: DateTime<Utc>, mut b: DateTime<Utc>, tz: Tz) -> DateTime<Utc> {
    let before = offset(a, tz);
    while b - a > Duration::seconds(1) {
        let mid = a + (b - a) / 2;
        if offset(mid, tz) == before { a = mid } else { b = mid }
    }
    b
}

fn signed(secs: i32) -> String {
    let sign = if secs < 0 { "-" } else { "+" };
    let m = secs.abs() / 60;
    format!("{sign}{:02}:{:02}", m / 60, m % 60)
}

/// What a daylight-saving change does to the slot `at` of `t` (the slot
/// before it, or now, at `prev`).
fn dst_note(t: &Todo, at: DateTime<Utc>, prev: DateTime<Utc>, tz: Tz) -> Option<String> {
    let local = at.with_timezone(&tz);
    let naive = local.naive_local();
    let date = local.format("%Y-%m-%d");
    match &t.repeat {
        Some(Repeat::Cron(c)) => {
            let cron: croner::Cron = c.parse().ok()?;
            // A slot in the hour the clocks skip runs when it ends.
            if !cron.is_time_matching(&local).unwrap_or(true) {
                return Some(format!(
                    "its time does not exist on {date} (the clocks go forward): it runs at {} instead",
                    local.format("%H:%M")
                ));
            }
            if let LocalResult::Ambiguous(first, _) = tz.from_local_datetime(&naive) {
                return Some(format!(
                    "{} happens twice on {date} (the clocks go back): it runs once, at the first (UTC{})",
                    local.format("%H:%M"),
                    signed(first.offset().fix().local_minus_utc())
                ));
            }
            None
        }
        Some(Repeat::Every(_)) => {
            let (was, is) = (offset(prev, tz), offset(at, tz));
            (was != is).then(|| {
                let when = transition(prev, at, tz).with_timezone(&tz).format("%Y-%m-%d");
                let by = is - was;
                format!(
                    "the clocks change on {when} (UTC{} → UTC{}): an interval keeps real time, so its wall-clock time moves by {}{}",
                    signed(was),
                    signed(is),
                    if by < 0 { "-" } else { "+" },
                    crate::time::humanize(Duration::seconds(i64::from(by.abs())))
                )
            })
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::todo::{Missed, NewTodo};

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// Text, at, every, cron.
    type Row<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>);

    fn list(todos: &[Row], now: DateTime<Utc>, tz: Tz) -> TodoList {
        let mut l = TodoList::default();
        for (text, at, every, cron) in todos {
            let new = NewTodo {
                text: text.to_string(),
                at: at.map(t),
                every: every.map(str::to_string),
                cron: cron.map(str::to_string),
                missed: Missed::Once,
                precheck: None,
            };
            l.add(new, now, tz).unwrap();
        }
        l
    }

    #[test]
    fn slots_merge_in_order_with_their_recurrence_and_gate() {
        let now = t("2026-11-23T08:00:00Z");
        let l = list(
            &[("report", Some("2026-11-23T09:30:00Z"), None, None), ("poll", None, Some("1h"), None)],
            now,
            chrono_tz::UTC,
        );
        let u = upcoming(&l, now, chrono_tz::UTC, 4, Some("sh check.sh"));
        let got: Vec<(String, u64)> = u.iter().map(|u| (u.at.format("%H:%M").to_string(), u.todo)).collect();
        let want = [("09:00", 2), ("09:30", 1), ("10:00", 2), ("11:00", 2)];
        assert_eq!(got, want.map(|(a, b)| (a.to_string(), b)));
        assert_eq!(u[0].repeat.as_deref(), Some("every 1h"));
        assert_eq!(u[1].repeat, None);
        assert!(u.iter().all(|u| u.precheck.as_deref() == Some("sh check.sh") && u.note.is_none() && !u.overdue));
    }

    #[test]
    fn daylight_saving_changes_are_noted() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let now = t("2027-03-26T12:00:00Z");
        let l = list(&[("nightly", None, None, Some("30 2 * * *"))], now, berlin);
        let u = upcoming(&l, now, berlin, 3, None);
        let note = u[1].note.as_deref().unwrap_or_default();
        assert_eq!(u[1].at.with_timezone(&berlin).format("%d %H:%M").to_string(), "28 03:00");
        assert!(note.starts_with("its time does not exist on 2027-03-28"), "{note}");
        assert!(u[0].note.is_none() && u[2].note.is_none());

        let now = t("2026-10-23T12:00:00Z");
        let l = list(&[("nightly", None, None, Some("30 2 * * *"))], now, berlin);
        let u = upcoming(&l, now, berlin, 3, None);
        let note = u[1].note.as_deref().unwrap_or_default();
        assert_eq!(
            note,
            "02:30 happens twice on 2026-10-25 (the clocks go back): it runs once, at the first (UTC+02:00)"
        );

        let l = list(&[("poll", Some("2026-10-24T12:00:00Z"), Some("12h"), None)], now, berlin);
        let u = upcoming(&l, now, berlin, 4, None);
        let notes: Vec<_> = u.iter().map(|u| u.note.is_some()).collect();
        assert_eq!(notes, [false, false, true, false], "{u:#?}");
        assert!(u[2].note.as_deref().unwrap().contains("on 2026-10-25 (UTC+02:00 → UTC+01:00)"), "{u:#?}");
    }

    #[test]
    fn a_due_series_waits_as_one_and_goes_on_after_now() {
        let now = t("2026-11-23T08:00:00Z");
        let l = list(
            &[("poll", Some("2026-11-23T05:00:00Z"), Some("1h"), None)],
            t("2026-11-23T04:00:00Z"),
            chrono_tz::UTC,
        );
        let u = upcoming(&l, now, chrono_tz::UTC, 3, None);
        let got: Vec<(String, bool)> = u.iter().map(|u| (u.at.format("%H:%M").to_string(), u.overdue)).collect();
        assert_eq!(got, [("05:00", true), ("09:00", false), ("10:00", false)].map(|(a, b)| (a.to_string(), b)));
    }
}
