//! A chamber's mailbox: `messages/inbox/` (to the agent), its `archive/`
//! (claimed), `messages/outbox/` (from the agent or cryod) and its `archive/`
//! (delivered by a bridge), and `messages/rejected/` for files that could not
//! be read.
//!
//! Readers skip dot files and non-`.md` files. Only regular files are read: a
//! symlink could point anywhere, so it is rejected like a malformed file. A
//! rejected file is moved, never deleted, with a note saying why.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use cryo_core::message::{self, Message};

use super::{Dir, FileError, NewFile};

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The key cryod seals its own outbox messages with (see [`use_seal_key`]).
static SEAL: std::sync::OnceLock<ring::hmac::Key> = std::sync::OnceLock::new();

/// The header a message written by cryod itself carries.
const SEAL_HEADER: &str = "seal";

/// Seals cryod's own outbox messages from now on with the key kept in
/// `state_dir/seal.key` (made at first use, 0600; the state folder is
/// hidden from every confined agent). An outbox message that says it is
/// from `cryochamber` without a valid seal was written by the agent, and
/// is shown as such.
pub fn use_seal_key(state_dir: &Path) -> std::io::Result<()> {
    let path = state_dir.join("seal.key");
    let key = match cryo_files::read_file(&path, 1024) {
        Ok(k) if k.len() >= 32 => k,
        _ => {
            let key = crate::base::random::hex(32).into_bytes();
            super::write_secret(&path, &key)?;
            key
        }
    };
    let _ = SEAL.set(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key));
    Ok(())
}

/// What the seal covers: who, the subject and the body.
fn seal_input(m: &Message) -> Vec<u8> {
    [m.from.as_bytes(), m.subject.as_bytes(), m.body.as_bytes()].join(&0u8)
}

/// The seal of `m`, if cryod has a key.
fn seal_of(m: &Message) -> Option<String> {
    SEAL.get().map(|k| hex::encode(ring::hmac::sign(k, &seal_input(m)).as_ref()))
}

/// Whether `m` carries a valid seal of cryod's.
fn sealed(m: &Message) -> bool {
    let (Some(k), Some(tag)) = (SEAL.get(), m.meta.get(SEAL_HEADER)) else { return false };
    hex::decode(tag).is_ok_and(|tag| ring::hmac::verify(k, &seal_input(m), &tag).is_ok())
}

/// Where a message lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Folder {
    Inbox,
    InboxArchive,
    Outbox,
    OutboxArchive,
}

impl Folder {
    pub fn rel(self) -> &'static str {
        match self {
            Folder::Inbox => "messages/inbox",
            Folder::InboxArchive => "messages/inbox/archive",
            Folder::Outbox => "messages/outbox",
            Folder::OutboxArchive => "messages/outbox/archive",
        }
    }

    /// Messages here were written to the agent.
    pub fn incoming(self) -> bool {
        matches!(self, Folder::Inbox | Folder::InboxArchive)
    }
}

/// The versions of a mailbox's folders and its zone ([`Mailbox::versions`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Versions {
    /// The inbox, its archive, the outbox, its archive.
    folders: [Option<[i64; 7]>; 4],
    tz: String,
}

impl Versions {
    /// The inbox's version: while it holds, no message came or went.
    pub fn inbox(&self) -> Option<[i64; 7]> {
        self.folders[0]
    }
}

/// A message read from a folder.
#[derive(Debug, Clone)]
pub struct Stored {
    pub folder: Folder,
    pub name: String,
    pub message: Message,
    /// When it was written: its `timestamp`, else the file's modification time.
    pub when: DateTime<Utc>,
}

