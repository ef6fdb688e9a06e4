//! A session's beginning: a permit arrives, the wake is recorded in the
//! ledger, its due TODOs are claimed, and the agent is spawned, in that
//! order, each step only after the one before it succeeded.

use std::collections::BTreeMap;
use std::time::Duration as StdDuration;

use super::waking::{Checking, Live, Phase};
use super::{
    AfterTodos, Chamber, Check, Checked, DEFAULT_PRECHECK_TIMEOUT, Effect, Failed, LogLine, Refusal, Reply, SKIP_GRACE,
    Timer, TodoDone, TodoOp, TodoWriteError, WakeRecord, missed,
};
use crate::prompt::{self, PromptInput};
use crate::session::{self, Outcome, Trigger};
use crate::todo::{Claim, TodoList};

impl Chamber {
    pub(super) fn admitted(&mut self, nonce: String, token: String, fresh: Option<String>) {
        // Admission gives a chamber one permit at a time, so none arrives
        // while a session runs (the simulator checks it); were one to, it
        // would not be this session's to give back.
        if self.waking.in_session() {
            return;
        }
        let Some((trigger, asked_at)) = self.waking.admit() else { return self.emit(Effect::Release) };
        if !self.wishes.wakes() {
            return self.emit(Effect::Release);
        }
        // Any session answers a queued operator wake; it is recorded as one.
        let trigger = if self.waking.take_manual() { Trigger::Manual } else { trigger };
        let (now, tz) = (self.now, self.tz());
        let list = match self.list() {
            Ok(l) => l.clone(),
            Err(e) => {
                self.health.result(format!("no session started: {e}"));
                return self.emit(Effect::Release);
            }
        };
        let claims = if self.health.completed() { Vec::new() } else { list.clone().claim_due(now, tz, SKIP_GRACE) };
        let demand = !claims.is_empty()
            || !self.files.unread().is_empty()
            || self.waking.reruns()
            || self.health.rework_due(now)
            || matches!(trigger, Trigger::Bootstrap | Trigger::Manual);
        // `skip` slots long past move on without a run, whether or not
        // anything else wakes the agent: a wake for other work must not leave
        // them standing, due, with nothing said.
        let skips = !list.clone().skip_missed(now, tz, SKIP_GRACE).is_empty();
        if !demand {
            // Demand-driven: nothing is due and no mail waits.
            self.emit(Effect::Release);
            if skips {
                return self.emit(Effect::UpdateTodos { op: TodoOp::Skip { now, tz }, then: AfterTodos::Skipped });
            }
            return self.replan();
        }
        if skips {
            self.emit(Effect::UpdateTodos { op: TodoOp::Skip { now, tz }, then: AfterTodos::Skipped });
        }
        // A scheduled wake (or one cryo owes since it was down) asks its
        // pre-checks first; mail, operators' wakes and reruns (whose work
        // was found before) never do.
        let asks = matches!(trigger, Trigger::Scheduled | Trigger::Recovery) && !self.waking.reruns();
        let (checks, refused) =
            if asks && self.files.unread().is_empty() { self.checks(&list, &claims) } else { Default::default() };
        let checking = Checking { nonce: nonce.clone(), token, trigger, asked_at, claims, fresh, refused };
        if !checks.is_empty() {
            let timeout = self.files.settings().map_or(DEFAULT_PRECHECK_TIMEOUT, |c| c.precheck_timeout);
            let n = checks.len();
            self.log(format!("running {n} pre-check(s) before the wake"));
            self.waking.check(checking);
            return self.emit(Effect::Precheck { nonce, checks, timeout });
        }
        self.begin(checking, Vec::new(), Vec::new());
    }

