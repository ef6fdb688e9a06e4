//! Starting a session's agent: its kind's command line, its environment,
//! its confinement and limits, where its output goes, and (on a fleet node)
//! the keeper it runs under. What the agent does once started comes back
//! through [`Session::on_exit`] and the stream's [`Tell`].

use super::Error;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;

pub(crate) use super::confine::{Confined, Jail, Run, confine};
use super::kinds::{self, Turn};
use super::sandbox;
use super::stream::{self, EVENTS_FILE, Logs, Tell};
use cryo_files::{Dir, NewFile};

/// How long a keeper may take to start its agent.
const KEEPER_START: Duration = Duration::from_secs(10);

/// Where the prompt is kept for people (and for one too long for an argument).
pub const PROMPT_FILE: &str = ".cryo/prompt.md";

/// The agent's own output (its stdout and stderr, or a known kind's
/// transcript), in the chamber.
pub const AGENT_LOG: &str = "cryo-agent.log";

/// A fleet node's session runs under a keeper (see `keeper.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Keeper {
    /// Until when (the keeper's monotonic milliseconds, `keeper::until`)
    /// the keeper may let the agent run without hearing from cryod.
    pub until: u64,
    /// The owner's fence, for the agent's own records.
    pub fence: i64,
}

/// One session to start; `G` is the provider gateway it may go through.
pub struct Session<'a, G> {
    pub jail: Jail<'a>,
    /// `[provider] env`, with keys kept in files read now (so a rotated
    /// key is used at once).
    pub provider_env: BTreeMap<String, String>,
    pub number: u64,
    pub wake_id: &'a str,
    pub token: &'a str,
    pub turn: Turn<'a>,
    /// When it starts, as the chamber's zone shows it (for the log's header).
    pub local_time: String,
    /// The session's own socket (its `CRYO_SOCKET`).
    pub door: &'a Path,
    /// Folders it may also read when confined.
    pub readable: &'a [PathBuf],
    /// On a fleet node, its keeper.
    pub keeper: Option<Keeper>,
    /// A wake decided ahead of its due instant starts its agent at the
    /// instant: this long from now.
    pub wait: Option<Duration>,
    /// What its stream tells as soon as it is seen.
    pub tell: Tell,
    pub prices: Arc<crate::events::Prices>,
    /// The provider gateway, for a known kind whose chamber uses it.
    pub gateway: Option<Through<G>>,
    /// Called once with how the agent ended, after its stream is read.
    pub on_exit: Box<dyn FnOnce(Exit) + Send + Sync>,
}

/// A session's way to its provider through cryod's gateway.
pub struct Through<G> {
    /// The gateway, ready to give this session a ticket.
    pub gateway: G,
    /// The provider account the session bills.
    pub account: String,
    /// `[providers.NAME] upstream`, if `cryod.toml` names one.
    pub upstream: Option<String>,
    /// It bills a fallback account: its key goes to the fallback's own
    /// upstream (else the public API), never to one the chamber's CLI
    /// config names for its own account.
    pub fallback: bool,
}

/// cryod's provider gateway, as one session's start uses it: everything
/// the session's ticket needs but where its calls go, which the start
/// decides.
pub trait Gateway {
    /// The session's credential at the gateway: worth nothing once dropped.
    type Ticket: Ticket;
    /// A ticket for calls to `upstream` with `auth`, its exchanges kept in
    /// `kept` if given; `None` while the gateway does not listen.
    fn open(&self, upstream: String, auth: crate::upstream::Auth, kept: Option<std::fs::File>) -> Option<Self::Ticket>;
}

/// A session's credential at the gateway.
pub trait Ticket: Send + 'static {
    /// The base URL the agent's CLI is given.
    fn base(&self) -> String;
    /// The credential the agent's CLI is given where its key would be.
    fn token(&self) -> &str;
    /// What the session's requests used, as the provider reported it
    /// (`None` before the first); callable after the ticket is gone.
    fn meter(&self) -> Arc<dyn Fn() -> Option<crate::events::Usage> + Send + Sync>;
}

/// How an agent ended.
pub struct Exit {
    pub status: std::process::ExitStatus,
    /// What its stream said it used (known kinds).
    pub usage: Option<Box<crate::events::Usage>>,
    /// Its stream ended on the provider's limit.
    pub limited: Option<Box<crate::events::Limited>>,
}

