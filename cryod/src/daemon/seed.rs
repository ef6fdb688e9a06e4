//! The seed system's chambers (cryochamber 0.2.x) moved over and back:
//! [`crate::chamber::seed`] does the files; this refuses a chamber the
//! seed's daemon still serves (or stops that daemon when asked), registers
//! what was moved over, and unregisters what goes back. Everything that can
//! be checked is checked before anything is stopped or rewritten.

use std::path::{Path, PathBuf};

use super::{Added, ChamberRef, Daemon, absolute, validate_name};
use crate::chamber::seed::{self, Report};
use crate::error::{Error, Result};

impl Daemon {
    /// Registers a chamber folder as [`Daemon::add`] does; one the seed
    /// system made is moved over first (and must be, with `adopt`). One its
    /// daemon still serves is refused, unless `stop_seed` stops that daemon.
    pub async fn add_or_adopt(
        &self,
        dir: &Path,
        name: Option<&str>,
        (init, agent, sandbox): (bool, Option<&str>, Option<crate::config::Sandbox>),
        adopt: bool,
        stop_seed: bool,
    ) -> Result<(Added, Option<Report>)> {
        let abs = absolute(dir)?;
        // The folder itself, through any link on the way (what the seed's
        // daemon and its service name).
        let canonical = match std::fs::canonicalize(&abs) {
            Ok(c) => Some(c),
            Err(_) if adopt => return Err(Error::NotFound(format!("{} does not exist", abs.display()))),
            Err(_) => None,
        };
        let registered = match &canonical {
            Some(c) => self.at_path(&c.to_string_lossy()).await,
            None => None,
        };
        let found = match (&canonical, init || registered.is_some()) {
            (Some(c), false) => {
                let at = c.clone();
                crate::chamber::blocking(move || seed::find(&at)).await?
            }
            _ => None,
        };
        let Some(found) = found else {
            if adopt {
                return Err(Error::Precondition(match registered {
                    Some(v) => format!(
                        "{} is registered with cryo already, as {:?}: `cryoctl chamber status {}` shows it",
                        abs.display(),
                        v.record.name,
                        v.record.name
                    ),
                    None => format!(
                        "{} is not a chamber of the seed system (cryochamber): it has no timer.json the seed wrote \
                         and no .cryo/cryo.sock; `cryoctl chamber add {}` registers it as it is",
                        abs.display(),
                        abs.display()
                    ),
                }));
            }
            return Ok((self.add(dir, name, init, agent, sandbox).await?, None));
        };
        let folder = canonical.expect("found in it");
        let shown = folder.display().to_string();
        // What registering will refuse, before anything is touched.
        if let Some(n) = name {
            validate_name(n)?;
            if self.resolve(&ChamberRef::Name(n.to_string())).await.is_ok() {
                return Err(Error::Precondition(format!("a chamber named {n:?} exists: choose another with --name")));
            }
        }
        let at = folder.clone();
        crate::chamber::blocking(move || seed::check(&at))
            .await?
            .map_err(|e| Error::Precondition(format!("cannot move {shown} over from the seed system: {e}")))?;
        if found.serves() && !stop_seed {
            let which = if found.running.is_empty() {
                String::new()
            } else {
                format!(" (pid {})", found.running.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))
            };
            return Err(Error::Precondition(format!(
                "the seed system's daemon{which} still runs {shown}: both would serve it. `cryoctl chamber adopt \
                 {shown} --stop-seed` stops it (and its service) and moves the chamber over"
            )));
        }
        // Its daemon stopped (asked for above), then its files moved over.
        let (home, now, at) = (std::env::var_os("HOME").map(PathBuf::from), self.0.shared.clock.now(), folder.clone());
        let report = crate::chamber::blocking(move || {
            let stopped = if found.serves() { seed::stop(&found, &at, home.as_deref())? } else { Vec::new() };
            let mut report = seed::adopt(&at, &found, now)?;
            report.carried.splice(0..0, stopped);
            Ok::<_, seed::MoveError>(report)
        })
        .await?
        .map_err(|e| Error::Precondition(format!("cannot move {shown} over from the seed system: {e}")))?;
        tracing::info!(path = %shown, carried = report.carried.len(), "moved a chamber over from the seed system");
        let added = self.add(dir, name, false, None, None).await?;
        Ok((added, Some(report)))
    }

    /// Hands a chamber back to the seed system: checked, stopped (its
    /// session ended first), its files written as the seed reads them
    /// ([`seed::release`]), then unregistered. Returns its folder.
    pub async fn release(&self, r: &ChamberRef) -> Result<(String, Report)> {
        let v = self.resolve(r).await?;
        if self.elsewhere(&v) {
            return Err(Error::Precondition(format!(
                "{} runs on another node of the fleet: release it on that node, whose disk holds its files",
                v.record.name
            )));
        }
        let chamber_tz: chrono_tz::Tz = v.snap.view.timezone.parse().unwrap_or(chrono_tz::UTC);
        let zones = (self.0.shared.system_zone.get(), chamber_tz);
        let path = std::path::PathBuf::from(&v.record.path);
        let name = v.record.name.clone();
        let fail = |e: seed::MoveError| Error::Precondition(format!("cannot hand {name} back to the seed system: {e}"));
        // Checked before the chamber is stopped: a refusal changes nothing.
        let at = path.clone();
        crate::chamber::blocking(move || {
            let list = crate::chamber::todos::load(&at, chamber_tz)
                .map_err(|e| seed::MoveError::Unfit(format!("todo.json: {e}")))?;
            seed::check_release(&at, &list)
        })
        .await?
        .map_err(fail)?;
        self.stop(r, true).await?;
        let (at, now) = (path.clone(), self.0.shared.clock.now());
        let report = crate::chamber::blocking(move || {
            let list = crate::chamber::todos::load(&at, chamber_tz)
                .map_err(|e| seed::MoveError::Unfit(format!("todo.json: {e}")))?;
            seed::release(&at, &list, zones, now)
        })
        .await?
        .map_err(|e| {
            let again = format!("(it is stopped: `cryoctl chamber start {}` runs it again)", v.record.name);
            Error::Precondition(format!("cannot hand {name} back to the seed system: {e} {again}"))
        })?;
        self.remove(r).await?;
        tracing::info!(chamber = %v.record.name, "handed a chamber back to the seed system");
        Ok((v.record.path, report))
    }
}
