//! Where a cryod keeps its files: the socket, the instance lock, the
//! database, the config. The daemon takes them from here, and clients look
//! here for the socket and the lock of the daemon they talk to (`cryoctl`
//! waits for a starting cryod while its lock is held).
//!
//! Every path is derived from the environment once, at start, so tests can
//! point a whole daemon at a temporary HOME by setting `HOME` and `XDG_*`.

use std::path::PathBuf;

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

    /// [`Paths::from_env`] over an explicit environment (another process's,
    /// or a test's).
    pub fn from_env_with(socket: Option<PathBuf>, env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Paths {
        let var = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let home = var("HOME").unwrap_or_else(|| PathBuf::from("/tmp"));
        let state = var("XDG_STATE_HOME").unwrap_or_else(|| home.join(".local/state"));
        let config = var("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
        Paths {
            socket: socket.unwrap_or_else(|| crate::socket_path_from(&env)),
            state_dir: state.join("cryo"),
            config_file: config.join("cryo").join("cryod.toml"),
        }
    }

    /// The SQLite database of the daemon's registry.
    pub fn database(&self) -> PathBuf {
        self.state_dir.join("cryod.db")
    }

    /// The instance lock: held by the one cryod of these paths while it runs.
    pub fn lock_file(&self) -> PathBuf {
        self.state_dir.join("cryod.lock")
    }
}
