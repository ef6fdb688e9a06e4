//! A session's end: the outcome, the settlement of its claims, the
//! fallback messages, the ledger and the log, the permit given back, and
//! the re-plan.

use std::collections::BTreeMap;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};

use super::waking::{Cut, Live, Phase};
use super::{
    AfterTodos, AfterWrite, Chamber, Effect, Folder, LogLine, QUICK_EXIT, Refusal, Reply, ReqId, Rerun, Sig,
    TAIL_CHARS, TAIL_LINES, Timer, TodoDone, TodoOp, TodoWriteError, WakeOutcome, ids_text, missed,
};
use crate::message::{CRYOCHAMBER, Message};
use crate::session::{self, Conversation, Outcome};
use crate::todo::{self, Settle, TodoList};

impl Chamber {
    /// Ends the live session from outside: SIGTERM to its group, SIGKILL
    /// after the grace period.
    pub(super) fn end_session(&mut self, session: u64, why: Cut) {
        let grace = match why {
            Cut::Shutdown => self.limits.stop_grace.min(StdDuration::from_secs(3)),
            _ => self.limits.stop_grace,
        };
        if self.cut_preparing(session, why) {
            return;
        }
        let Some(l) = self.waking.running(session) else { return };
        if why == Cut::Timeout && l.hibernate.is_some() {
            return;
        }
        if l.ending.is_none() || matches!(why, Cut::Stop | Cut::Shutdown | Cut::Replace) {
            l.ending = Some(why);
        }
        let linger = l.linger.take();
        let (pgid, looping) = (l.pgid, matches!(l.caught, Some(session::Caught::Looping { .. })));
        if let Some(req) = linger {
            self.reply(req, Err(Refusal::Precondition("the session is ending".into())));
        }
        self.log(match why {
            Cut::Timeout => "session timed out: ending the agent",
            Cut::Stop => "stopped by the operator: ending the agent",
            Cut::Shutdown => "cryod is shutting down: ending the agent",
            Cut::AfterHibernate => "agent did not exit after hibernating: ending it",
            Cut::Replace => "replaced by the operator's wake: ending the agent",
            Cut::Limit => "the provider's limit was reached: ending the agent (it would only wait)",
            Cut::OverBudget => "the session went over max_session_usd: ending the agent",
            Cut::Caught if looping => "the agent repeats one tool call (loop_after): ending it",
            Cut::Caught => "no model request and no agent event for stall_after: ending the agent",
            Cut::Approval => "the session waits for a person's approval: ending the agent",
        });
        if pgid > 0 {
            self.emit(Effect::Signal { pgid, sig: Sig::Term });
        }
        self.arm(Timer::Kill(session), grace);
    }

    pub(super) fn finalize(&mut self, status: Option<String>, log_tail: String, limited: Option<DateTime<Utc>>) {
        let tz = self.tz();
        let Some(l) = self.waking.live() else { return };
        let limited = limited.or(l.limited);
        let outcome = match (l.ending, &l.hibernate, limited) {
            (Some(Cut::Stop | Cut::Replace), ..) => Outcome::Stopped,
            // Its request waits, whatever it did after asking.
            _ if l.parked.is_some() => {
                let (id, what, _) = l.parked.clone().expect("checked");
                Outcome::AwaitingApproval { id, what }
            }
            (Some(Cut::OverBudget), None, _) => {
                let until = l.over_budget.unwrap_or(self.now);
                Outcome::OverBudget { until, local: crate::time::format_in(until, tz) }
            }
            (Some(Cut::Shutdown), None, _) => Outcome::Interrupted,
            (_, Some((ending, _)), _) => Outcome::Hibernated(*ending),
            // The provider refused: not the agent's failure, whatever its exit.
            (_, None, Some(until)) => Outcome::Limited { until, local: crate::time::format_in(until, tz) },
            (Some(Cut::Caught), None, None) if l.caught.is_some() => {
                Outcome::Caught(l.caught.clone().expect("checked"))
            }
            (Some(Cut::Timeout), None, None) => Outcome::TimedOut,
            (_, None, None) => {
                let status = status.clone().unwrap_or_else(|| "no exit status".into());
                if l.refused_for_mail {
                    // Mail came as it ended: its work stands; the next
                    // session reads the mail, at once.
                    Outcome::MailArrived(status)
                } else if status == "exit 0" {
                    Outcome::NoHibernate(status)
                } else {
                    Outcome::Crashed(status)
                }
            }
        };
        self.finalize_with(outcome, status, log_tail);
    }

