//! A supervisor's limits on spending: `[budget]` windows checked after each
//! session, `max_session_usd`, when a provider's limit is over, and the
//! fallback accounts a chamber's wakes go to meanwhile.

use super::*;
use chrono::{DateTime, Utc};

impl Sup {
    /// The budgets that apply, if any: the chamber's own, and those of the
    /// account the running session bills (a fallback's while it does).
    pub(super) fn budgets(&self) -> Option<budget::Applying> {
        budget::Applying::to(self.session_config().ok()?.as_ref(), &self.shared.config)
    }

    /// The lowest `max_session_usd` that applies.
    pub(super) fn max_session_usd(&self) -> Option<f64> {
        self.budgets()?.max_session_usd()
    }

    /// Each budget that applies, measured against the ledger (UTC day and
    /// month); none if none applies or the ledger cannot be read.
    pub(super) async fn measure_budgets(&self) -> Vec<cryo_core::limits::BudgetUse> {
        let Some(applying) = self.budgets() else { return Vec::new() };
        match applying.measured(&self.shared.store, self.now(), self.id).await {
            Ok(uses) => uses,
            Err(error) => {
                tracing::warn!(chamber = %self.machine.name(), %error, "cannot measure the budgets");
                Vec::new()
            }
        }
    }

    /// When a provider's limit is over (`cryo_core::limits::hold_until`):
    /// the reset it named, else after the delay it asked for, else after
    /// `limit_hold_seconds`, spread by a random jitter.
    pub(super) fn limit_until(&mut self, l: &cryo_session::Limited) -> DateTime<Utc> {
        let now = self.now();
        let told = l.resets_at.and_then(|t| DateTime::<Utc>::from_timestamp(t, 0)).or_else(|| {
            // A stream's word, bounded: a week at most (no overflow).
            let ms = l.retry_after_ms?.min(7 * 24 * 3600 * 1000);
            now.checked_add_signed(chrono::Duration::milliseconds(ms as i64))
        });
        let default = chrono::Duration::seconds(self.shared.config.limit_hold_seconds as i64);
        let jitter = if l.exact { 0 } else { u64::from_str_radix(&random_hex(2), 16).unwrap_or(0) };
        let hold = cryo_core::limits::hold_until(now, told, default, jitter);
        if let Some(running) = self.running.as_mut() {
            running.limit_told(hold.guessed.is_some());
        }
        if let Some(note) = &hold.guessed {
            // Said where the operator looks (cryo.log, status's log lines):
            // the wait is cryod's guess, not the provider's word.
            self.log(cryo_core::chamber::LogLine::Event(note.clone()));
        }
        // Another of the chamber's accounts is free: the account is held
        // here, and the work goes on at once on the other.
        let account = self.account();
        let others: Vec<String> = self.accounts().into_iter().filter(|a| Some(a) != account.as_ref()).collect();
        if let Some(account) = account
            && self.shared.admission.first_free(&others).is_some()
        {
            let left = (hold.at - now).to_std().unwrap_or_default();
            self.shared.admission.hold(&account, left, hold.guessed.is_some());
            return now;
        }
        hold.at
    }

    /// The chamber's own provider account, then its fallbacks
    /// (`[providers.NAME] fallback` in `cryod.toml`), in order.
    pub(super) fn accounts(&self) -> Vec<String> {
        let Ok(config) = &self.config else { return Vec::new() };
        let own = config.provider_account();
        let fallbacks = self.shared.config.providers.get(&own).map(|p| p.fallback.clone()).unwrap_or_default();
        std::iter::once(own).chain(fallbacks).collect()
    }

    /// [`Sup::held_until`], unless a fallback account takes the chamber's
    /// wakes meanwhile (then nothing waits for the reset).
    pub(super) fn waits_for_limit(&self) -> Option<(String, String, DateTime<Utc>)> {
        let held = self.held_until()?;
        let fallbacks: Vec<String> = self.accounts().into_iter().skip(1).collect();
        self.shared.admission.first_free(&fallbacks).is_none().then_some(held)
    }

    /// The account the running session bills (its permit's: a fallback
    /// while the chamber's own is held), else the chamber's own.
    pub(super) fn account(&self) -> Option<String> {
        match self.running.as_ref().and_then(|r| r.account()) {
            Some(a) => Some(a.to_string()),
            None => self.config.as_ref().ok().map(ChamberConfig::provider_account),
        }
    }

    /// The fallback account the running session bills, if it is not the
    /// chamber's own, with its settings.
    pub(super) fn fallback(&self) -> Option<(&str, &crate::config::ProviderConfig)> {
        let account = self.running.as_ref()?.account()?;
        let own = self.config.as_ref().ok()?.provider_account();
        if account == own {
            return None;
        }
        self.shared.config.providers.get(account).map(|p| (account, p))
    }

    /// The settings the running session runs with: the chamber's, on its
    /// fallback account when its permit bills one.
    pub(super) fn session_config(&self) -> std::result::Result<std::borrow::Cow<'_, ChamberConfig>, Failed> {
        let config = self.config.as_ref().map_err(Clone::clone)?;
        Ok(match self.fallback() {
            Some((name, p)) => std::borrow::Cow::Owned(config.on_account(name, p)),
            None => std::borrow::Cow::Borrowed(config),
        })
    }

    /// Why the running session starts a new conversation, if its fallback
    /// account runs another agent than the chamber's.
    pub(super) fn fallback_fresh(&self) -> Option<String> {
        let (name, p) = self.fallback()?;
        let agent = p.agent.as_deref()?;
        let own = self.config.as_ref().ok()?;
        (agent != own.agent).then(|| {
            format!(
                "it runs {agent} on the fallback account {name} while {} is at its provider's limit; \
                 NOTES.md and the plan say where the work stands",
                own.provider_account()
            )
        })
    }

    /// What the session's start says in `cryo.log` of the account it
    /// bills, when that is a fallback or the first back on the chamber's
    /// own; a switch to a fallback is told to the operator once.
    pub(super) fn fallback_notes(&mut self) -> Vec<String> {
        let own = match &self.config {
            Ok(c) => c.provider_account(),
            Err(_) => return Vec::new(),
        };
        let on = self.fallback().map(|(name, _)| name.to_string());
        match (on, self.fell_back.take()) {
            (Some(name), told) => {
                let until = self.held_until().map(|(_, local, _)| format!(" until {local}")).unwrap_or_default();
                let line = format!("{own} is at its provider's limit{until}: this session bills the fallback {name}");
                if told.as_deref() != Some(name.as_str()) {
                    let subject = format!("{own} is at its limit: sessions go to {name}");
                    let body =
                        format!("{line}. The next sessions go to {name} too, and back to {own} once its limit resets.");
                    let _ = self.tx.send(Event::Notice { subject, body });
                }
                self.fell_back = Some(name);
                vec![line]
            }
            (None, Some(was)) => vec![format!("back on {own}: its limit reset (the last sessions billed {was})")],
            (None, None) => Vec::new(),
        }
    }
}
