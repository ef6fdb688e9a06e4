//! The daemon's SQLite database: the chamber registry (and, as cryo grows,
//! session history, the wake ledger and the claim journal).
//!
//! One thread owns the connection; async code sends it closures and awaits
//! the answer, so SQLite never blocks a tokio worker. Everything that touches
//! the database goes through [`Store`], which keeps the storage behind one
//! interface (a shared store for several nodes would replace this module).

mod migrations;
mod registry;
mod sessions;

use std::path::Path;

use rusqlite::Connection;
use tokio::sync::oneshot;

pub use registry::{ChamberRecord, Desired};
pub use sessions::{OpenClaim, OpenSession, SessionRow, WakeRecord};

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// A handle to the database thread. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    tx: std::sync::mpsc::Sender<Job>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("the database thread has stopped")]
    Gone,
    #[error("{0}")]
    Conflict(String),
}

impl Store {
    /// Opens (creating if needed) and migrates the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let mut conn = Connection::open(path)?;
        configure(&conn)?;
        migrations::migrate(&mut conn)?;
        Ok(Self::spawn(conn))
    }

    /// An in-memory database, migrated (for tests).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let mut conn = Connection::open_in_memory()?;
        migrations::migrate(&mut conn)?;
        Ok(Self::spawn(conn))
    }

    fn spawn(mut conn: Connection) -> Store {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("cryod-store".into())
            .spawn(move || {
                for job in rx {
                    job(&mut conn);
                }
            })
            .expect("spawning the database thread");
        Store { tx }
    }

    /// Runs `f` on the database thread.
    pub async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (done, wait) = oneshot::channel();
        self.tx
            .send(Box::new(move |conn| {
                let _ = done.send(f(conn));
            }))
            .map_err(|_| StoreError::Gone)?;
        wait.await.map_err(|_| StoreError::Gone)?
    }
}

/// Connection settings, applied at every open (outside migrations): WAL for
/// concurrent readers and crash safety, NORMAL sync (durable at checkpoints,
/// never corrupt), and a busy timeout for the rare external reader.
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}
