//! Reading `cryo.toml`: the file read without following a link, its keys
//! as written ([`Raw`], the seed system's legacy ones warned about), each
//! checked and given its default; a bad one is refused with the file, the
//! line and the key.

use std::path::{Path, PathBuf};

use chrono_tz::Tz;
use serde::Deserialize;

use super::error::{ConfigError, Lines};
use super::git::{Git, Repo};
use super::reach::{RawEnvFile, RawProvider, folders, inline_keys, provider, reach, seed_provider};
use super::{
    Chain, ChamberConfig, DEFAULT_AGENT, DEFAULT_LOOP_AFTER, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_SESSION_SECS,
    DEFAULT_PRECHECK_SECS, GithubSync, Loaded, Watch, ZulipSync, approvals, git,
};
use crate::chamber::FileError;
use cryo_core::chamber::handoff::OnEnd;

use crate::config::LEGACY_KEYS;

/// Every table of `cryo.toml` and the keys it takes (the seed system's
/// legacy keys left out: [`LEGACY_KEYS`]), from the code's own definitions
/// (the reference's list is checked against this).
pub fn key_lists() -> Vec<(&'static str, Vec<String>)> {
    use crate::config::fields_of;
    let top = fields_of::<Raw>().into_iter().filter(|k| !LEGACY_KEYS.contains(&k.as_str())).collect();
    vec![
        ("", top),
        ("[provider]", fields_of::<RawProvider>()),
        ("[provider.env] NAME = { ... }", fields_of::<RawEnvFile>()),
        ("[budget]", fields_of::<crate::config::Budget>()),
        ("[approvals]", fields_of::<approvals::RawApprovals>()),
        ("[git]", fields_of::<git::RawGit>()),
        ("[history]", fields_of::<RawHistory>()),
        ("[[on_end]]", fields_of::<RawOnEnd>()),
        ("[sync.zulip]", fields_of::<ZulipSync>()),
        ("[sync.github]", fields_of::<GithubSync>()),
    ]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    agent: Option<String>,
    max_session_duration: Option<u64>,
    stall_after: Option<String>,
    loop_after: Option<u32>,
    keep_exchanges: Option<bool>,
    timezone: Option<String>,
    watch_dirs: Option<Vec<String>>,
    provider: Option<RawProvider>,
    max_attempts: Option<u32>,
    mcp: Option<bool>,
    budget: Option<crate::config::Budget>,
    session: Option<String>,
    resume_max_age: Option<String>,
    resume_max_sessions: Option<u32>,
    resume_max_tokens: Option<u64>,
    precheck: Option<String>,
    precheck_timeout: Option<u64>,
    on_end: Option<Vec<RawOnEnd>>,
    expect_activity_within: Option<String>,
    sandbox: Option<crate::config::Sandbox>,
    network: Option<crate::config::Network>,
    writable: Option<Vec<String>>,
    readable: Option<Vec<String>>,
    memory_max: Option<String>,
    cpu_weight: Option<u32>,
    sync: Option<RawSync>,
    history: Option<RawHistory>,
    approvals: Option<approvals::RawApprovals>,
    git: Option<git::RawGit>,
    // Legacy keys (see LEGACY_KEYS): any value is accepted.
    max_retries: Option<toml::Value>,
    watch_inbox: Option<toml::Value>,
    fallback_alert: Option<toml::Value>,
    report_time: Option<toml::Value>,
    report_interval: Option<toml::Value>,
    rotate_on: Option<toml::Value>,
    providers: Option<toml::Value>,
    zulip_poll_interval: Option<toml::Value>,
    gh_poll_interval: Option<toml::Value>,
    web_host: Option<toml::Value>,
    web_port: Option<toml::Value>,
    wait_timeout: Option<toml::Value>,
    timeout: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOnEnd {
    chamber: toml::Spanned<String>,
    when: toml::Spanned<String>,
    message: Option<toml::Spanned<String>>,
    max_per_hour: Option<toml::Spanned<u32>>,
}

/// `[history]` in `cryo.toml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHistory {
    keep_done: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSync {
    zulip: Option<ZulipSync>,
    github: Option<GithubSync>,
}

/// Reads `<dir>/cryo.toml`. A missing file gives the defaults.
pub fn load(dir: &Path, system_tz: Tz) -> Result<Loaded, ConfigError> {
    load_in(&open(dir)?, system_tz)
}

/// [`load`], from the chamber folder `d`, held open.
pub fn load_in(d: &crate::chamber::Dir, system_tz: Tz) -> Result<Loaded, ConfigError> {
    let text = read_text_in(d)?;
    parse(&d.path().join(FILE), &text, d.path(), system_tz)
}

/// The file's name in a chamber.
pub const FILE: &str = "cryo.toml";

/// Largest `cryo.toml` read (a configuration, not a data file).
pub const MAX_CONFIG_BYTES: usize = 256 * 1024;

/// The text of the chamber `dir`'s `cryo.toml`, within
/// [`MAX_CONFIG_BYTES`]; a missing file is empty (the defaults). A link, a
/// FIFO or a folder in its place is refused without being followed or
/// opened. Errors are one line naming it.
pub fn read_text(dir: &Path) -> Result<String, ConfigError> {
    read_text_in(&open(dir)?)
}

/// The chamber folder `dir`, opened: a missing one or another thing in its
/// place is the config's error.
pub fn open(dir: &Path) -> Result<crate::chamber::Dir, ConfigError> {
    crate::chamber::Dir::open(dir).map_err(|e| match e {
        FileError::Missing(_) => ConfigError::FolderMissing(dir.to_path_buf()),
        FileError::NotPlain { .. } => ConfigError::FolderReplaced(dir.to_path_buf()),
        e => ConfigError::File(e),
    })
}

/// [`read_text`], from the chamber folder `d`, held open.
pub fn read_text_in(d: &crate::chamber::Dir) -> Result<String, ConfigError> {
    match d.read_if(Path::new(FILE), MAX_CONFIG_BYTES as u64) {
        Ok(Some(bytes)) => String::from_utf8(bytes).map_err(|_| ConfigError::NotUtf8(d.path().join(FILE))),
        Ok(None) => Ok(String::new()),
        Err(e @ FileError::Io { .. }) => Err(ConfigError::Unreadable(e)),
        Err(e) => Err(ConfigError::File(e)),
    }
}

/// `text` with the lines that hold only a comment emptied, their line
/// breaks kept (so every line keeps its number). A scaffolded `cryo.toml` is
/// 9 KB, nearly all comments, and lexing them was 80% of its parse, in a
/// start that parses every chamber's. A file with a multi-line string, where
/// a line may begin with `#` inside one, is left whole, and so is a comment
/// the parser would refuse (a control character in it).
fn without_comment_lines(text: &str) -> std::borrow::Cow<'_, str> {
    let b = text.as_bytes();
    if memchr::memmem::find(b, b"\"\"\"").is_some() || memchr::memmem::find(b, b"'''").is_some() {
        return text.into();
    }
    // A line (without its `\n` or `\r\n`) is a comment's alone when its
    // first mark is `#` and it holds no byte the parser might refuse there:
    // an ASCII control but a tab, or the lead byte of a C1 control.
    let comment = |line: &[u8], broken: bool| {
        // A `\r` is part of a line break only before a `\n`.
        let line = if broken { line.strip_suffix(b"\r").unwrap_or(line) } else { line };
        let body = &line[line.iter().take_while(|c| matches!(c, b' ' | b'\t')).count()..];
        // Folded without an early exit, so the compiler checks many bytes
        // at once (the scan was a third of a scaffolded file's parse).
        let refused = |c: u8| (c < 0x20 && c != b'\t') | (c == 0x7f) | (c == 0xc2);
        body.first() == Some(&b'#') && !body.iter().fold(false, |any, &c| any | refused(c))
    };
    // Unchanged runs are copied whole; each comment's text is left out, its
    // line break kept.
    let (mut kept, mut from, mut start) = (String::new(), 0, 0);
    for end in memchr::memchr_iter(b'\n', b).chain([b.len()]) {
        if start <= end && comment(&b[start..end], end < b.len()) {
            kept.push_str(&text[from..start]);
            from = end;
        }
        start = end + 1;
    }
    if from == 0 {
        return text.into();
    }
    kept.push_str(&text[from..]);
    kept.into()
}