/// Why a message file is not read (the `.reason` beside a rejected one).
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    /// A link, a folder or a FIFO stands at its name.
    #[error("{0}, not a regular file (links and folders are not read)")]
    NotPlain(&'static str),
    #[error("{0}")]
    File(FileError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Too large, or not a message.
    #[error("{0}")]
    Message(#[from] message::MessageError),
}

/// A chamber's mailbox.
#[derive(Debug, Clone)]
pub struct Mailbox {
    root: PathBuf,
    tz: Tz,
    /// Asked before each write takes effect (a fleet node's lease).
    gate: Option<cryo_files::Gate>,
}

impl Mailbox {
    pub fn new(root: &Path, tz: Tz) -> Mailbox {
        Mailbox { root: root.to_path_buf(), tz, gate: None }
    }

    /// This mailbox, each message written asking `gate` just before it
    /// takes its name (moves within the mailbox are not gated: a claim's
    /// archive moved halfway is not written again).
    pub fn gated(self, gate: Option<cryo_files::Gate>) -> Mailbox {
        Mailbox { gate, ..self }
    }

    /// The chamber's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn dir(&self, f: Folder) -> PathBuf {
        self.root.join(f.rel())
    }

    /// The chamber's folder, held open: nothing under it is followed if a
    /// link (a folder of the mailbox that is one is refused whole: it could
    /// lead to another chamber's mail or anywhere else).
    fn open(&self) -> std::io::Result<Dir> {
        Ok(self.folder()?)
    }

    fn folder(&self) -> Result<Dir, FileError> {
        Dir::open(&self.root)
    }

    /// Message file names in `f`, in time order (whatever each is: a link
    /// or a FIFO named like a message is listed, to be rejected).
    pub fn names(&self, f: Folder) -> std::io::Result<Vec<String>> {
        let mut names = Vec::new();
        self.each_name(f, |n| names.push(n.to_string()))?;
        names.sort();
        Ok(names)
    }

    /// Calls `each` with every message file name in `f` (as [`Mailbox::names`]
    /// lists them), in no order, keeping none: for a folder that may hold a
    /// hundred thousand.
    pub fn each_name(&self, f: Folder, each: impl FnMut(&str)) -> std::io::Result<()> {
        Ok(each_name(&self.open()?, f, each)?)
    }

    /// The versions of the four folders of messages (as
    /// [`crate::chamber::version::of`] tells a file's; an entry added,
    /// removed or renamed changes its folder's) and the zone their times
    /// are read in: what a start keeps beside what it read of them. `None`
    /// if one is not a folder, cannot be looked at, or changed after
    /// `settled`; a missing folder has no version. A message rewritten in
    /// place leaves its folder's version as it was: cryod writes none so,
    /// and an agent that does changes only its own count of open questions
    /// until a message comes or goes. `d` is the chamber folder, held open;
    /// each box is opened once, its archive looked at from it.
    pub fn versions(&self, d: &Dir, settled: std::time::SystemTime) -> Option<Versions> {
        let mut folders = [None; 4];
        let Some(messages) = d.sub_if(Path::new("messages")).ok()? else {
            return Some(Versions { folders, tz: self.tz.name().into() });
        };
        for (slots, name) in folders.chunks_mut(2).zip(["inbox", "outbox"]) {
            let Some(boxed) = messages.sub_if(Path::new(name)).ok()? else { continue };
            let statuses = [Some(boxed.status().ok()?), folder_status(&boxed, Path::new("archive"))?];
            for (slot, st) in slots.iter_mut().zip(statuses) {
                let Some(st) = st else { continue };
                if crate::chamber::version::unsettled(&st, settled) {
                    return None;
                }
                *slot = Some(crate::chamber::version::of(&st));
            }
        }
        Some(Versions { folders, tz: self.tz.name().into() })
    }

    /// The inbox's version now (as in [`Mailbox::versions`]), if it is a
    /// folder; `d` is the chamber folder, held open.
    pub fn inbox_version(&self, d: &Dir) -> Option<[i64; 7]> {
        let st = folder_status(d, Path::new(Folder::Inbox.rel()))??;
        Some(crate::chamber::version::of(&st))
    }

    /// Unread messages waiting in the inbox.
    pub fn unread(&self) -> Vec<String> {
        self.names(Folder::Inbox).unwrap_or_default()
    }

    /// Reads and parses every message in `f`. Files that cannot be read are
    /// moved to `messages/rejected/` when `f` is the inbox, and skipped in
    /// other folders.
    pub fn read(&self, f: Folder) -> std::io::Result<Vec<Stored>> {
        self.read_noting(f, &mut Vec::new())
    }

    /// [`Mailbox::read`], adding to `troubles` a line for each unreadable
    /// message that could not be moved to `messages/rejected/` (a link
    /// planted there): a person must mend it.
    pub fn read_noting(&self, f: Folder, troubles: &mut Vec<String>) -> std::io::Result<Vec<Stored>> {
        let mut out = Vec::new();
        for name in self.names(f)? {
            match self.read_one(f, &name) {
                Ok(read) => out.push(Self::stored(f, name, read)),
                // Gone since it was listed (moved away by whoever wrote
                // it): nothing to read, nothing to reject.
                Err(_) if self.gone(f, &name) => {}
                Err(reason) => {
                    if f == Folder::Inbox {
                        troubles.extend(self.reject(f, &name, &reason.to_string()));
                    } else {
                        tracing::warn!(file = %name, %reason, "skipping an unreadable message");
                    }
                }
            }
        }
        Ok(out)
    }

    /// The message `name` of `f`, if it reads (only that file is read).
    pub fn read_named(&self, f: Folder, name: &str) -> Option<Stored> {
        let read = self.read_one(f, name).ok()?;
        Some(Self::stored(f, name.to_string(), read))
    }

    /// A message as read from `f`. Only cryod speaks as cryo: mail to the
    /// agent that claims to says so.
    fn stored(f: Folder, name: String, (mut message, mtime): (Message, DateTime<Utc>)) -> Stored {
        let claims = message.from.trim().eq_ignore_ascii_case(message::CRYOCHAMBER);
        if f.incoming() && claims {
            message.from = format!("{} (not cryo itself: written into the inbox)", message.from.trim());
        } else if claims && !sealed(&message) {
            // In the outbox, only what cryod itself wrote (and sealed).
            message.from = format!("{} (not cryo itself: written into the outbox by the agent)", message.from.trim());
        }
        let when = message.timestamp.unwrap_or(mtime);
        Stored { folder: f, name, message, when }
    }

    /// Whether nothing stands at `name` in `f` any more.
    fn gone(&self, f: Folder, name: &str) -> bool {
        self.open().ok().and_then(|d| d.kind(&Path::new(f.rel()).join(name)).ok()).is_some_and(|k| k.is_none())
    }

    fn read_one(&self, f: Folder, name: &str) -> Result<(Message, DateTime<Utc>), Unreadable> {
        use std::io::Read;
        let rel = Path::new(f.rel()).join(name);
        let max = message::MAX_MESSAGE_BYTES as u64;
        let file = self.open()?.open_read(&rel, None).map_err(|e| match e {
            FileError::NotPlain { what, .. } => Unreadable::NotPlain(what),
            e => Unreadable::File(e),
        })?;
        let meta = file.metadata()?;
        if meta.len() > max {
            return Err(message::MessageError::TooLarge(meta.len() as usize).into());
        }
        let mut bytes = Vec::new();
        file.take(max + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(message::MessageError::TooLarge(bytes.len()).into());
        }
        let mtime = meta.modified().map(DateTime::<Utc>::from).unwrap_or_default();
        Ok((message::parse(&bytes, self.tz)?, mtime))
    }

    /// Moves a file to `messages/rejected/` with a `.reason` note beside it.
    /// Where that cannot be (something planted at `messages/rejected`), the
    /// file is kept in its folder under a dot name, which no reader lists
    /// (so it is not mail that waits, nor woken for again), and the line
    /// that says so, for a person, is returned.
    pub fn reject(&self, f: Folder, name: &str, reason: &str) -> Option<String> {
        const REJECTED: &str = "messages/rejected";
        let from = Path::new(f.rel()).join(name);
        let moved = self.folder().and_then(|d| {
            d.make_dirs(Path::new(REJECTED))?;
            let target = move_unique(&d, &from, Path::new(REJECTED), name)?;
            let note = format!("{}.reason", target);
            d.write(&Path::new(REJECTED).join(note), format!("{reason}\n").as_bytes(), NewFile::DURABLE)?;
            Ok(())
        });
        let error = match moved {
            Ok(()) => {
                tracing::warn!(file = %name, %reason, "message rejected");
                return None;
            }
            Err(error) => error,
        };
        tracing::warn!(file = %name, %error, "cannot move a bad message to messages/rejected");
        let aside = format!(".unreadable-{name}");
        let kept = self.folder().and_then(|d| move_unique(&d, &from, Path::new(f.rel()), &aside));
        let place = match &kept {
            Ok(kept) => format!("it is kept as {}/{kept}", f.rel()),
            Err(_) => "it stays where it is".to_string(),
        };
        Some(format!(
            "an unreadable message ({name}: {reason}) cannot be moved to messages/rejected ({error}); {place}: make \
             {}/{REJECTED} a folder again (remove what stands there)",
            self.root.display()
        ))
    }

    /// Claims the inbox: every readable message moves to `inbox/archive/`.
    /// Returns the claimed messages in time order.
    pub fn claim_inbox(&self) -> std::io::Result<Vec<Stored>> {
        let msgs = self.read(Folder::Inbox)?;
        self.archive(msgs)
    }

    /// Moves messages read from the inbox to `inbox/archive/` (fsyncing the
    /// folder), returning them with their archived names.
    pub fn archive(&self, msgs: Vec<Stored>) -> std::io::Result<Vec<Stored>> {
        let d = self.open()?;
        let archive = Path::new(Folder::InboxArchive.rel());
        d.make_dirs(archive)?;
        let mut claimed = Vec::with_capacity(msgs.len());
        for mut m in msgs {
            let from = Path::new(Folder::Inbox.rel()).join(&m.name);
            m.name = move_unique(&d, &from, archive, &m.name)?;
            m.folder = Folder::InboxArchive;
            claimed.push(m);
        }
        if !claimed.is_empty() {
            d.sync_folder(archive)?;
        }
        Ok(claimed)
    }

    /// Writes a message into `f` atomically; returns its file name.
    pub fn write(&self, f: Folder, msg: &Message, now: DateTime<Utc>) -> std::io::Result<String> {
        let unique = format!("{:04x}{:04x}", SEQ.fetch_add(1, Ordering::Relaxed) & 0xffff, random_u16());
        self.write_as(f, msg, now, &unique)
    }

    /// Writes a message whose name ends in `_UNIQUE.md`, `unique` chosen by
    /// the caller (a bridge's `zulip-123`): the same message always gets the
    /// same name.
    pub fn write_as(&self, f: Folder, msg: &Message, at: DateTime<Utc>, unique: &str) -> std::io::Result<String> {
        let name = message::file_name(at, &msg.subject, unique);
        let rel = Path::new(f.rel()).join(&name);
        // cryod's own word in the outbox is sealed.
        let mut sealed_msg;
        let msg = match (f, seal_of(msg)) {
            (Folder::Outbox, Some(seal)) if msg.from == message::CRYOCHAMBER => {
                sealed_msg = msg.clone();
                sealed_msg.meta.insert(SEAL_HEADER.into(), seal);
                &sealed_msg
            }
            _ => msg,
        };
        let d = self.open()?.gated(self.gate.clone());
        d.write(&rel, message::render(msg, self.tz).as_bytes(), NewFile::DURABLE)?;
        Ok(name)
    }

    /// Whether the inbox or its archive holds a message written with
    /// `unique` (see [`Mailbox::write_as`]).
    pub fn has_incoming(&self, unique: &str) -> std::io::Result<bool> {
        let tail = format!("_{unique}.md");
        // The archive may have added `-N` to a name that collided.
        let tail_n = format!("_{unique}-");
        let mut found = false;
        for f in [Folder::Inbox, Folder::InboxArchive] {
            self.each_name(f, |n| found |= n.ends_with(&tail) || n.contains(&tail_n))?;
        }
        Ok(found)
    }

    /// Moves an outbox message to `outbox/archive/` (delivered by a bridge).
    pub fn archive_outbox(&self, name: &str) -> std::io::Result<()> {
        let d = self.open()?;
        let archive = Path::new(Folder::OutboxArchive.rel());
        d.make_dirs(archive)?;
        move_unique(&d, &Path::new(Folder::Outbox.rel()).join(name), archive, name)?;
        Ok(d.sync_folder(archive)?)
    }

    /// The conversation as the agent's `dialog` shows it: incoming (inbox
    /// archive) and outgoing (outbox and its archive) messages, oldest
    /// first: the last `last`, or all. In [`Mailbox::page`]'s order, and
    /// as cheap: only the messages shown are read.
    pub fn dialog(&self, last: Option<usize>) -> Vec<Stored> {
        let folders = [Folder::InboxArchive, Folder::Outbox, Folder::OutboxArchive];
        self.page_in(&folders, None, last.unwrap_or(usize::MAX))
    }

    /// One page of the whole conversation (unread mail included), oldest
    /// first: the `limit` messages just before the one named `before`, or
    /// the newest `limit`. Only the folders are listed and only the page's
    /// files are read, so a page costs the same for ten messages or ten
    /// thousand. Order is by the time in the file name (every name cryo
    /// writes starts with it), else the file's modification time. An empty
    /// page: nothing older, or no message named `before`.
    pub fn page(&self, before: Option<&str>, limit: usize) -> Vec<Stored> {
        let folders = [Folder::Inbox, Folder::InboxArchive, Folder::Outbox, Folder::OutboxArchive];
        self.page_in(&folders, before, limit)
    }

    /// The newest `limit` messages of `folders` before the one named
    /// `before` (or the newest), oldest first: [`Mailbox::page`] of those
    /// folders alone.
    pub fn newest(&self, folders: &[Folder], before: Option<&str>, limit: usize) -> Vec<Stored> {
        self.page_in(folders, before, limit)
    }

    /// [`Mailbox::page`] of the folders `folders`. The names are listed one
    /// at a time and only the newest `limit` before the cursor are kept, so
    /// a folder of a hundred thousand costs its listing, not a sorted copy
    /// of it (a name's time is read from the name; only a name without one
    /// costs a `stat`).
    fn page_in(&self, folders: &[Folder], before: Option<&str>, limit: usize) -> Vec<Stored> {
        use std::cmp::Reverse;
        let Ok(d) = self.open() else { return Vec::new() };
        if limit == 0 {
            return Vec::new();
        }
        let time = |f: Folder, name: &str| {
            message::time_of_name(name)
                .or_else(|| {
                    let st = d.stat(&Path::new(f.rel()).join(name)).ok()??;
                    DateTime::<Utc>::from_timestamp(st.st_mtime, st.st_mtime_nsec as u32)
                })
                .unwrap_or_default()
        };
        // The cursor: the first message of that name in this order. A name
        // no folder lists has nothing before it.
        let cursor = match before {
            None => None,
            Some(b) if b.contains('/') || !message::is_message_name(b) => return Vec::new(),
            Some(b) => {
                let here = |f: &&Folder| d.kind(&Path::new(f.rel()).join(b)).ok().flatten().is_some();
                match folders.iter().filter(here).map(|f| time(*f, b)).min() {
                    Some(at) => Some((at, b)),
                    None => return Vec::new(),
                }
            }
        };
        // The newest `limit` before the cursor, oldest on top to be dropped.
        let mut kept: std::collections::BinaryHeap<Reverse<(DateTime<Utc>, String, Folder)>> = Default::default();
        for &f in folders {
            let listed = each_name(&d, f, |name| {
                let at = time(f, name);
                if cursor.is_some_and(|c| (at, name) >= c) {
                    return;
                }
                if kept.len() >= limit {
                    match kept.peek() {
                        Some(Reverse((t, n, g))) if (at, name, f) > (*t, n.as_str(), *g) => {
                            kept.pop();
                        }
                        _ => return,
                    }
                }
                kept.push(Reverse((at, name.to_string(), f)));
            });
            if let Err(error) = listed {
                tracing::debug!(folder = f.rel(), %error, "cannot list a mail folder");
            }
        }
        let mut page: Vec<_> = kept.into_iter().map(|Reverse(k)| k).collect();
        page.sort();
        let mut out = Vec::with_capacity(page.len());
        for (_, name, f) in page {
            if let Ok(read) = self.read_one(f, &name) {
                out.push(Self::stored(f, name, read));
            }
        }
        out
    }
}

/// Calls `each` with every message file name in the mailbox folder `f` of
/// the chamber `d`.
fn each_name(d: &Dir, f: Folder, mut each: impl FnMut(&str)) -> Result<(), FileError> {
    d.each(Path::new(f.rel()), |name, _| {
        if let Some(n) = name.to_str().filter(|n| message::is_message_name(n)) {
            each(n);
        }
    })
}

/// The status of the folder `rel`: `None` if something else stands there or
/// it cannot be looked at, `Some(None)` if it is missing.
fn folder_status(d: &Dir, rel: &Path) -> Option<Option<nix::sys::stat::FileStat>> {
    match d.stat(rel).ok()? {
        Some(st) if cryo_files::Kind::of(&st) != cryo_files::Kind::Folder => None,
        st => Some(st),
    }
}

/// Moves `from` into the folder `to` as `name`, or `NAME-N.md` if that is
/// taken (never replacing what is there); returns the name it took.
fn move_unique(d: &Dir, from: &Path, to: &Path, name: &str) -> Result<String, FileError> {
    let stem = name.strip_suffix(".md").unwrap_or(name);
    for n in 0..10_000 {
        let target = if n == 0 { name.to_string() } else { format!("{stem}-{n}.md") };
        match d.rename(from, &to.join(&target), false) {
            Ok(()) => return Ok(target),
            Err(FileError::Io { error, .. }) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(FileError::Io { path: d.path().join(to), error: std::io::Error::other("no free name left for the message") })
}

fn random_u16() -> u16 {
    let mut b = [0u8; 2];
    let _ = getrandom::fill(&mut b);
    u16::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-05T12:00:00Z").unwrap().with_timezone(&Utc)
    }

    #[test]
    fn claim_moves_the_batch_and_rejects_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let mb = Mailbox::new(dir.path(), chrono_tz::UTC);
        let m = Message { from: "op".into(), subject: "hi".into(), body: "hello".into(), ..Message::default() };
        let a = mb.write(Folder::Inbox, &m, now()).unwrap();
        std::fs::write(mb.dir(Folder::Inbox).join("zz-bad.md"), "---\nfrom: x\n").unwrap();
        std::fs::write(mb.dir(Folder::Inbox).join(".tmp.md"), "partial").unwrap();
        std::fs::write(mb.dir(Folder::Inbox).join("notes.txt"), "ignored").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", mb.dir(Folder::Inbox).join("link.md")).unwrap();
        assert_eq!(mb.unread().len(), 3);
        let claimed = mb.claim_inbox().unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].name, a);
        assert_eq!(claimed[0].message.body, "hello");
        assert!(mb.unread().is_empty());
        let rejected = dir.path().join("messages/rejected");
        assert!(rejected.join("zz-bad.md").is_file());
        assert!(std::fs::read_to_string(rejected.join("zz-bad.md.reason")).unwrap().contains("never closed"));
        assert!(rejected.join("link.md").symlink_metadata().unwrap().file_type().is_symlink());
        // Dot files and other files stay where they are.
        assert!(mb.dir(Folder::Inbox).join(".tmp.md").exists());
        assert!(mb.dir(Folder::Inbox).join("notes.txt").exists());
    }

    #[test]
    fn pages_keep_only_their_messages_and_walk_back_through_all() {
        let dir = tempfile::tempdir().unwrap();
        let mb = Mailbox::new(dir.path(), chrono_tz::UTC);
        let m = |i: i64| Message {
            from: "op".into(),
            subject: format!("m{i}"),
            body: format!("{i}"),
            ..Message::default()
        };
        let folders = [Folder::Inbox, Folder::InboxArchive, Folder::Outbox, Folder::OutboxArchive];
        for i in 0..300 {
            // Out of order across the folders, some in one millisecond.
            let at = now() + chrono::Duration::milliseconds((i * 7919) % 300 / 2);
            mb.write(folders[(i % 4) as usize], &m(i), at).unwrap();
        }
        // Names without a time take the file's: one before all, one amid.
        for (name, secs) in [("hand-written.md", -3600), ("later-note.md", 0)] {
            let path = mb.dir(Folder::Outbox).join(name);
            std::fs::write(&path, "---\nfrom: op\n---\n\nby hand\n").unwrap();
            let at = now() + chrono::Duration::seconds(secs);
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(at.into()).unwrap();
        }
        std::fs::write(mb.dir(Folder::Outbox).join("not-a-message.txt"), "x").unwrap();
        // What every page must be a window of: every name, sorted whole.
        let mut all: Vec<(DateTime<Utc>, String, Folder)> = Vec::new();
        for f in folders {
            for name in mb.names(f).unwrap() {
                let mtime = || DateTime::from(std::fs::metadata(mb.dir(f).join(&name)).unwrap().modified().unwrap());
                all.push((message::time_of_name(&name).unwrap_or_else(mtime), name, f));
            }
        }
        all.sort();
        assert_eq!(all.len(), 302);
        assert_eq!(all[0].1, "hand-written.md");
        let names = |page: &[Stored]| page.iter().map(|s| (s.name.clone(), s.folder)).collect::<Vec<_>>();
        let window = |r: std::ops::Range<usize>| all[r].iter().map(|(_, n, f)| (n.clone(), *f)).collect::<Vec<_>>();
        assert_eq!(names(&mb.page(None, 20)), window(282..302));
        let mut end = all.len();
        let mut before = None::<String>;
        while end > 0 {
            let page = mb.page(before.as_deref(), 23);
            assert_eq!(names(&page), window(end.saturating_sub(23)..end));
            end = end.saturating_sub(23);
            before = page.first().map(|s| s.name.clone());
        }
        assert!(mb.page(before.as_deref(), 23).is_empty());
        // A cursor no folder holds, or that is no message's name: nothing.
        for b in ["2026-03-05T12-00-00.000Z_gone_0000.md", "../cryo.toml", "not-a-message.txt"] {
            assert!(mb.page(Some(b), 5).is_empty(), "{b}");
        }
        assert!(mb.page(None, 0).is_empty());
        // The dialog: the same order, without the unread inbox.
        let read: Vec<_> = all.iter().filter(|(_, _, f)| *f != Folder::Inbox).collect();
        let dialog = mb.dialog(Some(10));
        assert_eq!(names(&dialog), read[read.len() - 10..].iter().map(|(_, n, f)| (n.clone(), *f)).collect::<Vec<_>>());
        assert_eq!(mb.dialog(None).len(), read.len());
        assert_eq!(dialog.last().unwrap().message.body, mb.dialog(None).last().unwrap().message.body);
    }

    #[test]
    fn names_are_unique_in_one_millisecond() {
        let dir = tempfile::tempdir().unwrap();
        let mb = Mailbox::new(dir.path(), chrono_tz::UTC);
        let m = Message::default();
        let names: std::collections::HashSet<_> =
            (0..200).map(|_| mb.write(Folder::Outbox, &m, now()).unwrap()).collect();
        assert_eq!(names.len(), 200);
    }
}
