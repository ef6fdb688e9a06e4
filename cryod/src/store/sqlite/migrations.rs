//! Schema migrations, tracked in SQLite's `user_version`.
//!
//! Append a migration; never edit one that has shipped. Each runs in its own
//! transaction with the version bump, so a crash leaves the old schema whole.

use rusqlite::Connection;

/// Migration `i` brings the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: the chamber registry.
    "CREATE TABLE chambers (
        id          INTEGER PRIMARY KEY,
        name        TEXT NOT NULL UNIQUE,
        path        TEXT NOT NULL UNIQUE,
        desired     TEXT NOT NULL DEFAULT 'stopped' CHECK (desired IN ('stopped', 'started')),
        created_at  TEXT NOT NULL
    );",
    // 2: session history, which is also the wake ledger: a wake is recorded
    // here before its agent is spawned.
    "CREATE TABLE sessions (
        chamber_id  INTEGER NOT NULL REFERENCES chambers(id) ON DELETE CASCADE,
        number      INTEGER NOT NULL,
        wake_id     TEXT NOT NULL UNIQUE,
        trigger     TEXT NOT NULL,
        reasons     TEXT NOT NULL,
        claimed     TEXT NOT NULL,
        due_at      TEXT,
        created_at  TEXT NOT NULL,
        started_at  TEXT,
        lateness_ms INTEGER,
        pid         INTEGER,
        ended_at    TEXT,
        outcome     TEXT,
        detail      TEXT,
        PRIMARY KEY (chamber_id, number)
    );",
    // 3: pausing a started chamber.
    "ALTER TABLE chambers ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;",
    // 4: the claim journal: an inbox batch is journaled before its files are
    // archived, and marked answered when the agent replies.
    "CREATE TABLE claims (
        id          INTEGER PRIMARY KEY,
        chamber_id  INTEGER NOT NULL REFERENCES chambers(id) ON DELETE CASCADE,
        session     INTEGER NOT NULL,
        files       TEXT NOT NULL,
        claimed_at  TEXT NOT NULL,
        answered_at TEXT
    );
    CREATE INDEX claims_open ON claims (chamber_id) WHERE answered_at IS NULL;
    CREATE INDEX sessions_open ON sessions (chamber_id) WHERE ended_at IS NULL;",
    // 5: the owner's fence, taken anew by each cryod that opens the file.
    "ALTER TABLE chambers ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;",
    // 6: what each session used, from its agent's event stream.
    "ALTER TABLE sessions ADD COLUMN model TEXT;
    ALTER TABLE sessions ADD COLUMN input_tokens INTEGER;
    ALTER TABLE sessions ADD COLUMN output_tokens INTEGER;
    ALTER TABLE sessions ADD COLUMN cached_tokens INTEGER;
    ALTER TABLE sessions ADD COLUMN cost_usd REAL;
    ALTER TABLE sessions ADD COLUMN provider_session TEXT;
    ALTER TABLE sessions ADD COLUMN provider TEXT;",
    // 7: session continuity (which session a session resumed, and the
    // conversation it left), and the slots that passed without a session.
    "ALTER TABLE sessions ADD COLUMN resumed_from INTEGER;
    ALTER TABLE sessions ADD COLUMN thread_sessions INTEGER;
    ALTER TABLE sessions ADD COLUMN thread_tokens INTEGER;
    CREATE TABLE passed (
        id          INTEGER PRIMARY KEY,
        chamber_id  INTEGER NOT NULL REFERENCES chambers(id) ON DELETE CASCADE,
        slot_at     TEXT NOT NULL,
        todo_id     INTEGER,
        todo_text   TEXT,
        what        TEXT NOT NULL,
        reason      TEXT NOT NULL,
        at          TEXT NOT NULL
    );
    CREATE INDEX passed_by_chamber ON passed (chamber_id, id);",
    // 8: archived chambers (hidden from the default list, never started).
    "ALTER TABLE chambers ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;",
    // 9: what the operator accepted of each chamber's confining settings.
    "ALTER TABLE chambers ADD COLUMN trusted TEXT;",
    // 10: usage summed per chamber, UTC day, provider account and model,
    // and per account and day over every chamber (what an account's budget
    // reads), kept up to date by a trigger as each session ends (so budgets and
    // `usage` read the days they ask about, never the whole ledger, and
    // pruned sessions still count); the ledger by end time (a partial
    // day); the marks history pruning leaves.
    "CREATE TABLE usage_days (
        chamber_id    INTEGER NOT NULL REFERENCES chambers(id) ON DELETE CASCADE,
        day           TEXT NOT NULL,
        provider      TEXT NOT NULL DEFAULT '',
        model         TEXT NOT NULL DEFAULT '',
        sessions      INTEGER NOT NULL DEFAULT 0,
        input_tokens  INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        cached_tokens INTEGER NOT NULL DEFAULT 0,
        cost_usd      REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (chamber_id, day, provider, model)
    ) WITHOUT ROWID;
    CREATE INDEX usage_days_by_day ON usage_days (day);
    CREATE TABLE usage_accounts (
        provider      TEXT NOT NULL,
        day           TEXT NOT NULL,
        sessions      INTEGER NOT NULL DEFAULT 0,
        input_tokens  INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        cached_tokens INTEGER NOT NULL DEFAULT 0,
        cost_usd      REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (provider, day)
    ) WITHOUT ROWID;
    CREATE INDEX sessions_by_end ON sessions (ended_at) WHERE ended_at IS NOT NULL;
    INSERT INTO usage_days
        SELECT chamber_id, substr(ended_at, 1, 10), coalesce(provider, ''), coalesce(model, ''), count(*),
            coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), coalesce(sum(cached_tokens), 0),
            coalesce(sum(cost_usd), 0)
        FROM sessions WHERE ended_at IS NOT NULL GROUP BY 1, 2, 3, 4;
    INSERT INTO usage_accounts
        SELECT provider, day, sum(sessions), sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cost_usd)
        FROM usage_days GROUP BY 1, 2;
    CREATE TRIGGER sessions_roll_up AFTER UPDATE OF ended_at ON sessions
        WHEN OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL
    BEGIN
        INSERT INTO usage_days (chamber_id, day, provider, model, sessions,
                                input_tokens, output_tokens, cached_tokens, cost_usd)
        VALUES (NEW.chamber_id, substr(NEW.ended_at, 1, 10), coalesce(NEW.provider, ''), coalesce(NEW.model, ''), 1,
                coalesce(NEW.input_tokens, 0), coalesce(NEW.output_tokens, 0), coalesce(NEW.cached_tokens, 0),
                coalesce(NEW.cost_usd, 0))
        ON CONFLICT (chamber_id, day, provider, model) DO UPDATE SET
            sessions = sessions + 1,
            input_tokens = input_tokens + excluded.input_tokens,
            output_tokens = output_tokens + excluded.output_tokens,
            cached_tokens = cached_tokens + excluded.cached_tokens,
            cost_usd = cost_usd + excluded.cost_usd;
        INSERT INTO usage_accounts (provider, day, sessions, input_tokens, output_tokens, cached_tokens, cost_usd)
        VALUES (coalesce(NEW.provider, ''), substr(NEW.ended_at, 1, 10), 1, coalesce(NEW.input_tokens, 0),
                coalesce(NEW.output_tokens, 0), coalesce(NEW.cached_tokens, 0), coalesce(NEW.cost_usd, 0))
        ON CONFLICT (provider, day) DO UPDATE SET
            sessions = sessions + 1,
            input_tokens = input_tokens + excluded.input_tokens,
            output_tokens = output_tokens + excluded.output_tokens,
            cached_tokens = cached_tokens + excluded.cached_tokens,
            cost_usd = cost_usd + excluded.cost_usd;
    END;
    CREATE TABLE history_marks (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );",
    // 11: one chamber's sessions ended in a span (the part of a day a
    // status's cost windows read) without reading every chamber's.
    "CREATE INDEX sessions_by_chamber_end ON sessions (chamber_id, ended_at) WHERE ended_at IS NOT NULL;",
    // 12: approval requests: a tool call the chamber's policy sent to a
    // person, kept until decided and its answer used.
    "CREATE TABLE approvals (
        id          TEXT PRIMARY KEY,
        chamber_id  INTEGER NOT NULL REFERENCES chambers(id) ON DELETE CASCADE,
        session     INTEGER NOT NULL,
        tool        TEXT NOT NULL,
        input       TEXT NOT NULL,
        subject     TEXT NOT NULL,
        reason      TEXT NOT NULL,
        rule        TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        state       TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied')),
        decided_at  TEXT,
        decided_by  TEXT,
        answer      TEXT,
        used_at     TEXT
    );
    CREATE INDEX approvals_by_chamber ON approvals (chamber_id, created_at);
    CREATE INDEX approvals_pending ON approvals (created_at) WHERE state = 'pending';",
    // 13: what a session did on a [git] chamber's branch (JSON).
    "ALTER TABLE sessions ADD COLUMN git TEXT;",
    // 14: a chamber's health (JSON): what a person must do, the failures'
    // back-off, the failed work's next try; the same after a restart.
    "ALTER TABLE chambers ADD COLUMN health TEXT;",
    // 15: provider accounts held at their limit, until when and why.
    "CREATE TABLE provider_holds (
        account  TEXT PRIMARY KEY,
        until    TEXT NOT NULL,
        source   TEXT NOT NULL DEFAULT '',
        guessed  INTEGER NOT NULL DEFAULT 0
    );",
    // 16: the owner's fence, one for every chamber: each cryod that opens
    // the file takes them all by bumping it (not by rewriting every row of
    // `chambers`, a tenth of a second at a hundred thousand chambers); and
    // the next chamber's id, never one a removed chamber had (a late write
    // of the removed one's, under the same fence, must not reach it).
    "CREATE TABLE owner (
        id            INTEGER PRIMARY KEY CHECK (id = 1),
        fence         INTEGER NOT NULL,
        next_chamber  INTEGER NOT NULL
    );
    INSERT INTO owner SELECT 1, coalesce(max(fence), 0) + 1, coalesce(max(id), 0) + 1 FROM chambers;",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

