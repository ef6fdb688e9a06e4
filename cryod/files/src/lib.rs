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

mod tail;
pub use tail::{lines_before, torn_end};

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, RenameFlags};
use nix::sys::stat::{FileStat, Mode, SFlag};

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
}

impl From<FileError> for std::io::Error {
    fn from(e: FileError) -> std::io::Error {
        let kind = match &e {
            FileError::Missing(_) => std::io::ErrorKind::NotFound,
            FileError::Io { error, .. } => error.kind(),
            _ => std::io::ErrorKind::InvalidData,
        };
        std::io::Error::new(kind, e.to_string())
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
    fn of(st: &FileStat) -> Kind {
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
}

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

fn io(path: &Path) -> impl FnOnce(Errno) -> FileError + '_ {
    move |e| match e {
        Errno::ENOENT => FileError::Missing(path.to_path_buf()),
        // A link where O_NOFOLLOW met it, or a non-folder on the way.
        Errno::ELOOP | Errno::EMLINK => FileError::NotPlain { path: path.to_path_buf(), what: Kind::Link.what() },
        Errno::ENXIO => FileError::NotPlain { path: path.to_path_buf(), what: "a FIFO" },
        e => FileError::Io { path: path.to_path_buf(), error: std::io::Error::from(e) },
    }
}

/// The parts of a relative path inside a chamber (no `..`, not absolute,
/// not empty).
fn parts(rel: &Path) -> Result<Vec<&OsStr>, FileError> {
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
enum Held<'a> {
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
        Ok(Dir { fd, path: root.to_path_buf() })
    }

    /// Opens a folder of cryod's own or of the operator's (the state
    /// folder, `~/.config/systemd/user`): links in its own path are
    /// followed, but nothing in it is.
    pub fn open_own(folder: &Path) -> Result<Dir, FileError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::open(folder, flags, Mode::empty()).map_err(io(folder))?;
        Ok(Dir { fd, path: folder.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn full(&self, rel: &Path) -> PathBuf {
        self.path.join(rel)
    }

    /// The folder holding `rel`, opened without following a link (in one
    /// `openat2` where it can, else component by component), and `rel`'s
    /// last part. With `make`, missing
    /// folders on the way are created (never the chamber itself).
    fn parent(&self, rel: &Path, make: bool) -> Result<(Held<'_>, OsString), FileError> {
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
    fn beneath(&self, folders: &[&OsStr]) -> Option<OwnedFd> {
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
        // Room for it all, and the one read that finds its end.
        let mut out = Vec::with_capacity(size as usize + 1);
        file.take(max + 1).read_to_end(&mut out).map_err(|error| FileError::Io { path: path.clone(), error })?;
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
        // No old version to keep, or no swap here: the spare takes the name.
        if swap(&sfd, &sname, &fd, &name).is_err() {
            nix::fcntl::renameat(&sfd, sname.as_os_str(), &fd, name.as_os_str()).map_err(io(&path))?;
        }
        if durable {
            nix::unistd::fsync(&fd).map_err(io(&path))?;
        }
        Ok(st)
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

    /// The folder `rel` opened (the chamber itself for `"."`).
    fn folder(&self, rel: &Path) -> Result<OwnedFd, FileError> {
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

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn world() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("chamber");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "keep me").unwrap();
        (t, root, outside)
    }

    fn rel(s: &str) -> &Path {
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