/// A started agent; `T` is its gateway ticket.
pub struct Started<T> {
    /// Its pid, also its process group's id.
    pub pid: u32,
    /// On a fleet node, the pipe to its keeper, which the lease extends.
    pub keeper: Option<std::fs::File>,
    /// Lines for `cryo.log` (a limit that could not be applied).
    pub notes: Vec<String>,
    /// Its credential at the gateway, if it goes through it: worth nothing
    /// once dropped.
    pub ticket: Option<T>,
    /// Its own cgroup, if cryod made one: ended with the session.
    pub tree: Option<super::tree::Tree>,
}

/// Starts the agent of `s` in its own process group, confined as its
/// chamber says; returns at once (its end comes through `on_exit`).
pub async fn start<G: Gateway>(s: Session<'_, G>) -> super::Result<Started<G::Ticket>> {
    let prepared = prepare(&s)?;
    let mut notes: Vec<String> = prepared.own_way.iter().cloned().collect();
    let (mut cmd, logs, tree) = command(&s, &prepared, &mut notes)?;
    let Prepared { dir, launch, provider_env, prompt_rel, long, ticket, .. } = prepared;
    // The spawn waits for the child's exec (vfork): off the worker, so
    // other chambers' wakes of the same instant go on meanwhile. A wake
    // decided ahead of its due instant starts its agent at the instant: a
    // thread's sleep is precise to tens of microseconds, tokio's timers to
    // a millisecond.
    let wait = s.wait;
    let spawned = tokio::task::block_in_place(|| {
        if let Some(left) = wait {
            std::thread::sleep(left);
        }
        let _gate = crate::fds::spawning();
        cmd.spawn()
    });
    // The copy for people once the agent runs, off the chamber's path.
    if !long {
        let text = s.turn.prompt.to_string();
        tokio::task::spawn_blocking(move || dir.write(&prompt_rel, text.as_bytes(), NewFile::QUICK));
    }
    let mut child = spawned.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::Spawn(format!("{:?} not found on PATH", launch.program)),
        _ => Error::Spawn(format!("cannot run {:?}: {e}", launch.program)),
    })?;
    let root = s.jail.root;
    let raw = launch.events.and_then(|_| Dir::open(root).ok()?.append(Path::new(EVENTS_FILE)).ok());
    let logs = Logs { raw, ..logs };
    let model = |kind| launch.model.clone().or_else(|| kinds::configured_model(kind, root, &provider_env));
    let read = launch.events.map(|kind| (kind, model(kind), logs));
    let (mut tell, prices, on_exit) = (s.tell, s.prices, s.on_exit);
    // Through the gateway, the provider's own word stands: what the CLI
    // says of its usage and limits is kept for the transcript only.
    let meter = ticket.as_ref().map(Ticket::meter);
    if meter.is_some() {
        tell = Tell { limit: Arc::new(|_| {}), over: None, watch: tell.watch, trace: tell.trace };
    }
    // Only a known kind is watched: cryod reads its events.
    if launch.events.is_none() {
        tell.watch = None;
    }
    let watch = tell.watch.clone();
    let started = watch.clone();
    let on_exit: Box<dyn FnOnce(Exit) + Send + Sync> = Box::new(move |mut e: Exit| {
        if let Some(w) = watch {
            w.end();
        }
        if let Some(meter) = meter {
            e.usage = counted(e.usage, meter());
            e.limited = None;
        }
        on_exit(e)
    });
    if s.keeper.is_some() {
        let (pid, pipe) = kept_start(child, read, prices, tell, on_exit).await?;
        if let Some(w) = &started {
            w.start();
        }
        return Ok(Started { pid, keeper: Some(pipe), notes, ticket, tree });
    }
    let pid = child.id().ok_or_else(|| Error::Spawn("the agent exited at once".into()))?;
    if let Some(w) = &started {
        w.start();
    }
    let stream = match (read, child.stdout.take()) {
        (Some((kind, model, logs)), Some(out)) => {
            Some(stream::read(out, child.stderr.take(), kind, model, logs, prices, tell))
        }
        _ => None,
    };
    tokio::spawn(async move {
        if let Ok(status) = child.wait().await {
            // Ended: what its stream's last lines show is no stall or loop.
            if let Some(w) = &started {
                w.end();
            }
            let (usage, limited) = match stream {
                Some(s) => s.finish().await,
                None => (None, None),
            };
            on_exit(Exit { status, usage, limited });
        }
    });
    Ok(Started { pid, keeper: None, notes, ticket, tree })
}