/// Parses the text of a `cryo.toml` at `path` for the chamber in `dir`.
pub fn parse(path: &Path, text: &str, dir: &Path, system_tz: Tz) -> Result<Loaded, ConfigError> {
    let text = &*without_comment_lines(text);
    let lines = Lines { path, text };
    let table: toml::Table = lines.toml()?;
    // `[[on_end]]` keeps its spans (where each names its chamber): only the
    // text has them.
    let mut raw: Raw = if table.contains_key("on_end") { lines.toml()? } else { lines.toml_of_table(&table)? };
    let mut trust = crate::chamber::trust::digests(&table);
    drop(table);
    let mut warnings = legacy_warnings(&raw, &lines);
    let (timezone, timezone_set) = timezone(raw.timezone.as_deref(), system_tz, &lines)?;
    let continuity = continuity(&raw, &lines)?;
    let (precheck, precheck_timeout) = precheck(&raw, &lines)?;
    let limits = crate::config::Limits { memory_max: raw.memory_max.take(), cpu_weight: raw.cpu_weight };
    if let Err((key, why)) = limits.check() {
        return Err(lines.invalid(key, format!("key `{key}`: {why}")));
    }
    if raw.sandbox == Some(crate::config::Sandbox::Landlock) && raw.network == Some(crate::config::Network::Gateway) {
        return Err(lines.invalid("network", format!("key `network`: {}", crate::config::NETWORK_LANDLOCK)));
    }
    let on_end = on_end(raw.on_end.take().unwrap_or_default(), path, text)?;
    let expect_activity_within = expect_activity_within(raw.expect_activity_within.as_deref(), &lines)?;
    let watch = watch(&raw, &lines)?;
    let agent = agent(raw.agent.take(), &lines)?;
    let watch_dirs = watch_dirs(raw.watch_dirs.take(), dir, &lines)?;
    check_sync(raw.sync.as_ref(), &lines)?;
    let max_attempts = max_attempts(raw.max_attempts, &lines)?;
    let keep_done = keep_done(raw.history.take(), &lines)?;
    let approvals = raw.approvals.take().map(|a| approvals::parse(a, &lines)).transpose()?;
    // The seed system's `[[providers]]` (it used the first): `[provider]`.
    let seed_provider = raw.provider.is_none().then(|| seed_provider(raw.providers.as_ref(), &lines)).transpose()?;
    let provider = provider(raw.provider.take().or(seed_provider.flatten()), dir, &lines)?;
    warnings.extend(inline_keys(&provider, &lines));
    let writable = folders("writable", raw.writable.take(), dir, &lines)?;
    let readable = folders("readable", raw.readable.take(), dir, &lines)?;
    let github = raw.sync.as_ref().is_some_and(|s| s.github.is_some());
    let git = raw.git.take().map(|g| git::parse(g, dir, github, &lines)).transpose()?;
    if let Some(Git { repo: Repo::Path(p), .. }) = &git
        && let Some(w) = git::agent_can_write(p, dir, &writable)
    {
        let why = format!(
            "{} is in {}, which the agent can write: name the repository it works on, not one of its own",
            p.display(),
            w.display()
        );
        return Err(lines.invalid("repo", format!("key `git.repo`: {why}")));
    }
    let reach = reach(dir, &writable, &readable, &provider);
    let led = reach.iter().map(|r| (r.key.as_str(), r.named.as_path(), r.resolved.as_path()));
    crate::chamber::trust::fold_resolved(&mut trust, led);
    let sync = raw.sync;
    Ok(Loaded {
        config: ChamberConfig {
            agent,
            max_session_duration: raw.max_session_duration.unwrap_or(DEFAULT_MAX_SESSION_SECS),
            watch,
            keep_exchanges: raw.keep_exchanges.unwrap_or(false),
            timezone,
            timezone_set,
            watch_dirs,
            provider_name: provider.name,
            provider_env: provider.env,
            provider_env_files: provider.env_files,
            gateway: provider.gateway.unwrap_or(true),
            max_attempts,
            keep_done,
            mcp: raw.mcp.unwrap_or(true),
            budget: raw.budget.unwrap_or_default(),
            approvals: approvals.map(Box::new),
            git: git.map(Box::new),
            continuity,
            precheck,
            precheck_timeout,
            on_end,
            expect_activity_within,
            sandbox: raw.sandbox,
            network: raw.network.unwrap_or_default(),
            writable,
            readable,
            reach,
            file_upstream: None,
            limits,
            zulip: sync.as_ref().and_then(|s| s.zulip.clone()).map(Box::new),
            github: sync.and_then(|s| s.github).map(Box::new),
        },
        warnings,
        trust,
    })
}

