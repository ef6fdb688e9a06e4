//! How a session ended, and what cryod writes about it.
//!
//! Invariant 1: every session produces at least one visible outbox message.
//! Invariant 2: every claimed inbox batch is answered. When the agent did not
//! do either, cryod writes a message from `cryochamber`; its texts are here,
//! one for each case, so the operator can tell them apart.

use chrono::{DateTime, Utc};

use crate::hibernate::Ending;

/// Why a session began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trigger {
    /// Ranked for admission: lower runs first.
    Inbox = 0,
    Manual = 1,
    Recovery = 2,
    Bootstrap = 3,
    Scheduled = 4,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Inbox => "inbox",
            Trigger::Manual => "manual",
            Trigger::Recovery => "recovery",
            Trigger::Bootstrap => "bootstrap",
            Trigger::Scheduled => "scheduled",
        }
    }

    pub fn parse(s: &str) -> Option<Trigger> {
        Some(match s {
            "inbox" => Trigger::Inbox,
            "manual" => Trigger::Manual,
            "recovery" => Trigger::Recovery,
            "bootstrap" => Trigger::Bootstrap,
            "scheduled" => Trigger::Scheduled,
            _ => return None,
        })
    }
}

/// How the agent process ended, as the daemon observed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Hibernated (or completed) as asked.
    Hibernated(Ending),
    /// Exited without hibernating, with a failure's status (a non-zero
    /// exit, a signal).
    Crashed(String),
    /// Exited 0 without `cryo-agent hibernate`: the likeliest mistake of a
    /// real model (its protocol says a session ends only so). Its work is
    /// retried, as a crash's is.
    NoHibernate(String),
    /// Exited after its hibernate was refused for mail that arrived during
    /// the session: not a failure. Its claims are done, and the next session
    /// reads the mail at once (no back-off).
    MailArrived(String),
    /// Ran past `max_session_duration` and was killed.
    TimedOut,
    /// An operator stopped it.
    Stopped,
    /// The daemon stopped during the session (found at restart).
    Interrupted,
    /// The provider's limit ended it; it resumes at `until` (`local`: that
    /// time in the chamber's zone, for people).
    Limited { until: DateTime<Utc>, local: String },
    /// It cost more than `max_session_usd` and was stopped; its claims
    /// wait until `until`.
    OverBudget { until: DateTime<Utc>, local: String },
    /// cryod saw it stall or loop and ended it (see [`Caught`]).
    Caught(Caught),
    /// It asked for a person's approval (request `id`: the tool call,
    /// `what`) and the wait in the session passed: the chamber waits for the
    /// answer, and the next session resumes the conversation with it.
    AwaitingApproval { id: String, what: String },
}

/// What cryod saw a running session do that ends it: not a crash (the
/// agent did not fail on its own), but its work did not get done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caught {
    /// No model request and no agent event for `stall_after` (seconds).
    Stalled { idle_secs: u64 },
    /// The same tool call (`call`, as the transcript shows it) `times` in
    /// a row (`loop_after`).
    Looping { call: String, times: u32 },
}

/// Whether an outcome of this kind ([`Outcome::kind`]) is a failure.
pub fn kind_failed(kind: &str) -> bool {
    matches!(kind, "failed" | "crashed" | "no_hibernate" | "timed_out" | "interrupted" | "stalled" | "looping")
}

/// How late a session's agent started after `due`, in whole milliseconds
/// (none is negative: an early start counts as on time).
pub fn lateness_ms(due: DateTime<Utc>, started: DateTime<Utc>) -> i64 {
    (started - due).num_milliseconds().max(0)
}