/// What a session used, as the gateway counted it (the provider's own
/// word) over what its CLI's stream said; the stream still names the
/// provider's conversation.
fn counted(
    stream: Option<Box<crate::events::Usage>>,
    gateway: Option<crate::events::Usage>,
) -> Option<Box<crate::events::Usage>> {
    let Some(g) = gateway else { return stream };
    let mut u = stream.map(|u| *u).unwrap_or_default();
    (u.input_tokens, u.output_tokens, u.cached_tokens) = (g.input_tokens, g.output_tokens, g.cached_tokens);
    if g.model.is_some() {
        u.model = g.model;
    }
    u.cost_usd = g.cost_usd.or(u.cost_usd);
    Some(Box::new(u))
}

/// What a session's start reads and writes in its chamber before the
/// command is made.
struct Prepared<T> {
    dir: Dir,
    launch: kinds::Launch,
    /// `[provider] env`, with keys kept in files read now.
    provider_env: BTreeMap<String, String>,
    /// The agent's `PATH` (with `cryo-agent`'s folder first).
    path: String,
    prompt_rel: PathBuf,
    /// The prompt is too long for an argument: the agent reads the file.
    long: bool,
    /// `cryo-agent.log`, open for appending, its header written.
    log_file: std::fs::File,
    /// The session's credential at the gateway, if it goes through it.
    ticket: Option<T>,
    /// Why a known kind reaches its provider itself, if it does.
    own_way: Option<String>,
}

/// Reads the provider's keys, makes the kind's command line and writes the
/// files it needs (the prompt when long, the kind's config files when they
/// changed, the log's header).
fn prepare<G: Gateway>(s: &Session<'_, G>) -> super::Result<Prepared<G::Ticket>> {
    let (config, root) = (&s.jail.setup, s.jail.root);
    let provider_env = s.provider_env.clone();
    // Nothing in the chamber is followed if a link, nor opened if not a
    // plain file: the agent may have planted anything there.
    let dir = Dir::open(root).map_err(file)?;
    dir.make_dirs(Path::new(".cryo")).map_err(file)?;
    let prompt = s.turn.prompt;
    // A copy for people, and for prompts too long for an argument (which
    // the agent reads at once, so it is written first); not worth an fsync
    // (it is rewritten by the next wake).
    let prompt_rel = PathBuf::from(s.turn.prompt_file);
    let long = prompt.len() > kinds::MAX_PROMPT_ARG;
    if long {
        dir.write(&prompt_rel, prompt.as_bytes(), NewFile::QUICK).map_err(file)?;
    }
    let as_root = nix::unistd::geteuid().is_root();
    let mut path = std::env::var("PATH").unwrap_or_default();
    if let Some(dir) = &s.jail.places.agent_bin {
        path = format!("{}:{path}", dir.display());
    }
    let mcp = config.mcp.then(|| kinds::Mcp {
        program: crate::paths::find_program("cryo-agent", root, &path)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| "cryo-agent".into()),
    });
    let mut launch = kinds::command_line(&config.agent, root, &s.turn, as_root, mcp.as_ref(), &provider_env)?;
    let (ticket, own_way) = through_gateway(s, &mut launch, &provider_env)?;
    // The same every session, once the binary's place is known: written
    // only when it changes (not on every wake's path).
    for (rel, text) in &launch.files {
        let rel = Path::new(rel);
        if dir.read(rel, text.len() as u64).ok().as_deref() != Some(text.as_bytes()) {
            dir.write(rel, text.as_bytes(), NewFile::QUICK).map_err(|e| Error::File(format!("cannot write {e}")))?;
        }
    }
    // A CLI's workspace settings are read from where it works.
    if let Some((rel, keys)) = &launch.settings {
        match s.turn.workdir {
            Some(w) => kinds::merge_settings(&Dir::open(w).map_err(file)?, Path::new(rel), keys)?,
            None => kinds::merge_settings(&dir, Path::new(rel), keys)?,
        }
    }
    let mut log_file = dir.append(Path::new(AGENT_LOG)).map_err(|e| Error::File(format!("cannot open {e}")))?;
    {
        use std::io::Write;
        let holds = super::harden::holds(s.jail.mode, &s.jail.places.cgroups.describe());
        let _ = writeln!(
            log_file,
            "--- cryo session {} (wake {}, sandbox {}) at {} ---\n--- it holds: {holds} ---",
            s.number,
            s.wake_id,
            s.jail.mode.as_str(),
            s.local_time
        );
    }
    Ok(Prepared { dir, launch, provider_env, path, prompt_rel, long, log_file, ticket, own_way })
}

