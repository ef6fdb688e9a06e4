//! The TODO list: the agent's schedule and the source of truth for wakes.
//!
//! `todo.json` keeps the seed system's shape (an array of objects with `id`,
//! `text`, `done`, `claimed`, `at`, `created`) and adds `attempt`, `every`,
//! `cron` and `missed`. Times are written as RFC 3339 with the chamber's offset;
//! naive local times (`2026-03-05T09:00`, as the seed system wrote them) are
//! read in the chamber's zone. Fields this version does not know are kept.
//!
//! Lifecycle: pending → claimed (by a session) → done. A claim is terminal: a
//! failed session never reopens a TODO, it adds a retry with a fresh id. A
//! recurring TODO is a series: each due slot is claimed by advancing the series
//! to its next slot, so a slot, once claimed, is never pending again.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Timelike, Utc};
use chrono_tz::Tz;

use crate::time;

/// Most TODOs not yet done one chamber may hold. Beyond this, `add` is
/// refused: a list this long is a runaway agent, not a plan. Done TODOs do
/// not count: past [`DEFAULT_KEEP_DONE`] (or `[history] keep_done`) they
/// leave `todo.json` for its archive ([`TodoList::retire`]).
pub const MAX_TODOS: usize = 10_000;

/// Done TODOs `todo.json` keeps, newest last, when `cryo.toml` does not say.
pub const DEFAULT_KEEP_DONE: usize = 100;

/// Longest TODO text accepted (characters).
pub const MAX_TEXT: usize = 2_000;

/// What a retry adds to a TODO's text (" (attempt 12)"), allowed beyond
/// [`MAX_TEXT`] in a file.
const ATTEMPT_ROOM: usize = 32;

/// Longest retry delay: a persistently failing TODO still runs once a day.
pub const RETRY_CAP: Duration = Duration::days(1);

/// What to do with slots of a recurring TODO that were missed (machine off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missed {
    /// Run once for all the missed slots, telling the agent how many.
    #[default]
    Once,
    /// Drop missed slots; run only at the next slot that comes on time.
    Skip,
}

/// How a recurring TODO repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repeat {
    Every(Duration),
    Cron(String),
}

/// One TODO.
#[derive(Debug, Clone, PartialEq)]
pub struct Todo {
    pub id: u64,
    pub text: String,
    pub done: bool,
    pub claimed: bool,
    /// When it is due; `None` for an item with no time (never due by itself).
    pub at: Option<DateTime<Utc>>,
    pub created: Option<DateTime<Utc>>,
    /// 0 for an original, k for the k-th retry.
    pub attempt: u32,
    pub repeat: Option<Repeat>,
    pub missed: Missed,
    /// The wake whose session holds this TODO's current claim (one-shot or a
    /// recurring slot), until the session's end settles it. Written in the
    /// same atomic rewrite as the claim and cleared in the same one as its
    /// settlement, so recovery can tell a claim in flight from one that never
    /// landed or was already settled.
    pub claimed_by: Option<String>,
    /// A command run before a scheduled wake for it: exit 0 wakes the
    /// agent, [`PRECHECK_SKIP`] passes the slot by (see `Settings::precheck`).
    pub precheck: Option<String>,
    /// Keys this version does not know, kept as they were.
    extra: BTreeMap<String, serde_json::Value>,
}

/// The exit status with which a pre-check says there is nothing to do
/// (the "neutral" code of some CI systems: `EX_CONFIG` in sysexits.h).
pub const PRECHECK_SKIP: i32 = 78;

impl Todo {
    pub fn is_pending(&self) -> bool {
        !self.done && !self.claimed
    }

    pub fn is_due(&self, now: DateTime<Utc>) -> bool {
        self.is_pending() && self.at.is_some_and(|at| at <= now)
    }

    /// Whether this TODO's claim by `wake` is still unsettled. A one-shot TODO
    /// claimed by a version of cryo that kept no marker counts for any wake.
    pub fn in_flight(&self, wake: &str) -> bool {
        match &self.claimed_by {
            Some(w) => w == wake,
            None => self.repeat.is_none() && self.claimed && !self.done,
        }
    }
}

