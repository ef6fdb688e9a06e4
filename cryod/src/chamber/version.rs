//! A file's version: what tells, without reading it, that a file or folder
//! is still the one read (a start keeps what it read by versions,
//! [`super::rest`]; the schedule's memo does too).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::stat::FileStat;

/// A file's version: its device, inode, size, mtime and ctime (to the
/// nanosecond).
pub fn of(m: &FileStat) -> [i64; 7] {
    [m.st_dev as i64, m.st_ino as i64, m.st_size, m.st_mtime, m.st_mtime_nsec, m.st_ctime, m.st_ctime_nsec]
}

/// How recently a file must not have changed for its version to stand for
/// its content: timestamps are coarse, and two writes of one size in one
/// tick look alike (git keeps no such "racy" file by its stat either).
pub const SETTLING: Duration = Duration::from_secs(2);

/// The time before which a file's version stands for its content, for a
/// look taken at `now`: a file changed since is read, never kept by its
/// version.
pub fn settled(now: chrono::DateTime<chrono::Utc>) -> SystemTime {
    SystemTime::from(now) - SETTLING
}

/// Whether the file's content or status changed at `settled` or later.
pub fn unsettled(m: &FileStat, settled: SystemTime) -> bool {
    let at = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns.clamp(0, 999_999_999) as u32);
    at(m.st_ctime, m.st_ctime_nsec).max(at(m.st_mtime, m.st_mtime_nsec)) >= settled
}