/// Points a known kind at the gateway, when its chamber uses it: its
/// ticket, and `launch` changed to reach the provider through it; or why
/// it reaches its provider itself (no key for cryod to keep), for
/// `cryo.log`. One that cannot be pointed (OpenCode's provider with no
/// base URL) is refused with one line rather than handed the key.
fn through_gateway<G: Gateway>(
    s: &Session<'_, G>,
    launch: &mut kinds::Launch,
    provider_env: &BTreeMap<String, String>,
) -> super::Result<(Option<G::Ticket>, Option<String>)> {
    let (config, root) = (&s.jail.setup, s.jail.root);
    let Some(through) = s.gateway.as_ref() else { return Ok((None, None)) };
    // A fallback account's key reaches its provider only through the
    // gateway: never the agent's environment.
    let fallback_refused = |why: &str| {
        Err(Error::Setting(format!(
            "this session bills the fallback account {}, whose key is given only through cryo's gateway, and {why}",
            through.account
        )))
    };
    if !config.gateway {
        return if through.fallback { fallback_refused("this chamber says gateway = false") } else { Ok((None, None)) };
    }
    let kind = kinds::Kind::of(&launch.program);
    // A known kind may take its key from cryod's environment, as its CLI
    // would; a command of the user's own only from `[provider] env` (one
    // given no key is given none of cryod's).
    let var = |name: &str| {
        provider_env
            .get(name)
            .cloned()
            .or_else(|| (kind != kinds::Kind::Other).then(|| std::env::var(name).ok()).flatten())
    };
    let mut plan = match super::upstream::plan(kind, root, &var, through.upstream.as_deref(), launch.model.as_deref())?
    {
        super::upstream::Way::Gateway(plan) => plan,
        super::upstream::Way::Own(_) if through.fallback => {
            return fallback_refused("its agent cannot be pointed at the gateway with it");
        }
        super::upstream::Way::Own(Some(why)) if let Some(held) = provider_env.keys().find(|k| holds_a_key(kind, k)) => {
            // Its CLI's own config names a key cryod does not hold (the
            // agent may have written it so) while cryod holds one: not
            // handed over.
            return Err(Error::Setting(format!(
                "{why}; but [provider] env holds {held}, which is not handed to the agent: make the CLI's config name \
                 that variable, or say gateway = false under [provider]"
            )));
        }
        super::upstream::Way::Own(why) => return Ok((None, why)),
    };
    if through.fallback && plan.from_file {
        // Its key goes to its own upstream only, never to one the
        // chamber's CLI file names for the chamber's own account.
        let Some(upstream) = through.upstream.clone() else {
            return fallback_refused(&format!(
                "its CLI's config names where its calls go: name its upstream under [providers.{}] in cryod.toml",
                through.account
            ));
        };
        plan.upstream = upstream;
        plan.from_file = false;
    }
    if plan.from_file && config.file_upstream.as_deref() != Some(plan.upstream.as_str()) {
        return Err(Error::Setting(format!(
            "the agent's own config now sends its model calls to {}, not where it did when the operator accepted \
             cryo.toml ({}); the key is not sent there until the operator runs `cryoctl chamber trust {}`",
            plan.upstream,
            config.file_upstream.as_deref().unwrap_or("nowhere named"),
            s.jail.chamber
        )));
    }
    let kept = if config.keep_exchanges { Some(kept_exchanges(root, s.number)?) } else { None };
    let ticket = through.gateway.open(plan.upstream.clone(), plan.auth.clone(), kept).ok_or_else(|| {
        Error::Unavailable(
            "cryo's provider gateway is not listening (see cryod's log); the agent is not started with the key".into(),
        )
    })?;
    super::upstream::point(&plan, launch, &ticket.base(), ticket.token(), provider_env);
    // Every other variable that holds a key (or the credential) holds the
    // token too: the agent's environment keeps none.
    let secret = plan.auth.secret();
    for (name, value) in provider_env {
        if (KEY_VARS.contains(&name.as_str()) || value == secret) && !launch.env.contains_key(name) {
            launch.env.insert(name.clone(), ticket.token().to_string());
        }
    }
    Ok((Some(ticket), None))
}