/// One warning for each key only the seed system used.
fn legacy_warnings(raw: &Raw, lines: &Lines) -> Vec<String> {
    let present = [
        raw.max_retries.is_some(),
        raw.watch_inbox.is_some(),
        raw.fallback_alert.is_some(),
        raw.report_time.is_some(),
        raw.report_interval.is_some(),
        raw.rotate_on.is_some(),
        raw.providers.is_some(),
        raw.zulip_poll_interval.is_some(),
        raw.gh_poll_interval.is_some(),
        raw.web_host.is_some(),
        raw.web_port.is_some(),
        raw.wait_timeout.is_some(),
        raw.timeout.is_some(),
    ];
    LEGACY_KEYS
        .iter()
        .zip(present)
        .filter(|(_, on)| *on)
        .map(|(key, _)| match *key {
            "providers" if raw.provider.is_none() => format!(
                "{}: `[[providers]]` is the seed system's (cryochamber's): its first entry is used as [provider]",
                lines.at(key)
            ),
            _ => format!("{}: key `{key}` is from an older cryochamber and is ignored", lines.at(key)),
        })
        .collect()
}

/// `timezone`, and whether the file set it (else the system's zone).
fn timezone(name: Option<&str>, system_tz: Tz, lines: &Lines) -> Result<(Tz, bool), ConfigError> {
    match name {
        None | Some("") => Ok((system_tz, false)),
        Some(name) => name.parse::<Tz>().map(|tz| (tz, true)).map_err(|_| {
            lines.invalid(
                "timezone",
                format!("key `timezone`: {name:?} is not an IANA time zone (such as \"Europe/Berlin\" or \"UTC\")"),
            )
        }),
    }
}

