//! Callers and answers: who waits for a reply ([`ReqId`]), what they are
//! answered ([`Reply`]) or why not ([`Refusal`]), and [`Failed`], the one
//! line the shell gives back when it could not do what an effect asked.

use chrono_tz::Tz;

use crate::todo::Todo;

/// Names a caller waiting for a reply (the shell keeps the channel).
pub type ReqId = u64;

/// Why the shell could not do what an effect asked, or could not read what
/// an input reports (a file that would not parse, a ledger that would not
/// take a row): one line for a person, made by the shell from its own
/// typed error where it crosses into the machine. The machine never
/// decides by its text; it shows it (a fault, an attention line, a refusal)
/// and acts on the failure alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Failed(pub String);

impl Failed {
    /// The line of any error.
    pub fn of(e: impl std::fmt::Display) -> Failed {
        Failed(e.to_string())
    }
}

impl From<String> for Failed {
    fn from(s: String) -> Failed {
        Failed(s)
    }
}

impl From<&str> for Failed {
    fn from(s: &str) -> Failed {
        Failed(s.to_string())
    }
}

/// Why a request was refused; the shell maps each kind to its status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Invalid(String),
    Precondition(String),
    NotFound(String),
    Internal(String),
}

impl Refusal {
    /// The one line that says why.
    pub fn text(&self) -> &str {
        match self {
            Refusal::Invalid(s) | Refusal::Precondition(s) | Refusal::NotFound(s) | Refusal::Internal(s) => s,
        }
    }
}

/// What an operator's wake did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WakeOutcome {
    pub replaced: bool,
    pub queued: bool,
    pub message_file: Option<String>,
}

/// A successful answer to a caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `start`: whether it was started already.
    Started(bool),
    /// `stop`: it was stopped already; a session was ended.
    Stopped {
        already: bool,
        ended: bool,
    },
    /// `pause`/`resume`: nothing changed.
    Paused(bool),
    /// `archive`/`unarchive`: nothing changed.
    Archived(bool),
    /// `reset`: where the runtime files went (`history/TIMESTAMP`).
    Reset(String),
    /// `acknowledge`: set aside until it changes or the snooze ends.
    Acknowledged,
    Woke(WakeOutcome),
    /// An operator's message, as `messages/inbox/NAME`, and, when the
    /// agent will not read it at once, one line saying when and how to wake
    /// it now ([`crate::chamber::Chamber::mail_waits`]).
    Delivered {
        file: String,
        waits: Option<String>,
    },
    Hibernate(String),
    Sent {
        file: String,
        reply: bool,
    },
    /// `receive`: the names the batch has in `inbox/archive/` (the shell
    /// answers with the messages themselves).
    Mail(Vec<String>),
    /// `dialog`: the shell answers with the conversation's last `last` (or
    /// `all`) messages.
    Dialog {
        claimed: u32,
        last: u32,
        all: bool,
    },
    Todos {
        todos: Vec<Todo>,
        tz: Tz,
    },
    Done,
}
