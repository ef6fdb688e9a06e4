//! The simulated daemon: its volatile half ([`Daemon`], lost at a crash),
//! its crash and its start from the durable half (as `Daemon::load` and
//! `supervisor::boot` do), its shutdown, and the shell around each
//! chamber's machine: inputs fed in, effects performed depth first,
//! permits granted under the global limit.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

use super::{Ev, Step, World, approvals, report::label};
use crate::chamber::approval::AWAITING_APPROVAL;
use crate::chamber::handoff::OnEnd;
use crate::chamber::{
    Boot, Chamber, Effect, Input, Limits, Listed, Loaded, LogLine, OpenBatch, OpenSession, Outgoing, ReqId, Rerun,
    Settings,
};
use crate::message::CRYOCHAMBER;
use crate::session::{Continuity, Outcome, Trigger};
use crate::sim::check::{self, Broken, Checker};
use crate::sim::durable::{ACCOUNTS, Disk, Row, account_name};

/// The simulated `max_session_duration`.
const SESSION_LIMIT: u64 = 1800;
const STOP_GRACE: StdDuration = StdDuration::from_secs(10);

/// The volatile daemon: lost at a crash.
pub(super) struct Daemon {
    pub(super) inc: u32,
    pub(super) machines: Vec<Option<Chamber>>,
    pub(super) queue: BTreeMap<(Trigger, u64), usize>,
    pub(super) seq: u64,
    pub(super) running: usize,
    /// The chamber's permit has arrived (and is not given back yet).
    pub(super) arrived: Vec<bool>,
    /// The chamber holds a permit (from the grant, before it arrives).
    pub(super) slot: Vec<bool>,
    pub(super) plans: Vec<Option<DateTime<Utc>>>,
    pub(super) tokens: HashMap<String, (usize, u64)>,
    /// Agents waiting for a reply, by request.
    pub(super) waiting: HashMap<ReqId, u32>,
    pub(super) next_req: ReqId,
    /// The account each chamber's permit bills (its own, or a fallback).
    pub(super) billing: Vec<Option<usize>>,
    /// Agents waiting in place for an approval request, by its id.
    pub(super) asking: HashMap<String, Vec<u32>>,
    /// When this cryod started, and when the machine slept since.
    pub(super) since: DateTime<Utc>,
    pub(super) slept: Vec<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// Timers armed and not fired yet that matter at rest, by chamber.
    pub(super) timers: Vec<u32>,
    /// Frozen chambers: their machine is let go (its view is what the
    /// daemon shows), and the next input boots it again.
    pub(super) frozen: Vec<bool>,
}

impl Daemon {
    /// A daemon just started with these machines: no permits, plans,
    /// tokens or callers yet.
    fn new(inc: u32, machines: Vec<Option<Chamber>>, since: DateTime<Utc>) -> Daemon {
        let n = machines.len();
        Daemon {
            inc,
            machines,
            queue: BTreeMap::new(),
            seq: 0,
            running: 0,
            slot: vec![false; n],
            arrived: vec![false; n],
            plans: vec![None; n],
            tokens: HashMap::new(),
            waiting: HashMap::new(),
            next_req: 0,
            billing: vec![None; n],
            asking: HashMap::new(),
            since,
            slept: Vec::new(),
            timers: vec![0; n],
            frozen: vec![false; n],
        }
    }
}

impl World {
    /// A crash of cryod: its volatile half is gone; agents live on.
    pub(super) fn crash(&mut self) {
        self.report.crashes += 1;
        self.daemon = None;
        // Decisions on their way to a chamber die with it (the store has them).
        self.in_flight.clear();
        // The hand-off rate is counted in memory: a new cryod starts afresh.
        self.check.forget_links();
        self.note(0, "CRASH");
        let t = self.now + Duration::seconds(1 + self.rng.below(600) as i64);
        self.at(t, Ev::Restart);
    }