/// Whether a `[provider] env` variable holds a provider's key: a known
/// kind's key variable, or for Pi, whose providers name their own
/// (`OPENROUTER_API_KEY`, in a models.json the agent may rewrite), any
/// `…KEY…`, `…TOKEN…`, `…SECRET…`.
fn holds_a_key(kind: kinds::Kind, name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    KEY_VARS.contains(&name)
        || (kind == kinds::Kind::Pi && ["KEY", "TOKEN", "SECRET", "PASSWORD"].iter().any(|w| upper.contains(w)))
}

/// The variables that hold a provider's key, for the known kinds.
const KEY_VARS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
];

/// Where a session's exchanges are kept in its chamber.
pub(crate) const EXCHANGES: &str = ".cryo/exchanges";
/// Sessions whose exchanges are kept (the newest).
const KEEP_EXCHANGES: usize = 20;

/// Opens `.cryo/exchanges/SESSION.jsonl` for session `number` (no link
/// followed: the agent may have planted one), and forgets all but the
/// newest [`KEEP_EXCHANGES`] sessions' files.
fn kept_exchanges(root: &Path, number: u64) -> super::Result<std::fs::File> {
    let dir = Dir::open(root).map_err(file)?;
    let folder = Path::new(EXCHANGES);
    dir.make_dirs(folder).map_err(file)?;
    // Earlier sessions' files only (one the agent named ahead is not one),
    // and a bounded number removed per start (the agent may have planted
    // a million).
    let mut old: Vec<u64> = Vec::new();
    dir.each(folder, |name, _| {
        if let Some(n) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")?.parse::<u64>().ok())
            && n < number
        {
            old.push(n);
        }
    })
    .map_err(file)?;
    old.sort_unstable();
    let drop = old.len().saturating_sub(KEEP_EXCHANGES - 1).min(100);
    for n in &old[..drop] {
        let _ = dir.remove(&folder.join(format!("{n}.jsonl")));
    }
    dir.append(&folder.join(format!("{number}.jsonl"))).map_err(file)
}

