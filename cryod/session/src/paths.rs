//! Finding the programs cryod runs (the agent launcher, `bwrap`,
//! `systemd-run`, an agent's CLI): absolute, relative to a folder, or on a
//! `PATH`; and the program a launcher (`cryod-launch __confine`, `__sandbox`) is
//! told to run. Where cryod keeps its own files is `cryo_proto::paths`,
//! shared with the clients.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Whether `program` can be found (absolute, relative to `cwd`, or on `path`).
pub fn find_program(program: &str, cwd: &Path, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |p: &Path| p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false);
    if program.contains('/') {
        let p = cwd.join(program);
        return executable(&p).then_some(p);
    }
    path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(program)).find(|p| executable(p))
}

/// `program` on cryod's own `PATH`.
pub(crate) fn on_path(program: &str) -> Option<PathBuf> {
    find_program(program, Path::new("/"), &std::env::var("PATH").unwrap_or_default())
}

/// cryod's own binary, which runs the launchers that [`LAUNCHER`] does not
/// (`__keep`, `__forward`, `__acp`), and those too where it is not there. One
/// replaced or removed since cryod started (an upgrade in place: Linux then
/// names it `PATH (deleted)`) cannot be run again: that is said as what it
/// is, with what to do, rather than as the agent's program not being found.
pub(crate) fn own_exe() -> crate::Result<PathBuf> {
    let exe =
        std::env::current_exe().map_err(|e| crate::Error::Spawn(format!("cannot find cryod's own binary: {e}")))?;
    if exe.is_file() {
        return Ok(exe);
    }
    let installed = exe.to_string_lossy().trim_end_matches(" (deleted)").to_string();
    Err(crate::Error::Spawn(format!(
        "cryod's own binary ({installed}) was replaced or removed since cryod started, so no session can start: \
         restart cryod to run the installed one (`cryoctl daemon stop`, then start it again)"
    )))
}

/// The small binary beside cryod's own that runs a session's launchers
/// (`__sandbox`, `__confine`: [`crate::intercept_launchers`]). Each
/// session starts two or three of them; from cryod's 40 MB binary each
/// start cost 2.6 ms of CPU and 582 page faults (its relocations), from
/// this one 1.0 ms and 93 (BENCHMARKS.md, issue 65).
pub const LAUNCHER: &str = "cryod-launch";

/// This build of the launchers, in every binary that has them: cryod's
/// plan names it, and a launcher of another build refuses the plan
/// (`sandbox::Plan::from_env`). One literal, so cryod can also
/// find it in a launcher's file before it runs one.
pub const BUILD: &str = concat!("cryo-session-build:", env!("CRYO_SESSION_BUILD"));

/// The binary that runs a session's launchers: [`LAUNCHER`] beside cryod's
/// own binary when it is one cryod may run ([`runnable`]), else cryod's
/// own (a copy of cryod alone still runs every session). cryod's own
/// binary must still be there ([`own_exe`]): one replaced by an upgrade is
/// said as it is.
pub(crate) fn launcher() -> crate::Result<PathBuf> {
    let own = own_exe()?;
    let beside = own.with_file_name(LAUNCHER);
    Ok(if runnable(&beside) { beside } else { own })
}

/// Whether the launcher at `path` is one cryod may run: cryod's user's (or
/// root's), written by no one else, and of this build. A launcher that is
/// not is said once in cryod's log, and sessions start from cryod's own
/// binary. The verdict is kept while the file stays the same (device,
/// inode, size, change time): its file is read once, not at every start.
fn runnable(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    type Seen = Option<((u64, u64, u64, i64, i64), bool)>;
    static SEEN: std::sync::Mutex<Seen> = std::sync::Mutex::new(None);
    let Ok(m) = path.metadata() else { return false };
    let id = (m.dev(), m.ino(), m.size(), m.ctime(), m.ctime_nsec());
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, verdict)) = *seen
        && at == id
    {
        return verdict;
    }
    let verdict = match vouch(path, &m) {
        Ok(()) => true,
        Err(why) => {
            tracing::warn!(launcher = %path.display(), "{why}: sessions start from cryod's own binary instead");
            false
        }
    };
    *seen = Some((id, verdict));
    verdict
}

