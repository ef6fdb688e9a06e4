//! A session's middle: each `cryo-agent` call (hibernate through the gate,
//! send, receive with the claim journal, dialog, TODOs), and the cuts
//! (timeout, stop, shutdown, replace, after-hibernate) with their signals.

use std::collections::BTreeMap;
use std::time::Duration as StdDuration;

use super::{
    AFTER_HIBERNATE, AfterClaim, AfterTodos, AfterWrite, By, Call, Chamber, DIALOG_LAST, Effect, Failed, Folder,
    HEADER_ROOM, MAX_LINGER_SECS, Passed, Refusal, Reply, ReqId, SKIP_GRACE, Timer, TodoCall, TodoDone, TodoOp,
    TodoWhat, TodoWriteError, claim_req, first_line,
};
use crate::hibernate::{self, Ending, Gate, GateInput};
use crate::message::{MAX_MESSAGE_BYTES, Message};
use crate::todo::{Missed, NewTodo, TodoError, TodoList};

impl Chamber {
    pub(super) fn agent_call(&mut self, req: ReqId, call: Call) {
        match call {
            Call::Hibernate { summary, complete, exit_code, linger_secs } => {
                self.hibernate(req, summary, complete, exit_code, linger_secs)
            }
            Call::Send { text, question, subject } => self.send(req, text, question, subject),
            Call::Receive => self.claim_inbox(AfterClaim::Receive(req)),
            Call::Dialog { last, all } => {
                // `--last` unset: the last 20 messages.
                let last = if last == 0 { DIALOG_LAST } else { last };
                self.claim_inbox(AfterClaim::Dialog { req, last, all })
            }
            Call::Todo(call) => self.todo_call(req, call, By::Agent),
        }
    }

    /// `look` at the list as the live session's claims leave it. They are
    /// written once the agent runs, and when `todo.json` cannot take them
    /// (a planted journal, a full disk) they are made at the session's end
    /// from the ledger: the session's own wake is neither due work nor its
    /// next wake meanwhile.
    fn with_own_claims<T>(&self, list: &TodoList, look: impl Fn(&TodoList) -> T) -> T {
        let now = self.now;
        let Some(l) = self.waking.live() else { return look(list) };
        let ids: Vec<u64> = l.claims.iter().map(|c| c.id).collect();
        let claimed: std::collections::HashSet<u64> = ids.iter().copied().collect();
        if !list.due(now).any(|t| claimed.contains(&t.id)) {
            return look(list);
        }
        let mut claimed = list.clone();
        claimed.claim_for(&l.wake_id, &ids, now, self.tz(), SKIP_GRACE);
        look(&claimed)
    }

    pub(super) fn hibernate(&mut self, req: ReqId, summary: String, complete: bool, exit_code: i32, linger: u32) {
        let now = self.now;
        let (has_next_wake, due_now) = match self.list() {
            Ok(t) => self.with_own_claims(t, |t| (t.has_pending(), t.due(now).count())),
            Err(e) => {
                let why = format!("todo.json cannot be read, so hibernate cannot check it: {e}");
                return self.reply(req, Err(Refusal::Precondition(why)));
            }
        };
        let unread = self.files.unread().len();
        let came_late = |l: &super::waking::Live| self.files.unread().iter().any(|m| !l.mail_at_start.contains(m));
        let late = self.waking.live().is_some_and(came_late);
        match hibernate::gate(&GateInput { unread, has_next_wake, due_now, complete, exit_code }) {
            Gate::Refuse(why) => {
                self.log(format!("hibernate refused: {why}"));
                if let Some(l) = self.waking.live_mut() {
                    l.refused = Some(why.clone());
                    // Only mail that arrived during the session: mail it
                    // was woken for and never read is its own failure.
                    l.refused_for_mail = late;
                }
                self.reply(req, Err(Refusal::Precondition(why)));
            }
            Gate::Accept(ending) => {
                let l = self.waking.live_mut().expect("agent calls come from a live session");
                l.hibernate = Some((ending, summary.clone()));
                let number = l.number;
                let lingering = linger > 0 && !matches!(ending, Ending::Failure(_));
                let what = match ending {
                    Ending::Hibernate => "hibernate accepted".to_string(),
                    Ending::Complete => "hibernate --complete accepted".to_string(),
                    Ending::Failure(n) => format!("hibernate --exit {n} accepted"),
                };
                let summary_text = if summary.is_empty() { String::new() } else { format!(": {summary}") };
                self.log(format!("{what}{summary_text}"));
                if lingering {
                    let secs = linger.min(MAX_LINGER_SECS);
                    self.log(format!("lingering up to {secs}s for new mail"));
                    self.waking.live_mut().expect("live").linger = Some(req);
                    return self.arm(Timer::LingerDone(number), StdDuration::from_secs(u64::from(secs)));
                }
                self.arm(Timer::AfterHibernate(number), AFTER_HIBERNATE);
                let text = self.hibernate_message(Some(ending));
                self.reply(req, Ok(Reply::Hibernate(text)));
            }
        }
    }

