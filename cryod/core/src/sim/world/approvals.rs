//! Approvals in the simulated world, carried out as `supervisor::approve`
//! does with the core's rules ([`crate::approvals::request`]): a call the
//! policy sends to a person becomes a request in the store (durable), the
//! session waits for it in place (volatile: lost at a crash), and past the
//! wait it parks. People answer at random: some within the wait, some
//! hours later, a few never. A decision is written to the store first and
//! reaches the chamber a moment later, so cryod may crash in between.

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

use super::{Ev, Step, World};
use crate::approvals::request::{self, Joined, Newest, Screened};
use crate::approvals::{Action, Policy, Rule};
use crate::chamber::{Input, LogLine, State};
use crate::sim::check::Broken;

/// How long a simulated session waits for an answer in place.
pub const WAIT: StdDuration = StdDuration::from_secs(600);

/// A request as the store keeps it.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    pub chamber: usize,
    pub session: u64,
    pub tool: String,
    pub input: String,
    pub what: String,
    /// `None` while it waits; then approved or not.
    pub approved: Option<bool>,
    pub decided_at: Option<DateTime<Utc>>,
    pub used: bool,
}

impl Request {
    fn line(&self) -> String {
        let verb = if self.approved == Some(true) { "given" } else { "refused" };
        format!("Approval {} was {verb} by a person: {}", self.id, self.what)
    }
}

/// The policy of a chamber with `[approvals]`: `ls` runs, `rm` is
/// refused, the rest is asked.
pub fn policy() -> Policy {
    Policy {
        allow: vec![Rule::parse("Bash(ls*)").expect("a rule")],
        deny: vec![Rule::parse("Bash(rm *)").expect("a rule")],
        default: Action::Ask,
        wait: WAIT,
        ..Policy::default()
    }
}

impl World {
    /// An agent's CLI asks about a tool call (the agent waits for the answer).
    pub(super) fn ask(&mut self, pid: u32, tool: String, input: serde_json::Value) -> Step {
        let p = &self.procs[pid as usize - 1];
        let (c, session) = (p.chamber, p.session);
        let live = self.daemon.as_ref().and_then(|d| d.machines[c].as_ref()).and_then(|m| m.live_session());
        if live.map(|(n, _)| n) != Some(session) {
            // "this session has ended": the CLI carries on as refused.
            return self.approval_answer(pid, false);
        }
        let policy = self.disks[c].approvals.then(policy);
        let asked = match request::screen(Ok(policy.as_ref()), &tool, &input, None) {
            Screened::Allow(_) => return self.approval_answer(pid, false),
            Screened::Deny { log, .. } => {
                if let Some(line) = log {
                    self.disks[c].log.push(LogLine::Event(line));
                }
                return self.approval_answer(pid, false);
            }
            Screened::Ask(a) => a,
        };
        self.report.asked += 1;
        // The answer a person gave to the same call, not yet used.
        let since = self.now - request::ANSWER_KEPT;
        if let Some(r) = self.requests.iter_mut().find(|r| {
            r.chamber == c
                && r.tool == tool
                && r.input == asked.input
                && !r.used
                && r.decided_at.is_some_and(|t| t >= since)
        }) {
            r.used = true;
            return self.approval_answer(pid, false);
        }
        let pending: Vec<&Request> =
            self.requests.iter().rev().filter(|r| r.chamber == c && r.approved.is_none()).collect();
        let id = match request::join(pending.iter().map(|r| (r.tool.as_str(), r.input.as_str())), &tool, &asked) {
            Joined::Same(i) => pending[i].id.clone(),
            Joined::Refused { log, .. } => {
                self.disks[c].log.push(LogLine::Event(log));
                return self.approval_answer(pid, false);
            }
            Joined::New => {
                let id = format!("a{}", self.requests.len());
                self.requests.push(Request {
                    id: id.clone(),
                    chamber: c,
                    session,
                    tool,
                    input: asked.input,
                    what: asked.what,
                    approved: None,
                    decided_at: None,
                    used: false,
                });
                // A person answers: mostly within the wait, often hours
                // later, now and then never.
                let after = match self.rng.below(10) {
                    0..=3 => Some(Duration::seconds(1 + self.rng.below(WAIT.as_secs() - 1) as i64)),
                    4..=8 => Some(Duration::minutes(11 + self.rng.below(3 * 24 * 60) as i64)),
                    _ => None,
                };
                if let Some(after) = after {
                    self.at(self.now + after, Ev::Decide { id: id.clone() });
                }
                id
            }
        };
        self.feed(c, Input::ApprovalAsked { session, id: id.clone() })?;
        let inc = self.inc();
        if let Some(d) = self.daemon.as_mut() {
            d.asking.entry(id.clone()).or_default().push(pid);
            self.procs[pid as usize - 1].asking = Some(id.clone());
            self.after(asked.wait, Ev::ApprovalWait { inc, pid, id });
        }
        Ok(())
    }

    /// The agent hears its call's answer and goes on (`parked`: it is told
    /// to end its turn).
    fn approval_answer(&mut self, pid: u32, parked: bool) -> Step {
        let p = &mut self.procs[pid as usize - 1];
        p.asking = None;
        if !p.alive {
            return Ok(());
        }
        p.agent.approval(parked, &mut self.rng);
        let t = self.think();
        self.after(t, Ev::Step { pid });
        Ok(())
    }

