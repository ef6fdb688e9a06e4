//! The chamber registry in SQLite: which folders cryod runs, under which
//! names, and whether each should be running (the desired state survives
//! restarts).

use rusqlite::{OptionalExtension, params};

use super::super::{ChamberRecord, Desired, NewChamber, StoreError, read_time, unique_name};

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ChamberRecord> {
    Ok(ChamberRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        path: r.get(2)?,
        desired: Desired::parse(&r.get::<_, String>(3)?),
        created_at: read_time(&r.get::<_, String>(4)?),
        paused: r.get::<_, i64>(5)? != 0,
        fence: r.get(6)?,
        archived: r.get::<_, i64>(7)? != 0,
        trusted: r.get(8)?,
        health: r.get(9)?,
        owner: None,
        owner_name: None,
        home: None,
        domain: String::new(),
        mirror: None,
    })
}

/// A chamber's columns; its fence is the owner's, every chamber's.
const COLUMNS: &str =
    "id, name, path, desired, created_at, paused, (SELECT fence FROM owner), archived, trusted, health";

pub(super) fn chambers(c: &rusqlite::Connection) -> Result<Vec<ChamberRecord>, StoreError> {
    let mut st = c.prepare(&format!("SELECT {COLUMNS} FROM chambers ORDER BY name"))?;
    let rows = st.query_map([], row)?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

pub(super) fn chamber(c: &rusqlite::Connection, id: i64) -> Result<Option<ChamberRecord>, StoreError> {
    Ok(c.query_row(&format!("SELECT {COLUMNS} FROM chambers WHERE id = ?1"), [id], row).optional()?)
}

pub(super) fn add_chamber(c: &mut rusqlite::Connection, new: NewChamber) -> Result<(ChamberRecord, bool), StoreError> {
    let tx = c.savepoint()?;
    if let Some(existing) =
        tx.query_row(&format!("SELECT {COLUMNS} FROM chambers WHERE path = ?1"), [&new.path], row).optional()?
    {
        return Ok((existing, true));
    }
    let name = unique_name(&new, |name| {
        tx.query_row("SELECT 1 FROM chambers WHERE name = ?1", [name], |_| Ok(())).optional().map(|o| o.is_some())
    })?;
    tx.execute(
        "INSERT INTO chambers (id, name, path, desired, created_at)
         VALUES ((SELECT next_chamber FROM owner), ?1, ?2, 'stopped', ?3)",
        params![name, new.path, crate::base::clock::rfc3339(new.created_at)],
    )?;
    let id = tx.last_insert_rowid();
    tx.execute("UPDATE owner SET next_chamber = next_chamber + 1", [])?;
    let fence = tx.query_row("SELECT fence FROM owner", [], |r| r.get(0))?;
    tx.commit()?;
    Ok((
        ChamberRecord {
            id,
            name,
            path: new.path,
            desired: Desired::Stopped,
            paused: false,
            archived: false,
            created_at: new.created_at,
            fence,
            trusted: None,
            health: None,
            owner: None,
            owner_name: None,
            home: None,
            domain: String::new(),
            mirror: None,
        },
        false,
    ))
}
