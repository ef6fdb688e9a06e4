//! How the simulated world carries out the machine's effects: as cryod's
//! supervisor does, on the simulated ledger, files, processes and clock,
//! checking the invariants as it goes. Each kind of work has its method,
//! like the supervisor's (`cryod/src/supervisor/effects.rs`).

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

use super::daemon::{Daemon, continuity};
use super::{Ev, Step, World};
use crate::chamber::handoff::HandedOff;
use crate::chamber::{
    Check, Checked, Effect, Folder, Input, LogLine, Passed, Refusal, Reply, ReqId, Sig, TodoOp, TodoWriteError,
};
use crate::message::Message;
use crate::session::{Outcome, Trigger};
use crate::sim::agent::Agent;
use crate::sim::check::{self, Broken};
use crate::sim::durable::{Batch, Proc, Row};

/// A wake's ledger insert or claim fails (a full disk) this rarely.
const WRITE_FAILS_ONE_IN: u64 = 400;

impl World {
    /// Carries out one effect of chamber `c`'s machine, as the supervisor
    /// would; returns the input it answers with, if any.
    pub(super) fn perform(&mut self, c: usize, effect: Effect) -> Result<Option<Input>, Broken> {
        let inc = self.inc();
        match effect {
            // ---- schedule and admission
            Effect::Plan(at) => self.plan(c, at, inc),
            Effect::RequestAdmission(trigger) => return Ok(Some(self.request_admission(c, trigger))),
            Effect::CancelAdmission => self.live().queue.retain(|_, ch| *ch != c),
            Effect::HoldProvider { until } => self.hold_provider(c, until, inc),
            Effect::Precheck { nonce, checks, timeout } => self.precheck(c, nonce, checks, timeout),
            Effect::Release => self.release(c),
            Effect::ArmTimer { timer, after } => {
                // (The others the shell drops at a freeze; here they thaw
                // the chamber when they fire, and find its machine stale.)
                if timer.matters_at_rest() {
                    self.live().timers[c] += 1;
                }
                self.after(after, Ev::Timer { inc, chamber: c, timer })
            }
            Effect::Notify(n) => self.notify(c, n)?,
            Effect::HandOff(h) => return Ok(Some(self.hand_off(c, h)?)),
            // ---- the ledger
            Effect::RecordPassed(slots) => self.record_passed(c, slots)?,
            Effect::RecordWake(w) => return Ok(Some(self.record_wake(c, w)?)),
            Effect::SessionEnded { number, outcome, at, thread, .. } => {
                return Ok(self.session_ended(c, number, outcome, at, thread));
            }
            Effect::JournalClaim { number, names, then } => {
                return Ok(Some(self.journal_claim(c, number, names, then)));
            }
            Effect::JournalAnswer { number } => self.journal_answer(c, number),
            Effect::JournalAnswered { id } => self.ledger.batches[id as usize - 1].answered = true,
            Effect::JournalDrop { id } => self.ledger.batches[id as usize - 1].dropped = true,
            Effect::SetStarted { started, then } => return Ok(Some(self.set_flag(c, Flag::Started(started), then))),
            Effect::SetPaused { paused, then } => return Ok(Some(self.set_flag(c, Flag::Paused(paused), then))),
            Effect::SetArchived { archived, then } => {
                return Ok(Some(self.set_flag(c, Flag::Archived(archived), then)));
            }
            // ---- the chamber's files
            Effect::Reset { .. } => return Err(Broken(format!("chamber {c}: a reset nobody asked for"))),
            Effect::UpdateTodos { op, then } => return Ok(Some(self.update_todos(c, op, then)?)),
            Effect::WriteMessage { folder, message, then } => {
                let name = self.write(c, folder, message);
                return Ok(Some(Input::MessageWritten { then, result: Ok(name) }));
            }
            Effect::ArchiveInbox { names, then } => {
                let moved = self.archive_inbox(c, names);
                self.check.archived(c, &moved)?;
                return Ok(Some(Input::Archived { then, result: Ok(moved) }));
            }
            Effect::WritePlan { req, .. } => return Ok(Some(Input::PlanWritten { req, result: Ok(()) })),
            Effect::RotateLogs | Effect::Rewatch | Effect::Publish | Effect::SessionStarted { .. } => {}
            Effect::Log(line) => self.keep_log(c, line),
            // ---- processes
            Effect::RegisterToken { token, session } => _ = self.live().tokens.insert(token, (c, session)),
            Effect::RevokeToken { token } => _ = self.live().tokens.remove(&token),
            Effect::Prepare { session, wake_id } => self.prepare(c, session, wake_id, inc)?,
            Effect::Settle { session } => self.settle_worktree(c, session)?,
            Effect::Spawn { session, wake_id, token, resume, workdir, .. } => {
                // A `[git]` session works in its worktree, never elsewhere.
                if workdir.is_some() != self.disks[c].git {
                    let said = if workdir.is_some() { "in a worktree, without [git]" } else { "outside its worktree" };
                    return Err(Broken(format!("chamber {c}: session {session} spawned {said}")));
                }
                return Ok(Some(self.spawn(c, Spawned { session, wake_id, token, resume, inc })?));
            }
            Effect::Signal { pgid, sig } => self.signal(pgid, sig),
            Effect::EndLeftovers { .. } => {}
            // ---- views and callers
            // Carried out by `handle`, which holds the machine.
            Effect::SaveHealth => {}
            Effect::Reply { req, result } => self.reply(req, result)?,
        }
        Ok(None)
    }

