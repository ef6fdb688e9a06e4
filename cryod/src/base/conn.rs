//! Connections to cryod's TCP listeners (the hub, the provider gateway),
//! bounded: anything on the machine may connect (an agent too, whose
//! network is open), so a flood must not take the file descriptors cryod
//! needs for its chambers.
//!
//! - At most [`MAX_CONNECTIONS`] at once; past it, one is closed to make
//!   room: one never answered (a request never finished: a flood's) before
//!   one answered, and of those the one quiet the longest. The new one waits
//!   for its slot.
//! - A connection with nothing read or written for [`IDLE`] is closed (a
//!   client that connects and says nothing, or keeps a connection open
//!   between requests). Event streams say something every [`KEEP_ALIVE`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Connections served at once, per listener.
pub const MAX_CONNECTIONS: usize = 256;

/// A connection idle this long (nothing read, nothing written) is closed.
pub const IDLE: Duration = Duration::from_secs(90);

/// How often an event stream with nothing to say says so.
pub const KEEP_ALIVE: Duration = Duration::from_secs(30);

/// A listener that holds a slot for each connection it hands out.
pub struct Capped {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    idle: Duration,
    open: Mutex<Vec<Weak<Seen>>>,
    since: Instant,
}

/// What the listener knows of a connection it handed out: when it last
/// moved (ms since the listener began), and whether it must close.
struct Seen {
    last: AtomicU64,
    answered: AtomicBool,
    evicted: AtomicBool,
    waker: AtomicWaker,
}

impl Capped {
    pub fn new(inner: TcpListener) -> Capped {
        Capped::with(inner, MAX_CONNECTIONS, IDLE)
    }

    pub fn with(inner: TcpListener, max: usize, idle: Duration) -> Capped {
        let open = Mutex::new(Vec::new());
        Capped { inner, slots: Arc::new(Semaphore::new(max)), idle, open, since: Instant::now() }
    }

    /// Closes the connection quiet the longest, to make room.
    fn evict_quietest(&self) {
        let mut open = self.open.lock().expect("connections lock");
        open.retain(|w| w.strong_count() > 0);
        let quietest = open
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|s| !s.evicted.load(Ordering::Relaxed))
            .min_by_key(|s| (s.answered.load(Ordering::Relaxed), s.last.load(Ordering::Relaxed)));
        if let Some(s) = quietest {
            s.evicted.store(true, Ordering::Relaxed);
            s.waker.wake();
        }
    }
}

impl axum::serve::Listener for Capped {
    type Io = Held;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Held, SocketAddr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        // Small writes (an event of a stream) go at once: with Nagle's
        // algorithm each waits for the last one's delayed ACK (40 ms).
        let _ = io.set_nodelay(true);
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                self.evict_quietest();
                self.slots.clone().acquire_owned().await.expect("the semaphore is never closed")
            }
        };
        let seen = Arc::new(Seen {
            last: AtomicU64::new(self.since.elapsed().as_millis() as u64),
            answered: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        self.open.lock().expect("connections lock").push(Arc::downgrade(&seen));
        let idle = self.idle;
        let deadline = Box::pin(tokio::time::sleep(idle));
        (Held { io, _slot: slot, idle, deadline, seen, since: self.since }, addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection, its slot, and its idle deadline.
pub struct Held {
    io: TcpStream,
    _slot: OwnedSemaphorePermit,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    seen: Arc<Seen>,
    since: Instant,
}

impl Held {
    fn touched(&mut self) {
        let now = Instant::now();
        self.deadline.as_mut().reset(now + self.idle);
        self.seen.last.store((now - self.since).as_millis() as u64, Ordering::Relaxed);
    }

    /// Closed to make room: I/O fails at once.
    fn evicted<T>(&self, cx: &mut Context<'_>) -> Option<Poll<io::Result<T>>> {
        self.seen.waker.register(cx.waker());
        self.seen
            .evicted
            .load(Ordering::Relaxed)
            .then(|| Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "closed to make room"))))
    }

    /// Pending I/O: an error once the deadline has passed (the connection
    /// is closed), pending until then (the deadline wakes the task).
    fn waiting<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "idle connection closed"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Held {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(closed) = this.evicted(cx) {
            return closed;
        }
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.touched();
                Poll::Ready(r)
            }
            Poll::Pending => this.waiting(cx),
        }
    }
}

impl AsyncWrite for Held {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Some(closed) = this.evicted(cx) {
            return closed;
        }
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Ready(r) => {
                this.seen.answered.store(true, Ordering::Relaxed);
                this.touched();
                Poll::Ready(r)
            }
            Poll::Pending => this.waiting(cx),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// `frames` as an event stream's body, with a comment every
/// [`KEEP_ALIVE`] while they say nothing; it ends when they do (or the
/// client goes).
pub fn with_keep_alive<S>(frames: S) -> axum::body::Body
where
    S: tokio_stream::Stream<Item = String> + Send + 'static,
{
    use tokio_stream::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::convert::Infallible>>(16);
    tokio::spawn(async move {
        let mut frames = Box::pin(frames);
        let mut tick = tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        loop {
            let frame = tokio::select! {
                f = frames.next() => match f {
                    Some(f) => f,
                    None => return,
                },
                _ = tick.tick() => ": keep-alive\n\n".to_string(),
                _ = tx.closed() => return,
            };
            if tx.send(Ok(frame)).await.is_err() {
                return;
            }
        }
    });
    axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn world(max: usize, idle: Duration) -> (Capped, Vec<TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(addr).await.unwrap());
        }
        (Capped::with(listener, max, idle), clients)
    }

    #[tokio::test]
    async fn silence_closes_a_connection_and_talk_keeps_it() {
        let (mut capped, mut clients) = world(2, Duration::from_millis(300)).await;
        let (mut a, _) = axum::serve::Listener::accept(&mut capped).await;
        clients[0].write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        a.read_exact(&mut byte).await.unwrap();
        let e = tokio::time::timeout(Duration::from_secs(30), a.read(&mut byte)).await.unwrap().unwrap_err();
        assert_eq!(e.to_string(), "idle connection closed");
    }

    #[tokio::test]
    async fn past_the_cap_the_quietest_connection_makes_room() {
        let (mut capped, mut clients) = world(2, Duration::from_secs(600)).await;
        let (mut a, _) = axum::serve::Listener::accept(&mut capped).await;
        let (mut b, _) = axum::serve::Listener::accept(&mut capped).await;
        // a was answered, and is then the quieter: b, never answered, goes.
        a.write_all(b"answer").await.unwrap();
        clients[1].write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        b.read_exact(&mut byte).await.unwrap();
        let accepting = tokio::spawn(async move { axum::serve::Listener::accept(&mut capped).await });
        let e = tokio::time::timeout(Duration::from_secs(30), b.read(&mut byte)).await.unwrap().unwrap_err();
        assert_eq!(e.to_string(), "closed to make room");
        drop(b);
        tokio::time::timeout(Duration::from_secs(30), accepting).await.expect("the third was served").unwrap();
        // a was left alone.
        clients[0].write_all(b"y").await.unwrap();
        a.read_exact(&mut byte).await.unwrap();
        assert_eq!(&byte, b"y");
    }
}
