//! Where cryod keeps things: the socket, the lock, the database, the config.
//!
//! Every path is derived from the environment once, at start, so tests can
//! point a whole daemon at a temporary HOME by setting `HOME` and `XDG_*`.

use std::path::{Path, PathBuf};

/// The daemon's files.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The gRPC socket (`$CRYO_SOCKET`, `$XDG_RUNTIME_DIR/cryo/cryod.sock`, ...).
    pub socket: PathBuf,
    /// `$XDG_STATE_HOME/cryo`: the database and the instance lock.
    pub state_dir: PathBuf,
    /// `$XDG_CONFIG_HOME/cryo/cryod.toml` (read if present).
    pub config_file: PathBuf,
}

impl Paths {
    /// Paths from the process environment; `socket` overrides the socket path.
    pub fn from_env(socket: Option<PathBuf>) -> Paths {
        Self::from_env_with(socket, |k| std::env::var_os(k))
    }

    pub fn from_env_with(socket: Option<PathBuf>, env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Paths {
        let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let home = var("HOME").unwrap_or_else(|| PathBuf::from("/tmp"));
        let state = var("XDG_STATE_HOME").unwrap_or_else(|| home.join(".local/state"));
        let config = var("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
        Paths {
            socket: socket.unwrap_or_else(|| cryo_proto::socket_path_from(&env)),
            state_dir: state.join("cryo"),
            config_file: config.join("cryo").join("cryod.toml"),
        }
    }

    pub fn database(&self) -> PathBuf {
        self.state_dir.join("cryod.db")
    }

    pub fn lock_file(&self) -> PathBuf {
        self.state_dir.join("cryod.lock")
    }
}

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
