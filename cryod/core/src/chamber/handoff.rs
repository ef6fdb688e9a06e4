//! Chaining: `[[on_end]]` hands a session's end to another chamber as a
//! message in its inbox (which wakes it). The rules are here: which ends
//! match, what the message says, and how often one link may carry a
//! hand-off (a loop A → B → A is allowed, at most `max_per_hour` times an
//! hour per link; past that one hand-off waits for the window, and a newer
//! end replaces it).

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Utc};

use super::{Chamber, Effect, Failed, Timer};
use crate::hibernate::Ending;
use crate::session::Outcome;

/// `max_per_hour` unless an `[[on_end]]` table says otherwise.
pub const DEFAULT_HANDOFFS_PER_HOUR: u32 = 6;
/// The window the rate limit counts in.
const WINDOW: Duration = Duration::hours(1);
/// The placeholders a `message` template may use.
pub const PLACEHOLDERS: &[&str] = &["chamber", "session", "outcome", "summary"];
/// The message when the table gives none.
pub const DEFAULT_MESSAGE: &str = "Session {session} of {chamber} ended: {outcome}.\n\n{summary}";

/// Which ends of a session an `[[on_end]]` table hands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// The agent completed its plan.
    Completed,
    /// The agent hibernated with more to do.
    Hibernated,
    /// The session failed: crashed, timed out, an exit code, interrupted.
    Failed,
    /// Every end, also a stop, a provider's limit, a budget.
    Any,
}

impl When {
    pub fn parse(s: &str) -> Option<When> {
        Some(match s {
            "completed" => When::Completed,
            "hibernated" => When::Hibernated,
            "failed" => When::Failed,
            "any" => When::Any,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            When::Completed => "completed",
            When::Hibernated => "hibernated",
            When::Failed => "failed",
            When::Any => "any",
        }
    }

    pub fn matches(self, outcome: &Outcome) -> bool {
        match self {
            When::Completed => *outcome == Outcome::Hibernated(Ending::Complete),
            When::Hibernated => *outcome == Outcome::Hibernated(Ending::Hibernate),
            When::Failed => outcome.failed(),
            When::Any => true,
        }
    }
}

/// One `[[on_end]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnEnd {
    /// The chamber to hand on to (its registered name).
    pub chamber: String,
    pub when: When,
    /// The message template ([`PLACEHOLDERS`]); none: [`DEFAULT_MESSAGE`].
    pub message: Option<String>,
    pub max_per_hour: u32,
}

/// A hand-off for the shell to deliver: a message from this chamber into
/// `to`'s inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandOff {
    pub to: String,
    /// The session whose end it hands on.
    pub session: u64,
    pub subject: String,
    pub body: String,
}

/// What delivering a hand-off did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedOff {
    /// The message's file in the other chamber.
    pub file: String,
    /// The other chamber will not read it at once: when it will.
    pub waits: Option<String>,
    /// The link closes a loop of hand-offs (its chambers, in order).
    pub looped: Option<Vec<String>>,
}

/// The first placeholder of `template` that is not one of [`PLACEHOLDERS`]
/// (a typo would otherwise go out verbatim).
pub fn unknown_placeholder(template: &str) -> Option<String> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        let name = &after[..close];
        let word = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if word && !PLACEHOLDERS.contains(&name) {
            return Some(name.to_string());
        }
        rest = &after[close + 1..];
    }
    None
}

/// `template` with its placeholders filled in.
fn render(template: &str, chamber: &str, session: u64, outcome: &Outcome, summary: &str) -> String {
    let summary = if summary.is_empty() { "(the agent left no summary)" } else { summary };
    template
        .replace("{chamber}", chamber)
        .replace("{session}", &session.to_string())
        .replace("{outcome}", &outcome.describe())
        .replace("{summary}", summary)
}

/// A hand-off delivered: to which chamber, the session, when.
pub type Delivered = (String, u64, DateTime<Utc>);

/// What the machine keeps of its hand-offs.
#[derive(Debug, Clone, Default)]
pub(super) struct HandOffs {
    /// When each link carried hand-offs (within the window).
    sent: Vec<(String, DateTime<Utc>)>,
    /// At most one per link: a hand-off over its link's rate, and the limit.
    held: Vec<(HandOff, u32)>,
    /// The last hand-off delivered.
    last: Option<Delivered>,
    /// The last loop a hand-off closed.
    looped: Option<Vec<String>>,
    /// When the armed timer fires (one timer, not one per hand-off).
    armed: Option<DateTime<Utc>>,
}

