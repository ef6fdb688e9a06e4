//! `cryoctl chamber reset`: a stopped chamber's runtime files move into
//! `history/TIMESTAMP/`, and the chamber begins again from its plan and
//! config as `init` lays it out.
//!
//! Moved: `todo.json`, `NOTES.md`, `messages/`, the logs (rotated ones
//! too) and `.cryo/`, but for what describes the world outside the chamber
//! (the bridges' cursors, which would otherwise import a chat's whole history
//! again, and a fleet owner's fence stamp). Kept: `plan.md`, `cryo.toml`,
//! `.gitignore`, `history/` itself and anything else the operator put there.
//! Every move is a rename inside the chamber: nothing is copied, and a move
//! that fails puts back what moved before it.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::{Dir, NewFile};

/// The folder that keeps what resets moved, relative to the chamber.
pub const HISTORY: &str = "history";
/// When the chamber was last reset (RFC 3339), in `.cryo/`.
const MARK: &str = "reset";

/// Whether a name at the chamber's top level is a runtime file.
fn runtime(name: &str) -> bool {
    matches!(name, "todo.json" | "NOTES.md" | "messages")
        || ["cryo.log", "cryo-agent.log"].iter().any(|log| name == *log || name.starts_with(&format!("{log}.")))
}

/// Whether a file of `.cryo/` stays: it describes the world, not the chamber.
fn kept_in_dot(name: &str) -> bool {
    (name.starts_with("sync-") && name.ends_with(".json")) || name == "fence"
}

/// Moves the runtime files of the chamber at `root` into a new
/// `history/TIMESTAMP/` and scaffolds what `init` makes (a `cryo.toml`, if
/// it had none, with `sandbox`); returns that folder, relative to `root`.
/// Nothing on the way is followed if a link: a `history` that is one is
/// refused, and a runtime file that is one moves as the link it is.
pub fn to_history(root: &Path, now: DateTime<Utc>, sandbox: crate::config::Sandbox) -> std::io::Result<String> {
    let d = Dir::open(root)?;
    d.make_dirs(Path::new(HISTORY))?;
    let stamp = now.format("%Y%m%dT%H%M%SZ").to_string();
    let (mut rel, mut n) = (format!("{HISTORY}/{stamp}"), 1);
    while d.kind(Path::new(&rel))?.is_some() {
        n += 1;
        rel = format!("{HISTORY}/{stamp}-{n}");
    }
    let dest = PathBuf::from(&rel);
    d.make_dirs(&dest)?;
    let mut moves: Vec<(PathBuf, PathBuf)> = Vec::new();
    for entry in d.list(Path::new("."))? {
        if runtime(&entry.name.to_string_lossy()) {
            moves.push((PathBuf::from(&entry.name), dest.join(&entry.name)));
        }
    }
    if d.kind(Path::new(".cryo"))? == Some(cryo_files::Kind::Folder) {
        for entry in d.list(Path::new(".cryo"))? {
            if !kept_in_dot(&entry.name.to_string_lossy()) {
                moves.push((Path::new(".cryo").join(&entry.name), dest.join(".cryo").join(&entry.name)));
            }
        }
    }
    moves.sort();
    if let Err((from, e)) = move_all(&moves, |from, to| Ok(d.rename(from, to, false)?)) {
        let _ = std::fs::remove_dir_all(root.join(&dest));
        return Err(std::io::Error::new(e.kind(), format!("cannot move {} into {rel}/: {e}", from.display())));
    }
    super::scaffold::init(root, None, sandbox)?;
    d.write(&Path::new(".cryo").join(MARK), now.to_rfc3339().as_bytes(), NewFile::DURABLE)?;
    Ok(rel)
}

/// Makes each move (`rename`, which creates the destination's folder);
/// if one fails, puts back those made before it and says which failed.
fn move_all(
    moves: &[(PathBuf, PathBuf)],
    mut rename: impl FnMut(&Path, &Path) -> std::io::Result<()>,
) -> Result<(), (PathBuf, std::io::Error)> {
    for (i, (from, to)) in moves.iter().enumerate() {
        if let Err(e) = rename(from, to) {
            for (back_from, back_to) in moves[..i].iter().rev() {
                let _ = rename(back_to, back_from);
            }
            return Err((from.clone(), e));
        }
    }
    Ok(())
}

