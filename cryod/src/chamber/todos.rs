//! `todo.json` on disk, plus the id high-water mark kept in `.cryo/state.json`
//! (so an id is never reused, even after the highest one is removed).
//!
//! cryod's read-modify-write of the list ([`update_with`]) takes an advisory lock
//! (`.cryo/todo.lock`, for tools that cooperate) and checks, just before it
//! replaces the file, that nobody changed it since it was read; if someone
//! did, the change is applied again to their version. An edit made by hand
//! while cryod runs is therefore never lost.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;
use cryo_core::todo::{self, TodoList};

use super::{Dir, FileError};

mod journal;
mod key;
mod lock;

use journal::Journal;
pub use key::{Key, versions};
pub use lock::LOCK_WAIT;
use lock::lock_within;

/// How often [`update_with`] re-applies a change when the file keeps changing.
const RETRIES: usize = 5;

/// The largest `todo.json` read: 10,000 TODOs of the longest text a call
/// may give, and room for their fields.
pub const MAX_TODO_BYTES: u64 = 32 * 1024 * 1024;

/// The largest `.cryo/state.json` read (one number in it).
const MAX_STATE_BYTES: u64 = 64 * 1024;

pub fn todo_path(dir: &Path) -> PathBuf {
    dir.join(TODO)
}

const TODO: &str = "todo.json";
const STATE: &str = ".cryo/state.json";

/// Done TODOs past `[history] keep_done`, moved out of `todo.json`: one
/// JSON object per line, appended (by `archive` below, before `todo.json` drops them).
pub const ARCHIVE: &str = ".cryo/todo-done.jsonl";

/// The versions of `todo.json` and of the state file before their last
/// writes, in `.cryo/` (see [`save_with`]).
const TODO_SPARE: &str = ".cryo/todo.json.prev";
const STATE_SPARE: &str = ".cryo/state.json.prev";

/// Why `todo.json` (or the state file beside it) cannot be read: one line
/// naming the file.
#[derive(Debug, thiserror::Error)]
pub enum TodosError {
    /// The chamber's folder cannot be opened, or a file is not one cryod
    /// reads (a link, a FIFO, too large).
    #[error("{0}")]
    File(#[from] FileError),
    /// Reading `todo.json` failed (an I/O error).
    #[error("cannot read {0}")]
    Unreadable(FileError),
    /// The state file is not JSON.
    #[error("{}: not valid JSON: {error}", .path.display())]
    StateJson { path: PathBuf, error: serde_json::Error },
    /// The state file's high-water mark is not a number.
    #[error("{}: `todo_high_water` is not a number", .0.display())]
    HighWater(PathBuf),
    /// `todo.json` is not text.
    #[error("{}: not UTF-8 text", .0.display())]
    NotUtf8(PathBuf),
    /// `todo.json` is not a list of TODOs.
    #[error("{}: {error}", .path.display())]
    List { path: PathBuf, error: todo::FileError },
}

/// The id high-water mark; a state file that exists but cannot be read is a
/// fault (it is never overwritten).
fn high_water(d: &Dir) -> Result<u64, TodosError> {
    let Some(bytes) = d.read_if(Path::new(STATE), MAX_STATE_BYTES)? else {
        return Ok(0);
    };
    let path = d.path().join(STATE);
    let v: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(error) => return Err(TodosError::StateJson { path, error }),
    };
    match v.get("todo_high_water") {
        None => Ok(0),
        Some(h) => h.as_u64().ok_or(TodosError::HighWater(path)),
    }
}

/// `todo.json`'s bytes (none if it is missing); a link, a FIFO or a file
/// over [`MAX_TODO_BYTES`] is a fault naming it.
fn read_bytes(d: &Dir) -> Result<Vec<u8>, TodosError> {
    match d.read_if(Path::new(TODO), MAX_TODO_BYTES) {
        Ok(b) => Ok(b.unwrap_or_default()),
        Err(e @ FileError::Io { .. }) => Err(TodosError::Unreadable(e)),
        Err(e) => Err(TodosError::File(e)),
    }
}

fn parse(d: &Dir, bytes: &[u8], tz: Tz) -> Result<TodoList, TodosError> {
    parse_keeping(d, bytes, tz, usize::MAX).map(|(list, _)| list)
}

