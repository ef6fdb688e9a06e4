//! A real PostgreSQL for the fleet tests, started by the harness in a
//! private folder (as `nobody` when the tests run as root: `initdb` and
//! `postgres` refuse root), listening only on a Unix socket there.
//!
//! Without PostgreSQL installed the fleet tests are skipped with a note,
//! unless `CRYO_REQUIRE_POSTGRES=1` (set by `.ci/run`) makes them fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A running server; stopped (immediately) and removed on drop.
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

/// Where PostgreSQL's programs are: `CRYO_PG_BIN`, Debian's versioned
/// folders (newest first), or `PATH`.
fn bin_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("CRYO_PG_BIN") {
        return Some(PathBuf::from(d));
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.flatten().map(|e| e.path().join("bin")).filter(|b| b.join("initdb").exists()).collect())
        .unwrap_or_default();
    versions.sort();
    if let Some(b) = versions.pop() {
        return Some(b);
    }
    std::env::var("PATH").ok()?.split(':').map(PathBuf::from).find(|d| d.join("initdb").exists())
}

/// Whether PostgreSQL is installed; if not, says so (a test then skips),
/// or fails when `CRYO_REQUIRE_POSTGRES=1`.
pub fn installed() -> bool {
    if bin_dir().is_some() {
        return true;
    }
    assert!(
        std::env::var("CRYO_REQUIRE_POSTGRES").as_deref() != Ok("1"),
        "PostgreSQL is required (CRYO_REQUIRE_POSTGRES=1) but initdb is not found: apt-get install postgresql"
    );
    eprintln!("note: PostgreSQL is not installed; skipping a fleet test (apt-get install postgresql)");
    false
}

impl Postgres {
    /// Starts a fresh server, or returns `None` (having said why) when
    /// PostgreSQL is not installed and not required.
    pub fn start() -> Option<Postgres> {
        if !installed() {
            return None;
        }
        let bin = bin_dir()?;
        // In /tmp, not TMPDIR: PostgreSQL runs as nobody, and a private
        // TMPDIR may be closed to it.
        let dir = tempfile::Builder::new().prefix("pg").tempdir_in("/tmp").expect("a folder for PostgreSQL");
        let pg = Postgres { dir, bin };
        std::fs::set_permissions(pg.dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        if nix::unistd::geteuid().is_root() {
            let status = Command::new("chown").arg("nobody:").arg(pg.dir.path()).status().expect("chown");
            assert!(status.success(), "chown nobody {}", pg.dir.path().display());
        }
        let data = pg.data();
        pg.run("initdb", &["-D", data.to_str().unwrap(), "-U", "cryo", "--auth=trust", "--no-sync", "-E", "UTF8"]);
        pg.start_server();
        Some(pg)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The socket folder.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// A connection string for `user` (a role made by [`Postgres::role`], or `cryo`).
    pub fn url(&self, user: &str) -> String {
        format!("host={} user={user} dbname=postgres", self.socket_dir().display())
    }

    /// Runs one of PostgreSQL's programs (as `nobody` when root).
    fn run(&self, program: &str, args: &[&str]) -> Output {
        let path = self.bin.join(program);
        let mut c = if nix::unistd::geteuid().is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let out = c.args(args).current_dir(self.dir.path()).env("LC_ALL", "C").output().expect("running PostgreSQL");
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn start_server(&self) {
        let mut opts =
            format!("-k {} -c listen_addresses='' -c fsync=off -c max_connections=200", self.socket_dir().display());
        // Counting statements per role (the benchmarks' queries per node),
        // where the contrib module is installed (Debian ships it).
        if self.bin.join("../lib/pg_stat_statements.so").exists() {
            opts.push_str(" -c shared_preload_libraries=pg_stat_statements");
        }
        let data = self.data();
        let log = self.dir.path().join("server.log");
        self.run("pg_ctl", &["-D", data.to_str().unwrap(), "-l", log.to_str().unwrap(), "-w", "-o", &opts, "start"]);
    }

    /// Stops the server (fast: sessions are cut) and starts it again.
    pub fn restart(&self) {
        let data = self.data();
        self.run("pg_ctl", &["-D", data.to_str().unwrap(), "-m", "fast", "-w", "stop"]);
        self.start_server();
    }

    /// Runs SQL as the superuser; returns what `psql` printed (unaligned,
    /// tuples only).
    pub fn sql(&self, sql: &str) -> String {
        let host = self.socket_dir().display().to_string();
        let out = self.run("psql", &["-h", &host, "-U", "cryo", "-d", "postgres", "-X", "-A", "-t", "-q", "-c", sql]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Statements run so far by each role (so by each node: each has its
    /// own), from `pg_stat_statements`; `None` without the module.
    pub fn statements_by_role(&self) -> Option<std::collections::HashMap<String, u64>> {
        if !self.bin.join("../lib/pg_stat_statements.so").exists() {
            return None;
        }
        self.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        let out = self.sql(
            "SELECT r.rolname || ' ' || sum(s.calls) FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
             GROUP BY r.rolname",
        );
        Some(
            out.lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(role, n)| (role.to_string(), n.trim().parse().unwrap_or(0)))
                .collect(),
        )
    }

    /// The statements run so far by `role`, most frequent first: calls and
    /// the statement's first line (for finding where a node's load comes from).
    pub fn statements_of(&self, role: &str) -> String {
        self.sql(&format!(
            "SELECT s.calls || '  ' || regexp_replace(left(s.query, 90), '\\s+', ' ', 'g') FROM pg_stat_statements s
             JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = '{role}' ORDER BY s.calls DESC"
        ))
    }

    /// The `n` statements that took the most time in all, each as calls,
    /// mean and total milliseconds and the statement's start.
    pub fn slowest(&self, n: usize) -> String {
        self.sql(&format!(
            "SELECT s.calls || '  ' || round(s.mean_exec_time::numeric, 3) || '  ' || round(s.total_exec_time::numeric) || '  '
                    || regexp_replace(left(s.query, 100), '\\s+', ' ', 'g')
             FROM pg_stat_statements s ORDER BY s.total_exec_time DESC LIMIT {n}"
        ))
    }

    /// Makes a login role (one per node, so that one node's connection can
    /// be cut: [`Postgres::cut`]).
    pub fn role(&self, name: &str) {
        self.sql(&format!("CREATE ROLE {name} LOGIN SUPERUSER"));
    }

    /// Cuts a role off: no new connection, and its sessions terminated.
    pub fn cut(&self, role: &str) {
        self.sql(&format!(
            "ALTER ROLE {role} NOLOGIN; SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '{role}'"
        ));
    }

    /// Lets a role log in again.
    pub fn heal(&self, role: &str) {
        self.sql(&format!("ALTER ROLE {role} LOGIN"));
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data();
        let path = self.bin.join("pg_ctl");
        let mut c = if nix::unistd::geteuid().is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let _ = c.args(["-D", data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]).output();
    }
}
