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
}
