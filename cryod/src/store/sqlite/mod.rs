//! The SQLite store: one machine, one file (the default).
//!
//! One thread owns the connection; async code sends it closures and awaits
//! the answer, so SQLite never blocks a tokio worker. Opening the file takes
//! every chamber in it (a new fence each): one cryod runs a state folder at
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

use rusqlite::{Connection, OptionalExtension};
use tokio::sync::oneshot;

use super::{Fence, StoreError};

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
                .prepare_cached("SELECT fence FROM chambers WHERE id = ?1")?
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

/// This process takes every chamber: a new fence each.
fn take_all(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute("UPDATE chambers SET fence = fence + 1", [])?;
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
                    w.due_at,
                    w.created_at,
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
                params![fence.chamber, s.number as i64, s.pid, s.started_at, s.lateness_ms],
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
                    e.ended_at,
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
        at: String,
    ) -> Fut<'_, ApprovalRecord> {
        Box::pin(self.run(true, move |c| approvals::decide(c, &id, approve, &by, answer.as_deref(), &at)))
    }

    fn approval_take(
        &self,
        fence: Fence,
        tool: String,
        input: String,
        since: String,
        at: String,
    ) -> Fut<'_, Option<ApprovalRecord>> {
        Box::pin(self.fenced_with(true, fence, move |c| approvals::take(c, fence.chamber, &tool, &input, &since, &at)))
    }

    fn journal_claim(&self, fence: Fence, session: u64, files: Vec<String>, at: String) -> Fut<'_, i64> {
        Box::pin(self.fenced(fence, move |c| {
            let files = serde_json::to_string(&files).unwrap_or_else(|_| "[]".into());
            exec(
                c,
                "INSERT INTO claims (chamber_id, session, files, claimed_at) VALUES (?1, ?2, ?3, ?4)",
                params![fence.chamber, session as i64, files, at],
            )?;
            Ok(c.last_insert_rowid())
        }))
    }

    fn journal_answer(&self, fence: Fence, session: u64, at: String) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(
                c,
                "UPDATE claims SET answered_at = ?3 WHERE chamber_id = ?1 AND session = ?2 AND answered_at IS NULL",
                params![fence.chamber, session as i64, at],
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

    fn claim_answered_by_id(&self, fence: Fence, id: i64, at: String) -> Fut<'_, ()> {
        Box::pin(self.fenced(fence, move |c| {
            exec(
                c,
                "UPDATE claims SET answered_at = ?2 WHERE id = ?1 AND chamber_id = ?3",
                params![id, at, fence.chamber],
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
mod tests {
    use super::super::Store;
    use super::*;

    fn new(name: &str, exact: bool, path: &str) -> NewChamber {
        NewChamber {
            base_name: name.into(),
            exact_name: exact,
            path: path.into(),
            created_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    /// A request is decided once (the second answer names the first), and
    /// its answer is taken once, by the same call of the same chamber,
    /// while it is fresh.
    #[tokio::test]
    async fn an_approval_is_decided_once_and_taken_once() {
        let s = Store::open_in_memory().unwrap();
        let (a, _) = s.add_chamber(new("a", false, "/a")).await.unwrap();
        let (b, _) = s.add_chamber(new("b", false, "/b")).await.unwrap();
        let request = |id: &str, chamber: i64| crate::store::ApprovalRecord {
            id: id.into(),
            chamber_id: chamber,
            session: 1,
            tool: "Bash".into(),
            input: r#"{"command":"git push"}"#.into(),
            subject: "git push".into(),
            reason: String::new(),
            rule: "the default (ask)".into(),
            created_at: "2026-11-27T10:00:00.000Z".into(),
            state: "pending".into(),
            decided_at: None,
            decided_by: None,
            answer: None,
            used_at: None,
        };
        s.approval_add(a.fence(), request("a1", a.id)).await.unwrap();
        s.approval_add(b.fence(), request("b1", b.id)).await.unwrap();
        assert_eq!(s.approvals(None, false, 10).await.unwrap().len(), 2);
        let t = |h: u32| format!("2026-11-27T{h}:00:00.000Z");
        let take = |fence, since: String| {
            s.approval_take(fence, "Bash".into(), r#"{"command":"git push"}"#.into(), since, t(13))
        };
        assert!(take(a.fence(), t(0)).await.unwrap().is_none(), "a pending request is not an answer");
        let done = s.approval_decide("a1".into(), true, "operator".into(), None, t(11)).await.unwrap();
        assert_eq!((done.state.as_str(), done.decided_by.as_deref()), ("approved", Some("operator")));
        let again = s.approval_decide("a1".into(), false, "hub".into(), None, t(12)).await.unwrap_err().to_string();
        assert!(again.contains("was approved already (by operator at 2026-11-27T11"), "{again}");
        assert!(take(a.fence(), t(12)).await.unwrap().is_none(), "an answer older than `since` is not taken");
        let taken = take(a.fence(), t(10)).await.unwrap().expect("the answer");
        assert_eq!(taken.id, "a1");
        assert!(take(a.fence(), t(10)).await.unwrap().is_none(), "taken once");
        assert!(take(b.fence(), t(0)).await.unwrap().is_none(), "another chamber's request is not this one's");
        assert_eq!(s.approvals(Some(b.id), true, 10).await.unwrap().len(), 1);
        assert!(s.approval_decide("zz".into(), true, "x".into(), None, t(12)).await.is_err());
    }

    #[tokio::test]
    async fn names_are_made_unique_and_paths_dedupe() {
        let s = Store::open_in_memory().unwrap();
        let (a, existed) = s.add_chamber(new("work", false, "/a/work")).await.unwrap();
        assert!(!existed);
        let (b, _) = s.add_chamber(new("work", false, "/b/work")).await.unwrap();
        assert_eq!((a.name.as_str(), b.name.as_str()), ("work", "work-2"));
        let (again, existed) = s.add_chamber(new("other", false, "/a/work")).await.unwrap();
        assert!(existed);
        assert_eq!(again.id, a.id);
        let e = s.add_chamber(new("work", true, "/c/work")).await.unwrap_err();
        assert!(e.to_string().contains("taken"), "{e}");
        s.set_desired(a.fence(), Desired::Started).await.unwrap();
        s.remove_chamber(b.fence()).await.unwrap();
        let all = s.chambers().await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].desired, Desired::Started);
    }

    /// The jobs waiting together commit together, yet one that fails undoes
    /// only its own writes (its savepoint), and none is answered before the
    /// group's commit.
    #[tokio::test]
    async fn a_group_commits_together_and_a_failing_job_undoes_only_itself() {
        let s = Sqlite::open_in_memory().unwrap();
        let (a, _) = s.call(|c| registry::add_chamber(c, new("a", false, "/a"))).await.unwrap();
        // Hold the thread so that the next three jobs wait as one group.
        let (release, held) = std::sync::mpsc::channel::<()>();
        s.tx.send(Job {
            durable: false,
            run: Box::new(move |_| {
                let _ = held.recv();
                Box::new(|_| {})
            }),
        })
        .unwrap();
        // A job that writes, then fails: its write must not commit with the group.
        let refused = s.fenced(a.fence(), |c| {
            c.execute("UPDATE chambers SET paused = 1", [])?;
            Err::<(), _>(StoreError::Conflict("refused after writing".into()))
        });
        let kept = s.fenced_with(true, a.fence(), move |c| {
            c.execute("UPDATE chambers SET desired = 'started' WHERE id = ?1", [a.id])?;
            Ok(())
        });
        let seen = s.call(|c| {
            Ok(c.query_row("SELECT desired, paused FROM chambers", [], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })?)
        });
        let all = async { tokio::join!(refused, kept, seen) };
        tokio::pin!(all);
        // Polled once, each has sent its job; none is answered while the
        // group has not run.
        let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(all.as_mut().poll(cx).is_pending())).await;
        assert!(pending);
        release.send(()).unwrap();
        let (refused, kept, seen) = all.await;
        assert!(refused.unwrap_err().to_string().contains("refused after writing"));
        kept.unwrap();
        assert_eq!(seen.unwrap(), ("started".to_string(), 0), "the failed job's write was undone, the other's kept");
    }

    /// Session `number`'s wake, due now, from a TODO.
    fn wake(number: u64) -> WakeRecord {
        WakeRecord {
            number,
            wake_id: format!("w{number}"),
            trigger: "todo".into(),
            reasons: "[]".into(),
            claimed: "[]".into(),
            due_at: None,
            created_at: "2026-01-01T00:00:00Z".into(),
            resumed_from: None,
        }
    }

    /// A writer holding an old fence changes nothing; reopening the file
    /// takes every chamber anew.
    #[tokio::test]
    async fn an_old_fence_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let s = Store::open(&path).unwrap();
        let (a, _) = s.add_chamber(new("a", false, "/a")).await.unwrap();
        let old = a.fence();
        drop(s);
        let s = Store::open(&path).unwrap();
        let fresh = s.chambers().await.unwrap()[0].fence();
        assert_eq!(fresh.token, old.token + 1);
        let wake = wake(1);
        let e = s.record_wake(old, wake.clone()).await.unwrap_err();
        assert!(e.is_fenced(), "{e}");
        assert!(s.set_desired(old, Desired::Started).await.unwrap_err().is_fenced());
        assert!(s.remove_chamber(old).await.unwrap_err().is_fenced());
        assert_eq!(s.last_session_number(a.id).await.unwrap(), 0);
        assert_eq!(s.chambers().await.unwrap()[0].desired, Desired::Stopped);
        s.record_wake(fresh, wake).await.unwrap();
        assert_eq!(s.open_sessions(Some(a.id)).await.unwrap().len(), 1);
        assert_eq!(s.open_sessions(Some(a.id + 1)).await.unwrap().len(), 0);
    }

    /// A start's batched read gives each chamber what its own two reads
    /// give: its newest session and its open claims.
    #[tokio::test]
    async fn boot_rows_are_each_chambers_newest_session_and_open_claims() {
        let s = Store::open_in_memory().unwrap();
        let (a, _) = s.add_chamber(new("a", false, "/a")).await.unwrap();
        let (b, _) = s.add_chamber(new("b", false, "/b")).await.unwrap();
        for number in 1..=3 {
            s.record_wake(a.fence(), wake(number)).await.unwrap();
        }
        s.journal_claim(a.fence(), 3, vec!["m.md".into()], "2026-01-01T00:00:00Z".into()).await.unwrap();
        let mut rows = s.boot_rows(vec![a.id, b.id]).await.unwrap();
        let ra = rows.remove(&a.id).unwrap();
        assert_eq!(ra.newest.as_ref().map(|r| r.number), Some(3));
        assert_eq!(ra.newest, s.recent_sessions(a.id, 1).await.unwrap().pop());
        assert_eq!(ra.claims.len(), 1);
        assert_eq!(ra.claims[0].files, vec!["m.md".to_string()]);
        let rb = rows.remove(&b.id).unwrap();
        assert!(rb.newest.is_none() && rb.claims.is_empty());
        assert!(rows.is_empty());
    }

    /// Commits never wait for a checkpoint (SQLite's own is off), and the
    /// checkpointer still moves the log into the database file by itself.
    #[tokio::test]
    async fn the_log_reaches_the_database_file_without_a_commit_waiting_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let s = Store::open(&path).unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        for i in 0..300 {
            s.add_chamber(new(&format!("c{i}"), false, &format!("/c/{i}"))).await.unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::fs::metadata(&path).unwrap().len() <= before {
            assert!(std::time::Instant::now() < deadline, "the database file never grew: no checkpoint ran");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(s.chambers().await.unwrap().len(), 300);
    }
}