    /// The first half of a session's end: the token goes, leftovers of its
    /// group are ended, and its claims are settled in `todo.json`; the rest
    /// follows when the settlement is written ([`Chamber::settled`]).
    pub(super) fn finalize_with(&mut self, outcome: Outcome, status: Option<String>, log_tail: String) {
        let (now, max_attempts, tz) = (self.now, self.files.max_attempts(), self.tz());
        let Some(l) = self.waking.live_mut() else { return };
        l.phase = Phase::Settling;
        l.log_tail = log_tail;
        let how = match &outcome {
            Outcome::Stopped | Outcome::Interrupted | Outcome::AwaitingApproval { .. } => Settle::Requeue { now },
            // It asked to hibernate, refused only for mail that came late.
            Outcome::MailArrived(_) => Settle::Complete,
            Outcome::Limited { until, .. } | Outcome::OverBudget { until, .. } => Settle::Defer { until: *until },
            o if o.failed() => Settle::Fail { now, max_attempts },
            _ => Settle::Complete,
        };
        l.outcome = Some(outcome);
        let (token, pgid, number) = (l.token.clone(), l.pgid, l.number);
        // What it did in its worktree is kept (its agent has exited).
        let settle = l.workplace.is_some();
        let op = TodoOp::Settle { wake: l.wake_id.clone(), claims: l.claims.clone(), how, now, tz };
        self.emit(Effect::RevokeToken { token });
        if pgid > 0 {
            // Leftover children (an agent's background jobs) end with the session.
            self.emit(Effect::EndLeftovers { pgid });
        }
        if let Some(s) = status {
            self.log(format!("agent exited: {s}"));
        }
        if settle {
            self.emit(Effect::Settle { session: number });
        }
        self.emit(Effect::UpdateTodos { op, then: AfterTodos::Settled });
    }

    /// What a failed session's end most likely means, in one sentence that
    /// says what to do, if there is more to say than its outcome.
    fn what_happened(&self, outcome: &Outcome, l: &Live) -> Option<String> {
        let quick = l.started_at.is_none_or(|s| self.now - s < QUICK_EXIT);
        match outcome {
            Outcome::TimedOut => {
                let limit = self.files.settings().map(|c| c.max_session_duration).unwrap_or_default();
                Some(format!(
                    "The session ran past its time limit (max_session_duration = {limit} seconds) and was ended. \
                     Raise `max_session_duration` in cryo.toml if its work needs longer, or have the agent split it."
                ))
            }
            Outcome::Caught(session::Caught::Stalled { idle_secs }) => Some(format!(
                "The agent made no model request and showed no event for {} and was ended (`stall_after` in \
                 cryo.toml). If its work is that quiet (a long build, a download), raise `stall_after`; else read \
                 what it was doing: `cryoctl chamber log {} --agent`.",
                crate::time::humanize(chrono::Duration::seconds(*idle_secs as i64)),
                self.name
            )),
            Outcome::Caught(session::Caught::Looping { call, times }) => Some(format!(
                "The agent made the same call {times} times in a row ({call}) and was ended (`loop_after` in \
                 cryo.toml). Read its transcript, `cryoctl chamber log {} --agent`; raise `loop_after` if the \
                 repeats were meant.",
                self.name
            )),
            Outcome::NoHibernate(how) => Some(match &l.refused {
                Some(why) => format!(
                    "The agent ended ({how}) after its hibernate was refused ({why}), without doing what the \
                     refusal says: a session ends only with an accepted `cryo-agent hibernate`."
                ),
                None => format!(
                    "The agent ended ({how}) without `cryo-agent hibernate`: a session ends only with it (the \
                     protocol in its prompt says so; plan.md can say it again)."
                ),
            }),
            Outcome::Crashed(how) => match (&l.refused, how.as_str()) {
                // It was told why and left anyway: the agent's doing.
                (Some(why), _) => Some(format!(
                    "The agent exited ({how}) after its hibernate was refused ({why}), without a hibernate that \
                     was accepted. Its protocol (plan.md, the prompt) must have it do what the refusal says first."
                )),
                (None, "exit 127") => Some(
                    "The agent's command was not found (exit 127): check `agent` in cryo.toml, and that its program \
                     is on cryod's PATH (`cryoctl doctor` checks)."
                        .into(),
                ),
                (None, "exit 126") => Some(
                    "The agent's command could not be run (exit 126: not executable, or refused by its sandbox): \
                     check `agent` in cryo.toml and the file's permissions."
                        .into(),
                ),
                // The start's own line (the chamber's attention) says it.
                (None, h) if h.starts_with("could not start") => None,
                (None, _) if quick => Some(format!(
                    "The agent exited within {} seconds without hibernating ({how}): likely a misconfiguration \
                     (agent command, API key, permissions). Check `agent` in cryo.toml and cryo-agent.log.",
                    QUICK_EXIT.num_seconds()
                )),
                _ => None,
            },
            _ => None,
        }
    }

