//! The chamber registry: which folders cryod runs, under which names, and
//! whether each should be running (the desired state survives restarts).

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Desired {
    Stopped,
    Started,
}

impl Desired {
    fn as_str(self) -> &'static str {
        match self {
            Desired::Stopped => "stopped",
            Desired::Started => "started",
        }
    }

    fn parse(s: &str) -> Desired {
        if s == "started" { Desired::Started } else { Desired::Stopped }
    }
}

/// One registered chamber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChamberRecord {
    pub id: i64,
    pub name: String,
    /// Canonical absolute path.
    pub path: String,
    pub desired: Desired,
    /// Started but paused: no session starts until resumed.
    pub paused: bool,
    /// RFC 3339.
    pub created_at: String,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ChamberRecord> {
    Ok(ChamberRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        path: r.get(2)?,
        desired: Desired::parse(&r.get::<_, String>(3)?),
        created_at: r.get(4)?,
        paused: r.get::<_, i64>(5)? != 0,
    })
}

const COLUMNS: &str = "id, name, path, desired, created_at, paused";

impl Store {
    pub async fn chambers(&self) -> Result<Vec<ChamberRecord>, StoreError> {
        self.call(|c| {
            let mut st = c.prepare(&format!("SELECT {COLUMNS} FROM chambers ORDER BY name"))?;
            let rows = st.query_map([], row)?.collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Registers a chamber. `base_name` is made unique by a `-2`, `-3`...
    /// suffix. Returns the record and whether it existed already (same path).
    pub async fn add_chamber(
        &self,
        base_name: String,
        exact_name: bool,
        path: String,
        created_at: String,
    ) -> Result<(ChamberRecord, bool), StoreError> {
        self.call(move |c| {
            let tx = c.transaction()?;
            if let Some(existing) =
                tx.query_row(&format!("SELECT {COLUMNS} FROM chambers WHERE path = ?1"), [&path], row).optional()?
            {
                return Ok((existing, true));
            }
            let taken = |name: &str| -> rusqlite::Result<bool> {
                tx.query_row("SELECT 1 FROM chambers WHERE name = ?1", [name], |_| Ok(()))
                    .optional()
                    .map(|o| o.is_some())
            };
            let mut name = base_name.clone();
            if taken(&name)? {
                if exact_name {
                    return Err(StoreError::Conflict(format!(
                        "the name {name:?} is taken by another chamber: choose another with --name"
                    )));
                }
                let mut n = 2;
                loop {
                    name = format!("{base_name}-{n}");
                    if !taken(&name)? {
                        break;
                    }
                    n += 1;
                }
            }
            tx.execute(
                "INSERT INTO chambers (name, path, desired, created_at) VALUES (?1, ?2, 'stopped', ?3)",
                params![name, path, created_at],
            )?;
            let id = tx.last_insert_rowid();
            tx.commit()?;
            Ok((ChamberRecord { id, name, path, desired: Desired::Stopped, paused: false, created_at }, false))
        })
        .await
    }

    pub async fn remove_chamber(&self, id: i64) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute("DELETE FROM chambers WHERE id = ?1", [id])?;
            Ok(())
        })
        .await
    }

    pub async fn set_paused(&self, id: i64, paused: bool) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute("UPDATE chambers SET paused = ?2 WHERE id = ?1", params![id, paused as i64])?;
            Ok(())
        })
        .await
    }

    pub async fn set_desired(&self, id: i64, desired: Desired) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute("UPDATE chambers SET desired = ?2 WHERE id = ?1", params![id, desired.as_str()])?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_are_made_unique_and_paths_dedupe() {
        let s = Store::open_in_memory().unwrap();
        let t = "2026-01-01T00:00:00Z".to_string();
        let (a, existed) = s.add_chamber("work".into(), false, "/a/work".into(), t.clone()).await.unwrap();
        assert!(!existed);
        let (b, _) = s.add_chamber("work".into(), false, "/b/work".into(), t.clone()).await.unwrap();
        assert_eq!((a.name.as_str(), b.name.as_str()), ("work", "work-2"));
        let (again, existed) = s.add_chamber("other".into(), false, "/a/work".into(), t.clone()).await.unwrap();
        assert!(existed);
        assert_eq!(again.id, a.id);
        let e = s.add_chamber("work".into(), true, "/c/work".into(), t).await.unwrap_err();
        assert!(e.to_string().contains("taken"), "{e}");
        s.set_desired(a.id, Desired::Started).await.unwrap();
        s.remove_chamber(b.id).await.unwrap();
        let all = s.chambers().await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].desired, Desired::Started);
    }
}
