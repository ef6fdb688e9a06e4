//! The SQLite store: one machine, one file (the default).
//!
//! One thread owns the connection; async code sends it closures and awaits
//! the answer, so SQLite never blocks a tokio worker. Opening the file takes
//! every chamber in it (one new fence for all): one cryod runs a state folder at
//! a time (`server` holds its lock), so the fence only guards against a
//! writer left over from before.
//!
//! The thread commits in groups: the jobs waiting when it wakes run in one
//! transaction, each in its own savepoint (one job's error undoes only its
//! own writes), and each answer is sent once that commit is done. In WAL
//! mode with `synchronous = NORMAL` a commit is atomic but reaches the disk
//! at the next checkpoint; a group holding a wake's record commits with
//! `FULL` (one fsync of the log, which makes every earlier commit durable
//! too): that row is the durable record of the wake and of its claims,
//! written before the agent starts (its `todo.json` claim follows the
//! spawn). The wakes falling due in one instant share that fsync.

mod approvals;
mod migrations;
mod registry;
mod sessions;

use std::path::Path;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension};
use tokio::sync::oneshot;

use super::{Fence, StoreError, read_time};
use crate::base::clock::rfc3339;

/// What a job leaves to do once its group's commit is known: sends its
/// answer (or the commit's error).
type Answer = Box<dyn FnOnce(&Result<(), rusqlite::Error>) + Send>;

struct Job {
    /// Its commit must reach the disk before it is answered.
    durable: bool,
    run: Box<dyn FnOnce(&mut Connection) -> Answer + Send>,
}

/// Most jobs committed together (a bound on one group's latency).
const GROUP: usize = 64;

/// A handle to the database thread.
pub struct Sqlite {
    tx: std::sync::mpsc::Sender<Job>,
    path: String,
}

impl Sqlite {
    /// Opens (creating if needed) and migrates the database at `path`.
    pub fn open(path: &Path) -> Result<Sqlite, StoreError> {
        let mut conn = Connection::open(path)?;
        configure(&conn)?;
        migrations::migrate(&mut conn)?;
        take_all(&conn)?;
        // Checkpoints run on a thread of their own (see `checkpointer`); a
        // start begins with an empty log (no other writer: `server` holds
        // the instance lock).
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        let checkpoints = checkpointer(path)?;
        Ok(Self::spawn(conn, path.display().to_string(), Some(checkpoints)))
    }

    /// An in-memory database, migrated (for tests).
    pub fn open_in_memory() -> Result<Sqlite, StoreError> {
        let mut conn = Connection::open_in_memory()?;
        migrations::migrate(&mut conn)?;
        Ok(Self::spawn(conn, ":memory:".into(), None))
    }

    fn spawn(mut conn: Connection, path: String, checkpoints: Option<std::sync::mpsc::SyncSender<()>>) -> Sqlite {
        // Every statement the store runs stays prepared (about twenty), and
        // its plan never depends on the values bound (the query planner's
        // stability guarantee): otherwise a `LIMIT ?` compiles against its
        // value, and each new value compiled the statement again (a tenth of
        // a start at ten thousand chambers).
        conn.set_prepared_statement_cache_capacity(48);
        if let Err(error) = conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true) {
            tracing::warn!(%error, "cannot keep the store's query plans stable");
        }
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("cryod-store".into())
            .spawn(move || {
                let mut full = false;
                while let Ok(first) = rx.recv() {
                    let mut group = vec![first];
                    group.extend(rx.try_iter().take(GROUP - 1));
                    commit_group(&mut conn, group, &mut full);
                    if let Some(c) = &checkpoints {
                        let _ = c.try_send(());
                    }
                }
            })
            .expect("spawning the database thread");
        Sqlite { tx, path }
    }

    /// Runs `f` on the database thread; answers once its writes are committed.
    async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    {
        self.run(false, f).await
    }

    /// [`call`](Self::call), `durable`: answered once the commit is on disk.
    async fn run<R, F>(&self, durable: bool, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (done, wait) = oneshot::channel();
        let run = Box::new(move |conn: &mut Connection| -> Answer {
            let r = f(conn);
            Box::new(move |committed: &Result<(), rusqlite::Error>| {
                let r = match committed {
                    Ok(()) => r,
                    Err(e) => Err(StoreError::Commit(e.to_string())),
                };
                let _ = done.send(r);
            })
        });
        self.tx.send(Job { durable, run }).map_err(|_| StoreError::Gone)?;
        wait.await.map_err(|_| StoreError::Gone)?
    }

    /// Runs `f` in a savepoint that first checks `fence`.
    async fn fenced<R, F>(&self, fence: Fence, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        self.fenced_with(false, fence, f).await
    }

    /// [`fenced`](Self::fenced), `durable` as in [`run`](Self::run).
    async fn fenced_with<R, F>(&self, durable: bool, fence: Fence, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        self.run(durable, move |c| {
            let sp = c.savepoint()?;
            let token: Option<i64> = sp
                .prepare_cached("SELECT owner.fence FROM chambers, owner WHERE chambers.id = ?1")?
                .query_row([fence.chamber], |r| r.get(0))
                .optional()?;
            if token != Some(fence.token) {
                return Err(fence.fenced());
            }
            let r = f(&sp)?;
            sp.commit()?;
            Ok(r)
        })
        .await
    }
}

