//! The daemon's database, behind one seam: the chamber registry, the wake
//! ledger (session history), the claim journal and the status mirror.
//!
//! [`Backend`] is the seam; it has two implementations:
//! - [`sqlite`]: one machine, one file (the default). One thread owns the
//!   connection; async code sends it closures.
//! - [`postgres`]: a fleet of cryod nodes on one PostgreSQL. It also holds
//!   the nodes, their leases and who owns which chamber.
//!
//! Every write scoped to a chamber takes the chamber's [`Fence`]: the token
//! its owner got when it took the chamber. The write checks it in the same
//! transaction and fails with [`StoreError::Fenced`] if another node (or a
//! later start of this one) has taken the chamber since.
//!
//! Times go in and come out as `DateTime<Utc>`; both stores keep them as
//! RFC 3339 text, written ([`crate::base::clock::rfc3339`]) and read here, at the
//! seam, so no caller formats a time for the store.

pub mod history;
pub mod postgres;
pub mod sqlite;

pub use history::{Pruned, UsageQuery};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};

pub use cryo_core::chamber::View;

/// A boxed future of a store call (the seam is a trait object).
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database: {0}")]
    Postgres(String),
    #[error("the database thread has stopped")]
    Gone,
    /// The group of writes this one was committed with did not commit:
    /// nothing of it was written.
    #[error("database: cannot commit: {0}")]
    Commit(String),
    #[error("{0}")]
    Conflict(String),
    /// The chamber is no longer this node's, or was taken again since this
    /// writer got its fence: nothing was written.
    #[error("fenced: chamber {chamber} was taken by another owner (our fence {fence})")]
    Fenced { chamber: i64, fence: i64 },
    /// `[store] url` or `--store` is empty.
    #[error("the store URL is empty")]
    EmptyUrl,
    /// A PostgreSQL URL (or key=value string) that does not parse.
    #[error("{url:?} is not a PostgreSQL connection string: {error}")]
    NotPostgres { url: String, error: tokio_postgres::Error },
    /// A SQLite store at a relative path.
    #[error("{0:?}: a SQLite store needs an absolute path (or use postgres://…)")]
    RelativeSqlite(String),
}

impl StoreError {
    pub fn is_fenced(&self) -> bool {
        matches!(self, StoreError::Fenced { .. })
    }
}

/// The right to write a chamber's rows: its id and the token its owner got
/// when it took it (each taking increments it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub chamber: i64,
    pub token: i64,
}

impl Fence {
    fn fenced(self) -> StoreError {
        StoreError::Fenced { chamber: self.chamber, fence: self.token }
    }
}

/// A time as the store reads it back. Both stores keep times as RFC 3339
/// text (to the second, or to the millisecond for approval requests: see
/// [`crate::base::clock`]), written only by cryod; a text that does not read
/// (a hand edit) reads as the epoch rather than failing the whole read.
fn read_time(text: &str) -> DateTime<Utc> {
    crate::base::clock::parse_rfc3339(text).unwrap_or(DateTime::UNIX_EPOCH)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Desired {
    Stopped,
    Started,
}

impl Desired {
    fn as_str(self) -> &'static str {
        match self {
            Desired::Stopped => "stopped",
            Desired::Started => "started",
        }
    }

    fn parse(s: &str) -> Desired {
        if s == "started" { Desired::Started } else { Desired::Stopped }
    }
}

/// One registered chamber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChamberRecord {
    pub id: i64,
    pub name: String,
    /// Canonical absolute path.
    pub path: String,
    pub desired: Desired,
    /// Started but paused: no session starts until resumed.
    pub paused: bool,
    /// Archived: hidden from the default list, never started.
    pub archived: bool,
    pub created_at: DateTime<Utc>,
    /// The owner's token (see [`Fence`]).
    pub fence: i64,
    /// The node that owns it now (fleet); `None` on one machine or when
    /// no live node holds it.
    pub owner: Option<String>,
    /// The owner's name, where the listing knows it (for views of the fleet).
    pub owner_name: Option<String>,
    /// The node name it prefers (the one that added it).
    pub home: Option<String>,
    /// The storage domain its folder lives in (fleet).
    pub domain: String,
    /// What its owner last published of it (fleet), for other nodes' views.
    pub mirror: Option<Box<View>>,
    /// The settings of its `cryo.toml` that decide confinement or run
    /// commands, as the operator last accepted them (a JSON object of key
    /// and digest); `None` until first read (a chamber registered before
    /// cryod kept these: its settings then are taken as accepted).
    pub trusted: Option<String>,
    /// Its health as its machine last saved it (`cryo_core`'s
    /// `HealthRecord`, JSON): what a person must do, the failures'
    /// back-off, the failed work's next try. `None` until first saved.
    pub health: Option<String>,
}