    /// A start of cryod: the agents of sessions still open are ended first,
    /// then every chamber's machine is made from the durable state and
    /// recovers (as `Daemon::load` and `supervisor::boot` do).
    pub(super) fn restart(&mut self) -> Step {
        if self.daemon.is_some() {
            return Ok(());
        }
        self.incarnation += 1;
        self.note(0, "RESTART");
        let mut ended: HashMap<String, usize> = HashMap::new();
        for r in self.ledger.rows.iter().filter(|r| !r.ended) {
            for p in self.procs.iter_mut().filter(|p| p.alive && p.wake_id == r.wake_id) {
                p.alive = false;
                *ended.entry(r.wake_id.clone()).or_default() += 1;
            }
        }
        Checker::recovered(&self.procs, self.incarnation)?;
        let n = self.disks.len();
        // What a paused chamber waits for, and an answer that never reached
        // it, as `supervisor::boot` reads them.
        let awaiting: Vec<_> = (0..n).map(|c| self.at_boot(c)).collect();
        // As cryod's start with its kept next due times: a chamber with
        // nothing to recover, its files unchanged since an earlier start
        // read them, starts at rest (every other one, by incarnation).
        let machines = (0..n)
            .map(|c| {
                let boot = self.boot_input(c, &ended);
                let plain = boot.open.is_empty()
                    && boot.batches.is_empty()
                    && awaiting[c].answered.is_none()
                    && awaiting[c].awaiting.is_none()
                    && (self.incarnation as usize + c).is_multiple_of(2);
                Some(self.load(c, awaiting[c].awaiting.clone(), plain))
            })
            .collect();
        self.daemon = Some(Daemon::new(self.incarnation, machines, self.now));
        // The holds it reads back from the store end when they said.
        let ends: Vec<DateTime<Utc>> = self.holds.values().copied().filter(|u| *u > self.now).collect();
        for end in ends {
            self.at(end, Ev::HoldOver { inc: self.incarnation });
        }
        for (c, crate::approvals::request::AtBoot { answered, .. }) in awaiting.into_iter().enumerate() {
            let boot = self.boot_input(c, &ended);
            self.feed(c, Input::Boot(boot))?;
            if let Some((id, line)) = answered
                && self.daemon.is_some()
            {
                let req = self.own_req();
                self.feed(c, Input::Answered { req, id, line })?;
            }
        }
        Ok(())
    }

    /// What a paused chamber waits for, and an answer that never reached
    /// it, as `supervisor::boot` reads them.
    fn at_boot(&self, c: usize) -> crate::approvals::request::AtBoot {
        let d = &self.disks[c];
        let last = self.ledger.rows.iter().filter(|r| r.chamber == c).max_by_key(|r| r.number);
        let last_asked = last.is_some_and(|r| r.outcome.starts_with(AWAITING_APPROVAL));
        let newest = if d.paused || last_asked { self.newest_request(c) } else { None };
        crate::approvals::request::at_boot(
            d.paused,
            last_asked,
            d.health.as_ref().and_then(|h| h.attention.as_deref()),
            newest,
        )
    }

    /// Chamber `c`'s machine as a start of cryod makes it from the durable
    /// half (its registry row, files and ledger rows), waiting for the
    /// approval request `awaiting` if one.
    fn load(&self, c: usize, awaiting: Option<(String, String)>, rest: bool) -> Chamber {
        let disk = &self.disks[c];
        let rows: Vec<&Row> = self.ledger.rows.iter().filter(|r| r.chamber == c).collect();
        let last = rows.iter().map(|r| r.number).max().unwrap_or(0);
        let from_log = disk.log.iter().filter_map(|l| if let LogLine::Begin(n) = l { Some(*n) } else { None }).max();
        let rerun = (rows.iter().max_by_key(|r| r.number).filter(|r| r.ended))
            .and_then(|r| Rerun::after(r.number, Some(&r.outcome), || outgoing(disk)));
        // At rest from its start only with nothing to recover, as cryod's.
        let todos = if rest && rerun.is_none() && !disk.paused {
            Listed::Kept(disk.todos.next_due())
        } else {
            Listed::Read(disk.todos.clone())
        };
        Chamber::new(
            Loaded {
                id: c as i64 + 1,
                name: disk.name.clone(),
                started: disk.started,
                paused: disk.paused,
                archived: disk.archived,
                begun_again: false,
                last_session: last.max(from_log.unwrap_or(0)),
                last_result: rows.iter().max_by_key(|r| r.number).map(|r| r.outcome.clone()),
                last_lateness_ms: None,
                open_questions: 0,
                config: Ok(settings(disk)),
                warnings: Vec::new(),
                todos: Ok(todos),
                unread: disk.inbox.keys().cloned().collect(),
                system_tz: chrono_tz::UTC,
                // The conversation the newest session left, as cryod
                // reads it from the ledger (none if it is open).
                thread: rows.iter().max_by_key(|r| r.number).and_then(|r| r.thread.clone()),
                last_visible: None,
                rerun,
                awaiting,
                health: disk.health.clone(),
            },
            Limits { stop_grace: STOP_GRACE },
        )
    }

