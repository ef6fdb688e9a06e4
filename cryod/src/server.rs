//! The socket: one daemon per user, a private folder, and only the owner's
//! connections.
//!
//! Binding takes an exclusive lock on `cryod.lock` in the state folder first
//! (so a second cryod fails and names the first one's pid), then clears a
//! socket file nobody answers on, binds, and sets the socket to 0600.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};
use tokio_stream::Stream;

use crate::paths::Paths;

/// Longest socket path the OS accepts (`sun_path` is 108 bytes on Linux, 104
/// on macOS; keep to the smaller).
const MAX_SOCKET_PATH: usize = 103;

/// A bound socket and the instance lock; dropping it releases both.
pub struct Listener {
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
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
        let listener = std::os::unix::net::UnixListener::bind(socket).map_err(io("cannot bind", socket))?;
        listener.set_nonblocking(true).map_err(io("cannot configure", socket))?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
            .map_err(io("cannot set permissions of", socket))?;
        Ok(Listener { listener, path: socket.clone(), _lock: lock })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepted connections from the owning user only; others are closed at
    /// once and logged. At most [`MAX_CONNECTIONS`] are open at a time: one
    /// more is closed at once (and logged), so a flood of idle clients cannot
    /// use up cryod's file descriptors. A failed accept (out of descriptors)
    /// pauses accepting briefly instead of spinning. Must be called inside the
    /// tokio runtime.
    pub fn incoming(self) -> std::io::Result<(impl Stream<Item = std::io::Result<Conn>>, SocketGuard)> {
        let uid = nix::unistd::getuid().as_raw();
        let listener = UnixListener::from_std(self.listener)?;
        let guard = SocketGuard { path: self.path, _lock: self._lock };
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let stream = futures_util::stream::unfold((listener, slots), move |(listener, slots)| async move {
            loop {
                let s = match listener.accept().await {
                    Ok((s, _)) => s,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed; pausing");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                match s.peer_cred() {
                    Ok(cred) if cred.uid() == uid => {}
                    Ok(cred) => {
                        tracing::warn!(peer_uid = cred.uid(), "refused a connection from another user");
                        continue;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "refused a connection without peer credentials");
                        continue;
                    }
                }
                match slots.clone().try_acquire_owned() {
                    Ok(permit) => return Some((Ok(Conn { stream: s, _permit: permit }), (listener, slots))),
                    Err(_) => {
                        tracing::warn!(limit = MAX_CONNECTIONS, "connection limit reached; closed a new connection")
                    }
                }
            }
        });
        Ok((stream, guard))
    }
}

/// Most client connections open at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// An accepted connection, holding its place under [`MAX_CONNECTIONS`].
pub struct Conn {
    stream: UnixStream,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = <UnixStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl tokio::io::AsyncRead for Conn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
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
    }
}