impl Outcome {
    /// Its kind, one word (a metrics label): `hibernated`, `completed`,
    /// `failed` (hibernated with an exit code), `crashed`, `no_hibernate`,
    /// `mail_arrived`, `timed_out`, `stopped`, `interrupted`, `limited`,
    /// `over_budget`, `stalled`, `looping`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Hibernated(Ending::Hibernate) => "hibernated",
            Outcome::Hibernated(Ending::Complete) => "completed",
            Outcome::Hibernated(Ending::Failure(_)) => "failed",
            Outcome::Crashed(_) => "crashed",
            Outcome::NoHibernate(_) => "no_hibernate",
            Outcome::MailArrived(_) => "mail_arrived",
            Outcome::TimedOut => "timed_out",
            Outcome::Stopped => "stopped",
            Outcome::Interrupted => "interrupted",
            Outcome::Limited { .. } => "limited",
            Outcome::OverBudget { .. } => "over_budget",
            Outcome::Caught(Caught::Stalled { .. }) => "stalled",
            Outcome::Caught(Caught::Looping { .. }) => "looping",
            Outcome::AwaitingApproval { .. } => "awaiting_approval",
        }
    }

    /// Whether the session failed (its claimed TODOs get retries).
    pub fn failed(&self) -> bool {
        kind_failed(self.kind())
    }

    /// The kind of the outcome [`Outcome::describe`] wrote (the ledger keeps
    /// that phrase); `None` for a phrase it never writes.
    pub fn kind_of_described(phrase: &str) -> Option<&'static str> {
        let head = phrase.split(':').next().unwrap_or(phrase);
        Some(match head {
            "hibernated" => "hibernated",
            "completed the plan" => "completed",
            "failed" => "failed",
            "crashed" => "crashed",
            "no hibernate" => "no_hibernate",
            "mail arrived" => "mail_arrived",
            "timed out" => "timed_out",
            "stopped by the operator" => "stopped",
            "interrupted" => "interrupted",
            "limited" => "limited",
            "over budget" => "over_budget",
            "stalled" => "stalled",
            "looping" => "looping",
            "awaiting approval" => "awaiting_approval",
            _ => return None,
        })
    }

    /// What happened, as a verb phrase for message subjects.
    pub fn verb(&self) -> String {
        match self {
            Outcome::Hibernated(Ending::Failure(n)) => format!("failed (exit {n})"),
            Outcome::Crashed(_) => "crashed".into(),
            Outcome::NoHibernate(_) => "ended without hibernating".into(),
            Outcome::MailArrived(_) => "ended as new mail arrived".into(),
            Outcome::TimedOut => "timed out".into(),
            Outcome::Stopped => "was stopped by the operator".into(),
            Outcome::Interrupted => "was interrupted (the daemon stopped)".into(),
            Outcome::Limited { .. } => "hit the provider's limit".into(),
            Outcome::OverBudget { .. } => "went over its budget".into(),
            Outcome::Caught(Caught::Stalled { .. }) => "stalled".into(),
            Outcome::Caught(Caught::Looping { .. }) => "was caught in a loop".into(),
            Outcome::AwaitingApproval { .. } => "waits for a person's approval".into(),
            Outcome::Hibernated(_) => "hibernated".into(),
        }
    }

    /// One short phrase for status tables and logs.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Hibernated(Ending::Hibernate) => "hibernated".into(),
            Outcome::Hibernated(Ending::Complete) => "completed the plan".into(),
            Outcome::Hibernated(Ending::Failure(n)) => format!("failed: exit {n}"),
            Outcome::Crashed(how) => format!("crashed: {how}"),
            Outcome::NoHibernate(how) => {
                format!("no hibernate: the agent ended ({how}) without `cryo-agent hibernate`")
            }
            Outcome::MailArrived(how) => {
                format!("mail arrived: the agent ended ({how}) after its hibernate was refused for new mail")
            }
            Outcome::TimedOut => "timed out".into(),
            Outcome::Stopped => "stopped by the operator".into(),
            Outcome::Interrupted => "interrupted: the daemon stopped".into(),
            Outcome::Limited { local, .. } => format!("limited: the provider's limit was reached; resumes at {local}"),
            Outcome::OverBudget { local, .. } => {
                format!("over budget: stopped at max_session_usd; its TODOs wait until {local}")
            }
            Outcome::Caught(Caught::Stalled { idle_secs }) => {
                format!(
                    "stalled: no model request and no agent event for {}",
                    crate::time::humanize(chrono::Duration::seconds(*idle_secs as i64))
                )
            }
            Outcome::Caught(Caught::Looping { call, times }) => {
                format!("looping: the same call {times} times in a row ({call})")
            }
            Outcome::AwaitingApproval { id, what } => format!("awaiting approval: {id} ({what})"),
        }
    }
}

/// What the session did with the mailbox.
#[derive(Debug, Clone, Copy, Default)]
pub struct Conversation {
    /// A claimed batch is still without its reply.
    pub unanswered_batch: bool,
    /// The agent sent at least one message.
    pub sent_any: bool,
}

