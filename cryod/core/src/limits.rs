//! The rules of spending and of provider limits: what a budget's use
//! means (a notice at 80%, once per limit and period; a pause at 100%,
//! released for the period when an operator resumes), when the mail of a
//! held account is answered, and how long an account is held when its
//! provider named no reset.
//!
//! The shell measures (the ledger, admission's holds, the agent's stream)
//! and hands the figures over; everything decided about them is here, where
//! the simulator runs it with the rest of the machine.

use std::collections::HashSet;

use chrono::{DateTime, Duration, Utc};

/// The share of a limit at which the operator is told, once per period.
pub const NOTICE_AT: f64 = 0.8;

/// The most a held account's end is spread by, so the held wakes of many
/// chambers do not all start at once.
pub const HOLD_JITTER_MS: u64 = 10_000;

/// One configured limit and what is used of it, this period (the shell
/// measures it against the ledger).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetUse {
    /// Whose: "this chamber's" or "ACCOUNT's".
    pub who: String,
    /// `daily_usd`, `monthly_usd` or `daily_sessions`.
    pub key: &'static str,
    pub limit: f64,
    pub used: f64,
    /// The period it counts over: `YYYY-MM-DD` or `YYYY-MM` (UTC).
    pub period: String,
}

impl BudgetUse {
    /// A value of this limit, as people read it.
    pub fn shown(&self, v: f64) -> String {
        if self.key == "daily_sessions" { format!("{v}") } else { format!("${v:.2}") }
    }

    /// "$0.85 of this chamber's daily_usd ($1.00)".
    pub fn used_of(&self) -> String {
        format!("{} of {} {} ({})", self.shown(self.used), self.who, self.key, self.shown(self.limit))
    }

    /// "$0.85 of this chamber's daily_usd ($1.00), 85%".
    pub fn line(&self) -> String {
        let pct = if self.limit > 0.0 { (self.used / self.limit * 100.0).round() } else { 100.0 };
        format!("{}, {pct}%", self.used_of())
    }

    /// A key naming this limit in this period.
    pub fn period_key(&self) -> String {
        format!("{} {} {}", self.who, self.key, self.period)
    }

    fn reached(&self) -> bool {
        self.used >= self.limit
    }

    fn nearly(&self) -> bool {
        self.used >= NOTICE_AT * self.limit && !self.reached()
    }
}

/// What the budgets say after a measurement.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    /// Said once to the operator: "$0.85 of this chamber's daily_usd ($1.00) is used."
    pub notice: Option<String>,
    /// The limit and period the notice is for (its [`BudgetUse::period_key`]).
    pub noticed: Option<String>,
    /// The chamber pauses with this attention line.
    pub reached: Option<String>,
}

/// What a chamber's budgets have said this life of cryod: the limits whose
/// 80% was told, the limit that paused it, and those an operator released
/// by resuming it. Kept in memory: after a restart of cryod an 80% notice
/// may be told once more, and a released limit pauses the chamber again.
#[derive(Debug, Clone, Default)]
pub struct Budgets {
    noticed: HashSet<String>,
    paused_by: Option<String>,
    released: HashSet<String>,
}

impl Budgets {
    /// Nothing noticed, paused or released: as a new machine's.
    pub fn is_quiet(&self) -> bool {
        self.noticed.is_empty() && self.paused_by.is_none() && self.released.is_empty()
    }

    /// Whether a reached limit holds the chamber paused now (only an
    /// operator's resume releases it).
    pub fn pausing(&self) -> bool {
        self.paused_by.is_some()
    }

