//! Nodes, leases and ownership in PostgreSQL.
//!
//! A node is one cryod process: a fresh id per start, a stable name (the
//! chambers' "home"), a storage domain (the root its chamber folders live
//! under, shared by the nodes that can run them) and a lease. The lease's
//! expiry is judged only by the database's clock (`now()`); the node's own
//! trust in it only by its monotonic clock (see `cryod::fronts::fleet`). A renewal
//! never revives an expired lease: a node that was away too long must
//! register again, under a new id, and its chambers have new fences.

use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::AsyncMessage;

use super::Postgres;
use super::registry::{chamber_row, columns_of};
use crate::store::{ChamberRecord, Fence, StoreError};

/// The lease's timings. The defaults sit between the reference systems'
/// (River: elect every 5 s, expire after 15 s; Quartz: check in every
/// 7.5 s, failed after 15 s; Oban: expire after 30 s): renewed every 3 s,
/// expired after 18 s, so a dead node's chambers are taken over within
/// about 23 s (the TTL, a tenth of it, and a claim round), under 30 s. A
/// node freezes once two renewals in a row did not come back (7.2 s
/// without one). Tests scale them down in the same ratios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimes {
    /// How often the lease is renewed (and ownership reconsidered).
    pub heartbeat: Duration,
    /// How long a renewal lasts, on the database's clock.
    pub ttl: Duration,
}

impl Default for LeaseTimes {
    fn default() -> Self {
        LeaseTimes { heartbeat: Duration::from_secs(3), ttl: Duration::from_secs(18) }
    }
}

impl LeaseTimes {
    /// How long before the database's expiry a node stops trusting its
    /// lease (room for clock-rate drift and a write that was under way), and
    /// how long after it the others wait before taking its chambers (room
    /// for a keeper that kills its agent late).
    pub fn margin(&self) -> Duration {
        self.ttl / 10
    }

    /// A node freezes (stops its agents, writes nothing) once less than
    /// this much trust is left: two renewals in a row did not come back.
    pub fn freeze_below(&self) -> Duration {
        self.ttl / 2
    }
}

/// Who this node is.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Fresh for every start of cryod.
    pub id: String,
    /// Stable across starts (the host name unless set): a chamber's home.
    pub name: String,
    pub domain: String,
    pub host: String,
    pub pid: u32,
    pub socket: String,
    /// Sessions this node runs at once; chambers are shared out in
    /// proportion to it.
    pub capacity: u32,
    pub lease: LeaseTimes,
}

/// A node as `cryoctl fleet status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetNode {
    pub id: String,
    pub name: String,
    pub domain: String,
    pub host: String,
    pub pid: u32,
    pub capacity: u32,
    pub draining: bool,
    /// Milliseconds of lease left on the database's clock (negative: expired).
    pub lease_left_ms: i64,
    /// Milliseconds since the last renewal reached the database.
    pub renewed_ago_ms: i64,
    pub chambers: u32,
    pub started_at: String,
}

/// What one claim round did.
#[derive(Debug, Default)]
pub struct Claimed {
    /// Chambers this node took (each with its new fence).
    pub taken: Vec<ChamberRecord>,
    /// This node's fair share of its domain's chambers now.
    pub share: u32,
    /// The chambers this node owned when the share was reckoned, with
    /// those it took: a chamber registered since is in neither.
    pub owned: u32,
    /// This node is draining: it takes nothing and hands all it has over.
    pub draining: bool,
}

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

impl Postgres {
    /// Registers this node with a fresh lease (at connect, and again after
    /// a lost lease under a new id).
    pub(super) async fn register(&self) -> Result<(), StoreError> {
        let n = &self.node;
        let id = self.node_id();
        let client = self.pool.get().await?;
        *self.registered.lock().expect("registration lock") = std::time::Instant::now();
        client
            .execute(
                "INSERT INTO cryo_nodes (id, name, domain, host, pid, socket, capacity, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, now() + $8::int8 * interval '1 millisecond')",
                &[&id, &n.name, &n.domain, &n.host, &(n.pid as i32), &n.socket, &(n.capacity as i32), &ms(n.lease.ttl)],
            )
            .await?;
        client.execute("SELECT pg_notify('cryo_fleet', 'joined')", &[]).await?;
        Ok(())
    }

    /// Joins again under a fresh id, after the lease was lost: every chamber
    /// this node had is someone else's (or unowned) now.
    pub async fn rejoin(&self, id: String) -> Result<(), StoreError> {
        *self.id.write().expect("node id lock") = id;
        self.register().await
    }

