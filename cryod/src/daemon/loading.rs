//! The start's second half: the chambers are booted in the background, a
//! batch at a time, while the socket already serves. A chamber a caller
//! names before its turn is booted at once (its status does not wait for
//! ten thousand others), and whatever needs every chamber (the list, the
//! schedule) waits for the last.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use super::{BOOT_BATCH, Daemon, Entry};
use crate::error::Result;
use crate::store::{ChamberRecord, OpenSession};
use crate::supervisor;

/// The chambers not booted yet, and what their recovery needs.
pub(super) struct Loading {
    /// By id, booted lowest first; a caller may take one out of turn. A
    /// record stays here until its chamber joins the registry, so a lookup
    /// finds it while it boots.
    pending: Mutex<BTreeMap<i64, ChamberRecord>>,
    /// The pending chambers the loader is booting (taken after `pending`).
    booting: Mutex<std::collections::HashSet<i64>>,
    /// The sessions a stopped cryod left open, by chamber.
    open: Mutex<HashMap<i64, Vec<OpenSession>>>,
    /// What still ran of them (by wake id), already ended.
    processes: Arc<HashMap<String, Vec<(i32, i32)>>>,
    /// Chambers not booted yet (pending, or in the loader's batch).
    left: AtomicUsize,
    /// A chamber joined the registry.
    booted: Notify,
    /// How far the loader is.
    stage: watch::Sender<Stage>,
}

/// How far the loader is, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Booting,
    /// Every chamber booted, or a shutdown stopped the loader: lists and
    /// the schedule go on.
    Booted,
    /// What the boots read is written for the next start (or there was
    /// nothing to write): a shutdown goes on.
    Saved,
}

impl Loading {
    /// Nothing to boot (a fleet node claims its chambers instead).
    pub(super) fn none() -> Loading {
        Loading::of(Vec::new(), HashMap::new(), Default::default())
    }

    pub(super) fn of(
        records: Vec<ChamberRecord>,
        open: HashMap<i64, Vec<OpenSession>>,
        processes: Arc<HashMap<String, Vec<(i32, i32)>>>,
    ) -> Loading {
        let stage = if records.is_empty() { Stage::Booted } else { Stage::Booting };
        Loading {
            left: AtomicUsize::new(records.len()),
            pending: Mutex::new(records.into_iter().map(|r| (r.id, r)).collect()),
            booting: Mutex::default(),
            open: Mutex::new(open),
            processes,
            booted: Notify::new(),
            stage: watch::Sender::new(stage),
        }
    }

