//! A fleet node's loops: the lease, its trust, and ownership.
//!
//! - **Renewal**, every heartbeat: the time is taken *before* the renewal is
//!   sent; if it comes back, the node trusts its lease until that time plus
//!   the TTL minus a margin, on its own monotonic clock (the database judges
//!   expiry on its own clock, from a later instant, so the node always stops
//!   trusting first). Every keeper's deadline moves with it.
//! - **Watch**, asleep until the next instant that matters (woken when a
//!   renewal moves the end of trust): with less than half the TTL of trust
//!   left the node freezes (agents stopped, no effect performed); a renewal
//!   thaws it. With none left the lease is lost: agents killed, chambers
//!   dropped unfinalized; the node then joins again under a new id.
//! - **Ownership**, every heartbeat and on each `cryo_fleet` notification:
//!   claim this node's share, take the chambers moved to it, drop what the
//!   database says is no longer ours, hand idle surplus back when others
//!   have joined (or all of it when draining, then leave), and refresh the
//!   view of the chambers other nodes run.
//! - **Commands**, on `cmd:<this node>`: operations other nodes were asked
//!   for on chambers this node runs ([`crate::daemon::remote`]).
//! - **Mail**, on `mail:<chamber>`: another node saw mail written into a
//!   chamber this node runs; its inbox is read again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::daemon::Daemon;
use crate::services::lease::Trust;
use crate::store::postgres::{LeaseTimes, NodeInfo, Postgres};

/// This node's identity from `cryod.toml`: a fresh id, the stable name, the
/// storage domain (this machine unless `[store] domain` names a shared one).
pub fn node_info(config: &Config, socket: &std::path::Path) -> NodeInfo {
    let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".into());
    let domain = config.store.domain.clone().unwrap_or_else(|| {
        let id = std::fs::read_to_string("/etc/machine-id").map(|s| s.trim().to_string()).unwrap_or_default();
        if id.is_empty() { format!("host:{host}") } else { format!("machine:{id}") }
    });
    NodeInfo {
        id: crate::base::random::hex(8),
        name: config.store.node.clone().unwrap_or_else(|| host.clone()),
        domain,
        host,
        pid: std::process::id(),
        socket: socket.display().to_string(),
        capacity: config.session_limit() as u32,
        lease: LeaseTimes {
            heartbeat: Duration::from_millis(config.store.heartbeat_ms),
            ttl: Duration::from_millis(config.store.lease_ms),
        },
    }
}

/// A fleet node's running loops. The lease is kept (renewed, watched)
/// until the node has left, through the end of its sessions at shutdown;
/// ownership stops changing when shutdown begins.
pub struct Loops {
    daemon: Daemon,
    pg: Arc<Postgres>,
    /// Cancelled once the node has left the fleet.
    left: CancellationToken,
}

/// Starts the node's loops on the fleet's store (`None` on one machine).
pub fn start(daemon: &Daemon, pg: Option<Arc<Postgres>>) -> Option<Loops> {
    let pg = pg?;
    let left = CancellationToken::new();
    let (kick, kicks) = tokio::sync::mpsc::unbounded_channel();
    let (heard, hearing) = tokio::sync::mpsc::unbounded_channel();
    let (ask, asks) = tokio::sync::mpsc::unbounded_channel();
    pg.listen(heard, daemon.stopping());
    tokio::spawn(route(daemon.clone(), pg.clone(), hearing, kick.clone(), ask));
    tokio::spawn(renew(daemon.clone(), pg.clone(), left.clone()));
    tokio::spawn(watch(daemon.clone(), pg.clone(), kick, left.clone()));
    tokio::spawn(own(daemon.clone(), pg.clone(), kicks));
    tokio::spawn(serve(daemon.clone(), pg.clone(), asks));
    Some(Loops { daemon: daemon.clone(), pg, left })
}

