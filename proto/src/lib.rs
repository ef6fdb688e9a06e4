//! cryo-proto: the one definition of the `cryo.v1` protocol.
//!
//! It owns the generated gRPC code, the protocol number ([`PROTOCOL_VERSION`]),
//! where the daemon's socket lives ([`socket_path`]) and its other files
//! ([`paths`]), and how clients reach it ([`connect`], a [`Control`]
//! client). Clients and the daemon take all of these from here and define
//! none of them again.

use std::path::{Path, PathBuf};

pub mod json;
pub mod paths;

/// Generated messages, clients and servers of package `cryo.v1`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("cryo.v1");
}

/// The protocol's definitions (every `cryo/v1/*.proto`), an encoded
/// `FileDescriptorSet`: what cryod's server reflection answers with.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cryo_descriptor.bin"));

/// The protocol spoken on the socket. Bump it on any change a client of the
/// other number would misread; `Hello` compares it before anything else.
/// 2: the operator's socket needs the operator key; agents have doors of
/// their own.
pub const PROTOCOL_VERSION: u32 = 2;

/// The package version shared by cryod, cryoctl and cryo-agent.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Environment variable that overrides the socket path (also set for agents).
pub const SOCKET_ENV: &str = "CRYO_SOCKET";

/// gRPC metadata key carrying an agent session's token.
pub const TOKEN_METADATA: &str = "x-cryo-session-token";

/// How often cryod reads chamber folders when it has no file watcher (the
/// per-user inotify limits used up): `doctor` and status say so.
pub const WATCH_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// gRPC metadata key carrying the operator key: every call on the
/// operator's socket must carry it.
pub const OPERATOR_KEY_METADATA: &str = "x-cryo-operator-key";

/// Where cryod keeps the operator key for the socket at `socket`: beside
/// it, as `SOCKET.key`, readable by the user alone (0600, in the socket's
/// private folder) and by no confined agent. cryod makes a new one at each
/// start.
pub fn operator_key_path(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".key");
    PathBuf::from(p)
}

/// Adds the operator key to every call of a Control client.
#[derive(Clone)]
pub struct OperatorKey(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for OperatorKey {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        r.metadata_mut().insert(OPERATOR_KEY_METADATA, self.0.clone());
        Ok(r)
    }
}

/// A Control client: on the operator's socket, carrying the operator key
/// ([`control`]), or, inside cryod, on its own Control server in process
/// ([`control_over`]). One type for both, so code over the Control API (the
/// operator's MCP tools, `cryo-mcp`) need not know which.
pub type Control = v1::control_client::ControlClient<ControlTransport>;

/// What a [`Control`] client sends its calls through, its type erased: a
/// connection to the socket, or a gRPC server called in process.
pub type ControlTransport = tower::util::BoxCloneSyncService<
    tonic::codegen::http::Request<tonic::body::Body>,
    tonic::codegen::http::Response<tonic::body::Body>,
    TransportError,
>;

/// Why a [`ControlTransport`] could not carry a call: the connection's own
/// error, unchanged (tonic still reads the codes in it). A type of its own
/// rather than a bare `Box<dyn Error>`, with which the compiler cannot
/// prove a call's future `Send`.
#[derive(Debug)]
pub struct TransportError(tonic::codegen::StdError);

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// A [`Control`] client over `service`: any gRPC service that answers the
/// Control methods. cryod's hub passes its own `ControlServer`, so its
/// `/mcp` calls the same service the socket serves with no socket between
/// (and no operator key: the hub checked its own token). Answers may be
/// [`MAX_REPLY`] long, as on the socket.
pub fn control_over<S>(service: S) -> Control
where
    S: tonic::codegen::Service<
            tonic::codegen::http::Request<tonic::body::Body>,
            Response = tonic::codegen::http::Response<tonic::body::Body>,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<tonic::codegen::StdError>,
{
    let service = tower::ServiceExt::map_err(service, |e: S::Error| TransportError(e.into()));
    v1::control_client::ControlClient::new(tower::util::BoxCloneSyncService::new(service))
        .max_decoding_message_size(MAX_REPLY)
}

/// Reads the operator key kept beside the socket at `socket`.
pub fn operator_key(socket: &Path) -> Result<OperatorKey, ConnectError> {
    let path = operator_key_path(socket);
    let text = std::fs::read_to_string(&path).map_err(|e| ConnectError::NoKey(path.clone(), e.to_string()))?;
    let value = text.trim().parse().map_err(|_| ConnectError::NoKey(path, "not a key".into()))?;
    Ok(OperatorKey(value))
}

