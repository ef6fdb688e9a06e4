//! `cryoctl chamber schedule` and `cryoctl schedule`: the coming wakes of
//! one chamber or of all, read from each chamber's files (`todo.json`, and
//! `cryo.toml` for its zone and pre-check) and laid out by
//! [`cryo_core::schedule`], each with what holds it back as things stand.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use chrono_tz::Tz;
use cryo_core::chamber::State;
use cryo_core::schedule::Upcoming;
use cryo_core::todo::TodoList;

use super::{ChamberRef, ChamberView, Daemon};
use crate::chamber::{Dir, config as chamber_config, todos, version};
use crate::error::Result;

/// Most wakes one request lists.
pub const MAX_COUNT: usize = 1000;

/// One coming wake of a chamber.
pub struct Planned {
    pub chamber: String,
    pub tz: Tz,
    pub wake: Upcoming,
    /// Why it will not run then, as things stand.
    pub held: Option<String>,
}

/// Why a chamber's wakes cannot be laid out: one of its files does not read.
#[derive(Debug, thiserror::Error)]
pub enum Unplanned {
    /// Its `cryo.toml` (for the zone and the pre-check).
    #[error(transparent)]
    Config(#[from] chamber_config::ConfigError),
    /// Its `todo.json`.
    #[error(transparent)]
    Todos(#[from] todos::TodosError),
    /// Its folder cannot be opened (and its files' readers found nothing
    /// more to say).
    #[error("the chamber's folder cannot be opened")]
    Gone,
}

/// What each chamber's wakes were last laid out from, kept by the versions
/// of the files read (`cryo.toml`, `todo.json`, the journal of adds, the
/// state file) and the system's zone: a schedule of every chamber (the hub
/// asks one at each visit of its list) reads a chamber's files again only
/// when one changed, a `stat` each otherwise (10,000 chambers: every file
/// read and parsed took 0.4-1.1 s).
///
/// A version is the file's inode, size, and times of change: its ctime
/// too, which no one can set back (the agent can put an old mtime back on
/// a file it rewrote in place). A file changed within the last
/// [`version::SETTLING`] is not kept, as git does with a file changed in the same
/// tick as its index (timestamps are coarse: two writes of one size in a
/// tick look alike); nor is a list of more than [`MAX_KEPT`] TODOs.
pub(super) struct Memo {
    kept: std::sync::Mutex<HashMap<i64, Read>>,
    /// [`version::SETTLING`] (tests take less).
    settling: std::time::Duration,
}

impl Default for Memo {
    fn default() -> Memo {
        Memo { kept: Default::default(), settling: version::SETTLING }
    }
}

/// The most pending TODOs a chamber's kept list holds (a larger one is read
/// every time, not held).
const MAX_KEPT: usize = 1000;

/// A file's version: device, inode, size, mtime and ctime (to the
/// nanosecond); `None` if it is not there.
type Version = Option<[i64; 7]>;

/// One chamber's files, as read for its wakes.
struct Read {
    key: ([Version; 4], Tz),
    tz: Tz,
    precheck: Option<String>,
    /// Only what is pending: done TODOs have no wakes.
    list: Arc<TodoList>,
}

impl Memo {
    /// The chamber's zone, pre-check and list, read again only if a file
    /// changed since the last read.
    fn read(
        &self,
        id: i64,
        root: &Path,
        system: Tz,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(Tz, Option<String>, Arc<TodoList>), Unplanned> {
        let Ok(d) = Dir::open(root) else {
            // cryo.toml's reader says what became of the folder.
            chamber_config::load(root, system)?;
            return Err(todos::load(root, system).err().map_or(Unplanned::Gone, Unplanned::Todos));
        };
        let settled = std::time::SystemTime::from(now) - self.settling;
        let mut fresh = false;
        let mut version = |rel: &str| -> Version {
            let m = d.stat(Path::new(rel)).ok().flatten()?;
            fresh |= version::unsettled(&m, settled);
            Some(version::of(&m))
        };
        let [todo, journal, state] = todos::FILES;
        let key = ([version(chamber_config::FILE), version(todo), version(journal), version(state)], system);
        if let Some(r) = self.kept.lock().expect("schedule memo").get(&id).filter(|r| r.key == key) {
            return Ok((r.tz, r.precheck.clone(), r.list.clone()));
        }
        let config = chamber_config::load(root, system)?.config;
        let mut list = todos::load(root, config.timezone)?;
        list.items.retain(|t| t.is_pending());
        let read = Read { key, tz: config.timezone, precheck: config.precheck, list: Arc::new(list) };
        let out = (read.tz, read.precheck.clone(), read.list.clone());
        let mut kept = self.kept.lock().expect("schedule memo");
        if fresh || read.list.items.len() > MAX_KEPT {
            kept.remove(&id);
        } else {
            kept.insert(id, read);
        }
        Ok(out)
    }

    /// Forgets the chambers not in `kept` (removed since).
    fn keep(&self, kept: &std::collections::HashSet<i64>) {
        self.kept.lock().expect("schedule memo").retain(|id, _| kept.contains(id));
    }
}

impl Daemon {
    /// The next `count` wakes of one chamber, or of every chamber on one
    /// time line; and one line for each chamber whose files cannot be read.
    /// The chambers' files are read off the runtime's workers.
    pub async fn schedule(&self, only: Option<&ChamberRef>, count: usize) -> Result<(Vec<Planned>, Vec<String>)> {
        let count = count.clamp(1, MAX_COUNT);
        let views = match only {
            Some(r) => vec![self.resolve(r).await?],
            None => self.list().await,
        };
        let now = self.0.shared.clock.now();
        let system = self.0.shared.system_zone.get();
        let (daemon, all) = (self.clone(), only.is_none());
        crate::chamber::blocking(move || {
            let memo = &daemon.0.schedule_memo;
            if all {
                memo.keep(&views.iter().map(|v| v.record.id).collect());
            }
            let (mut out, mut problems) = (Vec::new(), Vec::new());
            for v in views {
                match planned(memo, &v, now, system, count) {
                    Ok(p) => out.extend(p),
                    Err(e) => problems.push(format!("{}: {e}", v.record.name)),
                }
            }
            out.sort_by(|a, b| (a.wake.at, &a.chamber, a.wake.todo).cmp(&(b.wake.at, &b.chamber, b.wake.todo)));
            out.truncate(count);
            (out, problems)
        })
        .await
    }
}

fn planned(
    memo: &Memo,
    v: &ChamberView,
    now: chrono::DateTime<chrono::Utc>,
    system: Tz,
    count: usize,
) -> Result<Vec<Planned>, Unplanned> {
    let (tz, precheck, list) = memo.read(v.record.id, Path::new(&v.record.path), system, now)?;
    let held = match v.snap.view.state {
        State::Stopped => Some(format!("the chamber is stopped (cryoctl chamber start {})", v.record.name)),
        State::Paused => Some(format!("the chamber is paused (cryoctl chamber resume {})", v.record.name)),
        State::Faulted => Some("the chamber is faulted (see cryoctl chamber status)".to_string()),
        State::AwaitingApproval if !v.snap.view.in_session => Some(format!(
            "the chamber waits for an answer (cryoctl approvals; cryoctl chamber resume {})",
            v.record.name
        )),
        State::Held => v.snap.view.held.as_ref().map(|h| {
            format!("its account {} is at its limit until {}", h.account, crate::base::clock::rfc3339(h.until))
        }),
        State::Idle | State::Running | State::AwaitingApproval => None,
    };
    let running = v.snap.view.in_session;
    let wakes = cryo_core::schedule::upcoming(&list, now, tz, count, precheck.as_deref());
    Ok(wakes
        .into_iter()
        .map(|wake| {
            let held = held.clone().or_else(|| {
                (running && wake.overdue).then(|| format!("it waits for session {} to end", v.snap.view.session))
            });
            Planned { chamber: v.record.name.clone(), tz, wake, held }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wall clock, as cryod's clock reads it.
    fn now() -> chrono::DateTime<chrono::Utc> {
        crate::base::clock::Clock::system().now()
    }

    fn todo_json(texts: &[&str]) -> String {
        let items: Vec<String> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| format!(r#"{{"id":{},"text":"{t}","at":"2030-01-0{}T09:00:00Z"}}"#, i + 1, i + 1))
            .collect();
        format!("[{}]", items.join(","))
    }

    /// A chamber's files are read once, then again only when one of them
    /// changes (its TODOs, its settings, the journal of adds), even when
    /// rewritten in place at the same size with the old mtime put back.
    #[test]
    fn a_chambers_files_are_read_again_only_when_one_changed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("todo.json"), todo_json(&["one"])).unwrap();
        // Nothing settles in a test: a change a moment ago may be kept.
        let memo = Memo { settling: std::time::Duration::ZERO, ..Memo::default() };
        let utc = chrono_tz::UTC;
        let (tz, _, first) = memo.read(7, root, utc, now()).unwrap();
        assert_eq!((tz, first.items.len()), (utc, 1));
        let (_, _, again) = memo.read(7, root, utc, now()).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "read again with nothing changed");
        std::fs::write(root.join("todo.json"), todo_json(&["one", "two"])).unwrap();
        assert_eq!(memo.read(7, root, utc, now()).unwrap().2.items.len(), 2, "todo.json changed");
        // The same size, written in place, the mtime put back: the ctime moved.
        let file = root.join("todo.json");
        let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&file, todo_json(&["one", "owt"])).unwrap();
        std::fs::File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
        let read = memo.read(7, root, utc, now()).unwrap().2;
        assert_eq!(read.items[1].text, "owt", "a same-size rewrite with its old mtime");
        std::fs::write(root.join("cryo.toml"), "timezone = \"Europe/Berlin\"\n").unwrap();
        assert_eq!(memo.read(7, root, utc, now()).unwrap().0, chrono_tz::Europe::Berlin, "cryo.toml changed");
        std::fs::create_dir_all(root.join(".cryo")).unwrap();
        let add = r#"{"id":3,"text":"three","at":"2030-01-03T09:00:00Z","created":"2026-01-01T00:00:00Z"}"#;
        std::fs::write(root.join(".cryo/todo-journal.jsonl"), format!("{add}\n")).unwrap();
        assert_eq!(memo.read(7, root, utc, now()).unwrap().2.items.len(), 3, "an add journaled");
        std::fs::write(root.join(".cryo/state.json"), "garbage").unwrap();
        assert!(memo.read(7, root, utc, now()).is_err(), "a broken state file is said");
        std::fs::remove_file(root.join(".cryo/state.json")).unwrap();
        std::fs::write(root.join("cryo.toml"), "timezone = \"Nowhere/Else\"\n").unwrap();
        assert!(memo.read(7, root, utc, now()).is_err(), "a bad file is said, not hidden by what was kept");
        memo.keep(&Default::default());
        assert!(memo.kept.lock().unwrap().is_empty(), "a removed chamber is forgotten");
    }

    /// A file changed within the settling time is read every time: a
    /// second write of the same size in the same tick is not missed.
    #[test]
    fn a_file_changed_a_moment_ago_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("todo.json"), todo_json(&["one"])).unwrap();
        let memo = Memo::default();
        memo.read(1, dir.path(), chrono_tz::UTC, now()).unwrap();
        assert!(memo.kept.lock().unwrap().is_empty());
    }

    /// A folder gone says so as cryo.toml's reader does.
    #[test]
    fn a_missing_folder_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let e = Memo::default().read(1, &gone, chrono_tz::UTC, now()).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("cryoctl chamber remove"), "{e}");
    }
}