/// How a session's end settles its claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The session ended cleanly: one-shot TODOs are done.
    Complete,
    /// It failed: each claim gets a retry after 2^k minutes, up to `max_attempts`.
    Fail { now: DateTime<Utc>, max_attempts: u32 },
    /// It was ended from outside (stop, replace, daemon stopped): each claim is
    /// re-queued at once as a new attempt.
    Requeue { now: DateTime<Utc> },
    /// The provider's limit stopped it: each claim is queued again for
    /// `until`, as the same attempt (a limit is not a failure).
    Defer { until: DateTime<Utc> },
}

/// A claimed slot of a TODO, as a session carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub id: u64,
    pub text: String,
    /// The (first) slot's due time.
    pub due: DateTime<Utc>,
    /// Slots of a recurring TODO coalesced into this run (1 when on time).
    pub slots: u32,
    pub attempt: u32,
    /// Earlier slots of a `skip` series passed by without a run (how many,
    /// and the first): missed, not run.
    pub skipped: Option<(u32, DateTime<Utc>)>,
}

/// Why a change to the list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TodoError {
    #[error("no TODO with id {0}")]
    NotFound(u64),
    #[error("TODO {0} is already done")]
    AlreadyDone(u64),
    #[error("TODO {0} is claimed by the running session; it completes when the session ends")]
    Claimed(u64),
    #[error("TODO text is empty")]
    EmptyText,
    #[error("TODO text is {0} characters, over the limit of {MAX_TEXT}")]
    TextTooLong(usize),
    #[error("this chamber holds {MAX_TODOS} TODOs not done, the limit: finish or remove some first")]
    TooMany,
    #[error("invalid --every {0:?}: give a positive duration of at least a minute, such as 30m, 6h or 1d")]
    BadEvery(String),
    #[error(
        "invalid --cron {0:?}: {1} (five fields: MIN HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK, e.g. \"0 9 * * MON-FRI\")"
    )]
    BadCron(String, String),
    #[error("give either --every or --cron, not both")]
    BothRepeats,
    #[error("{at} is in the past ({ago} ago): a TODO needs a time still to come (such as +30m or tomorrow 09:00)")]
    InThePast { at: String, ago: String },
}

/// How far in the past a new TODO's time may lie when an agent or an
/// operator gives it (a time meant as now, give or take a slow clock).
pub const PAST_GRACE: Duration = Duration::minutes(1);

/// Why `todo.json` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("todo.json is not valid JSON: {0}")]
    Json(String),
    #[error("todo.json item {index}: {error}")]
    Item { index: usize, error: ItemError },
    #[error("todo.json lists id {0} twice")]
    DuplicateId(u64),
    #[error("todo.json holds {0} TODOs not done, over the limit of {MAX_TODOS}")]
    TooMany(usize),
}

/// The list, plus the high-water mark that keeps ids from being reused after
/// the highest one is removed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TodoList {
    pub items: Vec<Todo>,
    /// The highest id ever handed out in this chamber.
    pub high_water: u64,
}

/// What `add` should create.
#[derive(Debug, Clone, Default)]
pub struct NewTodo {
    pub text: String,
    pub at: Option<DateTime<Utc>>,
    pub every: Option<String>,
    pub cron: Option<String>,
    pub missed: Missed,
    pub precheck: Option<String>,
}

/// The parsed form of `--every` / `--cron`, validated.
pub fn parse_repeat(every: Option<&str>, cron: Option<&str>) -> Result<Option<Repeat>, TodoError> {
    match (every, cron) {
        (Some(_), Some(_)) => Err(TodoError::BothRepeats),
        (Some(e), None) => match time::parse_duration(e) {
            Some(d) if d >= Duration::minutes(1) => Ok(Some(Repeat::Every(d))),
            _ => Err(TodoError::BadEvery(e.to_string())),
        },
        (None, Some(c)) => {
            let fields = c.split_whitespace().count();
            if fields != 5 {
                return Err(TodoError::BadCron(c.to_string(), format!("{fields} fields")));
            }
            c.parse::<croner::Cron>().map_err(|e| TodoError::BadCron(c.to_string(), e.to_string()))?;
            Ok(Some(Repeat::Cron(c.to_string())))
        }
        (None, None) => Ok(None),
    }
}