    /// Sentences for a session's report on how its claims were settled.
    pub(super) fn settle_details(&mut self, outcome: &Outcome, done: Option<TodoDone>) -> Vec<String> {
        let tz = self.tz();
        let max_attempts = self.files.max_attempts();
        let Some(TodoDone::Settled { retries, exhausted }) = done else {
            return vec![
                "cryo could not update todo.json for this session's TODOs (see `cryoctl chamber status`).".into(),
            ];
        };
        let mut details = Vec::new();
        if let Outcome::Limited { local, .. } | Outcome::OverBudget { local, .. } = outcome {
            if !retries.is_empty() {
                details.push(format!("Its TODOs wait as {} (until {local}).", ids_text(&retries)));
            }
        } else if matches!(outcome, Outcome::Stopped | Outcome::Interrupted) {
            if !retries.is_empty() {
                details.push(format!("Its TODOs were re-queued as {}.", ids_text(&retries)));
            }
        } else if matches!(outcome, Outcome::AwaitingApproval { .. }) {
            if !retries.is_empty() {
                details.push(format!("Its TODOs wait for the answer as {}.", ids_text(&retries)));
            }
        } else if let Ok(list) = self.list() {
            for id in &retries {
                if let Some(t) = list.get(*id) {
                    let at = t.at.map(|a| crate::time::format_in(a, tz)).unwrap_or_default();
                    details.push(format!("Retry: TODO {id} \"{}\" at {at}.", t.text));
                }
            }
        }
        for c in exhausted {
            let m = format!(
                "TODO {} \"{}\" failed {} times (max_attempts = {max_attempts}); cryo gave up on it and needs you to look.",
                c.id,
                todo::base_text(&c.text),
                c.attempt + 1
            );
            details.push(m.clone());
            self.health.needs(m);
        }
        details
    }

    /// The second half of a session's end: the report and fallbacks, the
    /// journal, the log block, the ledger; then whoever waited, the slot, and
    /// what comes next.
    pub(super) fn settled(&mut self, result: Result<(TodoDone, TodoList), TodoWriteError>) {
        let done = self.todos_written(result, |e| Refusal::Internal(e.to_string())).ok();
        let Some(l) = self.waking.end_live() else { return };
        let outcome = l.outcome.clone().expect("set when the session ended");
        let retried = matches!(&done, Some(TodoDone::Settled { retries, .. }) if !retries.is_empty());
        let mut details = self.settle_details(&outcome, done);
        if outcome.failed() {
            self.explain_failure(&outcome, &l, &mut details);
        }
        let conv = Conversation { unanswered_batch: !l.unanswered.is_empty(), sent_any: l.sent_any };
        self.write_fallbacks(l.number, &outcome, conv, &l.unanswered, &details.join("\n\n"));
        self.notice_end(l.number, &outcome, &details.join("\n\n"));
        // Every batch it claimed is answered now: by the agent, or above.
        if l.claimed_mail {
            self.emit(Effect::JournalAnswer { number: l.number });
        }
        // What comes next is kept before the end is written: a crash between
        // the two leaves an open session, which recovery runs again.
        self.count_outcome(&l, &outcome);
        self.rework_or_attention(&outcome, &l, retried);
        let parked = match (&outcome, &l.parked) {
            (Outcome::AwaitingApproval { id, what }, Some((_, _, req))) => Some((id.as_str(), what.as_str(), *req)),
            _ => None,
        };
        let answered_already = parked.is_some_and(|(id, what, req)| !self.await_approval(id, what, req));
        self.save_health();
        let result = self.record_end(&l, &outcome);
        self.health.settled(&outcome, result);
        let shutting_down = self.answer_waiters(l.stop_waiters, l.shutdown_waiters);
        self.emit(Effect::Release);
        if answered_already {
            self.waking.queue_manual();
            self.replan();
        }
        self.after_end(shutting_down);
    }