impl HandOffs {
    /// As a start finds them: the last hand-off and loop the store kept.
    pub(super) fn kept(last: Option<Delivered>, looped: Option<Vec<String>>) -> HandOffs {
        HandOffs { last, looped, ..HandOffs::default() }
    }

    /// What the hand-off line shows, for the store.
    pub(super) fn shown(&self) -> (Option<Delivered>, Option<Vec<String>>) {
        (self.last.clone(), self.looped.clone())
    }

    /// Nothing held, and nothing sent within its link's window at `now`:
    /// what a new machine would have, but for what the store keeps.
    pub(super) fn is_idle(&self, now: DateTime<Utc>) -> bool {
        self.held.is_empty() && self.armed.is_none() && self.sent.iter().all(|(_, at)| now - *at >= WINDOW)
    }

    /// When the link to `to` may carry its next hand-off (none: now).
    fn free_at(&self, to: &str, limit: u32, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let recent = self.sent.iter().filter(|(t, at)| t == to && now - *at < WINDOW).map(|(_, at)| *at);
        let (count, oldest) = recent
            .fold((0u32, None), |(n, o): (u32, Option<DateTime<Utc>>), at| (n + 1, Some(o.map_or(at, |o| o.min(at)))));
        (count >= limit).then(|| oldest.unwrap_or(now) + WINDOW)
    }
}

impl Chamber {
    fn on_end(&self) -> &[OnEnd] {
        self.files.settings().map_or(&[], |c| c.on_end.as_slice())
    }

    /// A session ended so: hands it on where `[[on_end]]` says, now, or
    /// once its link's rate allows (a newer end replaces one waiting: the
    /// other chamber hears of the latest; the log keeps the rest).
    pub(super) fn hand_off_after(&mut self, number: u64, outcome: &Outcome, summary: &str) {
        let now = self.now;
        self.handoffs.sent.retain(|(_, at)| now - *at < WINDOW);
        let matching: Vec<OnEnd> = self.on_end().iter().filter(|o| o.when.matches(outcome)).cloned().collect();
        for o in matching {
            let h = HandOff {
                to: o.chamber.clone(),
                session: number,
                subject: format!("{}: session {number} {}", self.name, outcome.describe()),
                body: render(o.message.as_deref().unwrap_or(DEFAULT_MESSAGE), &self.name, number, outcome, summary),
            };
            if let Some((old, _)) = self.handoffs.held.iter_mut().find(|(w, _)| w.to == h.to) {
                let replaced = std::mem::replace(old, h);
                self.log(format!(
                    "hand-off of session {} to {} dropped: session {number}'s end replaces it while the link waits",
                    replaced.session, replaced.to
                ));
                continue;
            }
            match self.handoffs.free_at(&h.to, o.max_per_hour, now) {
                None => self.send_handoff(h),
                Some(at) => {
                    self.log(format!(
                        "hand-off of session {number} to {} waits until {}: {} an hour is this link's limit (max_per_hour)",
                        h.to,
                        crate::time::format_in(at, self.tz()),
                        o.max_per_hour
                    ));
                    self.handoffs.held.push((h, o.max_per_hour));
                    self.arm_handoffs(at);
                }
            }
        }
    }

    fn send_handoff(&mut self, h: HandOff) {
        self.handoffs.sent.push((h.to.clone(), self.now));
        self.emit(Effect::HandOff(h));
    }

    fn arm_handoffs(&mut self, at: DateTime<Utc>) {
        if self.handoffs.armed.is_none_or(|a| at < a) {
            self.handoffs.armed = Some(at);
            self.arm(Timer::HandOffs, (at - self.now).to_std().unwrap_or_default());
        }
    }

    /// The timer: sends each waiting hand-off whose link has room now, and
    /// arms the timer for the rest.
    pub(super) fn release_handoffs(&mut self) {
        let now = self.now;
        if self.handoffs.armed.is_some_and(|a| a <= now) {
            self.handoffs.armed = None;
        }
        self.handoffs.sent.retain(|(_, at)| now - *at < WINDOW);
        for (h, limit) in std::mem::take(&mut self.handoffs.held) {
            match self.handoffs.free_at(&h.to, limit, now) {
                None => self.send_handoff(h),
                Some(at) => {
                    self.handoffs.held.push((h, limit));
                    self.arm_handoffs(at);
                }
            }
        }
    }

