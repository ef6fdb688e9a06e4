//! cryod: the one per-user daemon that runs every chamber.
//!
//! `main` parses arguments and calls [`main_with`]; `cryoctl daemon run` calls
//! the same function, so both start the daemon the same way. [`run`] is the
//! daemon itself: given its config, a bound socket, a clock and a shutdown
//! token, it serves until the token is cancelled.
//!
//! Layout: `cryo-core` (in `cryod/core`) holds the pure rules; here live the
//! shell's layers, lowest first: [`base`] (the clock, timers, metrics: what
//! knows no chamber), [`store`], [`config`] and [`error`], [`gateway`] (the
//! provider proxy), [`chamber`] (a chamber's files), [`services`] (what the
//! shell uses, and the runtime that holds it), [`supervisor`] (one task per
//! chamber), [`daemon`] (the operations) and [`fronts`] (the socket, gRPC,
//! the hub, the service manager, the fleet's loops).

pub mod base;
pub mod chamber;
pub mod config;
pub mod daemon;
pub mod error;
pub mod fronts;
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
pub mod services;
pub mod store;
pub mod supervisor;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use cryo_proto::paths::Paths;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::base::clock::Clock;
use crate::base::logline;
use crate::config::Config;
use crate::daemon::Daemon;
use crate::fronts::server::Listener;
use crate::fronts::{fleet, hub, rpc, server, system};
use crate::services::{lease, runtime};
use crate::store::Store;

