//! The advisory lock on `todo.json` (`.cryo/todo.lock`, for tools that
//! cooperate), waited for with a deadline: a cooperating tool holds it for
//! a moment; an agent that keeps it, or an old fleet owner frozen while
//! holding it, must not stall the chamber longer.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long a change waits for the lock before it is refused.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Threads still waiting for a `todo.lock` whose change gave up on it.
static WAITERS: AtomicUsize = AtomicUsize::new(0);

/// At most this many: past it, a held lock refuses a change at once.
const MAX_WAITERS: usize = 64;

/// Takes `lock` (an exclusive `flock`) within `wait`, or says why not in
/// one line. The wait is a blocking `flock` on a thread of its own, so it
/// wakes when the holder lets go (a poll can miss every gap a busy tool
/// leaves); if the deadline passes first, that thread lets go of the lock
/// as soon as it gets it.
pub(super) fn lock_within(lock: std::fs::File, path: &Path, wait: Duration) -> Result<std::fs::File, String> {
    let held = || {
        format!(
            "{} is held by another process (it waited {} s); todo.json was not changed",
            path.display(),
            wait.as_secs()
        )
    };
    match lock.try_lock() {
        Ok(()) => return Ok(lock),
        Err(std::fs::TryLockError::Error(e)) => return Err(format!("{}: {e}", path.display())),
        Err(std::fs::TryLockError::WouldBlock) => {}
    }
    if wait.is_zero() || WAITERS.fetch_add(1, Ordering::Relaxed) >= MAX_WAITERS {
        if !wait.is_zero() {
            WAITERS.fetch_sub(1, Ordering::Relaxed);
        }
        return Err(format!("{} is held by another process; todo.json was not changed", path.display()));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let waiter = std::thread::Builder::new().name("todo-lock".into()).spawn(move || {
        let got = lock.lock().map(|()| lock);
        WAITERS.fetch_sub(1, Ordering::Relaxed);
        // Given up on: the file (and the lock) is dropped here.
        let _ = tx.send(got);
    });
    if let Err(e) = waiter {
        WAITERS.fetch_sub(1, Ordering::Relaxed);
        return Err(format!("{}: cannot wait for it: {e}", path.display()));
    }
    match rx.recv_timeout(wait) {
        Ok(Ok(file)) => Ok(file),
        Ok(Err(e)) => Err(format!("{}: {e}", path.display())),
        Err(_) => Err(held()),
    }
}

/// How many threads wait now (for a test).
#[cfg(test)]
pub(super) fn waiting() -> usize {
    WAITERS.load(Ordering::Relaxed)
}
