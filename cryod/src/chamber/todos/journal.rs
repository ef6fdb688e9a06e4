//! The journal of an agent's adds: during its session, a `todo add` is one
//! line appended to `.cryo/todo-journal.jsonl` and synced, not a rewrite of
//! `todo.json`, so an agent adding in a loop writes what it adds. The list
//! is `todo.json` with the journal's TODOs after it (those whose ids it does
//! not hold). Any other change rewrites `todo.json` with them and empties
//! the journal: the session's settlement always does, so the file is whole
//! again when the session ends; so does the journal outgrowing half the file.
//! A crash after the rewrite but before the journal is emptied replays
//! nothing twice (the ids are in the file).

use std::io::Write;
use std::path::Path;

use chrono_tz::Tz;
use cryo_core::todo::{self, Todo, TodoList};

use super::super::{Dir, FileError};

pub(super) const JOURNAL: &str = ".cryo/todo-journal.jsonl";

/// The largest journal read (it is folded long before: see [`Journal::full`]).
const MAX_JOURNAL_BYTES: u64 = 32 * 1024 * 1024;

/// A journal this small is never worth a rewrite of `todo.json`.
const FOLD_FLOOR: u64 = 64 * 1024;

/// The same add (a TODO's creation is to the second, with its text).
fn same(a: &Todo, b: &Todo) -> bool {
    a.text == b.text && a.created == b.created
}

/// The journal as read.
#[derive(Debug, Default)]
pub(super) struct Journal {
    items: Vec<Todo>,
    /// Its size in bytes (0: none).
    pub bytes: u64,
    /// Its last line is torn (a crash mid-append).
    torn: bool,
}

impl Journal {
    pub fn read(d: &Dir, tz: Tz) -> Result<Journal, FileError> {
        let Some(bytes) = d.read_if(Path::new(JOURNAL), MAX_JOURNAL_BYTES)? else { return Ok(Journal::default()) };
        let text = String::from_utf8_lossy(&bytes);
        let items = text.lines().filter_map(|l| todo::parse_line(l, tz)).collect();
        Ok(Journal { items, bytes: bytes.len() as u64, torn: bytes.last().is_some_and(|b| *b != b'\n') })
    }

    /// Leaves out the TODOs with these ids: the done ones `todo.json` still
    /// held past its tail, being archived (a journal left by a crash after
    /// its fold may name one; it is not new).
    pub fn forget(&mut self, ids: &std::collections::HashSet<u64>) {
        self.items.retain(|t| !ids.contains(&t.id));
    }

    /// Adds to `list` the journal's TODOs it does not hold. One whose id a
    /// hand edit gave to another TODO meanwhile is kept under a fresh id
    /// (never lost).
    pub fn merge_into(&self, list: &mut TodoList) {
        let mut clashes = Vec::new();
        for t in &self.items {
            // The journal is the agent's to write: no more TODOs through it
            // than `todo add` takes.
            if list.open() >= todo::MAX_TODOS {
                return;
            }
            match list.get(t.id) {
                None => {
                    list.high_water = list.high_water.max(t.id);
                    list.items.push(t.clone());
                }
                Some(held) if !same(held, t) => clashes.push(t.clone()),
                Some(_) => {}
            }
        }
        // Given a fresh id before, it may be in the file under that one.
        clashes.retain(|t| !list.items.iter().any(|held| same(held, t)));
        for mut t in clashes {
            if list.open() >= todo::MAX_TODOS {
                return;
            }
            let max = list.items.iter().map(|t| t.id).max().unwrap_or(0);
            t.id = list.high_water.max(max) + 1;
            list.high_water = t.id;
            list.items.push(t);
        }
    }

    /// Whether `more` bytes would make it worth folding into a `todo.json`
    /// of `file` bytes (it then costs at most a third more than the adds).
    pub fn full(&self, more: u64, file: u64) -> bool {
        self.bytes + more > FOLD_FLOOR.max(file / 2)
    }

    /// Appends `added`, synced (and the folder, when the journal is new).
    pub fn append(&self, d: &Dir, added: &[Todo], tz: Tz) -> Result<(), FileError> {
        let path = d.path().join(JOURNAL);
        let io = |error| FileError::Io { path: path.clone(), error };
        let mut text = if self.torn { "\n".to_string() } else { String::new() };
        text.extend(added.iter().map(|t| todo::render_line(t, tz)));
        let mut f = d.append(Path::new(JOURNAL))?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_data().map_err(io)?;
        if self.bytes == 0 {
            d.sync_folder(Path::new(".cryo"))?;
        }
        Ok(())
    }