/// Runs a group of jobs in one transaction and answers each after its
/// commit, made durable if one of them asks (`full`: the connection's
/// current `synchronous`, which cannot change inside a transaction). Were
/// the transaction not to begin (another process holds the write lock past
/// the busy timeout), each job commits on its own.
fn commit_group(conn: &mut Connection, group: Vec<Job>, full: &mut bool) {
    let durable = group.iter().any(|j| j.durable);
    if durable != *full && conn.pragma_update(None, "synchronous", if durable { "FULL" } else { "NORMAL" }).is_ok() {
        *full = durable;
    }
    let began = conn.execute_batch("BEGIN IMMEDIATE").is_ok();
    let answers: Vec<Answer> = group.into_iter().map(|job| (job.run)(conn)).collect();
    let committed = if began {
        conn.execute_batch("COMMIT").inspect_err(|_| {
            let _ = conn.execute_batch("ROLLBACK");
        })
    } else {
        Ok(())
    };
    for answer in answers {
        answer(&committed);
    }
}

/// How long the checkpointer gathers commits before it copies them into the
/// database file.
const CHECKPOINT_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A thread with a connection of its own that moves the write-ahead log into
/// the database file a moment after commits (a passive checkpoint, which
/// never blocks the writer). SQLite's own automatic checkpoint runs inside
/// the commit that crosses its threshold, on the store thread: that commit
/// (a wake's record, say) then waited for the copy and two fsyncs of the
/// database file, tens of milliseconds, with every job queued behind it.
/// Told of each commit; idle, it waits on its channel and never wakes.
fn checkpointer(path: &Path) -> Result<std::sync::mpsc::SyncSender<()>, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name("cryod-checkpoint".into())
        .spawn(move || {
            while rx.recv().is_ok() {
                std::thread::sleep(CHECKPOINT_AFTER);
                while rx.try_recv().is_ok() {}
                let r = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0));
                if let Err(error) = r {
                    tracing::warn!(%error, "WAL checkpoint failed (tried again after the next commit)");
                }
            }
        })
        .expect("spawning the checkpoint thread");
    Ok(tx)
}

/// Connection settings, applied at every open (outside migrations): WAL for
/// concurrent readers and crash safety, NORMAL sync (durable at checkpoints,
/// never corrupt; a wake's record commits with FULL, see the module's note),
/// and a busy timeout for the rare external reader.
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}

/// `c.execute` with the statement kept prepared in the connection's cache
/// (the wake path runs the same few statements again and again).
fn exec(c: &Connection, sql: &str, p: impl rusqlite::Params) -> rusqlite::Result<usize> {
    c.prepare_cached(sql)?.execute(p)
}

/// This process takes every chamber: a new fence, theirs.
fn take_all(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute("UPDATE owner SET fence = fence + 1", [])?;
    Ok(())
}

use super::{
    ApprovalRecord, Backend, ChamberRecord, Desired, Fut, NewChamber, OpenClaim, OpenSession, PassedSlot, Pruned,
    SessionEnd, SessionRow, SessionStart, UsageQuery, UsageRow, WakeRecord,
};
use rusqlite::params;

impl Backend for Sqlite {
    fn describe(&self) -> String {
        format!("sqlite {}", self.path)
    }

