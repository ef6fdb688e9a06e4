//! The supervisor's effects on the chamber's files: `todo.json`, the
//! mailbox, the plan, the logs and a reset, each off the runtime's worker.

use std::path::Path;

use cryo_core::chamber::{
    AfterClaim, AfterTodos, AfterWrite, Failed, Folder as MachineFolder, Input, ReqId, TodoOp, TodoWriteError,
};

use super::Sup;
use crate::chamber::mailbox::{Folder, Stored};
use crate::chamber::{log, todos};
use crate::services::runtime::NoticeKind;

impl Sup {
    /// Moves the runtime files into `history/` and scaffolds them again.
    pub(super) fn reset(&mut self, req: ReqId) -> Input {
        let (root, now) = (&self.root, self.now());
        // A cryo.toml made again (it had none) is confined as a new chamber's.
        let made = || crate::chamber::reset::to_history(root, now, cryo_session::Sandbox::strongest());
        let result = off_worker(made).map_err(Failed::of);
        match &result {
            Ok(dir) => {
                tracing::info!(chamber = %self.machine.name(), %dir, "chamber reset");
                self.todos_written = None;
                // Its git work begins again too (the daemon prunes it).
                self.git_last = None;
            }
            Err(error) => tracing::error!(chamber = %self.machine.name(), %error, "cannot reset"),
        }
        Input::ResetDone { req, result }
    }

    /// Applies a change to `todo.json` (locked, and durable when the
    /// change must be). `None`: the chamber is another owner's now.
    pub(super) async fn update_todos(&mut self, op: TodoOp, then: AfterTodos) -> Option<Input> {
        let refused = |e: &todos::UpdateError<_>| matches!(e, todos::UpdateError::Closed(_));
        let outcome = self
            .gated(refused, |sup, gate| {
                let keep_done = sup.config.as_ref().map_or(cryo_core::todo::DEFAULT_KEEP_DONE, |c| c.keep_done);
                let now = sup.shared.clock.now();
                let how = todos::How { durable: op.durable(), keep_done, now, journaled: op.journaled(), gate };
                todos::update_with(&sup.root, sup.machine.tz(), how, |list| op.apply(list))
            })
            .await?;
        match &outcome {
            Ok((_, _, Some(stamp))) => self.todos_written = Some(*stamp),
            Ok(_) => {}
            Err(_) => self.todos_written = None,
        }
        let outcome = outcome.map(|(done, list, _)| (done, list));
        let result = outcome.map_err(|e| match e {
            todos::UpdateError::Fault(m) => TodoWriteError::Fault(m),
            todos::UpdateError::Refused(e) => TodoWriteError::Refused(e),
            todos::UpdateError::Write(m) | todos::UpdateError::Closed(m) => {
                tracing::error!(chamber = %self.machine.name(), error = %m, "write failed");
                TodoWriteError::Write(m)
            }
        });
        Some(Input::TodosUpdated { then, result })
    }

    /// Runs `write` (off the worker) with the lease's gate (see
    /// `Lease::gate`). A write the gate refused (`refused`: the node's
    /// trust window ran out while it wrote; nothing was changed) is not a
    /// failure of the chamber's: the supervisor waits as before each
    /// effect, and writes again once the lease is held anew; `None` once
    /// it is lost (the chamber is dropped, nothing more written).
    async fn gated<T, E>(
        &mut self,
        refused: impl Fn(&E) -> bool,
        mut write: impl FnMut(&Self, Option<cryo_files::Gate>) -> Result<T, E>,
    ) -> Option<Result<T, E>> {
        let gate = self.owner.gate(&self.shared.lease);
        loop {
            let result = off_worker(|| write(self, gate.clone()));
            if !result.as_ref().is_err_and(&refused) {
                return Some(result);
            }
            tracing::info!(chamber = %self.machine.name(), "a write waits: this node's lease is not trusted now");
            if !self.owner.may_write(&self.shared.lease).await {
                return None;
            }
        }
    }