    /// Renews the lease. `Ok(false)`: it had expired (or the node was
    /// removed); it is gone for good.
    pub async fn renew(&self) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let st = client
            .prepare_cached(
                "UPDATE cryo_nodes SET renewed_at = now(), expires_at = now() + $2::int8 * interval '1 millisecond'
                 WHERE id = $1 AND expires_at > now()",
            )
            .await?;
        Ok(client.execute(&st, &[&self.node_id(), &ms(self.node.lease.ttl)]).await? == 1)
    }

    /// One claim round: this node takes unowned chambers of its domain (and
    /// those of nodes whose lease expired a margin ago), up to its share, preferring
    /// those whose home it is and leaving those whose home node is alive.
    /// Rows another node is claiming are skipped (`SKIP LOCKED`).
    pub async fn claim(&self) -> Result<Claimed, StoreError> {
        let n = &self.node;
        let id = self.node_id();
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let counts = tx
            .query_one(
                "SELECT
                    (SELECT count(*) FROM cryo_chambers WHERE domain = $1),
                    (SELECT coalesce(sum(capacity), 0)::int8 FROM cryo_nodes
                       WHERE domain = $1 AND expires_at > now() AND NOT draining),
                    (SELECT count(*) FROM cryo_chambers WHERE owner = $2),
                    (SELECT draining FROM cryo_nodes WHERE id = $2 AND expires_at > now())",
                &[&n.domain, &id],
            )
            .await?;
        let (total, capacity, owned): (i64, i64, i64) = (counts.get(0), counts.get(1), counts.get(2));
        let me: Option<bool> = counts.get(3);
        let Some(draining) = me else {
            return Err(StoreError::Postgres("this node's lease has expired".into()));
        };
        let share = if draining || capacity == 0 { 0 } else { (total * n.capacity as i64 + capacity - 1) / capacity };
        let want = share - owned;
        let mut taken = Vec::new();
        if want > 0 {
            // An expired owner's chambers are taken only a margin after its
            // expiry: its agents' keepers kill them a margin before it, so a
            // keeper that acts late (starved of CPU) still has that much more.
            let grace = n.lease.margin().as_millis() as i64;
            let rows = tx
                .query(
                    &format!(
                        "WITH c AS (
                            SELECT ch.id FROM cryo_chambers ch LEFT JOIN cryo_nodes o ON o.id = ch.owner
                            WHERE ch.domain = $1
                              AND (ch.owner IS NULL OR o.expires_at <= now() - $5::int8 * interval '1 millisecond')
                            ORDER BY (ch.home IS NOT DISTINCT FROM $3) DESC,
                                     EXISTS (SELECT 1 FROM cryo_nodes h WHERE h.name = ch.home AND h.id <> $2
                                             AND h.expires_at > now() AND NOT h.draining),
                                     ch.id
                            LIMIT $4
                            FOR UPDATE OF ch SKIP LOCKED)
                         UPDATE cryo_chambers SET owner = $2, fence = cryo_chambers.fence + 1
                         FROM c WHERE cryo_chambers.id = c.id
                         RETURNING {}",
                        columns_of("cryo_chambers")
                    ),
                    &[&n.domain, &id, &n.name, &want, &grace],
                )
                .await?;
            taken = rows.iter().map(chamber_row).collect();
        }
        tx.commit().await?;
        let owned = owned as u32 + taken.len() as u32;
        Ok(Claimed { share: share as u32, owned, taken, draining })
    }

    /// Gives a chamber up (a clean hand-over): another node may take it at
    /// once, and is told so.
    pub async fn release(&self, fence: Fence) -> Result<(), StoreError> {
        self.write(
            fence,
            "UPDATE cryo_chambers SET owner = NULL WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
            &[],
        )
        .await?;
        self.notify("released").await
    }

    /// Hands a chamber straight to another live node of its domain (`chamber
    /// move`), which becomes its home: the fence is incremented, so this node
    /// can write nothing more for it. `Ok(false)`: no such node can take it.
    pub async fn assign(&self, fence: Fence, to: &str) -> Result<bool, StoreError> {
        let moved = self
            .fenced(
                fence,
                "UPDATE cryo_chambers SET owner = n.id, home = n.name, fence = cryo_chambers.fence + 1
                 FROM cryo_nodes n
                 WHERE cryo_chambers.id = (SELECT id FROM f) AND n.id = $4 AND n.expires_at > now()
                   AND NOT n.draining AND n.domain = cryo_chambers.domain
                 RETURNING cryo_chambers.fence AS r",
                &[&to],
            )
            .await?;
        if moved.is_some() {
            self.notify("moved").await?;
        }
        Ok(moved.is_some())
    }

    /// Leaves the fleet: every chamber still owned is released and the node
    /// row goes.
    pub async fn leave(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client.execute("DELETE FROM cryo_nodes WHERE id = $1", &[&self.node_id()]).await?;
        client.execute("SELECT pg_notify('cryo_fleet', 'left')", &[]).await?;
        Ok(())
    }

    /// Marks this node (or another, by id or name) draining: it takes no
    /// chambers and hands its own over.
    pub async fn set_draining(&self, node: &str) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let n = client
            .execute(
                "UPDATE cryo_nodes SET draining = true WHERE (id = $1 OR name = $1) AND expires_at > now()",
                &[&node],
            )
            .await?;
        client.execute("SELECT pg_notify('cryo_fleet', 'draining')", &[]).await?;
        Ok(n > 0)
    }

    /// Every node (live, or expired less than a minute ago), with its
    /// chambers and lease as the database's clock sees them.
    pub async fn nodes(&self) -> Result<Vec<FleetNode>, StoreError> {
        let rows = self
            .query(
                "SELECT n.id, n.name, n.domain, n.host, n.pid, n.capacity, n.draining,
                        (extract(epoch FROM n.expires_at - now()) * 1000)::int8,
                        (extract(epoch FROM now() - n.renewed_at) * 1000)::int8,
                        (SELECT count(*) FROM cryo_chambers c WHERE c.owner = n.id),
                        to_char(n.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
                 FROM cryo_nodes n WHERE n.expires_at > now() - interval '1 minute'
                 ORDER BY n.name, n.started_at",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| FleetNode {
                id: r.get(0),
                name: r.get(1),
                domain: r.get(2),
                host: r.get(3),
                pid: r.get::<_, i32>(4) as u32,
                capacity: r.get::<_, i32>(5) as u32,
                draining: r.get(6),
                lease_left_ms: r.get(7),
                renewed_ago_ms: r.get(8),
                chambers: r.get::<_, i64>(9) as u32,
                started_at: r.get(10),
            })
            .collect())
    }

    /// Chambers no live node owns (on the database's clock): being taken over.
    pub async fn unowned(&self) -> Result<u32, StoreError> {
        let rows = self
            .query(
                "SELECT count(*) FROM cryo_chambers c LEFT JOIN cryo_nodes n ON n.id = c.owner
                 WHERE n.id IS NULL OR n.expires_at <= now()",
                &[],
            )
            .await?;
        Ok(rows.first().map_or(0, |r| r.get::<_, i64>(0)) as u32)
    }

    /// Forgets nodes whose lease expired more than a minute ago (their
    /// chambers' owner becomes NULL, as if released).
    pub async fn forget_dead(&self) -> Result<u64, StoreError> {
        let client = self.pool.get().await?;
        // Commands whose asker gave up long ago (it died before reading the answer).
        client.execute("DELETE FROM cryo_commands WHERE asked_at < now() - interval '1 hour'", &[]).await?;
        Ok(client.execute("DELETE FROM cryo_nodes WHERE expires_at < now() - interval '1 minute'", &[]).await?)
    }

    pub async fn notify(&self, what: &str) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client.execute("SELECT pg_notify('cryo_fleet', $1)", &[&what]).await?;
        Ok(())
    }

    /// Listens on `cryo_fleet` over a connection of its own (a pooled one
    /// could be recycled under the LISTEN), reconnecting when it drops. Each
    /// notification, and each (re)connection once its LISTEN holds
    /// (`"reconnected"`: anything sent before may have been missed), is
    /// sent to `tx`; answers to this node's commands wake their askers
    /// here (all of them on a reconnection, to look again).
    pub fn listen(&self, tx: tokio::sync::mpsc::UnboundedSender<String>, stop: tokio_util::sync::CancellationToken) {
        let (config, tls, waiters) = (self.config.clone(), self.tls.clone(), self.waiters.clone());
        // An answer to a command this node asked wakes its asker here.
        let answered = move |payload: &str| {
            let Some(id) = payload.strip_prefix("done:").and_then(|id| id.parse::<i64>().ok()) else { return false };
            if let Some(n) = waiters.lock().expect("waiters lock").get(&id) {
                n.notify_one();
            }
            true
        };
        let waiters = self.waiters.clone();
        let missed = move || waiters.lock().expect("waiters lock").values().for_each(|n| n.notify_one());
        tokio::spawn(async move {
            loop {
                match config.connect(tls.clone()).await {
                    Ok((client, mut conn)) => {
                        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
                        let listen = client.batch_execute("LISTEN cryo_fleet");
                        tokio::pin!(listen);
                        // The LISTEN is answered through the connection, so
                        // drive both until it is.
                        let mut listening = false;
                        loop {
                            tokio::select! {
                                r = &mut listen, if !listening => {
                                    if r.is_err() { break; }
                                    listening = true;
                                    missed();
                                    let _ = tx.send("reconnected".into());
                                }
                                m = messages.next() => match m {
                                    Some(Ok(AsyncMessage::Notification(n))) => {
                                        if answered(n.payload()) { continue; }
                                        if tx.send(n.payload().to_string()).is_err() { return; }
                                    }
                                    Some(Ok(_)) => {}
                                    Some(Err(_)) | None => break,
                                },
                                _ = stop.cancelled() => return,
                            }
                        }
                    }
                    Err(e) => tracing::debug!(error = %super::one_line(&e), "cannot listen on the fleet's channel"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.cancelled() => return,
                }
            }
        });
    }
}
