//! A session's own door: the socket its agent reaches cryod through.
//!
//! Each session gets a socket of its own (`<socket folder>/a/<random>`,
//! mode 0600 in a 0700 folder), named in its `CRYO_SOCKET` and bound into
//! its sandbox; it exists while the session lives and serves the Agent
//! service alone, for that session alone. The operator's socket is never
//! within the agent's reach (hidden by the sandbox, and refused to any
//! process of a session's tree even if found, see `server`).
//!
//! A door accepts at most [`MAX_PER_DOOR`] connections at once: a session
//! that floods its own door slows only itself, never another chamber's
//! session nor the operator, whose sockets have slots of their own. The
//! accepted connections of every door go to one gRPC server (the daemon's
//! `run` serves them) tagged with their door's [`DoorKey`], which the Agent
//! service checks against the caller's token.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::future::Future;

use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

/// Most connections one session's door holds at once (`cryo-agent` makes
/// one per call; an MCP server keeps one).
pub(crate) const MAX_PER_DOOR: usize = 32;

/// The session a door belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorKey {
    pub chamber: i64,
    pub session: u64,
}

/// Where doors are made, and where their connections go.
pub struct Doors {
    dir: PathBuf,
    tx: tokio::sync::mpsc::UnboundedSender<DoorConn>,
}

/// The connections of every door, for the server that answers them.
pub type Incoming = tokio::sync::mpsc::UnboundedReceiver<DoorConn>;

impl Doors {
    /// Doors are made in `dir` (the folder `a` beside the operator's
    /// socket); returns them and their connections.
    pub fn new(dir: PathBuf) -> (Doors, Incoming) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Doors { dir, tx }, rx)
    }

    /// The folder doors are made in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens a door for `key`: a new socket named `name` (random, given by
    /// cryod), accepting until the [`Door`] is dropped. Must be called
    /// inside the tokio runtime.
    pub fn open(&self, key: DoorKey, name: &str) -> std::io::Result<Door> {
        use std::os::unix::fs::PermissionsExt;
        private_dir(&self.dir)?;
        let path = self.dir.join(name);
        let listener = std::os::unix::net::UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let stop = CancellationToken::new();
        let (tx, until) = (self.tx.clone(), stop.clone());
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_PER_DOOR));
        let uid = nix::unistd::getuid().as_raw();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    _ = until.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((s, _)) => s,
                        Err(error) => {
                            tracing::warn!(%error, "a session's door failed to accept; pausing");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                if !stream.peer_cred().is_ok_and(|c| c.uid() == uid) {
                    continue;
                }
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    tracing::debug!(chamber = key.chamber, session = key.session, "a session's door is full");
                    continue;
                };
                let closed = Box::pin(until.clone().cancelled_owned());
                let conn = DoorConn { stream: crate::authority::Mended::new(stream), key, closed, _permit: permit };
                if tx.send(conn).is_err() {
                    return;
                }
            }
        });
        Ok(Door { path, stop })
    }
}

/// Creates `dir` with mode 0700 if missing, and makes it 0700.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// An open door; dropping it closes it (the socket file goes, and its
/// connections end).
#[derive(Debug)]
pub struct Door {
    path: PathBuf,
    stop: CancellationToken,
}

impl Door {
    /// The socket, for the session's `CRYO_SOCKET`.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A connection made through a door.
pub struct DoorConn {
    /// Stock gRPC clients' `:authority` mended (see [`crate::authority`]).
    stream: crate::authority::Mended<UnixStream>,
    key: DoorKey,
    /// Ready when the door closes: the connection ends with it.
    closed: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl tonic::transport::server::Connected for DoorConn {
    type ConnectInfo = DoorKey;

    fn connect_info(&self) -> DoorKey {
        self.key
    }
}

impl tokio::io::AsyncRead for DoorConn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        // A closed door ends its connections (an end of file): the
        // session is over, whatever it left behind.
        if this.closed.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for DoorConn {
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
}