    /// The daemon that performs effects.
    pub(super) fn live(&mut self) -> &mut Daemon {
        self.daemon.as_mut().expect("effects run in a live daemon")
    }

    /// Keeps the chamber's plan, and has the daemon wake it when it is due.
    fn plan(&mut self, c: usize, at: Option<DateTime<Utc>>, inc: u32) {
        self.live().plans[c] = at;
        if let Some(t) = at {
            self.at(t, Ev::Due { inc, chamber: c, at: t });
        }
    }

    /// Gives back the chamber's permit, if it held one, and grants those
    /// waiting for one.
    fn release(&mut self, c: usize) {
        let d = self.live();
        d.arrived[c] = false;
        if d.slot[c] {
            d.slot[c] = false;
            d.running -= 1;
        }
        self.grant();
    }

    /// Records the inbox batch a session claims; the write always succeeds.
    fn journal_claim(&mut self, c: usize, number: u64, names: Vec<String>, then: crate::chamber::AfterClaim) -> Input {
        let id = self.ledger.batches.len() as i64 + 1;
        let b = Batch { id, chamber: c, session: number, files: names.clone(), answered: false, dropped: false };
        self.ledger.batches.push(b);
        Input::Journaled { then, names, result: Ok(()) }
    }

    /// Marks every batch the session claimed answered.
    fn journal_answer(&mut self, c: usize, number: u64) {
        for b in self.ledger.batches.iter_mut().filter(|b| b.chamber == c && b.session == number) {
            b.answered = true;
        }
    }

    /// Sets one of the chamber's registry flags; the write always succeeds.
    fn set_flag(&mut self, c: usize, flag: Flag, then: crate::chamber::AfterStore) -> Input {
        let disk = &mut self.disks[c];
        match flag {
            Flag::Started(started) => disk.started = started,
            Flag::Paused(paused) => disk.paused = paused,
            Flag::Archived(archived) => disk.archived = archived,
        }
        Input::StoreWritten { then, result: Ok(()) }
    }

    /// Moves those of `names` still in the inbox to its archive; returns
    /// the names moved.
    fn archive_inbox(&mut self, c: usize, names: Vec<String>) -> Vec<String> {
        let disk = &mut self.disks[c];
        let moved: Vec<String> = names.into_iter().filter(|n| disk.inbox.contains_key(n)).collect();
        for n in &moved {
            let m = disk.inbox.remove(n).expect("present");
            disk.archive.insert(n.clone(), m);
        }
        moved
    }