    pub(super) fn hibernate_message(&self, ending: Option<Ending>) -> String {
        match ending {
            Some(Ending::Complete) => "hibernating: plan complete; the chamber sleeps until a message arrives".into(),
            Some(Ending::Failure(n)) => {
                format!("hibernating after failure (exit {n}): cryo will retry and tell the operator")
            }
            _ => match self.next_todo() {
                Some(t) => format!("hibernating: next wake at {}", crate::time::format_in(t, self.tz())),
                None => "hibernating".into(),
            },
        }
    }

    pub(super) fn linger_done(&mut self, session: u64) {
        let Some(l) = self.waking.live_mut().filter(|l| l.number == session) else { return };
        if let Some(req) = l.linger.take() {
            let ending = l.hibernate.as_ref().map(|h| h.0);
            let text = self.hibernate_message(ending);
            self.reply(req, Ok(Reply::Hibernate(text)));
            self.log("linger expired: hibernating");
            self.arm(Timer::AfterHibernate(session), AFTER_HIBERNATE);
        }
    }

    pub(super) fn send(&mut self, req: ReqId, text: String, question: bool, subject: String) {
        if text.trim().is_empty() {
            return self.reply(req, Err(Refusal::Invalid("the message is empty".into())));
        }
        let limit = MAX_MESSAGE_BYTES - HEADER_ROOM;
        if text.len() > limit {
            return self.reply(
                req,
                Err(Refusal::Invalid(format!(
                    "the message is {} bytes, over the limit of {limit}: put long output in a file under messages/attachments/ and send its name",
                    text.len()
                ))),
            );
        }
        let l = self.waking.live().expect("agent calls come from a live session");
        let mut meta = BTreeMap::new();
        meta.insert("session".to_string(), l.number.to_string());
        let reply = !l.unanswered.is_empty();
        if reply {
            meta.insert("in_reply_to".to_string(), l.unanswered.join(" "));
        }
        let subject = if subject.trim().is_empty() { first_line(&text) } else { subject };
        let body = if question { text.chars().take(2000).collect() } else { String::new() };
        let message = Message {
            from: self.name.clone(),
            subject: subject.clone(),
            timestamp: Some(self.now),
            question,
            meta,
            body: text,
        };
        let then = AfterWrite::Sent { req, reply, question, subject, body };
        self.emit(Effect::WriteMessage { folder: Folder::Outbox, message, then });
    }

    /// Claims the inbox: the batch is journaled (durably) before its files
    /// move to the archive, so a crash can never lose the duty to answer it.
    pub(super) fn claim_inbox(&mut self, then: AfterClaim) {
        if self.files.unread().is_empty() {
            return self.claim_answered(then, 0);
        }
        let number = self.waking.live().expect("live").number;
        self.emit(Effect::JournalClaim { number, names: self.files.unread().to_vec(), then });
    }

    pub(super) fn archived(&mut self, then: AfterClaim, result: Result<Vec<String>, Failed>) {
        match result {
            Ok(names) => {
                // What did not move (rejected, vanished) is no longer unread either.
                self.files.inbox_claimed(&names);
                self.log(format!("receive: {} message(s): {}", names.len(), names.join(", ")));
                let count = names.len() as u32;
                if let Some(l) = self.waking.live_mut() {
                    l.unanswered.extend(names.iter().cloned());
                    l.claimed_mail = true;
                }
                match then {
                    AfterClaim::Receive(req) => self.reply(req, Ok(Reply::Mail(names))),
                    AfterClaim::Dialog { .. } => self.claim_answered(then, count),
                }
            }
            Err(e) => {
                let req = claim_req(then);
                self.reply(req, Err(Refusal::Internal(format!("cannot archive the inbox: {e}"))));
            }
        }
    }

