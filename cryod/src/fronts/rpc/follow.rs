//! Server-streaming views of a chamber: its log, its conversation, its state.
//!
//! Each stream starts with what is there now, then (when following) sends
//! what cryod itself does next, fed by the broadcast of [`Notice`]s, not by
//! polling. A stream ends when the client goes away, when the chamber is
//! removed, or when cryod shuts down (so shutdown never waits on a viewer).
//!
//! [`Notice`]: crate::services::runtime::Notice

use std::path::{Path, PathBuf};
use std::pin::Pin;

use cryo_proto::v1 as pb;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::Status;

use crate::chamber::log;
use crate::chamber::mailbox::Mailbox;
use crate::daemon::{ChamberView, Daemon};
use crate::fronts::convert;
use crate::services::runtime::NoticeKind;

pub type Streamed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn stream<T: Send + 'static>(rx: mpsc::Receiver<Result<T, Status>>) -> Streamed<T> {
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

fn tz_of(v: &ChamberView) -> chrono_tz::Tz {
    v.snap.view.timezone.parse().unwrap_or(chrono_tz::UTC)
}

/// Forwards one chamber's notices until the client goes, the chamber is
/// removed or cryod stops: `each` turns a notice into an item to send (or
/// none); `lagged` is sent when this reader fell behind the broadcast.
async fn forward<T: Send + 'static>(
    stopping: &tokio_util::sync::CancellationToken,
    mut notices: tokio::sync::broadcast::Receiver<crate::services::runtime::Notice>,
    id: i64,
    tx: &mpsc::Sender<Result<T, Status>>,
    lagged: impl Fn() -> Option<T>,
    mut each: impl FnMut(NoticeKind) -> Option<T>,
) {
    loop {
        let n = tokio::select! {
            _ = stopping.cancelled() => return,
            _ = tx.closed() => return,
            n = notices.recv() => n,
        };
        let item = match n {
            Ok(n) if n.chamber != id => continue,
            Ok(n) if matches!(n.what, NoticeKind::Removed) => return,
            Ok(n) => each(n.what),
            Err(RecvError::Lagged(_)) => lagged(),
            Err(RecvError::Closed) => return,
        };
        if let Some(item) = item
            && tx.send(Ok(item)).await.is_err()
        {
            return;
        }
    }
}

/// `ChamberLog`.
pub fn log(d: &Daemon, v: ChamberView, agent: bool, follow: bool, lines: u32) -> Streamed<pb::LogLines> {
    let (tx, rx) = mpsc::channel(64);
    let root = PathBuf::from(&v.record.path);
    let rel = if agent { cryo_session::AGENT_LOG } else { log::LOG };
    let n = if lines == 0 { 50 } else { lines as usize };
    let (notices, stopping) = (d.notices(), d.stopping());
    let id = v.record.id;
    tokio::spawn(async move {
        let (first, mut offset) = log::tail(&root, rel, n).unwrap_or_default();
        if tx.send(Ok(pb::LogLines { lines: first })).await.is_err() || !follow {
            return;
        }
        if agent {
            // The agent writes its own log: follow the file.
            follow_file(&root, rel, &mut offset, &tx, &stopping).await;
            return;
        }
        let lagged =
            || Some(pb::LogLines { lines: vec!["[cryo: this view fell behind; some lines were skipped]".into()] });
        forward(&stopping, notices, id, &tx, lagged, |what| match what {
            NoticeKind::Log(line) => Some(pb::LogLines { lines: vec![line] }),
            _ => None,
        })
        .await;
    });
    stream(rx)
}

