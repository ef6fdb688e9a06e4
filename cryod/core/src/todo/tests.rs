//! The TODO list's rules: ids never reused, claims terminal and named by
//! their wake, retries under fresh ids, series and their missed slots.

use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const UTC: Tz = chrono_tz::UTC;

fn one(text: &str, at: &str) -> NewTodo {
    NewTodo { text: text.into(), at: Some(t(at)), ..NewTodo::default() }
}

#[test]
fn reads_the_seed_format() {
    let seed = r#"[{"id":1,"text":"check CI","done":false,"claimed":false,"at":"2026-03-05T09:00","created":"2026-03-01T10:00"},
                  {"id":2,"text":"old","done":true,"claimed":true,"at":"","created":"unknown"}]"#;
    let list = parse_file(seed, chrono_tz::Europe::Berlin, 0).unwrap();
    assert_eq!(list.items.len(), 2);
    assert_eq!(list.items[0].at, Some(t("2026-03-05T08:00:00Z")));
    assert_eq!(list.items[1].at, None);
    assert_eq!(list.high_water, 2);
    // Written back: RFC 3339 with the zone's offset; the unreadable "unknown" kept.
    let out = render_file(&list, chrono_tz::Europe::Berlin);
    assert!(out.contains(r#""at": "2026-03-05T09:00:00+01:00""#), "{out}");
    assert!(out.contains(r#""created": "unknown""#), "{out}");
    assert_eq!(parse_file(&out, chrono_tz::Europe::Berlin, 0).unwrap(), list);
}

#[test]
fn keeps_unknown_fields() {
    let text = r#"[{"id":3,"text":"x","done":false,"at":"2026-03-05T09:00:00Z","owner":"bob"}]"#;
    let list = parse_file(text, UTC, 0).unwrap();
    assert!(render_file(&list, UTC).contains(r#""owner": "bob""#));
}

#[test]
fn file_errors() {
    assert!(matches!(parse_file("{", UTC, 0), Err(FileError::Json(_))));
    assert!(matches!(parse_file("{}", UTC, 0), Err(FileError::Json(_))));
    assert!(matches!(
        parse_file(r#"[{"id":1,"text":"a","at":"soon"}]"#, UTC, 0),
        Err(FileError::Item { index: 0, .. })
    ));
    assert!(matches!(
        parse_file(r#"[{"id":1,"text":"a"},{"id":1,"text":"b"}]"#, UTC, 0),
        Err(FileError::DuplicateId(1))
    ));
    assert_eq!(parse_file("  \n", UTC, 7).unwrap().high_water, 7);
}

#[test]
fn ids_are_never_reused() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    let a = list.add(one("a", "2026-03-05T13:00:00Z"), now, UTC).unwrap();
    let b = list.add(one("b", "2026-03-05T14:00:00Z"), now, UTC).unwrap();
    list.remove(b).unwrap();
    let c = list.add(one("c", "2026-03-05T15:00:00Z"), now, UTC).unwrap();
    assert_eq!((a, b, c), (1, 2, 3));
    // Through the file: the high-water mark comes from the chamber's state.
    let reread = parse_file(&render_file(&list, UTC), UTC, list.high_water).unwrap();
    let mut reread = reread;
    reread.remove(c).unwrap();
    assert_eq!(reread.add(one("d", "2026-03-05T15:00:00Z"), now, UTC).unwrap(), 4);
}

#[test]
fn claim_complete_and_retry() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    list.add(one("due", "2026-03-05T11:59:00Z"), now, UTC).unwrap();
    list.add(one("later", "2026-03-06T00:00:00Z"), now, UTC).unwrap();
    let claims = list.claim_due(now, UTC, Duration::minutes(5));
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].due, t("2026-03-05T11:59:00Z"));
    assert!(list.get(1).unwrap().claimed);
    // A claim is terminal: it is not due again.
    assert!(list.claim_due(now, UTC, Duration::minutes(5)).is_empty());
    assert_eq!(list.next_due(), Some(t("2026-03-06T00:00:00Z")));

    let (retries, exhausted) = list.fail(&claims, now, 10);
    assert!(exhausted.is_empty());
    assert_eq!(retries, [1], "a one-shot is retried under its own number");
    let retry = list.get(1).unwrap().clone();
    assert_eq!(retry.text, "due (attempt 1)");
    assert_eq!(retry.at, Some(now + Duration::minutes(2)));
    assert_eq!((retry.done, retry.claimed, retry.attempt), (false, false, 1));

    // The retry fails again: attempt 2, 4 minutes, text not doubled.
    let later = now + Duration::minutes(2);
    let claims = list.claim_due(later, UTC, Duration::minutes(5));
    let (retries, _) = list.fail(&claims, later, 10);
    let retry = list.get(retries[0]).unwrap();
    assert_eq!(retry.text, "due (attempt 2)");
    assert_eq!(retry.at, Some(later + Duration::minutes(4)));
    assert_eq!((retry.id, list.items.len()), (1, 2), "no new TODO");
    // `todo done 1` names it still.
    list.done(1).unwrap();
    assert!(list.get(1).unwrap().done);
}

#[test]
fn retries_stop_at_max_attempts() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    list.add(one("x", "2026-03-05T11:00:00Z"), now, UTC).unwrap();
    let mut at = now;
    for k in 1..=3 {
        let claims = list.claim_due(at, UTC, Duration::minutes(5));
        assert_eq!(claims.len(), 1, "round {k}");
        let (retries, exhausted) = list.fail(&claims, at, 2);
        if k <= 2 {
            assert_eq!(retries.len(), 1);
            at = list.get(retries[0]).unwrap().at.unwrap();
        } else {
            assert!(retries.is_empty());
            assert_eq!(exhausted.len(), 1);
        }
    }
    assert_eq!(list.next_due(), None);
}

#[test]
fn retry_delays_double_and_cap_at_a_day() {
    assert_eq!(retry_delay(1), Duration::minutes(2));
    assert_eq!(retry_delay(5), Duration::minutes(32));
    assert_eq!(retry_delay(10), Duration::minutes(1024));
    assert_eq!(retry_delay(11), Duration::days(1));
    assert_eq!(retry_delay(200), Duration::days(1));
    assert_eq!(base_text("a (attempt 3)"), "a");
    assert_eq!(base_text("a (attempt x)"), "a (attempt x)");
}

#[test]
fn done_and_remove_guard_claims() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    list.add(one("a", "2026-03-05T11:00:00Z"), now, UTC).unwrap();
    list.claim_due(now, UTC, Duration::minutes(5));
    assert_eq!(list.done(1), Err(TodoError::Claimed(1)));
    assert_eq!(list.remove(1).unwrap_err(), TodoError::Claimed(1));
    assert_eq!(list.done(9), Err(TodoError::NotFound(9)));
}

#[test]
fn add_refusals() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    assert_eq!(list.add(NewTodo { text: " ".into(), ..NewTodo::default() }, now, UTC), Err(TodoError::EmptyText));
    let long = NewTodo { text: "x".repeat(MAX_TEXT + 1), ..NewTodo::default() };
    assert!(matches!(list.add(long, now, UTC), Err(TodoError::TextTooLong(_))));
    let both =
        NewTodo { text: "x".into(), every: Some("1h".into()), cron: Some("0 9 * * *".into()), ..NewTodo::default() };
    assert_eq!(list.add(both, now, UTC), Err(TodoError::BothRepeats));
    let bad = NewTodo { text: "x".into(), every: Some("10s".into()), ..NewTodo::default() };
    assert!(matches!(list.add(bad, now, UTC), Err(TodoError::BadEvery(_))));
    let bad = NewTodo { text: "x".into(), cron: Some("0 9 * *".into()), ..NewTodo::default() };
    assert!(matches!(list.add(bad, now, UTC), Err(TodoError::BadCron(..))));
    let bad = NewTodo { text: "x".into(), cron: Some("0 25 * * *".into()), ..NewTodo::default() };
    assert!(matches!(list.add(bad, now, UTC), Err(TodoError::BadCron(..))));
}

