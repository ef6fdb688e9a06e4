//! Writing: a chamber's files made, replaced, appended to, renamed and
//! removed, and its folders made and synced; and [`write_file`] for a
//! folder of cryod's own or of the operator's. A new file is created
//! exclusively under a name nobody can guess, then renamed into place: a
//! planted name is replaced, never written through.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, RenameFlags};
use nix::sys::stat::{FileStat, Mode};

use crate::dir::{Dir, Held};
use crate::{FileError, Kind, io};

/// How a new file is written.
#[derive(Debug, Clone, Copy)]
pub struct NewFile {
    /// Make the rename itself durable (sync the folder).
    pub durable: bool,
    /// The new file's mode (0600 for a secret).
    pub mode: u32,
}

impl NewFile {
    /// Complete on disk before it takes the name, and the name synced.
    pub const DURABLE: NewFile = NewFile { durable: true, mode: 0o644 };
    /// Complete on disk before it takes the name; the name not synced.
    pub const QUICK: NewFile = NewFile { durable: false, mode: 0o644 };
    /// [`NewFile::DURABLE`], the owner's alone from the moment it exists.
    pub const SECRET: NewFile = NewFile { durable: true, mode: 0o600 };
}

impl Dir {
    /// Opens `rel` to append to it, making it (and its folders) if missing:
    /// only a plain file with one name, never through a link or a FIFO.
    pub fn append(&self, rel: &Path) -> Result<File, FileError> {
        let path = self.full(rel);
        let (fd, name) = self.parent(rel, true)?;
        let flags = OFlag::O_WRONLY
            | OFlag::O_APPEND
            | OFlag::O_CREAT
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC
            | OFlag::O_NOCTTY;
        // A FIFO without a reader refuses a non-blocking open (ENXIO); one
        // with a reader opens, and is refused below.
        if let Ok(st) = nix::sys::stat::fstatat(&fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            && Kind::of(&st) != Kind::File
        {
            return Err(FileError::NotPlain { path, what: Kind::of(&st).what() });
        }
        self.may_write(rel)?;
        let file = File::from(
            nix::fcntl::openat(&fd, name.as_os_str(), flags, Mode::from_bits_truncate(0o644)).map_err(io(&path))?,
        );
        Self::own(&file, &path)?;
        Ok(file)
    }

    /// A file open for writing must be a plain file with one name.
    fn own(file: &File, path: &Path) -> Result<(), FileError> {
        let st = nix::sys::stat::fstat(file).map_err(io(path))?;
        match Kind::of(&st) {
            Kind::File if st.st_nlink > 1 => Err(FileError::Linked { path: path.to_path_buf(), names: st.st_nlink }),
            Kind::File => Ok(()),
            k => Err(FileError::NotPlain { path: path.to_path_buf(), what: k.what() }),
        }
    }

    /// Makes the folder `rel` and those on its way (never the chamber).
    pub fn make_dirs(&self, rel: &Path) -> Result<(), FileError> {
        // Nearly always there already: a look costs no `mkdir` on the way
        // (each takes its parent's lock to find the name taken).
        if let Ok(Some(Kind::Folder)) = self.kind(rel) {
            return Ok(());
        }
        let (fd, name) = self.parent(rel, true)?;
        let path = self.full(rel);
        match nix::sys::stat::mkdirat(&fd, name.as_os_str(), Mode::from_bits_truncate(0o755)) {
            Ok(()) => Ok(()),
            Err(Errno::EEXIST) => match nix::sys::stat::fstatat(&fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) if Kind::of(&st) == Kind::Folder => Ok(()),
                Ok(st) => Err(FileError::NotPlain { path, what: Kind::of(&st).what() }),
                Err(e) => Err(io(&path)(e)),
            },
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Writes `bytes` as `rel`, atomically: a new file under a name nobody
    /// can guess (`.NAME.RANDOM.tmp`, created exclusively), synced, then
    /// renamed over `rel` (whatever stood there, a link included, is
    /// replaced, not written through; a folder is not). Returns the new
    /// file's status, read before it took the name. On error the old file
    /// is left as it was.
    pub fn write(&self, rel: &Path, bytes: &[u8], how: NewFile) -> Result<FileStat, FileError> {
        let path = self.full(rel);
        let (fd, name) = self.parent(rel, true)?;
        let (tmp, mut file) = Self::temporary(&fd, &name, how.mode, &path)?;
        let result = (|| {
            file.write_all(bytes).map_err(|error| FileError::Io { path: path.clone(), error })?;
            file.sync_all().map_err(|error| FileError::Io { path: path.clone(), error })?;
            let st = nix::sys::stat::fstat(&file).map_err(io(&path))?;
            drop(file);
            self.may_write(rel)?;
            nix::fcntl::renameat(&fd, tmp.as_os_str(), &fd, name.as_os_str()).map_err(|e| match e {
                Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST => {
                    FileError::NotPlain { path: path.clone(), what: Kind::Folder.what() }
                }
                e => io(&path)(e),
            })?;
            if how.durable {
                nix::unistd::fsync(&fd).map_err(io(&path))?;
            }
            Ok(st)
        })();
        if result.is_err() {
            let _ = nix::unistd::unlinkat(&fd, tmp.as_os_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        }
        result
    }

    /// A new file beside `name`, made exclusively under an unguessable name.
    fn temporary(fd: &Held, name: &OsStr, mode: u32, path: &Path) -> Result<(OsString, File), FileError> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        loop {
            let mut tmp = OsString::from(".");
            tmp.push(name);
            tmp.push(format!(".{}.tmp", random_hex()));
            match nix::fcntl::openat(fd, tmp.as_os_str(), flags, Mode::from_bits_truncate(mode)) {
                Ok(f) => return Ok((tmp, File::from(f))),
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(io(path)(e)),
            }
        }
    }

    /// [`Dir::write`] through a spare file kept for the purpose (see
    /// `chamber::write_keeping`): `bytes` go into `spare` (beside `rel`'s
    /// own folder or elsewhere in the chamber), which is synced and swapped
    /// with `rel` in one step. A spare that is not a plain file of ours (a
    /// link, a second name) is left alone: the temporary and rename instead.
    pub fn write_keeping(&self, rel: &Path, spare: &Path, bytes: &[u8], durable: bool) -> Result<FileStat, FileError> {
        let how = NewFile { durable, mode: 0o644 };
        let path = self.full(rel);
        // Asked before the spare is touched too: a refused write changes
        // nothing, not even the kept version.
        self.may_write(rel)?;
        let (sfd, sname) = match self.parent(spare, true) {
            Ok(p) => p,
            Err(_) => return self.write(rel, bytes, how),
        };
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let opened = nix::fcntl::openat(&sfd, sname.as_os_str(), flags, Mode::from_bits_truncate(0o644));
        let mut file = match opened.map(File::from) {
            Ok(f) if Self::own(&f, &self.full(spare)).is_ok() => f,
            _ => return self.write(rel, bytes, how),
        };
        let ioe = |error| FileError::Io { path: path.clone(), error };
        file.set_len(0).map_err(ioe)?;
        file.write_all(bytes).map_err(|error| FileError::Io { path: path.clone(), error })?;
        file.sync_all().map_err(|error| FileError::Io { path: path.clone(), error })?;
        let st = nix::sys::stat::fstat(&file).map_err(io(&path))?;
        drop(file);
        let (fd, name) = self.parent(rel, true)?;
        self.may_write(rel)?;
        // No old version to keep, or no swap here: the spare takes the name.
        if swap(&sfd, &sname, &fd, &name).is_err() {
            nix::fcntl::renameat(&sfd, sname.as_os_str(), &fd, name.as_os_str()).map_err(io(&path))?;
        }
        if durable {
            nix::unistd::fsync(&fd).map_err(io(&path))?;
        }
        Ok(st)
    }

    /// Syncs the folder `rel` (a rename into it made durable).
    pub fn sync_folder(&self, rel: &Path) -> Result<(), FileError> {
        let fd = self.folder(rel)?;
        nix::unistd::fsync(&fd).map_err(io(&self.full(rel)))
    }

    /// Renames `from` to `to` inside the chamber, neither followed if a
    /// link; with `replace` false, an existing `to` is refused.
    pub fn rename(&self, from: &Path, to: &Path, replace: bool) -> Result<(), FileError> {
        let (ffd, fname) = self.parent(from, false)?;
        let (tfd, tname) = self.parent(to, true)?;
        let path = self.full(from);
        self.may_write(to)?;
        if replace {
            return nix::fcntl::renameat(&ffd, fname.as_os_str(), &tfd, tname.as_os_str()).map_err(io(&path));
        }
        no_replace(&ffd, &fname, &tfd, &tname).map_err(|e| match e {
            Errno::EEXIST => FileError::Io { path: self.full(to), error: std::io::ErrorKind::AlreadyExists.into() },
            e => io(&path)(e),
        })
    }

    /// Removes the file (or link) `rel`; a missing one is no error.
    pub fn remove(&self, rel: &Path) -> Result<(), FileError> {
        let (fd, name) = match self.parent(rel, false) {
            Ok(p) => p,
            Err(FileError::Missing(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        self.may_write(rel)?;
        match nix::unistd::unlinkat(&fd, name.as_os_str(), nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(io(&self.full(rel))(e)),
        }
    }
}

/// Writes `bytes` as the file `path` in a folder of cryod's own or of the
/// operator's (see [`Dir::open_own`]), atomically, as [`Dir::write`] does.
pub fn write_file(path: &Path, bytes: &[u8], how: NewFile) -> Result<FileStat, FileError> {
    let (folder, name) = split(path)?;
    Dir::open_own(folder)?.write(Path::new(name), bytes, how)
}

/// A path's folder and last part.
fn split(path: &Path) -> Result<(&Path, &OsStr), FileError> {
    let name = path.file_name().ok_or_else(|| FileError::Outside(path.to_path_buf()))?;
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((folder, name))
}

/// Exchanges two names in one step.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn swap(afd: &Held, a: &OsStr, bfd: &Held, b: &OsStr) -> nix::Result<()> {
    nix::fcntl::renameat2(afd, a, bfd, b, RenameFlags::RENAME_EXCHANGE)
}

/// Elsewhere there is no exchange: the caller renames.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn swap(_: &Held, _: &OsStr, _: &Held, _: &OsStr) -> nix::Result<()> {
    Err(Errno::ENOSYS)
}

/// A rename that never replaces what is at the target.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn no_replace(afd: &Held, a: &OsStr, bfd: &Held, b: &OsStr) -> nix::Result<()> {
    match nix::fcntl::renameat2(afd, a, bfd, b, RenameFlags::RENAME_NOREPLACE) {
        Err(Errno::EINVAL | Errno::ENOSYS) => link_then_unlink(afd, a, bfd, b),
        r => r,
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn no_replace(afd: &Held, a: &OsStr, bfd: &Held, b: &OsStr) -> nix::Result<()> {
    link_then_unlink(afd, a, bfd, b)
}

/// A no-replace rename where the filesystem has none: a new name (which
/// fails if taken), then the old one removed.
fn link_then_unlink(afd: &Held, a: &OsStr, bfd: &Held, b: &OsStr) -> nix::Result<()> {
    nix::unistd::linkat(afd, a, bfd, b, AtFlags::empty())?;
    nix::unistd::unlinkat(afd, a, nix::unistd::UnlinkatFlags::NoRemoveDir)
}

fn random_hex() -> String {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the OS random source works");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Gate;
    use crate::tests::{rel, world};
    use std::os::unix::fs::symlink;
    use std::sync::atomic::Ordering;

    #[test]
    fn writes_leave_no_temporary_and_keep_the_old_file_on_failure() {
        let (_t, root, _outside) = world();
        let d = Dir::open(&root).unwrap();
        let how = NewFile::SECRET;
        d.write(rel("a/new/file"), b"one", how).unwrap();
        d.write(rel("a/new/file"), b"two", how).unwrap();
        assert_eq!(std::fs::read(root.join("a/new/file")).unwrap(), b"two");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(root.join("a/new/file")).unwrap().permissions().mode() & 0o777, 0o600);
        // A folder where the file goes stays.
        assert!(d.write(rel("a/b"), b"x", how).is_err());
        assert!(root.join("a/b").is_dir());
        let names: Vec<_> = std::fs::read_dir(root.join("a")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    /// A closed gate is asked after the data is synced, before the name
    /// changes: every write refused, the files as they were, no temporary.
    #[test]
    fn a_closed_gate_changes_nothing() {
        let (_t, root, _outside) = world();
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let asked = open.clone();
        let d = Dir::open(&root).unwrap().gated(Some(Gate::new(move || asked.load(Ordering::SeqCst))));
        d.write(rel("a/file"), b"one", NewFile::QUICK).unwrap();
        d.write_keeping(rel("t"), rel(".cryo/t.prev"), b"one", true).unwrap();
        open.store(false, Ordering::SeqCst);
        let closed = |r: Result<(), FileError>| assert!(matches!(r, Err(FileError::Closed(_))), "{r:?}");
        closed(d.write(rel("a/file"), b"two", NewFile::QUICK).map(drop));
        closed(d.write_keeping(rel("t"), rel(".cryo/t.prev"), b"two", true).map(drop));
        closed(d.sub(rel("a")).unwrap().write(rel("file"), b"two", NewFile::QUICK).map(drop));
        closed(d.append(rel("a/file")).map(drop));
        closed(d.rename(rel("a/file"), rel("a/moved"), true));
        closed(d.remove(rel("t")));
        // Through an `io::Error` (the mailbox's), still told apart.
        let e: std::io::Error = d.write(rel("a/file"), b"two", NewFile::QUICK).unwrap_err().into();
        assert!(FileError::closed_in(&e) && e.to_string().contains("not written"), "{e}");
        assert!(!FileError::closed_in(&std::io::Error::other("disk full")));
        assert_eq!(std::fs::read(root.join("a/file")).unwrap(), b"one");
        assert_eq!(std::fs::read(root.join("t")).unwrap(), b"one");
        let names: Vec<_> = std::fs::read_dir(root.join("a")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(!names.iter().any(|n| n.to_string_lossy().ends_with(".tmp")), "no temporary left: {names:?}");
        assert!(!root.join("a/moved").exists());
        assert!(Dir::open(&root).unwrap().gated(None).write(rel("a/file"), b"two", NewFile::QUICK).is_ok());
    }

    #[test]
    fn a_kept_write_swaps_and_never_writes_through_a_planted_spare() {
        let (_t, root, outside) = world();
        let d = Dir::open(&root).unwrap();
        d.write_keeping(rel("t"), rel(".cryo/t.prev"), b"one", true).unwrap();
        d.write_keeping(rel("t"), rel(".cryo/t.prev"), b"two", true).unwrap();
        assert_eq!(std::fs::read(root.join("t")).unwrap(), b"two");
        std::fs::remove_file(root.join(".cryo/t.prev")).unwrap();
        symlink(outside.join("secret"), root.join(".cryo/t.prev")).unwrap();
        d.write_keeping(rel("t"), rel(".cryo/t.prev"), b"three", true).unwrap();
        assert_eq!(std::fs::read(root.join("t")).unwrap(), b"three");
        assert_eq!(std::fs::read_to_string(outside.join("secret")).unwrap(), "keep me");
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn a_kept_write_swaps_two_files_and_makes_no_inode() {
        use std::os::unix::fs::MetadataExt;
        let (_t, root, _outside) = world();
        let d = Dir::open(&root).unwrap();
        let ino = |rel: &str| std::fs::metadata(root.join(rel)).unwrap().ino();
        // No file yet: the spare takes the name.
        d.write_keeping(rel("todo.json"), rel(".cryo/spare"), b"one", true).unwrap();
        assert!(!root.join(".cryo/spare").exists());
        let first = ino("todo.json");
        d.write_keeping(rel("todo.json"), rel(".cryo/spare"), b"two", true).unwrap();
        assert_eq!(std::fs::read(root.join(".cryo/spare")).unwrap(), b"one");
        let second = ino("todo.json");
        // From then on the two inodes take turns, and a shorter version leaves no tail.
        let written = d.write_keeping(rel("todo.json"), rel(".cryo/spare"), b"3", false).unwrap();
        assert_eq!((ino("todo.json"), ino(".cryo/spare")), (first, second));
        assert_eq!(written.st_ino, first, "the status returned is the new version's");
        assert_eq!(std::fs::read(root.join("todo.json")).unwrap(), b"3");
    }

    #[test]
    fn a_rename_never_replaces_unless_asked() {
        let (_t, root, _outside) = world();
        let d = Dir::open(&root).unwrap();
        std::fs::write(root.join("x"), "x").unwrap();
        std::fs::write(root.join("y"), "y").unwrap();
        assert!(d.rename(rel("x"), rel("y"), false).is_err());
        assert_eq!(std::fs::read_to_string(root.join("y")).unwrap(), "y");
        d.rename(rel("x"), rel("z/x"), false).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("z/x")).unwrap(), "x");
    }
}