/// The first slot of `repeat` strictly after `after`, in zone `tz`.
pub fn next_slot(repeat: &Repeat, anchor: DateTime<Utc>, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
    match repeat {
        Repeat::Every(d) => {
            let step = d.num_seconds().max(60);
            if anchor > after {
                return Some(anchor);
            }
            let k = (after - anchor).num_seconds() / step + 1;
            anchor.checked_add_signed(Duration::seconds(step.checked_mul(k)?))
        }
        Repeat::Cron(c) => {
            let cron: croner::Cron = c.parse().ok()?;
            cron.find_next_occurrence(&after.with_timezone(&tz), false).ok().map(|t| t.with_timezone(&Utc))
        }
    }
}

impl TodoList {
    pub fn get(&self, id: u64) -> Option<&Todo> {
        self.items.iter().find(|t| t.id == id)
    }

    fn next_id(&mut self) -> u64 {
        let max = self.items.iter().map(|t| t.id).max().unwrap_or(0);
        self.high_water = self.high_water.max(max) + 1;
        self.high_water
    }

    /// Adds a TODO; returns its id. A recurring TODO without `at` starts at its
    /// first slot after `now`.
    pub fn add(&mut self, new: NewTodo, now: DateTime<Utc>, tz: Tz) -> Result<u64, TodoError> {
        let text = new.text.trim();
        if text.is_empty() {
            return Err(TodoError::EmptyText);
        }
        let len = text.chars().count();
        if len > MAX_TEXT {
            return Err(TodoError::TextTooLong(len));
        }
        if self.open() >= MAX_TODOS {
            return Err(TodoError::TooMany);
        }
        let repeat = parse_repeat(new.every.as_deref(), new.cron.as_deref())?;
        // Whole seconds: "+30m" means a time, not a time to the nanosecond.
        let now = now.with_nanosecond(0).unwrap_or(now);
        let new_at = new.at.map(|a| a.with_nanosecond(0).unwrap_or(a));
        let at = match (&repeat, new_at) {
            (_, Some(at)) => Some(at),
            (Some(r), None) => next_slot(r, now, now, tz),
            (None, None) => None,
        };
        let id = self.next_id();
        self.items.push(Todo {
            id,
            text: text.to_string(),
            done: false,
            claimed: false,
            at,
            created: Some(now),
            attempt: 0,
            repeat,
            missed: new.missed,
            claimed_by: None,
            precheck: new.precheck.map(|p| p.trim().to_string()).filter(|p| !p.is_empty()),
            extra: BTreeMap::new(),
        });
        Ok(id)
    }

    /// Marks a pending TODO done (an agent or operator finished it by hand).
    pub fn done(&mut self, id: u64) -> Result<(), TodoError> {
        let t = self.items.iter_mut().find(|t| t.id == id).ok_or(TodoError::NotFound(id))?;
        if t.done {
            return Err(TodoError::AlreadyDone(id));
        }
        if t.claimed {
            return Err(TodoError::Claimed(id));
        }
        t.done = true;
        Ok(())
    }

    /// Removes a TODO that is not claimed by a running session.
    pub fn remove(&mut self, id: u64) -> Result<Todo, TodoError> {
        let i = self.items.iter().position(|t| t.id == id).ok_or(TodoError::NotFound(id))?;
        if self.items[i].claimed && !self.items[i].done {
            return Err(TodoError::Claimed(id));
        }
        let max = self.items.iter().map(|t| t.id).max().unwrap_or(0);
        self.high_water = self.high_water.max(max);
        Ok(self.items.remove(i))
    }

    /// How many TODOs are not done (pending or claimed): what [`MAX_TODOS`]
    /// counts.
    pub fn open(&self) -> usize {
        self.items.iter().filter(|t| !t.done).count()
    }

    /// Takes out the done TODOs beyond the newest `keep` (in the list's
    /// order, which is the order they were added), for the archive: what
    /// `todo.json` holds stays what is open plus a short tail.
    pub fn retire(&mut self, keep: usize) -> Vec<Todo> {
        let done = self.items.iter().filter(|t| t.done).count();
        let Some(mut over) = done.checked_sub(keep).filter(|n| *n > 0) else { return Vec::new() };
        let max = self.items.iter().map(|t| t.id).max().unwrap_or(0);
        self.high_water = self.high_water.max(max);
        let (mut out, mut kept) = (Vec::with_capacity(over), Vec::with_capacity(self.items.len() - over));
        for t in self.items.drain(..) {
            if t.done && over > 0 {
                over -= 1;
                out.push(t);
            } else {
                kept.push(t);
            }
        }
        self.items = kept;
        out
    }