#[test]
fn recurring_every_coalesces_missed_slots() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    let new = NewTodo { text: "poll".into(), every: Some("6h".into()), ..NewTodo::default() };
    let id = list.add(new, now, UTC).unwrap();
    assert_eq!(list.get(id).unwrap().at, Some(t("2026-03-05T18:00:00Z")));
    // The machine was off for a day: 4 slots passed (18:00, 00:00, 06:00, 12:00).
    let back = t("2026-03-06T13:00:00Z");
    let claims = list.claim_due(back, UTC, Duration::minutes(5));
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].slots, 4);
    assert_eq!(claims[0].due, t("2026-03-05T18:00:00Z"));
    let todo = list.get(id).unwrap();
    assert!(todo.is_pending(), "a series stays pending");
    assert_eq!(todo.at, Some(t("2026-03-06T18:00:00Z")));
    // Completing a recurring claim leaves the series alone.
    list.complete(&claims);
    assert!(list.get(id).unwrap().is_pending());
}

#[test]
fn recurring_skip_drops_late_slots() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    let new = NewTodo { text: "poll".into(), every: Some("1h".into()), missed: Missed::Skip, ..NewTodo::default() };
    let id = list.add(new, now, UTC).unwrap();
    // 3 hours and 30 minutes later: the newest slot (15:00) is 30 minutes late.
    let claims = list.claim_due(t("2026-03-05T15:30:00Z"), UTC, Duration::minutes(5));
    assert!(claims.is_empty());
    assert_eq!(list.get(id).unwrap().at, Some(t("2026-03-05T16:00:00Z")));
    // On time: it runs.
    let claims = list.claim_due(t("2026-03-05T16:01:00Z"), UTC, Duration::minutes(5));
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].slots, 1);
}

