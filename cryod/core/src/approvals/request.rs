//! The rules for one tool call an agent's CLI asks about, from the call to
//! the request a person answers. The shell carries them out
//! (`supervisor::approve`: the store, the wait in place, the notices); the
//! simulator meets the same rules.
//!
//! 1. [`screen`]: a call too large for a person to read, or whose tool's
//!    name is not one, is refused unasked; with `cryo.toml` not loading,
//!    nothing is allowed; else the policy's verdict stands: allowed, refused
//!    (logged), or sent to a person.
//! 2. A call sent to a person takes the answer a person gave to the same
//!    call of this chamber within [`ANSWER_KEPT`] and not yet used (the
//!    resumed session's repeat of the call that was approved): the store
//!    does that in one transaction.
//! 3. Else [`join`]: the same call asked again while its request waits (a
//!    session resumed without an answer) joins that request; past
//!    [`MAX_PENDING`] waiting requests a new one is refused unasked (an
//!    agent asking in a loop or in parallel); else a new request.

use std::time::Duration;

use super::{Action, Policy, canonical_tool, subject};

/// The longest input a request keeps (its JSON); a larger call is refused.
pub const MAX_INPUT: usize = 64 * 1024;
/// The longest reason kept.
pub const MAX_REASON: usize = 2000;
/// The longest tool name asked about.
pub const MAX_TOOL: usize = 200;
/// The most requests of one chamber that wait for a person at once.
pub const MAX_PENDING: usize = 20;
/// How the attention line of a chamber that waits for an approval begins.
pub const AWAITING_APPROVAL: &str = "awaiting approval";
/// How long an answer waits for the agent's repeat of the call.
pub const ANSWER_KEPT: chrono::Duration = chrono::Duration::days(7);

/// A call's first judgement, before the store is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Screened {
    /// Runs; the message is for the agent.
    Allow(String),
    /// Refused: the agent's message, and the chamber's log line when the
    /// refusal is one a person should see.
    Deny { message: String, log: Option<String> },
    /// A person decides (or decided already).
    Ask(Asked),
}

/// A call sent to a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// Its input as the request keeps it (compact JSON).
    pub input: String,
    /// What a person reads of it.
    pub subject: String,
    /// One line: `Bash: git push origin main`.
    pub what: String,
    /// Why it is asked: "the rule ask Bash(git push*)".
    pub rule: String,
    /// How long the session waits for the answer in place.
    pub wait: Duration,
}

/// [`Screened`] for a call of `tool` with `input`, under the chamber's
/// policy as it loads now (`Err`: why `cryo.toml` does not; `Ok(None)`: no
/// `[approvals]`). `max_wait`: the longest the CLI lets a call wait.
pub fn screen(
    policy: Result<Option<&Policy>, &dyn std::fmt::Display>,
    tool: &str,
    input: &serde_json::Value,
    max_wait: Option<Duration>,
) -> Screened {
    let policy = match policy {
        // An edit held for the operator (an agent loosening its own policy
        // mid-session) allows nothing until it is accepted.
        Err(why) => {
            return Screened::Deny {
                message: format!("cryo.toml does not load now, so nothing is allowed: {why}"),
                log: None,
            };
        }
        Ok(None) => return Screened::Allow("this chamber has no [approvals] policy".into()),
        Ok(Some(p)) => p,
    };
    if tool.len() > MAX_TOOL || tool.chars().any(char::is_control) {
        return Screened::Deny { message: "cryo refuses this call: its tool's name is not one".into(), log: None };
    }
    let json = input.to_string();
    if json.len() > MAX_INPUT {
        return Screened::Deny {
            message: format!(
                "cryo refuses this call: its arguments are {} bytes, over the {MAX_INPUT} a person can be asked about",
                json.len()
            ),
            log: None,
        };
    }
    let verdict = policy.judge(tool, input);
    let subject = subject(tool, input);
    let what = what_of(canonical_tool(tool), &subject);
    match verdict.action {
        Action::Allow => Screened::Allow(format!("allowed by {}", verdict.why())),
        Action::Deny => Screened::Deny {
            message: format!(
                "This chamber's policy refuses this call ({}). Do not try it again; find another way or say why you \
                 cannot.",
                verdict.why()
            ),
            log: Some(format!("approval: {what} refused by {}", verdict.why())),
        },
        Action::Ask => Screened::Ask(Asked {
            input: json,
            subject,
            what,
            rule: verdict.why(),
            wait: max_wait.map_or(policy.wait, |m| m.min(policy.wait)),
        }),
    }
}