    /// The pre-checks each claim's wake must ask: a TODO's own, else the
    /// chamber's; TODOs with the same command share one run. A TODO's own
    /// (which the agent may have written, by any door: a call, `todo.json`,
    /// the journal) runs only if the chamber's `[approvals]` allows it; one
    /// it refuses does not run, and the wake goes ahead with a notice.
    fn checks(&mut self, list: &TodoList, claims: &[Claim]) -> (Vec<Check>, Vec<String>) {
        let default = self.files.settings().and_then(|c| c.precheck.clone());
        let policy = self.files.settings().and_then(|c| c.approvals.clone());
        let mut checks: Vec<Check> = Vec::new();
        let mut refused = Vec::new();
        for c in claims {
            let own = list.get(c.id).and_then(|t| t.precheck.clone());
            if let (Some(command), Some(policy)) = (&own, &policy)
                && let Some(why) = crate::approvals::precheck_refusal(policy, command)
            {
                let what = prompt::one_line(command);
                self.log(format!("TODO {}'s pre-check `{what}` was not run: {why}", c.id));
                refused.push(format!(
                    "PRE-CHECK REFUSED: TODO {}'s `{what}` did not run ({why}); this wake goes ahead without it.",
                    c.id
                ));
                continue;
            }
            let Some(command) = own.or_else(|| default.clone()) else { continue };
            match checks.iter_mut().find(|k| k.command == command) {
                Some(k) => k.todos.push(c.id),
                None => checks.push(Check { command, todos: vec![c.id] }),
            }
        }
        (checks, refused)
    }

    /// The pre-checks answered: the slots whose check said "nothing to do"
    /// pass (recorded in the ledger, nothing shown as a failure); the wake
    /// goes ahead for the rest (with the checks' output in the prompt, and
    /// a notice for a check that failed), or, if nothing is left and no
    /// mail came meanwhile, the permit goes back.
    pub(super) fn prechecked(&mut self, nonce: String, results: Vec<(Check, Checked)>) {
        let Some(c) = self.waking.checked(&nonce) else { return };
        if !self.wishes.wakes() {
            self.emit(Effect::Release);
            return self.replan();
        }
        let (now, tz) = (self.now, self.tz());
        // Each slot a check passed by, with the check's word for it.
        let mut skipped: BTreeMap<u64, String> = BTreeMap::new();
        let (mut notices, mut data) = (Vec::new(), Vec::new());
        for (check, result) in results {
            match result {
                Checked::Wake { output } if !output.trim().is_empty() => data.push((check.command, output)),
                Checked::Wake { .. } => {}
                Checked::Skip { line } => skipped.extend(check.todos.iter().map(|id| (*id, line.clone()))),
                Checked::Failed { why } => notices.push(format!(
                    "PRE-CHECK FAILED: `{}` {why}; this wake goes ahead (a failing check never holds one back).",
                    prompt::one_line(&check.command)
                )),
            }
        }
        // Passing these slots would leave the chamber nothing planned (its
        // last one-shot TODO, say): the agent runs anyway, told why, so
        // that it plans what comes next. Never silently idle.
        if !skipped.is_empty() && self.files.unread().is_empty() && self.nothing_left_after(&c.claims, &skipped) {
            let line = skipped.values().find(|l| !l.is_empty()).map(|l| format!(" ({l})")).unwrap_or_default();
            notices.push(format!(
                "PRE-CHECK: found nothing to do{line}, but this was the chamber's last planned wake: plan the \
                 next one (`cryo-agent todo add`), or end the plan with `cryo-agent hibernate --complete`."
            ));
            self.log("the pre-check found nothing to do, but the chamber has no other wake planned: the agent runs");
            skipped.clear();
        }
        let claims: Vec<Claim> = c.claims.iter().filter(|cl| !skipped.contains_key(&cl.id)).cloned().collect();
        let wakes = !claims.is_empty() || !self.files.unread().is_empty();
        if !wakes {
            // The permit goes back first: the re-plan after the slots pass
            // may ask for the next one.
            self.emit(Effect::Release);
        }
        if !skipped.is_empty() {
            for (id, line) in &skipped {
                let said = if line.is_empty() { String::new() } else { format!(": {line}") };
                self.log(format!("TODO {id} passed: its pre-check found nothing to do{said}"));
            }
            let ids = skipped.keys().copied().collect();
            self.emit(Effect::UpdateTodos { op: TodoOp::Pass { ids, now, tz }, then: AfterTodos::Passed { skipped } });
        } else if !wakes {
            self.replan();
        }
        if !wakes {
            return;
        }
        self.begin(Checking { claims, ..c }, notices, data);
    }