#[test]
fn recurring_cron_in_the_chamber_zone() {
    let tz = chrono_tz::America::New_York;
    // Friday 2026-03-06 15:00 UTC = 10:00 EST.
    let now = t("2026-03-06T15:00:00Z");
    let mut list = TodoList::default();
    let new = NewTodo { text: "standup".into(), cron: Some("0 9 * * MON-FRI".into()), ..NewTodo::default() };
    let id = list.add(new, now, tz).unwrap();
    // Next weekday 09:00 in New York is Monday 2026-03-09, after the DST change (EDT, -4).
    assert_eq!(list.get(id).unwrap().at, Some(t("2026-03-09T13:00:00Z")));
    let reread = parse_file(&render_file(&list, tz), tz, 0).unwrap();
    assert_eq!(reread.get(id).unwrap().repeat, Some(Repeat::Cron("0 9 * * MON-FRI".into())));
}

#[test]
fn requeue_is_due_now_under_the_same_number() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    list.add(one("x", "2026-03-05T11:00:00Z"), now, UTC).unwrap();
    let claims = list.claim_due(now, UTC, Duration::minutes(5));
    let ids = list.requeue(&claims, now);
    let t2 = list.get(ids[0]).unwrap();
    assert_eq!((t2.id, t2.text.as_str(), t2.at, t2.done), (1, "x (attempt 1)", Some(now), false));
    // A series' slot goes on as a TODO of its own: the series keeps its next slot.
    let every = NewTodo { text: "tick".into(), every: Some("1h".into()), ..NewTodo::default() };
    let id = list.add(every, now, UTC).unwrap();
    let claims = list.claim_due(now + Duration::hours(2), UTC, Duration::minutes(5));
    let slot = claims.iter().find(|c| c.id == id).expect("the series' slot").clone();
    let ids = list.requeue(&[slot], now + Duration::hours(2));
    assert_ne!(ids[0], id);
    assert_eq!(list.get(ids[0]).unwrap().text, "tick (attempt 1)");
    assert!(list.get(id).unwrap().repeat.is_some() && list.get(id).unwrap().is_pending());
}

/// A week of a weekday-morning cron and a 6-hourly series, checked hour by
/// hour, with the machine suspended from Tuesday 20:00 to Thursday 07:30.
#[test]
fn a_simulated_week_with_a_suspend() {
    let tz = chrono_tz::Europe::Berlin;
    let start = t("2026-03-02T00:00:00Z"); // Monday
    let mut list = TodoList::default();
    let standup = list
        .add(NewTodo { text: "standup".into(), cron: Some("0 9 * * MON-FRI".into()), ..NewTodo::default() }, start, tz)
        .unwrap();
    let poll = list
        .add(
            NewTodo { text: "poll".into(), every: Some("6h".into()), missed: Missed::Skip, ..NewTodo::default() },
            start,
            tz,
        )
        .unwrap();
    let asleep = (t("2026-03-03T19:00:00Z"), t("2026-03-05T06:30:00Z"));
    let mut runs: Vec<(u64, DateTime<Utc>, u32)> = Vec::new();
    let mut now = start;
    while now < t("2026-03-09T00:00:00Z") {
        now += Duration::minutes(30);
        if now > asleep.0 && now < asleep.1 {
            continue; // suspended: no wake happens
        }
        for c in list.claim_due(now, tz, Duration::minutes(5)) {
            runs.push((c.id, now, c.slots));
        }
    }
    let standups: Vec<_> = runs.iter().filter(|r| r.0 == standup).collect();
    // Mon and Tue on time; Wednesday's slot, missed while asleep, runs once at
    // wake-up (Thu 07:30 Berlin); then Thu and Fri on time; no weekend runs.
    let days: Vec<String> = standups.iter().map(|r| r.1.with_timezone(&tz).format("%a %H:%M").to_string()).collect();
    assert_eq!(days, ["Mon 09:00", "Tue 09:00", "Thu 07:30", "Thu 09:00", "Fri 09:00"], "{days:?}");
    assert!(standups.iter().all(|r| r.2 == 1));
    // The 6-hourly `skip` series drops what it missed while asleep and goes on.
    let polls: Vec<_> = runs.iter().filter(|r| r.0 == poll).map(|r| r.1).collect();
    assert!(polls.iter().all(|p| *p <= asleep.0 || *p >= asleep.1));
    // 28 slots from Mon 06:00 to next Mon 00:00; the 6 that fell in the
    // suspend (Wed 00:00 to Thu 06:00) are dropped, the rest run on time.
    assert_eq!(polls.len(), 28 - 6, "{polls:?}");
}

