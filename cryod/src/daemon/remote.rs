//! Operations on a chamber another node of the fleet runs: carried out by
//! its owner, through the database (a command row, a NOTIFY, an answer;
//! see `store::postgres::commands`).
//!
//! Every front end (cryoctl on any node, the hub on any node) calls the same
//! [`Daemon`] operation; when the chamber is not run here, the operation is
//! sent as a [`Command`] to its owner, which carries it out exactly as if it
//! had been asked locally and answers with an [`Answer`] (or the same error
//! it would have given locally).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::daemon::{ChamberRef, ChamberView, Daemon};
use crate::error::{Error, Result};
use crate::store::View;
use crate::store::postgres::Called;
use crate::supervisor::{Snapshot, TodoCall, WakeOutcome};

/// An operation on one chamber, for its owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    Start {
        wait: bool,
    },
    Stop {
        wait: bool,
    },
    Pause {
        pause: bool,
    },
    Acknowledge {
        until: Option<chrono::DateTime<chrono::Utc>>,
    },
    Archive {
        archive: bool,
    },
    Reset,
    Trust {
        edit: Option<crate::supervisor::Edit>,
        #[serde(default)]
        diff: bool,
    },
    Wake {
        message: Option<String>,
        replace: bool,
    },
    Send {
        from: String,
        subject: String,
        text: String,
        #[serde(default)]
        meta: std::collections::BTreeMap<String, String>,
    },
    Todo {
        call: TodoCall,
    },
    Sync {
        pull: bool,
    },
    WritePlan {
        text: String,
    },
    Remove,
    /// A person decided the chamber's approval request `id` (on another
    /// node): the owner hands it to the chamber.
    Answered {
        id: String,
    },
    /// Hand the chamber to the node with this id.
    Move {
        to: String,
    },
}

/// What the owner answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The chamber's view after the operation, and its two flags (for
    /// `stop`: it was stopped already, a session was ended; for the others
    /// only the first: nothing changed).
    Flags {
        view: View,
        already: bool,
        ended: bool,
    },
    Woken {
        view: View,
        outcome: WakeOutcome,
    },
    /// A reset: the view after it, and the `history/` folder.
    Reset {
        view: View,
        dir: String,
    },
    /// An operator's message written, and why it waits, if it does.
    Delivered(crate::supervisor::Delivered),
    /// Settings accepted (or, asked for a diff, not): the view after, and
    /// the keys that changed with their values.
    Trusted {
        view: View,
        #[serde(default)]
        changes: Vec<crate::chamber::trust::Change>,
    },
    /// The TODO list after the call, as `todo.json` writes it, and its zone.
    Todos {
        file: String,
        tz: String,
    },
    Synced {
        results: Vec<(String, std::result::Result<u64, String>)>,
        bridges: Vec<cryo_sync::Status>,
    },
    Done,
}

/// The reply row: an answer, the error the owner would have given locally,
/// or "not run here (any more): ask its owner".
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Reply {
    Ok(Box<Answer>),
    Err(Error),
    Moved,
}

/// How long an owner may take to answer: a `stop` waits for a session to
/// end (its grace period), a `start` for a first agent to start.
const DEADLINE: Duration = Duration::from_secs(90);

/// How long a command follows a chamber from node to node.
const FOLLOW: Duration = Duration::from_secs(30);

