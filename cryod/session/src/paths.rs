//! Finding the programs cryod runs (the agent launcher, `bwrap`,
//! `systemd-run`, an agent's CLI): absolute, relative to a folder, or on a
//! `PATH`; and the program a launcher (`cryod __confine`, `__sandbox`) is
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

/// cryod's own binary, which runs each session's keeper and launcher. One
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
/// start cost 2.8 ms of CPU and 577 page faults (its relocations), from
/// this one a fraction of that (BENCHMARKS.md, issue 65).
pub const LAUNCHER: &str = "cryod-launch";

/// The binary that runs a session's launchers: [`LAUNCHER`] beside cryod's
/// own binary, or cryod's own where it is not installed (a copy of cryod
/// alone still runs every session). cryod's own binary must still be
/// there ([`own_exe`]): one replaced by an upgrade is said as it is.
pub(crate) fn launcher() -> crate::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let own = own_exe()?;
    let beside = own.with_file_name(LAUNCHER);
    let runs = beside.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    Ok(if runs { beside } else { own })
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
}