/// Sends what is appended to the chamber's file `rel` from `offset` on,
/// woken by inotify.
async fn follow_file(
    root: &Path,
    rel: &str,
    offset: &mut u64,
    tx: &mpsc::Sender<Result<pb::LogLines, Status>>,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    use notify::Watcher as _;
    let (wtx, mut wrx) = mpsc::unbounded_channel::<()>();
    let path = root.join(rel);
    let watched = path.clone();
    let mut watcher = match notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if res.is_ok_and(|e| e.paths.iter().any(|p| p == &watched)) {
            let _ = wtx.send(());
        }
    }) {
        Ok(w) => w,
        Err(e) => {
            let _ = tx.send(Err(Status::internal(format!("cannot follow the file: {e}")))).await;
            return;
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
        let _ = tx.send(Err(Status::internal(format!("cannot follow the file: {e}")))).await;
        return;
    }
    let mut partial = String::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tx.closed() => return,
            w = wrx.recv() => if w.is_none() { return },
        }
        // A chunk at a time, until what was appended is read.
        while let Ok(bytes) = read_from(root, rel, offset) {
            partial.push_str(&String::from_utf8_lossy(&bytes));
            let mut lines: Vec<String> = partial.split('\n').map(str::to_string).collect();
            partial = lines.pop().unwrap_or_default();
            // A line without end (an agent writing bytes without newlines)
            // goes out in pieces rather than growing here.
            if partial.len() > 64 * 1024 {
                lines.push(std::mem::take(&mut partial));
            }
            if !lines.is_empty() && tx.send(Ok(pb::LogLines { lines })).await.is_err() {
                return;
            }
            if (bytes.len() as u64) < FOLLOW_CHUNK {
                break;
            }
        }
    }
}

/// The most read of a followed file at one wake (the rest at the next):
/// an agent may write gigabytes at once.
const FOLLOW_CHUNK: u64 = 1024 * 1024;

fn read_from(root: &Path, rel: &str, offset: &mut u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = crate::chamber::Dir::open(root)?.open_read(Path::new(rel), None)?;
    let len = f.metadata()?.len();
    if len < *offset {
        *offset = 0; // rotated or truncated
    }
    f.seek(SeekFrom::Start(*offset))?;
    let mut buf = Vec::new();
    f.take(FOLLOW_CHUNK).read_to_end(&mut buf)?;
    *offset += buf.len() as u64;
    Ok(buf)
}

/// `ChamberMessages`.
pub fn messages(d: &Daemon, v: ChamberView, follow: bool, last: u32) -> Streamed<pb::Mail> {
    let (tx, rx) = mpsc::channel(64);
    let mailbox = Mailbox::new(Path::new(&v.record.path), tz_of(&v));
    let (notices, stopping) = (d.notices(), d.stopping());
    let id = v.record.id;
    let n = if last == 0 { 20 } else { last as usize };
    tokio::spawn(async move {
        // The last page only: its files alone are read, off the workers.
        let page = mailbox.clone();
        let Ok(last) = crate::chamber::blocking(move || page.page(None, n)).await else { return };
        // Notices may repeat (a file is created, then renamed into place).
        let mut seen: std::collections::HashSet<String> = last.iter().map(|m| m.name.clone()).collect();
        for m in &last {
            if tx.send(Ok(convert::mail(m))).await.is_err() {
                return;
            }
        }
        if !follow {
            return;
        }
        forward(
            &stopping,
            notices,
            id,
            &tx,
            || None,
            |what| match what {
                NoticeKind::Message { folder, name } if seen.insert(name.clone()) => {
                    tokio::task::block_in_place(|| mailbox.read_named(folder, &name)).map(|m| convert::mail(&m))
                }
                _ => None,
            },
        )
        .await;
    });
    stream(rx)
}

/// `ChamberWatch`.
pub fn watch(d: &Daemon, v: ChamberView) -> Streamed<pb::Chamber> {
    let (tx, rx) = mpsc::channel(16);
    let daemon = d.clone();
    let (notices, stopping) = (d.notices(), d.stopping());
    let id = v.record.id;
    let name = v.record.name.clone();
    tokio::spawn(async move {
        if tx.send(Ok(convert::chamber(&v))).await.is_err() {
            return;
        }
        forward(
            &stopping,
            notices,
            id,
            &tx,
            || None,
            |what| match what {
                NoticeKind::Status => daemon
                    .resolve_now(&crate::daemon::ChamberRef::Name(name.clone()))
                    .ok()
                    .map(|v| convert::chamber(&v)),
                _ => None,
            },
        )
        .await;
    });
    stream(rx)
}