impl ChamberRecord {
    pub fn fence(&self) -> Fence {
        Fence { chamber: self.id, token: self.fence }
    }
}

/// A provider account held at its limit, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRecord {
    pub account: String,
    pub until: DateTime<Utc>,
    /// What said so (the gateway's reading of the provider's headers).
    pub source: String,
    /// The provider named no reset: the hold is cryod's default.
    pub guessed: bool,
}

/// A wake about to be spawned.
#[derive(Debug, Clone)]
pub struct WakeRecord {
    pub number: u64,
    pub wake_id: String,
    pub trigger: String,
    /// JSON array of reasons (due TODO ids, message names).
    pub reasons: String,
    /// JSON array of claimed TODO ids.
    pub claimed: String,
    pub due_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// The session whose provider conversation it continues.
    pub resumed_from: Option<u64>,
}

/// A recorded wake whose agent has started.
#[derive(Debug, Clone)]
pub struct SessionStart {
    pub number: u64,
    pub pid: u32,
    pub started_at: DateTime<Utc>,
    pub lateness_ms: Option<i64>,
}

/// A session that has ended.
#[derive(Debug, Clone)]
pub struct SessionEnd {
    pub number: u64,
    pub ended_at: DateTime<Utc>,
    pub outcome: String,
    pub detail: String,
    /// What the agent's stream said it used (known kinds), and the provider
    /// account it billed (every session).
    pub usage: cryo_session::Usage,
    /// The conversation it leaves to resume: how many sessions it spans and
    /// the tokens they used (with `usage.provider_session`, its id).
    pub thread: Option<(u32, u64)>,
}

/// One row of history.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    pub number: u64,
    pub wake_id: String,
    pub trigger: String,
    pub due_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub lateness_ms: Option<i64>,
    pub ended_at: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
    pub usage: cryo_session::Usage,
    /// The session whose conversation it continued.
    pub resumed_from: Option<u64>,
    /// The conversation it left to resume (see [`SessionEnd::thread`]).
    pub thread: Option<(u32, u64)>,
    /// What it did on a `[git]` chamber's branch (`crate::services::git::Settled`,
    /// as JSON).
    pub git: Option<String>,
}

/// A scheduled slot that passed without a session: a pre-check said there
/// was nothing to do (`skipped`), or it could not run (`missed`).
#[derive(Debug, Clone, PartialEq)]
pub struct PassedSlot {
    /// When the slot was due.
    pub slot_at: DateTime<Utc>,
    pub todo_id: Option<u64>,
    pub todo_text: Option<String>,
    /// `skipped` or `missed`.
    pub what: String,
    /// Why, in one line (the check's first line of output, or the reason).
    pub reason: String,
    /// When it was recorded.
    pub at: DateTime<Utc>,
}

/// Sessions' usage summed over one chamber, UTC day, provider and model.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    pub chamber_id: i64,
    /// `YYYY-MM-DD` (UTC) of the sessions' ends.
    pub day: String,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub sessions: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// The sum of the costs that are known.
    pub cost_usd: f64,
}

/// The columns of a [`SessionRow`], in order (the same in SQLite and PostgreSQL).
pub const SESSION_COLUMNS: &str = "number, wake_id, trigger, due_at, started_at, lateness_ms, ended_at, outcome,
    model, input_tokens, output_tokens, cached_tokens, cost_usd, provider_session, provider,
    resumed_from, thread_sessions, thread_tokens, git";

/// The columns of a [`PassedSlot`], in order.
pub const PASSED_COLUMNS: &str = "slot_at, todo_id, todo_text, what, reason, at";

/// A session that was never closed: its owner died while it ran.
#[derive(Debug, Clone)]
pub struct OpenSession {
    pub chamber_id: i64,
    pub number: u64,
    pub wake_id: String,
    pub pid: Option<u32>,
    /// JSON array of the claimed TODOs (see `WakeRecord::claimed`).
    pub claimed: String,
}

/// A journaled inbox batch without an answer.
#[derive(Debug, Clone)]
pub struct OpenClaim {
    pub id: i64,
    pub session: u64,
    pub files: Vec<String>,
}

