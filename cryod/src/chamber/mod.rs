//! One chamber's files: its config, scaffold, mailbox and TODO store.
//!
//! Chamber files are the source of truth; everything cryod writes into a
//! chamber goes through [`write_atomic`], so a reader (or a crash) never sees a
//! half-written file.

pub mod config;
pub mod log;
pub mod mailbox;
pub mod reset;
pub mod rest;
pub mod scaffold;
pub mod seed;
pub mod todos;
pub mod trust;
pub mod version;

use std::path::Path;

pub use cryo_files::{Dir, FileError, NewFile};

/// The largest text file of a chamber's cryod reads for people or
/// agents (`plan.md`, `NOTES.md`): a plan written through cryod is at most
/// 1 MiB too.
pub const MAX_TEXT_FILE: u64 = 1024 * 1024;

/// How long file work under a chamber may take while a caller waits (an
/// RPC, a page of the hub): a file on a stalled disk or network share must
/// not hold a worker of the runtime, nor the caller, for ever.
pub const FILE_WORK_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `f` (file work under a chamber) on a thread for blocking work, not
/// on the runtime's workers, and gives up waiting after [`FILE_WORK_LIMIT`].
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> crate::error::Result<T> {
    match tokio::time::timeout(FILE_WORK_LIMIT, tokio::task::spawn_blocking(f)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(crate::error::Error::Internal(format!("file work failed: {e}"))),
        Err(_) => Err(crate::error::Error::Unavailable(format!(
            "the chamber's files did not answer within {}s (a stalled disk?)",
            FILE_WORK_LIMIT.as_secs()
        ))),
    }
}

/// Looks at what a chamber's boot reads of its files, and keeps nothing:
/// its folder, `cryo.toml`, and the versions of its log, reset marker, TODO
/// list and mailbox, through the functions the boot calls. Run ahead of
/// the boots on a start from a cold cache (`daemon::loading`), it brings
/// those folders and files into the kernel's caches, several chambers at
/// a time; each boot then finds them there. Returns how long opening the
/// folder and reading `cryo.toml` took: some microseconds if the file was
/// cached, the disk's time if not. (The folder alone is no measure: the
/// folders' inodes come from the disk sixteen at a time. Nor is the whole
/// look: on a busy machine its thread may be put off midway.)
pub fn read_ahead(root: &Path, settled: std::time::SystemTime) -> std::time::Duration {
    let began = std::time::Instant::now();
    let Ok(d) = config::open(root) else { return began.elapsed() };
    let _ = config::read_text_in(&d);
    let took = began.elapsed();
    let _ = log::version(&d, settled);
    let _ = reset::last_reset(&d);
    let _ = todos::versions(&d, chrono_tz::UTC, settled);
    let _ = mailbox::Mailbox::new(root, chrono_tz::UTC).versions(&d, settled);
    took
}

/// Creates `dir` (and its parents) inside the chamber folder `root`, held
/// open, but never the folder itself: a chamber folder that was deleted or
/// moved stays gone instead of coming back half empty. Nothing on the way
/// is followed if a link.
pub fn make_dir_in(root: &Dir, dir: &Path) -> std::io::Result<()> {
    let inside = dir.strip_prefix(root.path()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{} is not inside the chamber", dir.display()))
    })?;
    if inside.as_os_str().is_empty() {
        return Ok(());
    }
    Ok(root.make_dirs(inside)?)
}

/// Writes `bytes` to `path`, a file of cryod's own (its state folder) or
/// of the operator's (a service file), atomically and durably: a new file
/// made exclusively under an unguessable name, synced, renamed over the
/// target, the folder synced. On any error the old file is left as it was.
/// A chamber's files go through [`Dir::write`] instead, which follows no
/// link on the way.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    cryo_files::write_file(path, bytes, NewFile::DURABLE).map(drop).map_err(Into::into)
}

/// [`write_atomic`] for a secret: the file is the owner's alone (0600) from
/// the moment it exists, never readable by others on its way in.
pub fn write_secret(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    cryo_files::write_file(path, bytes, NewFile::SECRET).map(drop).map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("todo.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn a_secret_is_the_owners_alone_from_the_start() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        write_atomic(&p, b"old").unwrap();
        write_secret(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub");
        std::fs::create_dir(&p).unwrap();
        // Renaming a file over a directory fails: the directory must survive.
        assert!(write_atomic(&p, b"x").is_err());
        assert!(p.is_dir());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// A hostile chamber cannot hold or misdirect a reader ahead: FIFOs at
    /// `cryo.toml`, `cryo.log`, `todo.json` and the files of `.cryo`, links
    /// at `messages` and `.cryo`, and a link in the folder's place are
    /// looked at without being opened or followed, and the reader goes on.
    #[test]
    fn reading_ahead_opens_no_fifo_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("c");
        std::fs::create_dir(&root).unwrap();
        for fifo in ["cryo.toml", "cryo.log"] {
            nix::unistd::mkfifo(&root.join(fifo), nix::sys::stat::Mode::S_IRWXU).unwrap();
        }
        std::os::unix::fs::symlink("/", root.join("messages")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join(".cryo")).unwrap();
        std::os::unix::fs::symlink(&root, dir.path().join("link")).unwrap();
        // FIFOs at every file the boot looks at in `.cryo`, and at the list.
        let other = dir.path().join("d");
        std::fs::create_dir_all(other.join(".cryo")).unwrap();
        for fifo in ["todo.json", ".cryo/state.json", ".cryo/todo-journal.jsonl", ".cryo/reset"] {
            nix::unistd::mkfifo(&other.join(fifo), nix::sys::stat::Mode::S_IRWXU).unwrap();
        }
        let (done, ended) = std::sync::mpsc::channel();
        let paths = [root.clone(), dir.path().join("link"), dir.path().join("missing"), other];
        std::thread::spawn(move || {
            for p in paths {
                super::read_ahead(&p, std::time::SystemTime::UNIX_EPOCH);
            }
            done.send(()).unwrap();
        });
        ended.recv_timeout(std::time::Duration::from_secs(20)).expect("a reader ahead was held");
    }
}