    /// The records not booted yet, by id, read in place: a lookup copies
    /// only its match. Taken after the registry's locks, never before.
    pub(super) fn pending(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, ChamberRecord>> {
        self.pending.lock().expect("pending lock")
    }

    fn recovery(&self, id: i64) -> supervisor::Recovery {
        supervisor::Recovery {
            open: self.open.lock().expect("open lock").remove(&id).unwrap_or_default(),
            processes: self.processes.clone(),
            rows: None,
            // A failed read of the open sessions fails the start.
            open_unknown: false,
        }
    }
}

impl Daemon {
    /// Boots every pending chamber, [`BOOT_BATCH`] at a time (each boot
    /// waits on a few store queries, and a batch's share the store
    /// thread's wake-ups); stops early on shutdown. The batches overlap:
    /// the next one's rows are read, and its boots begun, while the last
    /// one's finish, so no worker waits for a batch's slowest boot; each
    /// chamber joins the registry as its boot ends.
    pub(super) async fn boot_all(self) {
        let began = std::time::Instant::now();
        let loading = &self.0.loading;
        let shared = &self.0.shared;
        let ahead = {
            let pending = loading.pending();
            ReadAhead::new(
                pending.values().map(|r| r.path.as_str()),
                crate::chamber::version::settled(shared.clock.now()),
            )
        }
        .map(ReadAhead::start);
        let mut booting = tokio::task::JoinSet::new();
        let mut begun = 0;
        while !shared.shutdown.is_cancelled() {
            let records: Vec<ChamberRecord> = {
                let pending = loading.pending();
                let mut booting = loading.booting.lock().expect("booting lock");
                let next: Vec<ChamberRecord> =
                    pending.values().filter(|r| !booting.contains(&r.id)).take(BOOT_BATCH).cloned().collect();
                booting.extend(next.iter().map(|r| r.id));
                next
            };
            if records.is_empty() {
                break;
            }
            begun += records.len();
            if let Some(ahead) = &ahead {
                ahead.begun(begun);
            }
            // The batch's ledger rows, in one job on SQLite's thread (if
            // the read fails whole, each start reads its own).
            let mut rows = shared.store.boot_rows(records.iter().map(|r| r.id).collect()).await.unwrap_or_default();
            for record in records {
                let recovery = supervisor::Recovery { rows: rows.remove(&record.id), ..loading.recovery(record.id) };
                let (shared, daemon) = (shared.clone(), self.clone());
                booting.spawn(async move {
                    let spawned = supervisor::spawn(shared, record.clone(), recovery).await;
                    daemon.joined(record, spawned);
                });
            }
            // At most two batches at once: one booting, the next begun.
            while booting.len() > BOOT_BATCH {
                self.boot_ended(booting.join_next().await);
            }
        }
        while let Some(ended) = booting.join_next().await {
            self.boot_ended(Some(ended));
        }
        drop(ahead);
        let count = self.chambers().len();
        tracing::info!(chambers = count, in_ms = began.elapsed().as_millis() as u64, "registry loaded");
        for (warning, more) in shared.start_lines.end() {
            tracing::warn!(
                %warning,
                more,
                "cryo.toml: the same warning, for more chambers (`cryoctl chamber status NAME` shows each one's)"
            );
        }
        // Every chamber answers now; what the boots read is kept for the
        // next start after that (a list does not wait for the write), and
        // before the trim: the entries freed after it stayed resident (8 MB
        // at 10,000 chambers).
        loading.stage.send_replace(Stage::Booted);
        loading.booted.notify_waiters();
        let kept = {
            let shared = shared.clone();
            tokio::task::spawn_blocking(move || shared.kept.save()).await.ok().flatten()
        };
        if let Some(n) = kept {
            let (read, taken) = (n.lists_read, n.lists_taken);
            tracing::info!(read, taken, "TODO lists at start: read, or their next wake taken from the last start");
            let (read, taken) = (n.mail_read, n.mail_taken);
            tracing::info!(read, taken, "mailboxes at start: listed, or taken from the last start");
            let (read, taken) = (n.logs_read, n.logs_taken);
            tracing::info!(read, taken, "logs at start: the last session's number read, or taken from the last start");
        }
        loading.stage.send_replace(Stage::Saved);
        crate::base::memory::give_back_freed_memory();
    }

    /// A boot of the loader's ended: one that failed is counted out (one
    /// that did not has joined the registry).
    fn boot_ended(&self, ended: Option<Result<(), tokio::task::JoinError>>) {
        if let Some(Err(e)) = ended {
            self.0.loading.left.fetch_sub(1, Ordering::Relaxed);
            tracing::error!(error = %e, "a chamber's boot failed")
        }
    }

    /// A pending chamber, booted, joins the registry.
    fn joined(&self, record: ChamberRecord, spawned: supervisor::Spawned) {
        let id = record.id;
        self.chambers_mut().insert(id, Entry::new(record, spawned.handle));
        self.fell_at_boot(id, spawned.fell);
        // Found in the registry now, no longer as pending.
        self.0.loading.pending().remove(&id);
        self.0.loading.booting.lock().expect("booting lock").remove(&id);
        self.0.loading.left.fetch_sub(1, Ordering::Relaxed);
        self.0.loading.booted.notify_waiters();
    }

    /// How many chambers are not booted yet.
    pub fn loading(&self) -> usize {
        if self.loaded() { 0 } else { self.0.loading.left.load(Ordering::Relaxed) }
    }

    /// Whether every chamber is booted (or a shutdown stopped the loader).
    pub fn loaded(&self) -> bool {
        *self.0.loading.stage.borrow() >= Stage::Booted
    }

    /// Waits until what the start's boots read is written for the next
    /// start (after every chamber is booted).
    pub(super) async fn rest_saved(&self) {
        self.reached(Stage::Saved).await
    }

    /// Waits until every chamber is booted.
    pub async fn all_loaded(&self) {
        self.reached(Stage::Booted).await
    }

    async fn reached(&self, stage: Stage) {
        let mut now = self.0.loading.stage.subscribe();
        let _ = now.wait_for(|s| *s >= stage).await;
    }

