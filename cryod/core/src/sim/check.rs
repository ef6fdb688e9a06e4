//! The invariants the simulator holds the machine to (DESIGN.md section 4),
//! checked as the run goes and at its end.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::durable::{Disk, Ledger, Proc, Row};
use crate::message::CRYOCHAMBER;
use crate::todo::TodoList;

/// What the checks remember across a run.
#[derive(Debug, Default)]
pub struct Checker {
    /// Wake ids that spawned an agent.
    spawned: HashSet<String>,
    /// (chamber, session) of every spawned agent, and whether it hibernated.
    pub sessions: BTreeMap<(usize, u64), bool>,
    /// Inbox files moved to the archive, per chamber.
    archived: Vec<BTreeSet<String>>,
    /// Inbox files handed to an agent by `receive`, per chamber.
    delivered: Vec<BTreeSet<String>>,
    /// Each TODO slot an agent was spawned for: (chamber, id, due) → wake.
    ran: BTreeMap<(usize, u64, chrono::DateTime<chrono::Utc>, u32), String>,
    /// The highest TODO id seen, per chamber.
    max_id: Vec<u64>,
    /// Sessions whose end their `[[on_end]]` matched, not yet handed on.
    to_hand_off: BTreeSet<(usize, u64)>,
    /// The ids of the events raised for people.
    pub notified: HashSet<String>,
    /// The budget events raised, and by which incarnation of cryod.
    pub budget_told: std::collections::HashMap<String, u32>,
    /// When each link (from, to) carried a hand-off.
    links: BTreeMap<(usize, usize), Vec<chrono::DateTime<chrono::Utc>>>,
    /// Agents spawned per chamber and UTC day (for `daily_sessions`).
    per_day: BTreeMap<(usize, chrono::NaiveDate), u32>,
    /// Days on which an operator resumed a chamber its budget paused.
    released: HashSet<(usize, chrono::NaiveDate)>,
}

/// Liveness (DESIGN.md section 7): a started chamber is always in one of a
/// session (or a wake on its way to one), a next wake planned (a hold's
/// end is one), a pause, a completed plan (it wakes when mail comes), or an
/// attention line that names what to do and the command that does it (a
/// fault's line too). `planned`: the wake the scheduler holds for it.
pub fn alive(c: usize, m: &crate::chamber::Chamber, planned: Option<chrono::DateTime<chrono::Utc>>) -> Verdict {
    let view = m.view();
    if !m.started() || m.paused() || view.archived || m.waking() || planned.is_some() {
        return Ok(());
    }
    let names_a_command = |line: &str| line.contains("cryoctl ");
    if view.fault.as_deref().is_some_and(names_a_command) || view.attention.as_deref().is_some_and(names_a_command) {
        return Ok(());
    }
    if m.completed() && view.mail_waiting == 0 {
        return Ok(());
    }
    Err(Broken(format!(
        "chamber {c} is started but nothing will wake it: no session, no planned wake, no hold, no pause, and no \
         attention line naming a command (state {:?}, last result {:?}, attention {:?}, fault {:?}, mail {})",
        view.state, view.last_result, view.attention, view.fault, view.mail_waiting
    )))
}

/// An invariant the machine (or the simulated world) broke, as the failing
/// run prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken(pub String);

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type Verdict = Result<(), Broken>;

impl Checker {
    pub fn new(chambers: usize) -> Checker {
        Checker {
            archived: vec![BTreeSet::new(); chambers],
            delivered: vec![BTreeSet::new(); chambers],
            max_id: vec![0; chambers],
            ..Checker::default()
        }
    }

    /// Invariant 5: at most one agent spawn per wake.
    pub fn spawn(&mut self, chamber: usize, session: u64, wake_id: &str) -> Verdict {
        if !self.spawned.insert(wake_id.to_string()) {
            return Err(Broken(format!("wake {wake_id} spawned a second agent")));
        }
        self.sessions.insert((chamber, session), false);
        Ok(())
    }

    /// Budgets: no agent is spawned past the chamber's `daily_sessions`
    /// unless an operator resumed it after that budget paused it, that day.
    pub fn within_budget(&mut self, chamber: usize, limit: Option<u32>, now: chrono::DateTime<chrono::Utc>) -> Verdict {
        let day = now.date_naive();
        let n = self.per_day.entry((chamber, day)).or_default();
        *n += 1;
        match limit {
            Some(limit) if *n > limit && !self.released.contains(&(chamber, day)) => Err(Broken(format!(
                "chamber {chamber}: agent {n} of {day} spawned past its daily_sessions budget ({limit})"
            ))),
            _ => Ok(()),
        }
    }

