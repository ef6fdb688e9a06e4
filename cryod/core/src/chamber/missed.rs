//! Why a slot did not run on time. The machine keeps the recent spans in
//! which it could not wake its agent (cryod not running, the chamber
//! stopped or paused, the machine asleep, a session running, a provider's
//! limit); a slot that runs more than [`SKIP_GRACE`] late, several slots
//! run as one, and slots a `skip` series passes by are written to the
//! ledger as `missed`, with the span that explains them.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};

use super::{Chamber, Effect, Passed, SKIP_GRACE};
use crate::todo::Claim;

/// Spans kept: enough for the slots of the last days, bounded.
const KEPT: usize = 64;

/// Why the chamber could not wake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Why {
    /// Before this cryod started (at `since`).
    Down {
        since: DateTime<Utc>,
    },
    Stopped,
    Paused,
    Asleep,
    /// This session was running.
    Busy(u64),
    /// The provider's limit held wakes until `local`.
    Limited(String),
}

#[derive(Debug, Clone)]
struct Span {
    from: DateTime<Utc>,
    to: Option<DateTime<Utc>>,
    why: Why,
}

/// The spans, oldest first.
#[derive(Debug, Clone, Default)]
pub(super) struct Spans {
    list: VecDeque<Span>,
}

impl Spans {
    pub(super) fn open(&mut self, from: DateTime<Utc>, why: Why) {
        if self.list.iter().any(|s| s.to.is_none() && s.why == why) {
            return;
        }
        self.push(Span { from, to: None, why });
    }

    /// Closes the open span of this kind (`Busy` of any session).
    pub(super) fn close(&mut self, at: DateTime<Utc>, why: &Why) {
        let same = |s: &Span| match (&s.why, why) {
            (Why::Busy(_), Why::Busy(_)) => true,
            (a, b) => a == b,
        };
        for s in self.list.iter_mut().filter(|s| s.to.is_none() && same(s)) {
            s.to = Some(at);
        }
    }

    pub(super) fn span(&mut self, from: DateTime<Utc>, to: DateTime<Utc>, why: Why) {
        self.push(Span { from, to: Some(to), why });
    }

    fn push(&mut self, s: Span) {
        if self.list.len() == KEPT {
            self.list.pop_front();
        }
        // Most chambers only ever hold the span of cryod's own start: room
        // for one, not the four a first push makes (a resting chamber's
        // 185 bytes at 10,000 chambers).
        if self.list.capacity() == 0 {
            self.list.reserve_exact(1);
        }
        self.list.push_back(s);
    }

    /// The newest span that holds `t`.
    fn at(&self, t: DateTime<Utc>) -> Option<&Why> {
        self.list.iter().rev().find(|s| s.from <= t && s.to.is_none_or(|to| t < to)).map(|s| &s.why)
    }
}

impl Chamber {
    /// Why a slot due at `due` did not run then, in words.
    pub(super) fn why_late(&self, due: DateTime<Utc>) -> String {
        let tz = self.tz();
        match self.spans.at(due) {
            Some(Why::Down { since }) => {
                format!("cryod was not running (it started at {})", crate::time::format_in(*since, tz))
            }
            Some(Why::Stopped) => "the chamber was stopped".into(),
            Some(Why::Paused) => "the chamber was paused".into(),
            Some(Why::Asleep) => "the machine was asleep".into(),
            Some(Why::Busy(n)) => format!("session {n} was running"),
            Some(Why::Limited(local)) => format!("the provider's limit held its wakes until {local}"),
            None if self.waking.wanted().is_some_and(|(_, since)| since <= due + SKIP_GRACE) => {
                "it waited for a free session slot (max_concurrent_sessions)".into()
            }
            None => "it was late".into(),
        }
    }

    /// The claims of session `number`, started now: the slots among them
    /// that did not run on time, for the ledger and `cryo.log`.
    pub(super) fn missed_in(&mut self, number: u64, claims: &[Claim]) {
        let (now, tz) = (self.now, self.tz());
        let local = |t: DateTime<Utc>| crate::time::format_in(t, tz);
        let late = |due: DateTime<Utc>| crate::time::humanize(now - due);
        let mut rows = Vec::new();
        for c in claims {
            let mut row = |due: DateTime<Utc>, reason: String| {
                rows.push(Passed { due, todo: c.id, text: c.text.clone(), what: "missed", reason })
            };
            if let Some((n, first)) = c.skipped {
                row(
                    first,
                    format!("{n} slot(s) from {} skipped (missed = \"skip\"): {}", local(first), self.why_late(first)),
                );
            }
            if c.slots > 1 {
                let why = self.why_late(c.due);
                row(
                    c.due,
                    format!(
                        "{} slots from {} ran as one in session {number}, {} late: {why}",
                        c.slots,
                        local(c.due),
                        late(c.due)
                    ),
                );
            } else if now - c.due > SKIP_GRACE {
                row(c.due, format!("ran {} late in session {number}: {}", late(c.due), self.why_late(c.due)));
            }
        }
        self.record_missed(rows);
    }

    /// `skip` series moved on without a run.
    pub(super) fn skipped(&mut self, moved: &[Claim]) {
        let tz = self.tz();
        let rows = moved
            .iter()
            .map(|c| Passed {
                due: c.due,
                todo: c.id,
                text: c.text.clone(),
                what: "missed",
                reason: format!(
                    "{} slot(s) from {} skipped (missed = \"skip\"): {}",
                    c.slots,
                    crate::time::format_in(c.due, tz),
                    self.why_late(c.due)
                ),
            })
            .collect();
        self.record_missed(rows);
    }

    fn record_missed(&mut self, rows: Vec<Passed>) {
        if rows.is_empty() {
            return;
        }
        for r in &rows {
            self.log(format!("TODO {} missed its slot: {}", r.todo, r.reason));
        }
        self.emit(Effect::RecordPassed(rows));
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeZone, Utc};

    use super::{KEPT, Spans, Why};

    #[test]
    fn the_newest_span_that_holds_a_time_explains_it() {
        let t = |h: u32| Utc.with_ymd_and_hms(2026, 11, 23, h, 0, 0).unwrap();
        let mut s = Spans::default();
        s.span(DateTime::<Utc>::MIN_UTC, t(8), Why::Down { since: t(8) });
        s.open(t(9), Why::Paused);
        s.open(t(10), Why::Busy(3));
        s.close(t(11), &Why::Busy(0));
        assert_eq!(s.at(t(7)), Some(&Why::Down { since: t(8) }));
        assert_eq!(s.at(t(9)), Some(&Why::Paused));
        assert_eq!(s.at(t(10)), Some(&Why::Busy(3)));
        assert_eq!(s.at(t(12)), Some(&Why::Paused), "still paused");
        s.close(t(13), &Why::Paused);
        assert_eq!(s.at(t(14)), None);
        for h in 0..100 {
            s.span(t(0), t(1), Why::Asleep);
            let _ = h;
        }
        assert_eq!(s.list.len(), KEPT);
    }
}