/// Connects to the operator's socket at `path` with the operator key, and
/// says `Hello` as `client`.
pub async fn control(path: &Path, client: &str) -> Result<Control, ControlError> {
    control_hello(path, client).await.map(|(c, _)| c)
}

/// A Control client on the operator's socket at `path`, with the operator
/// key, that has not said `Hello` (to say it itself).
pub async fn control_unchecked(path: &Path) -> Result<Control, ConnectError> {
    let channel = connect(path).await?;
    let keyed = tonic::service::interceptor::InterceptedService::new(channel, operator_key(path)?);
    let keyed = tower::ServiceExt::map_response(keyed, |r| r.map(tonic::body::Body::new));
    Ok(control_over(keyed))
}

/// The largest answer a client takes: a chamber's whole TODO list (10,000
/// of the longest texts) is 20 MiB. cryod itself takes requests of tonic's
/// 4 MiB at most.
pub const MAX_REPLY: usize = 64 * 1024 * 1024;

/// [`control`], with the daemon's answer to `Hello`.
pub async fn control_hello(path: &Path, client: &str) -> Result<(Control, v1::HelloReply), ControlError> {
    let mut c = control_unchecked(path).await?;
    let hello = hello_reply(c.hello(hello_request(client)).await?.into_inner(), client)?;
    Ok((c, hello))
}

/// Why [`control`] failed: the socket, or the daemon's answer.
#[derive(Debug)]
pub enum ControlError {
    Connect(ConnectError),
    Refused(tonic::Status),
}

impl From<ConnectError> for ControlError {
    fn from(e: ConnectError) -> ControlError {
        ControlError::Connect(e)
    }
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Connect(e) => e.fmt(f),
            ControlError::Refused(s) => f.write_str(&exit::for_status(s).1),
        }
    }
}

impl From<tonic::Status> for ControlError {
    fn from(s: tonic::Status) -> ControlError {
        ControlError::Refused(s)
    }
}

/// The socket path: `$CRYO_SOCKET`, else `$XDG_RUNTIME_DIR/cryo/cryod.sock`,
/// else (a client started with only `HOME` and `PATH`, as MCP clients
/// start their servers) `/run/user/UID/cryo/cryod.sock` if a socket is
/// there, else `$HOME/.cryo/run/cryod.sock`.
pub fn socket_path() -> PathBuf {
    socket_path_from(|k| std::env::var_os(k))
}

/// [`socket_path`] over an explicit environment (for tests and the daemon's
/// own defaults).
pub fn socket_path_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    let non_empty = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = non_empty(SOCKET_ENV) {
        return p;
    }
    if let Some(run) = non_empty("XDG_RUNTIME_DIR") {
        return run.join("cryo").join("cryod.sock");
    }
    // The runtime folder systemd makes, which the variable names in a
    // login session.
    let usual = PathBuf::from(format!("/run/user/{}/cryo/cryod.sock", nix::unistd::getuid()));
    if std::fs::symlink_metadata(&usual).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
        return usual;
    }
    let home = non_empty("HOME").unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".cryo").join("run").join("cryod.sock")
}

/// Why a client could not reach the daemon, in words that say what to do.
#[derive(Debug)]
pub enum ConnectError {
    /// No socket file: no daemon was started (or it runs elsewhere).
    NoSocket(PathBuf),
    /// A socket file without a listener: the daemon died.
    Refused(PathBuf),
    /// The socket belongs to someone else.
    Denied(PathBuf),
    /// The socket is ours, yet connecting was refused: a sandbox around this
    /// process (an agent CLI's) forbids sockets.
    Blocked(PathBuf),
    /// The operator key beside the socket cannot be read.
    NoKey(PathBuf, String),
    /// Anything else.
    Other(PathBuf, String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const START: &str = "start it with `cryoctl daemon run --detach` (background), `cryoctl daemon run` (foreground) or `cryoctl daemon install` (service)";
        match self {
            ConnectError::NoSocket(p) => write!(f, "cryod is not running (no socket at {}): {START}", p.display()),
            ConnectError::Refused(p) => {
                write!(f, "cryod is not running (stale socket at {}, nothing listens): {START}", p.display())
            }
            ConnectError::Denied(p) => write!(
                f,
                "permission denied on the cryod socket {}: it belongs to another user; set CRYO_SOCKET to your own",
                p.display()
            ),
            ConnectError::Blocked(p) => write!(
                f,
                "permission denied on the cryod socket {}, which is yours: a sandbox around this process blocks \
                 sockets (for Codex's workspace-write sandbox, cryo adds `-c sandbox_workspace_write.network_access=true`; \
                 check the agent line in cryo.toml)",
                p.display()
            ),
            ConnectError::NoKey(p, e) => write!(
                f,
                "cannot read the operator key {} ({e}): only the user who runs cryod, outside any cryo session, \
                 may use its operator socket",
                p.display()
            ),
            ConnectError::Other(p, e) => write!(f, "cannot reach cryod at {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Opens a channel to the daemon's socket at `path`.
pub async fn connect(path: &Path) -> Result<tonic::transport::Channel, ConnectError> {
    // Check the file first: it gives a precise error without a gRPC round trip.
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ConnectError::NoSocket(path.to_path_buf()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(denied(path));
        }
        _ => {}
    }
    let uri = format!("unix://{}", path.display());
    let endpoint = tonic::transport::Endpoint::from_shared(uri)
        .map_err(|e| ConnectError::Other(path.to_path_buf(), e.to_string()))?;
    // A socket whose queue is full (a flood of connections) answers
    // EAGAIN: wait for room a little, as a blocking connect would.
    let deadline = std::time::Instant::now() + BUSY_WAIT;
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        match endpoint.connect().await {
            Ok(channel) => return Ok(channel),
            Err(e) if busy(&e) && std::time::Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(200));
            }
            Err(e) => return Err(classify(path, &e)),
        }
    }
}

