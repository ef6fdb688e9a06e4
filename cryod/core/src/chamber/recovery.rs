//! Recovery at start-up: the sessions a killed cryod left open are finished
//! from what the ledger, the journal and the outbox say (their agents were
//! ended by start-up first), then the chamber resumes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{
    AfterTodos, Boot, Chamber, Effect, LogLine, OpenSession, Recovered, Refusal, Rerun, TodoDone, TodoOp,
    TodoWriteError, capitalize, missed,
};
use crate::session::{Conversation, Outcome, Trigger};
use crate::todo::{Claim, Settle, TodoList};

/// The most TODOs a line names by number.
const MAX_NAMED: usize = 10;

impl Chamber {
    /// Finishes the sessions a killed cryod left open (their processes were
    /// ended by start-up before this): re-queues what they still hold of
    /// their claims, answers their claimed mail, closes their `cryo.log`
    /// blocks and records them as interrupted. Then resumes.
    pub(super) fn boot(&mut self, boot: Boot) {
        self.arm_snooze_end();
        // Before now no cryod ran it, or it was stopped or paused anyway.
        // A thawed machine's cryod ran all along: it was down only before
        // its start, and the computer's sleeps since are told apart.
        let since = boot.thawed.as_ref().map_or(self.now, |t| t.up_since.min(self.now));
        let before = match (self.wishes.started(), self.wishes.paused()) {
            (false, _) => missed::Why::Stopped,
            (true, true) => missed::Why::Paused,
            (true, false) => missed::Why::Down { since },
        };
        if matches!(before, missed::Why::Down { .. }) {
            self.spans.span(DateTime::<Utc>::MIN_UTC, since, before);
        } else {
            self.spans.open(DateTime::<Utc>::MIN_UTC, before);
        }
        for (from, to) in boot.thawed.iter().flat_map(|t| &t.slept) {
            match to {
                Some(to) => self.spans.span(*from, *to, missed::Why::Asleep),
                None => self.spans.open(*from, missed::Why::Asleep),
            }
        }
        let answered = |name: &str| boot.outgoing.iter().any(|m| m.in_reply_to.iter().any(|f| f == name));
        for s in &boot.open {
            let mut unanswered = Vec::new();
            for b in boot.batches.iter().filter(|b| b.session == s.number) {
                if b.archived.is_empty() {
                    // Journaled, but cryod stopped before the files moved:
                    // the agent never saw them; they are still unread mail,
                    // for the next session to claim (and answer) afresh.
                    self.emit(Effect::JournalDrop { id: b.id });
                }
                unanswered.extend(b.archived.iter().filter(|f| !answered(f)).cloned());
            }
            let sent_any = boot.outgoing.iter().any(|m| m.session == Some(s.number) && m.by_agent);
            let note = if s.groups_ended == 0 {
                "cryod stopped during this session; it was found at restart".to_string()
            } else {
                format!(
                    "cryod stopped during this session; at restart its agent was still running and was ended ({} process group(s))",
                    s.groups_ended
                )
            };
            self.waking.saw_session(s.number);
            let op = TodoOp::Settle {
                wake: s.wake_id.clone(),
                claims: s.claims.clone(),
                how: Settle::Requeue { now: self.now },
                now: self.now,
                tz: self.tz(),
            };
            let then = AfterTodos::Recovered(Recovered { number: s.number, unanswered, sent_any, note });
            self.emit(Effect::UpdateTodos { op, then });
        }
        if !boot.open_unknown {
            self.release_orphans(&boot.open);
        }
        // Batches of sessions that did end, but whose answer was not recorded.
        for b in boot.batches.iter().filter(|b| !boot.open.iter().any(|s| s.number == b.session)) {
            if !b.archived.is_empty() {
                self.emit(Effect::JournalAnswered { id: b.id });
            } else {
                // Journaled, but the files never moved: the agent never saw
                // them; they are still unread mail.
                self.emit(Effect::JournalDrop { id: b.id });
            }
        }
        self.arm_silence();
        if self.wishes.started() {
            self.resume();
        } else {
            self.replan();
        }
    }

    /// Re-queues the claims `todo.json` still holds for a session that is
    /// over: its settlement was never written (a full disk, a fleet node
    /// whose lease ran out as it wrote) though its end was, so no session
    /// will settle them, and the TODOs would never come due again. They run
    /// again, as an interrupted session's work does. Only a list read at
    /// this start is looked at (one kept from the last start holds none:
    /// see `rest`).
    fn release_orphans(&mut self, open: &[OpenSession]) {
        let Ok(list) = self.list() else { return };
        let mut orphans: BTreeMap<String, Vec<Claim>> = BTreeMap::new();
        for t in &list.items {
            let Some(wake) = t.claimed_by.as_deref() else { continue };
            if open.iter().any(|s| s.wake_id == wake) {
                continue;
            }
            let due = t.at.unwrap_or(self.now);
            let claim = Claim { id: t.id, text: t.text.clone(), due, slots: 1, attempt: t.attempt, skipped: None };
            orphans.entry(wake.to_string()).or_default().push(claim);
        }
        if orphans.is_empty() {
            return;
        }
        // One line and one write, however many: the agent can write
        // `todo.json`, and fifty thousand made-up wakes are one re-queue.
        let ids: Vec<String> = orphans.values().flatten().map(|c| c.id.to_string()).collect();
        let shown = match ids.len() {
            n if n > MAX_NAMED => format!("{} and {} more", ids[..MAX_NAMED].join(", "), n - MAX_NAMED),
            _ => ids.join(", "),
        };
        let (orphans, count) = (orphans.into_iter().collect(), ids.len());
        let then = AfterTodos::Released { shown, count };
        self.emit(Effect::UpdateTodos { op: TodoOp::Release { orphans, now: self.now }, then });
    }

    pub(super) fn recovered(&mut self, r: Recovered, result: Result<(TodoDone, TodoList), TodoWriteError>) {
        let outcome = Outcome::Interrupted;
        let settled = self.todos_written(result, |e| Refusal::Internal(e.to_string()));
        let mut details = vec![format!("{}.", capitalize(&r.note))];
        details.extend(self.settle_details(&outcome, settled.ok()));
        let conv = Conversation { unanswered_batch: !r.unanswered.is_empty(), sent_any: r.sent_any };
        self.write_fallbacks(r.number, &outcome, conv, &r.unanswered, &details.join("\n\n"));
        self.log(format!("session {} interrupted: {}; its work runs again now, once", r.number, r.note));
        self.emit(Effect::Log(LogLine::End));
        let now = self.now;
        // Counted under `recovery`: the session's own start is an earlier
        // cryod's. Its conversation is not resumed.
        self.thread = None;
        self.emit(Effect::SessionEnded {
            number: r.number,
            at: now,
            outcome: outcome.clone(),
            summary: r.note.clone(),
            trigger: Trigger::Recovery,
            started: None,
            thread: None,
        });
        self.hand_off_after(r.number, &outcome, &r.note);
        self.emit(Effect::JournalAnswer { number: r.number });
        self.health.result(outcome.describe());
        // Not the agent's failure: the rerun's own notice says what happened.
        self.health.ended(&outcome, now);
        self.waking.rerun_later(Rerun { session: r.number, mail: r.unanswered });
        self.replan();
    }
}