    /// Agents spawned for the chamber on that UTC day.
    pub fn spawned_on(&self, chamber: usize, day: chrono::NaiveDate) -> u32 {
        self.per_day.get(&(chamber, day)).copied().unwrap_or(0)
    }

    /// An operator resumed the chamber its budget paused, that day.
    pub fn released(&mut self, chamber: usize, day: chrono::NaiveDate) {
        self.released.insert((chamber, day));
    }

    /// Invariant 4, across crashes: no TODO slot is claimed by two spawned
    /// wakes (a re-run is a new attempt, `text (attempt k)`: a one-shot's
    /// under its own number, a series' slot as a TODO of its own; a slot
    /// passed by its pre-check is attempt 0). A crash between a
    /// spawn and its claim's write breaks it unless the settlement makes the
    /// claim again from the ledger.
    pub fn ran(
        &mut self,
        chamber: usize,
        wake_id: &str,
        slots: &[(u64, chrono::DateTime<chrono::Utc>, u32)],
    ) -> Verdict {
        for &(id, due, attempt) in slots {
            if let Some(first) = self.ran.insert((chamber, id, due, attempt), wake_id.to_string()) {
                return Err(Broken(format!(
                    "chamber {chamber}: TODO {id} due {due} (attempt {attempt}) ran in wake {first} and again in {wake_id}"
                )));
            }
        }
        Ok(())
    }

    /// A session ended as its chamber's `[[on_end]]` asks to hand on.
    pub fn ended_for_handoff(&mut self, chamber: usize, session: u64) {
        self.to_hand_off.insert((chamber, session));
    }

    /// A crash of cryod: the links' counts were in its memory.
    pub fn forget_links(&mut self) {
        self.links.clear();
    }