/// The list without the done TODOs past `keep`, and their ids (see
/// [`todo::parse_file_keeping`]).
fn parse_keeping(d: &Dir, bytes: &[u8], tz: Tz, keep: usize) -> Result<(TodoList, Vec<u64>), TodosError> {
    let path = d.path().join(TODO);
    let Ok(text) = std::str::from_utf8(bytes) else { return Err(TodosError::NotUtf8(path)) };
    todo::parse_file_keeping(text, tz, high_water(d)?, keep).map_err(|error| TodosError::List { path, error })
}

/// Whether `todo.json` still holds `bytes`, read in steps (an old file is
/// not held twice).
fn still(d: &Dir, bytes: &[u8]) -> Result<bool, TodosError> {
    use std::io::Read;
    let mut f = match d.open_read(Path::new(TODO), Some(MAX_TODO_BYTES)) {
        Ok(f) => f,
        Err(FileError::Missing(_)) => return Ok(bytes.is_empty()),
        Err(e @ FileError::Io { .. }) => return Err(TodosError::Unreadable(e)),
        Err(e) => return Err(TodosError::File(e)),
    };
    let path = d.path().join(TODO);
    let (mut buf, mut at) = (vec![0; 64 * 1024], 0);
    loop {
        let n =
            f.read(&mut buf).map_err(|error| TodosError::Unreadable(FileError::Io { path: path.clone(), error }))?;
        if n == 0 {
            return Ok(at == bytes.len());
        }
        if bytes.get(at..at + n) != Some(&buf[..n]) {
            return Ok(false);
        }
        at += n;
    }
}

/// Reads the list (with the journal's adds). A missing file is an empty
/// list; a file that does not parse is an error naming it (and is never
/// overwritten).
pub fn load(dir: &Path, tz: Tz) -> Result<TodoList, TodosError> {
    let d = Dir::open(dir)?;
    let mut list = parse(&d, &read_bytes(&d)?, tz)?;
    Journal::read(&d, tz)?.merge_into(&mut list);
    Ok(list)
}

/// Reads the list at cryod's start. A file that still holds done TODOs past
/// `how.keep_done` (written by the seed system, by hand, or before the
/// archive existed) has them archived first, once, so that the next starts
/// read only what it keeps; if that write fails the whole list is read, as
/// before. Also the stamp of the version written, if one was.
///
/// On a tokio runtime it must be the multi-threaded one: a large file (or
/// journal) is parsed, and an archive written, off the async worker
/// (`block_in_place`); a small one, the usual case, is read in place (a
/// hand-off to a blocking thread for each of ten thousand chambers was a
/// tenth of a start).
pub fn load_at_start(dir: &Path, tz: Tz, how: How) -> Result<(TodoList, Option<Stamp>), TodosError> {
    let d = Dir::open(dir)?;
    let bytes = read_bytes(&d)?;
    let large = |n: u64| n > IN_PLACE_BYTES;
    let journal = d.stat(Path::new(journal::JOURNAL)).ok().flatten().map_or(0, |m| m.st_size as u64);
    if large(bytes.len() as u64) || large(journal) {
        return tokio::task::block_in_place(|| read_at_start(dir, &d, &bytes, tz, how));
    }
    read_at_start(dir, &d, &bytes, tz, how)
}

/// The most `todo.json` (or journal) [`load_at_start`] reads on the async
/// worker it runs on.
const IN_PLACE_BYTES: u64 = 256 * 1024;

fn read_at_start(dir: &Path, d: &Dir, bytes: &[u8], tz: Tz, how: How) -> Result<(TodoList, Option<Stamp>), TodosError> {
    let (mut list, retired) = parse_keeping(d, bytes, tz, how.keep_done)?;
    if retired.is_empty() {
        Journal::read(d, tz)?.merge_into(&mut list);
        return Ok((list, None));
    }
    // A start does not wait for the lock: a busy one leaves the archive to
    // the first change.
    // Off the async worker (when on one): the archive writes and syncs.
    let archived = tokio::task::block_in_place(|| {
        update_locking(dir, tz, how, Duration::ZERO, |_| Ok::<_, std::convert::Infallible>(()))
    });
    match archived {
        Ok(((), list, stamp)) => Ok((list, stamp)),
        Err(e) => {
            let error = match e {
                UpdateError::Fault(m) | UpdateError::Write(m) | UpdateError::Closed(m) => m,
                UpdateError::Refused(never) => match never {},
            };
            tracing::warn!(dir = %dir.display(), %error, "cannot archive the done TODOs at start");
            load(dir, tz).map(|list| (list, None))
        }
    }
}

/// Which version of `todo.json` is on disk (device, inode, size, time of
/// the last write): equal stamps mean the same version, as far as a
/// re-read could tell (cryod replaces the file, so its versions differ in
/// inode; one written in place changes its size or time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp([i64; 5]);