    pub(super) fn claim_answered(&mut self, then: AfterClaim, claimed: u32) {
        match then {
            AfterClaim::Receive(req) => self.reply(req, Ok(Reply::Mail(Vec::new()))),
            AfterClaim::Dialog { req, last, all } => self.reply(req, Ok(Reply::Dialog { claimed, last, all })),
        }
    }

    pub(super) fn todo_call(&mut self, req: ReqId, call: TodoCall, by: By) {
        let (now, tz) = (self.now, self.tz());
        let (op, what) = match call {
            TodoCall::Add { text, at, every, cron, missed, precheck } => {
                let at = match at.trim() {
                    "" if every.is_empty() && cron.is_empty() => {
                        let why = "give a time with --at (or --every / --cron for a repeating TODO)";
                        return self.reply(req, Err(Refusal::Invalid(why.into())));
                    }
                    "" => None,
                    s => match crate::time::parse_time(s, now, tz) {
                        // A time long gone is a mistake (a wrong year, a
                        // stale date), not a wake to run at once.
                        Ok(t) if now - t > crate::todo::PAST_GRACE => {
                            let (at, ago) = (crate::time::format_in(t, tz), crate::time::humanize(now - t));
                            let e = crate::todo::TodoError::InThePast { at, ago };
                            return self.reply(req, Err(Refusal::Invalid(e.to_string())));
                        }
                        Ok(t) => Some(t),
                        Err(e) => return self.reply(req, Err(Refusal::Invalid(e.to_string()))),
                    },
                };
                let missed = match missed.as_str() {
                    "" | "once" => Missed::Once,
                    "skip" => Missed::Skip,
                    other => {
                        let why = format!("--missed must be once or skip, not {other:?}");
                        return self.reply(req, Err(Refusal::Invalid(why)));
                    }
                };
                // A pre-check runs a command: judged as one, under
                // `[approvals]`, whoever asks (the same rule holds for one
                // written into `todo.json` or its journal, at the wake).
                if !precheck.trim().is_empty() {
                    let why = match self.files.settings() {
                        None => Some("cryo.toml does not load now, so no pre-check is set".to_string()),
                        Some(s) => s.approvals.as_ref().and_then(|p| crate::approvals::precheck_refusal(p, &precheck)),
                    };
                    if let Some(why) = why {
                        let what = crate::prompt::one_line(&precheck);
                        self.log(format!("approval: a TODO's pre-check `{what}` refused: {why}"));
                        return self.reply(req, Err(Refusal::Precondition(why)));
                    }
                }
                let opt = |s: String| (!s.trim().is_empty()).then_some(s);
                let new = NewTodo { text, at, every: opt(every), cron: opt(cron), missed, precheck: opt(precheck) };
                (TodoOp::Add { new, now, tz, by_agent: by == By::Agent }, TodoWhat::Add)
            }
            TodoCall::List => {
                let r = match self.list() {
                    Ok(l) => Ok(Reply::Todos { todos: l.items.clone(), tz }),
                    Err(e) => Err(Refusal::Precondition(e.0)),
                };
                return self.reply(req, r);
            }
            TodoCall::Done(id) => (TodoOp::Done(id), TodoWhat::Done(id)),
            TodoCall::Remove(id) => (TodoOp::Remove(id), TodoWhat::Remove(id)),
        };
        self.emit(Effect::UpdateTodos { op, then: AfterTodos::Call { req, by, what } });
    }

