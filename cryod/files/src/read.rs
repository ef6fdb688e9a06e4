//! Reading: a chamber's plain files through [`Dir`], and files named by
//! path from outside a chamber (the operator's, links followed; or a
//! resolved path walked again from `/`, no link followed). A file is
//! opened non-blocking, checked to be a plain file within its reader's
//! limit, and only then read.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;

use crate::dir::{Dir, Held, parts};
use crate::{FileError, Kind, io};

impl Dir {
    /// Opens the plain file `rel` for reading, refusing anything else, and
    /// one over `max` bytes (if given).
    pub fn open_read(&self, rel: &Path, max: Option<u64>) -> Result<File, FileError> {
        self.open_sized(rel, max).map(|(file, _)| file)
    }

    /// [`Dir::open_read`], and the file's size when opened.
    fn open_sized(&self, rel: &Path, max: Option<u64>) -> Result<(File, u64), FileError> {
        let path = self.full(rel);
        let (fd, name) = self.parent(rel, false)?;
        // Never open what is not a plain file (a device's open can act).
        self.check_plain(&fd, &name, &path)?;
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
        let file = File::from(nix::fcntl::openat(&fd, name.as_os_str(), flags, Mode::empty()).map_err(io(&path))?);
        let st = nix::sys::stat::fstat(&file).map_err(io(&path))?;
        let kind = Kind::of(&st);
        if kind != Kind::File {
            return Err(FileError::NotPlain { path, what: kind.what() });
        }
        if let Some(max) = max
            && st.st_size as u64 > max
        {
            return Err(FileError::TooLarge { path, size: st.st_size as u64, max });
        }
        Ok((file, st.st_size as u64))
    }

    fn check_plain(&self, fd: &Held, name: &OsStr, path: &Path) -> Result<(), FileError> {
        match nix::sys::stat::fstatat(fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => match Kind::of(&st) {
                Kind::File => Ok(()),
                k => Err(FileError::NotPlain { path: path.to_path_buf(), what: k.what() }),
            },
            Err(e) => Err(io(path)(e)),
        }
    }

    /// The bytes of the plain file `rel`, at most `max` of them (a file
    /// over it is refused, even one that grows while read).
    pub fn read(&self, rel: &Path, max: u64) -> Result<Vec<u8>, FileError> {
        let path = self.full(rel);
        let (file, size) = self.open_sized(rel, Some(max))?;
        let out = read_sized(&file, size, max).map_err(|error| FileError::Io { path: path.clone(), error })?;
        if out.len() as u64 > max {
            return Err(FileError::TooLarge { path, size: out.len() as u64, max });
        }
        Ok(out)
    }

