//! A supervisor's reading of `cryo.toml`: the settings the machine is given,
//! the operator's trust in them (digests kept in the store), and the agent's
//! program found before a start.

use cryo_core::chamber::{Failed, Settings};

use super::*;
use crate::error::{Error, Result};

impl Sup {
    /// The machine's settings from the config as last read.
    pub(super) fn settings(&self) -> (std::result::Result<Settings, Failed>, Vec<String>) {
        (self.config.as_ref().map(settings).map_err(Clone::clone), self.machine.view().warnings)
    }

    /// Reads `cryo.toml`; `Some` (with the machine's settings) if it changed.
    pub(super) fn read_config(&mut self) -> Option<(std::result::Result<Settings, Failed>, Vec<String>)> {
        let accepted = self.trusted.as_ref().map(handle::Accepted::digests);
        let view = self.machine.view();
        let (root, name) = (chamber_config::open(&self.root), self.machine.name());
        let (config, warnings, read) = load_config(&self.shared, &root, name, accepted.as_ref(), Told::by(&view));
        if self.trusted.is_none()
            && let Some(read) = read
            && config.is_ok()
        {
            self.accept(read);
        }
        if config == self.config && warnings == view.warnings {
            return None;
        }
        tracing::info!(chamber = %self.machine.name(), "cryo.toml read");
        self.config = config;
        Some((self.config.as_ref().map(settings).map_err(Clone::clone), warnings))
    }

    /// The operator accepts `cryo.toml` as it is now, or as an [`Edit`]
    /// is about to make it: its digests are kept (before the reply), and
    /// the file is read again under them. Returns the keys that changed; a
    /// file that does not load is refused, and so is an edit while keys it
    /// does not touch have changes the operator has not accepted (saving
    /// one setting must not accept what the agent wrote beside it). With
    /// `diff`, nothing is accepted: the changes are only told.
    pub(super) async fn trust(&mut self, edit: Option<Edit>, diff: bool) -> Result<Vec<crate::chamber::trust::Change>> {
        // An edit: the file is about to say so, and its write will be heard.
        let reread = edit.is_none();
        let accepted = self.trusted.as_ref().map(handle::Accepted::digests).unwrap_or_default();
        let read = match edit {
            Some(Edit { digests, touched }) => {
                let pending: Vec<String> = crate::chamber::trust::changed(&accepted, &digests)
                    .into_iter()
                    .filter(|k| !touched.contains(k))
                    .collect();
                if self.trusted.is_some() && !pending.is_empty() {
                    return Err(Error::Precondition(format!(
                        "{} (saving other settings does not accept them)",
                        crate::chamber::trust::held(self.machine.name(), &pending)
                    )));
                }
                digests
            }
            None => match load_config(
                &self.shared,
                &chamber_config::open(&self.root),
                self.machine.name(),
                None,
                Told::by(&self.machine.view()),
            ) {
                (Ok(_), _, Some(read)) => read,
                (Err(e), _, _) => return Err(Error::Precondition(e.0)),
                (Ok(_), _, None) => return Err(Error::Internal("cryo.toml loaded without its digests".into())),
            },
        };
        let changed = crate::chamber::trust::changes(&accepted, &read);
        if diff {
            return Ok(changed);
        }
        let kept = handle::Accepted::of(&read);
        let r = self.shared.store.set_trusted(self.owner.fence(), crate::chamber::trust::to_json(&read)).await;
        self.fenced(r)?;
        tracing::info!(chamber = %self.machine.name(), keys = ?changed.iter().map(|c| &c.key).collect::<Vec<_>>(), "settings accepted by the operator");
        self.trusted = Some(kept);
        if reread {
            self.reload_config().await;
        }
        Ok(changed)
    }

    /// Takes `digests` as what the operator accepted, and keeps them.
    pub(super) fn accept(&mut self, digests: Trusted) {
        let (store, fence) = (self.shared.store.clone(), self.owner.fence());
        let accepted = handle::Accepted::of(&digests);
        let json = crate::chamber::trust::to_json(&digests);
        let name = self.machine.name().to_string();
        tokio::spawn(async move {
            if let Err(error) = store.set_trusted(fence, json).await {
                tracing::warn!(chamber = %name, %error, "cannot keep the accepted settings");
            }
        });
        self.trusted = Some(accepted);
    }

    pub(super) async fn reload_config(&mut self) {
        if let Some((config, warnings)) = self.read_config() {
            self.feed(Input::ConfigChanged { config, warnings }).await;
        }
    }

    /// Whether the agent's program can be found (checked at start).
    pub(super) fn agent_check(&self) -> std::result::Result<(), Failed> {
        let Ok(c) = &self.config else { return Ok(()) };
        let program = cryo_session::agent_words(&c.agent).map_err(Failed::of)?.remove(0);
        let path = std::env::var("PATH").unwrap_or_default();
        match cryo_session::find_program(&program, &self.root, &path) {
            Some(_) => Ok(()),
            None => Err(Failed(format!(
                "the agent command {program:?} is not found on cryod's PATH or in {}: install it or set `agent` in cryo.toml",
                self.root.display()
            ))),
        }
    }
}
