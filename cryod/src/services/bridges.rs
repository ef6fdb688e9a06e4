//! A chamber's sync bridges, as its supervisor sees them: which run (those
//! configured in `cryo.toml`, while the chamber is started), the chamber's
//! files as a [`cryo_sync::Local`], and their status.
//!
//! Each bridge is its own task (`cryo_sync::bridge::run`); the supervisor
//! reconciles them after every event, tells them when the outbox changed,
//! and republishes its snapshot when their status changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use cryo_core::message::Message;
use cryo_sync::bridge::{Command, CommandError, StatusCell};
use cryo_sync::creds::{self, Zuliprc};
use cryo_sync::{Incoming, Outgoing, Status, github, zulip};
use tokio::sync::{mpsc, oneshot};

use crate::chamber::config::{ChamberConfig, GithubSync, ZulipSync};
use crate::chamber::mailbox::{Folder, Mailbox};

/// The default GitHub poll, in seconds (GitHub has no long poll for
/// comments; conditional requests that find nothing cost no rate limit).
const GITHUB_POLL_SECS: u64 = 30;

/// The chamber's files, as a bridge sees them.
struct ChamberFiles {
    root: PathBuf,
    tz: Tz,
}

impl cryo_sync::Local for ChamberFiles {
    fn root(&self) -> &Path {
        &self.root
    }

    fn deliver(&self, bridge: &str, m: &Incoming) -> std::io::Result<bool> {
        let mailbox = Mailbox::new(&self.root, self.tz);
        let unique = format!("{bridge}-{}", m.remote_id);
        if mailbox.has_incoming(&unique)? {
            return Ok(false);
        }
        let mut meta = std::collections::BTreeMap::new();
        meta.insert(format!("{bridge}_id"), m.remote_id.clone());
        // A sender named like cryo is marked when the inbox is read, as for
        // any writer of the inbox.
        let msg = Message {
            from: m.from.clone(),
            subject: m.subject.clone(),
            timestamp: Some(m.at),
            question: false,
            meta,
            body: m.body.clone(),
        };
        mailbox.write_as(Folder::Inbox, &msg, m.at, &unique)?;
        Ok(true)
    }

    fn outbox(&self) -> Vec<Outgoing> {
        let mailbox = Mailbox::new(&self.root, self.tz);
        mailbox
            .read(Folder::Outbox)
            .unwrap_or_default()
            .into_iter()
            .map(|s| Outgoing {
                name: s.name,
                from: s.message.from,
                subject: s.message.subject,
                body: s.message.body,
                question: s.message.question,
            })
            .collect()
    }

    fn archive_outbox(&self, name: &str) -> std::io::Result<()> {
        Mailbox::new(&self.root, self.tz).archive_outbox(name)
    }
}

/// What a bridge is built from; a change restarts it.
#[derive(Debug, Clone, PartialEq)]
enum Spec {
    Zulip(ZulipSync),
    Github(GithubSync),
}

impl Spec {
    fn name(&self) -> &'static str {
        match self {
            Spec::Zulip(_) => "zulip",
            Spec::Github(_) => "github",
        }
    }
}

struct Running {
    spec: Spec,
    status: StatusCell,
    /// Dropped to stop the task; `None` for a bridge that could not start.
    tx: Option<mpsc::UnboundedSender<Command>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// A chamber's bridges.
pub struct Bridges {
    running: Vec<Running>,
    /// Called when a bridge's status changes.
    changed: Arc<dyn Fn() + Send + Sync>,
    /// Where a `~/` in a credentials path points.
    home: PathBuf,
}

impl Bridges {
    /// No bridge runs.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    pub fn new(changed: Arc<dyn Fn() + Send + Sync>) -> Bridges {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        Bridges { running: Vec::new(), changed, home }
    }

    /// Runs the bridges `config` asks for while `active`, and only those.
    pub fn reconcile(&mut self, root: &Path, config: Option<&ChamberConfig>, active: bool) {
        let wanted: Vec<Spec> = match config.filter(|_| active) {
            Some(c) => c
                .zulip
                .as_deref()
                .cloned()
                .map(Spec::Zulip)
                .into_iter()
                .chain(c.github.as_deref().cloned().map(Spec::Github))
                .collect(),
            None => Vec::new(),
        };
        if self.running.len() == wanted.len() && self.running.iter().zip(&wanted).all(|(r, w)| &r.spec == w) {
            return;
        }
        self.running.clear();
        let tz = config.map(|c| c.timezone).unwrap_or(chrono_tz::UTC);
        let all: Vec<&'static str> = wanted.iter().map(Spec::name).collect();
        for spec in wanted {
            self.running.push(self.start(root, tz, spec, all.clone()));
        }
    }

    fn start(&self, root: &Path, tz: Tz, spec: Spec, all: Vec<&'static str>) -> Running {
        let status = StatusCell::new(spec.name(), self.changed.clone());
        let local = Arc::new(ChamberFiles { root: root.to_path_buf(), tz });
        let (tx, rx) = mpsc::unbounded_channel();
        let task = match &spec {
            Spec::Zulip(z) => zulip_config(z, &self.home, root).map(|cfg| {
                tokio::spawn(cryo_sync::bridge::run(zulip::Zulip::new(cfg), local, all, status.clone(), rx))
            }),
            Spec::Github(g) => github_config(g, &self.home, root).map(|cfg| {
                tokio::spawn(cryo_sync::bridge::run(github::Github::new(cfg), local, all, status.clone(), rx))
            }),
        };
        match task {
            Ok(task) => Running { spec, status, tx: Some(tx), task: Some(task) },
            Err(reason) => {
                tracing::warn!(bridge = spec.name(), error = %reason, "sync bridge not started");
                status.update(|s| {
                    s.state = "stopped".into();
                    s.last_error = Some(reason.to_string());
                });
                Running { spec, status, tx: None, task: None }
            }
        }
    }