/// How a chamber's sessions follow one another (`session` and the
/// `resume_max_*` keys of `cryo.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Continuity {
    /// `session = "resume"`: a session continues the provider conversation
    /// of the one before it, within the caps; else each starts afresh.
    pub resume: bool,
    /// The longest pause after which a conversation is resumed (providers
    /// keep their prompt caches for minutes to hours).
    pub max_age: chrono::Duration,
    /// The most sessions one conversation spans.
    pub max_sessions: u32,
    /// The most tokens one conversation may have used (input, output and
    /// cached, summed over its sessions); `None`: no cap.
    pub max_tokens: Option<u64>,
}

impl Default for Continuity {
    fn default() -> Self {
        Continuity {
            resume: false,
            max_age: DEFAULT_RESUME_MAX_AGE,
            max_sessions: DEFAULT_RESUME_MAX_SESSIONS,
            max_tokens: None,
        }
    }
}

/// `resume_max_age` unless set: a few hours.
pub const DEFAULT_RESUME_MAX_AGE: chrono::Duration = chrono::Duration::hours(3);
/// `resume_max_sessions` unless set.
pub const DEFAULT_RESUME_MAX_SESSIONS: u32 = 10;

/// What a session's agent reported of its provider conversation: its id
/// and the tokens the session used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Used {
    pub conversation: String,
    pub tokens: u64,
}

/// A provider conversation the next session may resume: the last session
/// that spoke in it, how many sessions it spans and what they used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Thread {
    /// The provider's id of the conversation (to resume).
    pub conversation: String,
    /// The session that last spoke in it.
    pub session: u64,
    pub ended_at: DateTime<Utc>,
    /// Sessions in it so far (1: only `session`).
    pub sessions: u32,
    /// Tokens its sessions used, summed.
    pub tokens: u64,
}

impl Outcome {
    /// Whether the conversation of a session that ended so may be resumed:
    /// only after a hibernate (or a completed plan), or a wait for a
    /// person's approval (the next session carries on with the answer). After a crash, a
    /// timeout, a stop, an interruption, a failure, a provider's limit or a
    /// budget's stop the next session starts afresh.
    pub fn resumable(&self) -> bool {
        matches!(self, Outcome::Hibernated(Ending::Hibernate | Ending::Complete) | Outcome::AwaitingApproval { .. })
    }
}

/// The conversation a session that ended with `outcome` leaves for the next
/// one: `resumed` (the thread it continued, if it did) extended by what it
/// `used`, or a new thread of one session; none when it may not be resumed
/// or the agent reported no conversation.
pub fn thread_after(
    number: u64,
    at: DateTime<Utc>,
    outcome: &Outcome,
    resumed: Option<&Thread>,
    used: Option<&Used>,
) -> Option<Thread> {
    let used = used.filter(|u| !u.conversation.is_empty() && outcome.resumable())?;
    let (sessions, tokens) = resumed.map(|t| (t.sessions, t.tokens)).unwrap_or((0, 0));
    Some(Thread {
        conversation: used.conversation.clone(),
        session: number,
        ended_at: at,
        sessions: sessions + 1,
        tokens: tokens.saturating_add(used.tokens),
    })
}

/// Whether the next session resumes `thread`: `Ok` if it does, else why it
/// starts afresh (`None` when there is nothing to say: resuming is off, or
/// there is no conversation to continue).
pub fn resume(c: &Continuity, thread: Option<&Thread>, now: DateTime<Utc>) -> Result<Thread, Option<String>> {
    let Some(t) = thread.filter(|_| c.resume) else { return Err(None) };
    let age = now - t.ended_at;
    if age > c.max_age {
        return Err(Some(format!(
            "the last conversation ended {} ago, more than resume_max_age ({})",
            crate::time::humanize(age),
            crate::time::humanize(c.max_age)
        )));
    }
    if t.sessions >= c.max_sessions {
        return Err(Some(format!(
            "the last conversation spans {} sessions, the most resume_max_sessions allows",
            t.sessions
        )));
    }
    if let Some(max) = c.max_tokens
        && t.tokens >= max
    {
        return Err(Some(format!("the last conversation used {} tokens, over resume_max_tokens ({max})", t.tokens)));
    }
    Ok(t.clone())
}