/// How long [`connect`] waits for room at a socket whose queue is full.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether a connect failed only for want of room in the socket's queue.
fn busy(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::WouldBlock;
        }
        cur = e.source();
    }
    false
}

/// Permission denied: someone else's socket, or ours behind a sandbox.
fn denied(path: &Path) -> ConnectError {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) if m.uid() == nix::unistd::geteuid().as_raw() => ConnectError::Blocked(path.to_path_buf()),
        _ => ConnectError::Denied(path.to_path_buf()),
    }
}

fn classify(path: &Path, err: &(dyn std::error::Error + 'static)) -> ConnectError {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::NotFound => ConnectError::NoSocket(path.to_path_buf()),
                std::io::ErrorKind::ConnectionRefused => ConnectError::Refused(path.to_path_buf()),
                std::io::ErrorKind::PermissionDenied => denied(path),
                _ => ConnectError::Other(path.to_path_buf(), io.to_string()),
            };
        }
        cur = e.source();
    }
    ConnectError::Other(path.to_path_buf(), err.to_string())
}

/// The one line shown when a client and the daemon speak different protocols.
pub fn mismatch_message(
    client: &str,
    client_version: &str,
    client_protocol: u32,
    daemon_version: &str,
    daemon_protocol: u32,
) -> String {
    // A stock client may name neither itself nor its version.
    let who = match (client.trim(), client_version.trim()) {
        ("", "") => "the client".to_string(),
        ("", v) => format!("the client {v}"),
        (c, "") => c.to_string(),
        (c, v) => format!("{c} {v}"),
    };
    format!(
        "cryod {daemon_version} speaks protocol {daemon_protocol}, {who} speaks protocol {client_protocol}: run the \
         same version of both (restart the daemon with `cryoctl daemon restart` after upgrading)"
    )
}