    /// [`Dir::read`], an absent file read as `None`.
    pub fn read_if(&self, rel: &Path, max: u64) -> Result<Option<Vec<u8>>, FileError> {
        match self.read(rel, max) {
            Ok(b) => Ok(Some(b)),
            Err(FileError::Missing(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// At most `max + 1` bytes of `file`, whose size was `size` when opened:
/// one read for them all and one that finds the end (`read_to_end` reads
/// 8 KiB at first, three calls for a scaffolded `cryo.toml`), more only if
/// it grew.
fn read_sized(mut file: &File, size: u64, max: u64) -> std::io::Result<Vec<u8>> {
    let limit = usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX);
    let mut out = vec![0; usize::try_from(size).unwrap_or(usize::MAX).saturating_add(1).min(limit)];
    let mut len = 0;
    loop {
        if len == out.len() {
            if len == limit {
                break;
            }
            out.resize(len.saturating_mul(2).min(limit), 0);
        }
        match file.read(&mut out[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    out.truncate(len);
    Ok(out)
}

/// The bytes of a file the operator named (a key file, a CLI's own
/// configuration): links are followed, as the operator may keep it
/// anywhere, but a FIFO, a device or a folder is refused without blocking,
/// and so is a file over `max` bytes.
pub fn read_file(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    if let Ok(m) = std::fs::metadata(path)
        && !m.is_file()
    {
        let what = if m.is_dir() { Kind::Folder.what() } else { "not a plain file (a FIFO or a device)" };
        return Err(FileError::NotPlain { path: path.to_path_buf(), what });
    }
    let file = File::from(nix::fcntl::open(path, flags, Mode::empty()).map_err(io(path))?);
    read_plain(file, path, max)
}

/// The bytes of an opened `file` (named `path` in errors), refused unless
/// a plain file of at most `max` bytes (even one that grows while read).
fn read_plain(file: File, path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let kind = Kind::of(&nix::sys::stat::fstat(&file).map_err(io(path))?);
    if kind != Kind::File {
        return Err(FileError::NotPlain { path: path.to_path_buf(), what: kind.what() });
    }
    let mut out = Vec::new();
    file.take(max + 1).read_to_end(&mut out).map_err(|error| FileError::Io { path: path.to_path_buf(), error })?;
    if out.len() as u64 > max {
        return Err(FileError::TooLarge { path: path.to_path_buf(), size: out.len() as u64, max });
    }
    Ok(out)
}

/// The bytes of the file at `path`, an absolute path with no link in it
/// (as [`std::fs::canonicalize`] gives one): reached a component at a time
/// without following a link, so one planted since it was resolved is
/// refused, not followed. A FIFO, a device or a folder is refused without
/// blocking, and so is a file over `max` bytes.
#[cfg(target_os = "linux")]
pub fn read_resolved(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let (folder, name) = walk_resolved(path)?;
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    let kind = match nix::sys::stat::fstatat(&folder, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Kind::of(&st),
        Err(e) => return Err(io(path)(e)),
    };
    if kind != Kind::File {
        return Err(FileError::NotPlain { path: path.to_path_buf(), what: kind.what() });
    }
    let file = File::from(nix::fcntl::openat(&folder, name.as_os_str(), flags, Mode::empty()).map_err(io(path))?);
    read_plain(file, path, max)
}

/// A handle on what stands at `path` (absolute, with no link in it; a
/// folder, a file, a device), for rules about it rather than for reading
/// (`O_PATH`): reached a component at a time without following a link, so
/// one planted since the path was resolved is refused. Returns it with what
/// stands there.
#[cfg(target_os = "linux")]
pub fn open_resolved(path: &Path) -> Result<(OwnedFd, Kind), FileError> {
    let (folder, name) = walk_resolved(path)?;
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::openat(&folder, name.as_os_str(), flags, Mode::empty()).map_err(io(path))?;
    let kind = Kind::of(&nix::sys::stat::fstat(&fd).map_err(io(path))?);
    // O_PATH opens nothing (a device's driver is not called): only a link
    // is refused.
    match kind {
        Kind::Link => Err(FileError::NotPlain { path: path.to_path_buf(), what: kind.what() }),
        _ => Ok((fd, kind)),
    }
}

/// The folder holding `path` (absolute), reached from `/` a component at a
/// time with `O_PATH` (a folder the user may pass but not list, mode 0711,
/// is passed) and no link followed; and `path`'s last part.
#[cfg(target_os = "linux")]
fn walk_resolved(path: &Path) -> Result<(OwnedFd, OsString), FileError> {
    let rel = path.strip_prefix("/").map_err(|_| FileError::Outside(path.to_path_buf()))?;
    let parts = parts(rel)?;
    let (name, folders) = parts.split_last().expect("parts are not empty");
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut fd = nix::fcntl::open("/", flags, Mode::empty()).map_err(io(Path::new("/")))?;
    let mut at = PathBuf::from("/");
    for part in folders {
        at.push(part);
        fd = nix::fcntl::openat(&fd, *part, flags, Mode::empty()).map_err(|e| match e {
            Errno::ENOTDIR | Errno::ELOOP => {
                let what = match std::fs::symlink_metadata(&at) {
                    Ok(m) if !m.file_type().is_symlink() => "not a folder",
                    _ => Kind::Link.what(),
                };
                FileError::NotPlain { path: at.clone(), what }
            }
            e => io(&at)(e),
        })?;
    }
    Ok((fd, name.to_os_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{rel, world};
    use std::os::unix::fs::symlink;

    #[test]
    fn a_resolved_path_is_reached_only_while_no_link_is_on_it() {
        let (_t, root, outside) = world();
        let root = std::fs::canonicalize(root).unwrap();
        let outside = std::fs::canonicalize(outside).unwrap();
        std::fs::write(root.join("a/key"), "k").unwrap();
        assert_eq!(read_resolved(&root.join("a/key"), 16).unwrap(), b"k");
        assert_eq!(open_resolved(&root.join("a")).unwrap().1, Kind::Folder);
        assert_eq!(open_resolved(&root.join("a/key")).unwrap().1, Kind::File);
        // A link put in place of the file, or of a folder on its way.
        std::fs::remove_file(root.join("a/key")).unwrap();
        symlink(outside.join("secret"), root.join("a/key")).unwrap();
        assert!(read_resolved(&root.join("a/key"), 16).unwrap_err().is_planted());
        assert!(open_resolved(&root.join("a/key")).is_err());
        std::fs::rename(root.join("a"), root.join("gone")).unwrap();
        symlink(&outside, root.join("a")).unwrap();
        assert!(open_resolved(&root.join("a")).is_err());
        assert!(open_resolved(&root.join("a/secret")).unwrap_err().is_planted());
        assert!(read_resolved(Path::new("relative"), 16).is_err());
    }

    #[test]
    fn sizes_are_held_to_the_limit() {
        let (_t, root, _outside) = world();
        let d = Dir::open(&root).unwrap();
        std::fs::write(root.join("big"), vec![b'x'; 2048]).unwrap();
        let e = d.read(rel("big"), 1024).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { size: 2048, max: 1024, .. }), "{e}");
        assert_eq!(d.read(rel("big"), 4096).unwrap().len(), 2048);
        assert!(d.read_if(rel("none"), 10).unwrap().is_none());
    }

    /// A file read whole whatever its size was when opened: one that grew
    /// since is read on to its end, or to one byte past the limit.
    #[test]
    fn a_file_is_read_to_its_end_or_past_the_limit() {
        let (_t, root, _outside) = world();
        std::fs::write(root.join("f"), vec![b'x'; 20_000]).unwrap();
        let file = || File::open(root.join("f")).unwrap();
        assert_eq!(read_sized(&file(), 20_000, 1 << 20).unwrap().len(), 20_000);
        assert_eq!(read_sized(&file(), 3, 1 << 20).unwrap().len(), 20_000, "grown since");
        assert_eq!(read_sized(&file(), 0, 100).unwrap().len(), 101, "past the limit");
        assert_eq!(read_sized(&file(), 20_000, 100).unwrap().len(), 101);
        assert_eq!(read_sized(&file(), 0, u64::MAX).unwrap().len(), 20_000);
        std::fs::write(root.join("f"), "").unwrap();
        assert!(read_sized(&file(), 0, 10).unwrap().is_empty());
    }
}