    /// Whether passing the `skipped` slots of a wake's `claims` (and doing the
    /// rest) would leave the chamber no TODO pending.
    fn nothing_left_after(&self, claims: &[Claim], skipped: &BTreeMap<u64, String>) -> bool {
        let Ok(list) = self.list() else { return false };
        let mut after = list.clone();
        let ids: Vec<u64> = skipped.keys().copied().collect();
        after.pass(&ids, self.now, self.tz(), SKIP_GRACE);
        let rest: Vec<Claim> = claims.iter().filter(|cl| !skipped.contains_key(&cl.id)).cloned().collect();
        after.complete(&rest);
        !after.has_pending()
    }

    /// Records the wake in the ledger and begins its session.
    fn begin(&mut self, w: Checking, mut notices: Vec<String>, data: Vec<(String, String)>) {
        let Checking { nonce, token, trigger, asked_at, claims, fresh, refused } = w;
        notices.extend(refused);
        // Once per interruption: this session is its rerun (owed until its
        // wake is recorded).
        if let Some(r) = self.waking.rerun() {
            notices.insert(0, r.notice());
        }
        let now = self.now;
        let number = self.waking.last_session().saturating_add(1);
        let wake_id = format!("w{}-{}-{}", self.id, number, nonce);
        let due = claims.iter().map(|c| c.due).min().or(Some(asked_at));
        let mut continuity = self.files.settings().map(|c| c.continuity).unwrap_or_default();
        // A person's answer to the last session's ask: this session carries
        // on in the conversation that asked, however long it waited (when
        // other sessions ran meanwhile, as the chamber resumes any other).
        let asked = self.health.last_asked();
        if let Some(answer) = self.health.take_answer() {
            notices.insert(0, answer);
            if asked {
                continuity = session::Continuity { resume: true, max_age: chrono::Duration::days(3650), ..continuity };
            }
        }
        let (resumed, fresh) = match (fresh, session::resume(&continuity, self.thread.as_ref(), now)) {
            (Some(why), _) => (None, Some(why)),
            (None, Ok(t)) => (Some(t), None),
            (None, Err(why)) => (None, why),
        };
        self.emit(Effect::RecordWake(WakeRecord {
            number,
            wake_id: wake_id.clone(),
            trigger,
            reasons: reasons(&claims, self.files.unread()),
            claims: claims.clone(),
            due_at: due,
            created_at: now,
            resumed_from: resumed.as_ref().map(|t| t.session),
        }));
        self.wishes.session_began();
        self.waking.go_live(Live {
            number,
            wake_id,
            token,
            trigger,
            phase: Phase::Recording,
            claims,
            due,
            pgid: 0,
            started_at: None,
            hibernate: None,
            refused: None,
            refused_for_mail: false,
            mail_at_start: self.files.unread().to_vec(),
            unanswered: Vec::new(),
            claimed_mail: false,
            sent_any: false,
            linger: None,
            ending: None,
            limited: None,
            over_budget: None,
            caught: None,
            parked: None,
            asking: Vec::new(),
            stop_waiters: Vec::new(),
            shutdown_waiters: Vec::new(),
            outcome: None,
            log_tail: String::new(),
            resumed,
            fresh,
            used: None,
            notices,
            data,
            workplace: None,
        });
    }

    /// The wake is in the ledger, with the claims it makes: that row is the
    /// claim's durable record, so the agent starts next, and `todo.json`
    /// shows the claims right after (`spawned`). A crash (or a power cut)
    /// between the two leaves an open wake whose claims never reached the
    /// file: the settlement makes them again first ([`TodoList::reclaim`]),
    /// so recovery re-queues them once, as it does a claim that landed.
    pub(super) fn recorded(&mut self, r: Result<(), Failed>) {
        if !self.waking.recording() {
            return;
        }
        if let Err(e) = r {
            // An operator's wake is not lost with it: asked again after the
            // retry (a first session and due work are, by `replan`).
            if self.waking.end_live().is_some_and(|l| l.trigger == Trigger::Manual) {
                self.waking.queue_manual();
            }
            self.health.result(format!("no session started: cannot record the wake: {e}"));
            self.emit(Effect::Release);
            self.hold_wakes();
            return self.replan();
        }
        self.health.wake_recorded();
        let git = self.files.settings().is_some_and(|c| c.git);
        self.waking.recorded(git);
        // Recorded: this session is the interruption's rerun, and takes up
        // a failed one's work, whatever woke it.
        self.waking.take_rerun();
        self.health.reworked();
        let l = self.waking.live().expect("live");
        if git {
            let (session, wake_id) = (l.number, l.wake_id.clone());
            return self.emit(Effect::Prepare { session, wake_id });
        }
        self.launch();
    }