    /// A failed session whose work no retry TODO takes up (it had none, or
    /// none was due: a first session, mail, an operator's wake): the chamber
    /// wakes again for it after the back-off, up to `max_attempts` in a
    /// row; then it stops trying, and its attention says what happened and
    /// the command that runs the agent again. Never silently idle.
    fn rework_or_attention(&mut self, outcome: &Outcome, l: &Live, retried: bool) {
        if retried {
            return;
        }
        // Cut short by a limit, not a failure: the work goes on when it ends.
        if let Outcome::Limited { until, .. } | Outcome::OverBudget { until, .. } = outcome {
            self.health.rework(*until);
            return;
        }
        if !outcome.failed() || *outcome == Outcome::Interrupted {
            return;
        }
        let (n, max, tz) = (self.health.failures(), self.files.max_attempts(), self.tz());
        if n < max {
            let at = self.now + todo::retry_delay(n);
            self.health.rework(at);
            self.log(format!(
                "its work is tried again at {} (attempt {} of {max})",
                crate::time::format_in(at, tz),
                n + 1
            ));
            return;
        }
        let hint = self.what_happened(outcome, l).map(|h| format!("{h} ")).unwrap_or_default();
        self.health.needs(format!(
            "{n} sessions in a row {}: cryo stopped trying (max_attempts = {max}). {hint}Once that is \
             mended, `cryoctl chamber wake {}` runs the agent again.",
            outcome.verb(),
            self.name
        ));
    }

    /// What a failed session's report adds: what happened first (also the
    /// chamber's attention, unless it has one), the log's last lines last.
    fn explain_failure(&mut self, outcome: &Outcome, l: &Live, details: &mut Vec<String>) {
        if let Some(m) = self.what_happened(outcome, l) {
            details.insert(0, m.clone());
            self.health.needs_unless_told(m);
        }
        let tail = session::log_tail(&l.log_tail, TAIL_LINES, TAIL_CHARS);
        if !tail.is_empty() {
            details.push(format!("Last lines of cryo-agent.log:\n\n```\n{tail}\n```"));
        }
    }

    /// Records the end in the log, the ledger and the conversation to
    /// resume, and hands it on to the chambers that follow this one.
    /// Returns the result as the view shows it.
    fn record_end(&mut self, l: &Live, outcome: &Outcome) -> String {
        let now = self.now;
        let summary = l.hibernate.as_ref().map(|(_, s)| s.clone()).filter(|s| !s.is_empty());
        let result = match &summary {
            Some(s) => format!("{}: {}", outcome.describe(), s),
            None => outcome.describe(),
        };
        self.log(format!("session ended: {result}"));
        self.emit(Effect::Log(LogLine::End));
        // The conversation the next session may resume (or none: it starts
        // afresh after anything but a hibernate).
        self.thread = session::thread_after(l.number, now, outcome, l.resumed.as_ref(), l.used.as_ref());
        self.emit(Effect::SessionEnded {
            number: l.number,
            at: now,
            outcome: outcome.clone(),
            summary: summary.clone().unwrap_or_default(),
            trigger: l.trigger,
            started: l.started_at,
            thread: self.thread.clone(),
        });
        self.hand_off_after(l.number, outcome, summary.as_deref().unwrap_or(""));
        result
    }