    /// The earliest time a pending TODO comes due.
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        self.items.iter().filter(|t| t.is_pending()).filter_map(|t| t.at).min()
    }

    /// Pending TODOs due at `now`.
    pub fn due(&self, now: DateTime<Utc>) -> impl Iterator<Item = &Todo> {
        self.items.iter().filter(move |t| t.is_due(now))
    }

    /// Whether some pending TODO declares a future wake.
    pub fn has_pending(&self) -> bool {
        self.items.iter().any(|t| t.is_pending() && t.at.is_some())
    }

    /// Claims every TODO due at `now` for a session. One-shot TODOs become
    /// claimed; a recurring TODO advances to its next slot after `now`, and its
    /// missed slots are counted (policy `Once`) or dropped (policy `Skip`, when
    /// the newest slot is more than `grace` late).
    pub fn claim_due(&mut self, now: DateTime<Utc>, tz: Tz, grace: Duration) -> Vec<Claim> {
        self.claim(now, tz, grace, None, None)
    }

    /// Claims for the session of `wake` what [`claim_due`](Self::claim_due)
    /// would, but only among `only` (the claims the wake was recorded with),
    /// marking each claimed TODO with the wake (see [`Todo::claimed_by`]).
    pub fn claim_for(&mut self, wake: &str, only: &[u64], now: DateTime<Utc>, tz: Tz, grace: Duration) -> Vec<Claim> {
        self.claim(now, tz, grace, Some(wake), Some(only))
    }

    fn claim(
        &mut self,
        now: DateTime<Utc>,
        tz: Tz,
        grace: Duration,
        wake: Option<&str>,
        only: Option<&[u64]>,
    ) -> Vec<Claim> {
        let mut claims = Vec::new();
        let chosen = |t: &Todo| t.is_due(now) && only.is_none_or(|ids| ids.contains(&t.id));
        for t in self.items.iter_mut().filter(|t| chosen(t)) {
            let due = t.at.expect("is_due implies at");
            match t.repeat.clone() {
                None => {
                    t.claimed = true;
                    t.claimed_by = wake.map(str::to_string);
                    claims.push(Claim {
                        id: t.id,
                        text: t.text.clone(),
                        due,
                        slots: 1,
                        attempt: t.attempt,
                        skipped: None,
                    });
                }
                Some(repeat) => {
                    let (slots, last, next) = missed_slots(&repeat, due, now, tz);
                    t.at = next;
                    if t.at.is_none() {
                        t.done = true;
                    }
                    if !passed_by(t.missed, last, now, grace) {
                        let skip = t.missed == Missed::Skip;
                        let skipped = (skip && slots > 1).then_some((slots - 1, due));
                        let (due, slots) = if skip { (last, 1) } else { (due, slots) };
                        t.claimed_by = wake.map(str::to_string);
                        let text = t.text.clone();
                        claims.push(Claim { id: t.id, text, due, slots, attempt: t.attempt, skipped });
                    }
                }
            }
        }
        claims
    }

    /// Makes again the claims of `wake` that never reached the file: the
    /// ledger row is a claim's durable record, and the file is written after
    /// the agent starts, so cryod killed (or the power cut, or the disk full)
    /// in between leaves them out. A claim is made again only
    /// where the TODO still stands where the wake found it: a one-shot TODO
    /// pending and due as the same attempt, a series not yet moved past the
    /// claimed slot. Claims
    /// that did land (or were settled since) are left alone, so this is a
    /// no-op on a file that has them.
    pub fn reclaim(&mut self, wake: &str, claims: &[Claim], now: DateTime<Utc>, tz: Tz, grace: Duration) -> usize {
        let lost: Vec<u64> = claims
            .iter()
            .filter(|c| {
                self.get(c.id).is_some_and(|t| {
                    // A one-shot retried in place is a later attempt, or
                    // waits for a later time: its claim was settled.
                    let same = t.repeat.is_some() || t.attempt == c.attempt;
                    !t.in_flight(wake) && t.is_due(now) && same && t.at.is_some_and(|at| at <= c.due)
                })
            })
            .map(|c| c.id)
            .collect();
        if lost.is_empty() {
            return 0;
        }
        self.claim_for(wake, &lost, now, tz, grace).len()
    }

    /// Passes by the due slots of `ids` without a run (a pre-check said
    /// there was nothing to do): a one-shot TODO is done, a series moves to
    /// its next slot. Returns the slots passed by.
    pub fn pass(&mut self, ids: &[u64], now: DateTime<Utc>, tz: Tz, grace: Duration) -> Vec<Claim> {
        let passed = self.claim(now, tz, grace, None, Some(ids));
        for c in &passed {
            if let Some(t) = self.items.iter_mut().find(|t| t.id == c.id && t.repeat.is_none()) {
                t.claimed = false;
                t.done = true;
            }
        }
        passed
    }

    /// Advances the `skip` series whose newest due slot is more than `grace`
    /// late (what [`claim_due`](Self::claim_due) would move on without a
    /// run); returns the slots each passed by (`due`: the first).
    pub fn skip_missed(&mut self, now: DateTime<Utc>, tz: Tz, grace: Duration) -> Vec<Claim> {
        let mut moved = Vec::new();
        for t in self.items.iter_mut().filter(|t| t.is_due(now) && t.missed == Missed::Skip) {
            let (Some(repeat), Some(due)) = (t.repeat.clone(), t.at) else { continue };
            let (slots, last, next) = missed_slots(&repeat, due, now, tz);
            if passed_by(t.missed, last, now, grace) {
                t.at = next;
                t.done = next.is_none();
                let text = t.text.clone();
                moved.push(Claim { id: t.id, text, due, slots, attempt: t.attempt, skipped: None });
            }
        }
        moved
    }

    /// The claims of `wake` that are still in flight (claimed, not settled).
    pub fn in_flight(&self, wake: &str, claims: &[Claim]) -> Vec<Claim> {
        claims.iter().filter(|c| self.get(c.id).is_some_and(|t| t.in_flight(wake))).cloned().collect()
    }

    /// Settles the claims of `wake` that are still in flight, as `how` says;
    /// claims already settled (or never made) are left alone, so settling
    /// twice (a crash between the settlement and its record) changes nothing
    /// the second time. Returns the retry ids and the claims that gave up.
    pub fn settle(&mut self, wake: &str, claims: &[Claim], how: Settle) -> (Vec<u64>, Vec<Claim>) {
        let open = self.in_flight(wake, claims);
        for c in &open {
            if let Some(t) = self.items.iter_mut().find(|t| t.id == c.id) {
                t.claimed_by = None;
            }
        }
        match how {
            Settle::Complete => {
                self.complete(&open);
                (Vec::new(), Vec::new())
            }
            Settle::Fail { now, max_attempts } => self.fail(&open, now, max_attempts),
            Settle::Requeue { now } => (self.requeue(&open, now), Vec::new()),
            Settle::Defer { until } => (self.defer(&open, until), Vec::new()),
        }
    }

    /// The chamber's zone changed: pending cron series move to their next
    /// slot on the new zone's wall clock. Returns how many moved.
    pub fn rezone(&mut self, now: DateTime<Utc>, tz: Tz) -> usize {
        let mut moved = 0;
        for t in self.items.iter_mut().filter(|t| t.is_pending()) {
            if let (Some(Repeat::Cron(c)), Some(at)) = (&t.repeat, t.at)
                && at > now
            {
                let next = next_slot(&Repeat::Cron(c.clone()), now, now, tz);
                if next.is_some() && next != t.at {
                    t.at = next;
                    moved += 1;
                }
            }
        }
        moved
    }

    /// A session ended cleanly: its claimed one-shot TODOs are done.
    pub fn complete(&mut self, claims: &[Claim]) {
        for c in claims {
            if let Some(t) = self.items.iter_mut().find(|t| t.id == c.id && t.repeat.is_none()) {
                t.done = true;
            }
        }
    }

    /// A session failed: each claim waits again as `text (attempt k)`, due
    /// after 2^k minutes (capped at a day), unless `max_attempts` is
    /// exhausted (then a one-shot is done). Returns the ids the retries
    /// wait as and the claims that gave up.
    pub fn fail(&mut self, claims: &[Claim], now: DateTime<Utc>, max_attempts: u32) -> (Vec<u64>, Vec<Claim>) {
        self.retry(claims, now, max_attempts, retry_delay)
    }

    /// A session was ended from outside (an operator's stop or replace): each
    /// claim is re-queued at once as `text (attempt k)`.
    pub fn requeue(&mut self, claims: &[Claim], now: DateTime<Utc>) -> Vec<u64> {
        self.retry(claims, now, u32::MAX, |_| Duration::zero()).0
    }

    /// Queues each claim again for `until`, with its text and attempt
    /// unchanged; returns their ids (a one-shot keeps its own).
    pub fn defer(&mut self, claims: &[Claim], until: DateTime<Utc>) -> Vec<u64> {
        let at = until.with_nanosecond(0).unwrap_or(until);
        claims.iter().map(|c| self.again(c, at, at, c.attempt, c.text.clone())).collect()
    }

    fn retry(
        &mut self,
        claims: &[Claim],
        now: DateTime<Utc>,
        max_attempts: u32,
        delay: impl Fn(u32) -> Duration,
    ) -> (Vec<u64>, Vec<Claim>) {
        let now = now.with_nanosecond(0).unwrap_or(now);
        let mut retries = Vec::new();
        let mut exhausted = Vec::new();
        for c in claims {
            let k = c.attempt.saturating_add(1);
            if k > max_attempts {
                self.complete(std::slice::from_ref(c));
                exhausted.push(c.clone());
                continue;
            }
            retries.push(self.again(c, now, now + delay(k), k, format!("{} (attempt {k})", base_text(&c.text))));
        }
        (retries, exhausted)
    }

    /// Queues the claim `c` again at `at` as attempt `attempt` (made at
    /// `created`, for a series' slot): a one-shot
    /// TODO in place, keeping its number (its claim of the earlier attempt
    /// is over; `todo done N` still names it); a series' slot as a one-shot
    /// TODO of its own, since the series goes on. Returns the id it waits as.
    fn again(&mut self, c: &Claim, created: DateTime<Utc>, at: DateTime<Utc>, attempt: u32, text: String) -> u64 {
        if let Some(t) = self.items.iter_mut().find(|t| t.id == c.id && t.repeat.is_none()) {
            t.done = false;
            t.claimed = false;
            t.claimed_by = None;
            t.at = Some(at);
            t.attempt = attempt;
            t.text = text;
            // Its check said "wake" already.
            t.precheck = None;
            return c.id;
        }
        let id = self.next_id();
        self.items.push(Todo {
            id,
            text,
            done: false,
            claimed: false,
            at: Some(at),
            created: Some(created),
            attempt,
            repeat: None,
            missed: Missed::Once,
            claimed_by: None,
            // Its check said "wake" already.
            precheck: None,
            extra: BTreeMap::new(),
        });
        id
    }
}