    /// Appends a line to the chamber's `cryo.log`.
    fn keep_log(&mut self, c: usize, line: LogLine) {
        // Event lines are kept for scripted runs (compared with the
        // real cryo.log); random runs check only the blocks.
        if self.script.is_some() || !matches!(line, LogLine::Event(_)) {
            self.disks[c].log.push(line);
        }
    }

    /// Answers the agent that waits on the request, if one does.
    fn reply(&mut self, req: ReqId, result: Result<Reply, Refusal>) -> Step {
        if let Some(pid) = self.live().waiting.remove(&req) {
            self.agent_answer(pid, result)?;
        }
        Ok(())
    }

    /// Queues the chamber for a permit (once), and says what limits it: its
    /// budget, measured as cryod does.
    fn request_admission(&mut self, c: usize, trigger: Trigger) -> Input {
        let d = self.live();
        if !d.slot[c] {
            let old = d.queue.iter().find(|(_, ch)| **ch == c).map(|(k, _)| *k);
            match old {
                Some(k) if k.0 <= trigger => {}
                _ => {
                    if let Some(k) = old {
                        d.queue.remove(&k);
                    }
                    d.seq += 1;
                    d.queue.insert((trigger, d.seq), c);
                }
            }
            self.grant();
        }
        let budgets = self.budget_uses(c);
        // Every account it may bill is held: it waits for the first reset.
        let disk = &self.disks[c];
        let until = |k: usize| self.holds.get(&k).copied().filter(|u| *u > self.now);
        let held = match (until(disk.account), disk.fallback.map(|f| (f, until(f)))) {
            (Some(u), None) => Some((disk.account, u)),
            (Some(u), Some((f, Some(v)))) => Some(if v < u { (f, v) } else { (disk.account, u) }),
            _ => None,
        };
        let held = held.map(|(k, until)| crate::limits::AccountHold { account: format!("acct{k}"), until });
        Input::AdmissionAsked { req: self.own_req(), budgets, held }
    }

    /// The account the chamber's session billed is held until then (the
    /// longer of two holds stands); its waiting wakes go when it is over.
    fn hold_provider(&mut self, c: usize, until: DateTime<Utc>, inc: u32) {
        let account = self.daemon.as_ref().and_then(|d| d.billing[c]).unwrap_or(self.disks[c].account);
        let end = self.holds.entry(account).or_insert(until);
        *end = (*end).max(until);
        let end = *end;
        self.report.holds += 1;
        self.at(end, Ev::HoldOver { inc });
    }

    /// Each check says wake, nothing to do, or fails; it takes up to its timeout.
    fn precheck(&mut self, c: usize, nonce: String, checks: Vec<Check>, timeout: StdDuration) {
        let inc = self.inc();
        let results = checks
            .into_iter()
            .map(|k| {
                let said = match self.rng.below(20) {
                    0..=9 => Checked::Wake { output: "2 new failures".into() },
                    10..=16 => Checked::Skip { line: "nothing new".into() },
                    _ => Checked::Failed { why: "exited 2".into() },
                };
                (k, said)
            })
            .collect();
        let t = StdDuration::from_millis(self.rng.below(timeout.as_millis() as u64 / 10 + 1));
        self.after(t, Ev::Checked { inc, chamber: c, nonce, results });
    }

    /// A slot passed by never runs (and one that ran is never passed). (A
    /// missed slot is one that ran late, or one of many run as one.)
    fn record_passed(&mut self, c: usize, slots: Vec<Passed>) -> Step {
        let passed: Vec<&Passed> = slots.iter().filter(|p| p.what == "skipped").collect();
        let marks: Vec<(u64, DateTime<Utc>, u32)> = passed.iter().map(|p| (p.todo, p.due, 0)).collect();
        self.check.ran(c, "(passed by its pre-check)", &marks)?;
        self.report.passed += passed.len() as u64;
        self.report.missed += (slots.len() - passed.len()) as u64;
        if let Some(p) = slots.iter().find(|p| p.what == "missed" && p.reason.is_empty()) {
            return Err(Broken(format!("chamber {c}: TODO {} missed its slot for no reason given", p.todo)));
        }
        Ok(())
    }