/// Sends each notification on `cryo_fleet` where it belongs: commands for
/// this node to [`serve`], mail to its chamber, the rest (nodes joined or
/// left, chambers released, added, moved) to the ownership loop.
async fn route(
    daemon: Daemon,
    pg: Arc<Postgres>,
    mut heard: tokio::sync::mpsc::UnboundedReceiver<String>,
    kick: tokio::sync::mpsc::UnboundedSender<String>,
    ask: tokio::sync::mpsc::UnboundedSender<()>,
) {
    while let Some(payload) = heard.recv().await {
        if let Some(node) = payload.strip_prefix("cmd:") {
            if node == pg.node_id() {
                let _ = ask.send(());
            }
        } else if let Some(id) = payload.strip_prefix("mail:").and_then(|id| id.parse().ok()) {
            daemon.rescan(id);
        } else {
            // A reconnection may have missed anything.
            if payload == "reconnected" {
                let _ = ask.send(());
            }
            let _ = kick.send(payload);
        }
    }
}

/// Carries out the commands other nodes asked of this one, each in its own
/// task (a `stop` may wait for a session to end), on each `cmd:` for this
/// node and on each (re)connection of the listener (what was asked while
/// it was away).
async fn serve(daemon: Daemon, pg: Arc<Postgres>, mut asks: tokio::sync::mpsc::UnboundedReceiver<()>) {
    let stopping = daemon.stopping();
    loop {
        tokio::select! {
            a = asks.recv() => if a.is_none() { return },
            _ = stopping.cancelled() => return,
        }
        while asks.try_recv().is_ok() {}
        // (Taken even while frozen: each supervisor waits at its gate before
        // any effect, and a chamber dropped meanwhile is answered "moved".)
        let taken = match pg.take_commands().await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the commands asked of this node");
                continue;
            }
        };
        for c in taken {
            let (daemon, pg) = (daemon.clone(), pg.clone());
            tokio::spawn(async move {
                let reply = daemon.answer(c.chamber, &c.body).await;
                if let Err(e) = pg.answer(c.id, &reply).await {
                    tracing::warn!(error = %e, command = c.id, "cannot answer a command");
                }
            });
        }
    }
}

fn times(pg: &Postgres) -> LeaseTimes {
    pg.node().lease
}

async fn renew(daemon: Daemon, pg: Arc<Postgres>, left: CancellationToken) {
    let lease = daemon.lease();
    let t = times(&pg);
    let mut tick = tokio::time::interval(t.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = left.cancelled() => return,
        }
        let (Trust::Held { epoch } | Trust::Frozen { epoch }) = lease.trust() else { continue };
        let sent = Instant::now();
        match tokio::time::timeout(t.heartbeat, pg.renew()).await {
            Ok(Ok(true)) if lease.trust().epoch() == epoch => {
                lease.trust_until(sent + t.ttl - t.margin());
                if matches!(lease.trust(), Trust::Frozen { .. }) && lease.left() >= Some(t.freeze_below()) {
                    tracing::info!("the lease is renewed: thawing");
                    lease.set(Trust::Held { epoch });
                }
            }
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                tracing::error!("the lease has expired in the database");
                lease.trust_until(Instant::now());
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew the lease"),
            Err(_) => tracing::warn!("renewing the lease takes longer than a heartbeat"),
        }
    }
}