    /// What the outcome means for the chamber's time and next wakes: the
    /// busy span closes (a limit opens one), and a failure holds mail back
    /// while an interrupt has the work run again.
    fn count_outcome(&mut self, l: &Live, outcome: &Outcome) {
        let now = self.now;
        self.spans.close(now, &missed::Why::Busy(l.number));
        if let Outcome::Limited { until, local } = outcome {
            self.spans.span(now, *until, missed::Why::Limited(local.clone()));
        }
        let hold = self.health.ended(outcome, now);
        if *outcome == Outcome::Interrupted {
            // cryod is stopping: not the agent's failure. The next cryod
            // (or the chamber's next owner) runs the work again, once.
            self.waking.rerun_later(Rerun { session: l.number, mail: l.unanswered.clone() });
        } else if let Some(hold) = hold {
            if !self.files.unread().is_empty() {
                self.log(format!(
                    "mail waits; after {} failed session(s) the next wake for mail is held for {}",
                    self.health.failures(),
                    crate::time::humanize(hold)
                ));
            }
        } else if let Outcome::Limited { until, local } = outcome {
            // Mail waits for the reset too, and so does every chamber on the
            // same account.
            if *until <= self.now {
                // The shell has another account for it (a fallback).
                self.log("the provider's limit was reached: the work goes on at once, on another account");
            } else {
                self.log(format!("the provider's limit was reached: this chamber and its account wait until {local}"));
            }
            self.emit(Effect::HoldProvider { until: *until });
        }
    }

    /// Answers those who waited for the session to stop, and those who wait
    /// to shut down. Returns whether any did (the chamber then exits).
    fn answer_waiters(&mut self, stop_waiters: Vec<ReqId>, shutdown_waiters: Vec<ReqId>) -> bool {
        // Whoever waits reads the view next: it must show the end.
        if !stop_waiters.is_empty() {
            self.emit(Effect::Publish);
        }
        for w in stop_waiters {
            self.reply(w, Ok(Reply::Stopped { already: false, ended: true }));
        }
        let shutting_down = !shutdown_waiters.is_empty();
        for w in shutdown_waiters {
            self.reply(w, Ok(Reply::Done));
        }
        shutting_down
    }

    /// What follows a settled session: the chamber's removal or shutdown,
    /// the wake that was to replace it, or the next plan.
    fn after_end(&mut self, shutting_down: bool) {
        if let Some(req) = self.waking.take_removing() {
            self.emit(Effect::Plan(None));
            self.reply(req, Ok(Reply::Done));
            return self.exit();
        }
        if shutting_down {
            return self.exit();
        }
        match self.waking.take_replace() {
            Some((Some(m), req)) => match self.operator_message("operator", "", &m) {
                // The rest follows when the message is written.
                Ok(message) => self.emit(Effect::WriteMessage {
                    folder: Folder::Inbox,
                    message,
                    then: AfterWrite::Replaced { req },
                }),
                Err(e) => {
                    self.reply(req, Err(e));
                    self.replan();
                }
            },
            Some((None, req)) => {
                self.waking.queue_manual();
                self.reply(req, Ok(Reply::Woke(WakeOutcome { replaced: true, ..WakeOutcome::default() })));
                self.replan();
            }
            None => self.replan(),
        }
    }

    /// The `cryochamber` messages a session's end calls for.
    pub(super) fn write_fallbacks(
        &mut self,
        number: u64,
        outcome: &Outcome,
        conv: Conversation,
        unanswered: &[String],
        details: &str,
    ) {
        for f in session::fallbacks(number, outcome, conv, details) {
            let mut meta = BTreeMap::new();
            meta.insert("session".to_string(), number.to_string());
            if f.is_reply {
                meta.insert("in_reply_to".to_string(), unanswered.join(" "));
            }
            let message = Message {
                from: CRYOCHAMBER.into(),
                subject: f.subject.clone(),
                timestamp: Some(self.now),
                question: false,
                meta,
                body: f.body,
            };
            let then = AfterWrite::Fallback { subject: f.subject };
            self.emit(Effect::WriteMessage { folder: Folder::Outbox, message, then });
        }
    }
}