/// How long shutdown may take before cryod exits anyway.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// Command-line options of the daemon (also `cryoctl daemon run`).
#[derive(Debug, Clone, clap::Args)]
pub struct DaemonArgs {
    /// Socket path (default: $XDG_RUNTIME_DIR/cryo/cryod.sock).
    #[arg(long, env = "CRYO_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Config file (default: $XDG_CONFIG_HOME/cryo/cryod.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The store: a PostgreSQL connection string (`postgres://…` or
    /// `host=/path …`) makes this cryod a node of a fleet; overrides
    /// `[store] url` in cryod.toml.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Runs the daemon in the foreground until SIGTERM or SIGINT.
pub fn main_with(args: DaemonArgs) -> ExitCode {
    daemon::hold_mmap_threshold();
    init_tracing(args.verbose);
    match main_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // (Never a panic, whatever became of standard error.)
            let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("cryod: {e:#}\n"));
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(verbose: u8) {
    // cryod's own crates: the sessions' (a launcher refused, a cgroup not
    // made) and the sync bridges' lines are cryod's too.
    let default = match verbose {
        0 => "cryod=info,cryo_session=info,cryo_sync=info",
        1 => "cryod=debug,cryo_session=debug,cryo_sync=debug",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(logline::Stderr::start())
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn main_inner(args: DaemonArgs) -> anyhow::Result<()> {
    let mut paths = Paths::from_env(args.socket);
    if let Some(c) = args.config {
        paths.config_file = c;
    }
    let mut config = Config::load(&paths.config_file)?;
    if let Some(url) = args.store {
        crate::store::Location::parse(&url).map_err(|e| anyhow::anyhow!("--store: {e}"))?;
        config.store.url = Some(url);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    runtime.block_on(async move {
        // Signal handlers first: once the socket answers, SIGTERM and SIGINT
        // must already mean "shut down gracefully".
        let shutdown = CancellationToken::new();
        let signals = shutdown.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::info!("shutting down");
            signals.cancel();
        });
        let listener = Listener::bind(&paths)?;
        let store = open_store(&config, &paths, listener.path()).await?;
        let done = run(config, listener, store, Clock::system(), shutdown.clone(), &paths);
        tokio::pin!(done);
        tokio::select! {
            r = &mut done => r,
            _ = async { shutdown.cancelled().await; tokio::time::sleep(SHUTDOWN_DEADLINE).await } => {
                tracing::warn!("shutdown took longer than {SHUTDOWN_DEADLINE:?}; exiting anyway");
                Ok(())
            }
        }
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// Opens the store `[store] url` names: the SQLite file in the state folder
/// by default, or the fleet's PostgreSQL (registering this process as a
/// node).
async fn open_store(config: &Config, paths: &Paths, socket: &std::path::Path) -> anyhow::Result<Store> {
    let location = match &config.store.url {
        None => crate::store::Location::Sqlite(paths.database()),
        Some(url) => crate::store::Location::parse(url).map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    match location {
        crate::store::Location::Sqlite(path) => {
            Store::open(&path).with_context(|| format!("opening {}", path.display()))
        }
        crate::store::Location::Postgres(url) => {
            let node = fleet::node_info(config, socket);
            let (id, domain) = (node.id.clone(), node.domain.clone());
            let pg = crate::store::postgres::Postgres::connect(&url, node)
                .await
                .map_err(|e| anyhow::anyhow!("the fleet's store: {e}"))?;
            tracing::info!(node = %id, %domain, store = %crate::store::Backend::describe(&pg), "joined the fleet");
            Ok(Store::from(std::sync::Arc::new(pg)))
        }
    }
}

/// The daemon: serves the socket until `shutdown` is cancelled, then ends
/// running sessions and stops.
pub async fn run(
    config: Config,
    listener: Listener,
    store: Store,
    clock: Clock,
    shutdown: CancellationToken,
    paths: &Paths,
) -> anyhow::Result<()> {
    let socket = listener.path().to_path_buf();
    let state_dir = paths.state_dir.clone();
    let paths = Paths { socket: socket.clone(), ..paths.clone() };
    let fleet_store = store.fleet().cloned();
    let lease = match store.fleet() {
        Some(pg) => lease::Lease::fleet(pg.registered_before() + pg.node().lease.ttl - pg.node().lease.margin()),
        None => lease::Lease::single(),
    };
    let shared = runtime::Shared::start(config, store, clock, shutdown.clone(), &paths, lease);
    // Before any chamber starts: a session may go through it at once.
    match shared.gateway.serve(std::net::SocketAddr::from(([127, 0, 0, 1], 0)), shutdown.clone()).await {
        Ok(addr) => tracing::info!(%addr, "gateway listening"),
        Err(error) => {
            tracing::error!(%error, "the provider gateway cannot listen: sessions that use it will not start")
        }
    }
    // Beside the operator's socket: the way out of a bubblewrap session's
    // own network (`network = "gateway"`).
    let gateway_socket = socket.with_file_name("cryod-gateway.sock");
    if let Err(error) = shared.gateway.serve_unix(&gateway_socket, shutdown.clone()) {
        tracing::warn!(%error, path = %gateway_socket.display(), "the gateway's Unix socket cannot listen: network = \"gateway\" under bwrap will not start");
    }
    let hub_config = config_hub(&shared);
    // The daemon's operations are the fronts' way in; what is wired here
    // (the hub's address, the doors, the cgroups) stays with this `shared`.
    let daemon = Daemon::load(shared.clone()).await?;
    let fleet = fleet::start(&daemon, fleet_store);
    let info = match hub_config {
        Some((bind, chosen)) => match hub::token(&state_dir) {
            Ok(token) => hub::start(daemon.clone(), &bind, chosen, token).await,
            Err(e) => hub::HubInfo { error: Some(format!("cannot make the hub token: {e}")), ..Default::default() },
        },
        None => hub::HubInfo { error: Some("the hub is disabled in cryod.toml".into()), ..Default::default() },
    };
    shared.set_hub(info);
    if let Some(bind) = &shared.config.metrics.listen
        && let Err(error) = hub::serve_metrics(daemon.clone(), bind).await
    {
        tracing::warn!(%error, "no metrics listener");
    }
    server::raise_file_limit();
    let operator = listener.operator();
    let live = shared.clone();
    let session_of: server::SessionOf = std::sync::Arc::new(move |pid| live.live.session_of(pid));
    let (incoming, _guard) = listener.incoming(session_of).context("listening on the socket")?;
    // The sessions' doors: the Agent service alone, each connection tagged
    // with its session.
    let doors = shared.door_rx.take().expect("the doors are served once");
    let doors = tokio_stream::wrappers::UnboundedReceiverStream::new(doors).map(Ok::<_, std::io::Error>);
    let doors_shutdown = shutdown.clone();
    let agent_doors = tonic::transport::Server::builder()
        .add_service(cryo_proto::v1::agent_server::AgentServer::new(rpc::agent::AgentService {
            daemon: daemon.clone(),
        }))
        .serve_with_incoming_shutdown(doors, async move { doors_shutdown.cancelled().await });
    tracing::info!(socket = %socket.display(), pid = std::process::id(), version = cryo_proto::VERSION, "cryod ready");
    system::ready(&daemon);
    system::logind::follow(&daemon);
    let serve_shutdown = shutdown.clone();
    let control = rpc::control::ControlService { daemon: daemon.clone() };
    let (reflection, reflection_alpha) = reflection();
    let (keyed, keyed_alpha) = (operator.clone(), operator.clone());
    let served = tonic::transport::Server::builder()
        .add_service(cryo_proto::v1::control_server::ControlServer::with_interceptor(control, move |r| {
            operator.check(r)
        }))
        // Server reflection, keyed like every other call.
        .add_service(tonic::service::interceptor::InterceptedService::new(reflection, move |r| keyed.check(r)))
        .add_service(tonic::service::interceptor::InterceptedService::new(reflection_alpha, move |r| {
            keyed_alpha.check(r)
        }))
        // Agent calls that come here are told where they belong.
        .add_service(cryo_proto::v1::agent_server::AgentServer::with_interceptor(
            rpc::agent::AgentService { daemon: daemon.clone() },
            |_| Err::<tonic::Request<()>, _>(rpc::agent::not_here()),
        ))
        .serve_with_incoming_shutdown(incoming, async move {
            serve_shutdown.cancelled().await;
        });
    // Sessions end before the server stops, so their agents' last calls
    // (and the fallback messages) still go through.
    let places = shared.places.clone();
    let drain = async {
        shutdown.cancelled().await;
        system::stopping();
        daemon.shutdown().await;
        // What is left of any session's tree goes with cryod.
        tokio::task::block_in_place(|| places.cgroups.close());
        if let Some(fleet) = fleet {
            fleet.leave().await;
        }
    };
    let (served, doors, ()) = tokio::join!(served, agent_doors, drain);
    served.context("serving the socket")?;
    doors.context("serving the sessions' sockets")?;
    tracing::info!("cryod stopped");
    Ok(())
}

/// The server reflection services (v1, and v1alpha, which grpcurl before
/// 1.9 asks), answering with the `cryo.v1` definitions.
fn reflection() -> (
    tonic_reflection::server::v1::ServerReflectionServer<impl tonic_reflection::server::v1::ServerReflection>,
    tonic_reflection::server::v1alpha::ServerReflectionServer<impl tonic_reflection::server::v1alpha::ServerReflection>,
) {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(cryo_proto::FILE_DESCRIPTOR_SET)
            .include_reflection_service(false)
    };
    let v1 = builder().build_v1().expect("the cryo.v1 definitions are whole (the build compiled them)");
    let alpha = builder().build_v1alpha().expect("the cryo.v1 definitions are whole (the build compiled them)");
    (v1, alpha)
}

fn config_hub(shared: &runtime::Shared) -> Option<(String, bool)> {
    shared.config.hub.enabled.then(|| shared.config.hub.bind())
}
