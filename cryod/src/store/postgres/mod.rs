//! The PostgreSQL store: a fleet of cryod nodes on one database.
//!
//! Besides the registry, the ledger and the journal it holds the nodes
//! (`cryo_nodes`: one row per cryod process, with a lease judged only by the
//! database's clock) and who owns each chamber (`cryo_chambers.owner`, with
//! its `fence`). Taking a chamber increments its fence. Every write scoped
//! to a chamber is one statement whose first part locks the chamber's row
//! `FOR NO KEY UPDATE` if, and only if, this node owns it with the writer's
//! fence; the write itself is conditional on that row, so a fenced writer
//! changes nothing and learns it from the same round trip (Temporal's shard
//! `range_id`, in one statement). The lock is exclusive, not `FOR SHARE`:
//! two writers holding a shared lock that both go on to update the row
//! (a mirror write and a move) deadlock; the ledger's foreign keys take
//! only `FOR KEY SHARE`, which it does not block.

mod approvals;
mod commands;
mod fleet;
mod migrations;

pub use commands::{Called, Taken};
pub use fleet::{FleetNode, LeaseTimes, NodeInfo};
pub use migrations::SCHEMA_VERSION;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::{
    ApprovalRecord, Backend, ChamberRecord, Desired, Fence, Fut, NewChamber, OpenClaim, OpenSession, PassedSlot,
    Pruned, SessionEnd, SessionRow, SessionStart, StoreError, UsageQuery, UsageRow, View, WakeRecord, history,
};

/// The chamber columns every query reads, in [`chamber_row`]'s order.
const CHAMBER_COLUMNS: &str =
    "id, name, path, desired, created_at, paused, fence, owner, home, domain, mirror, archived, trusted, health";

/// The fleet's store, as one node sees it.
pub struct Postgres {
    pool: Pool,
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    node: NodeInfo,
    /// This node's id now: `node.id` until a lost lease makes it rejoin.
    id: std::sync::RwLock<String>,
    /// When the last registration was sent (the lease's trust counts from
    /// there, on this node's monotonic clock).
    registered: std::sync::Mutex<std::time::Instant>,
    describe: String,
    /// Commands this node asked of others, waiting for their answers.
    waiters: commands::Waiters,
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        StoreError::Postgres(one_line(&e))
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => StoreError::Postgres(other.to_string()),
        }
    }
}

/// A PostgreSQL error as one line: the server's message when it sent one.
fn one_line(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(inner) = source {
                s = format!("{s}: {inner}");
                source = inner.source();
            }
            s
        }
    }
}

/// How long one statement may take before the pool gives up on it.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

impl Postgres {
    /// Connects to `url`, migrates the schema and registers this process as
    /// a node of the fleet (a fresh id, a lease of `node.lease.ttl`).
    pub async fn connect(url: &str, node: NodeInfo) -> Result<Postgres, StoreError> {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e: tokio_postgres::Error| StoreError::Postgres(one_line(&e)))?;
        if config.get_application_name().is_none() {
            config.application_name("cryod");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        config.keepalives_idle(Duration::from_secs(10));
        let options =
            format!("{} -c statement_timeout={}", config.get_options().unwrap_or(""), STATEMENT_TIMEOUT.as_millis());
        config.options(options.trim_start());
        let tls = tls();
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(8)
            .wait_timeout(Some(STATEMENT_TIMEOUT))
            .create_timeout(Some(Duration::from_secs(5)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Postgres(e.to_string()))?;
        let describe = describe(&config);
        let id = std::sync::RwLock::new(node.id.clone());
        let registered = std::sync::Mutex::new(std::time::Instant::now());
        let pg = Postgres { pool, config, tls, node, id, registered, describe, waiters: Default::default() };
        {
            let mut client = pg.pool.get().await?;
            migrations::migrate(&mut client).await?;
        }
        pg.register().await?;
        Ok(pg)
    }

    /// This node (its first id: see [`Postgres::node_id`]).
    pub fn node(&self) -> &NodeInfo {
        &self.node
    }

    /// When the last registration was sent.
    pub fn registered_before(&self) -> std::time::Instant {
        *self.registered.lock().expect("registration lock")
    }

    /// This node's id now.
    pub fn node_id(&self) -> String {
        self.id.read().expect("node id lock").clone()
    }

    /// Runs one fenced write: `write` must be a data-modifying statement
    /// that acts only on rows joined to the CTE `f` (the chamber's row, if
    /// this node owns it with this fence) and returns one `bigint` column
    /// `r`. `$1`, `$2` and `$3` are the chamber, the node and the fence;
    /// `params` are `$4` on. Returns `r` of the first row written, if any.
    async fn fenced(
        &self,
        fence: Fence,
        write: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<i64>, StoreError> {
        let sql = format!(
            "WITH f AS (SELECT id FROM cryo_chambers WHERE id = $1 AND owner = $2 AND fence = $3 FOR NO KEY UPDATE),
                  w AS ({write})
             SELECT (SELECT count(*) FROM f), (SELECT min(r) FROM w)"
        );
        let client = self.pool.get().await?;
        let st = client.prepare_cached(&sql).await?;
        let node = self.node_id();
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&fence.chamber, &node, &fence.token];
        all.extend_from_slice(params);
        let row = client.query_one(&st, &all).await?;
        if row.get::<_, i64>(0) != 1 {
            return Err(fence.fenced());
        }
        Ok(row.get(1))
    }

    /// [`Postgres::fenced`] for a write that returns nothing.
    async fn write(&self, fence: Fence, write: &str, params: &[&(dyn ToSql + Sync)]) -> Result<(), StoreError> {
        self.fenced(fence, write, params).await.map(drop)
    }

    async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        let client = self.pool.get().await?;
        let st = client.prepare_cached(sql).await?;
        Ok(client.query(&st, params).await?)
    }
}