/// The command that starts the agent confined (under its keeper on a
/// fleet node), its environment and where its output goes; and the logs
/// its stream writes (all but the raw events, opened once it runs).
fn command<G, T>(
    s: &Session<'_, G>,
    p: &Prepared<T>,
    notes: &mut Vec<String>,
) -> super::Result<(tokio::process::Command, Logs, Option<super::tree::Tree>)> {
    let (config, root, launch, log_file) = (&s.jail.setup, s.jail.root, &p.launch, &p.log_file);
    // Found here rather than by the child: a program looked up on a PATH
    // set for the child makes std fall back from posix_spawn (vfork) to
    // fork, which copies the daemon's page tables on every wake. One not
    // found is left to the spawn, whose error says why.
    let program =
        crate::paths::find_program(&launch.program, root, &p.path).unwrap_or_else(|| PathBuf::from(&launch.program));
    let what = format!("cryo {} session {}", s.jail.chamber, s.number);
    let run = Run {
        arg0: &launch.program,
        program,
        args: &launch.args,
        path: &p.path,
        door: Some(s.door),
        what: &what,
        readable: s.readable,
        stdin: launch.stdin.as_deref(),
    };
    let confined = confine(&s.jail, &p.provider_env, run, notes)?;
    let Confined { program, args, tmp, env: told, tree } = confined;
    let own_exe = || crate::paths::own_exe();
    // An ACP agent: cryod's own client drives it, outside its confinement.
    let (program, args) = match &launch.bridge {
        Some(bridge) => {
            let mut all: Vec<std::ffi::OsString> = bridge.iter().map(Into::into).collect();
            all.push("--".into());
            all.push(program.into_os_string());
            all.extend(args);
            (own_exe()?, all)
        }
        None => (program, args),
    };
    let clone = |f: &std::fs::File| f.try_clone().map_err(file);
    let mut cmd = match s.keeper {
        Some(k) => {
            let mut cmd = tokio::process::Command::new(own_exe()?);
            cmd.arg(super::keeper::ARG).arg(k.until.to_string());
            // A known kind's output comes back through the keeper.
            if launch.events.is_some() {
                cmd.arg(super::keeper::RELAY);
            }
            cmd.arg(&program).args(&args);
            cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
            cmd
        }
        None => {
            // The launchers name the agent (`Plan::arg0`): this process is
            // theirs, or cryod's client of an ACP agent.
            let mut cmd = tokio::process::Command::new(&program);
            cmd.args(&args).stdin(std::process::Stdio::null());
            // A known kind's event stream is read (transcript and usage);
            // anything else writes straight to the log.
            if launch.events.is_some() {
                cmd.stdout(std::process::Stdio::piped());
            } else {
                cmd.stdout(clone(log_file)?);
            }
            cmd
        }
    };
    // A confined agent gets only an allowlist of cryod's environment, and a
    // private TMPDIR.
    if let Some(tmp) = &tmp {
        cmd.env_clear().envs(sandbox::confined_env(tmp));
    }
    // What the launchers are told (removed before the agent runs).
    cmd.envs(told);
    if let Some(k) = s.keeper {
        // The owner's fence, for the agent's own records (traces).
        cmd.env("CRYO_FENCE", k.fence.to_string());
    }
    let logs = Logs { transcript: clone(log_file)?, stderr: clone(log_file)?, raw: None };
    if launch.read_logs && s.keeper.is_none() {
        cmd.stderr(std::process::Stdio::piped());
    } else {
        cmd.stderr(clone(log_file)?);
    }
    cmd.current_dir(s.turn.workdir.unwrap_or(root))
        .process_group(0)
        .kill_on_drop(false)
        .env("PATH", &p.path)
        .env("CRYO_SOCKET", s.door)
        .env("CRYO_CHAMBER", s.jail.chamber)
        .env("CRYO_CHAMBER_DIR", root)
        .env("CRYO_SESSION", s.number.to_string())
        .env("CRYO_WAKE_ID", s.wake_id)
        .env("CRYO_SESSION_TOKEN", s.token)
        .envs(&p.provider_env)
        .envs(&launch.env);
    if let Some(tz) = &config.timezone {
        cmd.env("TZ", tz);
    }
    Ok((cmd, logs, tree))
}

/// A file of the chamber that could not be reached, as its error says.
fn file(e: impl std::fmt::Display) -> Error {
    Error::File(e.to_string())
}

