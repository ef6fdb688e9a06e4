//! What each chamber's TODO list said of its next wake, kept from one start
//! of cryod to the next.
//!
//! A chamber at rest holds only its next due time, yet a start parsed every
//! chamber's `todo.json` to learn it: a fifth of a start at 10,000 chambers
//! of 100 TODOs. A start now keeps, for each list it parsed, the versions of
//! the files it read and the next due time they gave; the next start takes
//! that time back, without a parse, for a chamber whose files are still
//! those versions.
//!
//! A version is a file's device, inode and size, and the times of its last
//! change of content (`mtime`) and of status (`ctime`), to the nanosecond.
//! cryod replaces `todo.json` (a new inode) and appends to the journal; any
//! other write changes the `ctime`, which only the kernel sets. The list also
//! depends on the journal of adds and on the zone its local times are read
//! in, so both are in the key. A file changed in the last [`SETTLING`] is
//! not kept by its version. An entry states a fact about versions of files:
//! it never goes stale, it only stops matching.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use nix::sys::stat::FileStat;

use super::{Dir, STATE, Stamp, TODO, journal::JOURNAL};

/// The file in cryod's state folder the entries are kept in.
pub const FILE: &str = "todo-next.json";

/// The largest file of kept entries read (a hundred thousand chambers'
/// take about 15 MB).
const MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The versions of the files a chamber's list is read from (the state
/// file too: one that became unreadable faults the chamber at its start),
/// and its zone.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Key {
    todo: Option<[i64; 7]>,
    journal: Option<[i64; 7]>,
    state: Option<[i64; 7]>,
    tz: String,
}

/// The build that read the lists: the rules that parse them and the zones'
/// data are its own (cryo-core's sources, chrono-tz's version in
/// `Cargo.lock`), so another build's entries are not taken.
fn build() -> String {
    format!("cryod {} {}", env!("CARGO_PKG_VERSION"), cryo_session::BUILD)
}

/// The file: the build that wrote it, and its entries.
#[derive(serde::Serialize, serde::Deserialize)]
struct Written {
    build: String,
    entries: Vec<Entry>,
}

/// A file's version: its device, inode, size, mtime and ctime (to the
/// nanosecond).
pub fn version(m: &FileStat) -> [i64; 7] {
    [m.st_dev as i64, m.st_ino as i64, m.st_size, m.st_mtime, m.st_mtime_nsec, m.st_ctime, m.st_ctime_nsec]
}

/// How recently a file must not have changed for its version to stand for
/// its content: timestamps are coarse, and two writes of one size in one
/// tick look alike (git keeps no such "racy" file by its stat either).
pub const SETTLING: Duration = Duration::from_secs(2);

/// Whether the file's content or status changed at `settled` or later.
pub fn unsettled(m: &FileStat, settled: SystemTime) -> bool {
    let at = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns.clamp(0, 999_999_999) as u32);
    at(m.st_ctime, m.st_ctime_nsec).max(at(m.st_mtime, m.st_mtime_nsec)) >= settled
}

/// `todo.json`'s [`Stamp`] now, and the key of the list's files now: none
/// when a version cannot be told, or a file changed after `settled` (the
/// list is then read, as it always was, and not kept). Taken before the
/// files are read: a change after it makes a later key differ.
pub fn versions(dir: &Path, tz: Tz, settled: SystemTime) -> (Option<Stamp>, Option<Key>) {
    let Ok(d) = Dir::open(dir) else { return (None, None) };
    let Ok(todo) = d.stat(Path::new(TODO)) else { return (None, None) };
    let stamp = todo.as_ref().map(Stamp::of);
    let (Ok(journal), Ok(state)) = (d.stat(Path::new(JOURNAL)), d.stat(Path::new(STATE))) else {
        return (stamp, None);
    };
    if todo.iter().chain(&journal).chain(&state).any(|m| unsettled(m, settled)) {
        return (stamp, None);
    }
    let [todo, journal, state] = [todo, journal, state].map(|m| m.as_ref().map(version));
    (stamp, Some(Key { todo, journal, state, tz: tz.name().into() }))
}

/// One chamber's entry: the key and the next due time its list gave (as
/// seconds and nanoseconds since the epoch).
#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    id: i64,
    key: Key,
    next_due: Option<(i64, u32)>,
}