    /// Chaining: a hand-off is for a session whose end matched, at most
    /// once, and no link carries more than its rate in any hour.
    pub fn handed_off(
        &mut self,
        from: usize,
        to: usize,
        session: u64,
        now: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> Verdict {
        if !self.to_hand_off.remove(&(from, session)) {
            return Err(Broken(format!(
                "chamber {from} handed session {session} on to chamber {to}, but no such end is owed a hand-off (twice, or one that did not match)"
            )));
        }
        let sent = self.links.entry((from, to)).or_default();
        sent.retain(|t| now - *t < chrono::Duration::hours(1));
        sent.push(now);
        if sent.len() as u32 > limit {
            return Err(Broken(format!(
                "the link from chamber {from} to chamber {to} carried {} hand-offs within an hour (limit {limit})",
                sent.len()
            )));
        }
        Ok(())
    }

    /// Invariant 4: claims are terminal and ids are never reused.
    pub fn todos_written(&mut self, chamber: usize, before: &TodoList, after: &TodoList) -> Verdict {
        let before: std::collections::HashMap<u64, &crate::todo::Todo> =
            before.items.iter().map(|t| (t.id, t)).collect();
        for t in &after.items {
            match before.get(&t.id).copied() {
                None => {
                    if t.id <= self.max_id[chamber] {
                        return Err(Broken(format!("chamber {chamber}: TODO id {} was handed out again", t.id)));
                    }
                    self.max_id[chamber] = t.id;
                }
                Some(old) => {
                    // A claim is terminal for its attempt: a one-shot waits
                    // again only as a later attempt, or deferred to a later time.
                    let again = t.attempt > old.attempt || (t.attempt == old.attempt && t.at > old.at);
                    if old.repeat.is_none() && old.claimed && t.is_pending() && !again {
                        return Err(Broken(format!(
                            "chamber {chamber}: claimed TODO {} became pending again as the same attempt",
                            t.id
                        )));
                    }
                    if old.done && !t.done {
                        return Err(Broken(format!("chamber {chamber}: done TODO {} was reopened", t.id)));
                    }
                    if old.repeat.is_some() && t.at.is_some() && old.at.is_some() && t.at < old.at {
                        return Err(Broken(format!(
                            "chamber {chamber}: recurring TODO {} went back to a claimed slot",
                            t.id
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// No inbox file is archived twice.
    pub fn archived(&mut self, chamber: usize, names: &[String]) -> Verdict {
        for n in names {
            if !self.archived[chamber].insert(n.clone()) {
                return Err(Broken(format!("chamber {chamber}: {n} was archived twice")));
            }
        }
        Ok(())
    }

    /// No message is handed to an agent twice.
    pub fn delivered(&mut self, chamber: usize, names: &[String]) -> Verdict {
        for n in names {
            if !self.delivered[chamber].insert(n.clone()) {
                return Err(Broken(format!("chamber {chamber}: {n} was received by an agent twice")));
            }
        }
        Ok(())
    }

    /// Invariant 7 and the limit, after every step: one live agent per
    /// chamber, at most `limit` in all.
    pub fn processes(procs: &[Proc], limit: usize) -> Verdict {
        let mut per: BTreeMap<usize, usize> = BTreeMap::new();
        for p in procs.iter().filter(|p| p.alive) {
            *per.entry(p.chamber).or_default() += 1;
        }
        if let Some((c, n)) = per.iter().find(|(_, n)| **n > 1) {
            return Err(Broken(format!("chamber {c} has {n} live agents")));
        }
        let total: usize = per.values().sum();
        if total > limit {
            return Err(Broken(format!("{total} agents live at once, over the limit of {limit}")));
        }
        Ok(())
    }

    /// After a restart's recovery: no agent of an earlier daemon lives on.
    pub fn recovered(procs: &[Proc], incarnation: u32) -> Verdict {
        match procs.iter().find(|p| p.alive && p.inc < incarnation) {
            Some(p) => Err(Broken(format!("agent {} of a killed cryod survived recovery", p.pid))),
            None => Ok(()),
        }
    }

    /// At the end, with every session over: invariants 1, 2 and 3.
    pub fn end(&self, disks: &[Disk], ledger: &Ledger, due_before: chrono::DateTime<chrono::Utc>) -> Verdict {
        // Indexed once: a long run has tens of thousands of messages.
        let mut by_session: BTreeMap<(usize, u64), Vec<&crate::message::Message>> = BTreeMap::new();
        for (c, d) in disks.iter().enumerate() {
            for m in d.outbox.values() {
                if let Some(n) = m.meta.get("session").and_then(|n| n.parse().ok()) {
                    by_session.entry((c, n)).or_default().push(m);
                }
            }
        }
        for (c, d) in disks.iter().enumerate() {
            let mut answers: std::collections::HashMap<&str, Vec<&crate::message::Message>> = Default::default();
            for m in d.outbox.values() {
                for f in m.meta.get("in_reply_to").map(|r| r.split(' ')).into_iter().flatten() {
                    answers.entry(f).or_default().push(m);
                }
            }
            // 2. Every claimed message answered exactly once.
            for name in &self.archived[c] {
                let found = answers.get(name.as_str()).map(Vec::as_slice).unwrap_or(&[]);
                if found.len() != 1 {
                    let all: Vec<String> = found
                        .iter()
                        .map(|m| {
                            format!(
                                "[{} in session {:?}: {:?}]",
                                m.from,
                                m.meta.get("session"),
                                m.body.lines().next().unwrap_or("")
                            )
                        })
                        .collect();
                    return Err(Broken(format!(
                        "chamber {c}: claimed message {name} has {} answers {}",
                        found.len(),
                        all.join(" ")
                    )));
                }
            }
            // 3. Every due TODO ran (or was retried); no claim is left open.
            let running = d.started && !d.paused && !d.completed && !d.faulted;
            if running
                && let Some(t) = d.todos.items.iter().find(|t| t.is_pending() && t.at.is_some_and(|a| a <= due_before))
            {
                return Err(Broken(format!(
                    "chamber {c}: TODO {} ({:?}) came due at {:?} and never ran",
                    t.id, t.text, t.at
                )));
            }
            if let Some(t) = d.todos.items.iter().find(|t| t.claimed_by.is_some() || (t.claimed && !t.done)) {
                return Err(Broken(format!("chamber {c}: TODO {} is still claimed after every session ended", t.id)));
            }
            // Blocks in cryo.log never stay open or nest.
            let mut open = false;
            for l in &d.log {
                match l {
                    crate::chamber::LogLine::Begin(n) if open => {
                        return Err(Broken(format!("chamber {c}: session {n}'s log block opened inside another")));
                    }
                    crate::chamber::LogLine::Begin(_) => open = true,
                    crate::chamber::LogLine::End => open = false,
                    crate::chamber::LogLine::Event(_) => {}
                }
            }
            if open {
                return Err(Broken(format!("chamber {c}: a cryo.log block was never closed")));
            }
        }
        // 1. Every session leaves a visible message; a failure is reported.
        // (One that parked for a person's approval is told by its request:
        // a notice, and the chamber's attention line.)
        let parked: BTreeSet<(usize, u64)> = (ledger.rows.iter())
            .filter(|r| r.outcome.starts_with(crate::chamber::approval::AWAITING_APPROVAL))
            .map(|r| (r.chamber, r.number))
            .collect();
        for (&(c, n), &hibernated) in &self.sessions {
            if parked.contains(&(c, n)) {
                continue;
            }
            let of_session = by_session.get(&(c, n)).map(Vec::as_slice).unwrap_or(&[]);
            if of_session.is_empty() {
                return Err(Broken(format!("chamber {c}: session {n} left no visible message")));
            }
            if !hibernated && !of_session.iter().any(|m| m.from == CRYOCHAMBER) {
                return Err(Broken(format!(
                    "chamber {c}: session {n} ended without hibernating and nobody reported it"
                )));
            }
        }
        if let Some(r) = ledger.rows.iter().find(|r| !r.ended) {
            return Err(Broken(format!("chamber {}: session {} is still open in the ledger", r.chamber, r.number)));
        }
        if let Some(b) = ledger.batches.iter().find(|b| !b.answered && !b.dropped) {
            return Err(Broken(format!("chamber {}: journaled batch {} is still unanswered", b.chamber, b.id)));
        }
        Ok(())
    }
}

/// Session continuity: a session resumes a conversation only when its
/// chamber resumes, the session before it (the newest in the ledger)
/// hibernated, spoke in that very conversation, and the conversation is
/// within every cap; its ledger row names that session.
pub fn resumed(
    chamber: usize,
    session: u64,
    resume: Option<&str>,
    rows: &[&Row],
    c: &crate::session::Continuity,
    now: chrono::DateTime<chrono::Utc>,
) -> Verdict {
    let row = rows.iter().find(|r| r.number == session);
    let from = row.and_then(|r| r.resumed_from);
    let Some(id) = resume else {
        return match from {
            Some(n) => Err(Broken(format!(
                "chamber {chamber}: session {session} is recorded as resumed from {n} but starts afresh"
            ))),
            None => Ok(()),
        };
    };
    let fail = |why: String| Err(Broken(format!("chamber {chamber}: session {session} resumed {id:?}: {why}")));
    let Some(prev) = rows.iter().filter(|r| r.number < session).max_by_key(|r| r.number) else {
        return fail("there is no session before it".into());
    };
    // After a wait for a person's approval, the conversation that asked
    // carries on with the answer, however the chamber resumes otherwise.
    let asked = prev.outcome.starts_with(crate::chamber::approval::AWAITING_APPROVAL);
    if !c.resume && !asked {
        return fail("the chamber starts every session afresh".into());
    }
    if from != Some(prev.number) {
        return fail(format!("its row says it resumed {from:?}, the session before it is {}", prev.number));
    }
    if !prev.ended || !prev.resumable {
        return fail(format!("session {} ended {:?}, which is not resumed", prev.number, prev.outcome));
    }
    let Some(t) = &prev.thread else { return fail(format!("session {} left no conversation", prev.number)) };
    if t.conversation != id {
        return fail(format!("session {} spoke in {:?}", prev.number, t.conversation));
    }
    // Its age when the wake decided (recorded it): a `[git]` session's
    // worktree may take a while to be ready after that.
    let decided = row.map_or(now, |r| r.recorded_at);
    if !asked && prev.ended_at.is_some_and(|at| decided - at > c.max_age) {
        return fail("past resume_max_age".into());
    }
    if t.sessions >= c.max_sessions || c.max_tokens.is_some_and(|m| t.tokens >= m) {
        return fail(format!("past a cap: {} sessions, {} tokens", t.sessions, t.tokens));
    }
    Ok(())
}