impl Stamp {
    fn of(m: &nix::sys::stat::FileStat) -> Stamp {
        Stamp([m.st_dev as i64, m.st_ino as i64, m.st_size, m.st_mtime, m.st_mtime_nsec])
    }
}

/// The stamp of `todo.json` now (`None` if it cannot be read), in the
/// chamber folder `d`.
pub fn stamp(d: &Dir) -> Option<Stamp> {
    d.stat(Path::new(TODO)).ok()?.map(|m| Stamp::of(&m))
}

/// The files the list is read from: `todo.json`, the journal of adds, and
/// the state file with the id high-water mark.
pub const FILES: [&str; 3] = [TODO, journal::JOURNAL, STATE];

/// Why an update did not happen.
#[derive(Debug)]
pub enum UpdateError<E> {
    /// The file (or the state file) cannot be read or parsed.
    Fault(String),
    /// The change itself was refused.
    Refused(E),
    /// Writing failed (disk full, read-only folder): the old file is intact.
    Write(String),
    /// The writer's gate refused the write (a fleet node past its trust
    /// window, see `cryo_files::Gate`): nothing was changed, and the same
    /// change may be made again.
    Closed(String),
}

/// A failed write of the update, as an [`UpdateError`]: refused by the
/// gate, or failed with the line `line` gives.
fn write_error<E>(e: FileError, line: impl FnOnce(&FileError) -> String) -> UpdateError<E> {
    match e {
        FileError::Closed(_) => UpdateError::Closed(e.to_string()),
        e => UpdateError::Write(line(&e)),
    }
}

/// How [`update_with`] writes.
#[derive(Debug, Clone)]
pub struct How {
    /// The new file's name made durable (the new file is always complete on
    /// disk before it takes the name).
    pub durable: bool,
    /// Done TODOs kept in the file; older ones move to [`ARCHIVE`] first.
    pub keep_done: usize,
    /// The time an archived TODO is stamped with.
    pub now: chrono::DateTime<chrono::Utc>,
    /// An add that may wait in the journal (the module `journal`: appended, folded into `todo.json` later).
    pub journaled: bool,
    /// Asked before each write takes effect (a fleet node's lease).
    pub gate: Option<cryo_files::Gate>,
}

/// Reads the list, applies `change`, and writes the result as `how` says,
/// without losing a concurrent edit. Returns the change's value, the list
/// as written and the stamp of the version written, if one was.
pub fn update_with<T, E>(
    dir: &Path,
    tz: Tz,
    how: How,
    change: impl FnMut(&mut TodoList) -> Result<T, E>,
) -> Result<(T, TodoList, Option<Stamp>), UpdateError<E>> {
    update_locking(dir, tz, how, LOCK_WAIT, change)
}

/// [`update_with`], waiting at most `wait` for a lock someone else holds
/// (not at all if it is zero).
fn update_locking<T, E>(
    dir: &Path,
    tz: Tz,
    how: How,
    wait: Duration,
    mut change: impl FnMut(&mut TodoList) -> Result<T, E>,
) -> Result<(T, TodoList, Option<Stamp>), UpdateError<E>> {
    let d = Dir::open(dir).map_err(|e| UpdateError::Write(e.to_string()))?.gated(how.gate.clone());
    let lock = d.append(Path::new(".cryo/todo.lock")).map_err(|e| write_error(e, FileError::to_string))?;
    let _lock = lock_within(lock, &dir.join(".cryo/todo.lock"), wait).map_err(UpdateError::Write)?;
    let path = todo_path(dir);
    // The core's `TodoWriteError` carries the line.
    let fault = |e: TodosError| UpdateError::Fault(e.to_string());
    for _ in 0..RETRIES {
        let before = read_bytes(&d).map_err(fault)?;
        // Done work past the tail is not even read into TODOs (an old
        // file's fifty thousand): only its ids, to archive it from the
        // file's text below.
        let (mut list, early) = parse_keeping(&d, &before, tz, how.keep_done).map_err(fault)?;
        let mut journal = Journal::read(&d, tz).map_err(|e| fault(e.into()))?;
        if !early.is_empty() {
            journal.forget(&early.iter().copied().collect());
        }
        journal.merge_into(&mut list);
        let old = list.clone();
        let value = change(&mut list).map_err(UpdateError::Refused)?;
        if list == old && journal.bytes == 0 && early.is_empty() {
            return Ok((value, list, None));
        }
        if how.journaled && early.is_empty() && journaled(&d, &journal, &old, &list, before.len() as u64, tz)? {
            return Ok((value, list, None));
        }
        // Nobody may have changed the file while we computed.
        if !still(&d, &before).map_err(fault)? {
            continue;
        }
        // Done work leaves the file, into the archive first: a crash
        // between the two leaves it in both, and the next archive skips it.
        let late = list.retire(how.keep_done);
        archive(&d, Retiring { text: &before, early: &early, late: &late }, &list, tz, how.now)
            .map_err(|e| write_error(e, |e| format!("cannot archive done TODOs: {e}")))?;
        drop(before);
        // The journal's adds must be in the file for good before it goes.
        let written = save_with(&d, &list, tz, how.durable || journal.bytes > 0)
            .map_err(|e| write_error(e, |e| format!("cannot write {}: {e}", path.display())))?;
        // The list is written: a journal left behind (its adds are in the
        // file now) is folded again harmlessly, and the change must not be
        // made twice.
        if let Err(error) = journal.clear(&d) {
            tracing::warn!(dir = %dir.display(), %error, "cannot clear the TODO journal after writing todo.json");
        }
        return Ok((value, list, Some(Stamp::of(&written))));
    }
    Err(UpdateError::Write(format!("{} kept changing while cryod tried to update it", path.display())))
}