/// Sleeps until the next instant that matters (the freeze point while held,
/// the end of trust while frozen) and wakes early when a renewal moves it.
async fn watch(
    daemon: Daemon,
    pg: Arc<Postgres>,
    kick: tokio::sync::mpsc::UnboundedSender<String>,
    left: CancellationToken,
) {
    let lease = daemon.lease();
    let t = times(&pg);
    let mut until = lease.until();
    loop {
        let Some(end) = *until.borrow_and_update() else { return };
        // (`lost` runs in this task, and leaves the lease held or the
        // daemon stopping: a lost lease is never seen here.)
        let at = match lease.trust() {
            Trust::Held { .. } => end.checked_sub(t.freeze_below()).unwrap_or(end),
            Trust::Frozen { .. } | Trust::Lost { .. } => end,
        };
        tokio::select! {
            _ = tokio::time::sleep_until(at.into()) => {}
            r = until.changed() => if r.is_err() { return } else { continue },
            _ = left.cancelled() => return,
        }
        // A renewal may have come in just now: judge by the trust left.
        let left = lease.left().unwrap_or(Duration::ZERO);
        match lease.trust() {
            Trust::Held { epoch } | Trust::Frozen { epoch } if left.is_zero() => lost(&daemon, &pg, epoch, &kick).await,
            Trust::Held { epoch } if left < t.freeze_below() => {
                tracing::warn!(left_ms = left.as_millis() as u64, "the lease is not being renewed: freezing");
                lease.set(Trust::Frozen { epoch });
            }
            _ => {}
        }
    }
}

/// The trust window ran out: kill the agents, drop every chamber without
/// finalizing, then join again as a new node.
async fn lost(daemon: &Daemon, pg: &Postgres, epoch: u64, kick: &tokio::sync::mpsc::UnboundedSender<String>) {
    let lease = daemon.lease();
    tracing::error!("the lease is lost: killing this node's agents and dropping its chambers");
    lease.set(Trust::Lost { epoch });
    for local in daemon.local() {
        daemon.drop_chamber(local.fence.chamber).await;
    }
    let t = times(pg);
    let stopping = daemon.stopping();
    loop {
        if stopping.is_cancelled() {
            return;
        }
        let id = crate::base::random::hex(8);
        match pg.rejoin(id.clone()).await {
            Ok(()) => {
                lease.trust_until(pg.registered_before() + t.ttl - t.margin());
                lease.set(Trust::Held { epoch: epoch + 1 });
                tracing::info!(node = %id, "joined the fleet again");
                let _ = kick.send("rejoined".into());
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot join the fleet again yet");
                tokio::time::sleep(t.heartbeat).await;
            }
        }
    }
}

async fn own(daemon: Daemon, pg: Arc<Postgres>, mut kicks: tokio::sync::mpsc::UnboundedReceiver<String>) {
    let t = times(&pg);
    // Nodes starting together see each other before the first claim.
    let mut next = tokio::time::Instant::now() + t.heartbeat;
    let mut rounds = 0u64;
    // A round reads every record, so its cost grows with the fleet, and every
    // registration anywhere kicks one. A kicked round waits until twice the
    // last read's length has passed since the round ended: reads take at
    // most a third of the time (at 20,000 chambers they had taken all of
    // it, and registrations slowed to 44 a second). The chambers a round
    // takes up or hands over are work, not overhead, and are not counted.
    let mut earliest = tokio::time::Instant::now();
    let stopping = daemon.stopping();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            k = kicks.recv() => if k.is_none() { return },
            _ = stopping.cancelled() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep_until(earliest) => {}
            _ = stopping.cancelled() => return,
        }
        // Several notifications at once make one round.
        while kicks.try_recv().is_ok() {}
        next = tokio::time::Instant::now() + t.heartbeat;
        if !matches!(daemon.lease().trust(), Trust::Held { .. }) || stopping.is_cancelled() {
            continue;
        }
        match round(&daemon, &pg).await {
            Ok(read) => earliest = tokio::time::Instant::now() + read * 2,
            Err(e) => tracing::warn!(error = %e, "the ownership round failed"),
        }
        rounds += 1;
        if rounds.is_multiple_of(64) {
            let _ = pg.forget_dead().await;
        }
        // Another machine's writes into a shared folder reach no watcher here.
        if daemon.config().store.domain.is_some() {
            for l in daemon.local() {
                daemon.rescan(l.fence.chamber);
            }
        }
    }
}