/// `precheck` (trimmed; none if empty) and `precheck_timeout`.
fn precheck(raw: &Raw, lines: &Lines) -> Result<(Option<String>, u64), ConfigError> {
    let precheck = raw.precheck.clone().map(|p| p.trim().to_string()).filter(|p| !p.is_empty());
    let timeout = raw.precheck_timeout.unwrap_or(DEFAULT_PRECHECK_SECS);
    if !(1..=3600).contains(&timeout) {
        return Err(
            lines.invalid("precheck_timeout", format!("key `precheck_timeout`: {timeout} seconds is outside 1..=3600"))
        );
    }
    Ok((precheck, timeout))
}

/// `expect_activity_within`: a duration of at least a second.
fn expect_activity_within(raw: Option<&str>, lines: &Lines) -> Result<Option<chrono::Duration>, ConfigError> {
    let Some(w) = raw else { return Ok(None) };
    let d = cryo_core::time::parse_duration(w).filter(|d| *d >= chrono::Duration::seconds(1)).ok_or_else(|| {
        lines.invalid(
            "expect_activity_within",
            format!("key `expect_activity_within`: {w:?} is not a duration (such as \"2d\")"),
        )
    })?;
    Ok(Some(d))
}

/// `stall_after` (a duration) and `loop_after` (0: never).
fn watch(raw: &Raw, lines: &Lines) -> Result<Watch, ConfigError> {
    let stall_after = match raw.stall_after.as_deref() {
        None => None,
        Some(w) => {
            let d =
                cryo_core::time::parse_duration(w).filter(|d| *d >= chrono::Duration::seconds(1)).ok_or_else(|| {
                    lines
                        .invalid("stall_after", format!("key `stall_after`: {w:?} is not a duration (such as \"20m\")"))
                })?;
            Some(d.to_std().unwrap_or_default())
        }
    };
    let loop_after = match raw.loop_after {
        None => Some(DEFAULT_LOOP_AFTER),
        Some(0) => None,
        Some(1) => {
            return Err(lines.invalid(
                "loop_after",
                "key `loop_after`: 1 would end a session at its first tool call (say 0 for never)".into(),
            ));
        }
        Some(n) => Some(n),
    };
    Ok(Watch { stall_after, loop_after })
}