/// How a budget's attention line begins (a resume clears it).
pub const BUDGET_REACHED: &str = "budget reached";

/// A message cryod writes at the end of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    pub subject: String,
    pub body: String,
    /// It answers the claimed batch.
    pub is_reply: bool,
}

/// The messages cryod owes the operator at the end of a session.
/// `details` (exit, retries, log tail) is appended to failure reports.
pub fn fallbacks(session: u64, outcome: &Outcome, conv: Conversation, details: &str) -> Vec<Fallback> {
    let mut out = Vec::new();
    let details = details.trim();
    let with_details = |s: String| if details.is_empty() { s } else { format!("{s}\n\n{details}") };
    if let Outcome::Limited { local, .. } = outcome {
        // One honest message, always (the session ended without its
        // hibernate): no failure report, no misconfiguration.
        let subject = format!("Session {session}: the provider's limit was reached");
        let body = if conv.unanswered_batch {
            format!("The provider's limit was reached while I worked on your message; I will answer after {local}.")
        } else {
            with_details(format!("Session {session} stopped at the provider's limit; its work resumes after {local}."))
        };
        out.push(Fallback { subject, body, is_reply: conv.unanswered_batch });
        return out;
    }
    if let Outcome::AwaitingApproval { id, what } = outcome {
        if conv.unanswered_batch {
            let subject = format!("Session {session} waits for an approval");
            let body = format!(
                "I need a person's approval ({id}: {what}) before I can go on with your message; I will answer \
                 once it is given."
            );
            out.push(Fallback { subject, body, is_reply: true });
        }
        return out;
    }
    if let Outcome::OverBudget { local, .. } = outcome {
        let subject = format!("Session {session} went over its budget");
        let body = format!(
            "Session {session} cost more than max_session_usd and was stopped{}; its work waits until {local}.",
            if conv.unanswered_batch { " before replying to your message" } else { "" }
        );
        out.push(Fallback { subject, body: with_details(body), is_reply: conv.unanswered_batch });
        return out;
    }
    if outcome.failed() || matches!(outcome, Outcome::Stopped) {
        let what = outcome.verb();
        // cryod's own stop is not the agent's failure: its work runs again.
        let rerun = *outcome == Outcome::Interrupted;
        let (subject, mut body) = if conv.unanswered_batch {
            let again = if rerun { "" } else { ", and will be picked up again when the chamber wakes" };
            (
                format!("Session {session} {what} before replying"),
                format!("Session {session} {what} before replying to your message. It was received{again}."),
            )
        } else if !conv.sent_any {
            (
                format!("Session {session} {what} before sending anything"),
                format!("Session {session} {what} before sending anything."),
            )
        } else {
            (
                format!("Session {session} {what}"),
                format!("Session {session} {what} after sending its messages ({}).", outcome.describe()),
            )
        };
        if rerun {
            body.push_str(" cryo runs its work again, once, as soon as cryod is running (no back-off: this was not the agent's failure).");
        }
        out.push(Fallback { subject, body: with_details(body), is_reply: conv.unanswered_batch });
        return out;
    }
    if let Outcome::MailArrived(_) = outcome {
        // Not a failure: the next session, at once, reads the new mail.
        if conv.unanswered_batch || !conv.sent_any {
            let subject = format!("Session {session} ended as new mail arrived");
            let body = format!(
                "Session {session} ended {} as new mail arrived; the next session reads it now.",
                if conv.unanswered_batch { "before replying to your message" } else { "without sending anything" }
            );
            out.push(Fallback { subject, body: with_details(body), is_reply: conv.unanswered_batch });
        }
        return out;
    }
    if conv.unanswered_batch {
        out.push(Fallback {
            subject: format!("Session {session} hibernated without replying"),
            body: format!(
                "The agent received your message in session {session} but hibernated without replying. \
                 It has the message; write again to wake it."
            ),
            is_reply: true,
        });
    } else if !conv.sent_any {
        out.push(Fallback {
            subject: format!("Session {session} hibernated without sending anything"),
            body: with_details(format!("Session {session} {} without sending a message.", outcome.describe())),
            is_reply: false,
        });
    }
    out
}