    /// The worktree of a `[git]` session is ready (its agent starts in it),
    /// or cannot be made so (the session does not start, and the line says
    /// what to mend: never the user's checkout instead).
    pub(super) fn prepared(&mut self, wake_id: String, result: Result<super::Workplace, Failed>) {
        let Some(l) = self.waking.live_mut().filter(|l| l.phase == Phase::Preparing && l.wake_id == wake_id) else {
            return;
        };
        l.phase = Phase::Spawning;
        match result {
            Ok(w) => {
                l.workplace = Some(w);
                self.launch();
            }
            Err(e) => self.spawned(Err(e), Vec::new()),
        }
    }

    /// A session cut (stopped, replaced, cryod stopping) while its worktree
    /// was being made ready: it ends without an agent, at once (the
    /// preparation's answer, when it comes, finds no session to start).
    pub(super) fn cut_preparing(&mut self, session: u64, why: super::waking::Cut) -> bool {
        let Some(l) = self.waking.preparing(session) else { return false };
        l.ending = Some(why);
        l.phase = Phase::Running;
        self.emit(Effect::Log(LogLine::Begin(session)));
        self.log("ended before its agent started (its worktree was being made ready)");
        self.finalize(None, String::new(), None);
        true
    }

    /// The session's prompt, its token and its agent, in that order.
    fn launch(&mut self) {
        let l = self.waking.live().expect("live");
        let (number, trigger, wake_id, token) = (l.number, l.trigger, l.wake_id.clone(), l.token.clone());
        let list = self.list().cloned().unwrap_or_default();
        let fresh = l.fresh.iter().map(|why| format!("FRESH CONVERSATION: {why}, so this session starts a new one."));
        let notices: Vec<String> = fresh.chain(l.notices.iter().cloned()).collect();
        let prompt = prompt::build(&PromptInput {
            chamber: &self.name,
            session: number,
            now: self.now,
            tz: self.tz(),
            trigger,
            claims: &l.claims,
            mail: self.files.unread(),
            todos: &list,
            due: l.claims.iter().map(|c| c.due).min(),
            previous_failure: self.health.previous_failure(),
            note: None,
            mcp: self.files.settings().is_some_and(|c| c.mcp),
            resumed_from: l.resumed.as_ref().map(|t| t.session),
            notices: &notices,
            data: &l.data,
        });
        let resume = l.resumed.as_ref().map(|t| t.conversation.clone());
        let (prompt, workdir) = match &l.workplace {
            Some(w) => (format!("{}{prompt}", w.opening), Some(w.dir.clone())),
            None => (prompt, None),
        };
        // Nothing but the spawn stands between the record and the agent: its
        // log block begins, and its claims are written, once it runs.
        self.emit(Effect::RotateLogs);
        // The token is valid before the agent exists: a fast agent calls
        // cryo-agent at once.
        self.emit(Effect::RegisterToken { token: token.clone(), session: number });
        self.emit(Effect::Spawn { session: number, wake_id, token, prompt, resume, workdir });
    }

    /// The claims are in `todo.json` (or could not be written: then the
    /// session's settlement makes them, from the ledger's record).
    pub(super) fn claimed(&mut self, result: Result<(TodoDone, TodoList), TodoWriteError>) {
        if let Err(r) = self.todos_written(result, |e| Refusal::Internal(e.to_string())) {
            self.log(format!(
                "cannot write the claims to todo.json: {}; they are settled at the session's end",
                r.text()
            ));
        }
    }

