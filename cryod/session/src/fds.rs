//! Descriptors a child must not inherit.
//!
//! Everything cryod opens itself is close-on-exec (std and tokio see to it),
//! but a descriptor received over D-Bus is not: zbus receives without
//! `MSG_CMSG_CLOEXEC`, so until it is marked, an agent spawned meanwhile
//! inherits it. A sleep inhibitor inherited that way keeps the machine awake
//! for as long as the agent runs. Spawns hold the gate shared (uncontended,
//! nearly free); receiving a descriptor holds it alone until the descriptor
//! is marked.

use std::os::fd::AsFd;
use std::time::Duration;

use tokio::sync::{RwLock, RwLockReadGuard};

static GATE: RwLock<()> = RwLock::const_new(());

/// Longest a call that receives a descriptor may hold spawns back.
const RECEIVING: Duration = Duration::from_secs(5);

/// Held around `spawn()` on a thread that may block (inside
/// `block_in_place`): no descriptor arrives unmarked meanwhile.
pub(crate) fn spawning() -> RwLockReadGuard<'static, ()> {
    GATE.blocking_read()
}

/// Runs `spawn` once no descriptor is arriving.
pub(crate) async fn spawn_when_clear<T>(spawn: impl FnOnce() -> T) -> T {
    let _held = GATE.read().await;
    spawn()
}

/// Runs `call`, which answers with a descriptor, with spawns held back until
/// that descriptor is close-on-exec. `None` when the call took longer than a
/// few seconds (its answer, if it ever comes, is dropped and its descriptor
/// closed).
pub async fn receive<D: AsFd, E>(call: impl Future<Output = Result<D, E>>) -> Option<Result<D, E>> {
    let _held = GATE.write().await;
    let answer = tokio::time::timeout(RECEIVING, call).await.ok()?;
    if let Ok(fd) = &answer {
        use nix::fcntl::{FcntlArg, FdFlag, fcntl};
        if let Err(error) = fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)) {
            tracing::warn!(%error, "could not mark a received descriptor close-on-exec");
        }
    }
    Some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inheritable(fd: &std::os::fd::OwnedFd) -> bool {
        let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        flags & nix::fcntl::FdFlag::FD_CLOEXEC.bits() == 0
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_spawn_waits_until_a_received_descriptor_is_close_on_exec() {
        let (read, _write) = nix::unistd::pipe().unwrap();
        assert!(inheritable(&read), "pipe() leaves it inheritable, as zbus does");
        let (give, arrives) = tokio::sync::oneshot::channel();
        let receiving = tokio::spawn(receive(async move { Ok::<_, ()>(arrives.await.unwrap()) }));
        // Once the receiver holds the gate, a spawn cannot pass it.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while GATE.try_read().is_ok() {
            assert!(std::time::Instant::now() < deadline, "the receiver never took the gate");
            tokio::task::yield_now().await;
        }
        let spawned = tokio::spawn(spawn_when_clear(|| "spawned"));
        tokio::task::yield_now().await;
        assert!(!spawned.is_finished(), "a spawn passed while a descriptor was arriving");
        give.send(read).unwrap();
        let read = receiving.await.unwrap().unwrap().unwrap();
        assert!(!inheritable(&read), "marked before the gate opened");
        assert_eq!(spawned.await.unwrap(), "spawned");
    }
}
