//! A chamber's folder, reached without trusting anything in it.
//!
//! The agent can write anything inside its chamber: a symbolic link where
//! cryod expects a file (`cryo-agent.log` → `~/.bashrc`), a FIFO (a read
//! that never returns), a device, a second name of another file, or a file
//! of gigabytes. So nothing under a chamber is reached by a path string:
//! [`Dir`] holds the chamber folder open and walks each relative path one
//! component at a time with `openat(O_NOFOLLOW)` (or in one `openat2` that
//! resolves no link, where the kernel has it), refusing a link at any depth
//! and any `..`. A file is opened non-blocking (a FIFO opens at once,
//! and is then refused), checked to be a plain file with one name and
//! within the size its reader allows, and only then read or written. A new
//! file is created exclusively (`O_EXCL`), under a name nobody can guess,
//! then renamed into place: a planted name is replaced, never written
//! through.
//!
//! Every refusal is a [`FileError`] whose one line names the file and says
//! what was found there; the file itself is left as it is.
//!
//! Files of cryod's own and of the operator's (the state folder, a key
//! file) go through [`write_file`] and [`read_file`]: links in their path
//! are followed, as the operator may have made them, but a new file is
//! still made exclusively and a read still never blocks.
//!
//! The rooms: [`Dir`] and its walk in `dir`; reading in `read`; writing,
//! appending, renaming and removing in `write`; a log's last lines in
//! `tail`. This file holds what they share: why a file was refused and
//! what stands at a name.

mod dir;
mod read;
mod tail;
mod write;

pub use dir::{Dir, Entry, Gate};
pub use read::read_file;
#[cfg(target_os = "linux")]
pub use read::{open_resolved, read_resolved};
pub use tail::{lines_before, torn_end};
pub use write::{NewFile, write_file};

use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::stat::{FileStat, SFlag};

/// Why a file under a chamber was not read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{} is missing", .0.display())]
    Missing(PathBuf),
    #[error("{} is {what}, not a plain file: cryod does not follow or open it", .path.display())]
    NotPlain { path: PathBuf, what: &'static str },
    #[error("{}: {size} bytes, over the limit of {max}", .path.display())]
    TooLarge { path: PathBuf, size: u64, max: u64 },
    #[error("{} has {names} names (a hard link to another file): cryod does not write through it", .path.display())]
    Linked { path: PathBuf, names: u64 },
    #[error("{}: not a path inside the chamber", .0.display())]
    Outside(PathBuf),
    #[error("{}: {error}", .path.display())]
    Io { path: PathBuf, error: std::io::Error },
    /// The writer's [`Gate`] closed: nothing was changed.
    #[error("{}: not written: this writer no longer holds the chamber", .0.display())]
    Closed(PathBuf),
}

impl FileError {
    pub fn is_missing(&self) -> bool {
        matches!(self, FileError::Missing(_))
    }

    /// Whether something that is not a plain file stands where a file was
    /// expected (a link, a FIFO, a device, a folder, a second name).
    pub fn is_planted(&self) -> bool {
        matches!(self, FileError::NotPlain { .. } | FileError::Linked { .. })
    }

    /// Whether `e` (converted from a [`FileError`]) is a write the writer's
    /// [`Gate`] refused: nothing was changed.
    pub fn closed_in(e: &std::io::Error) -> bool {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<FileError>())
            .is_some_and(|f| matches!(f, FileError::Closed(_)))
    }
}

impl From<FileError> for std::io::Error {
    fn from(e: FileError) -> std::io::Error {
        let kind = match &e {
            FileError::Missing(_) => std::io::ErrorKind::NotFound,
            FileError::Io { error, .. } => error.kind(),
            _ => std::io::ErrorKind::InvalidData,
        };
        // The error itself, not only its line: [`FileError::closed_in`]
        // reads it back.
        std::io::Error::new(kind, e)
    }
}

/// What stands at a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Folder,
    Link,
    Other(&'static str),
}

impl Kind {
    /// What a status (`stat`, links not followed) says stands there.
    pub fn of(st: &FileStat) -> Kind {
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFREG => Kind::File,
            SFlag::S_IFDIR => Kind::Folder,
            SFlag::S_IFLNK => Kind::Link,
            SFlag::S_IFIFO => Kind::Other("a FIFO"),
            SFlag::S_IFSOCK => Kind::Other("a socket"),
            SFlag::S_IFCHR | SFlag::S_IFBLK => Kind::Other("a device"),
            _ => Kind::Other("something unknown"),
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::File => "a file",
            Kind::Folder => "a folder",
            Kind::Link => "a symbolic link",
            Kind::Other(w) => w,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(Errno) -> FileError + '_ {
    move |e| match e {
        Errno::ENOENT => FileError::Missing(path.to_path_buf()),
        // A link where O_NOFOLLOW met it, or a non-folder on the way.
        Errno::ELOOP | Errno::EMLINK => FileError::NotPlain { path: path.to_path_buf(), what: Kind::Link.what() },
        Errno::ENXIO => FileError::NotPlain { path: path.to_path_buf(), what: "a FIFO" },
        e => FileError::Io { path: path.to_path_buf(), error: std::io::Error::from(e) },
    }
}

#[cfg(test)]
mod tests {
    //! The crate's promises across its rooms: a link, a FIFO, a second name
    //! or a path outside is refused by reads and writes alike.

    use super::*;
    use crate::dir::parts;
    use nix::sys::stat::Mode;
    use std::io::Write;
    use std::os::unix::fs::symlink;