/// `agent`: the agent's command, [`DEFAULT_AGENT`] unless set.
fn agent(raw: Option<String>, lines: &Lines) -> Result<String, ConfigError> {
    let agent = raw.unwrap_or_else(|| DEFAULT_AGENT.to_string());
    if agent.trim().is_empty() {
        return Err(lines.invalid("agent", "key `agent` is empty: name the agent command".into()));
    }
    Ok(agent)
}

/// `watch_dirs`, absolute: a chamber watches only its own folders.
fn watch_dirs(raw: Option<Vec<String>>, dir: &Path, lines: &Lines) -> Result<Vec<PathBuf>, ConfigError> {
    let watch_dirs = raw.unwrap_or_else(|| vec!["messages/inbox".to_string()]);
    if let Some(bad) = watch_dirs.iter().find(|d| {
        let p = Path::new(d.as_str());
        d.trim().is_empty() || p.is_absolute() || p.components().any(|c| matches!(c, std::path::Component::ParentDir))
    }) {
        return Err(lines.invalid(
            "watch_dirs",
            format!("key `watch_dirs`: {bad:?} is not a folder inside the chamber (give a relative path without `..`)"),
        ));
    }
    Ok(watch_dirs.into_iter().map(|d| dir.join(d)).collect())
}

/// `[sync.github]` names exactly one discussion or issue.
fn check_sync(sync: Option<&RawSync>, lines: &Lines) -> Result<(), ConfigError> {
    match sync.and_then(|s| s.github.as_ref()) {
        Some(gh) if gh.discussion.is_some() == gh.issue.is_some() => {
            Err(lines.invalid("[sync.github]", "[sync.github] needs exactly one of `discussion` and `issue`".into()))
        }
        _ => Ok(()),
    }
}

/// `[history] keep_done`: how many done TODOs `todo.json` keeps before they
/// move to its archive (at most [`MAX_TODOS`](cryo_core::todo::MAX_TODOS)).
fn keep_done(raw: Option<RawHistory>, lines: &Lines) -> Result<usize, ConfigError> {
    let Some(keep) = raw.and_then(|h| h.keep_done) else { return Ok(cryo_core::todo::DEFAULT_KEEP_DONE) };
    let max = cryo_core::todo::MAX_TODOS;
    if keep as usize > max {
        return Err(lines.invalid("keep_done", format!("key `history.keep_done`: {keep} is over the limit of {max}")));
    }
    Ok(keep as usize)
}

