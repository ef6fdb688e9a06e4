//! Changes of the system's time zone: `/etc/localtime` (or `/etc/timezone`)
//! replaced. An inotify watch on `/etc` for writes, creations and renames
//! only: the general file watcher also reports every *open*, and `/etc` is
//! opened by every program that starts, which would wake an idle daemon.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

struct Fd(Inotify);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Calls `changed` whenever the system's zone files change, until the
/// returned task is dropped or the watch fails.
pub fn follow(mut changed: impl FnMut() + Send + 'static) {
    let setup = || -> nix::Result<Inotify> {
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        ino.add_watch(
            "/etc",
            AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_DELETE,
        )?;
        Ok(ino)
    };
    let ino = match setup() {
        Ok(i) => i,
        Err(error) => {
            tracing::info!(%error, "cannot watch /etc: a change of the system's time zone is seen at restart");
            return;
        }
    };
    // As with the timerfd: the fd is owned by `Fd` for the AsyncFd's life.
    #[allow(deprecated)]
    let fd = match AsyncFd::new(Fd(ino)) {
        Ok(fd) => fd,
        Err(error) => {
            tracing::info!(%error, "cannot watch /etc: a change of the system's time zone is seen at restart");
            return;
        }
    };
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable().await else { return };
            match guard.get_inner().0.read_events() {
                Ok(events) => {
                    let zone =
                        events.iter().any(|e| e.name.as_ref().is_some_and(|n| n == "localtime" || n == "timezone"));
                    if zone {
                        changed();
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => guard.clear_ready(),
                Err(error) => {
                    tracing::warn!(%error, "the /etc watch failed");
                    return;
                }
            }
        }
    });
}