impl Daemon {
    /// Sends `cmd` to the node that runs chamber `v`, waits for its answer.
    pub(crate) async fn forward(&self, v: &ChamberView, cmd: Command) -> Result<Answer> {
        let pg = self.0.shared.store.fleet().cloned().ok_or_else(|| Error::Internal("not a fleet".into()))?;
        let body = serde_json::to_string(&cmd).map_err(|e| Error::Internal(e.to_string()))?;
        let mut record = v.record.clone();
        // The owner may change under a command (a move, a takeover): follow
        // it, giving a new owner a moment to take the chamber up.
        let mut pause = Duration::from_millis(50);
        let until = tokio::time::Instant::now() + FOLLOW;
        while tokio::time::Instant::now() < until {
            if self.leaving(record.id) {
                // Being handed on by this very node: wait for it to go.
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                record = self.refresh_record(record.id).await?;
                continue;
            }
            if self.runs(record.id) {
                // Taken over by this node meanwhile. (Boxed: `execute` calls
                // the operations that call this.)
                return Box::pin(self.execute(record.id, cmd)).await;
            }
            let Some(owner) = record.owner.clone() else {
                // No owner yet (just added on a node, or being taken over):
                // wait for one to take it up, as a move is followed.
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                record = self.refresh_record(record.id).await?;
                continue;
            };
            let reply = match pg.call(&owner, Some(record.id), &body, DEADLINE).await? {
                Called::Answered(reply) => reply,
                Called::OwnerGone => {
                    return Err(Error::Unavailable(format!(
                        "node {owner} stopped before answering for chamber {:?}; another node is taking it over: \
                         check `cryoctl chamber status {}` and try again",
                        record.name, record.name
                    )));
                }
                Called::TimedOut => {
                    return Err(Error::Unavailable(format!(
                        "node {owner} did not answer for chamber {:?} within {}s",
                        record.name,
                        DEADLINE.as_secs()
                    )));
                }
            };
            match serde_json::from_str::<Reply>(&reply) {
                Ok(Reply::Ok(answer)) => return Ok(*answer),
                Ok(Reply::Moved) => {
                    let fresh = self.refresh_record(record.id).await?;
                    if fresh.owner == record.owner {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                    record = fresh;
                }
                Ok(Reply::Err(e)) => return Err(e),
                Err(e) => return Err(Error::Internal(format!("node {owner} answered something unreadable: {e}"))),
            }
        }
        Err(Error::Unavailable(match record.owner {
            None => format!(
                "no node took chamber {:?} up within {}s (it is being taken over): see `cryoctl fleet status`",
                record.name,
                FOLLOW.as_secs()
            ),
            Some(_) => format!("chamber {:?} keeps moving between nodes: try again", record.name),
        }))
    }

    /// Carries out a command another node sent, as if asked here; returns
    /// the reply row.
    pub(crate) async fn answer(&self, chamber: Option<i64>, body: &str) -> String {
        let reply = match serde_json::from_str::<Command>(body) {
            Err(e) => Reply::Err(Error::Invalid(format!("unreadable command: {e}"))),
            Ok(cmd) => match chamber {
                Some(id) if self.runs(id) && !self.leaving(id) => match self.execute(id, cmd).await {
                    Ok(a) => Reply::Ok(Box::new(a)),
                    Err(e) => Reply::Err(e),
                },
                _ => Reply::Moved,
            },
        };
        serde_json::to_string(&reply).expect("a reply serializes")
    }

    /// Carries out `cmd` on a chamber this node runs.
    async fn execute(&self, id: i64, cmd: Command) -> Result<Answer> {
        let v = self.view_by_id(id).ok_or_else(|| Error::NotFound("the chamber was removed".into()))?;
        let r = ChamberRef::Name(v.record.name.clone());
        let flags = |v: ChamberView, already, ended| Answer::Flags { view: v.snap.view, already, ended };
        Ok(match cmd {
            Command::Start { wait } => {
                let (v, already) = self.start(&r, wait).await?;
                flags(v, already, false)
            }
            Command::Stop { wait } => {
                let (v, already, ended) = self.stop(&r, wait).await?;
                flags(v, already, ended)
            }
            Command::Pause { pause } => {
                let (v, already) = self.pause(&r, pause).await?;
                flags(v, already, false)
            }
            Command::Acknowledge { until } => {
                let snooze =
                    super::Snooze { until: until.map(crate::base::clock::rfc3339).unwrap_or_default(), secs: 0 };
                flags(self.acknowledge(&r, snooze).await?, false, false)
            }
            Command::Archive { archive } => {
                let (v, already) = self.archive(&r, archive).await?;
                flags(v, already, false)
            }
            Command::Reset => {
                let (v, dir) = self.reset(&r).await?;
                Answer::Reset { view: v.snap.view, dir }
            }
            Command::Trust { edit, diff } => {
                let (v, changes) = self.trust(&r, edit, diff).await?;
                Answer::Trusted { view: v.snap.view, changes }
            }
            Command::Wake { message, replace } => {
                let (v, outcome) = self.wake(&r, message, replace).await?;
                Answer::Woken { view: v.snap.view, outcome }
            }
            Command::Send { from, subject, text, meta } => {
                Answer::Delivered(self.send_with(&r, &from, &subject, &text, meta).await?)
            }
            Command::Todo { call } => match self.todo(&r, call).await? {
                crate::supervisor::AgentReply::Todos { todos, tz } => {
                    let list = cryo_core::todo::TodoList { items: todos, high_water: 0 };
                    Answer::Todos { file: cryo_core::todo::render_file(&list, tz), tz: tz.name().to_string() }
                }
                _ => return Err(Error::Internal("unexpected reply from the supervisor".into())),
            },
            Command::Sync { pull } => {
                let (results, bridges) = self.sync(&r, pull).await?;
                Answer::Synced { results, bridges }
            }
            Command::WritePlan { text } => {
                self.write_plan(&v, &text).await?;
                Answer::Done
            }
            Command::Remove => {
                self.remove(&r).await?;
                Answer::Done
            }
            Command::Answered { id } => {
                self.answered_here(&id).await?;
                Answer::Done
            }
            Command::Move { to } => {
                let (v, already) = self.move_here_to(id, &to).await?;
                flags(v, already, false)
            }
        })
    }
}

impl Answer {
    /// The view and flags of a `Flags` answer, as a view of chamber `v`.
    pub fn flags(self, v: &ChamberView) -> Result<(ChamberView, bool, bool)> {
        match self {
            Answer::Flags { view, already, ended } => Ok((with_view(v, view), already, ended)),
            other => Err(unexpected(other)),
        }
    }