/// The last `lines` non-empty lines of an agent log, with terminal escape
/// sequences removed and the whole capped at `max_chars`.
pub fn log_tail(log: &str, lines: usize, max_chars: usize) -> String {
    let clean = strip_ansi(log);
    let mut tail: Vec<&str> =
        clean.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).rev().take(lines).collect();
    tail.reverse();
    let mut s = tail.join("\n");
    if s.chars().count() > max_chars {
        let skip = s.chars().count() - max_chars;
        s = format!("…{}", s.chars().skip(skip + 1).collect::<String>());
    }
    s
}

/// Removes ANSI escape sequences (CSI, OSC) and other control characters but
/// newlines and tabs.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            match chars.peek() {
                Some('[') => {
                    chars.next();
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    chars.next();
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' || (c == '\u{1b}' && chars.peek() == Some(&'\\')) {
                            if c == '\u{1b}' {
                                chars.next();
                            }
                            break;
                        }
                    }
                }
                _ => {
                    chars.next();
                }
            }
        } else if c == '\r' {
            continue;
        } else if !c.is_control() || c == '\n' || c == '\t' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_described_outcome_gives_back_its_kind() {
        let at = DateTime::<Utc>::from_timestamp(0, 0).unwrap();
        let all = [
            (Outcome::Hibernated(Ending::Hibernate), false),
            (Outcome::Hibernated(Ending::Complete), false),
            (Outcome::Hibernated(Ending::Failure(2)), true),
            (Outcome::Crashed("exit 3".into()), true),
            (Outcome::TimedOut, true),
            (Outcome::Stopped, false),
            (Outcome::Interrupted, true),
            (Outcome::Limited { until: at, local: "14:00".into() }, false),
            (Outcome::OverBudget { until: at, local: "tomorrow".into() }, false),
            (Outcome::Caught(Caught::Stalled { idle_secs: 1500 }), true),
            (Outcome::Caught(Caught::Looping { call: "Bash: ls".into(), times: 8 }), true),
        ];
        for (o, failed) in all {
            assert_eq!(Outcome::kind_of_described(&o.describe()), Some(o.kind()), "{o:?}");
            assert_eq!(o.failed(), failed, "{o:?}");
        }
        assert_eq!(Outcome::kind_of_described("something else"), None);
    }

    fn conv(unanswered_batch: bool, sent_any: bool) -> Conversation {
        Conversation { unanswered_batch, sent_any }
    }

    #[test]
    fn the_four_texts_are_distinct() {
        let ok = Outcome::Hibernated(Ending::Hibernate);
        let crash = Outcome::Crashed("exit 1".into());
        let a = fallbacks(3, &ok, conv(true, false), "");
        let b = fallbacks(3, &crash, conv(true, false), "tail");
        let c = fallbacks(3, &ok, conv(false, false), "");
        let d = fallbacks(3, &crash, conv(false, false), "tail");
        assert!(a[0].subject.contains("hibernated without replying") && a[0].is_reply);
        assert!(b[0].subject.contains("crashed before replying") && b[0].is_reply, "{b:?}");
        assert!(b[0].body.contains("tail"));
        assert!(c[0].subject.contains("hibernated without sending anything") && !c[0].is_reply);
        assert!(d[0].subject.contains("crashed before sending anything"), "{d:?}");
        let subjects: std::collections::HashSet<_> = [&a, &b, &c, &d].iter().map(|f| f[0].subject.clone()).collect();
        assert_eq!(subjects.len(), 4);
    }

    #[test]
    fn no_fallback_when_the_agent_spoke() {
        let ok = Outcome::Hibernated(Ending::Hibernate);
        assert!(fallbacks(1, &ok, conv(false, true), "").is_empty());
        // A failure is always reported, even after the agent spoke.
        let f = fallbacks(1, &Outcome::TimedOut, conv(false, true), "");
        assert_eq!(f.len(), 1);
        assert!(f[0].subject.contains("timed out"));
    }

    #[test]
    fn tails_are_clean_and_capped() {
        let log = "first\n\x1b[31mred\x1b[0m line\n\n\x1b]0;title\x07second\r\n   \nthird\n";
        assert_eq!(log_tail(log, 2, 100), "second\nthird");
        assert_eq!(log_tail(log, 10, 100), "first\nred line\nsecond\nthird");
        let capped = log_tail(&"x".repeat(50), 1, 10);
        assert_eq!(capped.chars().count(), 10);
        assert!(capped.starts_with('…'));
    }
}
