//! The operator's socket: one daemon per user, a private folder, only the
//! owner's connections, and only those that carry the operator key.
//!
//! Binding takes an exclusive lock on `cryod.lock` in the state folder first
//! (so a second cryod fails and names the first one's pid), then clears a
//! socket file nobody answers on, writes a new operator key beside the
//! socket (`SOCKET.key`, 0600), binds, and sets the socket to 0600.
//!
//! The key is what tells the operator from an agent of the same uid: no
//! sandbox lets an agent read it, and every Control call must carry it
//! ([`Operator::check`]). A connection from a process of a session's tree
//! (a sandbox's namespace, a session's process group, a descendant of
//! cryod, a session's environment) is refused even with the key. Agents
//! have doors of their own (`cryo_session::Doors`).

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cryo_proto::paths::Paths;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::Stream;

/// Longest socket path the OS accepts (`sun_path` is 108 bytes on Linux, 104
/// on macOS; keep to the smaller).
const MAX_SOCKET_PATH: usize = 103;

/// A bound socket and the instance lock; dropping it releases both.
pub struct Listener {
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    key: String,
    _lock: File,
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("another cryod is running (pid {pid}): it holds {lock}; stop it first (`cryoctl daemon status`)")]
    Locked { pid: String, lock: PathBuf },
    #[error("another process answers on the socket {0}; stop it or choose another path with --socket")]
    SocketInUse(PathBuf),
    #[error(
        "the socket path {0} is too long ({1} bytes, at most {MAX_SOCKET_PATH}); set CRYO_SOCKET to a shorter path"
    )]
    PathTooLong(PathBuf, usize),
    #[error("{0} exists and is not a socket; move it away or choose another path with --socket")]
    NotASocket(PathBuf),
    #[error("{what} {path}: {error}")]
    Io { what: &'static str, path: PathBuf, error: std::io::Error },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BindError + 'a {
    move |error| BindError::Io { what, path: path.to_path_buf(), error }
}

/// Creates `dir` (and parents) with mode 0700 if missing.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

impl Listener {
    /// Takes the instance lock and binds the socket.
    pub fn bind(paths: &Paths) -> Result<Listener, BindError> {
        let len = paths.socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(BindError::PathTooLong(paths.socket.clone(), len));
        }
        // The sessions' doors live beside it, as `a/` and twelve characters.
        let door = paths.socket.parent().map(|d| d.as_os_str().len() + "/a/".len() + 12).unwrap_or(0);
        if door > MAX_SOCKET_PATH {
            return Err(BindError::PathTooLong(paths.socket.clone(), door));
        }
        private_dir(&paths.state_dir).map_err(io("cannot create", &paths.state_dir))?;
        let lock_path = paths.lock_file();
        let mut lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io("cannot open", &lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = lock.read_to_string(&mut pid);
                let pid = if pid.trim().is_empty() { "unknown".to_string() } else { pid.trim().to_string() };
                return Err(BindError::Locked { pid, lock: lock_path });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io("cannot lock", &lock_path)(e)),
        }
        lock.set_len(0).map_err(io("cannot write", &lock_path))?;
        lock.rewind().map_err(io("cannot write", &lock_path))?;
        writeln!(lock, "{}", std::process::id()).map_err(io("cannot write", &lock_path))?;
        // From here on it is this cryod: a process of the same user (an
        // unconfined agent) may not read or write its memory (which holds
        // the operator key) through `/proc/PID/mem`, nor attach to it.
        // Clients find it by its lock, and learn its PATH from `Hello`.
        let _ = nix::sys::prctl::set_dumpable(false);

        let socket = &paths.socket;
        if let Some(dir) = socket.parent() {
            // Our own folder (`.../cryo`) is made private; a folder the user
            // named with --socket is theirs to manage.
            let ours = !dir.exists() || dir.file_name().is_some_and(|n| n == "cryo");
            private_dir(dir).map_err(io("cannot create", dir))?;
            if ours {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(io("cannot set permissions of", dir))?;
            }
        }
        match std::fs::symlink_metadata(socket) {
            Ok(meta) if meta.file_type().is_socket() => {
                // We hold the lock, so no cryod of this user serves it; but a
                // daemon with another state folder might. Only a socket that
                // refuses connections is stale.
                if std::os::unix::net::UnixStream::connect(socket).is_ok() {
                    return Err(BindError::SocketInUse(socket.clone()));
                }
                tracing::info!(socket = %socket.display(), "removing a stale socket");
                std::fs::remove_file(socket).map_err(io("cannot remove stale socket", socket))?;
            }
            Ok(_) => return Err(BindError::NotASocket(socket.clone())),
            Err(_) => {}
        }
        // A new key each start: one read by a process of an earlier run
        // dies with that run.
        let key = crate::base::random::hex(32);
        let key_path = cryo_proto::operator_key_path(socket);
        crate::chamber::write_secret(&key_path, format!("{key}\n").as_bytes())
            .map_err(io("cannot write the operator key", &key_path))?;
        let listener = std::os::unix::net::UnixListener::bind(socket).map_err(io("cannot bind", socket))?;
        listener.set_nonblocking(true).map_err(io("cannot configure", socket))?;
        // A long queue (listening again sets it): a flood of connections
        // waits there rather than failing the operator's connect.
        let backlog = nix::sys::socket::Backlog::new(4096).unwrap_or(nix::sys::socket::Backlog::MAXCONN);
        nix::sys::socket::listen(&listener, backlog).map_err(|e| io("cannot listen on", socket)(e.into()))?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
            .map_err(io("cannot set permissions of", socket))?;
        Ok(Listener { listener, path: socket.clone(), key, _lock: lock })
    }

    /// The operator key this run made (its check, for the Control service).
    pub fn operator(&self) -> Operator {
        Operator { key: std::sync::Arc::from(self.key.as_str()) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepted connections from the owning user only; others are closed at
    /// once and logged. At most [`MAX_CONNECTIONS`] are open at a time: at
    /// the limit, the oldest connection that has not yet shown the operator
    /// key is closed to make room (a flood of idle or keyless clients never
    /// locks the operator out), or, if every one has shown it, the new one
    /// is closed (and logged). `session_of` says whether a peer process
    /// belongs to a session's tree (and how), which [`Operator::check`]
    /// refuses. A failed accept (out of descriptors) pauses accepting
    /// briefly instead of spinning. Must be called inside the tokio runtime.
    pub fn incoming(
        self,
        session_of: SessionOf,
    ) -> std::io::Result<(impl Stream<Item = std::io::Result<Conn>>, SocketGuard)> {
        let uid = nix::unistd::getuid().as_raw();
        let listener = UnixListener::from_std(self.listener)?;
        let guard = SocketGuard { path: self.path, _lock: self._lock };
        let open: Vec<Arc<ConnState>> = Vec::new();
        let state = (listener, open, None::<std::time::Instant>);
        let stream = futures_util::stream::unfold(state, move |(listener, mut open, mut warned)| {
            let session_of = session_of.clone();
            async move {
                loop {
                    let s = match listener.accept().await {
                        Ok((s, _)) => s,
                        Err(error) => {
                            tracing::warn!(%error, "accept failed; pausing");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let cred = match s.peer_cred() {
                        Ok(cred) if cred.uid() == uid => cred,
                        Ok(cred) => {
                            tracing::warn!(peer_uid = cred.uid(), "refused a connection from another user");
                            continue;
                        }
                        Err(error) => {
                            tracing::warn!(%error, "refused a connection without peer credentials");
                            continue;
                        }
                    };
                    open.retain(|c| Arc::strong_count(c) > 1);
                    if open.len() >= MAX_CONNECTIONS {
                        match open.iter().position(|c| !c.operator.load(Ordering::Relaxed)) {
                            Some(i) => {
                                open.remove(i).evict.cancel();
                                let now = std::time::Instant::now();
                                if warned
                                    .is_none_or(|t: std::time::Instant| now - t > std::time::Duration::from_secs(1))
                                {
                                    warned = Some(now);
                                    tracing::warn!(
                                        limit = MAX_CONNECTIONS,
                                        "connection limit reached; closing the oldest connections without the operator key"
                                    );
                                }
                            }
                            None => {
                                tracing::warn!(
                                    limit = MAX_CONNECTIONS,
                                    "connection limit reached; closed a new connection"
                                );
                                continue;
                            }
                        }
                    }
                    // Whether its process is a session's is asked at its first
                    // call, off this loop (a flood of connections that call
                    // nothing costs no reading of /proc).
                    let state = Arc::new(ConnState {
                        operator: AtomicBool::new(false),
                        evict: tokio_util::sync::CancellationToken::new(),
                        pid: cred.pid(),
                        session: std::sync::OnceLock::new(),
                        session_of: session_of.clone(),
                    });
                    open.push(state.clone());
                    let closing = Box::pin(state.evict.clone().cancelled_owned());
                    return Some((
                        Ok(Conn { stream: cryo_session::Mended::new(s), state, closing }),
                        (listener, open, warned),
                    ));
                }
            }
        });
        Ok((stream, guard))
    }
}

/// Whether a peer process (by pid) belongs to a session's tree, and how.
pub type SessionOf = Arc<dyn Fn(i32) -> Option<String> + Send + Sync>;

/// Most client connections open at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// What the server knows of one connection.
pub struct ConnState {
    /// It has shown the operator key.
    operator: AtomicBool,
    /// Cancelled to close it (to make room for another).
    evict: tokio_util::sync::CancellationToken,
    /// Its process (the peer's credentials).
    pid: Option<i32>,
    /// Why its process is a session's, if it is (asked at its first call).
    session: std::sync::OnceLock<Option<String>>,
    session_of: SessionOf,
}

impl std::fmt::Debug for ConnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnState").field("pid", &self.pid).field("session", &self.session.get()).finish()
    }
}

impl ConnState {
    /// Why its process is a session's, if it is; said in the log once a
    /// second at most (a flood of them must not flood the log).
    fn session(&self) -> Option<&str> {
        self.session
            .get_or_init(|| {
                let why = self.pid.and_then(|pid| (self.session_of)(pid));
                if let Some(why) = &why {
                    static WARNED: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
                    let mut last = WARNED.lock().unwrap_or_else(|e| e.into_inner());
                    if last.is_none_or(|t| t.elapsed() > std::time::Duration::from_secs(1)) {
                        *last = Some(std::time::Instant::now());
                        tracing::warn!(pid = self.pid, %why, "a session's process called on the operator's socket");
                    }
                }
                why
            })
            .as_deref()
    }
}

/// A connection's state, in each of its requests' extensions.
#[derive(Debug, Clone)]
pub struct Peer(Arc<ConnState>);

/// An accepted connection.
pub struct Conn {
    /// Stock gRPC clients' `:authority` mended (see `cryo_session::Mended`).
    stream: cryo_session::Mended<UnixStream>,
    state: Arc<ConnState>,
    closing: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Self::ConnectInfo {
        Peer(self.state.clone())
    }
}

impl tokio::io::AsyncRead for Conn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::future::Future;
        let this = self.get_mut();
        // Evicted: an end of file closes it.
        if this.closing.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

/// The operator's door: the key each Control call must carry.
#[derive(Clone)]
pub struct Operator {
    key: Arc<str>,
}

impl Operator {
    /// Lets a Control call through only from the operator: with the key,
    /// and from no process of a session.
    pub fn check(&self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let peer = req.extensions().get::<Peer>();
        if let Some(why) = peer.and_then(|p| p.0.session()) {
            return Err(tonic::Status::permission_denied(format!(
                "the operator's socket does not serve a cryo session's processes ({why}): inside a session, \
                 use cryo-agent"
            )));
        }
        let given = req.metadata().get(cryo_proto::OPERATOR_KEY_METADATA).map(|v| v.as_bytes()).unwrap_or_default();
        if !same(given, self.key.as_bytes()) {
            return Err(tonic::Status::permission_denied(
                "this call carries no valid operator key (metadata x-cryo-operator-key): cryoctl reads it from \
                 the file SOCKET.key beside cryod's socket, which only the user who runs cryod may read",
            ));
        }
        if let Some(p) = peer {
            p.0.operator.store(true, Ordering::Relaxed);
        }
        Ok(req)
    }
}

/// Compares two secrets in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl tokio::io::AsyncWrite for Conn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Raises the soft limit on open files to the hard limit: cryod holds a
/// watch, a log and a pipe or two per chamber, and up to
/// [`MAX_CONNECTIONS`] client connections.
pub fn raise_file_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(%error, soft, hard, "cannot raise the open-file limit");
    }
}

/// Removes the socket file when the daemon stops, then releases the lock.
pub struct SocketGuard {
    path: PathBuf,
    _lock: File,
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(cryo_proto::operator_key_path(&self.path));
    }
}