pub fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let current: usize = conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))? as usize;
    if current > SCHEMA_VERSION {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISMATCH),
            Some(format!(
                "the database has schema version {current}, newer than this cryod ({SCHEMA_VERSION}): run a newer cryod"
            )),
        ));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_an_empty_database() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v as usize, SCHEMA_VERSION);
        // Idempotent: a second run changes nothing.
        migrate(&mut conn).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'chambers'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 1);
    }

    /// The one fence of a file whose chambers each had their own is above
    /// every one of them (a writer left from before is fenced out), and the
    /// next chamber's id is after theirs.
    #[test]
    fn the_owners_fence_begins_above_every_chambers() {
        let mut conn = Connection::open_in_memory().unwrap();
        for (i, sql) in MIGRATIONS[..15].iter().enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", (i + 1) as i64).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO chambers (name, path, created_at, fence) VALUES ('a', '/a', 'x', 7), ('b', '/b', 'x', 3);",
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let owner = conn.query_row("SELECT fence, next_chamber FROM owner", [], |r| Ok((r.get(0)?, r.get(1)?)));
        assert_eq!(owner.unwrap(), (8i64, 3i64), "above every fence, and after every id");
    }

    #[test]
    fn refuses_a_newer_schema() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", 999).unwrap();
        let e = migrate(&mut conn).unwrap_err().to_string();
        assert!(e.contains("newer than this cryod"), "{e}");
    }

    #[test]
    fn migrates_a_file_database_step_by_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        for _ in 0..2 {
            let mut conn = Connection::open(&path).unwrap();
            migrate(&mut conn).unwrap();
        }
        let conn = Connection::open(&path).unwrap();
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v as usize, SCHEMA_VERSION);
    }
}
