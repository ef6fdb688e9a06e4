//! The agent scripts of the scenarios, the same for cryo and the seed system
//! (both have `cryo-agent send/receive/todo/hibernate`; `--linger 0` ends
//! the seed's session at once instead of holding it open five minutes, and
//! is cryo's default).

/// Records its start, then hibernates (`--complete` after the last wake).
pub const LATENESS: &str = "date +%s%N >> starts.txt
cryo-agent hibernate --linger 0 >/dev/null 2>&1 || cryo-agent hibernate --complete >/dev/null
date +%s%N >> ends.txt
";

/// Records its start, receives, records that, answers and hibernates.
pub const INBOX: &str = "date +%s%N >> starts.txt
cryo-agent receive >/dev/null
date +%s%N >> received.txt
cryo-agent send ok >/dev/null
cryo-agent hibernate --linger 0 >/dev/null
date +%s%N >> ends.txt
";

/// Records its start and end around a little work and a TODO a day out.
pub const BURST: &str = "date +%s%N >> runs.txt
cryo-agent send ok >/dev/null
cryo-agent todo add later --at '+1 days' >/dev/null
date +%s%N >> ends.txt
cryo-agent hibernate --linger 0 >/dev/null
";

/// Where a `work` file exists, records its start and works for five minutes
/// (it is running when the daemon is killed; its shell's pid goes into
/// `pids.txt`); elsewhere hibernates.
pub const RECOVERY: &str = "if [ -f work ]; then date +%s%N >> runs.txt; echo $$ >> pids.txt; cryo-agent send working >/dev/null; sleep 300; fi
date +%s%N >> ends.txt
cryo-agent hibernate --linger 0 >/dev/null
";

/// At rest: checks in and hibernates (the seed runs a first session at start).
pub const IDLE: &str = "cryo-agent send hi >/dev/null
date +%s%N >> ends.txt
cryo-agent hibernate --linger 0 >/dev/null
";

/// Where a `measure` file exists, times `runs` calls of `cryo-agent todo
/// list` (nanoseconds into `calls.txt`); then hibernates.
/// Times `cryo-agent todo list` from inside a session; with `measure-mcp`
/// (cryo only), then publishes the session's environment and waits (at most
/// a minute) for `mcp-done` while the bench calls the same verb through
/// `cryo-agent mcp`.
pub fn control(runs: usize) -> String {
    format!(
        "if [ -f measure ]; then
  i=0
  while [ $i -lt {runs} ]; do a=$(date +%s%N); cryo-agent todo list >/dev/null; b=$(date +%s%N); echo $((b - a)) >> calls.txt; i=$((i + 1)); done
  if [ -f measure-mcp ]; then
    env | grep -e '^CRYO_' -e '^TZ=' > session.env.tmp && mv session.env.tmp session.env
    i=0
    while [ ! -f mcp-done ] && [ $i -lt 1200 ]; do i=$((i + 1)); sleep 0.05; done
  fi
fi
date +%s%N >> ends.txt
cryo-agent hibernate --linger 0 >/dev/null 2>&1 || cryo-agent hibernate --complete >/dev/null
"
    )
}

/// Records its start, then times its own calls (nanoseconds, one line
/// each): three `todo list` (`list.txt`), one `todo add` (`add.txt`, a
/// TODO a day out, so there is always a next wake) and the `hibernate`
/// that ends the session (`hibernate.txt`); `ends.txt` before that.
pub const HISTORY: &str = "date +%s%N >> starts.txt
i=0
while [ $i -lt 3 ]; do a=$(date +%s%N); cryo-agent todo list >/dev/null; b=$(date +%s%N); echo $((b - a)) >> list.txt; i=$((i + 1)); done
a=$(date +%s%N); cryo-agent todo add later --at '+1 days' >/dev/null; b=$(date +%s%N); echo $((b - a)) >> add.txt
date +%s%N >> ends.txt
a=$(date +%s%N); cryo-agent hibernate --linger 0 >/dev/null; b=$(date +%s%N); echo $((b - a)) >> hibernate.txt
";

/// A mail storm's agent: records its start, counts the messages its
/// `receive` returns (`got.txt`), works for `work_ms` milliseconds, answers
/// and records its end before it hibernates.
pub fn storm(work_ms: u64) -> String {
    format!(
        "date +%s%N >> runs.txt
n=$(cryo-agent receive | grep -c '^message ')
echo \"$n\" >> got.txt
sleep {}.{:03}
cryo-agent send ok >/dev/null
date +%s%N >> ends.txt
cryo-agent hibernate --linger 0 >/dev/null
",
        work_ms / 1000,
        work_ms % 1000
    )
}