#[test]
fn file_times_keep_their_precision_and_new_times_are_whole_seconds() {
    let text = r#"[{"id":1,"text":"x","at":"2026-03-05T09:00:00.250Z"}]"#;
    let list = parse_file(text, UTC, 0).unwrap();
    assert!(render_file(&list, UTC).contains("2026-03-05T09:00:00.250+00:00"));
    let mut list = TodoList::default();
    let now = t("2026-03-05T12:00:00.987Z");
    let id = list
        .add(NewTodo { text: "y".into(), at: Some(now + Duration::minutes(30)), ..NewTodo::default() }, now, UTC)
        .unwrap();
    assert_eq!(list.get(id).unwrap().at, Some(t("2026-03-05T12:30:00Z")));
}

#[test]
fn a_zone_change_moves_cron_series_to_the_new_wall_clock() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    let id = list
        .add(
            NewTodo { text: "standup".into(), cron: Some("0 9 * * *".into()), ..NewTodo::default() },
            now,
            chrono_tz::Europe::Berlin,
        )
        .unwrap();
    let every =
        list.add(NewTodo { text: "poll".into(), every: Some("6h".into()), ..NewTodo::default() }, now, UTC).unwrap();
    assert_eq!(list.get(id).unwrap().at, Some(t("2026-03-06T08:00:00Z")));
    let before = list.get(every).unwrap().at;
    assert_eq!(list.rezone(now, chrono_tz::America::New_York), 1);
    assert_eq!(list.get(id).unwrap().at, Some(t("2026-03-05T14:00:00Z")), "09:00 in New York is still ahead today");
    assert_eq!(list.get(every).unwrap().at, before, "a duration does not depend on the zone");
}

#[test]
fn a_claim_names_its_wake_and_settles_once() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    let a = list.add(one("a", "2026-03-05T11:00:00Z"), now, UTC).unwrap();
    let b = list.add(one("b", "2026-03-05T11:30:00Z"), now, UTC).unwrap();
    // The wake was recorded with `a` only: `b`, though due, stays for the next one.
    let claims = list.claim_for("w1", &[a], now, UTC, Duration::minutes(5));
    assert_eq!(claims.iter().map(|c| c.id).collect::<Vec<_>>(), [a]);
    assert_eq!(list.get(a).unwrap().claimed_by.as_deref(), Some("w1"));
    assert!(list.get(b).unwrap().is_pending());
    assert_eq!(list.in_flight("w1", &claims), claims);
    assert!(list.in_flight("w2", &claims).is_empty(), "another wake holds nothing");

    let fail = Settle::Fail { now, max_attempts: 3 };
    let (retries, _) = list.settle("w1", &claims, fail);
    assert_eq!(retries.len(), 1);
    let after = list.clone();
    // A crash between the settlement and its record settles it again: nothing changes.
    assert_eq!(list.settle("w1", &claims, fail), (Vec::new(), Vec::new()));
    assert_eq!(list, after);
    assert_eq!(list.get(a).unwrap().claimed_by, None);
}

#[test]
fn a_claim_of_an_older_cryo_without_a_marker_is_in_flight_for_any_wake() {
    let text = r#"[{"id":1,"text":"a","done":false,"claimed":true,"at":"2026-03-05T11:00:00Z"}]"#;
    let list = parse_file(text, UTC, 0).unwrap();
    assert!(list.get(1).unwrap().in_flight("w9"));
}

