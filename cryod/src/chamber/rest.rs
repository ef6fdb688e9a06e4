//! What a chamber at rest was, kept from one start of cryod to the next.
//!
//! A chamber at rest holds little: its next due time, how many questions
//! it left open, that no mail waits. Yet a start read every chamber's
//! `todo.json` and listed its four folders of messages to learn them: a
//! fifth and then another fifth of a start at 10,000 chambers. A start now
//! keeps, for each chamber, the versions of the files and folders it read
//! and what they gave; the next start takes that back, without a read, for
//! a chamber whose files are still those versions.
//!
//! A version is a file's (or folder's) device, inode and size, and the times
//! of its last change of content (`mtime`) and of status (`ctime`), to the
//! nanosecond. cryod replaces `todo.json` (a new inode) and appends to the
//! journal; any other write changes the `ctime`, which only the kernel sets.
//! A message that comes or goes changes its folder's. A file changed in the
//! last [`SETTLING`](super::version::SETTLING) is not kept by its version.
//! An entry states a fact about versions of files: it never goes stale, it
//! only stops matching.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::Dir;
use super::mailbox::Versions;
use super::todos::Key;

/// The file in cryod's state folder the entries are kept in.
pub const FILE: &str = "rest.json";

/// The file an earlier build kept the TODO lists' next wakes in: removed.
const FORMER: &str = "todo-next.json";

/// The largest file of kept entries read (a hundred thousand chambers'
/// take about 25 MB).
const MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The build that read the files: the rules that parse them and the zones'
/// data are its own (cryo-core's sources, chrono-tz's version in
/// `Cargo.lock`), so another build's entries are not taken.
fn build() -> String {
    format!("cryod {} {}", env!("CARGO_PKG_VERSION"), cryo_session::BUILD)
}

/// The file: the build that wrote it, and its entries (read as [`Entry`],
/// written from `&Entry`).
#[derive(serde::Serialize, serde::Deserialize)]
struct Written<E> {
    build: String,
    entries: Vec<E>,
}

/// The build alone, read first: another build's entries may have another
/// shape.
#[derive(serde::Deserialize)]
struct Head {
    build: String,
}

/// What a chamber's TODO list gave of its next wake (as seconds and
/// nanoseconds since the epoch), at the versions of its files.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct List {
    key: Key,
    next_due: Option<(i64, u32)>,
}

/// What a chamber's mailbox gave at the versions of its folders: an empty
/// inbox (only such a one is kept), and the questions the agent left open.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Mail {
    key: Versions,
    open_questions: u32,
}

/// The number of the last session `cryo.log` names, at the log's version.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Log {
    key: [i64; 7],
    number: u64,
}

/// One chamber's entry: what its list, its mailbox and its log gave, each
/// kept by its own versions.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Entry {
    id: i64,
    list: Option<List>,
    mail: Option<Mail>,
    log: Option<Log>,
    /// The parts this start took back or read ([`LIST`], [`MAIL`], [`LOG`]):
    /// only those are written for the next.
    #[serde(skip)]
    seen: u8,
}

/// The parts of an [`Entry`], as its `seen` bits.
const LIST: u8 = 1;
const MAIL: u8 = 2;
const LOG: u8 = 4;

/// How many reads a start took back from the last one, and how many it
/// made (and kept for the next).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub lists_taken: u64,
    pub lists_read: u64,
    pub mail_taken: u64,
    pub mail_read: u64,
    pub logs_taken: u64,
    pub logs_read: u64,
}

/// The entries of the last start, marked in place as this one's boots take
/// them back or read anew (a start moves no entry: what the boots allocate
/// beside the chambers' own state stays small).
#[derive(Default)]
struct Book {
    entries: HashMap<i64, Entry>,
    counts: Counts,
}

impl Book {
    /// The part `field` of chamber `id`'s entry, if it is there, this start
    /// has not taken it yet, and it `matches`; marked taken.
    fn take<T>(
        &mut self,
        id: i64,
        bit: u8,
        field: fn(&mut Entry) -> &mut Option<T>,
        matches: impl FnOnce(&T) -> bool,
    ) -> Option<&T> {
        let e = self.entries.get_mut(&id).filter(|e| e.seen & bit == 0)?;
        if !field(e).as_ref().is_some_and(matches) {
            return None;
        }
        e.seen |= bit;
        field(e).as_ref()
    }

