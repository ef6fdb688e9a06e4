//! What the machine last read of the chamber's files: `cryo.toml` (its
//! settings and their warnings), `todo.json` (the list, or at rest only its
//! next due time) and the inbox's unread messages. The shell reads and
//! writes the files; the machine keeps the reading here, and a file it
//! could not read faults the chamber.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::{Failed, Settings};
use crate::todo::{self, TodoList};

/// What the machine holds of `todo.json`.
#[derive(Debug, Clone, PartialEq)]
enum Held {
    List(TodoList),
    /// At rest: the next due time only.
    Rest {
        next_due: Option<DateTime<Utc>>,
    },
}

/// The chamber's files as last read; see the module documentation.
#[derive(Debug, Clone)]
pub(super) struct Files {
    /// `cryo.toml`'s settings, or why they cannot be read.
    config: Result<Settings, Failed>,
    /// What `cryo.toml` said that cryod ignores or doubts.
    warnings: Vec<String>,
    /// `todo.json` as last read or written, or at rest only its next due
    /// time ([`Files::rest`]); the reason it cannot be read.
    todos: Result<Held, Failed>,
    /// The inbox's unread messages, sorted.
    unread: Vec<String>,
}

impl Files {
    pub(super) fn new(
        config: Result<Settings, Failed>,
        warnings: Vec<String>,
        todos: Result<super::Listed, Failed>,
        unread: Vec<String>,
    ) -> Files {
        let todos = todos.map(|l| match l {
            super::Listed::Read(list) => Held::List(list),
            super::Listed::Kept(next_due) => Held::Rest { next_due },
        });
        Files { config, warnings, todos, unread }
    }

    // ---- cryo.toml ---------------------------------------------------------

    /// The settings, if `cryo.toml` could be read.
    pub(super) fn settings(&self) -> Option<&Settings> {
        self.config.as_ref().ok()
    }

    pub(super) fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The chamber's zone: its own, else the system's.
    pub(super) fn tz(&self, system: Tz) -> Tz {
        self.settings().map_or(system, |c| c.timezone)
    }

    /// How often a TODO may fail before cryo gives up on it.
    pub(super) fn max_attempts(&self) -> u32 {
        self.settings().map_or(todo::DEFAULT_MAX_ATTEMPTS, |c| c.max_attempts)
    }

    /// `cryo.toml` was read again.
    pub(super) fn config_read(&mut self, config: Result<Settings, Failed>, warnings: Vec<String>) {
        self.warnings = warnings;
        self.config = config;
    }

    /// Why the chamber is faulted: a file it cannot do without could not be
    /// read.
    pub(super) fn fault(&self) -> Option<String> {
        match (&self.config, &self.todos) {
            (Err(e), _) | (_, Err(e)) => Some(e.0.clone()),
            _ => None,
        }
    }

    // ---- todo.json ---------------------------------------------------------

    /// The parsed list, for what needs it (the shell gave it, see
    /// [`Chamber::wants_list`](super::Chamber::wants_list)).
    pub(super) fn list(&self) -> Result<&TodoList, Failed> {
        match &self.todos {
            Ok(Held::List(l)) => Ok(l),
            Ok(Held::Rest { .. }) => Err("todo.json was not read when it was needed (a bug in cryod)".into()),
            Err(e) => Err(e.clone()),
        }
    }

    /// The list held (`None` at rest), or why it cannot be read.
    pub(super) fn todos(&self) -> Option<Result<&TodoList, &Failed>> {
        match &self.todos {
            Ok(Held::List(l)) => Some(Ok(l)),
            Ok(Held::Rest { .. }) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// The next TODO's due time, from the list or what rest kept of it.
    pub(super) fn next_due(&self) -> Option<DateTime<Utc>> {
        match &self.todos {
            Ok(Held::List(t)) => t.next_due(),
            Ok(Held::Rest { next_due }) => *next_due,
            Err(_) => None,
        }
    }

    /// Lets go of the parsed list, keeping its next due time.
    pub(super) fn rest(&mut self) {
        if let Ok(Held::List(l)) = &self.todos {
            self.todos = Ok(Held::Rest { next_due: l.next_due() });
        }
    }

    /// `todo.json` as the shell read it. Returns whether the plan may have
    /// changed: the list differs, and not only as the list read again for
    /// a wake or a listing, with the next due time rest kept.
    pub(super) fn todos_read(&mut self, todos: Result<TodoList, Failed>) -> bool {
        let todos = todos.map(Held::List);
        let same_plan = matches!((&self.todos, &todos),
            (Ok(Held::Rest { next_due }), Ok(Held::List(l))) if *next_due == l.next_due());
        if todos == self.todos {
            return false;
        }
        self.todos = todos;
        !same_plan
    }

    /// cryod wrote `todo.json`: this is the list now.
    pub(super) fn todos_written(&mut self, list: TodoList) {
        self.todos = Ok(Held::List(list));
    }

    /// `todo.json` could not be read for a write: the chamber is faulted.
    pub(super) fn todos_unreadable(&mut self, why: String) {
        self.todos = Err(Failed(why));
    }

    // ---- the inbox ---------------------------------------------------------

    pub(super) fn unread(&self) -> &[String] {
        &self.unread
    }

    /// The inbox as the shell listed it.
    pub(super) fn inbox_read(&mut self, mut unread: Vec<String>) {
        unread.sort();
        self.unread = unread;
    }

    /// A message cryod put into the inbox.
    pub(super) fn note_unread(&mut self, name: String) {
        if let Err(i) = self.unread.binary_search(&name) {
            self.unread.insert(i, name);
        }
    }

    /// The agent claimed the inbox: `names`, as the archiving reported
    /// them, are read now.
    pub(super) fn inbox_claimed(&mut self, names: &[String]) {
        self.unread.retain(|n| !names.contains(n));
    }

    /// Reset: a new, empty list and an empty inbox (`cryo.toml` stays).
    pub(super) fn reset(&mut self) {
        self.todos = Ok(Held::List(TodoList::default()));
        self.unread.clear();
    }
}