/// An agent started under a keeper: waits for its pid, then reads a known
/// kind's output as the keeper relays it (`read`), and reports the agent's
/// own status when the keeper tells it. Returns the pid and the keeper's
/// pipe, which the lease extends.
async fn kept_start(
    mut child: tokio::process::Child,
    read: Option<(crate::kinds::Kind, Option<String>, Logs)>,
    prices: Arc<crate::events::Prices>,
    tell: Tell,
    on_exit: Box<dyn FnOnce(Exit) + Send + Sync>,
) -> super::Result<(u32, std::fs::File)> {
    use tokio::io::AsyncBufReadExt;
    let keeper = |why: &str| Error::Spawn(why.to_string());
    let stdin = child.stdin.take().ok_or_else(|| keeper("the keeper has no stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| keeper("the keeper has no stdout"))?;
    // Lines of bytes: a relayed line need not be UTF-8.
    let mut lines = tokio::io::BufReader::new(stdout).split(b'\n');
    let first = tokio::time::timeout(KEEPER_START, lines.next_segment()).await;
    let first = first.map(|r| r.map(|l| l.map(|l| String::from_utf8_lossy(&l).into_owned())));
    let pid = match first {
        Ok(Ok(Some(l))) if l.starts_with("pid ") => l[4..].trim().parse::<u32>().map_err(|e| keeper(&e.to_string()))?,
        Ok(Ok(Some(l))) => {
            let _ = child.wait().await;
            return Err(keeper(&format!("the agent did not start ({l})")));
        }
        _ => {
            let _ = child.kill().await;
            return Err(keeper("the session's keeper did not start the agent"));
        }
    };
    let pipe = stdin.into_owned_fd().map_err(|e| keeper(&format!("the keeper's pipe: {e}")))?;
    // The relayed output, through pipes in memory, to the readers a child's
    // own output would go to.
    let (mut to_out, mut to_err, stream) = match read {
        Some((kind, model, logs)) => {
            let (out_w, out_r) = tokio::io::duplex(64 * 1024);
            let (err_w, err_r) = tokio::io::duplex(16 * 1024);
            let s = stream::read(out_r, Some(err_r), kind, model, logs, prices, tell);
            (Some(out_w), Some(err_w), Some(s))
        }
        None => (None, None, None),
    };
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut status = None;
        while let Ok(Some(mut l)) = lines.next_segment().await {
            // A relayed line goes on as it came, bytes and all.
            let to = match l.get(..4) {
                Some(b"out ") => &mut to_out,
                Some(b"err ") => &mut to_err,
                _ => {
                    status = super::keeper::status_from_report(&String::from_utf8_lossy(&l)).or(status);
                    continue;
                }
            };
            if let Some(w) = to {
                l.push(b'\n');
                let _ = w.write_all(&l[4..]).await;
            }
        }
        drop((to_out, to_err));
        let _ = child.wait().await;
        use std::os::unix::process::ExitStatusExt;
        let status = status.unwrap_or_else(|| std::process::ExitStatus::from_raw(Signal::SIGKILL as i32));
        let (usage, limited) = match stream {
            Some(s) => s.finish().await,
            None => (None, None),
        };
        on_exit(Exit { status, usage, limited });
    });
    Ok((pid, std::fs::File::from(pipe)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// For Pi, whose providers name their own key variables in a file the
    /// agent may rewrite, any variable named like a secret counts as a key;
    /// for the other kinds, their own key variables only.
    #[test]
    fn which_variables_hold_a_key() {
        assert!(holds_a_key(kinds::Kind::Pi, "OPENROUTER_API_KEY") && holds_a_key(kinds::Kind::Pi, "local_token"));
        assert!(holds_a_key(kinds::Kind::Claude, "ANTHROPIC_API_KEY"));
        assert!(!holds_a_key(kinds::Kind::Claude, "GITHUB_TOKEN"), "a tool's token is the agent's to use");
        assert!(!holds_a_key(kinds::Kind::Pi, "PI_CODING_AGENT_DIR"));
    }

    /// The agent plants a link where cryod keeps its exchanges (the folder,
    /// or the session's file): nothing is opened through it, nothing is
    /// written outside the chamber, and earlier files are kept as they were.
    #[test]
    fn kept_exchanges_follow_no_link_the_agent_planted() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join(".cryo")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join(EXCHANGES)).unwrap();
        assert!(kept_exchanges(root.path(), 1).is_err(), "a linked folder is refused");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);

        std::fs::remove_file(root.path().join(EXCHANGES)).unwrap();
        std::fs::create_dir(root.path().join(EXCHANGES)).unwrap();
        let target = outside.path().join("victim");
        std::fs::write(&target, "kept\n").unwrap();
        std::os::unix::fs::symlink(&target, root.path().join(EXCHANGES).join("2.jsonl")).unwrap();
        assert!(kept_exchanges(root.path(), 2).is_err(), "a linked file is refused");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept\n");
        // A real session's file opens; a name planted ahead is not pruned as old.
        std::fs::write(root.path().join(EXCHANGES).join("999.jsonl"), "").unwrap();
        assert!(kept_exchanges(root.path(), 3).is_ok());
        assert!(root.path().join(EXCHANGES).join("3.jsonl").is_file());
        assert!(root.path().join(EXCHANGES).join("999.jsonl").is_file());
    }
}