    pub(super) fn spawned(&mut self, r: Result<u32, Failed>, notes: Vec<String>) {
        let now = self.now;
        let tz = self.tz();
        let Some(l) = self.waking.live().filter(|l| l.phase == Phase::Spawning) else { return };
        let number = l.number;
        let why = reasons(&l.claims, self.files.unread());
        let trigger =
            format!("trigger: {} ({})", l.trigger.as_str(), if why.is_empty() { "-".into() } else { why.join(", ") });
        let claim = TodoOp::Claim { wake: l.wake_id.clone(), ids: l.claims.iter().map(|c| c.id).collect(), now, tz };
        let prepared = l.workplace.as_ref().map(|w| w.notes.clone()).unwrap_or_default();
        self.emit(Effect::Log(LogLine::Begin(number)));
        self.log(trigger);
        for note in prepared.into_iter().chain(notes) {
            self.log(note);
        }
        let l = self.waking.live().expect("live");
        let said = match &l.resumed {
            Some(t) => Some(format!(
                "continuing the conversation of session {} ({} session(s) in it so far)",
                t.session, t.sessions
            )),
            None => l.fresh.as_ref().map(|why| format!("a new conversation: {why}")),
        };
        if let Some(said) = said {
            self.log(said);
        }
        let l = self.waking.live_mut().expect("live");
        match r {
            Ok(pid) => {
                l.phase = Phase::Running;
                l.pgid = pid as i32;
                l.started_at = Some(now);
                let (due, trigger) = (l.due, l.trigger);
                let claims = l.claims.clone();
                self.health.started_late(due, now);
                self.emit(Effect::SessionStarted { number, pid, at: now, trigger, due });
                self.missed_in(number, &claims);
                self.spans.open(now, missed::Why::Busy(number));
                self.log(format!("agent started (pid {pid})"));
                for w in self.waking.take_start_waiters() {
                    self.reply(w, Ok(Reply::Started(false)));
                }
                let limit = self.files.settings().map_or(0, |c| c.max_session_duration);
                if limit > 0 {
                    self.arm(Timer::Timeout(number), StdDuration::from_secs(limit));
                }
                self.emit(Effect::UpdateTodos { op: claim, then: AfterTodos::Claimed });
            }
            Err(e) => {
                l.phase = Phase::Running;
                for w in self.waking.take_start_waiters() {
                    let why = format!("the agent could not start: {e}");
                    self.reply(w, Err(Refusal::Precondition(why)));
                }
                self.log(format!("agent could not start: {e}"));
                self.health.needs(format!("the agent could not start: {e}"));
                self.finalize_with(Outcome::Crashed(format!("could not start: {e}")), None, String::new());
            }
        }
    }
}

/// Why a wake runs: `todo:ID` for each claim, `mail:NAME` for each unread
/// message, as many as a prompt lists, then `mail:+N more` (a thousand
/// unread names would make every ledger row and log line 50 KB).
fn reasons(claims: &[Claim], unread: &[String]) -> Vec<String> {
    let todos = claims.iter().map(|c| format!("todo:{}", c.id));
    let listed = unread.len().min(crate::prompt::MAX_LISTED_MAIL);
    let mail = unread[..listed].iter().map(|m| format!("mail:{m}"));
    let more = (unread.len() > listed).then(|| format!("mail:+{} more", unread.len() - listed));
    todos.chain(mail).chain(more).collect()
}

#[cfg(test)]
mod reason_tests {
    use super::*;

    #[test]
    fn a_wake_names_as_many_messages_as_a_prompt_and_counts_the_rest() {
        let unread: Vec<String> = (0..1000).map(|i| format!("m{i}.md")).collect();
        let why = reasons(&[], &unread);
        assert_eq!(why.len(), crate::prompt::MAX_LISTED_MAIL + 1);
        assert_eq!(why[0], "mail:m0.md");
        assert_eq!(why.last().unwrap(), &format!("mail:+{} more", 1000 - crate::prompt::MAX_LISTED_MAIL));
        assert_eq!(reasons(&[], &unread[..3]), ["mail:m0.md", "mail:m1.md", "mail:m2.md"]);
    }
}
