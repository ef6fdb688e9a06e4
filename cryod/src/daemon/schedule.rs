//! `cryoctl chamber schedule` and `cryoctl schedule`: the coming wakes of
//! one chamber or of all, read from each chamber's files (`todo.json`, and
//! `cryo.toml` for its zone and pre-check) and laid out by
//! [`cryo_core::schedule`], each with what holds it back as things stand.

use chrono_tz::Tz;
use cryo_core::chamber::State;
use cryo_core::schedule::Upcoming;

use super::{ChamberRef, ChamberView, Daemon};
use crate::chamber::{config as chamber_config, todos};
use crate::error::Result;

/// Most wakes one request lists.
pub const MAX_COUNT: usize = 1000;

/// One coming wake of a chamber.
pub struct Planned {
    pub chamber: String,
    pub tz: Tz,
    pub wake: Upcoming,
    /// Why it will not run then, as things stand.
    pub held: Option<String>,
}

/// Why a chamber's wakes cannot be laid out: one of its files does not read.
#[derive(Debug, thiserror::Error)]
pub enum Unplanned {
    /// Its `cryo.toml` (for the zone and the pre-check).
    #[error(transparent)]
    Config(#[from] chamber_config::ConfigError),
    /// Its `todo.json`.
    #[error(transparent)]
    Todos(#[from] todos::TodosError),
}

impl Daemon {
    /// The next `count` wakes of one chamber, or of every chamber on one
    /// time line; and one line for each chamber whose files cannot be read.
    /// The chambers' files are read off the runtime's workers.
    pub async fn schedule(&self, only: Option<&ChamberRef>, count: usize) -> Result<(Vec<Planned>, Vec<String>)> {
        let count = count.clamp(1, MAX_COUNT);
        let views = match only {
            Some(r) => vec![self.resolve(r)?],
            None => self.list(),
        };
        let now = self.0.shared.clock.now();
        let system = self.0.shared.system_zone.get();
        crate::chamber::blocking(move || {
            let (mut out, mut problems) = (Vec::new(), Vec::new());
            for v in views {
                match planned(&v, now, system, count) {
                    Ok(p) => out.extend(p),
                    Err(e) => problems.push(format!("{}: {e}", v.record.name)),
                }
            }
            out.sort_by(|a, b| (a.wake.at, &a.chamber, a.wake.todo).cmp(&(b.wake.at, &b.chamber, b.wake.todo)));
            out.truncate(count);
            (out, problems)
        })
        .await
    }
}

fn planned(
    v: &ChamberView,
    now: chrono::DateTime<chrono::Utc>,
    system: Tz,
    count: usize,
) -> Result<Vec<Planned>, Unplanned> {
    let root = std::path::Path::new(&v.record.path);
    let config = chamber_config::load(root, system)?.config;
    let list = todos::load(root, config.timezone)?;
    let held = match v.snap.view.state {
        State::Stopped => Some(format!("the chamber is stopped (cryoctl chamber start {})", v.record.name)),
        State::Paused => Some(format!("the chamber is paused (cryoctl chamber resume {})", v.record.name)),
        State::Faulted => Some("the chamber is faulted (see cryoctl chamber status)".to_string()),
        State::Idle | State::Running => None,
    };
    let running = v.snap.view.state == State::Running;
    let wakes = cryo_core::schedule::upcoming(&list, now, config.timezone, count, config.precheck.as_deref());
    Ok(wakes
        .into_iter()
        .map(|wake| {
            let held = held.clone().or_else(|| {
                (running && wake.overdue).then(|| format!("it waits for session {} to end", v.snap.view.session))
            });
            Planned { chamber: v.record.name.clone(), tz: config.timezone, wake, held }
        })
        .collect())
}
