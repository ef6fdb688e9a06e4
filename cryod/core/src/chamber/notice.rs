//! Events worth a person's attention, decided here once (never from what
//! an agent writes): the shell hands each to the notifiers configured in
//! `cryod.toml`. Each has a stable id (chamber, kind, key), so a notifier
//! delivers it once however often the shell sees it.

use chrono::Duration;

use super::silence::Over;
use super::{Chamber, Effect, Timer, first_line};
use crate::session::{self, Outcome};

/// The kinds of events, as `[[notify]] events = [...]` names them.
pub const KINDS: &[&str] =
    &["question", "approval", "failed", "attention", "limited", "budget", "silent", "completed", "daemon"];

/// The longest body an event carries.
const BODY_CHARS: usize = 1000;

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// One of [`KINDS`].
    pub kind: &'static str,
    /// `chamber:kind:key`: the same event has the same id.
    pub id: String,
    /// One line.
    pub title: String,
    /// A few lines at most.
    pub body: String,
}

fn cut(s: &str) -> String {
    let mut out: String = s.trim().chars().take(BODY_CHARS).collect();
    if s.trim().chars().count() > BODY_CHARS {
        out.push('…');
    }
    out
}

impl Chamber {
    pub(super) fn notice(&mut self, kind: &'static str, key: &str, title: String, body: &str) {
        let id = format!("{}:{kind}:{key}", self.name);
        self.emit(Effect::Notify(Notice { kind, id, title, body: cut(body) }));
    }

    /// What changed in an input that a person should hear of: a new
    /// attention line, a fault.
    pub(super) fn notice_changes(&mut self, attention: Option<String>, fault: Option<String>) {
        // A wait for an approval was told when it was asked (the
        // `approval` event, with its links).
        let told = |a: &&str| a.starts_with(crate::approvals::request::AWAITING_APPROVAL);
        if let Some(a) =
            self.health.attention().filter(|a| Some(*a) != attention.as_deref() && !told(a)).map(str::to_string)
        {
            self.raised += 1;
            let key = format!("{}-{}", self.now.timestamp_millis(), self.raised);
            // A budget's pause is the `budget` event.
            let kind = if a.starts_with(session::BUDGET_REACHED) { "budget" } else { "attention" };
            self.notice(kind, &key, format!("{} needs you: {}", self.name, first_line(&a)), &a);
        }
        if let Some(f) = self.fault().filter(|f| Some(f) != fault.as_ref()) {
            self.raised += 1;
            let key = format!("fault-{}-{}", self.now.timestamp_millis(), self.raised);
            self.notice("daemon", &key, format!("{} is faulted", self.name), &f);
        }
    }

    /// A session ended so: failed, limited or completed are worth a notice.
    pub(super) fn notice_end(&mut self, number: u64, outcome: &Outcome, details: &str) {
        let key = format!("session-{number}");
        let (kind, title) = match outcome {
            o if o.failed() => ("failed", format!("{}: session {number} {}", self.name, o.describe())),
            Outcome::Limited { local, .. } => {
                ("limited", format!("{}: the provider's limit was reached; it waits until {local}", self.name))
            }
            Outcome::Hibernated(crate::hibernate::Ending::Complete) => {
                ("completed", format!("{}: the plan is complete (session {number})", self.name))
            }
            _ => return,
        };
        self.notice(kind, &key, title, details);
    }

    // ---- the dead man's switch ---------------------------------------------

    /// `expect_activity_within`, if set.
    fn silence_window(&self) -> Option<Duration> {
        self.files.settings().and_then(|c| c.expect_activity_within)
    }

    /// A visible message was written: the silence starts again.
    pub(super) fn heard(&mut self) {
        self.silence.heard(self.now);
        self.arm_silence();
    }

    /// Arms the one silence timer, unless one is armed (it re-arms itself
    /// for what is left when it fires early).
    pub(super) fn arm_silence(&mut self) {
        let Some(window) = self.silence_window() else { return };
        if let Some(after) = self.silence.arm(window, self.now) {
            self.arm(Timer::Silence, after);
        }
    }

    /// The silence timer fired: `silent` once, if the chamber is started
    /// (not paused) and nothing visible came for the whole window.
    pub(super) fn silence_over(&mut self) {
        let (since, window) = match self.silence.over(self.silence_window(), self.now, self.wishes.wakes()) {
            Over::Quiet => return,
            Over::Early => return self.arm_silence(),
            Over::Silent { since, window } => (since, window),
        };
        let quiet = crate::time::humanize(self.now - since);
        let body = format!(
            "No message from {} for {quiet} (expect_activity_within = {}), though it is started. Check `cryoctl chamber status {}` and its log.",
            self.name,
            crate::time::format_duration(window),
            self.name
        );
        self.log(format!("silent for {quiet}: no visible message (expect_activity_within)"));
        self.notice(
            "silent",
            &since.timestamp().to_string(),
            format!("{} has been silent for {quiet}", self.name),
            &body,
        );
    }
}