/// A tool call the chamber's `[approvals]` policy sent to a person: kept
/// until decided, and after (who decided, when, and whether the agent's
/// next ask of the same call has used the answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRecord {
    /// Short and unguessable (`a` and 10 hex digits).
    pub id: String,
    pub chamber_id: i64,
    /// The session that asked.
    pub session: u64,
    /// The tool as the agent's CLI named it.
    pub tool: String,
    /// Its exact arguments (JSON).
    pub input: String,
    /// What a person reads of it (the command, the path).
    pub subject: String,
    /// The agent's stated reason, if it gave one.
    pub reason: String,
    /// Why it was asked (the rule, or the default).
    pub rule: String,
    /// Kept to the millisecond, as are the other times of a request.
    pub created_at: DateTime<Utc>,
    /// `pending`, `approved` or `denied`.
    pub state: String,
    pub decided_at: Option<DateTime<Utc>>,
    /// Who decided (`operator`, `hub:NAME`, `link`, `mcp`).
    pub decided_by: Option<String>,
    /// A denial's reason.
    pub answer: Option<String>,
    /// When the agent's ask of the same call took the answer.
    pub used_at: Option<DateTime<Utc>>,
}

/// Why a request cannot be decided again: who decided it, and when.
pub fn approval_already(a: &ApprovalRecord) -> String {
    format!(
        "approval {} was {} already (by {} at {})",
        a.id,
        a.state,
        a.decided_by.as_deref().unwrap_or("?"),
        a.decided_at.map(crate::base::clock::rfc3339_ms).as_deref().unwrap_or("?")
    )
}

/// The columns of an [`ApprovalRecord`], in order.
pub const APPROVAL_COLUMNS: &str = "id, chamber_id, session, tool, input, subject, reason, rule, created_at, state,
    decided_at, decided_by, answer, used_at";

/// What registering a chamber needs.
#[derive(Debug, Clone)]
pub struct NewChamber {
    pub base_name: String,
    /// The name was asked for: a clash is an error, not a `-2` suffix.
    pub exact_name: bool,
    pub path: String,
    pub created_at: DateTime<Utc>,
}

/// The name a new chamber gets: the base, or (unless exact) the base with
/// the first free `-N` suffix.
fn unique_name<E>(new: &NewChamber, mut taken: impl FnMut(&str) -> Result<bool, E>) -> Result<String, StoreError>
where
    StoreError: From<E>,
{
    let base = &new.base_name;
    if !taken(base)? {
        return Ok(base.clone());
    }
    if new.exact_name {
        return Err(StoreError::Conflict(format!(
            "the name {base:?} is taken by another chamber: choose another with --name"
        )));
    }
    let mut n = 2;
    loop {
        let name = format!("{base}-{n}");
        if !taken(&name)? {
            return Ok(name);
        }
        n += 1;
    }
}

