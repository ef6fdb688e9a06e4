//! Where cryod's log lines go: standard error, written by a thread of its
//! own, so that logging never panics or blocks the daemon.
//!
//! Standard error may be a pipe whose reader has gone (`cryod 2>&1 | head`,
//! a terminal closed under `cryoctl daemon run`) or stopped reading. A line
//! is handed to the writing thread through a bounded queue: when the queue
//! is full (the reader stalls) the line is dropped and counted; when a
//! write fails (the reader has gone) the thread keeps draining the queue
//! and writes nothing more. The daemon goes on either way, and SIGTERM and
//! SIGINT still stop it.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

/// Lines that may wait for the writer.
const QUEUE: usize = 4096;

/// Lines dropped because standard error did not take them in time.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Log lines dropped so far (a stalled or closed standard error).
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The writer `tracing_subscriber` makes a line with.
#[derive(Clone)]
pub struct Stderr {
    tx: SyncSender<Vec<u8>>,
}

impl Stderr {
    /// Starts the writing thread.
    pub fn start() -> Stderr {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let spawned = std::thread::Builder::new().name("cryod-log".into()).spawn(move || write_all(rx));
        if spawned.is_err() {
            // No thread: the queue fills and lines are dropped, never blocking.
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        Stderr { tx }
    }
}

fn write_all(rx: Receiver<Vec<u8>>) {
    let mut open = true;
    for line in rx {
        if open {
            let mut err = std::io::stderr().lock();
            open = err.write_all(&line).and_then(|()| err.flush()).is_ok();
        }
    }
}

/// One line being formatted.
pub struct Line {
    buf: Vec<u8>,
    tx: SyncSender<Vec<u8>>,
}

impl Write for Line {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        match self.tx.try_send(std::mem::take(&mut self.buf)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line { buf: Vec::with_capacity(256), tx: self.tx.clone() }
    }
}

/// Lines that many chambers repeat while cryod starts (the same warning in
/// ten thousand `cryo.toml`s was ten thousand lines, and 4% of the start):
/// each is said for the first chamber that has it, and the rest are counted
/// until [`Repeated::end`], which gives each line's count to be said once.
/// After that every line is said.
pub struct Repeated(Mutex<Option<HashMap<String, u64>>>);

/// The most lines [`Repeated`] counts, and the longest (any other is
/// said each time).
const REPEATED_LINES: usize = 256;
const REPEATED_BYTES: usize = 1024;

impl Default for Repeated {
    fn default() -> Repeated {
        Repeated(Mutex::new(Some(HashMap::new())))
    }
}

impl Repeated {
    /// Whether to say `line` now: not while the start goes on and it was
    /// said before (it is counted instead).
    pub fn say(&self, line: &str) -> bool {
        let mut lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(seen) = lines.as_mut() else { return true };
        if let Some(more) = seen.get_mut(line) {
            *more += 1;
            return false;
        }
        if seen.len() < REPEATED_LINES && line.len() <= REPEATED_BYTES {
            seen.insert(line.to_string(), 0);
        }
        true
    }

    /// The start is over: each line counted, with how many more times it
    /// came after it was said.
    pub fn end(&self) -> Vec<(String, u64)> {
        let seen = self.0.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default();
        let mut more: Vec<(String, u64)> = seen.into_iter().filter(|(_, n)| *n > 0).collect();
        more.sort();
        more
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_lines_instead_of_waiting() {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let s = Stderr { tx };
        let before = dropped();
        for _ in 0..3 {
            let mut l = tracing_subscriber::fmt::MakeWriter::make_writer(&s);
            l.write_all(b"a line\n").unwrap();
        }
        assert_eq!(rx.try_iter().count(), 1);
        assert!(dropped() >= before + 2);
    }

    #[test]
    fn a_line_repeated_while_starting_is_said_once_then_counted() {
        let r = Repeated::default();
        assert!(r.say("a") && r.say("b"));
        assert!(!r.say("a") && !r.say("a"));
        assert_eq!(r.end(), [("a".to_string(), 2)]);
        // After the start, every line is said.
        assert!(r.say("a") && r.say("a"));
        assert_eq!(r.end(), []);
    }
}
