//! The PostgreSQL schema, in `cryo_schema(version)`.
//!
//! Append a migration; never edit one that has shipped. Nodes of a fleet may
//! start at once: migrations run under a transaction-scoped advisory lock,
//! each in the transaction that bumps the version. Every table is logged
//! (an unlogged one is emptied by a crash, and the fences must survive).

/// Migration `i` brings the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: nodes and their leases, the registry with owners and fences, the
    // wake ledger and the claim journal.
    "CREATE TABLE cryo_nodes (
        id          text PRIMARY KEY,
        name        text NOT NULL,
        domain      text NOT NULL,
        host        text NOT NULL,
        pid         integer NOT NULL,
        socket      text NOT NULL,
        capacity    integer NOT NULL CHECK (capacity > 0),
        started_at  timestamptz NOT NULL DEFAULT now(),
        renewed_at  timestamptz NOT NULL DEFAULT now(),
        expires_at  timestamptz NOT NULL,
        draining    boolean NOT NULL DEFAULT false
    );
    CREATE INDEX cryo_nodes_domain ON cryo_nodes (domain, expires_at);
    CREATE TABLE cryo_chambers (
        id          bigserial PRIMARY KEY,
        name        text NOT NULL UNIQUE,
        domain      text NOT NULL,
        path        text NOT NULL,
        desired     text NOT NULL DEFAULT 'stopped' CHECK (desired IN ('stopped', 'started')),
        paused      boolean NOT NULL DEFAULT false,
        created_at  text NOT NULL,
        owner       text REFERENCES cryo_nodes (id) ON DELETE SET NULL,
        fence       bigint NOT NULL DEFAULT 0,
        home        text,
        mirror      text,
        UNIQUE (domain, path)
    );
    CREATE INDEX cryo_chambers_owner ON cryo_chambers (owner);
    CREATE TABLE cryo_sessions (
        chamber_id  bigint NOT NULL REFERENCES cryo_chambers (id) ON DELETE CASCADE,
        number      bigint NOT NULL,
        wake_id     text NOT NULL UNIQUE,
        trigger     text NOT NULL,
        reasons     text NOT NULL,
        claimed     text NOT NULL,
        due_at      text,
        created_at  text NOT NULL,
        started_at  text,
        lateness_ms bigint,
        pid         bigint,
        ended_at    text,
        outcome     text,
        detail      text,
        node        text NOT NULL,
        fence       bigint NOT NULL,
        PRIMARY KEY (chamber_id, number)
    );
    CREATE INDEX cryo_sessions_open ON cryo_sessions (chamber_id) WHERE ended_at IS NULL;
    CREATE TABLE cryo_claims (
        id          bigserial PRIMARY KEY,
        chamber_id  bigint NOT NULL REFERENCES cryo_chambers (id) ON DELETE CASCADE,
        session     bigint NOT NULL,
        files       text NOT NULL,
        claimed_at  text NOT NULL,
        answered_at text
    );
    CREATE INDEX cryo_claims_open ON cryo_claims (chamber_id) WHERE answered_at IS NULL;",
    // 2: operations on a chamber asked of its owner by another node (a
    // command row, a NOTIFY, an answer). No foreign key to the chamber: a
    // `remove` answers after its chamber's row is gone.
    "CREATE TABLE cryo_commands (
        id          bigserial PRIMARY KEY,
        node        text NOT NULL,
        chamber_id  bigint,
        body        text NOT NULL,
        asked_by    text NOT NULL,
        asked_at    timestamptz NOT NULL DEFAULT now(),
        taken_at    timestamptz,
        reply       text
    );
    CREATE INDEX cryo_commands_waiting ON cryo_commands (node) WHERE taken_at IS NULL;",
    // 3: what each session used, from its agent's event stream.
    "ALTER TABLE cryo_sessions ADD COLUMN model text,
        ADD COLUMN input_tokens bigint, ADD COLUMN output_tokens bigint, ADD COLUMN cached_tokens bigint,
        ADD COLUMN cost_usd double precision, ADD COLUMN provider_session text, ADD COLUMN provider text;",
    // 4: session continuity, and the slots that passed without a session.
    "ALTER TABLE cryo_sessions ADD COLUMN resumed_from bigint,
        ADD COLUMN thread_sessions bigint, ADD COLUMN thread_tokens bigint;
    CREATE TABLE cryo_passed (
        id          bigserial PRIMARY KEY,
        chamber_id  bigint NOT NULL REFERENCES cryo_chambers (id) ON DELETE CASCADE,
        slot_at     text NOT NULL,
        todo_id     bigint,
        todo_text   text,
        what        text NOT NULL,
        reason      text NOT NULL,
        at          text NOT NULL
    );
    CREATE INDEX cryo_passed_by_chamber ON cryo_passed (chamber_id, id);",
    // 5: archived chambers (hidden from the default list, never started).
    "ALTER TABLE cryo_chambers ADD COLUMN archived boolean NOT NULL DEFAULT false;",
    // 6: what the operator accepted of each chamber's confining settings.
    "ALTER TABLE cryo_chambers ADD COLUMN trusted text;",
    // 7: usage summed per chamber, UTC day, provider account and model,
    // kept up to date by a trigger as each session ends (see SQLite's
    // migration 10); the ledger by end time; the marks pruning leaves.
    "CREATE TABLE cryo_usage_days (
        chamber_id    bigint NOT NULL REFERENCES cryo_chambers (id) ON DELETE CASCADE,
        day           text NOT NULL,
        provider      text NOT NULL DEFAULT '',
        model         text NOT NULL DEFAULT '',
        sessions      bigint NOT NULL DEFAULT 0,
        input_tokens  bigint NOT NULL DEFAULT 0,
        output_tokens bigint NOT NULL DEFAULT 0,
        cached_tokens bigint NOT NULL DEFAULT 0,
        cost_usd      double precision NOT NULL DEFAULT 0,
        PRIMARY KEY (chamber_id, day, provider, model)
    );
    CREATE INDEX cryo_usage_days_by_day ON cryo_usage_days (day);
    CREATE TABLE cryo_usage_accounts (
        provider      text NOT NULL,
        day           text NOT NULL,
        sessions      bigint NOT NULL DEFAULT 0,
        input_tokens  bigint NOT NULL DEFAULT 0,
        output_tokens bigint NOT NULL DEFAULT 0,
        cached_tokens bigint NOT NULL DEFAULT 0,
        cost_usd      double precision NOT NULL DEFAULT 0,
        PRIMARY KEY (provider, day)
    );
    CREATE INDEX cryo_sessions_by_end ON cryo_sessions (ended_at) WHERE ended_at IS NOT NULL;
    INSERT INTO cryo_usage_days
        SELECT chamber_id, substr(ended_at, 1, 10), coalesce(provider, ''), coalesce(model, ''), count(*),
            coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), coalesce(sum(cached_tokens), 0),
            coalesce(sum(cost_usd), 0)
        FROM cryo_sessions WHERE ended_at IS NOT NULL GROUP BY 1, 2, 3, 4;
    INSERT INTO cryo_usage_accounts
        SELECT provider, day, sum(sessions), sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cost_usd)
        FROM cryo_usage_days GROUP BY 1, 2;
    CREATE FUNCTION cryo_roll_up() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO cryo_usage_days AS u (chamber_id, day, provider, model, sessions,
                                          input_tokens, output_tokens, cached_tokens, cost_usd)
        VALUES (NEW.chamber_id, substr(NEW.ended_at, 1, 10), coalesce(NEW.provider, ''), coalesce(NEW.model, ''), 1,
                coalesce(NEW.input_tokens, 0), coalesce(NEW.output_tokens, 0), coalesce(NEW.cached_tokens, 0),
                coalesce(NEW.cost_usd, 0))
        ON CONFLICT (chamber_id, day, provider, model) DO UPDATE SET
            sessions = u.sessions + 1,
            input_tokens = u.input_tokens + excluded.input_tokens,
            output_tokens = u.output_tokens + excluded.output_tokens,
            cached_tokens = u.cached_tokens + excluded.cached_tokens,
            cost_usd = u.cost_usd + excluded.cost_usd;
        INSERT INTO cryo_usage_accounts AS a (provider, day, sessions, input_tokens, output_tokens, cached_tokens, cost_usd)
        VALUES (coalesce(NEW.provider, ''), substr(NEW.ended_at, 1, 10), 1, coalesce(NEW.input_tokens, 0),
                coalesce(NEW.output_tokens, 0), coalesce(NEW.cached_tokens, 0), coalesce(NEW.cost_usd, 0))
        ON CONFLICT (provider, day) DO UPDATE SET
            sessions = a.sessions + 1,
            input_tokens = a.input_tokens + excluded.input_tokens,
            output_tokens = a.output_tokens + excluded.output_tokens,
            cached_tokens = a.cached_tokens + excluded.cached_tokens,
            cost_usd = a.cost_usd + excluded.cost_usd;
        RETURN NULL;
    END $$;
    CREATE TRIGGER cryo_sessions_roll_up AFTER UPDATE OF ended_at ON cryo_sessions FOR EACH ROW
        WHEN (OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL) EXECUTE FUNCTION cryo_roll_up();
    CREATE TABLE cryo_history_marks (
        key   text PRIMARY KEY,
        value text NOT NULL
    );",
    // 8: one chamber's sessions ended in a span (the part of a day a
    // status's cost windows read) without reading every chamber's.
    "CREATE INDEX cryo_sessions_by_chamber_end ON cryo_sessions (chamber_id, ended_at) WHERE ended_at IS NOT NULL;",
    // 9: approval requests (see the SQLite store's migration 12): decided
    // on any node, taken by the node that owns the chamber then.
    "CREATE TABLE cryo_approvals (
        id          text PRIMARY KEY,
        chamber_id  bigint NOT NULL REFERENCES cryo_chambers(id) ON DELETE CASCADE,
        session     bigint NOT NULL,
        tool        text NOT NULL,
        input       text NOT NULL,
        subject     text NOT NULL,
        reason      text NOT NULL,
        rule        text NOT NULL,
        created_at  text NOT NULL,
        state       text NOT NULL CHECK (state IN ('pending', 'approved', 'denied')),
        decided_at  text,
        decided_by  text,
        answer      text,
        used_at     text
    );
    CREATE INDEX cryo_approvals_by_chamber ON cryo_approvals (chamber_id, created_at);
    CREATE INDEX cryo_approvals_pending ON cryo_approvals (created_at) WHERE state = 'pending';",
    // 10: what a session did on a [git] chamber's branch (JSON).
    "ALTER TABLE cryo_sessions ADD COLUMN git text;",
    // 11: a chamber's health (JSON), the same on its next owner.
    "ALTER TABLE cryo_chambers ADD COLUMN health text;",
    // 12: provider accounts held at their limit, until when and why.
    "CREATE TABLE cryo_provider_holds (
        account  text PRIMARY KEY,
        until    text NOT NULL,
        source   text NOT NULL DEFAULT '',
        guessed  boolean NOT NULL DEFAULT false
    );",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Brings the database to [`SCHEMA_VERSION`]; refuses a newer one.
pub async fn migrate(client: &mut tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    // One migrator at a time across the fleet (the key is "cryo" in ASCII).
    tx.execute("SELECT pg_advisory_xact_lock(1668446575)", &[]).await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS cryo_schema (version integer NOT NULL)").await?;
    let current: Option<i32> = tx.query_opt("SELECT max(version) FROM cryo_schema", &[]).await?.and_then(|r| r.get(0));
    let current = current.unwrap_or(0);
    if current > SCHEMA_VERSION {
        // Raised as the database's own error so it reads as one line.
        tx.batch_execute(&format!(
            "DO $$ BEGIN RAISE EXCEPTION 'the database has cryo schema version {current}, newer than this cryod ({SCHEMA_VERSION}): run a newer cryod'; END $$"
        ))
        .await?;
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.batch_execute(sql).await?;
        tx.execute("INSERT INTO cryo_schema (version) VALUES ($1)", &[&(i as i32 + 1)]).await?;
    }
    tx.commit().await
}
