//! The gRPC services: thin adapters from `cryo.v1` messages to [`Daemon`]
//! operations. Conversions live in [`crate::fronts::convert`]; errors map to status codes in
//! one place (`impl From<Error> for tonic::Status`).
//!
//! [`Daemon`]: crate::daemon::Daemon

pub mod agent;
pub mod control;
pub mod follow;

use cryo_proto::v1::{HelloReply, HelloRequest};

use crate::daemon::Daemon;

/// `Hello`: refuses a client of another protocol with one actionable line.
pub fn hello(d: &Daemon, req: &HelloRequest) -> Result<HelloReply, tonic::Status> {
    if req.protocol != cryo_proto::PROTOCOL_VERSION {
        return Err(tonic::Status::failed_precondition(cryo_proto::mismatch_message(
            &req.client,
            &req.version,
            req.protocol,
            cryo_proto::VERSION,
            cryo_proto::PROTOCOL_VERSION,
        )));
    }
    let setup = d.setup();
    let offer = cryo_session::Offer::here(&setup.trees);
    Ok(HelloReply {
        protocol: cryo_proto::PROTOCOL_VERSION,
        version: cryo_proto::VERSION.to_string(),
        pid: std::process::id(),
        started_at: crate::base::clock::rfc3339(d.started_at()),
        chambers: d.chamber_count() as u32,
        loading: d.loading() as u32,
        sandbox: offer.strongest.as_str().to_string(),
        sandbox_default: d.config().sandbox.as_str().to_string(),
        landlock_abi: offer.landlock_abi,
        landlock: offer.landlock,
        watcher: setup.watcher.unwrap_or_default(),
        session_holds: offer.holds,
        agent_path: std::env::var("PATH").unwrap_or_default(),
    })
}

/// Adds to `reply` (a TODO list) the page of the chamber's archived done
/// TODOs that `req` asks for.
pub async fn add_archived(
    daemon: &Daemon,
    chamber: &crate::daemon::ChamberRef,
    req: &cryo_proto::v1::TodoListRequest,
    reply: &mut cryo_proto::v1::TodoListReply,
) -> Result<(), tonic::Status> {
    if req.archived == 0 {
        return Ok(());
    }
    let v = daemon.resolve(chamber).await?;
    let tz: chrono_tz::Tz = reply.timezone.parse().unwrap_or(chrono_tz::UTC);
    let (items, next) = daemon.archived_todos(&v, tz, req.archived_before, req.archived).await?;
    reply.archived = items.iter().map(|t| crate::fronts::convert::todo(t, tz)).collect();
    reply.archived_before = next;
    Ok(())
}
