//! The bridge loop: one task per configured bridge of a running chamber.
//!
//! It connects (checking credentials and the conversation), then alternates
//! between pulling (a long poll, or a poll every few seconds) and pushing the
//! outbox when cryod says it changed. Commands from `cryoctl chamber sync`
//! cut a wait short. Network errors, 5xx and 429 back off (honouring
//! `Retry-After`) inside this task only, so other chambers never wait; a
//! fatal error (bad credentials, unknown stream) stops this bridge, with its
//! reason in the status, until cryod restarts it after a config change.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::state::State;
use crate::{Error, Incoming, Local, Remote, Status, attach};

/// What cryod (or an operator, through it) asks of a bridge.
#[derive(Debug)]
pub enum Command {
    /// Pull now; the reply is how many messages reached the inbox.
    Pull(oneshot::Sender<Result<u64, CommandError>>),
    /// Push the outbox now; the reply is how many messages were posted.
    Push(oneshot::Sender<Result<u64, CommandError>>),
    /// The outbox changed.
    OutboxChanged,
}

/// Why a [`Command::Pull`] or [`Command::Push`] did not happen.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandError {
    /// The call to the service failed.
    Failed(Error),
    /// The bridge is waiting out a transient error; the reason its status
    /// shows (the error and when it retries).
    BackingOff(String),
    /// The bridge stopped; the reason its status shows.
    Stopped(String),
    /// The bridge's task is gone.
    Ended,
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandError::Failed(e) => write!(f, "{e}"),
            CommandError::BackingOff(reason) => write!(f, "backing off: {reason}"),
            CommandError::Stopped(reason) => write!(f, "stopped: {reason}"),
            CommandError::Ended => f.write_str("the bridge has ended"),
        }
    }
}

impl std::error::Error for CommandError {}

/// A bridge's status, shared with whoever reports it; `changed` is called
/// after every change (cryod republishes the chamber's snapshot).
#[derive(Clone)]
pub struct StatusCell {
    inner: Arc<Mutex<Status>>,
    changed: Arc<dyn Fn() + Send + Sync>,
}

impl StatusCell {
    pub fn new(bridge: &str, changed: Arc<dyn Fn() + Send + Sync>) -> StatusCell {
        let status = Status { bridge: bridge.to_string(), state: "connecting".into(), ..Status::default() };
        StatusCell { inner: Arc::new(Mutex::new(status)), changed }
    }

    pub fn get(&self) -> Status {
        self.inner.lock().unwrap().clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut Status)) {
        let changed = {
            let mut s = self.inner.lock().unwrap();
            let before = s.clone();
            f(&mut s);
            *s != before
        };
        if changed {
            (self.changed)();
        }
    }
}

/// First wait after a transient error, and the longest.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

struct Bridge<R: Remote, L: Local> {
    remote: R,
    local: Arc<L>,
    name: &'static str,
    /// Every bridge of the chamber: an outbox message is archived once all
    /// of them posted it.
    all: Vec<&'static str>,
    state: State<R::Cursor>,
    status: StatusCell,
    backoff: Duration,
}

/// Runs a bridge until its command channel closes (cryod drops the sender
/// when the chamber stops or its config changes).
pub async fn run<R: Remote, L: Local>(
    remote: R,
    local: Arc<L>,
    all: Vec<&'static str>,
    status: StatusCell,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let name = remote.name();
    status.update(|s| s.state = "connecting".into());
    let state = match State::load(local.root(), name) {
        Ok(s) => s,
        Err(e) => return stopped(&status, e.to_string(), &mut commands).await,
    };
    let mut b = Bridge { remote, local, name, all, state, status, backoff: BACKOFF_MIN };
    loop {
        match b.remote.connect().await {
            Ok(target) => {
                b.status.update(|s| {
                    s.state = "connected".into();
                    s.target = target;
                    s.last_error = None;
                });
                break;
            }
            Err(Error::Fatal(e)) => return stopped(&b.status, e, &mut commands).await,
            Err(e) => {
                if !b.back_off(&e, &mut commands).await {
                    return;
                }
            }
        }
    }
    tracing::info!(bridge = name, target = %b.status.get().target, "sync bridge connected");
    b.main(&mut commands).await;
}

/// What woke the main loop.
enum Next<C> {
    Pulled(crate::Result<(Vec<Incoming>, C)>),
    Command(Option<Command>),
}