/// The storage seam. Every method scoped to a chamber that writes takes its
/// fence; reads do not.
pub trait Backend: Send + Sync + 'static {
    /// What this store is, for logs and `status` ("sqlite FILE", "postgres …").
    fn describe(&self) -> String;

    // The registry.
    /// Every chamber (of every node), by name.
    fn chambers(&self) -> Fut<'_, Vec<ChamberRecord>>;
    /// One chamber's record, if it is registered.
    fn chamber(&self, id: i64) -> Fut<'_, Option<ChamberRecord>> {
        Box::pin(async move { Ok(self.chambers().await?.into_iter().find(|r| r.id == id)) })
    }
    /// Registers a chamber; its base name is made unique by a `-2`, `-3`...
    /// suffix unless exact. The new chamber is this node's, with a fresh
    /// fence. Returns the record and whether it existed already (same path).
    fn add_chamber(&self, new: NewChamber) -> Fut<'_, (ChamberRecord, bool)>;
    fn remove_chamber(&self, fence: Fence) -> Fut<'_, ()>;
    fn set_paused(&self, fence: Fence, paused: bool) -> Fut<'_, ()>;
    fn set_archived(&self, fence: Fence, archived: bool) -> Fut<'_, ()>;
    /// Keeps what the operator accepted of the chamber's settings.
    fn set_trusted(&self, fence: Fence, trusted: String) -> Fut<'_, ()>;
    /// Keeps the chamber's health (JSON), read back at its next start.
    fn set_health(&self, fence: Fence, health: String) -> Fut<'_, ()>;
    /// Keeps a provider account's hold (a newer hold of the account
    /// replaces it): read back at the next start, so that no
    /// restart runs a held account's wakes before the provider said.
    fn set_hold(&self, hold: HoldRecord) -> Fut<'_, ()>;
    /// The accounts' holds kept, ended ones included.
    fn holds(&self) -> Fut<'_, Vec<HoldRecord>>;
    fn set_desired(&self, fence: Fence, desired: Desired) -> Fut<'_, ()>;
    /// Publishes what other nodes show of a chamber.
    fn set_mirror(&self, fence: Fence, view: View) -> Fut<'_, ()>;

    // The wake ledger.
    fn record_wake(&self, fence: Fence, wake: WakeRecord) -> Fut<'_, ()>;
    fn session_started(&self, fence: Fence, start: SessionStart) -> Fut<'_, ()>;
    fn session_ended(&self, fence: Fence, end: SessionEnd) -> Fut<'_, ()>;
    /// What session `number` did on a `[git]` chamber's branch (JSON).
    fn set_session_git(&self, fence: Fence, number: u64, json: String) -> Fut<'_, ()>;
    fn last_session_number(&self, chamber: i64) -> Fut<'_, u64>;
    /// The most recent sessions of a chamber, newest first.
    fn recent_sessions(&self, chamber: i64, limit: u32) -> Fut<'_, Vec<SessionRow>>;
    /// Sessions with no end, of one chamber or of all.
    fn open_sessions(&self, chamber: Option<i64>) -> Fut<'_, Vec<OpenSession>>;
    /// What the sessions `q` names used, summed per chamber, UTC day,
    /// provider account and model (read from the per-day rollups: see
    /// [`history`]).
    fn usage(&self, q: UsageQuery) -> Fut<'_, Vec<UsageRow>>;
    /// Deletes ended sessions, passed slots and answered claims from before
    /// the UTC day `before` (`YYYY-MM-DD`); their usage stays in the
    /// rollups. Each chamber keeps its newest session.
    fn prune(&self, before: String) -> Fut<'_, Pruned>;
    /// Records slots that passed without a session.
    fn record_passed(&self, fence: Fence, slots: Vec<PassedSlot>) -> Fut<'_, ()>;
    /// How many slots of a chamber passed without a session, and the newest
    /// `limit` of them, newest first.
    fn passed(&self, chamber: i64, limit: u32) -> Fut<'_, (u64, Vec<PassedSlot>)>;

    // Approvals.
    /// Keeps a new pending request.
    fn approval_add(&self, fence: Fence, record: ApprovalRecord) -> Fut<'_, ()>;
    /// One request, by id.
    fn approval(&self, id: String) -> Fut<'_, Option<ApprovalRecord>>;
    /// The newest `limit` requests (of one chamber, or of all), pending
    /// ones only unless `all`, newest first.
    fn approvals(&self, chamber: Option<i64>, all: bool, limit: u32) -> Fut<'_, Vec<ApprovalRecord>>;
    /// Decides a pending request (from any node: no fence). Returns it as
    /// it now reads; a request decided already is a conflict naming who
    /// decided it and when, and changes nothing.
    fn approval_decide(
        &self,
        id: String,
        approve: bool,
        by: String,
        answer: Option<String>,
        at: DateTime<Utc>,
    ) -> Fut<'_, ApprovalRecord>;
    /// Takes the answer to the same call (`tool`, `input`) of this chamber
    /// that was decided since `since` and not yet used, marking it used at
    /// `at`.
    fn approval_take(
        &self,
        fence: Fence,
        tool: String,
        input: String,
        since: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> Fut<'_, Option<ApprovalRecord>>;

    // The claim journal.
    /// Journals a claimed batch (before its files are archived).
    fn journal_claim(&self, fence: Fence, session: u64, files: Vec<String>, at: DateTime<Utc>) -> Fut<'_, i64>;
    /// Marks every open batch of a session answered.
    fn journal_answer(&self, fence: Fence, session: u64, at: DateTime<Utc>) -> Fut<'_, ()>;
    /// Forgets a journaled batch whose files never reached the agent.
    fn journal_drop(&self, fence: Fence, id: i64) -> Fut<'_, ()>;
    fn claim_answered_by_id(&self, fence: Fence, id: i64, at: DateTime<Utc>) -> Fut<'_, ()>;
    fn open_claims(&self, chamber: i64) -> Fut<'_, Vec<OpenClaim>>;

    /// What a start reads from the ledger for each of `chambers`: its
    /// newest session and its open claims, each read on its own (one that
    /// fails is logged and left empty, as a start took it before). SQLite
    /// answers a batch in one job on its thread (a start of thousands asked
    /// two queries of each, one after the other); this default asks them
    /// one chamber at a time.
    fn boot_rows(&self, chambers: Vec<i64>) -> Fut<'_, std::collections::HashMap<i64, BootRows>> {
        Box::pin(async move {
            let mut rows = std::collections::HashMap::new();
            for id in chambers {
                let newest = self.recent_sessions(id, 1).await.map(|mut v| v.pop());
                rows.insert(id, BootRows::of(id, newest, self.open_claims(id).await));
            }
            Ok(rows)
        })
    }
}