    /// Sets the part `field` of chamber `id`'s entry to what this start
    /// read (`None`: nothing to keep).
    fn keep<T>(&mut self, id: i64, bit: u8, field: fn(&mut Entry) -> &mut Option<T>, read: Option<T>) {
        let e = self.entries.entry(id).or_insert_with(|| Entry { id, ..Entry::default() });
        *field(e) = read;
        e.seen |= bit;
    }
}

/// What chambers at rest were: open while the chambers boot, then written
/// for the next start ([`Kept::save`]). Closed, it takes and keeps nothing
/// (a fleet's node, which claims its chambers one by one, and any
/// supervisor made once it is written; one made between the last boot and
/// the write takes and keeps as a boot does: each entry is a fact about
/// versions of files).
#[derive(Default)]
pub struct Kept {
    book: Mutex<Option<(PathBuf, Book)>>,
}

impl Kept {
    /// Opens the entries the last start kept in `file`. A file that is
    /// missing or does not parse gives none (every chamber is read).
    pub fn open(&self, file: PathBuf) {
        if let Some(former) = file.parent().map(|d| d.join(FORMER)) {
            let _ = std::fs::remove_file(former);
        }
        let last = read(&file).unwrap_or_else(|why| {
            tracing::info!(file = %file.display(), %why, "what chambers at rest were is not used: each one's files are read");
            Vec::new()
        });
        let last = last.into_iter().map(|e| (e.id, e)).collect();
        *self.lock() = Some((file, Book { entries: last, ..Book::default() }));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(PathBuf, Book)>> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Chamber `id`'s next due time, if the last start kept one for the
    /// versions `key` names (kept again for the next start).
    pub fn take_list(&self, id: i64, key: &Key) -> Option<Option<DateTime<Utc>>> {
        let mut book = self.lock();
        let (_, book) = book.as_mut()?;
        let next_due = book.take(id, LIST, |e| &mut e.list, |l| l.key == *key)?.next_due;
        let next_due = match next_due {
            Some((secs, nanos)) => Some(DateTime::from_timestamp(secs, nanos)?),
            None => None,
        };
        book.counts.lists_taken += 1;
        Some(next_due)
    }

    /// The list chamber `id` read at the versions `key` names comes due
    /// next at `next_due`.
    pub fn keep_list(&self, id: i64, key: Key, next_due: Option<DateTime<Utc>>) {
        if let Some((_, book)) = self.lock().as_mut() {
            let next_due = next_due.map(|t| (t.timestamp(), t.timestamp_subsec_nanos()));
            book.keep(id, LIST, |e| &mut e.list, Some(List { key, next_due }));
            book.counts.lists_read += 1;
        }
    }

    /// How many questions chamber `id`'s agent left open, if the last start
    /// kept its mailbox at the versions `key` names, with an empty inbox
    /// (kept again for the next start).
    pub fn take_mail(&self, id: i64, key: &Versions) -> Option<u32> {
        let mut book = self.lock();
        let (_, book) = book.as_mut()?;
        let open_questions = book.take(id, MAIL, |e| &mut e.mail, |m| m.key == *key)?.open_questions;
        book.counts.mail_taken += 1;
        Some(open_questions)
    }

    /// Chamber `id`'s mailbox was listed; read at the versions `key`
    /// names (none: not to be kept), it had an empty inbox and
    /// `open_questions` questions open.
    pub fn keep_mail(&self, id: i64, key: Option<Versions>, open_questions: u32) {
        if let Some((_, book)) = self.lock().as_mut() {
            book.keep(id, MAIL, |e| &mut e.mail, key.map(|key| Mail { key, open_questions }));
            book.counts.mail_read += 1;
        }
    }

    /// The last session's number chamber `id`'s `cryo.log` names, if the
    /// last start kept it for the log's version `key` (kept again).
    pub fn take_log(&self, id: i64, key: &[i64; 7]) -> Option<u64> {
        let mut book = self.lock();
        let (_, book) = book.as_mut()?;
        let number = book.take(id, LOG, |e| &mut e.log, |l| l.key == *key)?.number;
        book.counts.logs_taken += 1;
        Some(number)
    }

    /// Chamber `id`'s `cryo.log` was read; at the version `key` (none: not
    /// to be kept) it names `number` as the last session's.
    pub fn keep_log(&self, id: i64, key: Option<[i64; 7]>, number: u64) {
        if let Some((_, book)) = self.lock().as_mut() {
            book.keep(id, LOG, |e| &mut e.log, key.map(|key| Log { key, number }));
            book.counts.logs_read += 1;
        }
    }

    /// The boots are over: writes what this start kept for the next one
    /// and closes. What was taken and read (none if it was not open).
    pub fn save(&self) -> Option<Counts> {
        let (file, mut book) = self.lock().take()?;
        // What this start neither took back nor read is not written.
        for e in book.entries.values_mut() {
            if e.seen & LIST == 0 {
                e.list = None;
            }
            if e.seen & MAIL == 0 {
                e.mail = None;
            }
            if e.seen & LOG == 0 {
                e.log = None;
            }
        }
        let mut entries: Vec<&Entry> =
            book.entries.values().filter(|e| e.list.is_some() || e.mail.is_some() || e.log.is_some()).collect();
        entries.sort_unstable_by_key(|e| e.id);
        let bytes = serde_json::to_vec(&Written { build: build(), entries }).unwrap_or_default();
        if let Err(error) = crate::chamber::write_atomic(&file, &bytes) {
            tracing::warn!(file = %file.display(), %error, "cannot keep what chambers at rest were: the next start reads each one's files");
        }
        Some(book.counts)
    }
}

/// The entries in `file` (an empty list if it is missing).
fn read(file: &Path) -> Result<Vec<Entry>, String> {
    // cryod's own folder, read as its other files are: no link followed, no
    // FIFO opened, nothing over the limit read.
    let (Some(folder), Some(name)) = (file.parent(), file.file_name()) else { return Ok(Vec::new()) };
    let read = Dir::open_own(folder).and_then(|d| d.read_if(Path::new(name), MAX_BYTES));
    let Some(bytes) = read.map_err(|e| e.to_string())? else { return Ok(Vec::new()) };
    let head: Head = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if head.build != build() {
        return Err(format!("written by another build ({})", head.build));
    }
    let written: Written<Entry> = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    Ok(written.entries)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::chamber::mailbox::Mailbox;

    /// The versions of the list in the chamber `dir`.
    fn versions(
        dir: &Path,
        tz: chrono_tz::Tz,
        settled: SystemTime,
    ) -> (Option<crate::chamber::todos::Stamp>, Option<crate::chamber::todos::Key>) {
        crate::chamber::todos::versions(&Dir::open(dir).unwrap(), tz, settled)
    }

    const TODO: &str = "todo.json";

    /// An hour after the list's last change: it has settled.
    fn settled_after(dir: &Path) -> SystemTime {
        std::fs::metadata(dir.join(TODO)).unwrap().modified().unwrap() + Duration::from_secs(3600)
    }

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn counts(lists_taken: u64, lists_read: u64) -> Option<Counts> {
        Some(Counts { lists_taken, lists_read, ..Counts::default() })
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
        assert_eq!(first.take_list(1, &key), None, "closed: nothing is taken");
        first.open(file.clone());
        assert_eq!(first.take_list(1, &key), None);
        first.keep_list(1, key.clone(), Some(due));
        first.keep_list(2, key.clone(), None);
        first.keep_list(3, key.clone(), None);
        assert_eq!(first.save(), counts(0, 3));
        let next = Kept::default();
        next.open(file.clone());
        assert_eq!(next.take_list(1, &key), Some(Some(due)));
        assert_eq!(next.take_list(2, &key), Some(None));
        write(dir, TODO, "[ ]");
        assert_eq!(next.take_list(3, &versions(dir, chrono_tz::UTC, settled_after(dir)).1.unwrap()), None);
        assert_eq!(next.save(), counts(2, 0));
        let third = Kept::default();
        third.open(file.clone());
        assert_eq!(third.take_list(3, &key), None, "the entry that did not match was not kept");
        assert_eq!(third.take_list(1, &key), Some(Some(due)));
        // A file that does not parse gives nothing, and is replaced.
        std::fs::write(&file, "{").unwrap();
        let fourth = Kept::default();
        fourth.open(file.clone());
        assert_eq!(fourth.take_list(1, &key), None);
        assert_eq!(fourth.save(), counts(0, 0));
        let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(written["entries"], serde_json::json!([]));
        // Another build's entries are not taken.
        third.save();
        let text = std::fs::read_to_string(&file).unwrap().replace("cryod ", "cryod 0");
        std::fs::write(&file, text).unwrap();
        let fifth = Kept::default();
        fifth.open(file.clone());
        assert_eq!(fifth.take_list(1, &key), None);
        // A link or a FIFO in its place is not followed or opened, and the
        // start goes on reading every list.
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
        let linked = Kept::default();
        linked.open(file.clone());
        assert_eq!(linked.take_list(1, &key), None);
        std::fs::remove_file(&file).unwrap();
        nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let fifo = Kept::default();
        fifo.open(file);
        assert_eq!(fifo.take_list(1, &key), None);
    }

    /// A mailbox's versions hold while no message comes or goes; what a
    /// start kept of it, the next takes back only then. A folder that is
    /// a link, or changed a moment ago, has no version to keep.
    #[test]
    fn a_mailbox_is_kept_by_its_folders_versions() {
        let t = tempfile::tempdir().unwrap();
        let (dir, file) = (t.path(), t.path().join(FILE));
        for f in ["messages/inbox/archive", "messages/outbox/archive"] {
            std::fs::create_dir_all(dir.join(f)).unwrap();
        }
        let later = |dir: &Path| {
            std::fs::metadata(dir.join("messages/inbox")).unwrap().modified().unwrap() + Duration::from_secs(3600)
        };
        let (mb, d) = (Mailbox::new(dir, chrono_tz::UTC), Dir::open(dir).unwrap());
        let now = std::fs::metadata(dir.join("messages/inbox")).unwrap().modified().unwrap();
        assert_eq!(mb.versions(&d, now), None, "made a moment ago");
        let key = mb.versions(&d, later(dir)).unwrap();
        assert_eq!(mb.versions(&d, later(dir)), Some(key.clone()));
        assert_ne!(Mailbox::new(dir, chrono_tz::Europe::Berlin).versions(&d, later(dir)), Some(key.clone()));
        let first = Kept::default();
        first.open(file.clone());
        first.keep_mail(7, Some(key.clone()), 2);
        first.keep_mail(8, None, 0);
        let saved = first.save().unwrap();
        assert_eq!((saved.mail_taken, saved.mail_read), (0, 2));
        let next = Kept::default();
        next.open(file.clone());
        assert_eq!(next.take_mail(7, &key), Some(2));
        assert_eq!(next.take_mail(7, &key), None, "taken once");
        assert_eq!(next.take_mail(8, &key), None);
        // A log's number, the same way.
        next.keep_log(7, Some([1, 2, 3, 4, 5, 6, 7]), 41);
        next.keep_log(8, None, 3);
        let saved = next.save().unwrap();
        assert_eq!((saved.logs_taken, saved.logs_read), (0, 2));
        let third = Kept::default();
        third.open(file.clone());
        assert_eq!(third.take_log(7, &[1, 2, 3, 4, 5, 6, 8]), None, "another version");
        assert_eq!(third.take_log(8, &[1, 2, 3, 4, 5, 6, 7]), None, "none kept");
        third.save();
        let fourth = Kept::default();
        fourth.open(file.clone());
        assert_eq!(fourth.take_log(7, &[1, 2, 3, 4, 5, 6, 7]), None, "the entry that did not match was not kept");
        // A message written, then archived: each changes a folder's version.
        write(dir, "messages/outbox/m.md", "hello");
        let sent = mb.versions(&d, later(dir)).unwrap();
        assert_ne!(sent, key);
        std::fs::rename(dir.join("messages/outbox/m.md"), dir.join("messages/outbox/archive/m.md")).unwrap();
        assert_ne!(mb.versions(&d, later(dir)), Some(sent));
        write(dir, "messages/inbox/n.md", "hi");
        let mail = mb.versions(&d, later(dir)).unwrap();
        assert_ne!(mail.inbox(), key.inbox(), "a message came");
        // The inbox a link to another folder: no version.
        std::fs::rename(dir.join("messages/inbox"), dir.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("messages/inbox")).unwrap();
        assert_eq!(mb.versions(&d, later(dir)), None);
        // An archive that is a link, or messages that are: no version either;
        // a mailbox not made yet has one (its folders have none).
        let late = later(dir) + Duration::from_secs(3600);
        std::fs::remove_file(dir.join("messages/inbox")).unwrap();
        std::fs::rename(dir.join("elsewhere"), dir.join("messages/inbox")).unwrap();
        assert!(mb.versions(&d, late).is_some());
        std::fs::remove_dir_all(dir.join("messages/outbox/archive")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("messages/outbox/archive")).unwrap();
        assert_eq!(mb.versions(&d, late), None);
        std::fs::rename(dir.join("messages"), dir.join("gone")).unwrap();
        assert!(mb.versions(&d, late).is_some_and(|v| v.inbox().is_none()));
        std::os::unix::fs::symlink(dir.join("gone"), dir.join("messages")).unwrap();
        assert_eq!(mb.versions(&d, late), None);
    }
}
