//! Sync bridges: a chamber's mailbox mirrored to a Zulip topic or a GitHub
//! Discussion or Issue, as tasks inside cryod.
//!
//! A service is a [`Remote`]: it checks its credentials and finds the
//! conversation ([`Remote::connect`]), fetches what is new after a cursor
//! ([`Remote::pull`], a long poll where the service has one), and posts one
//! message ([`Remote::post`]). The chamber side is a [`Local`]: it writes
//! incoming messages into the inbox and lists and archives the outbox.
//! [`bridge::run`] joins the two: the cursor and what was posted are kept in
//! `.cryo/sync-NAME.json`, so a restart neither re-delivers nor skips, and an
//! outbox message is recorded as posted before it is archived, so a crash
//! between the two does not post it twice. Our own posts are recognised by
//! the ids the service gave them, never by the author: a person using the
//! bot's account still reaches the agent.

pub mod attach;
pub mod bridge;
pub mod creds;
pub mod github;
mod http;
pub mod state;
pub mod zulip;

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// A message from the service, on its way into the inbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// The service's id for it (a Zulip message id, a GitHub comment id).
    pub remote_id: String,
    pub from: String,
    pub subject: String,
    pub body: String,
    pub at: DateTime<Utc>,
}

/// An outbox message, on its way out.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// Its file name in `messages/outbox/`.
    pub name: String,
    pub from: String,
    pub subject: String,
    pub body: String,
    pub question: bool,
}

/// Why a call to the service failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// Wrong credentials, an unknown stream, a missing issue: retrying will
    /// not help. The bridge stops until its configuration changes.
    Fatal(String),
    /// The network, a 5xx, a 429: retry, after `retry_after` if the service
    /// said so.
    Transient { message: String, retry_after: Option<Duration> },
}

impl Error {
    pub fn transient(message: impl Into<String>) -> Error {
        Error::Transient { message: message.into(), retry_after: None }
    }

    pub fn message(&self) -> &str {
        match self {
            Error::Fatal(m) | Error::Transient { message: m, .. } => m,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// A service a chamber's mailbox is mirrored to.
pub trait Remote: Send + 'static {
    /// Its cursor: where the last pull ended. Kept in the chamber.
    type Cursor: Serialize + serde::de::DeserializeOwned + Default + Clone + Send + Sync + std::fmt::Debug;

    /// `zulip`, `github`: the bridge's name in status and file names.
    fn name(&self) -> &'static str;

    /// Checks the credentials and finds the conversation; returns a
    /// description of it (`#agents > build`, `owner/repo#12`).
    fn connect(&mut self) -> impl Future<Output = Result<String>> + Send;

    /// Messages after `cursor`, oldest first, and the cursor after them. The
    /// first pull (no cursor yet) skips the conversation's history: it
    /// returns no messages and a cursor at its end. With `wait`, waits for
    /// something new where the service can (a long poll).
    fn pull(
        &mut self,
        cursor: Option<&Self::Cursor>,
        wait: bool,
    ) -> impl Future<Output = Result<(Vec<Incoming>, Self::Cursor)>> + Send;

    /// Posts one message; returns the id the service gave it.
    fn post(&mut self, msg: &Outgoing, body: &str) -> impl Future<Output = Result<String>> + Send;

    /// How long to wait between pulls, for a service without a long poll.
    fn poll_interval(&self) -> Option<Duration>;

    /// Downloads a file the service hosts, linked from a message as `link`
    /// (at most `cap` bytes). `None`: the link is not one of the service's
    /// uploads.
    fn download(&mut self, link: &str, cap: usize) -> impl Future<Output = Option<Result<Vec<u8>>>> + Send;

    /// Uploads a file for a message; returns the link to put in its place.
    /// `None`: the service has no uploads through its API.
    fn upload(&mut self, file_name: &str, bytes: Vec<u8>) -> impl Future<Output = Option<Result<String>>> + Send;
}

/// The chamber side of a bridge.
pub trait Local: Send + Sync + 'static {
    /// The chamber's folder.
    fn root(&self) -> &Path;

    /// Writes `msg` into the inbox, unless a message with its remote id is
    /// already there or in the archive. `Ok(false)`: it was there.
    fn deliver(&self, bridge: &str, msg: &Incoming) -> std::io::Result<bool>;

    /// The outbox, oldest first.
    fn outbox(&self) -> Vec<Outgoing>;

    /// Moves an outbox message to `messages/outbox/archive/`.
    fn archive_outbox(&self, name: &str) -> std::io::Result<()>;
}

/// How a bridge is doing, for `chamber status`, `chamber sync` and the hub.
/// Holds no secret.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct Status {
    pub bridge: String,
    /// `connecting`, `connected`, `backing off`, `stopped`.
    pub state: String,
    /// What it mirrors, once connected.
    pub target: String,
    pub last_pull: Option<DateTime<Utc>>,
    pub last_push: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// Messages delivered into the inbox and posted from the outbox, since
    /// the bridge started.
    pub delivered: u64,
    pub posted: u64,
}

/// Installs the TLS crypto provider (ring), once per process.
fn init_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The wall clock. The bridges live outside cryod's `Clock`: their times are
/// status stamps and the services' rate-limit resets, wall-clock by nature.
pub(crate) fn now() -> DateTime<Utc> {
    #[allow(clippy::disallowed_methods)]
    Utc::now()
}