/// The entries of the last start, taken by this one's boots, and those this
/// start keeps for the next.
#[derive(Default)]
struct Book {
    last: HashMap<i64, Entry>,
    kept: Vec<Entry>,
    taken: u64,
    read: u64,
}

/// The kept next due times: open while the chambers boot, then written for
/// the next start ([`Kept::save`]). Closed, it takes and keeps nothing (a
/// fleet's node, which claims its chambers one by one, and any supervisor
/// made after the start).
#[derive(Default)]
pub struct Kept {
    book: Mutex<Option<(PathBuf, Book)>>,
}

impl Kept {
    /// Opens the entries the last start kept in `file`. A file that is
    /// missing or does not parse gives none (every list is read).
    pub fn open(&self, file: PathBuf) {
        let last = read(&file).unwrap_or_else(|why| {
            tracing::info!(file = %file.display(), %why, "the TODO lists' kept next wakes are not used: each list is read");
            Vec::new()
        });
        let last = last.into_iter().map(|e| (e.id, e)).collect();
        *self.lock() = Some((file, Book { last, ..Book::default() }));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(PathBuf, Book)>> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Chamber `id`'s next due time, if the last start kept one for the
    /// versions `key` names (kept again for the next start).
    pub fn take(&self, id: i64, key: &Key) -> Option<Option<DateTime<Utc>>> {
        let mut book = self.lock();
        let (_, book) = book.as_mut()?;
        let entry = book.last.remove(&id).filter(|e| e.key == *key)?;
        let next_due = match entry.next_due {
            Some((secs, nanos)) => Some(DateTime::from_timestamp(secs, nanos)?),
            None => None,
        };
        book.kept.push(entry);
        book.taken += 1;
        Some(next_due)
    }

    /// The list chamber `id` read at the versions `key` names comes due
    /// next at `next_due`.
    pub fn keep(&self, id: i64, key: Key, next_due: Option<DateTime<Utc>>) {
        if let Some((_, book)) = self.lock().as_mut() {
            let next_due = next_due.map(|t| (t.timestamp(), t.timestamp_subsec_nanos()));
            book.kept.push(Entry { id, key, next_due });
            book.read += 1;
        }
    }

    /// The boots are over: writes what this start kept for the next one
    /// and closes. How many lists were taken without a read, and how many
    /// were read (none if it was not open).
    pub fn save(&self) -> Option<(u64, u64)> {
        let (file, book) = self.lock().take()?;
        let bytes = serde_json::to_vec(&Written { build: build(), entries: book.kept }).unwrap_or_default();
        if let Err(error) = crate::chamber::write_atomic(&file, &bytes) {
            tracing::warn!(file = %file.display(), %error, "cannot keep the TODO lists' next wakes: the next start reads each list");
        }
        Some((book.taken, book.read))
    }
}

/// The entries in `file` (an empty list if it is missing).
fn read(file: &Path) -> Result<Vec<Entry>, String> {
    // cryod's own folder, read as its other files are: no link followed, no
    // FIFO opened, nothing over the limit read.
    let (Some(folder), Some(name)) = (file.parent(), file.file_name()) else { return Ok(Vec::new()) };
    let read = Dir::open_own(folder).and_then(|d| d.read_if(Path::new(name), MAX_BYTES));
    let Some(bytes) = read.map_err(|e| e.to_string())? else { return Ok(Vec::new()) };
    let written: Written = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if written.build != build() {
        return Err(format!("written by another build ({})", written.build));
    }
    Ok(written.entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An hour after the list's last change: it has settled.
    fn settled_after(dir: &Path) -> SystemTime {
        std::fs::metadata(dir.join(TODO)).unwrap().modified().unwrap() + Duration::from_secs(3600)
    }

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    /// A key matches while neither file changes and the zone is the same;
    /// an edit in place of the same size, a new journal, or another zone
    /// each make it differ.
    #[test]
    fn a_key_holds_while_the_files_and_the_zone_do() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        write(dir, TODO, "[]");
        let written = std::fs::metadata(dir.join(TODO)).unwrap().modified().unwrap();
        assert_eq!(versions(dir, chrono_tz::UTC, written - SETTLING).1, None, "written a moment ago");
        let key = || versions(dir, chrono_tz::UTC, settled_after(dir)).1.unwrap();
        let first = key();
        assert_eq!(key(), first);
        assert_ne!(versions(dir, chrono_tz::Europe::Berlin, settled_after(dir)).1.unwrap(), first);
        // Written in place with the same bytes, its times set back: the
        // ctime alone tells.
        let before = std::fs::metadata(dir.join(TODO)).unwrap();
        write(dir, TODO, "[]");
        let (atime, mtime) = (before.accessed().unwrap(), before.modified().unwrap());
        std::fs::File::options()
            .write(true)
            .open(dir.join(TODO))
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_accessed(atime).set_modified(mtime))
            .unwrap();
        assert_eq!(std::fs::metadata(dir.join(TODO)).unwrap().modified().unwrap(), mtime);
        assert_ne!(key(), first);
        let second = key();
        write(dir, JOURNAL, "{}\n");
        assert_ne!(key(), second);
    }