/// `max_attempts`, at most 100.
fn max_attempts(raw: Option<u32>, lines: &Lines) -> Result<u32, ConfigError> {
    let max_attempts = raw.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if max_attempts > 100 {
        return Err(
            lines.invalid("max_attempts", format!("key `max_attempts`: {max_attempts} is over the limit of 100"))
        );
    }
    Ok(max_attempts)
}

/// `[[on_end]]` tables, each checked where it stands (`file:line`). Whether
/// its chamber exists is for the caller, which knows the registry.
fn on_end(raw: Vec<RawOnEnd>, path: &Path, text: &str) -> Result<Vec<Chain>, ConfigError> {
    let at = |span: std::ops::Range<usize>| {
        let line = text.get(..span.start).unwrap_or("").matches('\n').count() + 1;
        format!("{}:{line}", path.display())
    };
    let mut out = Vec::new();
    for r in raw {
        let here = at(r.chamber.span());
        let chamber = r.chamber.into_inner().trim().to_string();
        if chamber.is_empty() {
            let message = "[[on_end]] `chamber` is empty: name the chamber to hand on to".into();
            return Err(ConfigError::Invalid { at: here, message });
        }
        let when =
            cryo_core::chamber::handoff::When::parse(r.when.get_ref().trim()).ok_or_else(|| ConfigError::Invalid {
                at: at(r.when.span()),
                message: format!(
                    "[[on_end]] `when`: {:?} is none of \"completed\", \"hibernated\", \"failed\", \"any\"",
                    r.when.get_ref()
                ),
            })?;
        let message = match r.message {
            Some(m) => {
                if let Some(bad) = cryo_core::chamber::handoff::unknown_placeholder(m.get_ref()) {
                    let known: Vec<String> =
                        cryo_core::chamber::handoff::PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect();
                    return Err(ConfigError::Invalid {
                        at: at(m.span()),
                        message: format!(
                            "[[on_end]] `message`: {{{bad}}} is not a placeholder (use {})",
                            known.join(", ")
                        ),
                    });
                }
                Some(m.into_inner())
            }
            None => None,
        };
        let max_per_hour = match r.max_per_hour {
            Some(n) if *n.get_ref() == 0 || *n.get_ref() > 60 => {
                let message = format!("[[on_end]] `max_per_hour`: {} is outside 1..=60", n.get_ref());
                return Err(ConfigError::Invalid { at: at(n.span()), message });
            }
            Some(n) => n.into_inner(),
            None => cryo_core::chamber::handoff::DEFAULT_HANDOFFS_PER_HOUR,
        };
        out.push(Chain { link: OnEnd { chamber, when, message, max_per_hour }, at: here });
    }
    Ok(out)
}

/// `session`, `resume_max_age`, `resume_max_sessions`, `resume_max_tokens`.
fn continuity(raw: &Raw, lines: &Lines) -> Result<cryo_core::session::Continuity, ConfigError> {
    use cryo_core::session::Continuity;
    let resume = match raw.session.as_deref() {
        None | Some("fresh") => false,
        Some("resume") => true,
        Some(other) => {
            return Err(
                lines.invalid("session", format!("key `session`: {other:?} is neither \"fresh\" nor \"resume\""))
            );
        }
    };
    let mut c = Continuity { resume, ..Continuity::default() };
    if let Some(age) = raw.resume_max_age.as_deref() {
        c.max_age =
            cryo_core::time::parse_duration(age).filter(|d| *d > chrono::Duration::zero()).ok_or_else(|| {
                lines.invalid(
                    "resume_max_age",
                    format!("key `resume_max_age`: {age:?} is not a duration (such as \"90m\" or \"4h\")"),
                )
            })?;
    }
    if let Some(n) = raw.resume_max_sessions {
        if n == 0 {
            return Err(lines.invalid(
                "resume_max_sessions",
                "key `resume_max_sessions`: 0 would never resume (say session = \"fresh\")".into(),
            ));
        }
        c.max_sessions = n;
    }
    c.max_tokens = raw.resume_max_tokens;
    Ok(c)
}