    /// Judges a measurement of every limit that applies, for a chamber
    /// that is `paused` now, or cannot be paused (`stopped`: a reached limit
    /// pauses it when it is next measured started). A chamber resumed since a
    /// limit paused it is not paused by that limit again in the same period.
    pub fn judge(&mut self, uses: &[BudgetUse], paused: bool, stopped: bool) -> Verdict {
        if let Some(k) = self.paused_by.take_if(|_| !paused) {
            self.released.insert(k);
        }
        let mut verdict = Verdict::default();
        for u in uses {
            let key = u.period_key();
            if u.reached() && !self.released.contains(&key) {
                if verdict.reached.is_none() && !paused && !stopped {
                    verdict.reached = Some(format!(
                        "{} ({} {} = {}, {} used)",
                        crate::session::BUDGET_REACHED,
                        u.who,
                        u.key,
                        u.shown(u.limit),
                        u.shown(u.used)
                    ));
                    self.paused_by = Some(key);
                }
            } else if verdict.notice.is_none() && u.nearly() && self.noticed.insert(key.clone()) {
                verdict.notice = Some(format!("{} is used.", u.used_of()));
                verdict.noticed = Some(key);
            }
        }
        verdict
    }
}

/// Whether the senders of mail have been told that the chamber's account
/// is held at its provider's limit (once per hold).
#[derive(Debug, Clone, Default)]
pub struct Hold {
    told: bool,
}

impl Hold {
    /// Mail's senders were told of a hold.
    pub fn told(&self) -> bool {
        self.told
    }

    /// Admission was asked for a wake (by mail when `by_mail`); `held` is
    /// when the account's hold ends (`local`: in the chamber's zone), if it
    /// is held. Returns the message to the sender, once per hold.
    pub fn asked(&mut self, by_mail: bool, held: Option<&str>) -> Option<(String, String)> {
        let Some(local) = held else {
            self.told = false;
            return None;
        };
        if !by_mail || self.told {
            return None;
        }
        self.told = true;
        let subject = "Your message waits for the provider's limit".to_string();
        let body = format!(
            "The provider's limit for this chamber's account was reached; your message will be read after {local}."
        );
        Some((subject, body))
    }
}

/// A provider account held at its limit, and until when (what admission
/// told the chamber when it last asked for a permit).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AccountHold {
    pub account: String,
    pub until: DateTime<Utc>,
}

/// The account a wake of `provider` may be admitted on now: its own, else
/// (while that is held) the first of `fallbacks` that is not, in order;
/// `None` for a chamber that names no account. `Err` while it must wait:
/// every account held, or the one it would take at its own
/// `max_concurrent` (a wake never skips a fallback at its limit for the next).
pub fn pick_account<'a>(
    provider: Option<&'a str>,
    fallbacks: &'a [String],
    held: impl Fn(&str) -> bool,
    at_limit: impl Fn(&str) -> bool,
) -> Result<Option<&'a str>, MustWait> {
    let Some(p) = provider else { return Ok(None) };
    let free = std::iter::once(p).chain(fallbacks.iter().map(String::as_str)).find(|a| !held(a)).ok_or(MustWait)?;
    if at_limit(free) { Err(MustWait) } else { Ok(Some(free)) }
}

/// A wake whose accounts are all held, or whose free one is at its own limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MustWait;

/// When an account at its provider's limit is tried again.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldUntil {
    pub at: DateTime<Utc>,
    /// The provider named no reset: the wait is cryod's guess (and a line
    /// in the chamber's log says so).
    pub guessed: Option<String>,
}

/// The reset the provider named (`told`, if it is still ahead), else
/// `default_hold` from now; plus `jitter_ms` (below [`HOLD_JITTER_MS`]).
pub fn hold_until(
    now: DateTime<Utc>,
    told: Option<DateTime<Utc>>,
    default_hold: Duration,
    jitter_ms: u64,
) -> HoldUntil {
    let told = told.filter(|t| *t > now);
    let guessed = told.is_none().then(|| {
        format!(
            "the provider named no reset: the account is held for {} (`limit_hold_seconds` in cryod.toml, a \
             default), then tried again",
            crate::time::humanize(default_hold)
        )
    });
    let at = told.unwrap_or(now + default_hold);
    HoldUntil { at: at + Duration::milliseconds((jitter_ms % HOLD_JITTER_MS) as i64), guessed }
}

#[cfg(test)]
mod pick_tests {
    use super::{MustWait, pick_account};

