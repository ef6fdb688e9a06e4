//! Descriptors a child must not inherit.
//!
//! Everything cryod opens itself is close-on-exec (std and tokio see to it),
//! but a descriptor received over D-Bus is not: zbus receives without
//! `MSG_CMSG_CLOEXEC`, so until it is marked, an agent spawned meanwhile
//! inherits it. A sleep inhibitor inherited that way keeps the machine awake
//! for as long as the agent runs. Spawns hold the gate shared (uncontended, a
//! few nanoseconds); receiving a descriptor holds it alone until the
//! descriptor is marked.

use std::os::fd::AsFd;
use std::sync::{RwLock, RwLockReadGuard};
use std::time::Duration;

static GATE: RwLock<()> = RwLock::new(());

/// Longest a call that receives a descriptor may hold spawns back.
const RECEIVING: Duration = Duration::from_secs(5);

/// Held around `spawn()` on a thread that may block (`block_in_place`): no
/// descriptor arrives unmarked meanwhile.
pub fn spawning() -> RwLockReadGuard<'static, ()> {
    GATE.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `spawn` once no descriptor is arriving, without blocking the
/// runtime's worker meanwhile (the answer being received needs a worker).
pub async fn spawn_when_clear<T>(spawn: impl FnOnce() -> T) -> T {
    let mut spawn = Some(spawn);
    loop {
        if let Some(done) = try_spawn(&mut spawn) {
            return done;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn try_spawn<T>(spawn: &mut Option<impl FnOnce() -> T>) -> Option<T> {
    let _held = match GATE.try_read() {
        Ok(held) => held,
        Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    spawn.take().map(|f| f())
}

/// Runs `call`, which answers with a descriptor, with spawns held back until
/// that descriptor is close-on-exec. Needs the multi-threaded runtime. `None`
/// when the call took longer than a few seconds (its answer, if it ever
/// comes, is dropped and its descriptor closed).
pub fn receive<F, D, E>(call: F) -> Option<Result<D, E>>
where
    F: std::future::Future<Output = Result<D, E>>,
    D: AsFd,
{
    tokio::task::block_in_place(|| {
        let _held = GATE.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let answer = tokio::runtime::Handle::current().block_on(tokio::time::timeout(RECEIVING, call)).ok()?;
        if let Ok(fd) = &answer {
            close_on_exec(fd);
        }
        Some(answer)
    })
}

fn close_on_exec(fd: &impl AsFd) {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    if let Err(error) = fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)) {
        tracing::warn!(%error, "could not mark a received descriptor close-on-exec");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_received_descriptor_is_close_on_exec() {
        let (read, _write) = nix::unistd::pipe().unwrap();
        let flags = |fd: &std::os::fd::OwnedFd| nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_eq!(flags(&read) & libc_cloexec(), 0, "pipe() leaves it inheritable");
        let read = receive(async { Ok::<_, ()>(read) }).unwrap().unwrap();
        assert_ne!(flags(&read) & libc_cloexec(), 0);
        // Spawns are held back only while receiving.
        drop(spawning());
    }

    fn libc_cloexec() -> i32 {
        nix::fcntl::FdFlag::FD_CLOEXEC.bits()
    }
}