/// rustls with the system's roots (TLS is used when the URL asks for it:
/// `sslmode=require`; a Unix socket never uses it).
fn tls() -> tokio_postgres_rustls::MakeRustlsConnect {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match tokio_postgres_rustls::MakeRustlsConnect::with_native_certs() {
        Ok((tls, _)) => tls,
        Err(_) => tokio_postgres_rustls::MakeRustlsConnect::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        ),
    }
}

/// "postgres USER@HOST/DB", without the password.
fn describe(c: &tokio_postgres::Config) -> String {
    let host = c
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    format!("postgres {}@{host}/{}", c.get_user().unwrap_or("?"), c.get_dbname().unwrap_or(c.get_user().unwrap_or("?")))
}

/// [`CHAMBER_COLUMNS`], each qualified by a table's name or alias.
fn columns_of(table: &str) -> String {
    CHAMBER_COLUMNS.split(", ").map(|c| format!("{table}.{c}")).collect::<Vec<_>>().join(", ")
}

fn chamber_row(r: &Row) -> ChamberRecord {
    ChamberRecord {
        id: r.get(0),
        name: r.get(1),
        path: r.get(2),
        desired: Desired::parse(r.get(3)),
        created_at: r.get(4),
        paused: r.get(5),
        archived: r.get(11),
        trusted: r.get(12),
        health: r.get(13),
        fence: r.get(6),
        owner: r.get(7),
        // Only the fleet's listing joins the owner's name in.
        owner_name: r.try_get(14).ok().flatten(),
        home: r.get(8),
        domain: r.get(9),
        mirror: r.get::<_, Option<String>>(10).and_then(|m| serde_json::from_str(&m).ok()),
    }
}

fn session_row(r: &Row) -> SessionRow {
    SessionRow {
        number: r.get::<_, i64>(0) as u64,
        wake_id: r.get(1),
        trigger: r.get(2),
        due_at: r.get(3),
        started_at: r.get(4),
        lateness_ms: r.get(5),
        ended_at: r.get(6),
        outcome: r.get(7),
        usage: crate::agent_events::Usage {
            model: r.get(8),
            input_tokens: r.get::<_, Option<i64>>(9).unwrap_or(0) as u64,
            output_tokens: r.get::<_, Option<i64>>(10).unwrap_or(0) as u64,
            cached_tokens: r.get::<_, Option<i64>>(11).unwrap_or(0) as u64,
            // Not kept: what they cost is in the cost.
            cache_write_tokens: 0,
            cost_usd: r.get(12),
            provider_session: r.get(13),
            provider: r.get(14),
        },
        resumed_from: r.get::<_, Option<i64>>(15).map(|n| n as u64),
        thread: r.get::<_, Option<i64>>(16).map(|n| (n as u32, r.get::<_, Option<i64>>(17).unwrap_or(0) as u64)),
        git: r.get(18),
    }
}

