//! The seed system's chambers (cryochamber 0.2.x) moved over and back:
//! [`crate::chamber::seed`] does the files; this refuses a chamber the
//! seed's daemon still runs (or stops that daemon when asked), registers
//! what was moved over, and unregisters what goes back.

use std::path::Path;

use super::{Added, ChamberRef, Daemon, absolute};
use crate::chamber::seed::{self, Report};
use crate::error::{Error, Result};

impl Daemon {
    /// Registers a chamber folder as [`Daemon::add`] does; one the seed
    /// system made is moved over first (and must be, with `adopt`). One its
    /// daemon still runs is refused, unless `stop_seed` stops that daemon.
    pub async fn add_or_adopt(
        &self,
        dir: &Path,
        name: Option<&str>,
        (init, agent, sandbox): (bool, Option<&str>, Option<crate::config::Sandbox>),
        adopt: bool,
        stop_seed: bool,
    ) -> Result<(Added, Option<Report>)> {
        let abs = absolute(dir)?;
        let canonical = std::fs::canonicalize(&abs).ok();
        let registered = canonical.as_ref().is_some_and(|c| {
            let c = c.to_string_lossy();
            self.list().iter().any(|v| v.record.path == c)
        });
        let found = if init || registered {
            None
        } else {
            let at = abs.clone();
            crate::chamber::blocking(move || seed::find(&at)).await?
        };
        let Some(found) = found else {
            if adopt {
                return Err(Error::Precondition(if registered {
                    format!("{} is registered with cryo already", abs.display())
                } else {
                    format!(
                        "{} is not a chamber of the seed system (cryochamber): it has no timer.json and no \
                         .cryo/cryo.sock; `cryoctl chamber add` registers a cryo chamber",
                        abs.display()
                    )
                }));
            }
            return Ok((self.add(dir, name, init, agent, sandbox).await?, None));
        };
        if let Some(pid) = found.running {
            let shown = abs.display();
            if !stop_seed {
                let which = if pid == 0 { String::new() } else { format!(" (pid {pid})") };
                return Err(Error::Precondition(format!(
                    "the seed system's daemon{which} still runs {shown}: both would serve it. Stop it (`cryo cancel` \
                     in that folder), or run `cryoctl chamber adopt {shown} --stop-seed`"
                )));
            }
            if pid == 0 {
                return Err(Error::Precondition(format!(
                    "the seed system's daemon answers on {shown}/.cryo/cryo.sock, but its timer.json names no pid: \
                     stop it with `cryo cancel` in that folder"
                )));
            }
        }
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let stopped = match found.running {
            Some(pid) => {
                let at = abs.clone();
                crate::chamber::blocking(move || seed::stop(pid, &at, home.as_deref()))
                    .await?
                    .map_err(Error::Precondition)?
            }
            None => Vec::new(),
        };
        let now = self.0.shared.clock.now();
        let at = abs.clone();
        let mut report = crate::chamber::blocking(move || seed::adopt(&at, &found, now)).await?.map_err(|e| {
            Error::Precondition(format!("cannot move {} over from the seed system: {e}", abs.display()))
        })?;
        report.carried.splice(0..0, stopped);
        tracing::info!(path = %abs.display(), carried = report.carried.len(), "moved a chamber over from the seed system");
        let added = self.add(dir, name, false, None, None).await?;
        Ok((added, Some(report)))
    }

    /// Hands a chamber back to the seed system: stopped (its session ended
    /// first), its files written as the seed reads them
    /// ([`seed::release`]), then unregistered. Returns its folder.
    pub async fn release(&self, r: &ChamberRef) -> Result<(String, Report)> {
        let v = self.resolve(r)?;
        if self.elsewhere(&v) {
            return Err(Error::Precondition(format!(
                "{} runs on another node of the fleet: release it on that node, whose disk holds its files",
                v.record.name
            )));
        }
        self.stop(r, true).await?;
        let tz: chrono_tz::Tz = v.snap.view.timezone.parse().unwrap_or(chrono_tz::UTC);
        let (path, now) = (std::path::PathBuf::from(&v.record.path), self.0.shared.clock.now());
        let at = path.clone();
        let report = crate::chamber::blocking(move || {
            let list = crate::chamber::todos::load(&at, tz).map_err(|e| format!("todo.json: {e}"))?;
            seed::release(&at, &list, tz, now)
        })
        .await?
        .map_err(|e| Error::Precondition(format!("cannot hand {} back to the seed system: {e}", v.record.name)))?;
        self.remove(r).await?;
        tracing::info!(chamber = %v.record.name, "handed a chamber back to the seed system");
        Ok((v.record.path, report))
    }
}