    fn boot_input(&self, c: usize, ended: &HashMap<String, usize>) -> Boot {
        let disk = &self.disks[c];
        Boot {
            open: (self.ledger.rows.iter().filter(|r| r.chamber == c && !r.ended))
                .map(|r| OpenSession {
                    number: r.number,
                    wake_id: r.wake_id.clone(),
                    claims: r.claims.clone(),
                    groups_ended: ended.get(&r.wake_id).copied().unwrap_or(0),
                })
                .collect(),
            batches: (self.ledger.batches.iter().filter(|b| b.chamber == c && !b.answered && !b.dropped))
                .map(|b| OpenBatch {
                    id: b.id,
                    session: b.session,
                    files: b.files.clone(),
                    archived: b.files.iter().filter(|f| disk.archive.contains_key(*f)).cloned().collect(),
                })
                .collect(),
            outgoing: outgoing(disk),
            thawed: None,
            open_unknown: false,
        }
    }

    /// After the drain, no running chamber's newest session is one cryod's
    /// own stop or death cut short: its work ran again.
    pub(super) fn reran(&self) -> Step {
        let Some(d) = &self.daemon else { return Ok(()) };
        for (c, m) in d.machines.iter().enumerate() {
            let Some(m) = m else { continue };
            let v = m.view();
            if !matches!(
                v.state,
                crate::chamber::State::Idle | crate::chamber::State::Running | crate::chamber::State::Held
            ) {
                continue;
            }
            let newest = self.ledger.rows.iter().filter(|r| r.chamber == c).max_by_key(|r| r.number);
            if let Some(r) = newest.filter(|r| r.ended && r.outcome == Outcome::Interrupted.describe()) {
                return Err(Broken(format!(
                    "chamber {c}: session {} was interrupted and its work never ran again",
                    r.number
                )));
            }
        }
        Ok(())
    }

    /// A clean stop of cryod: every session ends, then the machines exit.
    pub(super) fn shutdown(&mut self) -> Step {
        for c in 0..self.disks.len() {
            let view = self.daemon.as_ref().and_then(|d| d.machines[c].as_ref()).map(|m| (m.completed(), m.fault()));
            if let Some((completed, fault)) = view {
                self.disks[c].completed = completed;
                self.disks[c].faulted = fault.is_some();
            }
            // A frozen chamber has nothing to end (cryod sends it nothing).
            if let Some(d) = self.daemon.as_mut()
                && d.frozen[c]
            {
                d.machines[c] = None;
                continue;
            }
            self.operator(c, |req| Input::Shutdown { req })?;
        }
        let deadline = self.now + Duration::minutes(5);
        self.until(deadline)?;
        let open = self.daemon.as_ref().map(|d| d.machines.iter().flatten().count()).unwrap_or(0);
        if open > 0 {
            return Err(Broken(format!("{open} chamber(s) did not finish within five minutes of a shutdown")));
        }
        Ok(())
    }

    /// One event for a chamber, as the supervisor takes it: `todo.json` is
    /// handed over first where the input decides from it (and differs from
    /// what the machine holds), and the machine rests after.
    pub(super) fn feed(&mut self, c: usize, input: Input) -> Step {
        fn machine(w: &mut World, c: usize) -> Option<&mut Chamber> {
            w.daemon.as_mut().and_then(|d| d.machines[c].as_mut())
        }
        let held = self.daemon.as_ref().and_then(|d| d.machines[c].as_ref()).map(|m| m.todos());
        let stale = held.is_some_and(|h| h != Some(Ok(&self.disks[c].todos)));
        if Chamber::wants_list(&input) && stale {
            let list = Ok(self.disks[c].todos.clone());
            self.handle(c, Input::TodosChanged(list))?;
        }
        self.handle(c, input)?;
        if let Some(d) = self.daemon.as_ref()
            && d.arrived[c]
            && let Some(m) = d.machines[c].as_ref()
            && m.live_session().is_none()
            && !m.checking()
        {
            return Err(Broken(format!("chamber {c} holds its permit with no session and no pre-check")));
        }
        if let Some(d) = self.daemon.as_ref()
            && let Some(m) = d.machines[c].as_ref()
        {
            check::alive(c, m, d.plans[c])?;
        }
        if let Some(m) = machine(self, c) {
            let planned = m.view().next_wake;
            m.rest();
            if m.view().next_wake != planned {
                return Err(Broken(format!(
                    "chamber {c}: at rest it plans {:?}, with its list {planned:?}",
                    m.view().next_wake
                )));
            }
        }
        self.maybe_freeze(c);
        Ok(())
    }

