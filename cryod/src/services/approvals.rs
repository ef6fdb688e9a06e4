//! Approval requests while they wait: the sessions waiting in place for an
//! answer (a short wait, `approval_wait`), the lines people and agents read
//! of a request and of its answer, and the signed links that answer one
//! from a notice.
//!
//! The request itself is the store's ([`crate::store::ApprovalRecord`]):
//! it outlives cryod. What waits here is only the in-session wait; past it,
//! the session ends as `awaiting approval` (the chamber's machine,
//! `cryo_core::chamber::approval`) and the answer reaches the chamber's
//! supervisor instead.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::store::ApprovalRecord;

/// A person's answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub approve: bool,
    /// Who, what and when, in one line (the log, the agent).
    pub line: String,
}

/// One ask waiting: its ticket, and where its answer goes.
type Wait = (u64, oneshot::Sender<Decision>);

/// The in-session waits, by request id: each ask of a request waiting in
/// place (the same call asked twice at once waits twice), each with a
/// ticket of its own.
#[derive(Default)]
pub struct Waiting {
    waits: Mutex<HashMap<String, Vec<Wait>>>,
    next: std::sync::atomic::AtomicU64,
}

impl Waiting {
    /// An ask waits for request `id`: its ticket, and where the answer comes.
    pub fn wait(&self, id: &str) -> (u64, oneshot::Receiver<Decision>) {
        let (tx, rx) = oneshot::channel();
        let ticket = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.waits.lock().expect("the waits' lock").entry(id.to_string()).or_default().push((ticket, tx));
        (ticket, rx)
    }

    /// Hands the answer to every ask waiting for it; false when none
    /// waits any more (the session was parked, or cryod started since).
    pub fn answer(&self, id: &str, decision: Decision) -> bool {
        let waiting = self.waits.lock().expect("the waits' lock").remove(id).unwrap_or_default();
        let mut any = false;
        for (_, tx) in waiting {
            any |= tx.send(decision.clone()).is_ok();
        }
        any
    }

    /// Every ask of request `id` stops waiting without its answer (each is
    /// told its session parks): the answer is the chamber's, not theirs.
    pub fn dismiss(&self, id: &str) {
        let dropped = self.waits.lock().expect("the waits' lock").remove(id);
        drop(dropped);
    }

    /// One ask stopped waiting (its wait passed); the others wait on.
    pub fn forget(&self, id: &str, ticket: u64) {
        let mut waits = self.waits.lock().expect("the waits' lock");
        if let Some(list) = waits.get_mut(id) {
            list.retain(|(t, _)| *t != ticket);
            if list.is_empty() {
                waits.remove(id);
            }
        }
    }
}

/// A new request's id: `a` and 10 hex digits.
pub fn new_id() -> String {
    format!("a{}", &crate::base::random::hex(5))
}

/// What a request asks, in one line: `Bash: git push origin main`.
pub fn what(a: &ApprovalRecord) -> String {
    what_of(&a.tool, &a.subject)
}

pub use cryo_core::approvals::request::{ANSWER_KEPT, what_of};

/// The longest subject a notice shows whole (and offers its one-tap
/// answers for).
pub const NOTICE_SUBJECT: usize = 400;

/// A notice's body: what is asked (whole, lines kept, or cut with a word
/// that it was: then the notice carries no one-tap answer), why, and how
/// to answer.
pub fn notice_body(a: &ApprovalRecord) -> String {
    let shown: String = a.subject.chars().take(NOTICE_SUBJECT).collect();
    let cut = if shown.len() < a.subject.len() { "\n(cut: read it whole on the hub before you answer)" } else { "" };
    let mut body = format!("{}:\n{shown}{cut}\n\nAsked by session {} ({}).", a.tool, a.session, a.rule);
    if !a.reason.is_empty() {
        body.push_str(&format!("\nThe agent says: {}", a.reason));
    }
    body.push_str(&format!(
        "\n\nAnswer with `cryoctl approvals approve {}` or `cryoctl approvals deny {} --reason TEXT`.",
        a.id, a.id
    ));
    body
}