    #[test]
    fn a_held_account_goes_to_its_first_free_fallback() {
        let f = vec!["gone".to_string(), "spare".to_string()];
        let held = |a: &str| a == "work" || a == "gone";
        assert_eq!(pick_account(Some("work"), &f, held, |_| false), Ok(Some("spare")));
        assert_eq!(pick_account(Some("work"), &f, |_| false, |_| false), Ok(Some("work")));
        assert_eq!(pick_account(Some("work"), &f, held, |a| a == "spare"), Err(MustWait), "spare is at its limit");
        assert_eq!(pick_account(Some("work"), &f, |_| true, |_| false), Err(MustWait), "all held");
        assert_eq!(pick_account(None, &f, |_| true, |_| true), Ok(None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daily(used: f64, day: &str) -> BudgetUse {
        BudgetUse { who: "this chamber's".into(), key: "daily_usd", limit: 1.0, used, period: day.into() }
    }

    #[test]
    fn eighty_percent_is_told_once_per_limit_and_period() {
        let mut b = Budgets::default();
        let v = b.judge(&[daily(0.85, "2026-11-24")], false, false);
        assert_eq!(v.notice.as_deref(), Some("$0.85 of this chamber's daily_usd ($1.00) is used."));
        assert_eq!(b.judge(&[daily(0.9, "2026-11-24")], false, false), Verdict::default());
        assert!(b.judge(&[daily(0.9, "2026-11-25")], false, false).notice.is_some(), "a new day, a new notice");
    }

    #[test]
    fn a_reached_limit_pauses_until_resumed_then_not_again_this_period() {
        let mut b = Budgets::default();
        let v = b.judge(&[daily(1.2, "2026-11-24")], false, false);
        assert_eq!(
            v.reached.as_deref(),
            Some("budget reached (this chamber's daily_usd = $1.00, $1.20 used)"),
            "{v:?}"
        );
        // Still paused: nothing new to do.
        assert_eq!(b.judge(&[daily(1.3, "2026-11-24")], true, false), Verdict::default());
        // The operator resumed it: released for the day.
        assert_eq!(b.judge(&[daily(1.4, "2026-11-24")], false, false), Verdict::default());
        assert!(b.judge(&[daily(1.1, "2026-11-25")], false, false).reached.is_some(), "the next day counts afresh");
    }

    /// Found by the simulator: a limit reached while the chamber was
    /// stopped paused nothing, so a later start is no resume and releases
    /// nothing; the limit pauses it then.
    #[test]
    fn a_limit_reached_while_stopped_pauses_at_the_next_start() {
        let mut b = Budgets::default();
        assert_eq!(b.judge(&[daily(1.0, "2026-11-24")], false, true), Verdict::default());
        assert!(b.judge(&[daily(1.0, "2026-11-24")], false, false).reached.is_some());
    }

    #[test]
    fn the_sender_of_mail_hears_of_a_hold_once() {
        let mut h = Hold::default();
        assert!(h.asked(false, Some("17:00")).is_none(), "a timer's wake tells nobody");
        let (_, body) = h.asked(true, Some("17:00")).expect("told");
        assert!(body.ends_with("read after 17:00."), "{body}");
        assert!(h.asked(true, Some("17:00")).is_none(), "once per hold");
        assert!(h.asked(true, None).is_none());
        assert!(h.asked(true, Some("18:00")).is_some(), "a new hold is told again");
    }

    #[test]
    fn a_hold_ends_at_the_named_reset_or_after_the_default() {
        let now: DateTime<Utc> = "2026-11-24T12:00:00Z".parse().unwrap();
        let reset = now + Duration::seconds(90);
        let named = hold_until(now, Some(reset), Duration::minutes(5), 1_500);
        assert_eq!(named, HoldUntil { at: reset + Duration::milliseconds(1_500), guessed: None });
        let past = hold_until(now, Some(now - Duration::seconds(1)), Duration::minutes(5), 20_000);
        assert_eq!(past.at, now + Duration::minutes(5), "jitter stays under ten seconds");
        assert!(past.guessed.expect("a guess").contains("held for 5m"));
    }
}