    /// The shell delivered (or could not deliver) a hand-off.
    pub(super) fn handed_off(&mut self, to: String, session: u64, result: Result<HandedOff, Failed>) {
        match result {
            Ok(done) => {
                let waits = done.waits.map(|w| format!("; {w}")).unwrap_or_default();
                self.log(format!("handed session {session} on to {to} ({}){waits}", done.file));
                if let Some(path) = done.looped {
                    self.log(format!("a loop of hand-offs: {} (each link at most its max_per_hour)", path.join(" → ")));
                    self.handoffs.looped = Some(path);
                }
                self.handoffs.last = Some((to, session, self.now));
            }
            Err(e) => {
                let m = format!("[[on_end]] could not hand session {session} on to {to}: {e}");
                self.log(m.clone());
                self.health.needs(m);
            }
        }
        self.emit(Effect::Publish);
    }

    /// Hand-offs still held when the chamber's machine ends are lost: said.
    pub(super) fn drop_handoffs(&mut self) {
        for (h, _) in std::mem::take(&mut self.handoffs.held) {
            self.log(format!("hand-off of session {} to {} dropped: cryod stopped while it waited", h.session, h.to));
        }
    }

    /// One line for status views: the links, the last hand-off, what waits,
    /// a loop; none without `[[on_end]]`.
    pub(super) fn handoff_line(&self) -> Option<String> {
        let links = self.on_end();
        if links.is_empty() {
            return None;
        }
        let tz = self.tz();
        let mut parts = vec![
            links.iter().map(|o| format!("→ {} when {}", o.chamber, o.when.as_str())).collect::<Vec<_>>().join(", "),
        ];
        if let Some((to, session, at)) = &self.handoffs.last {
            parts.push(format!("last: session {session} → {to} at {}", crate::time::format_in(*at, tz)));
        }
        if !self.handoffs.held.is_empty() {
            parts.push(format!("{} waiting for the rate limit", self.handoffs.held.len()));
        }
        if let Some(path) = &self.handoffs.looped {
            parts.push(format!("loop: {}", path.join(" → ")));
        }
        Some(parts.join("; "))
    }
}

/// The loop a hand-off from `from` to `to` closes, if the links (`links`:
/// a chamber's `[[on_end]]` targets) lead from `to` back to `from`: the
/// chambers in order, `from` first and last.
pub fn loop_through(from: &str, to: &str, links: &dyn Fn(&str) -> Vec<String>) -> Option<Vec<String>> {
    // Breadth first, so the shortest loop is named.
    let mut seen = std::collections::HashSet::from([to.to_string()]);
    let mut queue = VecDeque::from([vec![from.to_string(), to.to_string()]]);
    while let Some(path) = queue.pop_front() {
        let last = path.last().expect("never empty").clone();
        if last == from && path.len() > 1 {
            return Some(path);
        }
        for next in links(&last) {
            if next == from {
                let mut p = path.clone();
                p.push(next);
                return Some(p);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next);
                queue.push_back(p);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{Ending, Outcome, When, loop_through, render, unknown_placeholder};

    #[test]
    fn ends_match_their_when() {
        let done = Outcome::Hibernated(Ending::Complete);
        let slept = Outcome::Hibernated(Ending::Hibernate);
        let crashed = Outcome::Crashed("exit 1".into());
        assert!(When::Completed.matches(&done) && !When::Completed.matches(&slept));
        assert!(When::Hibernated.matches(&slept) && !When::Hibernated.matches(&done));
        assert!(When::Failed.matches(&crashed) && !When::Failed.matches(&Outcome::Stopped));
        assert!([done, slept, crashed, Outcome::Stopped].iter().all(|o| When::Any.matches(o)));
        assert_eq!(When::parse("sometimes"), None);
    }

    #[test]
    fn templates_fill_and_typos_are_found() {
        let body = render("{chamber} #{session}: {outcome} / {summary}", "alpha", 7, &Outcome::TimedOut, "");
        assert_eq!(body, "alpha #7: timed out / (the agent left no summary)");
        assert_eq!(unknown_placeholder("{chamber} {sumary}"), Some("sumary".into()));
        assert_eq!(unknown_placeholder("json: {\"a\": 1} {session}"), None);
    }

    #[test]
    fn loops_are_found_shortest_first() {
        let links = |c: &str| -> Vec<String> {
            match c {
                "a" => vec!["b".into()],
                "b" => vec!["c".into(), "a".into()],
                "c" => vec!["a".into()],
                _ => vec![],
            }
        };
        assert_eq!(loop_through("a", "b", &links), Some(vec!["a".into(), "b".into(), "a".into()]));
        assert_eq!(loop_through("a", "a", &links), Some(vec!["a".into(), "a".into()]));
        assert_eq!(loop_through("c", "d", &links), None);
        assert_eq!(loop_through("x", "c", &links), None);
    }
}