/// The line of a decided request: for `cryo.log`, the transcript and the
/// next session's prompt.
pub fn decided_line(a: &ApprovalRecord) -> String {
    let by = a.decided_by.as_deref().unwrap_or("?");
    let at = a.decided_at.map(crate::base::clock::rfc3339_ms);
    let at = at.as_deref().unwrap_or("?");
    match (a.state.as_str(), a.answer.as_deref().filter(|r| !r.is_empty())) {
        ("approved", _) => format!(
            "Approval {} was given by {by} at {at}: {}. Run exactly that call again and carry on.",
            a.id,
            what(a)
        ),
        (_, Some(reason)) => {
            format!("Approval {} was refused by {by} at {at}: {}. Their reason: {reason}", a.id, what(a))
        }
        _ => format!("Approval {} was refused by {by} at {at}: {}.", a.id, what(a)),
    }
}

/// What the agent's CLI is told when a person refused its call.
pub fn refused_message(a: &ApprovalRecord) -> String {
    match a.answer.as_deref().filter(|r| !r.is_empty()) {
        Some(reason) => format!(
            "A person refused this call (approval {}, by {}): {reason}. Do not try it again; find another way or \
             say why you cannot.",
            a.id,
            a.decided_by.as_deref().unwrap_or("?")
        ),
        None => format!(
            "A person refused this call (approval {}, by {}). Do not try it again; find another way or say why \
             you cannot.",
            a.id,
            a.decided_by.as_deref().unwrap_or("?")
        ),
    }
}

/// What the agent's CLI is told when its call waits past `approval_wait`.
pub fn parked_message(id: &str) -> String {
    format!(
        "This call needs a person's approval (request {id}), which has not come yet. Stop here: end your turn now \
         without trying anything else. cryo ends this session and resumes this conversation when the person has \
         answered; then make exactly the same call again."
    )
}

/// How long a notice's approve and deny links work.
pub const LINK_TTL: chrono::Duration = chrono::Duration::hours(24);

/// A link's token: the request, the answer it gives, when it expires, and
/// an HMAC-SHA256 of the three under `key` (the hub's token, which never
/// leaves the machine): `ID.a|d.EXPIRY.SIG`. It is good once (the request
/// is decided by its first use) and until it expires.
pub fn link_token(key: &str, id: &str, approve: bool, expires: chrono::DateTime<chrono::Utc>) -> String {
    let body = format!("{id}.{}.{}", if approve { "a" } else { "d" }, expires.timestamp());
    format!("{body}.{}", sign(key, &body))
}

fn sign(key: &str, body: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes());
    hex::encode(&ring::hmac::sign(&key, body.as_bytes()).as_ref()[..16])
}

/// Why a link's token is refused; `Display` is the line its page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LinkRefused {
    /// Not of the form a link's token has.
    #[error("this link is not an approval link")]
    NotALink,
    /// Signed with another key, or changed since.
    #[error("this link is not one of this cryo's (or was changed)")]
    NotOurs,
    #[error("this link has expired: answer with `cryoctl approvals` or on the hub")]
    Expired,
}