    pub(super) fn todo_called(
        &mut self,
        req: ReqId,
        by: By,
        what: TodoWhat,
        result: Result<(TodoDone, TodoList), TodoWriteError>,
    ) {
        let refused = |e: TodoError| match (what, e) {
            (TodoWhat::Add, e) => Refusal::Invalid(e.to_string()),
            (_, e @ TodoError::NotFound(_)) => Refusal::NotFound(e.to_string()),
            (_, e) => Refusal::Precondition(e.to_string()),
        };
        let tz = self.tz();
        match (self.todos_written(result, refused), what) {
            (Err(e), _) => self.reply(req, Err(e)),
            (Ok(TodoDone::Added(todo)), _) => {
                let at = todo.at.map(|a| crate::time::format_in(a, tz)).unwrap_or_default();
                self.log(format!("todo add {} by {}: {} (at {at})", todo.id, by.as_str(), todo.text));
                self.replan();
                self.reply(req, Ok(Reply::Todos { todos: vec![todo], tz }));
            }
            (Ok(_), TodoWhat::Done(id) | TodoWhat::Remove(id)) => {
                let verb = if matches!(what, TodoWhat::Done(_)) { "done" } else { "remove" };
                self.log(format!("todo {verb} {id} by {}", by.as_str()));
                self.replan();
                let todos = self.list().map(|l| l.items.clone()).unwrap_or_default();
                self.reply(req, Ok(Reply::Todos { todos, tz }));
            }
            (Ok(_), TodoWhat::Add) => self.reply(req, Err(Refusal::Internal("unexpected answer to an add".into()))),
        }
    }

    pub(super) fn todos_updated(&mut self, then: AfterTodos, result: Result<(TodoDone, TodoList), TodoWriteError>) {
        match then {
            AfterTodos::Claimed => self.claimed(result),
            AfterTodos::Settled => self.settled(result),
            AfterTodos::Recovered(r) => self.recovered(r, result),
            AfterTodos::Call { req, by, what } => self.todo_called(req, by, what, result),
            AfterTodos::Passed { skipped } => {
                match self.todos_written(result, |e| Refusal::Internal(e.to_string())) {
                    // What did pass (a slot edited away meanwhile did not) goes into the ledger.
                    Ok(TodoDone::Passed(done)) if !done.is_empty() => {
                        let slots = done
                            .into_iter()
                            .map(|d| Passed {
                                reason: skipped.get(&d.id).cloned().unwrap_or_default(),
                                due: d.due,
                                todo: d.id,
                                text: d.text,
                                what: "skipped",
                            })
                            .collect();
                        self.emit(Effect::RecordPassed(slots));
                    }
                    Ok(_) => {}
                    Err(_) => {
                        // They stay due: not again before a minute has passed.
                        self.log("cannot write todo.json: the passed slots come due again");
                        self.hold_wakes();
                    }
                }
                if !self.waking.in_session() {
                    self.replan();
                }
            }
            AfterTodos::Released { shown, count } => {
                let (s, were) = if count == 1 { ("", "was") } else { ("s", "were") };
                match self.todos_written(result, |e| Refusal::Internal(e.to_string())) {
                    Ok(_) => {
                        self.log(format!(
                            "TODO{s} {shown} {were} claimed by a wake no open session holds (its settlement never \
                             written, or a claim made by hand): re-queued, to run again"
                        ));
                        if !self.waking.in_session() {
                            self.replan();
                        }
                    }
                    // Left as they were: the next start tries again.
                    Err(e) => self.log(format!(
                        "TODO{s} {shown} {were} claimed by a wake no open session holds, and cannot be re-queued: {}",
                        e.text()
                    )),
                }
            }
            AfterTodos::Skipped => {
                // Beside a wake that went ahead, the session's end re-plans
                // (and a write that failed is tried again at the next wake).
                let beside = self.waking.in_session() || self.waking.checking();
                match self.todos_written(result, |e| Refusal::Internal(e.to_string())) {
                    Ok(TodoDone::Skipped(moved)) => self.skipped(&moved),
                    Ok(_) => {}
                    Err(_) if !beside => self.hold_wakes(),
                    Err(_) => {}
                }
                if !beside {
                    self.replan();
                }
            }
            AfterTodos::Rezoned => {
                let _ = self.todos_written(result, |e| Refusal::Internal(e.to_string()));
                let zone = self.tz().name().to_string();
                self.log(format!("the system's time zone is now {zone}: re-planned"));
                self.replan();
            }
        }
    }

    /// The claim is journaled: its files move to the archive.
    pub(super) fn journaled(&mut self, then: AfterClaim, names: Vec<String>, result: Result<(), Failed>) {
        match result {
            Ok(()) => self.emit(Effect::ArchiveInbox { names, then }),
            Err(e) => {
                let req = claim_req(then);
                self.reply(req, Err(Refusal::Internal(format!("cannot journal the claim: {e}"))));
            }
        }
    }
}