    fn record_wake(&mut self, c: usize, w: crate::chamber::WakeRecord) -> Result<Input, Broken> {
        if self.crashes_on && self.rng.one_in(WRITE_FAILS_ONE_IN) {
            self.report.write_failures += 1;
            return Ok(Input::Recorded(Err("database or disk is full".into())));
        }
        self.report.wakes += 1;
        if self.ledger.rows.iter().any(|r| r.chamber == c && r.number == w.number) {
            return Err(Broken(format!("chamber {c}: session number {} recorded twice", w.number)));
        }
        self.ledger.rows.push(Row {
            chamber: c,
            number: w.number,
            wake_id: w.wake_id,
            claims: w.claims,
            ended: false,
            outcome: String::new(),
            resumed_from: w.resumed_from,
            recorded_at: self.now,
            ended_at: None,
            resumable: false,
            thread: None,
        });
        Ok(Input::Recorded(Ok(())))
    }

    fn notify(&mut self, c: usize, n: crate::chamber::notice::Notice) -> Step {
        // A budget's 80% is remembered for cryod's life (`limits::Budgets`).
        let inc = self.inc();
        let again = n.kind == "budget" && self.check.budget_told.insert(n.id.clone(), inc).is_some_and(|i| i != inc);
        if !self.check.notified.insert(n.id.clone()) && !again {
            return Err(Broken(format!("chamber {c}: the event {} was raised twice", n.id)));
        }
        if n.kind == "silent" {
            // Silent means no visible message for the whole window.
            let newest = self.disks[c].outbox.values().filter_map(|m| m.timestamp).max();
            if newest.is_some_and(|t| self.now - t < Duration::days(2)) {
                return Err(Broken(format!("chamber {c}: silent raised with a message of {newest:?} at {}", self.now)));
            }
        }
        self.report.notices += 1;
        self.report.budget_notices += u64::from(n.kind == "budget");
        Ok(())
    }

    fn hand_off(&mut self, c: usize, h: crate::chamber::handoff::HandOff) -> Result<Input, Broken> {
        let to = h.to.strip_prefix('c').and_then(|i| i.parse::<usize>().ok()).filter(|i| *i < self.disks.len());
        let Some(to) = to else {
            return Err(Broken(format!("chamber {c} handed on to an unknown chamber {:?}", h.to)));
        };
        let limit = self.disks[c].on_end.map(|o| o.2).unwrap_or(0);
        self.check.handed_off(c, to, h.session, self.now, limit)?;
        self.report.handoffs += 1;
        let from = self.disks[c].name.clone();
        let message = Message { subject: h.subject, body: h.body, ..self.message(&from, "") };
        let file = self.write(to, Folder::Inbox, message);
        let links = |name: &str| -> Vec<String> {
            let i = name.strip_prefix('c').and_then(|i| i.parse::<usize>().ok());
            i.and_then(|i| self.disks.get(i))
                .and_then(|d| d.on_end)
                .map(|o| vec![format!("c{}", o.0)])
                .unwrap_or_default()
        };
        let looped = crate::chamber::handoff::loop_through(&from, &h.to, &links);
        let done = HandedOff { file, waits: None, looped };
        Ok(Input::HandedOff { to: h.to, session: h.session, result: Ok(done) })
    }