    /// Empties it, once `todo.json` holds its TODOs durably.
    pub fn clear(&self, d: &Dir) -> Result<(), FileError> {
        if self.bytes == 0 {
            return Ok(());
        }
        match d.remove(Path::new(JOURNAL)) {
            Err(FileError::Missing(_)) => Ok(()),
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{How, load, todo_path, update_with};
    use super::*;

    fn now() -> chrono::DateTime<chrono::Utc> {
        "2026-03-05T12:00:00Z".parse().unwrap()
    }

    fn agent_add(
        d: &Path,
        text: &str,
    ) -> Result<(u64, TodoList, Option<super::super::Stamp>), super::super::UpdateError<todo::TodoError>> {
        let how = How { durable: true, keep_done: 100, now: now(), journaled: true, gate: None };
        let new = todo::NewTodo { text: text.into(), at: Some(now()), ..Default::default() };
        update_with(d, chrono_tz::UTC, how, |l| l.add(new.clone(), now(), chrono_tz::UTC))
    }

    /// An agent's adds are appended; the list shows them; any other change
    /// folds them into `todo.json` and empties the journal; a journal grown
    /// past half the file is folded by the add itself.
    #[test]
    fn adds_are_appended_and_folded_by_the_next_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for i in 0..3 {
            let (id, _, stamp) = agent_add(d, &format!("job {i}")).unwrap();
            assert_eq!((id, stamp), (i + 1, None), "an append, not a rewrite of todo.json");
        }
        assert!(!todo_path(d).exists(), "todo.json untouched");
        assert_eq!(load(d, chrono_tz::UTC).unwrap().items.len(), 3, "the list holds the journal's adds");
        let how = How { durable: true, keep_done: 100, now: now(), journaled: false, gate: None };
        update_with(d, chrono_tz::UTC, how, |l| l.done(2)).unwrap();
        let file = std::fs::read_to_string(todo_path(d)).unwrap();
        assert!(file.contains("job 0") && file.contains("job 2"), "{file}");
        assert!(!d.join(JOURNAL).exists(), "folded and emptied");
        // Past the floor, the add folds itself.
        let long = "x".repeat(1_900);
        let mut rewrites = 0;
        for i in 0..100 {
            rewrites += agent_add(d, &format!("{long} {i}")).unwrap().2.is_some() as usize;
        }
        assert!((1..10).contains(&rewrites), "{rewrites} rewrites for 100 adds of 2 KB");
        assert_eq!(load(d, chrono_tz::UTC).unwrap().items.len(), 103);
    }

    /// A torn last line is closed; an id a hand edit took meanwhile is
    /// given anew, never lost; an add that reached todo.json and the
    /// journal both (a crash before the journal was emptied) is listed once.
    #[test]
    fn a_torn_journal_a_clash_and_a_replay_lose_and_double_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        agent_add(d, "first").unwrap();
        let mut j = std::fs::OpenOptions::new().append(true).open(d.join(JOURNAL)).unwrap();
        j.write_all(br#"{"id":2,"te"#).unwrap();
        agent_add(d, "second").unwrap();
        // A hand edit takes id 1 for something else.
        std::fs::write(todo_path(d), r#"[{"id":1,"text":"by hand","done":false}]"#).unwrap();
        let list = load(d, chrono_tz::UTC).unwrap();
        let texts: Vec<(u64, &str)> = list.items.iter().map(|t| (t.id, t.text.as_str())).collect();
        assert_eq!(texts, [(1, "by hand"), (2, "second"), (3, "first")]);
        // Folded, then the journal put back as if its removal was lost.
        let saved = std::fs::read(d.join(JOURNAL)).unwrap();
        let how = How { durable: true, keep_done: 100, now: now(), journaled: false, gate: None };
        update_with(d, chrono_tz::UTC, how, |l| l.done(1)).unwrap();
        std::fs::write(d.join(JOURNAL), saved).unwrap();
        let again = load(d, chrono_tz::UTC).unwrap();
        assert_eq!(again.items.len(), 3, "{again:?}");
    }
}
