//! Fleet moves: a chamber dropped, handed over or moved to another node,
//! and a node drained.

use tokio::sync::oneshot;

use super::remote::Command;
use super::*;
use crate::error::{Error, Result};
use crate::store::ChamberRecord;
use crate::supervisor::Event;

impl Daemon {
    /// Drops a chamber at once, finalizing nothing (it is another node's
    /// now, or this node's lease is lost): its agent is killed.
    pub async fn drop_chamber(&self, id: i64) {
        let Some(entry) = self.unregister_here(id) else { return };
        entry.handle.tx.abandon();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), entry.handle.tx.closed()).await;
        self.0.shared.notify(id, crate::services::runtime::NoticeKind::Status);
    }

    /// Takes a chamber out of this node's registry and into its view of the
    /// rest of the fleet in one step, so a lookup meanwhile finds it in one
    /// or the other (never "no chamber named …").
    pub(super) fn unregister_here(&self, id: i64) -> Option<Entry> {
        let mut chambers = self.chambers_mut();
        let entry = chambers.remove(&id)?;
        self.remote_mut().insert(id, entry.record.clone());
        Some(entry)
    }

    /// Hands a chamber over cleanly: its session ends as at shutdown, it is
    /// no longer run here, and the database gives it to node `to` (which
    /// becomes its home) or, without `to`, to whichever node claims it
    /// first. `Ok(false)`: `to` could not take it (it left or began
    /// draining), so it was released to the fleet instead.
    pub async fn hand_over(&self, id: i64, to: Option<&str>) -> Result<bool> {
        let pg = self.0.shared.store.fleet().cloned().ok_or_else(|| Error::Internal("not a fleet".into()))?;
        let handle = self.handle_of(id).await?;
        // The ownership round must not take it back while it goes.
        self.0.leaving.lock().expect("leaving lock").insert(id);
        let went = async {
            let (tx, rx) = oneshot::channel();
            if handle.tx.send(Event::Shutdown(tx)).is_ok() {
                let _ = rx.await;
            }
            let entry = self.unregister_here(id);
            let entry = entry.ok_or_else(|| Error::Unavailable("the chamber was dropped meanwhile".into()))?;
            // Until its supervisor has ended (and let go of its watches), the
            // chamber is still this node's in every way but the registry.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), entry.handle.tx.closed()).await;
            let fence = entry.record.fence();
            if let Some(to) = to
                && pg.assign(fence, to).await?
            {
                return Ok(true);
            }
            pg.release(fence).await?;
            Ok(to.is_none())
        }
        .await;
        self.0.leaving.lock().expect("leaving lock").remove(&id);
        self.0.shared.notify(id, crate::services::runtime::NoticeKind::Status);
        went
    }

    /// Whether the chamber is being handed over by this node now.
    pub fn leaving(&self, id: i64) -> bool {
        self.0.leaving.lock().expect("leaving lock").contains(&id)
    }

    /// The database's record of a chamber, read again (and every other
    /// chamber's, to refresh this node's view of the fleet).
    pub(crate) async fn refresh_record(&self, id: i64) -> Result<ChamberRecord> {
        let records = self.0.shared.store.chambers().await?;
        let found = records.iter().find(|r| r.id == id).cloned();
        self.set_remote(records);
        found.ok_or_else(|| Error::NotFound("the chamber was removed".into()))
    }

    /// Moves a chamber to another node of the fleet (by its name or id): a
    /// clean hand-over, carried out by the chamber's owner. The chamber's
    /// home becomes that node. Returns the view, the node's id and whether
    /// the chamber was there already.
    pub async fn move_to(&self, r: &ChamberRef, to: &str) -> Result<(ChamberView, String, bool)> {
        let v = self.resolve(r).await?;
        let node = self.live_node(to).await?;
        if node.draining {
            return Err(Error::Precondition(format!("node {to:?} is draining: it takes no chambers")));
        }
        if node.domain != v.record.domain {
            return Err(Error::Precondition(format!(
                "node {to:?} is in storage domain {:?}, the chamber in {:?}: it cannot reach the chamber's folder",
                node.domain, v.record.domain
            )));
        }
        let id = node.id.clone();
        let (view, already) = if self.runs(v.record.id) {
            self.move_here_to(v.record.id, &id).await?
        } else {
            let (view, already, _) = self.forward(&v, Command::Move { to: id.clone() }).await?.flags(&v)?;
            (view, already)
        };
        Ok((view, id, already))
    }

    /// Hands a chamber this node runs to node `to`. The flag: it was there
    /// already.
    pub(crate) async fn move_here_to(&self, id: i64, to: &str) -> Result<(ChamberView, bool)> {
        let pg = self.0.shared.store.fleet().cloned().ok_or_else(|| Error::Internal("not a fleet".into()))?;
        let v = self.view_by_id(id).ok_or_else(|| Error::NotFound("the chamber was removed".into()))?;
        if to == pg.node_id() {
            return Ok((v, true));
        }
        if !self.hand_over(id, Some(to)).await? {
            return Err(Error::Unavailable(format!(
                "node {to} can no longer take chamber {:?}; it was released to the fleet",
                v.record.name
            )));
        }
        tracing::info!(chamber = %v.record.name, node = %to, "chamber moved");
        let record = self.refresh_record(id).await?;
        Ok((ChamberView { record, snap: v.snap }, false))
    }

    /// Marks a node draining (by name or id): it takes no chambers, hands
    /// its own over as their sessions end, then leaves the fleet and exits.
    /// Returns the node's id.
    pub async fn drain(&self, node: &str) -> Result<String> {
        let n = self.live_node(node).await?;
        let pg = self.0.shared.store.fleet().ok_or_else(|| Error::Internal("not a fleet".into()))?;
        if !pg.set_draining(&n.id).await? {
            return Err(Error::NotFound(format!("node {node:?} left the fleet meanwhile")));
        }
        tracing::info!(node = %n.id, name = %n.name, "node asked to drain");
        Ok(n.id)
    }

    /// The fleet as the database sees it (on one machine, the store alone).
    pub async fn fleet_status(&self) -> Result<FleetStatus> {
        let shared = &self.0.shared;
        let (store, trust) = (shared.store.describe(), shared.lease.trust());
        let Some(pg) = shared.store.fleet() else {
            return Ok(FleetStatus { store, trust, nodes: None });
        };
        let nodes = pg.nodes().await?;
        let unowned = pg.unowned().await?;
        Ok(FleetStatus { store, trust, nodes: Some(FleetNodes { me: pg.node_id(), nodes, unowned }) })
    }

    /// The live node of the fleet with this name or id.
    pub(super) async fn live_node(&self, name: &str) -> Result<crate::store::postgres::FleetNode> {
        let pg = self.0.shared.store.fleet().cloned().ok_or_else(|| {
            Error::Precondition("this cryod is not a node of a fleet (its store is not PostgreSQL)".into())
        })?;
        let nodes = pg.nodes().await?;
        let mut live: Vec<_> =
            nodes.iter().filter(|n| n.lease_left_ms > 0 && (n.id == name || n.name == name)).cloned().collect();
        match live.len() {
            0 => {
                let names: Vec<_> = nodes.iter().filter(|n| n.lease_left_ms > 0).map(|n| n.name.as_str()).collect();
                Err(Error::NotFound(format!(
                    "no live node named {name:?} (live: {}; see `cryoctl fleet status`)",
                    names.join(", ")
                )))
            }
            1 => Ok(live.remove(0)),
            _ => Err(Error::Invalid(format!("several live nodes are named {name:?}: give the node's id"))),
        }
    }
}

/// What `cryoctl fleet status` shows.
#[derive(Debug, Clone)]
pub struct FleetStatus {
    /// What the store is ("sqlite FILE", "postgres …").
    pub store: String,
    /// This node's trust in its lease.
    pub trust: crate::services::lease::Trust,
    /// The fleet's nodes; `None` on one machine.
    pub nodes: Option<FleetNodes>,
}

/// The nodes of a fleet, as the database sees them.
#[derive(Debug, Clone)]
pub struct FleetNodes {
    /// This node's id.
    pub me: String,
    pub nodes: Vec<crate::store::postgres::FleetNode>,
    /// Chambers no live node owns.
    pub unowned: u32,
}
