//! A chamber's folder held open, and the walk to a name in it: each
//! relative path taken one component at a time with `O_NOFOLLOW` (or in one
//! `openat2` that resolves no link), refusing a link at any depth and any
//! `..`. Also what stands at a name, and a folder's listing.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode};

use crate::{FileError, Kind, io};

/// An entry of a listed folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: OsString,
    pub kind: Kind,
}

/// A chamber's folder, held open.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    /// Asked just before each write takes effect (see [`Gate`]).
    gate: Option<Gate>,
}

/// The writer's right to write, asked just before each write through a
/// [`Dir`] takes effect (a rename into place, an open to append, a
/// removal), after the slow part (the data written and synced): a fleet
/// node that was stopped in the middle of a write and no longer trusts its
/// lease when it runs again writes nothing over the chamber's new owner.
#[derive(Clone)]
pub struct Gate(std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl Gate {
    pub fn new(open: impl Fn() -> bool + Send + Sync + 'static) -> Gate {
        Gate(std::sync::Arc::new(open))
    }

    /// Whether writes pass now.
    pub fn is_open(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate")
    }
}

/// The parts of a relative path inside a chamber (no `..`, not absolute,
/// not empty).
pub(crate) fn parts(rel: &Path) -> Result<Vec<&OsStr>, FileError> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return Err(FileError::Outside(rel.to_path_buf())),
        }
    }
    if out.is_empty() {
        return Err(FileError::Outside(rel.to_path_buf()));
    }
    Ok(out)
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY.union(OFlag::O_DIRECTORY).union(OFlag::O_NOFOLLOW).union(OFlag::O_CLOEXEC);

/// The folder a name is reached in: the chamber's own handle, borrowed (no
/// `dup` for a file at the top, the most read), or a folder beneath it.
pub(crate) enum Held<'a> {
    Chamber(&'a OwnedFd),
    Folder(OwnedFd),
}

impl AsFd for Held<'_> {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Held::Chamber(fd) => fd.as_fd(),
            Held::Folder(fd) => fd.as_fd(),
        }
    }
}

impl Dir {
    /// Opens the chamber folder `root` (itself not a link).
    pub fn open(root: &Path) -> Result<Dir, FileError> {
        let fd = nix::fcntl::open(root, DIR_FLAGS, Mode::empty()).map_err(|e| match e {
            Errno::ENOTDIR => FileError::NotPlain { path: root.to_path_buf(), what: "not a folder" },
            e => io(root)(e),
        })?;
        Ok(Dir { fd, path: root.to_path_buf(), gate: None })
    }

    /// This folder, each of its writes (and those of its [`Dir::sub`]s)
    /// asking `gate` first; `None` leaves it as it is.
    pub fn gated(self, gate: Option<Gate>) -> Dir {
        Dir { gate: gate.or(self.gate), ..self }
    }

    /// Refuses the write of `rel` if the gate is closed.
    pub(crate) fn may_write(&self, rel: &Path) -> Result<(), FileError> {
        match &self.gate {
            Some(gate) if !gate.is_open() => Err(FileError::Closed(self.full(rel))),
            _ => Ok(()),
        }
    }

    /// Opens a folder of cryod's own or of the operator's (the state
    /// folder, `~/.config/systemd/user`): links in its own path are
    /// followed, but nothing in it is.
    pub fn open_own(folder: &Path) -> Result<Dir, FileError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::open(folder, flags, Mode::empty()).map_err(io(folder))?;
        Ok(Dir { fd, path: folder.to_path_buf(), gate: None })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn full(&self, rel: &Path) -> PathBuf {
        self.path.join(rel)
    }

    /// The folder holding `rel`, opened without following a link (in one
    /// `openat2` where it can, else component by component), and `rel`'s
    /// last part. With `make`, missing
    /// folders on the way are created (never the chamber itself).
    pub(crate) fn parent(&self, rel: &Path, make: bool) -> Result<(Held<'_>, OsString), FileError> {
        let parts = parts(rel)?;
        let (name, folders) = parts.split_last().expect("parts are not empty");
        if !make && let Some(fd) = self.beneath(folders) {
            return Ok((Held::Folder(fd), name.to_os_string()));
        }
        let mut fd = Held::Chamber(&self.fd);
        let mut at = self.path.clone();
        for part in folders {
            at.push(part);
            if make {
                match nix::sys::stat::mkdirat(&fd, *part, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(io(&at)(e)),
                }
            }
            fd = Held::Folder(nix::fcntl::openat(&fd, *part, DIR_FLAGS, Mode::empty()).map_err(|e| match e {
                Errno::ENOTDIR | Errno::ELOOP => self.planted(&at, true),
                e => io(&at)(e),
            })?);
        }
        Ok((fd, name.to_os_string()))
    }

