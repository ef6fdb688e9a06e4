//! The provider gateway: the one place a known kind's agent reaches its
//! model provider through, so that the agent never holds the key, every
//! token is counted where it is spent, and the provider's limits are read
//! from its own headers.
//!
//! cryod listens on a loopback port. Each session through the gateway gets
//! a [`Ticket`]: a base URL holding a credential of 256 random bits
//! (`http://127.0.0.1:PORT/cryo/TOKEN`), worth nothing once the session's
//! agent exits (the ticket is dropped then). The agent's CLI is pointed at
//! that base, with the token where its key would be (see
//! `cryo_session`'s `upstream`); the gateway forwards each model call to the
//! session's upstream with the real credential, and reads what passes:
//! - the usage each response reports ([`wire::Meter`]), summed per session
//!   and priced with cryod's table, so budgets and `max_session_usd` hold
//!   on every request: once the session's line is reached, requests are
//!   refused with an API error and the session ends `over budget`;
//! - the rate-limit headers ([`wire::pressure`]): a 429 holds the account
//!   until the reset the provider gave (a long one ends the session, as a
//!   limit the CLI reports does); capacity near zero holds new wakes.
//!
//! Only the calls the known CLIs make are forwarded ([`wire::allowed`]):
//! the real key reaches no other endpoint. Nothing here logs a request's
//! path (it holds the token), a header or a body.
//!
//! Here: the gateway, its listeners and its tickets. A session's route
//! (what it asks, what it used) is `route.rs`; one call forwarded and its
//! answer metered back, `forward.rs`; what is read of the traffic, [`wire`];
//! an exchange kept to disk, [`kept`], with the key taken out (`redact.rs`).

mod forward;
pub mod kept;
mod redact;
mod route;
pub mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub use route::{IN_SESSION_WAIT, Route, Spec, Tell, Used};
pub use wire::Api;

/// How long the gateway waits for an upstream to answer (headers); a
/// stream then runs as long as the session does.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections served at once (every session's CLI keeps a few), and how
/// long one may say nothing: a model may think for minutes before a
/// whole (not streamed) answer.
const MAX_CONNECTIONS: usize = 512;
const IDLE: Duration = Duration::from_secs(600);

/// The path prefix of every session's base URL.
const PREFIX: &str = "/cryo/";

/// cryod's provider gateway (cheap to clone: one registry).
#[derive(Clone)]
pub struct Gateway(Arc<Inner>);

struct Inner {
    routes: Mutex<HashMap<String, Arc<Route>>>,
    client: reqwest::Client,
    /// Where it listens, once it does.
    addr: OnceLock<SocketAddr>,
    /// Its Unix socket, once it listens there too.
    unix: OnceLock<std::path::PathBuf>,
    clock: crate::base::clock::Clock,
}

/// A session's credential at the gateway: valid while this lives.
pub struct Ticket {
    gateway: Gateway,
    addr: SocketAddr,
    token: String,
    route: Arc<Route>,
}

impl Ticket {
    /// The base URL the agent's CLI is given.
    pub fn base(&self) -> String {
        format!("http://{}{PREFIX}{}", self.addr, self.token)
    }

    /// The credential the agent's CLI is given where its key would be.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn route(&self) -> Arc<Route> {
        self.route.clone()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gateway.0.routes.lock().expect("gateway lock").remove(&self.token);
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ticket")
    }
}

impl Gateway {
    pub fn new(clock: crate::base::clock::Clock) -> Gateway {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            // A redirect would carry the key elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with rustls");
        Gateway(Arc::new(Inner {
            routes: Mutex::default(),
            client,
            addr: OnceLock::new(),
            unix: OnceLock::new(),
            clock,
        }))
    }

    /// Listens on `bind` (a loopback address; port 0 picks one) and serves
    /// until `shutdown`.
    pub async fn serve(
        &self,
        bind: SocketAddr,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(bind).await?;
        self.serve_on(crate::base::conn::Capped::with(listener, MAX_CONNECTIONS, IDLE), shutdown)
    }

