//! One chamber's files: its config, scaffold, mailbox and TODO store.
//!
//! Chamber files are the source of truth; everything cryod writes into a
//! chamber goes through [`write_atomic`], so a reader (or a crash) never sees a
//! half-written file.

pub mod config;
pub mod log;
pub mod mailbox;
pub mod reset;
pub mod scaffold;
pub mod todos;

use std::io::Write;
use std::path::Path;

/// Creates `dir` (and its parents) inside the chamber at `root`, but never
/// `root` itself: a chamber folder that was deleted or moved stays gone
/// instead of coming back half empty.
pub fn make_dir_in(root: &Path, dir: &Path) -> std::io::Result<()> {
    let missing = || {
        std::io::Error::new(std::io::ErrorKind::NotFound, format!("the chamber folder {} is missing", root.display()))
    };
    if !root.is_dir() {
        return Err(missing());
    }
    let inside = dir.strip_prefix(root).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{} is not inside the chamber", dir.display()))
    })?;
    // One level at a time from the root down, never the root itself: a
    // folder deleted just after the check above stays deleted.
    let mut path = root.to_path_buf();
    for part in inside.components() {
        path.push(part);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically and durably: a dot-prefixed temporary
/// in the same folder, fsync, rename over the target, fsync the folder. On
/// any error the old file is left as it was and the temporary is removed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_replacing(path, bytes, true).map(drop)
}

/// [`write_atomic`], the rename itself made durable (the folder synced) only
/// if `durable`: the new file is always complete on disk before it takes the
/// name, so a crash leaves the old version or the new one, never a torn one.
/// Returns the new file's metadata, read before it took the name (so it is
/// ours, whatever is written there next).
pub fn write_replacing(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<std::fs::Metadata> {
    write_file(path, bytes, durable, None)
}

/// [`write_replacing`] through a spare file kept for the purpose: `bytes` go
/// into `spare` (an earlier version, overwritten), which is synced and then
/// swapped with `path` in one step (`renameat2` with `RENAME_EXCHANGE`), so
/// the version replaced becomes the next spare. A crash leaves the old
/// version or the new one, as with a rename, but no inode is made or freed
/// (an ext4 without a journal pays for each new inode with a search past the
/// recently deleted ones, which on a busy daemon cost more CPU than the rest
/// of the write). With no `path` yet, or no swap on this system, the spare is
/// renamed in (and made again next time). A spare that cannot be opened (its
/// folder missing) or is not a plain file of ours (a link, a second name) is
/// left alone: [`write_replacing`]'s temporary and rename instead. The
/// caller serializes writers of one `path`.
pub fn write_keeping(path: &Path, spare: &Path, bytes: &[u8], durable: bool) -> std::io::Result<std::fs::Metadata> {
    use nix::fcntl::OFlag;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(spare);
    // A link (or a second name) planted at the spare's place is never written through.
    let mut f = match opened {
        Ok(f) if f.metadata().is_ok_and(|m| m.is_file() && m.nlink() == 1) => f,
        _ => return write_replacing(path, bytes, durable),
    };
    f.set_len(0)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    let written = f.metadata()?;
    drop(f);
    // No old version to keep, or no swap here: the spare takes the name.
    if swap(spare, path).is_err() {
        std::fs::rename(spare, path)?;
    }
    if durable {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(written)
}

/// Exchanges two names in one step.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn swap(a: &Path, b: &Path) -> nix::Result<()> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    renameat2(AT_FDCWD, a, AT_FDCWD, b, RenameFlags::RENAME_EXCHANGE)
}

/// Elsewhere there is no exchange: the caller renames.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn swap(_: &Path, _: &Path) -> nix::Result<()> {
    Err(nix::errno::Errno::ENOSYS)
}

/// [`write_atomic`] for a secret: the file is the owner's alone (0600) from
/// the moment it exists, never readable by others on its way in.
pub fn write_secret(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_file(path, bytes, true, Some(0o600)).map(drop)
}

fn write_file(path: &Path, bytes: &[u8], durable: bool, mode: Option<u32>) -> std::io::Result<std::fs::Metadata> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| std::io::Error::other("no file name"))?;
    let tmp = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut open = std::fs::OpenOptions::new();
        open.write(true).create(true).truncate(true);
        if let Some(m) = mode {
            open.mode(m);
        }
        let mut f = open.open(&tmp)?;
        if let Some(m) = mode {
            // (A temporary left by a crash keeps its old mode: set it.)
            f.set_permissions(std::fs::Permissions::from_mode(m))?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        let written = f.metadata()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        if durable {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(written)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn a_kept_write_swaps_two_files_and_makes_no_inode() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let (p, spare) = (dir.path().join("todo.json"), dir.path().join(".cryo-spare"));
        let ino = |path: &Path| std::fs::metadata(path).unwrap().ino();
        // No file yet: the spare takes the name.
        write_keeping(&p, &spare, b"one", true).unwrap();
        assert!(!spare.exists());
        let first = ino(&p);
        write_keeping(&p, &spare, b"two", true).unwrap();
        assert_eq!((std::fs::read(&p).unwrap(), std::fs::read(&spare).unwrap()), (b"two".to_vec(), b"one".to_vec()));
        let second = ino(&p);
        // From then on the two inodes take turns, and a shorter version leaves no tail.
        let written = write_keeping(&p, &spare, b"3", false).unwrap();
        assert_eq!((ino(&p), ino(&spare)), (first, second));
        assert_eq!(written.ino(), first, "the metadata returned is the new version's");
        assert_eq!(std::fs::read(&p).unwrap(), b"3");
    }

    #[test]
    fn a_kept_write_never_writes_through_a_planted_spare() {
        let dir = tempfile::tempdir().unwrap();
        let (p, spare, outside) = (dir.path().join("t"), dir.path().join("spare"), dir.path().join("outside"));
        std::fs::write(&outside, b"keep me").unwrap();
        write_keeping(&p, &spare, b"one", true).unwrap();
        // A symbolic link, then a second name of another file, at the spare's place.
        std::os::unix::fs::symlink(&outside, &spare).unwrap();
        write_keeping(&p, &spare, b"two", true).unwrap();
        std::fs::remove_file(&spare).ok();
        std::fs::hard_link(&outside, &spare).unwrap();
        write_keeping(&p, &spare, b"three", true).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep me");
        assert_eq!(std::fs::read(&p).unwrap(), b"three");
    }
}