/// What a link's token says (the request and whether it approves), if it
/// is one of ours and has not expired.
pub fn check_link(key: &str, token: &str, now: chrono::DateTime<chrono::Utc>) -> Result<(String, bool), LinkRefused> {
    let parts: Vec<&str> = token.split('.').collect();
    let [id, what, expires, sig] = parts[..] else { return Err(LinkRefused::NotALink) };
    let body = format!("{id}.{what}.{expires}");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes());
    let given = hex::decode(sig).map_err(|_| LinkRefused::NotALink)?;
    let full = ring::hmac::sign(&key, body.as_bytes());
    if given.len() != 16 || !constant_eq(&full.as_ref()[..16], &given) {
        return Err(LinkRefused::NotOurs);
    }
    let expires: i64 = expires.parse().map_err(|_| LinkRefused::NotALink)?;
    if now.timestamp() > expires {
        return Err(LinkRefused::Expired);
    }
    match what {
        "a" => Ok((id.to_string(), true)),
        "d" => Ok((id.to_string(), false)),
        _ => Err(LinkRefused::NotALink),
    }
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: &str, answer: Option<&str>) -> ApprovalRecord {
        ApprovalRecord {
            id: "a0123456789".into(),
            chamber_id: 1,
            session: 2,
            tool: "Bash".into(),
            input: r#"{"command":"git push"}"#.into(),
            subject: "git push\n  origin main".into(),
            reason: String::new(),
            rule: "the rule ask Bash(git push*)".into(),
            created_at: crate::base::clock::parse_rfc3339("2026-11-27T10:00:00.125Z").unwrap(),
            state: state.into(),
            decided_at: crate::base::clock::parse_rfc3339("2026-11-27T10:05:00.250Z"),
            decided_by: Some("operator".into()),
            answer: answer.map(str::to_string),
            used_at: None,
        }
    }

    #[test]
    fn lines_say_who_what_and_when() {
        assert_eq!(what(&record("pending", None)), "Bash: git push origin main");
        let ok = decided_line(&record("approved", None));
        // To the millisecond, as the request's times are kept.
        assert!(ok.contains("given by operator at 2026-11-27T10:05:00.250Z: Bash: git push origin main"), "{ok}");
        let no = decided_line(&record("denied", Some("not on Fridays")));
        assert!(no.ends_with("Their reason: not on Fridays"), "{no}");
        assert!(refused_message(&record("denied", Some("no"))).contains("refused this call (approval a0123456789"));
        let long = what_of("Bash", &"x".repeat(500));
        assert_eq!(long.chars().count(), "Bash: ".len() + 200 + 1);
    }

    #[test]
    fn links_are_signed_bound_and_expire() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-27T10:00:00Z").unwrap().to_utc();
        let t = link_token("key", "a01", true, now + LINK_TTL);
        assert_eq!(check_link("key", &t, now), Ok(("a01".into(), true)));
        let d = link_token("key", "a01", false, now + LINK_TTL);
        assert_eq!(check_link("key", &d, now), Ok(("a01".into(), false)));
        assert_eq!(check_link("other", &t, now), Err(LinkRefused::NotOurs));
        let flipped = t.replacen(".a.", ".d.", 1);
        assert!(check_link("key", &flipped, now).is_err(), "the answer is part of what is signed");
        let other_id = t.replacen("a01", "a02", 1);
        assert!(check_link("key", &other_id, now).is_err());
        assert_eq!(check_link("key", &t, now + LINK_TTL + chrono::Duration::seconds(1)), Err(LinkRefused::Expired));
        assert_eq!(check_link("key", "x.y", now), Err(LinkRefused::NotALink));
        assert!(check_link("key", "a.b.c.zz", now).is_err());
    }

    #[test]
    fn an_answer_reaches_every_ask_that_waits_once() {
        let w = Waiting::default();
        let (_, mut rx) = w.wait("a1");
        let (_, mut rx2) = w.wait("a1");
        assert!(w.answer("a1", Decision { approve: true, line: "ok".into() }));
        assert_eq!(rx.try_recv().unwrap().line, "ok");
        assert_eq!(rx2.try_recv().unwrap().line, "ok", "the same call asked twice at once is answered twice");
        assert!(!w.answer("a1", Decision { approve: true, line: "again".into() }), "no one waits any more");
        let (first, _rx) = w.wait("a2");
        let (_, mut second) = w.wait("a2");
        w.forget("a2", first);
        assert!(w.answer("a2", Decision { approve: false, line: "no".into() }), "one wait passing ends only its own");
        assert_eq!(second.try_recv().unwrap().line, "no");
        // Dismissed, every wait of a request ends without its answer (the
        // wait's task then parks its session), and none is left to take one.
        let (_, mut rx) = w.wait("a3");
        w.dismiss("a3");
        assert_eq!(rx.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Closed));
        assert!(!w.answer("a3", Decision { approve: true, line: "late".into() }));
    }
}
