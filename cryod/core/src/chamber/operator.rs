//! Operators' requests: start, stop, remove, pause and resume, wake (with a
//! message, or replacing the session), deliver, TODO calls, the plan, and
//! shutdown; plus the files and settings that changed under the chamber.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::waking::Cut;
use super::{
    Acknowledged, AfterStore, AfterTodos, AfterWrite, Chamber, Effect, Failed, Folder, HEADER_ROOM, Refusal, Reply,
    ReqId, START_WAIT, Settings, Timer, TodoOp, WakeOutcome, first_line, missed,
};
use crate::message::{CRYOCHAMBER, MAX_MESSAGE_BYTES, Message};
use crate::session::Trigger;
use crate::todo::TodoList;

impl Chamber {
    pub(super) fn start(&mut self, req: ReqId, wait: bool, agent_check: Result<(), Failed>, log_session: u64) {
        if let Some(f) = self.fault() {
            let why = format!("{} is faulted, so it cannot start: {f}", self.name);
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        if let Err(why) = agent_check {
            return self.reply(req, Err(Refusal::Precondition(why.0)));
        }
        if self.wishes.archived() {
            let name = &self.name;
            let why = format!("{name} is archived: unarchive it first (`cryoctl chamber unarchive {name}`)");
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        if self.wishes.started() {
            // The operator has looked: what needed them is seen (and if
            // nothing would wake it now, that is said instead).
            if self.health.seen() {
                self.say_if_nothing_planned();
                self.emit(Effect::Publish);
            }
            return self.reply(req, Ok(Reply::Started(true)));
        }
        // The files may have changed since the machine was made.
        self.waking.saw_session(log_session);
        self.health.release_mail();
        self.emit(Effect::SetStarted { started: true, then: AfterStore::Started { req, wait } });
    }

    /// Started with nothing that would wake it (no work due or planned, no
    /// mail, its plan not complete: a chamber that had stopped trying,
    /// started again): never started and idle without a word. Mail wakes
    /// it; so does this line's command.
    fn say_if_nothing_planned(&mut self) {
        if self.wishes.wakes() && self.nothing_planned() {
            let name = &self.name;
            self.health.needs_unless_told(format!(
                "started with nothing planned (no TODO to come, no mail): `cryoctl chamber wake {name}` runs its \
                 agent, which plans what comes next"
            ));
        }
    }

    pub(super) fn stop(&mut self, req: ReqId, wait: bool) {
        let was_started = self.wishes.started();
        if was_started {
            self.emit(Effect::SetStarted { started: false, then: AfterStore::Stopped { req, wait, was_started } });
        } else {
            self.stopped(req, wait, was_started);
        }
    }

    pub(super) fn stopped(&mut self, req: ReqId, wait: bool, was_started: bool) {
        self.wishes.start(false);
        self.spans.open(self.now, missed::Why::Stopped);
        self.waking.unwant();
        self.drop_check();
        self.emit(Effect::CancelAdmission);
        self.emit(Effect::Plan(None));
        match self.waking.live_mut() {
            Some(l) => {
                let n = l.number;
                if wait {
                    l.stop_waiters.push(req);
                } else {
                    self.reply(req, Ok(Reply::Stopped { already: false, ended: true }));
                }
                self.end_session(n, Cut::Stop);
            }
            None => {
                self.emit(Effect::Publish);
                self.reply(req, Ok(Reply::Stopped { already: !was_started, ended: false }));
            }
        }
    }

    pub(super) fn remove(&mut self, req: ReqId) {
        self.wishes.start(false);
        self.waking.unwant();
        self.drop_check();
        self.emit(Effect::CancelAdmission);
        match self.waking.live().map(|l| l.number) {
            Some(n) => {
                self.waking.remove_when_ended(req);
                self.end_session(n, Cut::Stop);
            }
            None => {
                self.emit(Effect::Plan(None));
                self.reply(req, Ok(Reply::Done));
                self.exit();
            }
        }
    }

    /// A message from cryochamber to the operator, and a log line.
    /// What the shell found a person must mend in the chamber's files: the
    /// chamber's attention (once: the same line again changes nothing).
    pub(super) fn trouble(&mut self, line: String) {
        if self.health.trouble(line.clone()) {
            self.log(line);
        }
    }

    pub(super) fn notice_message(&mut self, subject: String, body: String) {
        self.log(format!("{subject}: {body}"));
        let message = Message {
            from: CRYOCHAMBER.into(),
            subject: subject.clone(),
            timestamp: Some(self.now),
            question: false,
            meta: BTreeMap::new(),
            body,
        };
        self.emit(Effect::WriteMessage { folder: Folder::Outbox, message, then: AfterWrite::Fallback { subject } });
    }

    /// What the shell measured of the budgets (see `Input::Budget`): the
    /// 80% notice, once per limit and period; at 100%, a pause with the
    /// reason as attention.
    pub(super) fn budget(&mut self, req: ReqId, uses: &[crate::limits::BudgetUse]) {
        let verdict = self.budgets.judge(uses, self.wishes.paused(), !self.wishes.started());
        if let Some((n, limit)) = verdict.notice.zip(verdict.noticed) {
            // One event per limit and period.
            let key = format!("80-{}", limit.replace('\'', "").replace(' ', "-"));
            self.notice("budget", &key, format!("{}: 80% of a budget used", self.name), &n);
            self.notice_message("Budget: 80% used".into(), n);
        }
        if let Some(why) = verdict.reached {
            self.log(format!("{why}: pausing the chamber"));
            self.health.needs(why);
            self.pause(req, true);
        }
    }

    /// Admission holds this chamber's wakes until `until` when its provider
    /// account is at its limit: the slots it holds up are explained, and the
    /// sender of the mail that asked is told when it will be read (once per
    /// hold).
    pub(super) fn held(&mut self, hold: Option<crate::limits::AccountHold>) {
        let until = hold.as_ref().map(|h| h.until);
        self.limit_hold = hold;
        let by_mail = self.waking.wanted().is_some_and(|(t, _)| t == Trigger::Inbox);
        let local = until.map(|u| crate::time::format_in(u, self.tz()));
        let notice = self.hold.asked(by_mail, local.as_deref());
        let (Some(until), Some(local)) = (until, local) else { return };
        // From the oldest slot it holds up (or now).
        let now = self.now;
        let from = self.list().ok().and_then(|l| l.due(now).filter_map(|t| t.at).min()).unwrap_or(now);
        self.spans.span(from, until, missed::Why::Limited(local));
        if let Some((subject, body)) = notice {
            self.notice_message(subject, body);
        }
    }

    pub(super) fn pause(&mut self, req: ReqId, pause: bool) {
        if pause && !self.wishes.started() {
            let why = format!("{} is stopped; only a started chamber can be paused", self.name);
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        if self.wishes.paused() == pause {
            self.emit(Effect::Publish);
            return self.reply(req, Ok(Reply::Paused(true)));
        }
        self.emit(Effect::SetPaused { paused: pause, then: AfterStore::Paused { req, pause } });
    }

    /// A person sets what needs them aside ([`super::Acknowledged`]).
    pub(super) fn acknowledge(&mut self, req: ReqId, until: Option<DateTime<Utc>>) {
        let name = &self.name;
        if let Some(u) = until.filter(|u| *u <= self.now) {
            let why = format!("a snooze ends ahead of now, and {} has passed", u.to_rfc3339());
            return self.reply(req, Err(Refusal::Invalid(why)));
        }
        if !self.needs_a_person() {
            let why = format!("{name} needs nothing of you now: there is nothing to acknowledge");
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        self.health.acknowledge(Acknowledged { at: self.now, until });
        self.arm_snooze_end();
        self.emit(Effect::Publish);
        self.reply(req, Ok(Reply::Acknowledged));
    }

    /// A snooze standing now ends with a word to the page (also at a boot,
    /// for one kept across the restart).
    pub(super) fn arm_snooze_end(&mut self) {
        if let Some(until) = self.health.acknowledged(self.now).and_then(|a| a.until) {
            self.arm(Timer::SnoozeEnd, (until - self.now).to_std().unwrap_or_default());
        }
    }

    /// Why a chamber cannot be archived or reset now: it must be stopped,
    /// with no session left.
    fn not_stopped(&self, what: &str) -> Option<String> {
        let name = &self.name;
        if self.wishes.started() {
            Some(format!("{name} is started: stop it before it is {what} (`cryoctl chamber stop {name}`)"))
        } else if self.waking.busy() {
            Some(format!("{name}'s last session is still ending; try again when it has"))
        } else {
            None
        }
    }

    pub(super) fn archive(&mut self, req: ReqId, archive: bool) {
        if archive && let Some(why) = self.not_stopped("archived") {
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        if self.wishes.archived() == archive {
            self.emit(Effect::Publish);
            return self.reply(req, Ok(Reply::Archived(true)));
        }
        self.emit(Effect::SetArchived { archived: archive, then: AfterStore::Archived { req, archive } });
    }

    pub(super) fn reset(&mut self, req: ReqId) {
        if let Some(why) = self.not_stopped("reset") {
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        self.emit(Effect::Reset { req });
    }

    /// The runtime files are in `history/`: the chamber begins again from
    /// its plan and config, as if new (its ledger and session numbers go on).
    pub(super) fn reset_done(&mut self, req: ReqId, result: Result<String, Failed>) {
        let dir = match result {
            Ok(dir) => dir,
            Err(e) => return self.reply(req, Err(Refusal::Internal(format!("cannot reset: {e}")))),
        };
        self.files.reset();
        self.health.reset();
        self.waking.reset();
        self.thread = None;
        self.silence.reset();
        self.wishes.begin_again();
        self.log(format!("reset by the operator: the earlier runtime files are in {dir}/"));
        // The watched folders are new ones.
        self.emit(Effect::Rewatch);
        self.emit(Effect::Publish);
        self.reply(req, Ok(Reply::Reset(dir)));
    }

    pub(super) fn store_written(&mut self, then: AfterStore, result: Result<(), Failed>) {
        if let Err(e) = result {
            let req = match then {
                AfterStore::Started { req, .. }
                | AfterStore::Stopped { req, .. }
                | AfterStore::Paused { req, .. }
                | AfterStore::Archived { req, .. } => req,
            };
            return self.reply(req, Err(Refusal::Internal(format!("cannot update the registry: {e}"))));
        }
        match then {
            AfterStore::Started { req, wait } => {
                self.wishes.start(true);
                self.spans.close(self.now, &missed::Why::Stopped);
                self.health.seen();
                self.resume();
                self.say_if_nothing_planned();
                self.emit(Effect::Publish);
                if wait && self.waking.wanted().is_some() {
                    self.waking.wait_for_start(req);
                    self.arm(Timer::StartWaitOver, START_WAIT);
                } else {
                    self.reply(req, Ok(Reply::Started(false)));
                }
            }
            AfterStore::Stopped { req, wait, was_started } => self.stopped(req, wait, was_started),
            AfterStore::Archived { req, archive } => {
                self.wishes.archive(archive);
                self.log(if archive { "archived by the operator" } else { "unarchived by the operator" });
                self.emit(Effect::Publish);
                self.reply(req, Ok(Reply::Archived(false)));
            }
            AfterStore::Paused { req, pause } => {
                self.wishes.pause(pause);
                if pause {
                    self.spans.open(self.now, missed::Why::Paused);
                } else {
                    self.spans.close(self.now, &missed::Why::Paused);
                }
                if pause {
                    self.waking.unwant();
                    self.drop_check();
                    self.emit(Effect::CancelAdmission);
                    self.emit(Effect::Plan(None));
                } else {
                    // A resume releases a budget's pause, and the operator
                    // has seen what needed them.
                    self.health.seen();
                    self.replan();
                    // Nothing would wake it (it waited for an approval that
                    // has not come): a session now, which asks again.
                    if self.wishes.wakes() && self.nothing_planned() {
                        self.waking.queue_manual();
                        self.replan();
                    }
                }
                // The caller reads the view next.
                self.emit(Effect::Publish);
                self.reply(req, Ok(Reply::Paused(false)));
            }
        }
    }

    pub(super) fn wake(&mut self, req: ReqId, message: Option<String>, replace: bool) {
        let refusal = if let Some(f) = self.fault() {
            Some(format!("{} is faulted: {f}", self.name))
        } else if !self.wishes.started() {
            Some(format!("{} is stopped: start it first (`cryoctl chamber start {}`)", self.name, self.name))
        } else if self.wishes.paused() {
            Some(format!("{} is paused: resume it first (`cryoctl chamber resume {}`)", self.name, self.name))
        } else if self.waking.replacing() {
            Some("a replacing wake is already under way".into())
        } else {
            None
        };
        if let Some(why) = refusal {
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        if replace && let Some(n) = self.waking.live().map(|l| l.number) {
            self.waking.replace(message, req);
            return self.end_session(n, Cut::Replace);
        }
        match message {
            Some(m) => match self.operator_message("operator", "", &m) {
                Ok(message) => self.emit(Effect::WriteMessage {
                    folder: Folder::Inbox,
                    message,
                    then: AfterWrite::WakeMessage { req },
                }),
                Err(e) => self.reply(req, Err(e)),
            },
            None => self.woke(req, None),
        }
    }

    pub(super) fn woke(&mut self, req: ReqId, message_file: Option<String>) {
        self.health.more_to_do();
        self.waking.queue_manual();
        let queued = self.waking.in_session();
        self.log(if queued { "operator wake: queued after the running session" } else { "operator wake" });
        self.replan();
        self.reply(req, Ok(Reply::Woke(WakeOutcome { replaced: false, queued, message_file })));
    }

    /// An operator's message for the inbox, checked.
    pub(super) fn operator_message(&self, from: &str, subject: &str, text: &str) -> Result<Message, Refusal> {
        if text.trim().is_empty() {
            return Err(Refusal::Invalid("the message is empty".into()));
        }
        let limit = MAX_MESSAGE_BYTES - HEADER_ROOM;
        if text.len() > limit {
            return Err(Refusal::Invalid(format!("the message is {} bytes, over the limit of {limit}", text.len())));
        }
        let from = if from.trim().is_empty() { "operator" } else { from };
        let subject = if subject.trim().is_empty() { first_line(text) } else { subject.to_string() };
        Ok(Message {
            from: from.to_string(),
            subject,
            timestamp: Some(self.now),
            question: false,
            meta: BTreeMap::new(),
            body: text.to_string(),
        })
    }

    pub(super) fn deliver(
        &mut self,
        req: ReqId,
        from: &str,
        subject: &str,
        text: &str,
        meta: BTreeMap<String, String>,
    ) {
        match self.operator_message(from, subject, text) {
            Ok(mut message) => {
                message.meta = meta;
                self.emit(Effect::WriteMessage { folder: Folder::Inbox, message, then: AfterWrite::Delivered { req } })
            }
            Err(e) => self.reply(req, Err(e)),
        }
    }

    pub(super) fn message_written(&mut self, then: AfterWrite, result: Result<String, Failed>) {
        match (then, result) {
            (AfterWrite::Fallback { subject }, Ok(name)) => {
                self.log(format!("cryochamber wrote: {subject} ({name})"));
                self.heard();
            }
            (AfterWrite::Fallback { .. }, Err(e)) => {
                self.health.write_failed(format!("cannot write a fallback message: {e}"));
            }
            (AfterWrite::Sent { req, reply, question, subject, body }, Ok(name)) => {
                if question {
                    self.health.asked();
                    self.notice("question", &name, format!("{} asks: {subject}", self.name), &body);
                }
                self.heard();
                if let Some(l) = self.waking.live_mut() {
                    l.sent_any = true;
                    l.unanswered.clear();
                }
                let what = if question { "send (question)" } else { "send" };
                self.log(format!("{what}: {subject}{}", if reply { " [reply]" } else { "" }));
                self.reply(req, Ok(Reply::Sent { file: format!("messages/outbox/{name}"), reply }));
            }
            (AfterWrite::Sent { req, .. }, Err(e)) => {
                self.reply(req, Err(Refusal::Internal(format!("cannot write the outbox: {e}"))));
            }
            (AfterWrite::Delivered { req }, Ok(name)) => {
                self.files.note_unread(name.clone());
                self.health.answered();
                self.on_inbox();
                let waits = self.mail_waits();
                self.reply(req, Ok(Reply::Delivered { file: format!("messages/inbox/{name}"), waits }));
            }
            (AfterWrite::WakeMessage { req }, Ok(name)) => {
                self.files.note_unread(name.clone());
                self.woke(req, Some(format!("messages/inbox/{name}")));
            }
            (AfterWrite::Replaced { req }, Ok(name)) => {
                self.files.note_unread(name.clone());
                self.waking.queue_manual();
                let out =
                    WakeOutcome { replaced: true, queued: false, message_file: Some(format!("messages/inbox/{name}")) };
                self.reply(req, Ok(Reply::Woke(out)));
                self.replan();
            }
            (AfterWrite::Delivered { req } | AfterWrite::WakeMessage { req }, Err(e)) => {
                self.reply(req, Err(Refusal::Internal(format!("cannot write the inbox: {e}"))));
            }
            (AfterWrite::Replaced { req }, Err(e)) => {
                self.reply(req, Err(Refusal::Internal(format!("cannot write the inbox: {e}"))));
                self.replan();
            }
        }
    }

    pub(super) fn write_plan(&mut self, req: ReqId, text: String) {
        if text.len() > 1024 * 1024 {
            self.reply(req, Err(Refusal::Invalid("the plan is over 1 MiB".into())));
        } else {
            self.emit(Effect::WritePlan { req, text });
        }
    }

    pub(super) fn plan_written(&mut self, req: ReqId, result: Result<(), Failed>) {
        match result {
            Ok(()) => {
                self.log("plan.md replaced by the operator");
                self.reply(req, Ok(Reply::Done));
            }
            Err(e) => self.reply(req, Err(Refusal::Internal(format!("cannot write plan.md: {e}")))),
        }
    }

    /// cryod is stopping: the running session ends first.
    pub(super) fn shutdown(&mut self, req: ReqId) {
        match self.waking.live_mut() {
            Some(l) => {
                l.shutdown_waiters.push(req);
                let n = l.number;
                self.end_session(n, Cut::Shutdown);
            }
            None => {
                self.reply(req, Ok(Reply::Done));
                self.exit();
            }
        }
    }

    /// The inbox's unread files; `arrived`: a new one among them.
    pub(super) fn inbox(&mut self, unread: Vec<String>, arrived: bool) {
        self.files.inbox_read(unread);
        if arrived {
            self.health.answered();
            self.on_inbox();
        }
    }

    pub(super) fn todos_changed(&mut self, todos: Result<TodoList, Failed>) {
        if self.files.todos_read(todos) {
            self.replan();
        }
    }

    pub(super) fn config_changed(&mut self, config: Result<Settings, Failed>, warnings: Vec<String>) {
        self.files.config_read(config, warnings);
        self.arm_silence();
        if self.files.settings().is_some() {
            self.emit(Effect::Rewatch);
        }
        self.replan();
    }

    pub(super) fn zone_changed(&mut self, zone: Tz, config: Result<Settings, Failed>, warnings: Vec<String>) {
        self.system_tz = zone;
        self.files.config_read(config, warnings);
        // Chambers on the system's zone move their cron series to the
        // new zone's wall clock.
        if self.files.settings().is_some_and(|c| !c.timezone_set) {
            let op = TodoOp::Rezone { now: self.now, tz: self.tz() };
            self.emit(Effect::UpdateTodos { op, then: AfterTodos::Rezoned });
        }
    }

    /// The machine goes to sleep or wakes up.
    pub(super) fn power(&mut self, sleeping: bool) {
        if sleeping {
            self.spans.open(self.now, missed::Why::Asleep);
        } else {
            self.spans.close(self.now, &missed::Why::Asleep);
        }
        if self.waking.in_session() {
            self.log(if sleeping { "the machine is going to sleep" } else { "the machine woke up" });
        }
        if !sleeping {
            self.replan();
        }
    }
}