    /// The view after settings were accepted, and the keys that changed.
    pub fn trusted(self) -> Result<(View, Vec<crate::chamber::trust::Change>)> {
        match self {
            Answer::Trusted { view, changes } => Ok((view, changes)),
            other => Err(unexpected(other)),
        }
    }

    /// The view after a reset, and where the runtime files went.
    pub fn reset(self) -> Result<(View, String)> {
        match self {
            Answer::Reset { view, dir } => Ok((view, dir)),
            other => Err(unexpected(other)),
        }
    }

    pub fn woken(self, v: &ChamberView) -> Result<(ChamberView, WakeOutcome)> {
        match self {
            Answer::Woken { view, outcome } => Ok((with_view(v, view), outcome)),
            other => Err(unexpected(other)),
        }
    }

    pub fn delivered(self) -> Result<crate::supervisor::Delivered> {
        match self {
            Answer::Delivered(d) => Ok(d),
            other => Err(unexpected(other)),
        }
    }

    pub fn todos(self) -> Result<crate::supervisor::AgentReply> {
        match self {
            Answer::Todos { file, tz } => {
                let tz: chrono_tz::Tz = tz.parse().map_err(|_| Error::Internal(format!("unknown zone {tz:?}")))?;
                let list = cryo_core::todo::parse_file(&file, tz, 0).map_err(|e| Error::Internal(e.to_string()))?;
                Ok(crate::supervisor::AgentReply::Todos { todos: list.items, tz })
            }
            other => Err(unexpected(other)),
        }
    }

    pub fn synced(self) -> Result<crate::supervisor::SyncOutcome> {
        match self {
            Answer::Synced { results, bridges } => Ok((results, bridges)),
            other => Err(unexpected(other)),
        }
    }

    pub fn done(self) -> Result<()> {
        match self {
            Answer::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

pub(super) fn with_view(v: &ChamberView, view: View) -> ChamberView {
    ChamberView {
        record: v.record.clone(),
        snap: Snapshot { view, bridges: Vec::new(), sandbox: None, git: None, accounts: Vec::new() },
    }
}

fn unexpected(a: Answer) -> Error {
    Error::Internal(format!("the owner answered with something else: {a:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies_survive_the_row() {
        let cmd = Command::Todo {
            call: TodoCall::Add {
                text: "x".into(),
                at: "in 1h".into(),
                every: String::new(),
                cron: String::new(),
                missed: String::new(),
                precheck: String::new(),
            },
        };
        let back: Command = serde_json::from_str(&serde_json::to_string(&cmd).unwrap()).unwrap();
        assert!(matches!(back, Command::Todo { call: TodoCall::Add { ref at, .. } } if at == "in 1h"));
        // An error keeps its kind (so its status code) and its one line.
        for e in [Error::Precondition("paused".into()), Error::Internal("boom".into())] {
            let line = e.to_string();
            let back: Reply = serde_json::from_str(&serde_json::to_string(&Reply::Err(e)).unwrap()).unwrap();
            let Reply::Err(back) = back else { panic!("an error") };
            assert_eq!(back.to_string(), line);
            assert_eq!(tonic::Status::from(back).code() == tonic::Code::Internal, line.starts_with("internal error"));
        }
    }
}