impl<R: Remote, L: Local> Bridge<R, L> {
    async fn main(&mut self, commands: &mut mpsc::UnboundedReceiver<Command>) {
        let mut push_due = true;
        loop {
            // The first pull marks where the remote's history stands before
            // anything is posted: a person who answers the first post in
            // the moment between the two is after the mark, not before it.
            if push_due && self.state.cursor.is_some() {
                push_due = false;
                if let Err(e) = self.push().await {
                    push_due = true;
                    if !self.failed(e, commands).await {
                        return;
                    }
                    continue;
                }
            }
            let next = {
                let cursor = self.state.cursor.clone();
                let interval = self.remote.poll_interval();
                let pull = async {
                    match (&cursor, interval) {
                        (None, _) => self.remote.pull(None, false).await,
                        (Some(c), Some(every)) => {
                            tokio::time::sleep(every).await;
                            self.remote.pull(Some(c), false).await
                        }
                        (Some(c), None) => self.remote.pull(Some(c), true).await,
                    }
                };
                tokio::select! {
                    r = pull => Next::Pulled(r),
                    c = commands.recv() => Next::Command(c),
                }
            };
            match next {
                Next::Pulled(Ok((msgs, cursor))) => {
                    if let Err(e) = self.take(msgs, cursor).await
                        && !self.failed(e, commands).await
                    {
                        return;
                    }
                }
                Next::Pulled(Err(e)) => {
                    if !self.failed(e, commands).await {
                        return;
                    }
                }
                Next::Command(None) => return,
                Next::Command(Some(Command::OutboxChanged)) => push_due = true,
                Next::Command(Some(Command::Pull(reply))) => {
                    let r = self.pull_now().await;
                    let _ = reply.send(r.clone().map_err(CommandError::Failed));
                    if let Err(e) = r
                        && !self.failed(e, commands).await
                    {
                        return;
                    }
                }
                Next::Command(Some(Command::Push(reply))) => {
                    let r = self.push().await;
                    let _ = reply.send(r.clone().map_err(CommandError::Failed));
                    if let Err(e) = r {
                        push_due = true;
                        if !self.failed(e, commands).await {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// A pull without waiting.
    async fn pull_now(&mut self) -> crate::Result<u64> {
        let cursor = self.state.cursor.clone();
        let (msgs, cursor) = self.remote.pull(cursor.as_ref(), false).await?;
        self.take(msgs, cursor).await
    }

    /// Delivers pulled messages (our own echoes left out), then saves the
    /// cursor: a crash between the two re-pulls, and delivery skips what is
    /// already in the inbox.
    async fn take(&mut self, msgs: Vec<Incoming>, cursor: R::Cursor) -> crate::Result<u64> {
        let mut delivered = 0;
        for mut m in msgs {
            if self.state.own.contains(&m.remote_id) {
                continue;
            }
            m.body = self.fetch_attachments(&m).await;
            let fresh = self
                .local
                .deliver(self.name, &m)
                .map_err(|e| Error::transient(format!("cannot write into the inbox: {e}")))?;
            if fresh {
                delivered += 1;
            }
        }
        self.state.cursor = Some(cursor);
        self.save()?;
        self.status.update(|s| {
            s.last_pull = Some(crate::now());
            s.delivered += delivered;
            s.state = "connected".into();
            s.last_error = None;
        });
        self.backoff = BACKOFF_MIN;
        Ok(delivered)
    }

    /// Posts every outbox message not yet posted, oldest first. Each is
    /// recorded as posted before it is archived.
    async fn push(&mut self) -> crate::Result<u64> {
        let outbox = self.local.outbox();
        let before = self.state.posted.len();
        self.state.posted.retain(|name, _| outbox.iter().any(|m| &m.name == name));
        if self.state.posted.len() != before {
            self.save()?;
        }
        let mut posted = 0;
        for msg in outbox {
            if !self.state.posted.contains_key(&msg.name) {
                let body = self.upload_attachments(&msg.body).await;
                let id = self.remote.post(&msg, &body).await?;
                self.state.posted.insert(msg.name.clone(), id.clone());
                self.state.remember_own(id);
                self.save()?;
                posted += 1;
                self.status.update(|s| {
                    s.last_push = Some(crate::now());
                    s.posted += 1;
                });
            }
            if crate::state::posted_by_all(self.local.root(), &self.all, &msg.name)
                && let Err(e) = self.local.archive_outbox(&msg.name)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(Error::transient(format!("cannot archive {}: {e}", msg.name)));
            }
        }
        if posted > 0 {
            self.backoff = BACKOFF_MIN;
        }
        Ok(posted)
    }

    fn save(&self) -> crate::Result<()> {
        self.state
            .save(self.local.root(), self.name)
            .map_err(|e| Error::transient(format!("cannot save the bridge state in .cryo/: {e}")))
    }

    /// Downloads the service's uploads linked from `m` into the attachments
    /// folder; returns the body with those links pointing at the files.
    async fn fetch_attachments(&mut self, m: &Incoming) -> String {
        let mut body = m.body.clone();
        for link in attach::link_targets(&m.body) {
            let Some(result) = self.remote.download(&link, attach::MAX_ATTACHMENT_BYTES).await else { continue };
            let file = attach::safe_name(&link, &format!("{}{}", &self.name[..1], m.remote_id));
            let local = format!("{}/{file}", attach::DIR);
            let written = result.and_then(|bytes| {
                attach::store(self.local.root(), &file, &bytes).map_err(|e| Error::transient(e.to_string()))
            });
            match written {
                Ok(()) => body = body.replace(&format!("]({link})"), &format!("]({local})")),
                Err(e) => tracing::warn!(bridge = self.name, %link, error = %e, "attachment not downloaded"),
            }
        }
        body
    }

    /// Uploads files linked from `messages/attachments/`; returns the body
    /// with those links pointing at the service's copies.
    async fn upload_attachments(&mut self, body: &str) -> String {
        let mut out = body.to_string();
        for link in attach::link_targets(body) {
            let Some((name, bytes)) = attach::uploadable(self.local.root(), &link) else { continue };
            match self.remote.upload(&name, bytes).await {
                Some(Ok(url)) => out = out.replace(&format!("]({link})"), &format!("]({url})")),
                Some(Err(e)) => tracing::warn!(bridge = self.name, %link, error = %e, "attachment not uploaded"),
                None => {}
            }
        }
        out
    }

    /// Handles a failed call: a fatal error stops the bridge (returns false
    /// once its commands end); a transient one backs off.
    async fn failed(&mut self, e: Error, commands: &mut mpsc::UnboundedReceiver<Command>) -> bool {
        match e {
            Error::Fatal(msg) => {
                stopped(&self.status, msg, commands).await;
                false
            }
            e => self.back_off(&e, commands).await,
        }
    }

    /// Waits out a transient error (the service's `Retry-After` if it gave
    /// one, else a doubling delay), answering commands meanwhile. Returns
    /// false when the commands end.
    async fn back_off(&mut self, e: &Error, commands: &mut mpsc::UnboundedReceiver<Command>) -> bool {
        let wait = match e {
            Error::Transient { retry_after: Some(d), .. } => (*d).max(Duration::from_millis(100)),
            _ => self.backoff,
        };
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        let reason = format!("{} (retrying in {:.1} s)", e.message(), wait.as_secs_f64());
        tracing::warn!(bridge = self.name, error = %reason, "sync bridge backing off");
        self.status.update(|s| {
            s.state = "backing off".into();
            s.last_error = Some(reason.clone());
        });
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return true,
                c = commands.recv() => match c {
                    None => return false,
                    Some(Command::OutboxChanged) => {}
                    Some(Command::Pull(r) | Command::Push(r)) => {
                        let _ = r.send(Err(CommandError::BackingOff(reason.clone())));
                    }
                }
            }
        }
    }
}

/// A stopped bridge: says why to every command until they end.
pub async fn stopped(status: &StatusCell, reason: String, commands: &mut mpsc::UnboundedReceiver<Command>) {
    tracing::warn!(error = %reason, "sync bridge stopped");
    status.update(|s| {
        s.state = "stopped".into();
        s.last_error = Some(reason.clone());
    });
    while let Some(c) = commands.recv().await {
        if let Command::Pull(r) | Command::Push(r) = c {
            let _ = r.send(Err(CommandError::Stopped(reason.clone())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operator's `chamber sync` prints these lines.
    #[test]
    fn a_refused_command_reads_as_its_status_does() {
        let fatal = Error::Fatal("checking the Zulip credentials: HTTP 401".into());
        assert_eq!(CommandError::Failed(fatal).to_string(), "checking the Zulip credentials: HTTP 401");
        let reason = "posting to Zulip: HTTP 502 (retrying in 2.0 s)".to_string();
        assert_eq!(
            CommandError::BackingOff(reason).to_string(),
            "backing off: posting to Zulip: HTTP 502 (retrying in 2.0 s)"
        );
        assert_eq!(CommandError::Stopped("no Zulip site".into()).to_string(), "stopped: no Zulip site");
        assert_eq!(CommandError::Ended.to_string(), "the bridge has ended");
    }
}
