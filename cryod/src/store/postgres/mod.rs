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
//!
//! Here: the connection, the fenced write every room uses
//! (`Postgres::fenced`), and [`Backend`], each of whose statements is in
//! a room by its tables: the registry (`registry.rs`), session history and
//! the claim journal (`sessions.rs`), approvals, the nodes and who owns
//! what (`fleet.rs`), commands between nodes, and the schema's migrations.

mod approvals;
mod commands;
mod fleet;
mod migrations;
mod registry;
mod sessions;

pub use commands::{Called, Taken};
pub use fleet::{FleetNode, LeaseTimes, NodeInfo};
pub use migrations::SCHEMA_VERSION;

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::{
    ApprovalRecord, Backend, ChamberRecord, Desired, Fence, Fut, NewChamber, OpenClaim, OpenSession, PassedSlot,
    Pruned, SessionEnd, SessionRow, SessionStart, StoreError, UsageQuery, UsageRow, View, WakeRecord,
};

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

impl Backend for Postgres {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn chambers(&self) -> Fut<'_, Vec<ChamberRecord>> {
        Box::pin(registry::chambers(self))
    }

    fn add_chamber(&self, new: NewChamber) -> Fut<'_, (ChamberRecord, bool)> {
        Box::pin(registry::add_chamber(self, new))
    }

    fn remove_chamber(&self, fence: Fence) -> Fut<'_, ()> {
        Box::pin(registry::remove_chamber(self, fence))
    }

    fn set_paused(&self, fence: Fence, paused: bool) -> Fut<'_, ()> {
        Box::pin(registry::set_paused(self, fence, paused))
    }

    fn set_archived(&self, fence: Fence, archived: bool) -> Fut<'_, ()> {
        Box::pin(registry::set_archived(self, fence, archived))
    }

    fn set_trusted(&self, fence: Fence, trusted: String) -> Fut<'_, ()> {
        Box::pin(registry::set_trusted(self, fence, trusted))
    }

    fn set_health(&self, fence: Fence, health: String) -> Fut<'_, ()> {
        Box::pin(registry::set_health(self, fence, health))
    }

    fn set_hold(&self, h: super::HoldRecord) -> Fut<'_, ()> {
        Box::pin(registry::set_hold(self, h))
    }

    fn holds(&self) -> Fut<'_, Vec<super::HoldRecord>> {
        Box::pin(registry::holds(self))
    }

    fn set_desired(&self, fence: Fence, desired: Desired) -> Fut<'_, ()> {
        Box::pin(registry::set_desired(self, fence, desired))
    }

    fn set_mirror(&self, fence: Fence, view: View) -> Fut<'_, ()> {
        Box::pin(registry::set_mirror(self, fence, view))
    }

    fn record_wake(&self, fence: Fence, w: WakeRecord) -> Fut<'_, ()> {
        Box::pin(sessions::record_wake(self, fence, w))
    }

    fn session_started(&self, fence: Fence, s: SessionStart) -> Fut<'_, ()> {
        Box::pin(sessions::session_started(self, fence, s))
    }

    fn session_ended(&self, fence: Fence, e: SessionEnd) -> Fut<'_, ()> {
        Box::pin(sessions::session_ended(self, fence, e))
    }

    fn set_session_git(&self, fence: Fence, number: u64, json: String) -> Fut<'_, ()> {
        Box::pin(sessions::set_session_git(self, fence, number, json))
    }

    fn last_session_number(&self, chamber: i64) -> Fut<'_, u64> {
        Box::pin(sessions::last_session_number(self, chamber))
    }

    fn recent_sessions(&self, chamber: i64, limit: u32) -> Fut<'_, Vec<SessionRow>> {
        Box::pin(sessions::recent_sessions(self, chamber, limit))
    }

    fn record_passed(&self, fence: Fence, slots: Vec<PassedSlot>) -> Fut<'_, ()> {
        Box::pin(sessions::record_passed(self, fence, slots))
    }

    fn passed(&self, chamber: i64, limit: u32) -> Fut<'_, (u64, Vec<PassedSlot>)> {
        Box::pin(sessions::passed(self, chamber, limit))
    }

    fn usage(&self, q: UsageQuery) -> Fut<'_, Vec<UsageRow>> {
        Box::pin(sessions::usage(self, q))
    }

    fn prune(&self, before: String) -> Fut<'_, Pruned> {
        Box::pin(sessions::prune(self, before))
    }

    fn open_sessions(&self, chamber: Option<i64>) -> Fut<'_, Vec<OpenSession>> {
        Box::pin(sessions::open_sessions(self, chamber))
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
        at: DateTime<Utc>,
    ) -> Fut<'_, ApprovalRecord> {
        Box::pin(async move { self.approval_decide_row(&id, approve, &by, answer.as_deref(), at).await })
    }

    fn approval_take(
        &self,
        fence: Fence,
        tool: String,
        input: String,
        since: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> Fut<'_, Option<ApprovalRecord>> {
        Box::pin(async move { self.approval_take_row(fence, &tool, &input, since, at).await })
    }

    fn journal_claim(&self, fence: Fence, session: u64, files: Vec<String>, at: DateTime<Utc>) -> Fut<'_, i64> {
        Box::pin(sessions::journal_claim(self, fence, session, files, at))
    }

    fn journal_answer(&self, fence: Fence, session: u64, at: DateTime<Utc>) -> Fut<'_, ()> {
        Box::pin(sessions::journal_answer(self, fence, session, at))
    }

    fn journal_drop(&self, fence: Fence, id: i64) -> Fut<'_, ()> {
        Box::pin(sessions::journal_drop(self, fence, id))
    }

    fn claim_answered_by_id(&self, fence: Fence, id: i64, at: DateTime<Utc>) -> Fut<'_, ()> {
        Box::pin(sessions::claim_answered_by_id(self, fence, id, at))
    }

    fn open_claims(&self, chamber: i64) -> Fut<'_, Vec<OpenClaim>> {
        Box::pin(sessions::open_claims(self, chamber))
    }
}