    /// Whether chamber `c` is frozen in the live daemon.
    pub(super) fn frozen(&self, c: usize) -> bool {
        self.daemon.as_ref().is_some_and(|d| d.frozen[c])
    }

    /// As cryod's supervisor at rest (`supervisor::freeze`): a machine that
    /// may sleep, with nothing of the shell's for it (a permit, a timer, a
    /// token, a place in the queue), is let go, one time in two.
    fn maybe_freeze(&mut self, c: usize) {
        let Some(d) = self.daemon.as_ref() else { return };
        let Some(m) = d.machines[c].as_ref() else { return };
        let shell_idle = !d.slot[c]
            && !d.arrived[c]
            && d.timers[c] == 0
            && !d.frozen[c]
            && !d.queue.values().any(|&ch| ch == c)
            && !d.tokens.values().any(|&(ch, _)| ch == c);
        if shell_idle && m.may_sleep() && self.rng.one_in(2) {
            self.note(c, "FREEZE");
            self.live().frozen[c] = true;
        }
    }

    /// A frozen chamber's machine made again from the durable half, as
    /// `Daemon::thaw` does: its boot told that cryod ran all along.
    fn thaw(&mut self, c: usize) -> Step {
        self.note(c, "THAW");
        self.report.thaws += 1;
        let at_boot = self.at_boot(c);
        let machine = self.load(c, at_boot.awaiting.clone(), false);
        let d = self.live();
        d.frozen[c] = false;
        d.machines[c] = Some(machine);
        let thawed = crate::chamber::Thawed { up_since: d.since, slept: d.slept.clone() };
        let mut boot = self.boot_input(c, &HashMap::new());
        if !boot.open.is_empty() {
            return Err(Broken(format!("chamber {c} froze with session(s) open in the ledger")));
        }
        boot.thawed = Some(thawed);
        self.handle(c, Input::Boot(boot))?;
        if let Some((id, line)) = at_boot.answered
            && self.daemon.is_some()
        {
            let req = self.own_req();
            self.handle(c, Input::Answered { req, id, line })?;
        }
        Ok(())
    }

    /// Hands `input` to a chamber's machine and performs its effects depth
    /// first, as the supervisor does; cryod may crash before any effect.
    fn handle(&mut self, c: usize, input: Input) -> Step {
        if self.daemon.as_ref().is_some_and(|d| d.frozen[c]) {
            self.thaw(c)?;
        }
        let Some(d) = self.daemon.as_mut() else { return Ok(()) };
        let Some(mut machine) = d.machines[c].take() else { return Ok(()) };
        self.note(c, label(&input));
        self.show(c, "=>", &input);
        self.report.inputs += 1;
        let mut queue: VecDeque<Effect> = machine.handle(input, self.now).into();
        while let Some(effect) = queue.pop_front() {
            if self.crashes_on && self.config.crash_one_in > 0 && self.rng.one_in(self.config.crash_one_in) {
                self.crash();
                return Ok(());
            }
            self.report.effects += 1;
            self.show(c, "  <=", &effect);
            if let Effect::SaveHealth = effect {
                // Durable, as the store keeps it: the record as it is now.
                self.disks[c].health = Some(machine.health_record());
                continue;
            }
            if let Some(result) = self.perform(c, effect)? {
                self.note(c, label(&result));
                self.show(c, "  =>", &result);
                self.report.inputs += 1;
                for e in machine.handle(result, self.now).into_iter().rev() {
                    queue.push_front(e);
                }
            }
        }
        if let Some(d) = self.daemon.as_mut()
            && !machine.finished()
        {
            d.machines[c] = Some(machine);
        }
        Ok(())
    }