    fn session_ended(
        &mut self,
        c: usize,
        number: u64,
        outcome: Outcome,
        at: DateTime<Utc>,
        thread: Option<crate::session::Thread>,
    ) -> Option<Input> {
        if self.disks[c].on_end.is_some_and(|o| o.1.matches(&outcome)) {
            self.check.ended_for_handoff(c, number);
        }
        if let Some(r) = self.ledger.rows.iter_mut().find(|r| r.chamber == c && r.number == number) {
            r.ended = true;
            r.outcome = outcome.describe();
            r.ended_at = Some(at);
            r.resumable = outcome.resumable();
            r.thread = thread;
        }
        // As cryod: the budgets are measured again after each session.
        let uses = self.budget_uses(c);
        (!uses.is_empty()).then(|| Input::Budget { req: self.own_req(), uses })
    }

    /// Writes `todo.json` as the shell does, done TODOs past the newest
    /// [`SIM_KEEP_DONE`] moved out (few, so that runs exercise it).
    fn update_todos(&mut self, c: usize, op: TodoOp, then: crate::chamber::AfterTodos) -> Result<Input, Broken> {
        // A wake's claim (or a skip) that cannot be written: the disk is full.
        let fails = matches!(op, TodoOp::Claim { .. } | TodoOp::Skip { .. });
        if fails && self.crashes_on && self.rng.one_in(WRITE_FAILS_ONE_IN) {
            self.report.write_failures += 1;
            let result = Err(TodoWriteError::Write("No space left on device".into()));
            return Ok(Input::TodosUpdated { then, result });
        }
        let mut list = self.disks[c].todos.clone();
        let result = match op.apply(&mut list) {
            Ok(done) => {
                // As the shell does: done work past the tail leaves the file.
                self.report.retired += list.retire(SIM_KEEP_DONE).len() as u64;
                self.report.longest_list = self.report.longest_list.max(list.items.len() as u64);
                self.check.todos_written(c, &self.disks[c].todos, &list)?;
                self.disks[c].todos = list.clone();
                Ok((done, list))
            }
            Err(e) => Err(TodoWriteError::Refused(e)),
        };
        Ok(Input::TodosUpdated { then, result })
    }

    fn spawn(&mut self, c: usize, s: Spawned) -> Result<Input, Broken> {
        let Spawned { session, wake_id, token, resume, inc } = s;
        if self.rng.one_in(300) {
            return Ok(Input::Spawned { result: Err("\"agent\" not found on PATH".into()), notes: Vec::new() });
        }
        if self.disks[c].archived || !self.disks[c].started {
            return Err(Broken(format!("chamber {c}: session {session} spawned while stopped or archived")));
        }
        self.check.spawn(c, session, &wake_id)?;
        self.check.within_budget(c, self.budget(c), self.now)?;
        let rows: Vec<&Row> = self.ledger.rows.iter().filter(|r| r.chamber == c).collect();
        check::resumed(c, session, resume.as_deref(), &rows, &continuity(&self.disks[c]), self.now)?;
        self.report.resumed += u64::from(resume.is_some());
        let conversation = resume.unwrap_or_else(|| format!("conv-{c}-{session}"));
        // The agent runs what its wake recorded (its claims reach
        // todo.json right after).
        let row = self.ledger.rows.iter().find(|r| r.wake_id == wake_id);
        let slots: Vec<(u64, DateTime<Utc>, u32)> =
            row.map(|r| r.claims.iter().map(|c| (c.id, c.due, c.attempt)).collect()).unwrap_or_default();
        self.check.ran(c, &wake_id, &slots)?;
        self.report.spawns += 1;
        // Pids start at 1, as a kernel's do (0 is "no process" to the machine).
        let pid = self.procs.len() as u32 + 1;
        let mail = !self.disks[c].inbox.is_empty();
        let recurring = self.disks[c].todos.items.iter().filter(|t| t.repeat.is_some() && !t.done).count();
        let mut agent = match self.script.as_mut() {
            Some(plans) => Agent::literal(plans.pop_front().unwrap_or_default()),
            None => Agent::new(&mut self.rng, mail, recurring),
        };
        if let Some((tool, input)) = self.answered_call(c) {
            agent.repeat(tool, input);
        }
        let p = Proc {
            pid,
            chamber: c,
            session,
            wake_id,
            token,
            inc,
            alive: true,
            agent,
            waiting: None,
            asking: None,
            conversation,
        };
        self.procs.push(p);
        let t = self.think();
        self.after(t, Ev::Step { pid });
        Ok(Input::Spawned { result: Ok(pid), notes: Vec::new() })
    }