/// When the chamber (its folder `d`) was last reset, if ever.
pub fn last_reset(d: &Dir) -> Option<DateTime<Utc>> {
    let bytes = d.read(&Path::new(".cryo").join(MARK), 1024).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    DateTime::parse_from_rfc3339(text.trim()).ok().map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Sandbox;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn runtime_files_move_and_the_rest_stays() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        super::super::scaffold::init(root, Some("agent"), crate::config::Sandbox::Off).unwrap();
        std::fs::write(root.join("plan.md"), "the plan").unwrap();
        for (rel, text) in [
            ("todo.json", "[]"),
            ("NOTES.md", "my notes"),
            ("messages/inbox/a.md", "mail"),
            ("messages/attachments/x.png", "png"),
            ("cryo.log", "log"),
            ("cryo.log.1", "old log"),
            ("cryo-agent.log", "agent"),
            (".cryo/state.json", "{}"),
            (".cryo/agent-events.jsonl", "{}"),
            (".cryo/sync-zulip.json", "{\"cursor\":7}"),
            ("src/main.rs", "fn main() {}"),
            ("cryo.logbook", "not a log"),
        ] {
            write(root, rel, text);
        }
        let now = DateTime::parse_from_rfc3339("2026-11-24T10:20:30Z").unwrap().with_timezone(&Utc);
        let rel = to_history(root, now, Sandbox::Off).unwrap();
        assert_eq!(rel, "history/20261124T102030Z");
        let old = root.join(&rel);
        for moved in [
            "todo.json",
            "NOTES.md",
            "messages/inbox/a.md",
            "messages/attachments/x.png",
            "cryo.log",
            "cryo.log.1",
            "cryo-agent.log",
            ".cryo/state.json",
            ".cryo/agent-events.jsonl",
        ] {
            assert!(old.join(moved).is_file(), "{moved} moved");
            assert!(!root.join(moved).exists() || moved == "NOTES.md", "{moved} is gone from the chamber");
        }
        // Kept: the brief, the config, the operator's own files, the cursors.
        assert_eq!(std::fs::read_to_string(root.join("plan.md")).unwrap(), "the plan");
        assert!(root.join("cryo.toml").is_file() && root.join("src/main.rs").is_file());
        assert!(root.join("cryo.logbook").is_file());
        assert!(root.join(".cryo/sync-zulip.json").is_file());
        // Scaffolded afresh.
        assert_ne!(std::fs::read_to_string(root.join("NOTES.md")).unwrap(), "my notes");
        assert!(root.join("messages/inbox").is_dir() && root.join("messages/attachments").is_dir());
        assert_eq!(last_reset(&Dir::open(root).unwrap()), Some(now));
        // A second reset in the same second gets its own folder.
        assert_eq!(to_history(root, now, Sandbox::Off).unwrap(), "history/20261124T102030Z-2");
    }

    #[test]
    fn a_move_that_fails_puts_back_those_made_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let names = ["a", "b", "c"];
        for n in names {
            write(root, n, n);
        }
        let moves: Vec<(PathBuf, PathBuf)> = names.iter().map(|n| (root.join(n), root.join("to").join(n))).collect();
        // The third move fails (a full disk, say); the first two were made.
        let mut calls = 0;
        let failed = move_all(&moves, |from, to| {
            calls += 1;
            if calls == 3 {
                Err(std::io::Error::other("no space left"))
            } else {
                std::fs::create_dir_all(to.parent().unwrap()).and_then(|()| std::fs::rename(from, to))
            }
        })
        .unwrap_err();
        assert_eq!(failed.0, root.join("c"));
        for n in names {
            assert_eq!(std::fs::read_to_string(root.join(n)).unwrap(), n, "{n} is back in place");
            assert!(!root.join("to").join(n).exists());
        }
    }

    #[test]
    fn a_reset_that_cannot_begin_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (rel, text) in [("NOTES.md", "notes"), ("todo.json", "[]"), (".cryo/state.json", "{}")] {
            write(root, rel, text);
        }
        // `history` is a file: no folder can be made in it.
        std::fs::write(root.join(HISTORY), "in the way").unwrap();
        let now = DateTime::parse_from_rfc3339("2026-11-24T10:20:30Z").unwrap().with_timezone(&Utc);
        assert!(to_history(root, now, Sandbox::Off).is_err());
        assert_eq!(std::fs::read_to_string(root.join("NOTES.md")).unwrap(), "notes");
        assert!(root.join("todo.json").is_file() && root.join(".cryo/state.json").is_file());
    }

    #[test]
    fn a_cryo_toml_made_again_gets_the_sandbox_given() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "plan.md", "the plan");
        let now = DateTime::parse_from_rfc3339("2026-11-24T10:20:30Z").unwrap().with_timezone(&Utc);
        to_history(dir.path(), now, Sandbox::Bwrap).unwrap();
        let toml = std::fs::read_to_string(dir.path().join("cryo.toml")).unwrap();
        assert!(toml.contains("\nsandbox = \"bwrap\"\n"), "{toml}");
    }
}