    /// Tells every bridge the outbox changed.
    pub fn outbox_changed(&self) {
        for r in &self.running {
            if let Some(tx) = &r.tx {
                let _ = tx.send(Command::OutboxChanged);
            }
        }
    }

    /// The bridges' status cells (to read after an answer comes).
    pub fn cells(&self) -> Vec<StatusCell> {
        self.running.iter().map(|r| r.status.clone()).collect()
    }

    pub fn statuses(&self) -> Vec<Status> {
        self.running.iter().map(|r| r.status.get()).collect()
    }

    /// Asks every bridge to pull (or push) now. A stopped bridge is started
    /// again first (its credentials may have been fixed). Returns, per
    /// bridge, where its answer will come.
    pub fn command(
        &mut self,
        root: &Path,
        tz: Tz,
        pull: bool,
    ) -> Vec<(String, oneshot::Receiver<Result<u64, CommandError>>)> {
        let all: Vec<&'static str> = self.running.iter().map(|r| r.spec.name()).collect();
        for i in 0..self.running.len() {
            if self.running[i].status.get().state == "stopped" {
                let spec = self.running[i].spec.clone();
                self.running[i] = self.start(root, tz, spec, all.clone());
            }
        }
        self.running
            .iter()
            .map(|r| {
                let (tx, rx) = oneshot::channel();
                let cmd = if pull { Command::Pull(tx) } else { Command::Push(tx) };
                match &r.tx {
                    Some(t) => {
                        if let Err(mpsc::error::SendError(Command::Pull(tx) | Command::Push(tx))) = t.send(cmd) {
                            let _ = tx.send(Err(CommandError::Ended));
                        }
                    }
                    None => {
                        if let Command::Pull(tx) | Command::Push(tx) = cmd {
                            let why = r.status.get().last_error.unwrap_or_default();
                            let _ = tx.send(Err(CommandError::Stopped(why)));
                        }
                    }
                }
                (r.spec.name().to_string(), rx)
            })
            .collect()
    }
}

/// Why a bridge could not start: its `[sync.*]` table or its credentials.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The credentials file cannot be read, is open to others, or does not
    /// parse (cryo_sync's own line).
    #[error("{0}")]
    Credentials(creds::CredentialsError),
    /// No `site` in `[sync.zulip]` nor in the zuliprc.
    #[error("no Zulip site: set `site` in [sync.zulip] or in the zuliprc")]
    NoSite,
    /// The Zulip site is not http(s).
    #[error("the Zulip site {0:?} is not an http(s) URL")]
    Site(String),
    /// `repo` is not `owner/name`.
    #[error("[sync.github] repo {0:?} is not \"owner/name\"")]
    Repo(String),
    /// Neither or both of `discussion` and `issue`.
    #[error("[sync.github] needs exactly one of `discussion` and `issue`")]
    Target,
    /// No `token_file`.
    #[error("[sync.github] needs `token_file` (a file holding the token, mode 0600)")]
    NoTokenFile,
    /// The token file holds nothing.
    #[error("the token file {} is empty", .0.display())]
    EmptyToken(PathBuf),
    /// `api_url` is not http(s).
    #[error("[sync.github] api_url {0:?} is not an http(s) URL")]
    ApiUrl(String),
}

fn zulip_config(z: &ZulipSync, home: &Path, root: &Path) -> Result<zulip::Config, Error> {
    let path = creds::expand(&z.credentials, home, root);
    let text = creds::read_secret(&path).map_err(Error::Credentials)?;
    let rc = Zuliprc::parse(&text, &path).map_err(Error::Credentials)?;
    let site = z.site.clone().or(rc.site).ok_or(Error::NoSite)?;
    if !(site.starts_with("https://") || site.starts_with("http://")) {
        return Err(Error::Site(site));
    }
    Ok(zulip::Config { site, email: rc.email, key: rc.key, stream: z.stream.clone(), topic: z.topic.clone() })
}

pub fn github_config(g: &GithubSync, home: &Path, root: &Path) -> Result<github::Config, Error> {
    let (owner, repo) = g
        .repo
        .split_once('/')
        .filter(|(o, r)| !o.is_empty() && !r.is_empty() && !r.contains('/'))
        .ok_or_else(|| Error::Repo(g.repo.clone()))?;
    let target = match (g.issue, g.discussion) {
        (Some(n), None) => github::Target::Issue(n),
        (None, Some(n)) => github::Target::Discussion(n),
        _ => return Err(Error::Target),
    };
    let file = g.token_file.as_deref().ok_or(Error::NoTokenFile)?;
    let path = creds::expand(file, home, root);
    let token = creds::read_secret(&path).map_err(Error::Credentials)?.trim().to_string();
    if token.is_empty() {
        return Err(Error::EmptyToken(path));
    }
    let api_url = g.api_url.clone().unwrap_or_else(|| "https://api.github.com".into());
    if !(api_url.starts_with("https://") || api_url.starts_with("http://")) {
        return Err(Error::ApiUrl(api_url));
    }
    Ok(github::Config {
        api_url,
        owner: owner.into(),
        repo: repo.into(),
        target,
        token,
        poll_interval: Duration::from_secs(g.poll_interval.unwrap_or(GITHUB_POLL_SECS).max(1)),
    })
}