    /// Serves on `listener` (bounded: a flood of connections from an agent
    /// must not take cryod's file descriptors).
    fn serve_on(
        &self,
        listener: crate::base::conn::Capped,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> std::io::Result<SocketAddr> {
        let addr = axum::serve::Listener::local_addr(&listener)?;
        let _ = self.0.addr.set(addr);
        let app = axum::Router::new().fallback(forward::handle).with_state(self.0.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        });
        Ok(addr)
    }

    /// Where it listens, once it does.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.0.addr.get().copied()
    }

    /// Listens on the Unix socket `path` too (0600), relaying each
    /// connection to its own port: the way out of a session's network
    /// namespace (`cryo_session`'s `forward`). Bounded as the port is; past
    /// 512 relays at once (`MAX_CONNECTIONS`), a new one is closed.
    pub fn serve_unix(
        &self,
        path: &std::path::Path,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let addr = self.addr().ok_or_else(|| std::io::Error::other("the gateway's port is not open"))?;
        // A stale one of an earlier run (cryod holds its instance lock).
        let _ = std::fs::remove_file(path);
        let listener = std::os::unix::net::UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let _ = self.0.unix.set(path.to_path_buf());
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let path = path.to_path_buf();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    a = listener.accept() => a,
                };
                let Ok((mut unix, _)) = accepted else {
                    // Out of descriptors, say: not a spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await {
                        let _ = tcp.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut unix, &mut tcp).await;
                    }
                });
            }
            let _ = std::fs::remove_file(&path);
        });
        Ok(())
    }

    /// Its Unix socket, once it listens there.
    pub fn unix_path(&self) -> Option<std::path::PathBuf> {
        self.0.unix.get().cloned()
    }

    /// A ticket for one session; `None` while the gateway does not listen.
    pub fn open(&self, spec: Spec) -> Option<Ticket> {
        let addr = self.addr()?;
        let token = format!("cryo-gw-{}", crate::base::random::hex(32));
        let route = Arc::new(Route::new(spec));
        self.0.routes.lock().expect("gateway lock").insert(token.clone(), route.clone());
        Some(Ticket { gateway: self.clone(), addr, token, route })
    }

    /// Sessions with a live ticket.
    pub fn open_tickets(&self) -> usize {
        self.0.routes.lock().expect("gateway lock").len()
    }
}

/// One session's ticket as its start asks for it
/// (`cryo_session::Gateway`): everything of its [`Spec`] but where its
/// calls go and with what key, which the start reads from the agent's kind
/// and files.
pub struct Asking {
    pub gateway: Gateway,
    pub chamber: String,
    pub account: String,
    pub session: u64,
    pub line: Option<f64>,
    pub prices: Arc<cryo_session::Prices>,
    pub tell: Tell,
    pub trace: Option<Arc<crate::base::otlp::Trace>>,
}

impl cryo_session::Gateway for Asking {
    type Ticket = Ticket;

    fn open(&self, upstream: String, auth: cryo_session::Auth, kept: Option<std::fs::File>) -> Option<Ticket> {
        self.gateway.open(Spec {
            chamber: self.chamber.clone(),
            account: self.account.clone(),
            session: self.session,
            upstream,
            auth,
            line: self.line,
            prices: self.prices.clone(),
            tell: self.tell.clone(),
            trace: self.trace.clone(),
            kept: kept.map(kept::Kept::new),
        })
    }
}

impl cryo_session::Ticket for Ticket {
    fn base(&self) -> String {
        Ticket::base(self)
    }

    fn token(&self) -> &str {
        Ticket::token(self)
    }

    fn meter(&self) -> Arc<dyn Fn() -> Option<cryo_session::Usage> + Send + Sync> {
        let route = self.route();
        Arc::new(move || {
            let used = route.used();
            (used.requests > 0).then_some(used.usage)
        })
    }
}

#[cfg(test)]
mod tests;
