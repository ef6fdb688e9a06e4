//! The allocator's memory given back: cryod's heaps grow in a wave (a
//! start's boots, thousands of chambers thawed at once) and the freed
//! pages would stay resident after it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Frees counted toward a wave: after this many since the last trim, the
/// heaps are trimmed.
pub const WAVE: u64 = 1000;

/// The frees of a wave (a chamber's supervisor let go as it freezes),
/// counted so the heaps are trimmed once a wave has passed, and never
/// woken for at rest: whoever waits is woken by the free that makes a
/// wave, not by a timer.
#[derive(Default)]
pub struct Waves {
    freed: AtomicU64,
    trimmed: AtomicU64,
    wave: tokio::sync::Notify,
}

impl Waves {
    /// One more freed; the one that makes a wave wakes [`Waves::next`].
    pub fn freed(&self) {
        let n = self.freed.fetch_add(1, Ordering::Relaxed) + 1;
        if n - self.trimmed.load(Ordering::Relaxed) == WAVE {
            self.wave.notify_one();
        }
    }

    /// Waits for the next wave (one made while nobody waited counts).
    pub async fn next(&self) {
        self.wave.notified().await
    }

    /// Notes a trim: the next wave counts from here. Returns the frees
    /// since the last.
    pub fn trimmed(&self) -> u64 {
        let n = self.freed.load(Ordering::Relaxed);
        n - self.trimmed.swap(n, Ordering::Relaxed)
    }
}

/// Returns to the system the free pages inside the allocator's heaps:
/// glibc gives them back only when asked. The start's boots, and the
/// chambers that run at once and then freeze, allocate on every worker,
/// each thread in an arena of its own, and what one frees another cannot
/// reuse: after a start of 10,000 chambers 24 MB stayed resident and unused
/// (anonymous 82 MB without it, 106 MB with, measured on one world).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn give_back_freed_memory() {
    // SAFETY: `malloc_trim` takes no pointer and only releases free pages
    // under the allocator's own locks; any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn give_back_freed_memory() {}

/// The size from which glibc maps each allocation apart, returned to the
/// system as it is freed: its default, held there.
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Holds glibc's threshold for mapping a large allocation apart at its
/// default. glibc raises it to the size of each mapped block freed (up to
/// 32 MB): after a start had read and freed the kept entries of 10,000
/// chambers (a few MB), every allocation below that size came from the
/// heaps, where what the first requests left scattered stayed resident
/// (after a trim, 112 MB anonymous against 94.6 MB held; the start's CPU the
/// same). An operator's `MALLOC_MMAP_THRESHOLD_` is left to decide.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn hold_mmap_threshold() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return;
    }
    // SAFETY: `mallopt` takes no pointer; it sets one of the allocator's
    // parameters under its own lock, and is called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn hold_mmap_threshold() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wave is told once, when it is made, and counts again after a trim.
    #[tokio::test]
    async fn a_wave_is_told_once_and_counts_from_the_last_trim() {
        let waves = Waves::default();
        let next = || async { tokio::time::timeout(std::time::Duration::from_millis(50), waves.next()).await.is_ok() };
        for _ in 0..WAVE - 1 {
            waves.freed();
        }
        assert!(!next().await, "not a wave yet");
        waves.freed();
        assert!(next().await, "a wave, told though nobody waited");
        waves.freed();
        assert!(!next().await, "told once");
        assert_eq!(waves.trimmed(), WAVE + 1);
        for _ in 0..WAVE - 1 {
            waves.freed();
        }
        assert!(!next().await, "counted from the trim");
        waves.freed();
        assert!(next().await);
    }
}