    /// Makes sure chamber `id` is booted, if it is one: out of turn if it
    /// still waits for the loader, else once the loader's batch has it.
    pub(super) async fn ready(&self, id: i64) {
        let loading = &self.0.loading;
        loop {
            let booted = loading.booted.notified();
            tokio::pin!(booted);
            booted.as_mut().enable();
            if self.loaded() || self.chambers().contains_key(&id) {
                return;
            }
            let taken = {
                let mut pending = loading.pending();
                let booting = loading.booting.lock().expect("booting lock");
                if booting.contains(&id) { None } else { pending.remove(&id) }
            };
            if let Some(record) = taken {
                let recovery = loading.recovery(id);
                let spawned = supervisor::spawn(self.0.shared.clone(), record.clone(), recovery).await;
                return self.joined(record, spawned);
            }
            booted.await;
        }
    }

    /// The handle of chamber `id`, booted first if it was not yet.
    pub(super) async fn handle_of(&self, id: i64) -> Result<supervisor::Handle> {
        self.ready(id).await;
        self.handle_now(id)
    }

    /// One chamber, by name or by a path inside it, booted first if it was
    /// not yet (see [`Daemon::resolve_now`]).
    pub async fn resolve(&self, r: &super::ChamberRef) -> Result<super::ChamberView> {
        if !self.loaded() {
            let id = self.resolve_now(r)?.record.id;
            self.ready(id).await;
        }
        self.resolve_now(r)
    }

    /// Every chamber (of every node of a fleet), by name, once all are
    /// booted.
    pub async fn list(&self) -> Vec<super::ChamberView> {
        self.all_loaded().await;
        self.list_now()
    }

    /// The chambers a list shows (archived ones only when asked for), once
    /// all are booted.
    pub async fn listed(&self, archived: bool) -> Vec<super::ChamberView> {
        let mut all = self.list().await;
        all.retain(|v| archived || !v.snap.view.archived);
        all
    }
}

/// Readers that look at the chambers' files ahead of the boots, on a start
/// from a cold cache. The boots run on the runtime's workers, one chamber
/// after another on each, and from a cold cache each waits on the disk for
/// every folder and file it opens. Several readers ahead bring those into
/// the kernel's caches at once: on the virtual disk here, one thread
/// opening each chamber's `cryo.toml` and looking at its folders took
/// 8.3 s for 10,000 chambers, two 5.1 s and eight 3.7 s. Each reader stops
/// once the chambers it reads are already cached, so a warm start pays a
/// few hundred chambers' looks ([`READERS`] × [`CACHED_IN_A_ROW`]), no
/// more. A reader on a stalled disk waits as a boot would, and is let go.
struct ReadAhead {
    /// The chamber folders, in the loader's order, in one string (10,000
    /// paths, given back whole when the readers end).
    paths: String,
    /// Where each path ends in `paths`.
    ends: Vec<usize>,
    /// The next chamber a reader takes; the loader moves it past what it
    /// has begun to boot. A chamber a caller boots out of turn may still be
    /// read: a look more, nothing else.
    next: AtomicUsize,
    stop: AtomicBool,
    /// The time before which a file's version stands (as a boot's).
    settled: std::time::SystemTime,
}

/// Readers ahead of the boots. A cold start of 10,000 chambers here took
/// 2.9-3.6 s with 6 and 2.7-3.0 s with 12 (the virtual disk's queue).
const READERS: usize = 12;
/// With fewer chambers than this to boot, no reader starts.
const READ_AHEAD_FROM: usize = 4 * BOOT_BATCH;
/// A chamber whose `cryo.toml` was read this fast was cached already; after
/// this many in a row, a reader takes the rest to be too, and ends. (The
/// whole look is no measure: on two cores busy with the boots a thread is
/// often put off midway, which could keep a reader going through a warm
/// start.)
const CACHED: std::time::Duration = std::time::Duration::from_micros(50);
const CACHED_IN_A_ROW: u32 = 32;

/// The readers at work; dropped (the loader done, or stopped), they end
/// after the chamber each is reading.
struct Readers(Arc<ReadAhead>);

impl Readers {
    /// See [`ReadAhead::begun`].
    fn begun(&self, n: usize) {
        self.0.begun(n);
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Relaxed);
    }
}