/// Why the launcher at `path` (whose metadata is `m`) may not be run.
fn vouch(path: &Path, m: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !m.is_file() || m.permissions().mode() & 0o111 == 0 {
        return Err("it is not an executable file".into());
    }
    let me = nix::unistd::geteuid().as_raw();
    if m.uid() != me && m.uid() != 0 {
        return Err(format!("it belongs to user {}, not to cryod's ({me}) nor root", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!("users other than its owner may write it (`chmod go-w {}` mends that)", path.display()));
    }
    const MOST: u64 = 1 << 30;
    if m.len() > MOST {
        return Err(format!("it is {} bytes, larger than a launcher", m.len()));
    }
    let unreadable = |e: std::io::Error| format!("it cannot be read: {e}");
    if !holds(std::fs::File::open(path).map_err(unreadable)?, BUILD.as_bytes()).map_err(unreadable)? {
        return Err("it is from another build than this cryod (install both again: packaging/install.sh)".into());
    }
    Ok(())
}

/// Whether what `from` reads holds `needle`, read a megabyte at a time (a
/// debug build's launcher is tens of megabytes).
fn holds(mut from: impl std::io::Read, needle: &[u8]) -> std::io::Result<bool> {
    let mut buf = vec![0u8; (1 << 20) + needle.len()];
    let mut kept = 0;
    loop {
        let n = match from.read(&mut buf[kept..]) {
            Ok(0) => return Ok(false),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let filled = kept + n;
        if buf[..filled].windows(needle.len()).any(|w| w == needle) {
            return Ok(true);
        }
        // The tail that could begin the needle, kept for the next read.
        kept = filled.min(needle.len() - 1);
        buf.copy_within(filled - kept..filled, 0);
    }
}

/// A launcher's `-- PROGRAM`: the program, after the `--` that must come
/// first.
pub(crate) fn program_after_dashes(args: &mut impl Iterator<Item = OsString>) -> crate::Result<OsString> {
    if args.next().is_none_or(|a| a != "--") {
        return Err(crate::Error::Launcher("no `--` before the program".into()));
    }
    args.next().ok_or_else(|| crate::Error::Launcher("no program".into()))
}

/// A launcher's program that could not be run (`exec` or `spawn`).
pub(crate) fn cannot_run(program: &std::ffi::OsStr, e: std::io::Error) -> crate::Error {
    crate::Error::Spawn(format!("cannot run {}: {e}", Path::new(program).display()))
}

#[cfg(test)]
mod tests {
    /// The binary a test runs is there: it is given back as it is.
    #[test]
    fn own_exe_is_the_running_binary_while_it_is_there() {
        assert_eq!(super::own_exe().unwrap(), std::env::current_exe().unwrap());
    }

    /// A launcher is run only if it is of this build, cryod's user's or
    /// root's, and written by no one else.
    #[test]
    fn a_launcher_is_vouched_for_by_its_build_owner_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(super::LAUNCHER);
        let check = |bytes: &[u8], mode: u32| {
            std::fs::write(&file, bytes).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            super::vouch(&file, &file.metadata().unwrap())
        };
        let this = [b"\x7fELF...".as_slice(), super::BUILD.as_bytes(), b"..."].concat();
        assert_eq!(check(&this, 0o755), Ok(()));
        let other = super::BUILD.replace("build:", "build:0");
        let why = check(other.as_bytes(), 0o755).unwrap_err();
        assert!(why.contains("another build"), "{why}");
        assert!(check(&this, 0o775).unwrap_err().contains("other"), "group-writable");
        assert!(check(&this, 0o644).unwrap_err().contains("not an executable"));
        // Another user's (root may hand it to one).
        if nix::unistd::geteuid().is_root() {
            check(&this, 0o755).unwrap();
            let nobody = nix::unistd::Uid::from_raw(65534);
            nix::unistd::chown(&file, Some(nobody), None).unwrap();
            let why = super::vouch(&file, &file.metadata().unwrap()).unwrap_err();
            assert!(why.contains("belongs to user 65534"), "{why}");
        }
        // Found across the reads' seams.
        let needle = b"0123456789";
        for at in [0, (1 << 20) - 5, (1 << 20) + 3, 3 << 20] {
            let mut hay = vec![b'x'; 4 << 20];
            hay[at..at + needle.len()].copy_from_slice(needle);
            let slow = std::io::Read::chain(&hay[..at + 7], &hay[at + 7..]);
            assert!(super::holds(slow, needle).unwrap(), "at {at}");
        }
        assert!(!super::holds(&b"012345678"[..], needle).unwrap());
        // The running test binary is of this build.
        let me = std::env::current_exe().unwrap();
        assert_eq!(super::vouch(&me, &me.metadata().unwrap()), Ok(()));
    }
}
