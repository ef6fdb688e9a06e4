//! The chamber registry in PostgreSQL: the fleet's chambers
//! (`cryo_chambers`: each with its owner, fence, home and mirror), their
//! settings written under the owner's fence, and the provider accounts held
//! at their limits (`cryo_provider_holds`).

use tokio_postgres::Row;

use super::Postgres;
use crate::base::clock::rfc3339;
use crate::store::{ChamberRecord, Desired, Fence, HoldRecord, NewChamber, StoreError, View, read_time};

/// The chamber columns every query reads, in [`chamber_row`]'s order.
pub(super) const CHAMBER_COLUMNS: &str =
    "id, name, path, desired, created_at, paused, fence, owner, home, domain, mirror, archived, trusted, health";

/// [`CHAMBER_COLUMNS`], each qualified by a table's name or alias.
pub(super) fn columns_of(table: &str) -> String {
    CHAMBER_COLUMNS.split(", ").map(|c| format!("{table}.{c}")).collect::<Vec<_>>().join(", ")
}

pub(super) fn chamber_row(r: &Row) -> ChamberRecord {
    ChamberRecord {
        id: r.get(0),
        name: r.get(1),
        path: r.get(2),
        desired: Desired::parse(r.get(3)),
        created_at: read_time(r.get(4)),
        paused: r.get(5),
        archived: r.get(11),
        trusted: r.get(12),
        health: r.get(13),
        fence: r.get(6),
        owner: r.get(7),
        // Only the fleet's listing joins the owner's name in.
        owner_name: r.try_get(14).ok().flatten(),
        home: r.get(8),
        domain: r.get(9),
        mirror: r.get::<_, Option<String>>(10).and_then(|m| serde_json::from_str(&m).ok()).map(Box::new),
    }
}

pub(super) async fn chambers(pg: &Postgres) -> Result<Vec<ChamberRecord>, StoreError> {
    let rows = pg
        .query(
            &format!(
                "SELECT {}, n.name FROM cryo_chambers c LEFT JOIN cryo_nodes n ON n.id = c.owner
                 ORDER BY c.name",
                columns_of("c")
            ),
            &[],
        )
        .await?;
    Ok(rows.iter().map(chamber_row).collect())
}

pub(super) async fn add_chamber(pg: &Postgres, new: NewChamber) -> Result<(ChamberRecord, bool), StoreError> {
    let mut client = pg.pool.get().await?;
    let tx = client.transaction().await?;
    // Names are unique across the fleet: one registration at a time.
    tx.execute("SELECT pg_advisory_xact_lock(1668446576)", &[]).await?;
    let existing = tx
        .query_opt(
            &format!("SELECT {CHAMBER_COLUMNS} FROM cryo_chambers WHERE domain = $1 AND path = $2"),
            &[&pg.node.domain, &new.path],
        )
        .await?;
    if let Some(row) = existing {
        return Ok((chamber_row(&row), true));
    }
    let mut taken = Vec::new();
    for r in
        tx.query("SELECT name FROM cryo_chambers WHERE name = $1 OR name LIKE $1 || '-%'", &[&new.base_name]).await?
    {
        taken.push(r.get::<_, String>(0));
    }
    let name = crate::store::unique_name(&new, |n| Ok::<_, StoreError>(taken.iter().any(|t| t == n)))?;
    let created_at = rfc3339(new.created_at);
    let row = tx
        .query_one(
            &format!(
                "INSERT INTO cryo_chambers (name, domain, path, created_at, owner, fence, home)
                 VALUES ($1, $2, $3, $4, $5, 1, $6) RETURNING {CHAMBER_COLUMNS}"
            ),
            &[&name, &pg.node.domain, &new.path, &created_at, &pg.node_id(), &pg.node.name],
        )
        .await?;
    tx.execute("SELECT pg_notify('cryo_fleet', 'added')", &[]).await?;
    tx.commit().await?;
    Ok((chamber_row(&row), false))
}

pub(super) async fn remove_chamber(pg: &Postgres, fence: Fence) -> Result<(), StoreError> {
    pg.write(fence, "DELETE FROM cryo_chambers WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r", &[]).await
}

pub(super) async fn set_paused(pg: &Postgres, fence: Fence, paused: bool) -> Result<(), StoreError> {
    pg.write(
        fence,
        "UPDATE cryo_chambers SET paused = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
        &[&paused],
    )
    .await
}

pub(super) async fn set_archived(pg: &Postgres, fence: Fence, archived: bool) -> Result<(), StoreError> {
    pg.write(
        fence,
        "UPDATE cryo_chambers SET archived = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
        &[&archived],
    )
    .await
}

pub(super) async fn set_trusted(pg: &Postgres, fence: Fence, trusted: String) -> Result<(), StoreError> {
    pg.write(
        fence,
        "UPDATE cryo_chambers SET trusted = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
        &[&trusted],
    )
    .await
}

pub(super) async fn set_health(pg: &Postgres, fence: Fence, health: String) -> Result<(), StoreError> {
    pg.write(
        fence,
        "UPDATE cryo_chambers SET health = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
        &[&health],
    )
    .await
}

pub(super) async fn set_desired(pg: &Postgres, fence: Fence, desired: Desired) -> Result<(), StoreError> {
    pg.write(
        fence,
        "UPDATE cryo_chambers SET desired = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
        &[&desired.as_str()],
    )
    .await
}

pub(super) async fn set_mirror(pg: &Postgres, fence: Fence, view: View) -> Result<(), StoreError> {
    let json = serde_json::to_string(&view).unwrap_or_default();
    pg.write(
        fence,
        "UPDATE cryo_chambers SET mirror = $4 WHERE id = (SELECT id FROM f) RETURNING 1::int8 AS r",
        &[&json],
    )
    .await
}

pub(super) async fn set_hold(pg: &Postgres, h: HoldRecord) -> Result<(), StoreError> {
    let until = rfc3339(h.until);
    pg.query(
        "INSERT INTO cryo_provider_holds (account, until, source, guessed) VALUES ($1, $2, $3, $4)
         ON CONFLICT (account) DO UPDATE SET until = $2, source = $3, guessed = $4",
        &[&h.account, &until, &h.source, &h.guessed],
    )
    .await
    .map(drop)
}

pub(super) async fn holds(pg: &Postgres) -> Result<Vec<HoldRecord>, StoreError> {
    let rows =
        pg.query("SELECT account, until, source, guessed FROM cryo_provider_holds ORDER BY account", &[]).await?;
    Ok(rows
        .iter()
        .map(|r| HoldRecord { account: r.get(0), until: read_time(r.get(1)), source: r.get(2), guessed: r.get(3) })
        .collect())
}