    fn chambers(&self) -> Fut<'_, Vec<ChamberRecord>> {
        Box::pin(self.call(|c| registry::chambers(c)))
    }

    fn chamber(&self, id: i64) -> Fut<'_, Option<ChamberRecord>> {
        Box::pin(self.call(move |c| registry::chamber(c, id)))
    }

    fn add_chamber(&self, new: NewChamber) -> Fut<'_, (ChamberRecord, bool)> {
        Box::pin(self.call(move |c| registry::add_chamber(c, new)))
    }

    fn remove_chamber(&self, fence: Fence) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(c, "DELETE FROM chambers WHERE id = ?1", [fence.chamber])?;
            Ok(())
        }))
    }

    fn set_paused(&self, fence: Fence, paused: bool) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(c, "UPDATE chambers SET paused = ?2 WHERE id = ?1", params![fence.chamber, paused as i64])?;
            Ok(())
        }))
    }

    fn set_archived(&self, fence: Fence, archived: bool) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(c, "UPDATE chambers SET archived = ?2 WHERE id = ?1", params![fence.chamber, archived as i64])?;
            Ok(())
        }))
    }

    fn set_trusted(&self, fence: Fence, trusted: String) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(c, "UPDATE chambers SET trusted = ?2 WHERE id = ?1", params![fence.chamber, trusted])?;
            Ok(())
        }))
    }

    fn set_health(&self, fence: Fence, health: String) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(c, "UPDATE chambers SET health = ?2 WHERE id = ?1", params![fence.chamber, health])?;
            Ok(())
        }))
    }

    fn set_hold(&self, h: super::HoldRecord) -> Fut<'_, ()> {
        Box::pin(self.call(move |c| {
            c.execute(
                "INSERT INTO provider_holds (account, until, source, guessed) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (account) DO UPDATE SET until = ?2, source = ?3, guessed = ?4",
                params![h.account, rfc3339(h.until), h.source, h.guessed as i64],
            )?;
            Ok(())
        }))
    }

    fn holds(&self) -> Fut<'_, Vec<super::HoldRecord>> {
        Box::pin(self.call(|c| {
            let mut st = c.prepare("SELECT account, until, source, guessed FROM provider_holds ORDER BY account")?;
            let rows = st.query_map([], |r| {
                Ok(super::HoldRecord {
                    account: r.get(0)?,
                    until: read_time(&r.get::<_, String>(1)?),
                    source: r.get(2)?,
                    guessed: r.get::<_, i64>(3)? != 0,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        }))
    }

    fn set_desired(&self, fence: Fence, desired: Desired) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(c, "UPDATE chambers SET desired = ?2 WHERE id = ?1", params![fence.chamber, desired.as_str()])?;
            Ok(())
        }))
    }

    /// One machine has no other node to show it to.
    fn set_mirror(&self, _fence: Fence, _view: super::View) -> Fut<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Durable before it answers: the wake's (and its claims') record.
    fn record_wake(&self, fence: Fence, w: WakeRecord) -> Fut<'_, ()> {
        Box::pin(self.fenced_with(true, fence, move |c| {
            exec(
                c,
                "INSERT INTO sessions
                     (chamber_id, number, wake_id, trigger, reasons, claimed, due_at, created_at, resumed_from)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    fence.chamber,
                    w.number as i64,
                    w.wake_id,
                    w.trigger,
                    w.reasons,
                    w.claimed,
                    w.due_at.map(rfc3339),
                    rfc3339(w.created_at),
                    w.resumed_from.map(|n| n as i64)
                ],
            )?;
            Ok(())
        }))
    }

    fn session_started(&self, fence: Fence, s: SessionStart) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(
                c,
                "UPDATE sessions SET pid = ?3, started_at = ?4, lateness_ms = ?5 WHERE chamber_id = ?1 AND number = ?2",
                params![fence.chamber, s.number as i64, s.pid, rfc3339(s.started_at), s.lateness_ms],
            )?;
            Ok(())
        }))
    }

    fn session_ended(&self, fence: Fence, e: SessionEnd) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            let u = e.usage;
            exec(
                c,
                "UPDATE sessions SET ended_at = ?3, outcome = ?4, detail = ?5, model = ?6, input_tokens = ?7,
                 output_tokens = ?8, cached_tokens = ?9, cost_usd = ?10, provider_session = ?11,
                 provider = ?12, thread_sessions = ?13, thread_tokens = ?14 WHERE chamber_id = ?1 AND number = ?2",
                params![
                    fence.chamber,
                    e.number as i64,
                    rfc3339(e.ended_at),
                    e.outcome,
                    e.detail,
                    u.model,
                    u.input_tokens as i64,
                    u.output_tokens as i64,
                    u.cached_tokens as i64,
                    u.cost_usd,
                    u.provider_session,
                    u.provider,
                    e.thread.map(|t| t.0 as i64),
                    e.thread.map(|t| t.1 as i64),
                ],
            )?;
            Ok(())
        }))
    }

    fn set_session_git(&self, fence: Fence, number: u64, json: String) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            let sql = "UPDATE sessions SET git = ?3 WHERE chamber_id = ?1 AND number = ?2";
            exec(c, sql, params![fence.chamber, number as i64, json])?;
            Ok(())
        }))
    }

    fn last_session_number(&self, chamber: i64) -> Fut<'_, u64> {
        Box::pin(self.call(move |c| sessions::last_session_number(c, chamber)))
    }

    fn recent_sessions(&self, chamber: i64, limit: u32) -> Fut<'_, Vec<SessionRow>> {
        Box::pin(self.call(move |c| sessions::recent_sessions(c, chamber, limit)))
    }

    fn open_sessions(&self, chamber: Option<i64>) -> Fut<'_, Vec<OpenSession>> {
        Box::pin(self.call(move |c| sessions::open_sessions(c, chamber)))
    }

    fn usage(&self, q: UsageQuery) -> Fut<'_, Vec<UsageRow>> {
        Box::pin(self.call(move |c| sessions::usage(c, &q)))
    }

    fn prune(&self, before: String) -> Fut<'_, Pruned> {
        Box::pin(async move {
            let b = before.clone();
            self.run(true, move |c| sessions::mark_pruned(c, &b)).await?;
            let mut total = Pruned::default();
            loop {
                let b = before.clone();
                let batch = self.run(true, move |c| sessions::prune_batch(c, &b)).await?;
                if batch.is_empty() {
                    return Ok(total);
                }
                total.add(batch);
            }
        })
    }

    fn record_passed(&self, fence: Fence, slots: Vec<PassedSlot>) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| sessions::record_passed(c, fence.chamber, &slots)))
    }

    fn passed(&self, chamber: i64, limit: u32) -> Fut<'_, (u64, Vec<PassedSlot>)> {
        Box::pin(self.call(move |c| sessions::passed(c, chamber, limit)))
    }

    fn approval_add(&self, fence: Fence, record: ApprovalRecord) -> Fut<'_, ()> {
        Box::pin(self.fenced_with(true, fence, move |c| approvals::add(c, &record)))
    }

    fn approval(&self, id: String) -> Fut<'_, Option<ApprovalRecord>> {
        Box::pin(self.call(move |c| approvals::get(c, &id)))
    }

    fn approvals(&self, chamber: Option<i64>, all: bool, limit: u32) -> Fut<'_, Vec<ApprovalRecord>> {
        Box::pin(self.call(move |c| approvals::list(c, chamber, all, limit)))
    }

    fn approval_decide(
        &self,
        id: String,
        approve: bool,
        by: String,
        answer: Option<String>,
        at: DateTime<Utc>,
    ) -> Fut<'_, ApprovalRecord> {
        Box::pin(self.run(true, move |c| approvals::decide(c, &id, approve, &by, answer.as_deref(), at)))
    }

    fn approval_take(
        &self,
        fence: Fence,
        tool: String,
        input: String,
        since: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> Fut<'_, Option<ApprovalRecord>> {
        Box::pin(self.fenced_with(true, fence, move |c| approvals::take(c, fence.chamber, &tool, &input, since, at)))
    }

    fn journal_claim(&self, fence: Fence, session: u64, files: Vec<String>, at: DateTime<Utc>) -> Fut<'_, i64> {
        Box::pin(self.fenced(fence, move |c| {
            let files = serde_json::to_string(&files).unwrap_or_else(|_| "[]".into());
            exec(
                c,
                "INSERT INTO claims (chamber_id, session, files, claimed_at) VALUES (?1, ?2, ?3, ?4)",
                params![fence.chamber, session as i64, files, rfc3339(at)],
            )?;
            Ok(c.last_insert_rowid())
        }))
    }

    fn journal_answer(&self, fence: Fence, session: u64, at: DateTime<Utc>) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(
                c,
                "UPDATE claims SET answered_at = ?3 WHERE chamber_id = ?1 AND session = ?2 AND answered_at IS NULL",
                params![fence.chamber, session as i64, rfc3339(at)],
            )?;
            Ok(())
        }))
    }

    fn journal_drop(&self, fence: Fence, id: i64) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(c, "DELETE FROM claims WHERE id = ?1 AND chamber_id = ?2", [id, fence.chamber])?;
            Ok(())
        }))
    }

    fn claim_answered_by_id(&self, fence: Fence, id: i64, at: DateTime<Utc>) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(
                c,
                "UPDATE claims SET answered_at = ?2 WHERE id = ?1 AND chamber_id = ?3",
                params![id, rfc3339(at), fence.chamber],
            )?;
            Ok(())
        }))
    }

    fn open_claims(&self, chamber: i64) -> Fut<'_, Vec<OpenClaim>> {
        Box::pin(self.call(move |c| sessions::open_claims(c, chamber)))
    }

    fn boot_rows(&self, chambers: Vec<i64>) -> Fut<'_, std::collections::HashMap<i64, super::BootRows>> {
        // One job: each chamber's two reads are index seeks.
        Box::pin(self.call(move |c| {
            let mut rows = std::collections::HashMap::with_capacity(chambers.len());
            for id in chambers {
                let newest = sessions::recent_sessions(c, id, 1).map(|mut v| v.pop());
                rows.insert(id, super::BootRows::of(id, newest, sessions::open_claims(c, id)));
            }
            Ok(rows)
        }))
    }
}

#[cfg(test)]
mod history_tests;

#[cfg(test)]
mod tests;