impl ReadAhead {
    /// The chambers in `folders`, to be booted in that order, if there are
    /// enough to read ahead of.
    fn new<'a>(folders: impl Iterator<Item = &'a str> + Clone, settled: std::time::SystemTime) -> Option<ReadAhead> {
        let count = folders.clone().count();
        if count < READ_AHEAD_FROM {
            return None;
        }
        let mut paths = String::with_capacity(folders.clone().map(str::len).sum());
        let mut ends = Vec::with_capacity(count);
        for folder in folders {
            paths.push_str(folder);
            ends.push(paths.len());
        }
        Some(ReadAhead { paths, ends, next: AtomicUsize::new(0), stop: AtomicBool::new(false), settled })
    }

    /// Starts [`READERS`] readers (fewer if threads cannot be had).
    fn start(self) -> Readers {
        let ahead = Arc::new(self);
        for _ in 0..READERS {
            let reader = ahead.clone();
            let read = move || reader.read_with(|p| crate::chamber::read_ahead(p, reader.settled));
            if let Err(error) = std::thread::Builder::new().name("cryod-readahead".into()).spawn(read) {
                tracing::debug!(%error, "no reader ahead of the boots");
                break;
            }
        }
        Readers(ahead)
    }

    /// The loader has begun to boot the first `n` chambers: readers skip
    /// them.
    fn begun(&self, n: usize) {
        self.next.fetch_max(n, Ordering::Relaxed);
    }

    /// One reader: `read` for the next chamber not yet begun (it says how
    /// long its `cryo.toml` took), until every one is, the readers are
    /// stopped, or the chambers are cached.
    fn read_with(&self, read: impl Fn(&std::path::Path) -> std::time::Duration) {
        let mut cached = 0;
        while !self.stop.load(Ordering::Relaxed) && cached < CACHED_IN_A_ROW {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(&end) = self.ends.get(i) else { return };
            let start = i.checked_sub(1).map_or(0, |p| self.ends[p]);
            let took = read(std::path::Path::new(&self.paths[start..end]));
            cached = if took < CACHED { cached + 1 } else { 0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    fn ahead(n: usize) -> Option<ReadAhead> {
        let folders: Vec<String> = (0..n).map(|i| format!("/c/{i}")).collect();
        ReadAhead::new(folders.iter().map(String::as_str), std::time::SystemTime::UNIX_EPOCH)
    }

    /// Readers ahead of a slow disk take each chamber the loader has not
    /// begun exactly once, and none it has; on a cached one each ends after
    /// [`CACHED_IN_A_ROW`] chambers; stopped, they end too.
    #[test]
    fn readers_ahead_read_each_chamber_not_begun_once_and_end_by_themselves() {
        assert!(ahead(READ_AHEAD_FROM - 1).is_none(), "too few to read ahead of");
        let counts = |n: usize, slow: bool| {
            let ahead = Arc::new(ahead(n).unwrap());
            ahead.begun(BOOT_BATCH);
            let reads: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
            let readers: Vec<_> = (0..3)
                .map(|_| {
                    let (ahead, reads) = (ahead.clone(), reads.clone());
                    std::thread::spawn(move || {
                        ahead.read_with(|p| {
                            let i: usize = p.file_name().unwrap().to_str().unwrap().parse().unwrap();
                            reads[i].fetch_add(1, Ordering::Relaxed);
                            // A chamber from a cold disk, or a cached one.
                            if slow { CACHED } else { std::time::Duration::ZERO }
                        })
                    })
                })
                .collect();
            for r in readers {
                r.join().unwrap();
            }
            reads.iter().map(|r| r.load(Ordering::Relaxed)).collect::<Vec<u32>>()
        };
        let slow = counts(READ_AHEAD_FROM * 2, true);
        assert!(slow[..BOOT_BATCH].iter().all(|c| *c == 0), "a chamber begun was read");
        assert!(slow[BOOT_BATCH..].iter().all(|c| *c == 1), "each other chamber once: {slow:?}");
        let cached = counts(READ_AHEAD_FROM * 2, false).iter().sum::<u32>();
        assert_eq!(cached, 3 * CACHED_IN_A_ROW, "each reader ends after its run of cached ones");

        let readers = ahead(READ_AHEAD_FROM).unwrap().start();
        let ahead = readers.0.clone();
        drop(readers);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while Arc::strong_count(&ahead) > 1 {
            assert!(std::time::Instant::now() < deadline, "the readers did not end");
            std::thread::yield_now();
        }
        assert!(ahead.stop.load(Ordering::Relaxed));
    }
}
