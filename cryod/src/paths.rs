//! Finding the programs cryod runs (the agent launcher, `bwrap`,
//! `systemd-run`, an agent's CLI): absolute, relative to a folder, or on a
//! `PATH`. Where cryod keeps its own files is `cryo_proto::paths`, shared
//! with the clients.

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
pub fn on_path(program: &str) -> Option<PathBuf> {
    find_program(program, Path::new("/"), &std::env::var("PATH").unwrap_or_default())
}
