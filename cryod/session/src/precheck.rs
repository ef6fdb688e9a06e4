//! Pre-checks: the cheap command a scheduled wake runs before its agent.
//!
//! A check runs as `/bin/sh -c CMD` in the chamber's folder, in its own
//! process group, with its output captured and a time limit, confined as
//! the chamber's agent is (its sandbox and limits: the agent may have
//! written the check itself, as a TODO's `--precheck`). What it says (exit
//! 0: there is work; exit [`PRECHECK_SKIP`]: nothing to do; anything else:
//! it failed, and the wake goes ahead) is the machine's to act on.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cryo_core::chamber::Checked;
pub(crate) use cryo_core::todo::PRECHECK_SKIP;
use tokio::io::AsyncReadExt;

/// Most bytes of a check's output kept (the prompt quotes less).
const MAX_OUTPUT: u64 = 64 * 1024;

/// A command ready to run: its program and arguments (`sh -c CMD`, or
/// its confined form), and its whole environment.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub program: std::path::PathBuf,
    pub args: Vec<std::ffi::OsString>,
    pub env: BTreeMap<String, String>,
}

impl Prepared {
    /// `sh -c command` with `env` added to cryod's own environment.
    pub fn shell(command: &str, env: &BTreeMap<String, String>) -> Prepared {
        let mut all: BTreeMap<String, String> = std::env::vars().collect();
        all.extend(env.clone());
        Prepared { program: "/bin/sh".into(), args: vec!["-c".into(), command.into()], env: all }
    }

    /// Runs it as a pre-check in `dir`, for at most `timeout`; the whole
    /// process group is killed at the limit.
    pub async fn check(&self, dir: &Path, timeout: Duration) -> Checked {
        match self.run(Some(dir), None, timeout, MAX_OUTPUT).await {
            Ran::Exited { code: 0, stdout, .. } => Checked::Wake { output: stdout },
            Ran::Exited { code: PRECHECK_SKIP, stdout, stderr } => Checked::Skip {
                line: if first_line(&stdout).is_empty() { first_line(&stderr) } else { first_line(&stdout) },
            },
            failed => Checked::Failed { why: failed.failure() },
        }
    }

    /// Runs it (in `dir`, else where cryod runs) in its own process group,
    /// with its environment alone, `stdin` given to it (else none), at most
    /// `cap` bytes of each output kept, for at most `timeout`. The whole
    /// group ends with it: at its end, at the limit, or when the task
    /// running this is aborted.
    pub async fn run(&self, dir: Option<&Path>, stdin: Option<Vec<u8>>, timeout: Duration, cap: u64) -> Ran {
        use std::os::unix::process::ExitStatusExt;
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            .env_clear()
            .envs(&self.env)
            .process_group(0)
            .stdin(if stdin.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // Not `kill_on_drop`: a SIGKILL to the keeper of the check's tree at
        // once would hand what the check left behind to init. [`Group`] ends
        // it: SIGTERM, so the keeper ends its whole tree, then SIGKILL.
        if let Some(d) = dir {
            cmd.current_dir(d);
        }
        let spawned = crate::fds::spawn_when_clear(|| cmd.spawn()).await;
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => return Ran::Failed(format!("could not start: {e}")),
        };
        let group = child.id().map(|p| Group(p as i32));
        if let (Some(mut pipe), Some(bytes)) = (child.stdin.take(), stdin) {
            tokio::spawn(async move {
                let _ = pipe.write_all(&bytes).await;
            });
        }
        let read = |pipe: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>| {
            tokio::spawn(async move {
                let mut out = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = (&mut p).take(cap).read_to_end(&mut out).await;
                    // The rest is read and dropped: a full pipe would stall
                    // the command until its time limit.
                    let _ = tokio::io::copy(&mut p, &mut tokio::io::sink()).await;
                }
                String::from_utf8_lossy(&out).into_owned()
            })
        };
        let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
        let status = match tokio::time::timeout(timeout, child.wait()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Ran::Failed(format!("could not be waited for: {e}")),
            Err(_) => return Ran::Failed(format!("timed out after {timeout:?}")),
        };
        drop(group);
        let (stdout, stderr) = (stdout.await.unwrap_or_default(), stderr.await.unwrap_or_default());
        match status.code() {
            Some(code) => Ran::Exited { code, stdout, stderr },
            None => Ran::Killed { signal: status.signal().unwrap_or(0) },
        }
    }
}