    /// A chamber with `a/b` in it, and a folder outside it holding `secret`.
    pub(crate) fn world() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("chamber");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "keep me").unwrap();
        (t, root, outside)
    }

    pub(crate) fn rel(s: &str) -> &Path {
        Path::new(s)
    }

    #[test]
    fn a_link_at_any_depth_is_refused_and_its_target_untouched() {
        let (_t, root, outside) = world();
        let d = Dir::open(&root).unwrap();
        // The last part, a middle part, the first part.
        symlink(outside.join("secret"), root.join("a/b/file")).unwrap();
        symlink(&outside, root.join("a/linked")).unwrap();
        symlink(&outside, root.join("top")).unwrap();
        for r in ["a/b/file", "a/linked/secret", "top/secret"] {
            let e = d.read(rel(r), 1024).unwrap_err();
            assert!(e.is_planted(), "{r}: {e}");
            assert!(e.to_string().contains("symbolic link"), "{r}: {e}");
            assert!(d.append(rel(r)).is_err(), "{r}: appended");
        }
        // Writing replaces the link, never its target.
        d.write(rel("a/b/file"), b"new", NewFile::QUICK).unwrap();
        assert!(d.write(rel("a/linked/x"), b"new", NewFile::QUICK).is_err());
        assert!(d.make_dirs(rel("top/made")).is_err());
        assert_eq!(std::fs::read_to_string(outside.join("secret")).unwrap(), "keep me");
        assert_eq!(std::fs::read_to_string(root.join("a/b/file")).unwrap(), "new");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1, "nothing made outside");
        // One call reaches a nested folder, and reaches none through a link
        // or to a file (the walk then says what stands there).
        let beneath = |r: &str| d.beneath(&parts(rel(r)).unwrap()).is_some();
        assert!(beneath("a/b"), "a plain nested folder");
        assert!(!beneath("a/linked") && !beneath("top/x") && !beneath("a/b/file"), "links and files");
        // Listing a linked folder, and renaming into one, are refused too.
        assert!(d.list(rel("top")).is_err());
        let e = d.list(rel("a/linked")).unwrap_err();
        assert!(e.is_planted() && e.to_string().contains("a/linked"), "{e}");
        assert_eq!(d.list(rel("a/b")).unwrap().len(), 1);
        std::fs::write(root.join("m"), "m").unwrap();
        assert!(d.rename(rel("m"), rel("top/m"), false).is_err());
        assert!(root.join("m").exists());
    }

    /// A name flipped between a plain file and a link to a file outside,
    /// as fast as another thread can, while cryod reads, appends and
    /// writes it: the file outside is never read nor written.
    #[test]
    fn a_race_between_check_and_use_never_reaches_outside() {
        let (_t, root, outside) = world();
        let d = Dir::open(&root).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flipper = {
            let (root, outside, stop) = (root.clone(), outside.clone(), stop.clone());
            std::thread::spawn(move || {
                let (name, tmp_file, tmp_link) = (root.join("a/x"), root.join("a/.f"), root.join("a/.l"));
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::fs::write(&tmp_file, "inside");
                    let _ = std::fs::rename(&tmp_file, &name);
                    let _ = symlink(outside.join("secret"), &tmp_link);
                    let _ = std::fs::rename(&tmp_link, &name);
                }
            })
        };
        for _ in 0..3000 {
            if let Ok(bytes) = d.read(rel("a/x"), 1024) {
                assert_ne!(bytes, b"keep me", "read through the link");
            }
            if let Ok(mut f) = d.append(rel("a/x")) {
                let _ = f.write_all(b"+");
            }
            let _ = d.write(rel("a/x"), b"written", NewFile::QUICK);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flipper.join().unwrap();
        assert_eq!(std::fs::read_to_string(outside.join("secret")).unwrap(), "keep me");
    }

    #[test]
    fn paths_outside_are_refused() {
        let (_t, root, _outside) = world();
        let d = Dir::open(&root).unwrap();
        for r in ["../outside/secret", "/etc/passwd", "", "a/../../outside/secret"] {
            assert!(matches!(d.read(rel(r), 10), Err(FileError::Outside(_))), "{r}");
        }
    }

    #[test]
    fn fifos_devices_folders_and_second_names_are_refused_without_blocking() {
        let (_t, root, outside) = world();
        let d = Dir::open(&root).unwrap();
        nix::unistd::mkfifo(&root.join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        let e = d.read(rel("fifo"), 1024).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(d.append(rel("fifo")).unwrap_err().to_string().contains("FIFO"));
        assert!(d.read(rel("a"), 1024).unwrap_err().to_string().contains("a folder"));
        if nix::unistd::geteuid().is_root() {
            nix::sys::stat::mknod(&root.join("dev"), SFlag::S_IFCHR, Mode::from_bits_truncate(0o644), 0x0103).unwrap();
            assert!(d.read(rel("dev"), 1024).unwrap_err().to_string().contains("a device"));
        }
        // A second name of a file outside: never written through.
        std::fs::hard_link(outside.join("secret"), root.join("log")).unwrap();
        assert!(matches!(d.append(rel("log")), Err(FileError::Linked { .. })));
        assert_eq!(std::fs::read_to_string(outside.join("secret")).unwrap(), "keep me");
        // A socket bound there is not a file either.
        let _s = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
        assert!(d.read(rel("sock"), 10).unwrap_err().to_string().contains("a socket"));
    }
}