/// What a chamber's start reads from the ledger ([`Backend::boot_rows`]).
#[derive(Debug, Clone, Default)]
pub struct BootRows {
    pub newest: Option<SessionRow>,
    pub claims: Vec<OpenClaim>,
}

impl BootRows {
    /// The two reads of chamber `id`, a failed one logged and left empty.
    pub fn of(
        id: i64,
        newest: Result<Option<SessionRow>, StoreError>,
        claims: Result<Vec<OpenClaim>, StoreError>,
    ) -> BootRows {
        let newest = newest.unwrap_or_else(|error| {
            tracing::warn!(chamber = id, %error, "cannot read the newest session at start");
            None
        });
        let claims = claims.unwrap_or_else(|error| {
            tracing::warn!(chamber = id, %error, "cannot read the open claims at start");
            Vec::new()
        });
        BootRows { newest, claims }
    }
}

/// A handle to the store. Cheap to clone; derefs to the [`Backend`].
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    /// Set when the store is a fleet's PostgreSQL.
    fleet: Option<Arc<postgres::Postgres>>,
}

impl std::ops::Deref for Store {
    type Target = dyn Backend;
    fn deref(&self) -> &Self::Target {
        &*self.backend
    }
}

impl Store {
    /// The SQLite store at `path`, opened (created if needed) and migrated;
    /// every chamber in it is taken by this process (a new fence each).
    pub fn open(path: &std::path::Path) -> Result<Store, StoreError> {
        Ok(Store::from(sqlite::Sqlite::open(path)?))
    }

    /// An in-memory SQLite store, migrated (for tests).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Ok(Store::from(sqlite::Sqlite::open_in_memory()?))
    }

    /// The fleet's store, when this node is one of a fleet.
    pub fn fleet(&self) -> Option<&Arc<postgres::Postgres>> {
        self.fleet.as_ref()
    }
}

impl From<sqlite::Sqlite> for Store {
    fn from(s: sqlite::Sqlite) -> Store {
        Store { backend: Arc::new(s), fleet: None }
    }
}

impl From<Arc<postgres::Postgres>> for Store {
    fn from(p: Arc<postgres::Postgres>) -> Store {
        Store { backend: p.clone(), fleet: Some(p) }
    }
}

/// Where the store lives, from `[store] url` or `--store`: a SQLite file
/// (the default) or a PostgreSQL connection string (`postgres://…` or
/// `host=/path …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl Location {
    /// Reads a store URL: `postgres://`, `postgresql://` or a key=value
    /// string are PostgreSQL; `sqlite://PATH` or a plain path is SQLite.
    pub fn parse(url: &str) -> Result<Location, StoreError> {
        let url = url.trim();
        if url.is_empty() {
            return Err(StoreError::EmptyUrl);
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") || url.contains('=') {
            return url
                .parse::<tokio_postgres::Config>()
                .map(|_| Location::Postgres(url.to_string()))
                .map_err(|error| StoreError::NotPostgres { url: url.to_string(), error });
        }
        let path = url.strip_prefix("sqlite://").unwrap_or(url);
        if !path.starts_with('/') {
            return Err(StoreError::RelativeSqlite(url.to_string()));
        }
        Ok(Location::Sqlite(path.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        assert_eq!(Location::parse("/var/x.sqlite").unwrap(), Location::Sqlite("/var/x.sqlite".into()));
        assert_eq!(Location::parse("sqlite:///var/x.sqlite").unwrap(), Location::Sqlite("/var/x.sqlite".into()));
        assert!(matches!(Location::parse("postgres://u@h/db").unwrap(), Location::Postgres(_)));
        assert!(matches!(Location::parse("host=/tmp/pg user=cryo").unwrap(), Location::Postgres(_)));
        let e = Location::parse("relative.sqlite").unwrap_err();
        assert!(matches!(e, StoreError::RelativeSqlite(_)) && e.to_string().contains("absolute"), "{e}");
        let e = Location::parse("host=/tmp port=x").unwrap_err();
        assert!(matches!(e, StoreError::NotPostgres { .. }) && e.to_string().contains("not a PostgreSQL"), "{e}");
        assert!(matches!(Location::parse(" "), Err(StoreError::EmptyUrl)));
    }
}