    /// What one start keeps, the next takes back when the key matches, and
    /// keeps again; an entry that no longer matches is dropped.
    #[test]
    fn kept_entries_are_taken_back_by_the_next_start() {
        let t = tempfile::tempdir().unwrap();
        let (dir, file) = (t.path(), t.path().join(FILE));
        write(dir, TODO, "[]");
        let key = versions(dir, chrono_tz::UTC, settled_after(dir)).1.unwrap();
        let due = DateTime::parse_from_rfc3339("2031-02-03T04:05:06.789012345Z").unwrap().to_utc();
        let first = Kept::default();
        assert_eq!(first.take(1, &key), None, "closed: nothing is taken");
        first.open(file.clone());
        assert_eq!(first.take(1, &key), None);
        first.keep(1, key.clone(), Some(due));
        first.keep(2, key.clone(), None);
        first.keep(3, key.clone(), None);
        assert_eq!(first.save(), Some((0, 3)));
        let next = Kept::default();
        next.open(file.clone());
        assert_eq!(next.take(1, &key), Some(Some(due)));
        assert_eq!(next.take(2, &key), Some(None));
        write(dir, TODO, "[ ]");
        assert_eq!(next.take(3, &versions(dir, chrono_tz::UTC, settled_after(dir)).1.unwrap()), None);
        assert_eq!(next.save(), Some((2, 0)));
        let third = Kept::default();
        third.open(file.clone());
        assert_eq!(third.take(3, &key), None, "the entry that did not match was not kept");
        assert_eq!(third.take(1, &key), Some(Some(due)));
        // A file that does not parse gives nothing, and is replaced.
        std::fs::write(&file, "{").unwrap();
        let fourth = Kept::default();
        fourth.open(file.clone());
        assert_eq!(fourth.take(1, &key), None);
        assert_eq!(fourth.save(), Some((0, 0)));
        let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(written["entries"], serde_json::json!([]));
        // Another build's entries are not taken.
        third.save();
        let text = std::fs::read_to_string(&file).unwrap().replace("cryod ", "cryod 0");
        std::fs::write(&file, text).unwrap();
        let fifth = Kept::default();
        fifth.open(file.clone());
        assert_eq!(fifth.take(1, &key), None);
        // A link or a FIFO in its place is not followed or opened, and the
        // start goes on reading every list.
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
        let linked = Kept::default();
        linked.open(file.clone());
        assert_eq!(linked.take(1, &key), None);
        std::fs::remove_file(&file).unwrap();
        nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let fifo = Kept::default();
        fifo.open(file);
        assert_eq!(fifo.take(1, &key), None);
    }

    /// A link or a FIFO put where `todo.json` was has a version of its own:
    /// an entry kept for the file does not match it (the list's read then
    /// faults the chamber, as it always did).
    #[test]
    fn a_link_in_the_lists_place_matches_no_entry() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        write(dir, TODO, "[]");
        let file = versions(dir, chrono_tz::UTC, settled_after(dir)).1.unwrap();
        std::fs::rename(dir.join(TODO), dir.join("elsewhere.json")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere.json"), dir.join(TODO)).unwrap();
        assert_ne!(versions(dir, chrono_tz::UTC, settled_after(dir)).1, Some(file));
    }
}