/// Writes an add as an append to the journal, if the change only added and
/// the journal is not due to be folded; whether it did.
fn journaled<E>(
    d: &Dir,
    journal: &Journal,
    old: &TodoList,
    new: &TodoList,
    file: u64,
    tz: Tz,
) -> Result<bool, UpdateError<E>> {
    let added: Vec<todo::Todo> = new.items.iter().filter(|t| old.get(t.id).is_none()).cloned().collect();
    let only_added = !added.is_empty() && new.items.len() == old.items.len() + added.len();
    let more: u64 = added.iter().map(|t| todo::render_line(t, tz).len() as u64).sum();
    if !only_added || journal.full(more, file) {
        return Ok(false);
    }
    journal.append(d, &added, tz).map_err(|e| write_error(e, |e| format!("cannot journal the TODO: {e}")))?;
    Ok(true)
}

/// What one write takes out of `todo.json`: the done TODOs past the tail
/// as the file held them (`early`, ids in `text`, archived from the text
/// itself), then those the change made (`late`).
struct Retiring<'a> {
    text: &'a [u8],
    early: &'a [u64],
    late: &'a [todo::Todo],
}

/// Appends what is retiring to [`ARCHIVE`], durably, one line at a time,
/// leaving out those its last lines already hold (a write of `todo.json`
/// that did not follow its archive's); a torn last line (a crash
/// mid-append) is closed first.
fn archive(d: &Dir, r: Retiring, kept: &TodoList, tz: Tz, now: chrono::DateTime<chrono::Utc>) -> Result<(), FileError> {
    use std::io::Write;
    if r.early.is_empty() && r.late.is_empty() {
        return Ok(());
    }
    let rel = Path::new(ARCHIVE);
    let path = d.path().join(ARCHIVE);
    let io = |error| FileError::Io { path: path.clone(), error };
    let (there, torn) = match d.open_read(rel, None) {
        Ok(mut f) => {
            let len = f.metadata().map_err(io)?.len();
            (
                already_there(&mut f, len, &r, kept, tz).map_err(io)?,
                len > 0 && last_byte(&mut f, len).map_err(io)? != b'\n',
            )
        }
        Err(FileError::Missing(_)) => Default::default(),
        Err(e) => return Err(e),
    };
    // All there already (a crash came after the archive, before todo.json):
    // nothing to append, nor to sync.
    if r.early.iter().all(|id| there.contains(id)) && r.late.iter().all(|t| there.contains(&t.id)) {
        return Ok(());
    }
    let made = d.stat(rel)?.is_none();
    let mut out = std::io::BufWriter::new(d.append(rel)?);
    if torn {
        out.write_all(b"\n").map_err(io)?;
    }
    if !r.early.is_empty() {
        let ids = r.early.iter().filter(|id| !there.contains(id)).copied().collect();
        // Parsed before: it is UTF-8.
        let text = String::from_utf8_lossy(r.text);
        todo::archive_from_file(&text, &ids, now, tz, |line| out.write_all(line.as_bytes())).map_err(io)?;
    }
    for t in r.late.iter().filter(|t| !there.contains(&t.id)) {
        out.write_all(todo::render_archived(std::slice::from_ref(t), now, tz).as_bytes()).map_err(io)?;
    }
    out.into_inner().map_err(|e| io(e.into_error()))?.sync_data().map_err(io)?;
    // A new archive's name is made durable before `todo.json` drops what
    // it holds.
    if made { d.sync_folder(Path::new(".cryo")) } else { Ok(()) }
}