/// What a request asks, in one line: `Bash: git push origin main` (the
/// subject on one line, cut to 200 characters).
pub fn what_of(tool: &str, subject: &str) -> String {
    let one_line: String = subject.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = one_line.chars().take(200).collect();
    let more = if cut.len() < one_line.len() { "…" } else { "" };
    format!("{tool}: {cut}{more}")
}

/// Where a call sent to a person goes, given the chamber's requests that
/// wait (newest first, at least [`MAX_PENDING`] of them read when there are
/// that many).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joined {
    /// The request (its index in the list) that waits for the same call.
    Same(usize),
    /// A new request.
    New,
    /// Refused unasked: too many wait.
    Refused { message: String, log: String },
}

/// [`Joined`] for `tool` with `asked`, among `pending` (each a request's
/// tool and input).
pub fn join<'a>(pending: impl IntoIterator<Item = (&'a str, &'a str)>, tool: &str, asked: &Asked) -> Joined {
    let mut count = 0;
    for (i, (t, input)) in pending.into_iter().enumerate() {
        if t == tool && input == asked.input {
            return Joined::Same(i);
        }
        count += 1;
    }
    if count >= MAX_PENDING {
        return Joined::Refused {
            message: format!(
                "cryo refuses this call: {MAX_PENDING} of your requests already wait for a person. Stop and end your \
                 turn."
            ),
            log: format!(
                "approval: {} refused unasked: {MAX_PENDING} requests of this chamber already wait for a person",
                asked.what
            ),
        };
    }
    Joined::New
}

/// What the store holds, at a start of cryod, of a chamber's newest
/// approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Newest {
    /// It waits for a person.
    Pending { id: String, what: String },
    /// A person answered it, and no session has used the answer yet.
    Decided { id: String, what: String, line: String },
}

/// What [`at_boot`] finds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AtBoot {
    /// The request the chamber waits for, and what it asks.
    pub awaiting: Option<(String, String)>,
    /// A request's id and the line of its answer, to give the chamber.
    pub answered: Option<(String, String)>,
}

/// The chamber's attention while it waits for request `id`.
pub fn awaiting_line(id: &str, what: &str) -> String {
    format!(
        "{AWAITING_APPROVAL}: {id} ({what}); answer with `cryoctl approvals approve {id}` or `cryoctl approvals deny \
         {id} --reason TEXT`"
    )
}