    /// A person decides request `id` (with cryod up: the CLI and the hub
    /// need it); the chamber hears of it a moment later.
    pub(super) fn decide(&mut self, id: String) -> Step {
        if self.daemon.is_none() {
            self.after(StdDuration::from_secs(600), Ev::Decide { id });
            return Ok(());
        }
        let approve = !self.rng.one_in(3);
        let Some(r) = self.requests.iter_mut().find(|r| r.id == id && r.approved.is_none()) else { return Ok(()) };
        r.approved = Some(approve);
        r.decided_at = Some(self.now);
        self.report.decided += 1;
        self.in_flight.insert(id.clone());
        let inc = self.inc();
        self.after(StdDuration::from_millis(50), Ev::Deliver { inc, id });
        Ok(())
    }

    /// The chamber hears of a decision: a session waiting in place takes
    /// it, else the machine does.
    pub(super) fn deliver(&mut self, id: String) -> Step {
        self.in_flight.remove(&id);
        let Some(r) = self.requests.iter().find(|r| r.id == id).cloned() else { return Ok(()) };
        let waiters = self.daemon.as_mut().and_then(|d| d.asking.remove(&id)).unwrap_or_default();
        // (An agent killed while it asked still counts as waiting here, as a
        // gRPC call may outlive its process for a moment: the machine's
        // `asks` tells a live session's ask from it.)
        let waiters: Vec<u32> =
            waiters.into_iter().filter(|p| self.procs[*p as usize - 1].asking.as_ref() == Some(&id)).collect();
        let asks = self.daemon.as_ref().and_then(|d| d.machines[r.chamber].as_ref()).is_some_and(|m| m.asks(&id));
        if waiters.is_empty() || !asks {
            // Let go without the answer (cryod's `Waiting::dismiss`): each
            // is told its session parks.
            for pid in waiters {
                self.approval_answer(pid, true)?;
            }
            let req = self.own_req();
            return self.feed(r.chamber, Input::Answered { req, id, line: r.line() });
        }
        if let Some(m) = self.requests.iter_mut().find(|m| m.id == id) {
            m.used = true;
        }
        let live = self.daemon.as_ref().and_then(|d| d.machines[r.chamber].as_ref()).and_then(|m| m.live_session());
        let session = live.map_or(r.session, |(n, _)| n);
        self.disks[r.chamber].log.push(LogLine::Event(r.line()));
        self.feed(r.chamber, Input::ApprovalTaken { session, id })?;
        for pid in waiters {
            self.approval_answer(pid, false)?;
        }
        Ok(())
    }

    /// No answer within the wait: the session parks.
    pub(super) fn approval_wait_over(&mut self, pid: u32, id: String) -> Step {
        let p = &self.procs[pid as usize - 1];
        if !p.alive || p.asking.as_ref() != Some(&id) {
            return Ok(());
        }
        let (c, session) = (p.chamber, p.session);
        if let Some(list) = self.daemon.as_mut().and_then(|d| d.asking.get_mut(&id)) {
            list.retain(|w| *w != pid);
        }
        let what = self.requests.iter().find(|r| r.id == id).map(|r| r.what.clone()).unwrap_or_default();
        self.report.parked += 1;
        let req = self.own_req();
        self.feed(c, Input::Parked { session, req, id, what })?;
        self.approval_answer(pid, true)
    }

    /// What the store says, at a start, of a paused chamber's newest
    /// request (as `supervisor::boot` reads it).
    pub(super) fn newest_request(&self, c: usize) -> Option<Newest> {
        let mine = || self.requests.iter().rev().filter(|r| r.chamber == c);
        if let Some(r) = mine().find(|r| r.approved.is_none()) {
            return Some(Newest::Pending { id: r.id.clone(), what: r.what.clone() });
        }
        let r = mine().next().filter(|r| !r.used)?;
        Some(Newest::Decided { id: r.id.clone(), what: r.what.clone(), line: r.line() })
    }

    /// The call a session's prompt asks it to make again: the answer a
    /// person gave to its chamber's request, not yet used.
    pub(super) fn answered_call(&self, c: usize) -> Option<(String, serde_json::Value)> {
        let r = self.requests.iter().rev().find(|r| r.chamber == c && r.approved.is_some() && !r.used)?;
        Some((r.tool.clone(), serde_json::from_str(&r.input).ok()?))
    }

    /// Liveness of approvals: a chamber that shows `awaiting approval`
    /// has a request that waits for a person (or a decision on its way).
    pub(super) fn approvals_alive(&self) -> Step {
        let Some(d) = self.daemon.as_ref() else { return Ok(()) };
        for (c, m) in d.machines.iter().enumerate() {
            let Some(m) = m else { continue };
            if m.view().state != State::AwaitingApproval {
                continue;
            }
            let waits = self
                .requests
                .iter()
                .any(|r| r.chamber == c && (r.approved.is_none() || self.in_flight.contains(&r.id)));
            if !waits {
                return Err(Broken(format!(
                    "chamber {c} shows `awaiting approval`, but every request of it was answered (attention {:?})",
                    m.view().attention
                )));
            }
        }
        Ok(())
    }
}