#[test]
fn skip_missed_moves_only_late_skip_series() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    let every = |missed| NewTodo { text: "poll".into(), every: Some("1h".into()), missed, ..NewTodo::default() };
    let skip = list.add(every(Missed::Skip), now, UTC).unwrap();
    let once = list.add(every(Missed::Once), now, UTC).unwrap();
    let late = t("2026-03-05T15:30:00Z");
    assert_eq!(list.skip_missed(late, UTC, Duration::minutes(5)).len(), 1);
    assert_eq!(list.get(skip).unwrap().at, Some(t("2026-03-05T16:00:00Z")));
    assert_eq!(list.get(once).unwrap().at, Some(t("2026-03-05T13:00:00Z")), "a `once` series keeps its slots to run");
    // On time, nothing is skipped.
    assert!(list.skip_missed(t("2026-03-05T16:01:00Z"), UTC, Duration::minutes(5)).is_empty());
}

#[test]
fn reclaim_makes_again_only_the_claims_a_power_cut_took() {
    let now = t("2026-03-05T12:00:00Z");
    let grace = Duration::minutes(5);
    let mut list = TodoList::default();
    let a = list.add(one("a", "2026-03-05T11:00:00Z"), now, UTC).unwrap();
    let series = NewTodo { text: "poll".into(), every: Some("1h".into()), ..NewTodo::default() };
    let s = list.add(series, t("2026-03-05T10:30:00Z"), UTC).unwrap();
    let durable = list.clone();
    let claims = list.claim_for("w1", &[a, s], now, UTC, grace);
    assert_eq!(claims.len(), 2);
    let claimed = list.clone();

    // The claim landed: nothing to make again.
    assert_eq!(list.reclaim("w1", &claims, now, UTC, grace), 0);
    assert_eq!(list, claimed);

    // The power cut took it: both are claimed again by the same wake, and
    // the recovery's re-queue then runs each once more as a new attempt.
    let later = t("2026-03-05T12:20:00Z");
    let mut cut = durable.clone();
    assert_eq!(cut.reclaim("w1", &claims, later, UTC, grace), 2);
    assert_eq!(cut.in_flight("w1", &claims), claims);
    let (retries, _) = cut.settle("w1", &claims, Settle::Requeue { now: later });
    assert_eq!(retries.len(), 2);
    assert_eq!((cut.get(a).unwrap().attempt, cut.get(a).unwrap().done), (1, false), "retried as itself");
    // Its retry is not taken for a lost claim of w1: that claim was settled.
    let requeued = cut.clone();
    assert_eq!(cut.reclaim("w1", &claims, later, UTC, grace), 0);
    assert_eq!(cut, requeued);
    assert!(cut.get(s).unwrap().at.unwrap() > later, "the series moved past the claimed slot");

    // Settled (or moved on) since: left alone.
    let mut settled = claimed.clone();
    settled.settle("w1", &claims, Settle::Complete);
    let before = settled.clone();
    assert_eq!(settled.reclaim("w1", &claims, t("2026-03-05T14:00:00Z"), UTC, grace), 0);
    assert_eq!(settled, before, "a later slot of the series is not this wake's");
}

