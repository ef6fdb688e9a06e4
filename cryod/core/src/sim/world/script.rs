//! One chamber through a fixed script ([`World::scripted`]): no crashes,
//! no randomness that shows in its files, its agents doing their plans to
//! the letter. For comparing the machine with the real daemon on one
//! scenario (the integration tests' twin).

use chrono::Duration;

use super::{Failure, Step, World};
use crate::chamber::{Folder, Input, LogLine};
use crate::message::Message;
use crate::sim::Config;
use crate::sim::agent::Act;
use crate::sim::check::Broken;
use crate::todo::TodoList;

/// One step of a scripted scenario ([`World::scripted`]).
#[derive(Debug, Clone)]
pub enum ScriptStep {
    /// Someone writes a message with this text into the inbox (and cryod
    /// has seen it before the next step).
    Mail(String),
    /// `cryoctl chamber start`.
    Start,
    /// `cryoctl chamber wake`.
    Wake,
    /// Time passes until this many sessions have ended in all (an hour at most).
    Ended(usize),
}

/// A scripted chamber's files at the end.
#[derive(Debug, Clone)]
pub struct Files {
    /// In the order written.
    pub outbox: Vec<Message>,
    pub todos: TodoList,
    pub log: Vec<LogLine>,
}

impl World {
    /// One chamber (zone UTC, `max_attempts` as given) through a fixed
    /// script: no crashes, no randomness that shows in its files; session
    /// k's agent does `sessions[k - 1]` to the letter. For comparing the
    /// machine with the real daemon on one scenario.
    pub fn scripted(steps: &[ScriptStep], sessions: Vec<Vec<Act>>, max_attempts: u32) -> Result<Files, Failure> {
        let mut w = World::new(0, Config { chambers: 1, days: 0, limit: 1, crash_one_in: 0 });
        w.crashes_on = false;
        w.externals_on = false;
        w.disks[0].tz = chrono_tz::UTC;
        w.disks[0].max_attempts = max_attempts;
        // As a plain agent command runs under cryod: no conversation to
        // resume, no pre-check, no `[git]`.
        w.disks[0].resume = false;
        w.disks[0].precheck = false;
        w.disks[0].git = false;
        w.disks[0].approvals = false;
        w.script = Some(sessions.into());
        match w.run_script(steps) {
            Ok(()) => {
                let d = &w.disks[0];
                Ok(Files { outbox: d.outbox.values().cloned().collect(), todos: d.todos.clone(), log: d.log.clone() })
            }
            Err(Broken(message)) => Err(Failure { seed: 0, message, trace: Vec::new() }),
        }
    }

    fn run_script(&mut self, steps: &[ScriptStep]) -> Step {
        self.restart()?;
        for step in steps {
            match step {
                ScriptStep::Mail(text) => {
                    let msg = self.message("tester", text);
                    self.write(0, Folder::Inbox, msg);
                    // The watcher sees it before the next step.
                    self.until(self.now + Duration::seconds(1))?;
                }
                ScriptStep::Start => {
                    let log_session = self.log_session(0);
                    self.operator(0, |req| Input::Start { req, wait: false, agent_check: Ok(()), log_session })?;
                }
                ScriptStep::Wake => self.operator(0, |req| Input::Wake { req, message: None, replace: false })?,
                ScriptStep::Ended(n) => {
                    let deadline = self.now + Duration::hours(1);
                    let ended = |w: &World| w.disks[0].log.iter().filter(|l| matches!(l, LogLine::End)).count();
                    while ended(self) < *n {
                        if self.now > deadline {
                            return Err(Broken(format!(
                                "{n} sessions did not end within an hour ({} did)",
                                ended(self)
                            )));
                        }
                        self.until(self.now + Duration::seconds(5))?;
                    }
                }
            }
        }
        Ok(())
    }
}