/// `text` with its control characters (but newlines and tabs) shown as
/// escapes, for a terminal: `\u{1b}` for ESC, and so on (C1 controls and
/// the bidirectional overrides too).
pub fn escape_controls(text: &str) -> String {
    let bad = |c: char| {
        (c.is_control() && c != '\n' && c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(bad) {
        return text.to_string();
    }
    text.chars().map(|c| if bad(c) { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// Exit codes shared by cryoctl and cryo-agent.
pub mod exit {
    /// The daemon refused the request, or it failed.
    pub const REFUSED: u8 = 1;
    /// The command line was wrong (clap's own code).
    pub const USAGE: u8 = 2;
    /// The daemon could not be reached.
    pub const UNREACHABLE: u8 = 3;
    /// What the request named does not exist.
    pub const NOT_FOUND: u8 = 4;

    /// [`print()`] for a line the caller has styled itself (a table's bold
    /// header, a coloured mark), whose words from elsewhere it has already
    /// passed through [`super::escape_controls`] (on a terminal).
    pub fn print_styled(name: &str, text: &str) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        finish(name, out.write_all(text.as_bytes()).and_then(|()| out.write_all(b"\n")));
    }

    fn finish(name: &str, written: std::io::Result<()>) {
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
            Err(e) => {
                eprintln!("{name}: cannot write the output: {e}");
                std::process::exit(REFUSED.into());
            }
        }
    }

    /// Writes to standard output for the client `name` (cryoctl or
    /// cryo-agent). A reader that has gone (`cryoctl chamber list | head`)
    /// ends the process at once, successfully, as Unix tools do, instead of
    /// `println!`'s panic; any other error ends it with one line and
    /// [`REFUSED`].
    ///
    /// On a terminal, control characters other than newlines and tabs are
    /// shown escaped (`\u{1b}`): text an agent wrote (a message, a log
    /// line, a file name) must not move the cursor, retitle the window or
    /// hide what follows.
    pub fn print(name: &str, args: std::fmt::Arguments<'_>, newline: bool) {
        use std::io::{IsTerminal, Write};
        let mut out = std::io::stdout().lock();
        let text = args.to_string();
        let text = if out.is_terminal() { super::escape_controls(&text) } else { text };
        let written = out.write_all(text.as_bytes()).and_then(|()| if newline { out.write_all(b"\n") } else { Ok(()) });
        finish(name, written);
    }

    /// The exit code for a refusal from the daemon, and its one line.
    pub fn for_status(s: &tonic::Status) -> (u8, String) {
        // The connection went away under the call (tonic says only
        // "transport error", or "operation was canceled" when hyper saw the
        // stream reset; cryod itself never answers Cancelled).
        let dropped = s.message().starts_with("transport error")
            || s.code() == tonic::Code::Cancelled
            || (s.code() == tonic::Code::Unavailable && s.message().is_empty());
        let code = match s.code() {
            _ if dropped => UNREACHABLE,
            tonic::Code::NotFound => NOT_FOUND,
            tonic::Code::Unavailable => UNREACHABLE,
            _ => REFUSED,
        };
        let message = match (s.code(), s.message()) {
            _ if dropped => {
                "cryod closed the connection (it is stopping, or at its limit of open connections); try again".into()
            }
            (c, "") => format!("{c:?}"),
            // One line, and nothing in it that a terminal would act on.
            (_, m) => super::escape_controls(&m.replace('\n', " ")),
        };
        (code, message)
    }
}

/// The `Hello` a client named `client` says.
pub fn hello_request(client: &str) -> v1::HelloRequest {
    v1::HelloRequest { client: client.to_string(), protocol: PROTOCOL_VERSION, version: VERSION.to_string() }
}

/// Checks the daemon's answer to `Hello`; the error is one line.
pub fn hello_reply(reply: v1::HelloReply, client: &str) -> Result<v1::HelloReply, tonic::Status> {
    if reply.protocol != PROTOCOL_VERSION {
        return Err(tonic::Status::failed_precondition(mismatch_message(
            client,
            VERSION,
            PROTOCOL_VERSION,
            &reply.version,
            reply.protocol,
        )));
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
    }

    #[test]
    fn socket_path_order() {
        assert_eq!(
            socket_path_from(env(&[("CRYO_SOCKET", "/x/s"), ("XDG_RUNTIME_DIR", "/run/u")])),
            PathBuf::from("/x/s")
        );
        assert_eq!(
            socket_path_from(env(&[("XDG_RUNTIME_DIR", "/run/u"), ("HOME", "/h")])),
            PathBuf::from("/run/u/cryo/cryod.sock")
        );
        assert_eq!(
            socket_path_from(env(&[("XDG_RUNTIME_DIR", ""), ("HOME", "/h")])),
            PathBuf::from("/h/.cryo/run/cryod.sock")
        );
    }

    #[test]
    fn controls_are_shown_not_acted_on() {
        assert_eq!(escape_controls("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(escape_controls("a\u{1b}]0;owned\u{7}b"), "a\\u{1b}]0;owned\\u{7}b");
        assert_eq!(escape_controls("\u{202e}txt.exe"), "\\u{202e}txt.exe");
        assert_eq!(escape_controls("\r\u{9b}"), "\\u{d}\\u{9b}");
    }

    #[test]
    fn mismatch_says_what_to_do() {
        let m = mismatch_message("cryoctl", "0.1.0", 1, "9.0.0", 9);
        assert!(m.contains("protocol 9") && m.contains("protocol 1"), "{m}");
        assert!(m.contains("cryoctl daemon restart"), "{m}");
        assert!(m.contains("cryoctl 0.1.0 speaks protocol 1"), "{m}");
        // A stock client that names neither itself nor its version.
        let m = mismatch_message("", "", 1, "9.0.0", 9);
        assert!(m.contains(", the client speaks protocol 1:"), "{m}");
    }

    #[test]
    fn a_connection_that_went_away_is_unreachable() {
        for s in [
            tonic::Status::cancelled("operation was canceled"),
            tonic::Status::unknown("transport error"),
            tonic::Status::unavailable(""),
        ] {
            let (code, message) = exit::for_status(&s);
            assert_eq!(code, exit::UNREACHABLE, "{s:?}");
            assert!(message.contains("cryod closed the connection"), "{message}");
        }
        assert_eq!(exit::for_status(&tonic::Status::not_found("no chamber x")).0, exit::NOT_FOUND);
    }
}