/// A long life is no fault: done TODOs past `keep` leave the list (the
/// oldest first) with their ids never reused, the cap counts only what is
/// not done, and an archived line reads back as the TODO it was.
#[test]
fn done_todos_retire_and_only_open_ones_count() {
    let now = t("2026-03-05T12:00:00Z");
    let mut list = TodoList::default();
    for i in 0..5 {
        let id = list.add(one(&format!("job {i}"), "2026-03-06T09:00:00Z"), now, UTC).unwrap();
        if i < 4 {
            list.done(id).unwrap();
        }
    }
    let gone = list.retire(1);
    assert_eq!(gone.iter().map(|t| t.id).collect::<Vec<_>>(), [1, 2, 3], "the oldest done ones");
    assert_eq!(list.items.iter().map(|t| t.id).collect::<Vec<_>>(), [4, 5], "the newest done one and the open one");
    assert!(list.retire(1).is_empty(), "nothing more past the tail");
    assert_eq!(list.add(one("next", "2026-03-06T09:00:00Z"), now, UTC).unwrap(), 6, "ids go on");
    // 50,000 done TODOs read (the seed system keeps that many); the cap is
    // for open ones.
    let many: Vec<String> = (1..=50_000).map(|i| format!(r#"{{"id":{i},"text":"t","done":true}}"#)).collect();
    let text = format!("[{}]", many.join(","));
    let mut big = parse_file(&text, UTC, 0).unwrap();
    assert_eq!(big.open(), 0);
    big.add(one("still works", "2026-03-06T09:00:00Z"), now, UTC).unwrap();
    assert_eq!(big.retire(DEFAULT_KEEP_DONE).len(), 50_000 - DEFAULT_KEEP_DONE);
    let open: Vec<String> =
        (1..=MAX_TODOS as u64).map(|i| format!(r#"{{"id":{i},"text":"t","at":"2026-03-06T09:00:00Z"}}"#)).collect();
    let mut full = parse_file(&format!("[{}]", open.join(",")), UTC, 0).unwrap();
    assert_eq!(full.add(one("one more", "2026-03-06T09:00:00Z"), now, UTC), Err(TodoError::TooMany));
    // Archived lines.
    let lines = render_archived(&gone, now, chrono_tz::Europe::Berlin);
    assert_eq!(lines.lines().count(), 3);
    let (first, at) = parse_archived(lines.lines().next().unwrap(), chrono_tz::Europe::Berlin).unwrap();
    assert_eq!((first, at.as_str()), (gone[0].clone(), "2026-03-05T13:00:00+01:00"));
    assert!(parse_archived(r#"{"id":9,"text":"torn"#, UTC).is_none(), "a torn line is skipped");
    assert!(parse_archived(r#"{"id":9,"text":"no mark","done":true}"#, UTC).is_none());
}

/// Reading with a tail kept is reading everything and retiring: the same
/// list, the same ids out (in order), the same errors, and the retired
/// ones' archive lines come from the file in a second pass.
#[test]
fn reading_with_a_tail_kept_is_reading_and_retiring() {
    let items = [
        r#"{"id":1,"text":"a","done":true}"#,
        r#"{"id":2,"text":"b","at":"2026-03-06T09:00:00Z"}"#,
        r#"{"id":3,"text":"c","done":true,"x":{"kept":1}}"#,
        r#"{"id":9,"text":"d","done":true}"#,
        r#"{"id":4,"text":"e","at":"2026-03-07T09:00:00Z"}"#,
        r#"{"id":5,"text":"f","done":true}"#,
    ];
    let text = format!("[{}]", items.join(",\n"));
    for keep in [0, 1, 2, 4, 10, usize::MAX] {
        let mut whole = parse_file(&text, UTC, 3).unwrap();
        let gone: Vec<u64> = whole.retire(keep).iter().map(|t| t.id).collect();
        let (kept, out) = parse_file_keeping(&text, UTC, 3, keep).unwrap();
        assert_eq!((&kept, &out), (&whole, &gone), "keep {keep}");
        assert_eq!(kept.high_water, 9, "retired ids count for the high-water mark");
    }
    let (_, out) = parse_file_keeping(&text, UTC, 0, 1).unwrap();
    let mut whole = parse_file(&text, UTC, 0).unwrap();
    let at = t("2026-03-08T00:00:00Z");
    let mut lines = String::new();
    let ids = out.iter().copied().collect();
    archive_from_file(&text, &ids, at, UTC, |l| {
        lines.push_str(l);
        Ok(())
    })
    .unwrap();
    assert_eq!(lines, render_archived(&whole.retire(1), at, UTC));
    // Errors as a whole read gives them: the first item's, before any
    // retiring; the cap on open ones first of all.
    let dup = r#"[{"id":1,"text":"a","done":true},{"id":1,"text":"b","done":true},{"id":2,"text":"c","at":"soon"}]"#;
    assert_eq!(parse_file_keeping(dup, UTC, 0, 0).unwrap_err(), FileError::DuplicateId(1));
    let bad = r#"[{"id":1,"text":"a","done":true},{"id":2,"text":"c","at":"soon"}]"#;
    assert!(matches!(parse_file_keeping(bad, UTC, 0, 0), Err(FileError::Item { index: 1, .. })));
    assert!(matches!(parse_file_keeping(&format!("{bad} ["), UTC, 0, 0), Err(FileError::Json(_))));
    let open: Vec<String> = (1..=MAX_TODOS as u64 + 1).map(|i| format!(r#"{{"id":{i},"text":"t"}}"#)).collect();
    let over = format!(r#"[{{"id":0,"text":"x","at":"soon"}},{}]"#, open.join(","));
    assert_eq!(parse_file_keeping(&over, UTC, 0, 0).unwrap_err(), FileError::TooMany(MAX_TODOS + 2));
}