/// Whether a series' newest due slot `last` is passed by without a run: a
/// `skip` series more than `grace` late.
fn passed_by(missed: Missed, last: DateTime<Utc>, now: DateTime<Utc>, grace: Duration) -> bool {
    missed == Missed::Skip && now - last > grace
}

/// The slots of a series due at `due` that have passed by `now`: how many,
/// the newest, and the first one after `now`.
fn missed_slots(
    repeat: &Repeat,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    tz: Tz,
) -> (u32, DateTime<Utc>, Option<DateTime<Utc>>) {
    let mut slots = 1u32;
    let mut last = due;
    let mut next = next_slot(repeat, due, due, tz);
    while let Some(n) = next.filter(|n| *n <= now) {
        slots = slots.saturating_add(1);
        last = n;
        next = next_slot(repeat, due, n, tz);
        if slots >= 100_000 {
            next = next_slot(repeat, due, now, tz);
            break;
        }
    }
    (slots, last, next)
}

/// `max_attempts` when `cryo.toml` does not set it: how often a TODO is
/// tried before cryo gives up on it and asks for a person.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

/// 2^k minutes, capped at [`RETRY_CAP`].
pub fn retry_delay(k: u32) -> Duration {
    if k >= 11 {
        return RETRY_CAP;
    }
    Duration::minutes(1i64 << k).min(RETRY_CAP)
}

/// The text without a trailing ` (attempt k)`.
pub fn base_text(text: &str) -> &str {
    if let Some(open) = text.rfind(" (attempt ") {
        let tail = &text[open + 10..];
        if tail.ends_with(')') && tail[..tail.len() - 1].bytes().all(|b| b.is_ascii_digit()) && tail.len() > 1 {
            return &text[..open];
        }
    }
    text
}

mod file;

pub use file::{
    ItemError, archive_from_file, parse_archived, parse_file, parse_file_keeping, parse_line, render_archived,
    render_file, render_line, render_seed_file,
};

#[cfg(test)]
mod tests;