/// One ownership round; returns how long reading every record took.
async fn round(daemon: &Daemon, pg: &Postgres) -> Result<Duration, crate::store::StoreError> {
    let claimed = pg.claim().await?;
    let held = || matches!(daemon.lease().trust(), Trust::Held { .. });
    for record in claimed.taken {
        if !held() {
            break;
        }
        daemon.adopt(record).await;
    }
    // What runs here, taken before the database is read: a chamber
    // registered here meanwhile is run here before its record can be in
    // what is read, and must not be dropped for that (at 100,000
    // registrations, 82,775 were dropped and taken again).
    let local = daemon.local();
    let reading = tokio::time::Instant::now();
    let records = crate::store::Backend::chambers(pg).await?;
    let read = reading.elapsed();
    let me = pg.node_id();
    // What the database says is ours: a chamber moved here is taken;
    // anything run here that is not ours is dropped.
    let owned: HashMap<i64, i64> =
        records.iter().filter(|r| r.owner.as_deref() == Some(&me)).map(|r| (r.id, r.fence)).collect();
    for record in records.iter().filter(|r| r.owner.as_deref() == Some(&me) && !daemon.runs(r.id)) {
        if held() && !daemon.leaving(record.id) {
            daemon.adopt(record.clone()).await;
        }
    }
    for l in &local {
        if owned.get(&l.fence.chamber) != Some(&l.fence.token) {
            tracing::warn!(chamber = l.fence.chamber, "the chamber is no longer this node's");
            daemon.drop_chamber(l.fence.chamber).await;
        }
    }
    // Others joined (or this node drains): hand idle chambers beyond the
    // share back (a running session finishes first). Chambers whose home is
    // this node go only for the part of the surplus the others cannot
    // cover: a chamber moved here stays. Shares are rounded up, so every
    // node can be within its own at once: nothing is handed to and fro.
    // Counted as the share was: one registered since the claim is in
    // neither (it was handed away and taken back, a fence lost for nothing).
    let surplus = (owned.len() as u32).min(claimed.owned).saturating_sub(claimed.share) as usize;
    if surplus > 0 {
        let name = &pg.node().name;
        let ours: Vec<_> = local.iter().filter(|l| owned.contains_key(&l.fence.chamber)).collect();
        let (home, away): (Vec<_>, Vec<_>) = ours.into_iter().partition(|l| l.home.as_ref() == Some(name));
        let home_may_go = surplus.saturating_sub(away.len());
        let idle: Vec<_> = (away.into_iter().filter(|l| !l.running).take(surplus))
            .chain(home.into_iter().filter(|l| !l.running).take(home_may_go))
            .collect();
        tracing::info!(chambers = idle.len(), share = claimed.share, "handing surplus chambers over");
        for l in idle {
            if let Err(e) = daemon.hand_over(l.fence.chamber, None).await {
                tracing::warn!(error = %e, chamber = l.fence.chamber, "cannot hand the chamber over");
            }
        }
    }
    daemon.set_remote(records);
    if claimed.draining && daemon.local().is_empty() {
        tracing::info!("drained: every chamber is handed over; leaving the fleet");
        daemon.begin_shutdown();
    }
    Ok(read)
}

impl Loops {
    /// On shutdown, once the sessions have ended: leave the fleet (its
    /// chambers are released at once, and the others told), then stop
    /// keeping the lease.
    pub async fn leave(self) {
        let lease = self.daemon.lease();
        if matches!(lease.trust(), Trust::Held { .. } | Trust::Frozen { .. }) {
            match tokio::time::timeout(Duration::from_secs(2), self.pg.leave()).await {
                Ok(Ok(())) => tracing::info!("left the fleet; its chambers are released"),
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot leave the fleet cleanly; its lease will expire"),
                Err(_) => tracing::warn!("leaving the fleet timed out; its lease will expire"),
            }
        }
        self.left.cancel();
    }
}