/// The ids of `r` the archive's last lines already hold. Only a crash
/// between an archive and its `todo.json` leaves them there, and then its
/// last whole line names a TODO the file still holds (one retiring now, or
/// one a change had finished then): otherwise nothing more is read.
fn already_there(
    f: &mut std::fs::File,
    len: u64,
    r: &Retiring,
    kept: &TodoList,
    tz: Tz,
) -> std::io::Result<std::collections::HashSet<u64>> {
    let ours: std::collections::HashSet<u64> = r.early.iter().copied().chain(r.late.iter().map(|t| t.id)).collect();
    let ids = |lines: &[String]| -> Vec<u64> {
        lines.iter().filter_map(|l| todo::parse_archived(l, tz)).map(|(t, _)| t.id).collect()
    };
    let (last, _) = cryo_files::lines_before(f, len, 1, LINE_ROOM)?;
    if !ids(&last).iter().any(|id| ours.contains(id) || kept.get(*id).is_some()) {
        return Ok(Default::default());
    }
    // As much as those lines can take: the file's text they come from
    // (and the archive's mark on each), or their rendering, and never
    // more than a long line each.
    let late = todo::render_archived(r.late, chrono::DateTime::UNIX_EPOCH, tz).len() as u64;
    // The attempt before may have written lines for TODOs still kept after ours.
    let n = ours.len() + kept.items.len();
    let budget = (2 * (r.text.len() as u64 + 64 * n as u64 + late) + 4096).min(n as u64 * LINE_ROOM + 4096);
    let (lines, _) = cryo_files::lines_before(f, len, n, budget)?;
    Ok(ids(&lines).into_iter().filter(|id| ours.contains(id)).collect())
}

/// Room for one archived TODO's line when reading the archive back (its
/// text is at most [`todo::MAX_TEXT`] characters).
const LINE_ROOM: u64 = 64 * 1024;

fn last_byte(f: &mut std::fs::File, len: u64) -> std::io::Result<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut b = [0u8];
    f.seek(SeekFrom::Start(len - 1))?;
    f.read_exact(&mut b)?;
    Ok(b[0])
}

/// A page of archived TODOs, newest last, ending before byte `before` of
/// [`ARCHIVE`] (0: its end), and where the page before it ends (0: none).
pub fn archived(dir: &Path, tz: Tz, before: u64, limit: usize) -> Result<(Vec<todo::Todo>, u64), FileError> {
    let d = Dir::open(dir)?;
    let mut f = match d.open_read(Path::new(ARCHIVE), None) {
        Ok(f) => f,
        Err(FileError::Missing(_)) => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let path = dir.join(ARCHIVE);
    let end = if before == 0 { u64::MAX } else { before };
    // A line is at most a TODO's text and fields: 64 KiB a line is room.
    let (lines, start) = cryo_files::lines_before(&mut f, end, limit, limit as u64 * 64 * 1024)
        .map_err(|error| FileError::Io { path, error })?;
    let items = lines.iter().filter_map(|l| todo::parse_archived(l, tz)).map(|(t, _)| t).collect();
    Ok((items, start))
}

/// Writes the list (and the high-water mark) atomically and durably.
pub fn save(dir: &Path, list: &TodoList, tz: Tz) -> std::io::Result<()> {
    let d = Dir::open(dir)?;
    save_with(&d, list, tz, true).map(drop).map_err(Into::into)
}

/// Each write of the list (and of the state file) swaps with the version
/// before it, kept in `.cryo/` ([`Dir::write_keeping`]).
fn save_with(d: &Dir, list: &TodoList, tz: Tz, durable: bool) -> Result<nix::sys::stat::FileStat, FileError> {
    if list.high_water > high_water(d).unwrap_or(u64::MAX) {
        let state = serde_json::json!({ "todo_high_water": list.high_water });
        d.write_keeping(Path::new(STATE), Path::new(STATE_SPARE), format!("{state}\n").as_bytes(), true)?;
    }
    let text = todo::render_file(list, tz);
    d.write_keeping(Path::new(TODO), Path::new(TODO_SPARE), text.as_bytes(), durable)
}

#[cfg(test)]
mod tests;