    /// The folder `folders` beneath the chamber opened in one call, no link
    /// followed at any depth (`openat2` with `RESOLVE_NO_SYMLINKS`), where
    /// there are two or more to walk and the kernel has the call. `None`
    /// otherwise, or on any failure: the walk, one component at a time,
    /// then finds the same folder or says exactly what stands in the way.
    /// (One difference, harmless: a folder on the way needs only search
    /// permission here, read permission in the walk.)
    pub(crate) fn beneath(&self, folders: &[&OsStr]) -> Option<OwnedFd> {
        use nix::fcntl::{OpenHow, ResolveFlag};
        use std::sync::atomic::{AtomicBool, Ordering};
        // Unknown to the kernel (before Linux 5.6, or hidden by a filter
        // that answers ENOSYS). An EPERM may be one chamber's (a FUSE
        // server's): that call falls back, the next ones still try.
        static MISSING: AtomicBool = AtomicBool::new(false);
        if folders.len() < 2 || MISSING.load(Ordering::Relaxed) {
            return None;
        }
        let mut path = PathBuf::new();
        path.extend(folders);
        let how = OpenHow::new().flags(DIR_FLAGS).resolve(
            ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
        match nix::fcntl::openat2(&self.fd, path.as_path(), how) {
            Ok(fd) => Some(fd),
            Err(Errno::ENOSYS) => {
                MISSING.store(true, Ordering::Relaxed);
                None
            }
            Err(_) => None,
        }
    }

    /// What stands at `path` that is not a folder: a link (the usual case),
    /// a file, or anything else.
    fn planted(&self, path: &Path, want_folder: bool) -> FileError {
        let what = std::fs::symlink_metadata(path)
            .map(|m| {
                let t = m.file_type();
                if t.is_symlink() {
                    Kind::Link.what()
                } else if t.is_file() && want_folder {
                    "a file, not a folder"
                } else {
                    "not a folder"
                }
            })
            .unwrap_or(Kind::Link.what());
        FileError::NotPlain { path: path.to_path_buf(), what }
    }

    /// What stands at `rel` (`None` if nothing), links not followed.
    pub fn kind(&self, rel: &Path) -> Result<Option<Kind>, FileError> {
        let (fd, name) = match self.parent(rel, false) {
            Ok(p) => p,
            Err(FileError::Missing(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        match nix::sys::stat::fstatat(&fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Kind::of(&st))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io(&self.full(rel))(e)),
        }
    }

    /// `rel`'s status, links not followed (`None` if nothing is there).
    pub fn stat(&self, rel: &Path) -> Result<Option<FileStat>, FileError> {
        let (fd, name) = match self.parent(rel, false) {
            Ok(p) => p,
            Err(FileError::Missing(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        match nix::sys::stat::fstatat(&fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io(&self.full(rel))(e)),
        }
    }

    /// The entries of the folder `rel` (`"."` for the chamber itself), links
    /// not followed; a missing folder has none. The folder itself must not
    /// be (or lie under) a link.
    pub fn list(&self, rel: &Path) -> Result<Vec<Entry>, FileError> {
        let mut out = Vec::new();
        self.each(rel, |name, kind| out.push(Entry { name: name.to_os_string(), kind }))?;
        Ok(out)
    }

    /// Calls `f` with each entry of the folder `rel`, as [`Dir::list`]
    /// finds them, keeping none: a folder of a hundred thousand names costs
    /// its reading, not a copy of every name.
    pub fn each(&self, rel: &Path, mut f: impl FnMut(&OsStr, Kind)) -> Result<(), FileError> {
        let fd = match self.folder(rel) {
            Ok(fd) => fd,
            Err(FileError::Missing(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let path = self.full(rel);
        let mut d = nix::dir::Dir::from_fd(fd).map_err(io(&path))?;
        for e in d.iter() {
            let e = e.map_err(io(&path))?;
            let name = OsStr::from_bytes(e.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let kind = match e.file_type() {
                Some(nix::dir::Type::File) => Kind::File,
                Some(nix::dir::Type::Directory) => Kind::Folder,
                Some(nix::dir::Type::Symlink) => Kind::Link,
                Some(nix::dir::Type::Fifo) => Kind::Other("a FIFO"),
                Some(nix::dir::Type::Socket) => Kind::Other("a socket"),
                Some(nix::dir::Type::CharacterDevice | nix::dir::Type::BlockDevice) => Kind::Other("a device"),
                None => self.kind(&rel.join(name))?.unwrap_or(Kind::Other("gone")),
            };
            f(name, kind);
        }
        Ok(())
    }

    /// The folder `rel`, held open as a [`Dir`] of its own (links are not
    /// followed on the way, nor at its end): the names under it are then
    /// reached from it, not from the chamber again.
    pub fn sub(&self, rel: &Path) -> Result<Dir, FileError> {
        Ok(Dir { fd: self.folder(rel)?, path: self.full(rel), gate: self.gate.clone() })
    }

    /// [`Dir::sub`], a missing folder (or one under a missing folder) as
    /// `None`.
    pub fn sub_if(&self, rel: &Path) -> Result<Option<Dir>, FileError> {
        match self.sub(rel) {
            Ok(d) => Ok(Some(d)),
            Err(FileError::Missing(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The status of the folder itself.
    pub fn status(&self) -> Result<FileStat, FileError> {
        nix::sys::stat::fstat(&self.fd).map_err(io(&self.path))
    }

    /// The folder `rel` opened (the chamber itself for `"."`).
    pub(crate) fn folder(&self, rel: &Path) -> Result<OwnedFd, FileError> {
        if rel.components().all(|c| c == Component::CurDir) {
            return self.fd.try_clone().map_err(|error| FileError::Io { path: self.path.clone(), error });
        }
        if let Ok(parts) = parts(rel)
            && let Some(fd) = self.beneath(&parts)
        {
            return Ok(fd);
        }
        let (fd, name) = self.parent(rel, false)?;
        let path = self.full(rel);
        nix::fcntl::openat(&fd, name.as_os_str(), DIR_FLAGS, Mode::empty()).map_err(|e| match e {
            Errno::ENOTDIR | Errno::ELOOP => self.planted(&path, true),
            e => io(&path)(e),
        })
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{rel, world};
    use std::os::unix::fs::{MetadataExt, symlink};

    #[test]
    fn a_listing_names_what_each_entry_is() {
        let (_t, root, outside) = world();
        let d = Dir::open(&root).unwrap();
        std::fs::write(root.join("a/f.md"), "x").unwrap();
        symlink(&outside, root.join("a/l.md")).unwrap();
        let mut seen: Vec<(String, Kind)> =
            d.list(rel("a")).unwrap().into_iter().map(|e| (e.name.to_string_lossy().into_owned(), e.kind)).collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(seen, vec![("b".into(), Kind::Folder), ("f.md".into(), Kind::File), ("l.md".into(), Kind::Link)]);
        assert!(d.list(rel("missing")).unwrap().is_empty());
    }

    /// A folder beneath, held open, reaches what is under it; a link or
    /// a file in its place, or anywhere on its way, is not opened.
    #[test]
    fn a_folder_beneath_is_opened_without_following_a_link() {
        let (_t, root, outside) = world();
        let d = Dir::open(&root).unwrap();
        let a = d.sub(rel("a")).unwrap();
        assert_eq!(a.path(), root.join("a"));
        assert_eq!(a.status().unwrap().st_ino, std::fs::metadata(root.join("a")).unwrap().ino());
        assert_eq!(a.kind(rel("b")).unwrap(), Some(Kind::Folder));
        assert_eq!(
            d.sub(rel("a/b")).unwrap().status().unwrap().st_ino,
            std::fs::metadata(root.join("a/b")).unwrap().ino()
        );
        symlink(&outside, root.join("l")).unwrap();
        assert!(d.sub(rel("l")).unwrap_err().is_planted());
        assert!(d.sub(rel("l/x")).unwrap_err().is_planted());
        std::fs::write(root.join("f"), "").unwrap();
        assert!(d.sub(rel("f")).unwrap_err().is_planted());
        assert!(d.sub(rel("none")).unwrap_err().is_missing());
        assert!(d.sub_if(rel("none/deeper")).unwrap().is_none());
        assert!(d.sub_if(rel("a")).unwrap().is_some());
        assert!(d.sub_if(rel("l")).unwrap_err().is_planted());
    }

    #[test]
    fn a_chamber_that_is_a_link_or_a_file_is_not_opened() {
        let (t, root, _outside) = world();
        symlink(&root, t.path().join("alias")).unwrap();
        assert!(Dir::open(&t.path().join("alias")).is_err());
        std::fs::write(t.path().join("file"), "").unwrap();
        assert!(Dir::open(&t.path().join("file")).is_err());
        assert!(Dir::open(&t.path().join("none")).unwrap_err().is_missing());
    }
}