impl Backend for Postgres {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn chambers(&self) -> Fut<'_, Vec<ChamberRecord>> {
        Box::pin(async move {
            let rows = self
                .query(
                    &format!(
                        "SELECT {}, n.name FROM cryo_chambers c LEFT JOIN cryo_nodes n ON n.id = c.owner
                         ORDER BY c.name",
                        columns_of("c")
                    ),
                    &[],
                )
                .await?;
            Ok(rows.iter().map(chamber_row).collect())
        })
    }

    fn add_chamber(&self, new: NewChamber) -> Fut<'_, (ChamberRecord, bool)> {
        Box::pin(async move {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            // Names are unique across the fleet: one registration at a time.
            tx.execute("SELECT pg_advisory_xact_lock(1668446576)", &[]).await?;
            let existing = tx
                .query_opt(
                    &format!("SELECT {CHAMBER_COLUMNS} FROM cryo_chambers WHERE domain = $1 AND path = $2"),
                    &[&self.node.domain, &new.path],
                )
                .await?;
            if let Some(row) = existing {
                return Ok((chamber_row(&row), true));
            }
            let mut taken = Vec::new();
            for r in tx
                .query("SELECT name FROM cryo_chambers WHERE name = $1 OR name LIKE $1 || '-%'", &[&new.base_name])
                .await?
            {
                taken.push(r.get::<_, String>(0));
            }
            let name = super::unique_name(&new, |n| Ok::<_, StoreError>(taken.iter().any(|t| t == n)))?;
            let row = tx
                .query_one(
                    &format!(
                        "INSERT INTO cryo_chambers (name, domain, path, created_at, owner, fence, home)
                         VALUES ($1, $2, $3, $4, $5, 1, $6) RETURNING {CHAMBER_COLUMNS}"
                    ),
                    &[&name, &self.node.domain, &new.path, &new.created_at, &self.node_id(), &self.node.name],
                )
                .await?;
            tx.execute("SELECT pg_notify('cryo_fleet', 'added')", &[]).await?;
            tx.commit().await?;
            Ok((chamber_row(&row), false))
        })
    }

    fn remove_chamber(&self, fence: Fence) -> Fut<'_, ()> {
        Box::pin(async move {
            self.write(fence, "DELETE FROM cryo_chambers WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r", &[])
                .await
        })
    }

    fn set_paused(&self, fence: Fence, paused: bool) -> Fut<'_, ()> {
        Box::pin(async move {
            self.write(
                fence,
                "UPDATE cryo_chambers SET paused = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
                &[&paused],
            )
            .await
        })
    }

    fn set_archived(&self, fence: Fence, archived: bool) -> Fut<'_, ()> {
        Box::pin(async move {
            self.write(
                fence,
                "UPDATE cryo_chambers SET archived = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
                &[&archived],
            )
            .await
        })
    }

    fn set_trusted(&self, fence: Fence, trusted: String) -> Fut<'_, ()> {
        Box::pin(async move {
            self.write(
                fence,
                "UPDATE cryo_chambers SET trusted = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
                &[&trusted],
            )
            .await
        })
    }

    fn set_health(&self, fence: Fence, health: String) -> Fut<'_, ()> {
        Box::pin(async move {
            self.write(
                fence,
                "UPDATE cryo_chambers SET health = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
                &[&health],
            )
            .await
        })
    }

    fn set_hold(&self, h: super::HoldRecord) -> Fut<'_, ()> {
        Box::pin(async move {
            self.query(
                "INSERT INTO cryo_provider_holds (account, until, source, guessed) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (account) DO UPDATE SET until = $2, source = $3, guessed = $4",
                &[&h.account, &h.until, &h.source, &h.guessed],
            )
            .await
            .map(drop)
        })
    }

    fn holds(&self) -> Fut<'_, Vec<super::HoldRecord>> {
        Box::pin(async move {
            let rows = self
                .query("SELECT account, until, source, guessed FROM cryo_provider_holds ORDER BY account", &[])
                .await?;
            Ok(rows
                .iter()
                .map(|r| super::HoldRecord { account: r.get(0), until: r.get(1), source: r.get(2), guessed: r.get(3) })
                .collect())
        })
    }

    fn set_desired(&self, fence: Fence, desired: Desired) -> Fut<'_, ()> {
        Box::pin(async move {
            self.write(
                fence,
                "UPDATE cryo_chambers SET desired = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
                &[&desired.as_str()],
            )
            .await
        })
    }

    fn set_mirror(&self, fence: Fence, view: View) -> Fut<'_, ()> {
        Box::pin(async move {
            let json = serde_json::to_string(&view).unwrap_or_default();
            self.write(
                fence,
                "UPDATE cryo_chambers SET mirror = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
                &[&json],
            )
            .await
        })
    }

    fn record_wake(&self, fence: Fence, w: WakeRecord) -> Fut<'_, ()> {
        Box::pin(async move {
            let number = w.number as i64;
            let resumed_from = w.resumed_from.map(|n| n as i64);
            self.write(
                fence,
                "INSERT INTO cryo_sessions
                     (chamber_id, number, wake_id, trigger, reasons, claimed, due_at, created_at, node, fence, resumed_from)
                 SELECT f.id, $4, $5, $6, $7, $8, $9, $10, $2, $3, $11 FROM f RETURNING 1::int8 AS r",
                &[&number, &w.wake_id, &w.trigger, &w.reasons, &w.claimed, &w.due_at, &w.created_at, &resumed_from],
            )
            .await
        })
    }

    fn session_started(&self, fence: Fence, s: SessionStart) -> Fut<'_, ()> {
        Box::pin(async move {
            let (number, pid) = (s.number as i64, s.pid as i64);
            self.write(
                fence,
                "UPDATE cryo_sessions SET pid = $5, started_at = $6, lateness_ms = $7
                 WHERE chamber_id = (SELECT id FROM f) AND number = $4 RETURNING 1::int8 AS r",
                &[&number, &pid, &s.started_at, &s.lateness_ms],
            )
            .await
        })
    }

    fn session_ended(&self, fence: Fence, e: SessionEnd) -> Fut<'_, ()> {
        Box::pin(async move {
            let number = e.number as i64;
            let u = &e.usage;
            self.write(
                fence,
                "UPDATE cryo_sessions SET ended_at = $5, outcome = $6, detail = $7, model = $8, input_tokens = $9,
                 output_tokens = $10, cached_tokens = $11, cost_usd = $12, provider_session = $13, provider = $14,
                 thread_sessions = $15, thread_tokens = $16
                 WHERE chamber_id = (SELECT id FROM f) AND number = $4 RETURNING 1::int8 AS r",
                &[
                    &number,
                    &e.ended_at,
                    &e.outcome,
                    &e.detail,
                    &u.model,
                    &(u.input_tokens as i64),
                    &(u.output_tokens as i64),
                    &(u.cached_tokens as i64),
                    &u.cost_usd,
                    &u.provider_session,
                    &u.provider,
                    &e.thread.map(|t| t.0 as i64),
                    &e.thread.map(|t| t.1 as i64),
                ],
            )
            .await
        })
    }

    fn set_session_git(&self, fence: Fence, number: u64, json: String) -> Fut<'_, ()> {
        Box::pin(async move {
            let sql = "UPDATE cryo_sessions SET git = $5 WHERE chamber_id = (SELECT id FROM f) AND number = $4 \
                       RETURNING 1::int8 AS r";
            self.write(fence, sql, &[&(number as i64), &json]).await
        })
    }

    fn last_session_number(&self, chamber: i64) -> Fut<'_, u64> {
        Box::pin(async move {
            let rows = self.query("SELECT max(number) FROM cryo_sessions WHERE chamber_id = $1", &[&chamber]).await?;
            Ok(rows.first().and_then(|r| r.get::<_, Option<i64>>(0)).unwrap_or(0) as u64)
        })
    }

    fn recent_sessions(&self, chamber: i64, limit: u32) -> Fut<'_, Vec<SessionRow>> {
        Box::pin(async move {
            let limit = limit as i64;
            let rows = self
                .query(
                    &format!(
                        "SELECT {} FROM cryo_sessions WHERE chamber_id = $1 ORDER BY number DESC LIMIT $2",
                        crate::store::SESSION_COLUMNS
                    ),
                    &[&chamber, &limit],
                )
                .await?;
            Ok(rows.iter().map(session_row).collect())
        })
    }

    fn record_passed(&self, fence: Fence, slots: Vec<PassedSlot>) -> Fut<'_, ()> {
        Box::pin(async move {
            for p in &slots {
                let todo_id = p.todo_id.map(|n| n as i64);
                self.write(
                    fence,
                    &format!(
                        "INSERT INTO cryo_passed (chamber_id, {}) SELECT f.id, $4, $5, $6, $7, $8, $9 FROM f
                         RETURNING 1::int8 AS r",
                        crate::store::PASSED_COLUMNS
                    ),
                    &[&p.slot_at, &todo_id, &p.todo_text, &p.what, &p.reason, &p.at],
                )
                .await?;
            }
            Ok(())
        })
    }

    fn passed(&self, chamber: i64, limit: u32) -> Fut<'_, (u64, Vec<PassedSlot>)> {
        Box::pin(async move {
            let limit = limit as i64;
            let sql = format!(
                "SELECT {} FROM cryo_passed WHERE chamber_id = $1 ORDER BY id DESC LIMIT $2",
                crate::store::PASSED_COLUMNS
            );
            let rows = self.query(&sql, &[&chamber, &limit]).await?;
            let total = self.query("SELECT count(*) FROM cryo_passed WHERE chamber_id = $1", &[&chamber]).await?;
            let total = total.first().map(|r| r.get::<_, i64>(0)).unwrap_or(0) as u64;
            let slots = rows
                .iter()
                .map(|r| PassedSlot {
                    slot_at: r.get(0),
                    todo_id: r.get::<_, Option<i64>>(1).map(|n| n as u64),
                    todo_text: r.get(2),
                    what: r.get(3),
                    reason: r.get(4),
                    at: r.get(5),
                })
                .collect();
            Ok((total, slots))
        })
    }

    fn usage(&self, q: UsageQuery) -> Fut<'_, Vec<UsageRow>> {
        Box::pin(async move {
            let marks =
                self.query("SELECT value FROM cryo_history_marks WHERE key = $1", &[&history::PRUNED_BEFORE]).await?;
            let pruned: Option<String> = marks.first().map(|r| r.get(0));
            let mut out = Vec::new();
            for (sql, args) in q.statements(&history::POSTGRES, pruned.as_deref()) {
                let args: Vec<Box<dyn ToSql + Sync + Send>> = args
                    .into_iter()
                    .map(|a| -> Box<dyn ToSql + Sync + Send> {
                        match a {
                            history::Arg::Text(t) => Box::new(t),
                            history::Arg::Int(i) => Box::new(i),
                        }
                    })
                    .collect();
                let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| &**a as &(dyn ToSql + Sync)).collect();
                out.extend(self.query(&sql, &refs).await?.iter().map(|r| UsageRow {
                    chamber_id: r.get(0),
                    day: r.get(1),
                    provider: r.get(2),
                    model: r.get(3),
                    sessions: r.get::<_, i64>(4) as u64,
                    input_tokens: r.get::<_, i64>(5) as u64,
                    output_tokens: r.get::<_, i64>(6) as u64,
                    cached_tokens: r.get::<_, i64>(7) as u64,
                    cost_usd: r.get(8),
                }));
            }
            Ok(out)
        })
    }

    fn prune(&self, before: String) -> Fut<'_, Pruned> {
        Box::pin(async move {
            self.query(
                "INSERT INTO cryo_history_marks (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = greatest(cryo_history_marks.value, excluded.value)
                 RETURNING 1",
                &[&history::PRUNED_BEFORE, &before],
            )
            .await?;
            let [sessions, passed, claims] = history::prune_statements(&history::POSTGRES);
            let mut total = Pruned::default();
            loop {
                let client = self.pool.get().await?;
                let mut counts = [0; 3];
                for (sql, n) in [&sessions, &passed, &claims].into_iter().zip(&mut counts) {
                    *n = client.execute(&client.prepare_cached(sql).await?, &[&before]).await?;
                }
                let batch = Pruned { sessions: counts[0], passed: counts[1], claims: counts[2] };
                if batch.is_empty() {
                    return Ok(total);
                }
                total.add(batch);
            }
        })
    }

    fn open_sessions(&self, chamber: Option<i64>) -> Fut<'_, Vec<OpenSession>> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT chamber_id, number, wake_id, pid, claimed FROM cryo_sessions
                     WHERE ended_at IS NULL AND ($1::int8 IS NULL OR chamber_id = $1) ORDER BY chamber_id, number",
                    &[&chamber],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| OpenSession {
                    chamber_id: r.get(0),
                    number: r.get::<_, i64>(1) as u64,
                    wake_id: r.get(2),
                    pid: r.get::<_, Option<i64>>(3).map(|p| p as u32),
                    claimed: r.get(4),
                })
                .collect())
        })
    }

    fn approval_add(&self, fence: Fence, record: ApprovalRecord) -> Fut<'_, ()> {
        Box::pin(self.approval_add_row(fence, record))
    }

    fn approval(&self, id: String) -> Fut<'_, Option<ApprovalRecord>> {
        Box::pin(async move { self.approval_row(&id).await })
    }

    fn approvals(&self, chamber: Option<i64>, all: bool, limit: u32) -> Fut<'_, Vec<ApprovalRecord>> {
        Box::pin(self.approval_rows(chamber, all, limit))
    }

    fn approval_decide(
        &self,
        id: String,
        approve: bool,
        by: String,
        answer: Option<String>,
        at: String,
    ) -> Fut<'_, ApprovalRecord> {
        Box::pin(async move { self.approval_decide_row(&id, approve, &by, answer.as_deref(), &at).await })
    }

    fn approval_take(
        &self,
        fence: Fence,
        tool: String,
        input: String,
        since: String,
        at: String,
    ) -> Fut<'_, Option<ApprovalRecord>> {
        Box::pin(async move { self.approval_take_row(fence, &tool, &input, &since, &at).await })
    }

    fn journal_claim(&self, fence: Fence, session: u64, files: Vec<String>, at: String) -> Fut<'_, i64> {
        Box::pin(async move {
            let files = serde_json::to_string(&files).unwrap_or_else(|_| "[]".into());
            let session = session as i64;
            let id = self
                .fenced(
                    fence,
                    "INSERT INTO cryo_claims (chamber_id, session, files, claimed_at)
                     SELECT f.id, $4, $5, $6 FROM f RETURNING id AS r",
                    &[&session, &files, &at],
                )
                .await?;
            id.ok_or_else(|| StoreError::Postgres("the claim journal returned no id".into()))
        })
    }

    fn journal_answer(&self, fence: Fence, session: u64, at: String) -> Fut<'_, ()> {
        Box::pin(async move {
            let session = session as i64;
            self.write(
                fence,
                "UPDATE cryo_claims SET answered_at = $5
                 WHERE chamber_id = (SELECT id FROM f) AND session = $4 AND answered_at IS NULL RETURNING 1::int8 AS r",
                &[&session, &at],
            )
            .await
        })
    }

    fn journal_drop(&self, fence: Fence, id: i64) -> Fut<'_, ()> {
        Box::pin(async move {
            self.write(
                fence,
                "DELETE FROM cryo_claims WHERE id = $4 AND chamber_id = (SELECT id FROM f) RETURNING 1::int8 AS r",
                &[&id],
            )
            .await
        })
    }

    fn claim_answered_by_id(&self, fence: Fence, id: i64, at: String) -> Fut<'_, ()> {
        Box::pin(async move {
            self.write(
                fence,
                "UPDATE cryo_claims SET answered_at = $5
                 WHERE id = $4 AND chamber_id = (SELECT id FROM f) RETURNING 1::int8 AS r",
                &[&id, &at],
            )
            .await
        })
    }

    fn open_claims(&self, chamber: i64) -> Fut<'_, Vec<OpenClaim>> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT id, session, files FROM cryo_claims
                     WHERE chamber_id = $1 AND answered_at IS NULL ORDER BY id",
                    &[&chamber],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| OpenClaim {
                    id: r.get(0),
                    session: r.get::<_, i64>(1) as u64,
                    files: serde_json::from_str(r.get(2)).unwrap_or_default(),
                })
                .collect())
        })
    }
}