/// What a short command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    Exited {
        code: i32,
        stdout: String,
        stderr: String,
    },
    Killed {
        signal: i32,
    },
    /// It could not start, be waited for, or ran out of time.
    Failed(String),
}

impl Ran {
    /// Why it did not succeed, in a few words: `exited 3: the first line
    /// it wrote to stderr`, `was killed by signal 9`, `timed out after 1s`.
    pub fn failure(&self) -> String {
        match self {
            Ran::Exited { code, stderr, .. } => match first_line(stderr) {
                said if said.is_empty() => format!("exited {code}"),
                said => format!("exited {code}: {said}"),
            },
            Ran::Killed { signal } => format!("was killed by signal {signal}"),
            Ran::Failed(why) => why.clone(),
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("").to_string()
}

/// A check's process group, ended when dropped: SIGTERM first, so that
/// the keeper of its tree (`tree`) ends what the check left behind
/// in other groups, then SIGKILL a moment later.
struct Group(i32);

/// How long a check's keeper has to end its tree.
const TREE_GRACE: Duration = Duration::from_secs(1);

impl Drop for Group {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, killpg};
        let pgid = nix::unistd::Pid::from_raw(self.0);
        if killpg(pgid, Signal::SIGTERM).is_err() {
            return;
        }
        let kill = move || {
            let _ = killpg(pgid, Signal::SIGKILL);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    tokio::time::sleep(TREE_GRACE).await;
                    kill();
                });
            }
            Err(_) => kill(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(command: &str, timeout: Duration) -> Checked {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut env = BTreeMap::new();
        env.insert("CRYO_TEST_VAR".to_string(), "seen".to_string());
        rt.block_on(Prepared::shell(command, &env).check(dir.path(), timeout))
    }

    #[test]
    fn what_a_check_says() {
        let t = Duration::from_secs(10);
        assert_eq!(
            check("echo \"two failures, $CRYO_TEST_VAR\"", t),
            Checked::Wake { output: "two failures, seen\n".into() }
        );
        assert_eq!(check("printf '\\nnothing new\\nmore'; exit 78", t), Checked::Skip { line: "nothing new".into() });
        assert_eq!(check("echo quiet >&2; exit 78", t), Checked::Skip { line: "quiet".into() });
        assert_eq!(check("echo boom >&2; exit 3", t), Checked::Failed { why: "exited 3: boom".into() });
        assert_eq!(check("exit 1", t), Checked::Failed { why: "exited 1".into() });
        assert_eq!(check("kill -9 $$", t), Checked::Failed { why: "was killed by signal 9".into() });
        let at = std::time::Instant::now();
        // The limit ends the whole group, a background child too.
        assert_eq!(
            check("sleep 30 & sleep 30", Duration::from_millis(300)),
            Checked::Failed { why: "timed out after 300ms".into() }
        );
        assert!(at.elapsed() < Duration::from_secs(20));
    }

    /// A check whose task is aborted (its wake's permit went back) ends
    /// with its whole group.
    #[test]
    fn an_aborted_check_ends_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let root = dir.path().to_path_buf();
        let pid = rt.block_on(async {
            let task = tokio::spawn(async move {
                let check = Prepared::shell("sleep 60 & echo $! > bg.pid; wait", &BTreeMap::new());
                check.check(&root, Duration::from_secs(120)).await
            });
            let file = dir.path().join("bg.pid");
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let pid = loop {
                if let Some(p) = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse::<i32>().ok()) {
                    break p;
                }
                assert!(std::time::Instant::now() < deadline, "the check did not start");
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            task.abort();
            let _ = task.await;
            pid
        });
        let gone = || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() || zombie(pid);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !gone() {
            assert!(std::time::Instant::now() < deadline, "the check's background child {pid} outlived it");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Killed but not yet reaped by its parent (the shell, itself killed).
    fn zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
    }
}