    /// The shell looks at the inbox before a wake, an agent's call and an exit.
    pub(super) fn observe_inbox(&mut self, c: usize) -> Step {
        let unread: Vec<String> = self.disks[c].inbox.keys().cloned().collect();
        let known = self.daemon.as_ref().and_then(|d| d.machines[c].as_ref()).map(|m| m.unread().to_vec());
        if known.is_some_and(|k| k != unread) {
            self.feed(c, Input::Inbox { unread, arrived: false })?;
        }
        Ok(())
    }

    pub(super) fn grant(&mut self) {
        let inc = self.inc();
        let Some(d) = self.daemon.as_mut() else { return };
        let mut granted = Vec::new();
        // Wakes whose every account is held wait in their places.
        let mut passed = Vec::new();
        while d.running < self.config.limit {
            let Some((key, c)) = d.queue.pop_first() else { break };
            let disk = &self.disks[c];
            let (own, fallbacks) =
                (account_name(disk.account), disk.fallback.map(account_name).into_iter().collect::<Vec<_>>());
            let held = |a: &str| self.holds.iter().any(|(k, until)| account_name(*k) == a && *until > self.now);
            let Ok(account) = crate::limits::pick_account(Some(&own), &fallbacks, held, |_| false) else {
                passed.push((key, c));
                continue;
            };
            d.billing[c] = account.and_then(|a| (0..ACCOUNTS).find(|k| account_name(*k) == a));
            d.running += 1;
            // It holds the slot from now on, though the permit is still on its way.
            d.slot[c] = true;
            granted.push(c);
        }
        d.queue.extend(passed);
        for c in granted {
            self.at(self.now, Ev::Admit { inc, chamber: c });
        }
    }

    pub(super) fn admit(&mut self, c: usize) -> Step {
        let d = self.daemon.as_mut().expect("live");
        let Some(machine) = d.machines[c].as_ref() else {
            // A gone chamber: its permit comes back.
            d.slot[c] = false;
            d.running -= 1;
            self.grant();
            return Ok(());
        };
        if machine.live_session().is_some() {
            return Err(Broken(format!("chamber {c} was given a second permit while its session runs")));
        }
        self.observe_inbox(c)?;
        if let Some(d) = self.daemon.as_mut() {
            d.arrived[c] = true;
        }
        let (nonce, token) = (self.rng.hex(6), self.rng.hex(16));
        self.feed(c, Input::Admitted { nonce, token, fresh: None })
    }
}

fn settings(d: &Disk) -> Settings {
    Settings {
        agent: "sim-agent".into(),
        timezone: d.tz,
        timezone_set: true,
        max_session_duration: SESSION_LIMIT,
        max_attempts: d.max_attempts,
        mcp: false,
        continuity: continuity(d),
        precheck: d.precheck.then(|| "./is-there-work".to_string()),
        approvals: d.approvals.then(|| Box::new(approvals::policy())),
        precheck_timeout: crate::chamber::DEFAULT_PRECHECK_TIMEOUT,
        on_end: d
            .on_end
            .iter()
            .map(|&(to, when, max_per_hour)| OnEnd { chamber: format!("c{to}"), when, message: None, max_per_hour })
            .collect(),
        expect_activity_within: Some(Duration::days(2)),
        git: d.git,
    }
}

/// A chamber's continuity: half of them resume, with caps the simulated
/// days reach.
pub(super) fn continuity(d: &Disk) -> Continuity {
    Continuity { resume: d.resume, max_age: Duration::hours(2), max_sessions: 3, max_tokens: Some(5000) }
}

/// What a chamber sent, as recovery reads it from the outbox.
fn outgoing(disk: &Disk) -> Vec<Outgoing> {
    (disk.outbox.values())
        .map(|m| Outgoing {
            session: m.meta.get("session").and_then(|s| s.parse().ok()),
            by_agent: m.from != CRYOCHAMBER,
            in_reply_to: m
                .meta
                .get("in_reply_to")
                .map(|r| r.split(' ').map(str::to_string).collect())
                .unwrap_or_default(),
        })
        .collect()
}