    /// Writes a message into the inbox or the outbox. `None`: the chamber
    /// is another owner's now.
    pub(super) async fn write_message(
        &mut self,
        folder: MachineFolder,
        mut message: cryo_core::message::Message,
        then: AfterWrite,
    ) -> Option<Input> {
        let folder = match folder {
            MachineFolder::Inbox => Folder::Inbox,
            MachineFolder::Outbox => Folder::Outbox,
        };
        // A fleet node's outbox messages carry the writer's fence.
        if let (Folder::Outbox, Some(f)) = (folder, self.fleet_fence()) {
            message.meta.insert("fence".into(), f.to_string());
        }
        let result = self
            .gated(cryo_files::FileError::closed_in, |sup, gate| {
                sup.mailbox().gated(gate).write(folder, &message, sup.now())
            })
            .await?
            .map_err(Failed::of);
        match &result {
            Ok(name) => {
                self.shared.notify(self.id, NoticeKind::Message { folder, name: name.clone() });
                if folder == Folder::Outbox {
                    self.bridges.outbox_changed();
                }
            }
            Err(error) => tracing::error!(chamber = %self.machine.name(), %error, "cannot write a message"),
        }
        Some(Input::MessageWritten { then, result })
    }

    /// Moves the named inbox files to the archive (those that still parse;
    /// a bad one goes to `messages/rejected/`), keeping them for the reply.
    pub(super) fn archive(&mut self, names: Vec<String>, then: AfterClaim) -> Input {
        let mailbox = self.mailbox();
        let mut troubles = Vec::new();
        let result = off_worker(|| {
            let pending: Vec<Stored> = mailbox
                .read_noting(Folder::Inbox, &mut troubles)?
                .into_iter()
                .filter(|m| names.contains(&m.name))
                .collect();
            mailbox.archive(pending)
        });
        for line in troubles {
            let _ = self.tx.send(super::Event::Trouble(line));
        }
        let result = match result {
            Ok(claimed) => {
                let names = claimed.iter().map(|m| m.name.clone()).collect();
                if let Some(running) = self.running.as_mut() {
                    running.claimed(claimed);
                }
                Ok(names)
            }
            Err(e) => Err(Failed::of(e)),
        };
        Input::Archived { then, result }
    }

    /// Writes `plan.md` (durably). `None`: the chamber is another owner's
    /// now.
    pub(super) async fn write_plan(&mut self, req: ReqId, text: &str) -> Option<Input> {
        let refused = |e: &crate::chamber::FileError| matches!(e, crate::chamber::FileError::Closed(_));
        let result = self
            .gated(refused, |sup, gate| {
                let dir = crate::chamber::Dir::open(&sup.root)?.gated(gate);
                dir.write(Path::new("plan.md"), text.as_bytes(), crate::chamber::NewFile::DURABLE)
            })
            .await?;
        Some(Input::PlanWritten { req, result: result.map(drop).map_err(Failed::of) })
    }

    /// Rotates the chamber's logs that are over their size.
    pub(super) fn rotate_logs(&self) {
        let (max, keep) = (self.shared.config.log_max_bytes, self.shared.config.log_keep);
        for rel in [log::LOG, cryo_session::AGENT_LOG, cryo_session::EVENTS_FILE] {
            if let Err(error) = log::rotate(&self.root, rel, max, keep) {
                tracing::warn!(chamber = %self.machine.name(), %error, file = rel, "cannot rotate a log");
            }
        }
    }

    /// The chamber's fence, for what a fleet node writes into its files.
    pub(super) fn fleet_fence(&self) -> Option<i64> {
        self.shared.lease.is_fleet().then_some(self.owner.fence().token)
    }
}

/// Runs file work that waits on the disk (a locked, fsynced rewrite of
/// `todo.json`, a message written or archived) without holding up the
/// runtime: its worker hands the other chambers' tasks to another thread
/// meanwhile. Without it, one chamber's fsyncs delayed the wakes of chambers
/// due in the same instant (the runtime has as many workers as cores).
/// Needs the multi-threaded runtime, which cryod and every harness of it use.
fn off_worker<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}