    /// Makes the `[git]` worktree ready, after a while (a fetch), settling
    /// first a session a crash left open; one time in eight it cannot be
    /// (a lock left in it, a base gone), and the line says what to mend.
    fn prepare(&mut self, c: usize, session: u64, wake_id: String, inc: u32) -> Step {
        let disk = &mut self.disks[c];
        if !disk.git {
            return Err(Broken(format!("chamber {c}: a worktree made ready without [git]")));
        }
        let result = if self.rng.one_in(8) {
            self.report.unprepared += 1;
            Err(crate::chamber::Failed(format!(
                "git: the worktree is locked (worktree/.git/index.lock): remove it (once mended, `cryoctl chamber \
                 wake c{c}` runs a session)"
            )))
        } else {
            disk.worktree = Some(session);
            self.report.prepared += 1;
            Ok(crate::chamber::Workplace {
                dir: "worktree".into(),
                opening: format!("WORKTREE: worktree (branch cryo/c{c})\n"),
                notes: vec!["git: the worktree is ready".into()],
            })
        };
        let t = StdDuration::from_millis(self.rng.below(3000));
        self.after(t, Ev::Prepared { inc, chamber: c, wake_id, result });
        Ok(())
    }

    /// Keeps a session's work: only the session whose worktree is open.
    fn settle_worktree(&mut self, c: usize, session: u64) -> Step {
        let disk = &mut self.disks[c];
        if disk.worktree != Some(session) {
            return Err(Broken(format!(
                "chamber {c}: session {session}'s worktree settled, but the one open is {:?}",
                disk.worktree
            )));
        }
        disk.worktree = None;
        Ok(())
    }

    fn signal(&mut self, pgid: i32, sig: Sig) {
        let p = &self.procs[pgid as usize - 1];
        if p.alive {
            match sig {
                Sig::Kill => self.die(pgid as u32, "killed by signal 9"),
                Sig::Term if p.agent.obeys_term => {
                    let t = StdDuration::from_millis(self.rng.below(2000));
                    self.after(t, Ev::TermExit { pid: pgid as u32 });
                }
                Sig::Term => {}
            }
        }
    }

    /// What cryod would measure of the chamber's budget (its
    /// `daily_sessions`, against the sessions spawned this UTC day), while
    /// the world is not draining.
    fn budget_uses(&self, c: usize) -> Vec<crate::limits::BudgetUse> {
        let Some(limit) = self.budget(c) else { return Vec::new() };
        let day = self.now.format("%Y-%m-%d").to_string();
        let used = self.check.spawned_on(c, self.now.date_naive());
        vec![crate::limits::BudgetUse {
            who: "this chamber's".into(),
            key: "daily_sessions",
            limit: f64::from(limit),
            used: f64::from(used),
            period: day,
        }]
    }

    /// The chamber's `daily_sessions`; none in the drain, which lifts
    /// budgets so that all that is due runs.
    fn budget(&self, c: usize) -> Option<u32> {
        self.disks[c].daily_sessions.filter(|_| self.externals_on)
    }

    /// A request id of the daemon's own (an input that answers nobody).
    pub(super) fn own_req(&mut self) -> ReqId {
        let d = self.live();
        d.next_req += 1;
        d.next_req
    }
}

/// What [`Effect::Spawn`] carries that the world uses.
struct Spawned {
    session: u64,
    wake_id: String,
    token: String,
    resume: Option<String>,
    inc: u32,
}

/// A registry flag the machine sets (as the supervisor's `Flag`).
enum Flag {
    Started(bool),
    Paused(bool),
    Archived(bool),
}

/// Done TODOs the simulated `todo.json` keeps (`[history] keep_done`).
const SIM_KEEP_DONE: usize = 3;