/// What a starting chamber holds of its approvals: the request it waits
/// for (`Loaded::awaiting`), and an answer a person gave that never led to
/// a session (cryod stopped between the store's write and the chamber, or
/// before the session it queued ran): fed as `Input::Answered` after the
/// boot, so the chamber goes on.
///
/// A request that waits holds only a paused chamber (an operator may have
/// resumed it on purpose). An answer counts when the last session is the
/// one that asked (`last_asked`), or the paused chamber's kept line still
/// waits for that request (a pause an operator made later is not undone).
pub fn at_boot(paused: bool, last_asked: bool, attention: Option<&str>, newest: Option<Newest>) -> AtBoot {
    match newest {
        Some(Newest::Pending { id, what }) if paused => AtBoot { awaiting: Some((id, what)), answered: None },
        Some(Newest::Decided { id, what, line })
            if last_asked || (paused && attention.is_some_and(|a| a == awaiting_line(&id, &what))) =>
        {
            AtBoot { awaiting: Some((id.clone(), what)), answered: Some((id, line)) }
        }
        _ => AtBoot::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::Rule;

    fn policy() -> Policy {
        Policy {
            allow: vec![Rule::parse("Read").unwrap()],
            deny: vec![Rule::parse("Bash(rm *)").unwrap()],
            ..Policy::default()
        }
    }

    fn bash(command: &str) -> serde_json::Value {
        serde_json::json!({ "command": command })
    }

    #[test]
    fn a_call_is_screened_by_the_caps_then_the_policy() {
        let p = policy();
        assert!(matches!(
            screen(Ok(Some(&p)), "Read", &serde_json::json!({"file_path": "a"}), None),
            Screened::Allow(_)
        ));
        let Screened::Deny { log: Some(log), .. } = screen(Ok(Some(&p)), "Bash", &bash("rm -rf /"), None) else {
            panic!("refused and logged")
        };
        assert!(log.contains("Bash: rm -rf /"), "{log}");
        let Screened::Ask(a) = screen(Ok(Some(&p)), "Bash", &bash("git push"), Some(Duration::from_secs(60))) else {
            panic!("asked")
        };
        assert_eq!((a.what.as_str(), a.wait), ("Bash: git push", Duration::from_secs(60)));
        // Over the caps, or with cryo.toml not loading: refused unasked.
        let huge = bash(&"x".repeat(MAX_INPUT));
        assert!(matches!(screen(Ok(Some(&p)), "Bash", &huge, None), Screened::Deny { log: None, .. }));
        assert!(matches!(screen(Ok(Some(&p)), "Ba\nsh", &bash("ls"), None), Screened::Deny { .. }));
        assert!(matches!(screen(Ok(Some(&p)), &"T".repeat(MAX_TOOL + 1), &bash("ls"), None), Screened::Deny { .. }));
        assert!(matches!(screen(Err(&"a typo"), "Read", &bash("ls"), None), Screened::Deny { .. }));
        assert!(matches!(screen(Ok(None), "Bash", &bash("rm -rf /"), None), Screened::Allow(_)));
    }

    #[test]
    fn a_call_asked_again_joins_its_request_and_a_flood_is_refused() {
        let p = policy();
        let Screened::Ask(a) = screen(Ok(Some(&p)), "Bash", &bash("git push"), None) else { panic!() };
        let same = ("Bash".to_string(), a.input.clone());
        let other = |i: usize| ("Bash".to_string(), bash(&format!("echo {i}")).to_string());
        let pending = [other(0), same.clone()];
        assert_eq!(join(pending.iter().map(|(t, i)| (t.as_str(), i.as_str())), "Bash", &a), Joined::Same(1));
        let pending: Vec<_> = (0..MAX_PENDING - 1).map(other).collect();
        assert_eq!(join(pending.iter().map(|(t, i)| (t.as_str(), i.as_str())), "Bash", &a), Joined::New);
        let pending: Vec<_> = (0..MAX_PENDING).map(other).collect();
        assert!(matches!(
            join(pending.iter().map(|(t, i)| (t.as_str(), i.as_str())), "Bash", &a),
            Joined::Refused { .. }
        ));
        // The same call is found even among a flood.
        let mut pending = pending;
        pending.push(same);
        assert_eq!(join(pending.iter().map(|(t, i)| (t.as_str(), i.as_str())), "Bash", &a), Joined::Same(MAX_PENDING));
    }

    #[test]
    fn an_answer_that_never_reached_a_waiting_chamber_is_given_at_boot() {
        let line = awaiting_line("a1", "Bash: git push");
        let decided = || Newest::Decided { id: "a1".into(), what: "Bash: git push".into(), line: "given".into() };
        let both = AtBoot {
            awaiting: Some(("a1".into(), "Bash: git push".into())),
            answered: Some(("a1".into(), "given".into())),
        };
        assert_eq!(at_boot(true, false, Some(&line), Some(decided())), both);
        // Unpaused by the answer, and cryod stopped before its session ran.
        assert_eq!(at_boot(false, true, None, Some(decided())), both);
        // Paused for something else (an operator, later), or sessions ran
        // since: left alone.
        assert_eq!(at_boot(true, false, Some("paused by an operator"), Some(decided())), AtBoot::default());
        assert_eq!(at_boot(false, false, Some(&line), Some(decided())), AtBoot::default());
        // A request that waits holds a paused chamber only.
        let pending = || Newest::Pending { id: "a2".into(), what: "Bash: ls".into() };
        let waits = AtBoot { awaiting: Some(("a2".into(), "Bash: ls".into())), answered: None };
        assert_eq!(at_boot(true, false, None, Some(pending())), waits);
        assert_eq!(at_boot(false, true, None, Some(pending())), AtBoot::default());
    }
}
