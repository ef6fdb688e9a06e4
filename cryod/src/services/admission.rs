//! Admission: at most `max_concurrent_sessions` agents at once across the
//! daemon, admitted in priority order (inbox > manual > recovery > bootstrap >
//! scheduled), oldest first within a class. A burst of wakes is queued, never
//! dropped.
//!
//! A chamber asks with [`Admission::request`], giving a [`Sink`]; when a slot
//! is free the sink receives a [`Permit`], which frees the slot when dropped.
//! A request names its provider account; an account with a limit of its own
//! (`[providers.NAME] max_concurrent` in `cryod.toml`) is admitted up to it,
//! and its waiting requests let the others pass meanwhile. An account held
//! at its provider's limit lets its requests go to its fallbacks
//! (`[providers.NAME] fallback`), in order, the first not held; the permit
//! says which account it bills ([`Permit::account`]).
//! A chamber holds one permit at most: while it holds one (or one is on its
//! way to it), its requests are ignored; it asks again after giving it back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use cryo_core::session::Trigger;

/// Where a chamber receives its permit; it hands the permit back if the
/// chamber is gone.
pub type Sink = Arc<dyn Fn(Permit) -> Result<(), Permit> + Send + Sync>;

#[derive(Clone)]
pub struct Admission(Arc<Mutex<State>>);

struct State {
    limit: usize,
    running: usize,
    seq: u64,
    /// Waiting requests, in the order they are admitted.
    queue: BTreeMap<(Trigger, u64), Waiting>,
    /// Chambers holding a permit.
    holders: HashSet<i64>,
    /// Provider accounts' own limits, and their permits out.
    provider_limits: HashMap<String, usize>,
    provider_running: HashMap<String, usize>,
    /// Accounts held at their provider's limit, until then.
    held: HashMap<String, Held>,
    /// Where a new hold is kept (the store: a restart keeps it).
    keep: Option<Keep>,
}

/// Keeps a hold: the account, for how long from now, whether it is
/// cryod's guess, and what said so.
pub type Keep = Arc<dyn Fn(&str, std::time::Duration, bool, Option<&str>) + Send + Sync>;

struct Waiting {
    chamber: i64,
    sink: Sink,
    since: std::time::Instant,
    provider: Option<String>,
    /// Where it may go while `provider` is held, in order.
    fallbacks: Vec<String>,
}

impl State {
    fn is_held(&self, p: &str) -> bool {
        self.held.get(p).is_some_and(|h| h.until > tokio::time::Instant::now())
    }

    fn at_limit(&self, p: &str) -> bool {
        self.provider_limits.get(p).is_some_and(|limit| self.provider_running.get(p).copied().unwrap_or(0) >= *limit)
    }

    /// The account `w` may be admitted on now (the rule is
    /// `cryo_core::limits::pick_account`, which the simulator runs too).
    fn pick(&self, w: &Waiting) -> Result<Option<String>, ()> {
        let (held, at_limit) = (|a: &str| self.is_held(a), |a: &str| self.at_limit(a));
        cryo_core::limits::pick_account(w.provider.as_deref(), &w.fallbacks, held, at_limit)
            .map(|a| a.map(str::to_string))
            .map_err(|_| ())
    }
}

/// A slot; dropping it admits the next waiting chamber.
pub struct Permit {
    admission: Admission,
    chamber: i64,
    provider: Option<String>,
}

impl Permit {
    /// The account the session bills: the chamber's own, or a fallback
    /// while its own is held.
    pub fn account(&self) -> Option<&str> {
        self.provider.as_deref()
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

/// An account held at its provider's limit.
#[derive(Debug, Clone)]
struct Held {
    until: tokio::time::Instant,
    /// The provider named no reset: the hold is cryod's default.
    guessed: bool,
    /// What said so (the gateway's reading of the provider's headers).
    source: Option<String>,
}

/// An account held now, as status shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    pub provider: String,
    /// How long it is still held.
    pub left: std::time::Duration,
    /// Chambers whose wakes wait for it.
    pub waiting: usize,
    /// Their ids.
    pub chambers: Vec<i64>,
    /// The provider named no reset: `left` is `limit_hold_seconds`.
    pub guessed: bool,
    /// What said so, when the gateway read it from the provider's headers.
    pub source: Option<String>,
}

impl Admission {
    /// `limit` agents at once in all; `providers`: accounts with a limit of
    /// their own.
    pub fn new(limit: usize, providers: HashMap<String, usize>) -> Admission {
        Admission(Arc::new(Mutex::new(State {
            limit: limit.max(1),
            running: 0,
            seq: 0,
            queue: BTreeMap::new(),
            holders: HashSet::new(),
            provider_limits: providers.into_iter().map(|(p, n)| (p, n.max(1))).collect(),
            provider_running: HashMap::new(),
            held: HashMap::new(),
            keep: None,
        })))
    }

    /// Where each new hold is kept from now on.
    pub fn keep_holds(&self, keep: Keep) {
        self.0.lock().expect("admission lock").keep = Some(keep);
    }

    /// Holds `provider`'s requests for `left` (its limit was reached): they
    /// wait in their places, and go through in order when it is over.
    /// `guessed`: the provider named no reset, so `left` is cryod's default.
    pub fn hold(&self, provider: &str, left: std::time::Duration, guessed: bool) {
        self.hold_with(provider, left, guessed, None);
    }

    /// Holds `provider` for `left` as the provider's headers said
    /// (`source`: which, for status and the hub).
    pub fn hold_for(&self, provider: &str, left: std::time::Duration, source: String) {
        self.hold_with(provider, left, false, Some(source));
    }

    /// Holds `provider` for `left` as a hold kept before a restart said.
    pub fn restore(&self, provider: &str, left: std::time::Duration, guessed: bool, source: Option<String>) {
        self.hold_with(provider, left, guessed, source);
    }

    fn hold_with(&self, provider: &str, left: std::time::Duration, guessed: bool, source: Option<String>) {
        let until = tokio::time::Instant::now() + left;
        let kept = {
            let mut s = self.0.lock().expect("admission lock");
            let h = s.held.entry(provider.to_string()).or_insert(Held { until, guessed, source: source.clone() });
            let newer = until >= h.until;
            if newer {
                // A hold that says nothing of its source keeps the one
                // said of the same limit a moment before.
                let source = source.or_else(|| h.source.take().filter(|_| h.until > tokio::time::Instant::now()));
                *h = Held { until, guessed, source };
            }
            let source = h.source.clone();
            s.keep.clone().filter(|_| newer).map(|k| (k, source))
        };
        if let Some((keep, source)) = kept {
            keep(provider, left, guessed, source.as_deref());
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(until).await;
            let mut s = me.0.lock().expect("admission lock");
            s.held.retain(|_, h| h.until > tokio::time::Instant::now());
            me.grant(&mut s);
        });
    }

    /// How long `provider` is still held at its limit, if it is.
    pub fn held(&self, provider: &str) -> Option<std::time::Duration> {
        let s = self.0.lock().expect("admission lock");
        s.held.get(provider).and_then(|h| h.until.checked_duration_since(tokio::time::Instant::now()))
    }

    /// The first of `accounts` not held at its limit now, if any.
    pub fn first_free<'a>(&self, accounts: impl IntoIterator<Item = &'a String>) -> Option<&'a String> {
        let s = self.0.lock().expect("admission lock");
        accounts.into_iter().find(|a| !s.is_held(a))
    }

    /// Accounts held at their limit now, by name.
    pub fn holds(&self) -> Vec<Hold> {
        let s = self.0.lock().expect("admission lock");
        let now = tokio::time::Instant::now();
        let mut out: Vec<_> = s
            .held
            .iter()
            .filter(|(_, h)| h.until > now)
            .map(|(p, h)| Hold {
                provider: p.clone(),
                left: h.until - now,
                waiting: s.queue.values().filter(|w| w.provider.as_deref() == Some(p.as_str())).count(),
                chambers: s
                    .queue
                    .values()
                    .filter(|w| w.provider.as_deref() == Some(p.as_str()))
                    .map(|w| w.chamber)
                    .collect(),
                guessed: h.guessed,
                source: h.source.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.provider.cmp(&b.provider));
        out
    }

    /// Queues a request from `chamber`, whose sessions bill `provider`; it
    /// is answered through `sink`. A chamber has at most one request queued:
    /// a new one replaces the old if it ranks higher.
    pub fn request(&self, trigger: Trigger, chamber: i64, provider: Option<String>, sink: Sink) {
        self.request_or(trigger, chamber, provider, Vec::new(), sink);
    }

    /// [`Admission::request`], going to `fallbacks` (in order) while
    /// `provider` is held.
    pub fn request_or(
        &self,
        trigger: Trigger,
        chamber: i64,
        provider: Option<String>,
        fallbacks: Vec<String>,
        sink: Sink,
    ) {
        let mut s = self.0.lock().expect("admission lock");
        if s.holders.contains(&chamber) {
            return;
        }
        let mut since = std::time::Instant::now();
        if let Some(key) = s.queue.iter().find(|(_, w)| w.chamber == chamber).map(|(k, _)| *k) {
            if key.0 <= trigger {
                return;
            }
            if let Some(w) = s.queue.remove(&key) {
                since = w.since;
            }
        }
        let seq = s.seq;
        s.seq += 1;
        s.queue.insert((trigger, seq), Waiting { chamber, sink, since, provider, fallbacks });
        self.grant(&mut s);
    }

    /// Withdraws `chamber`'s queued request, if any.
    pub fn cancel(&self, chamber: i64) {
        let mut s = self.0.lock().expect("admission lock");
        s.queue.retain(|_, w| w.chamber != chamber);
    }

    pub fn running(&self) -> usize {
        self.0.lock().expect("admission lock").running
    }

    /// Requests waiting, slots held, and the limit (for the figures).
    pub fn depth(&self) -> (usize, usize, usize) {
        let s = self.0.lock().expect("admission lock");
        (s.queue.len(), s.running, s.limit)
    }

    /// The requests that wait for a slot: not those whose account is held
    /// or at its own limit (they wait for that, and the holds say so).
    pub fn waiting_for_a_slot(&self) -> usize {
        let s = self.0.lock().expect("admission lock");
        s.queue.values().filter(|w| s.pick(w).is_ok()).count()
    }

    fn grant(&self, s: &mut State) {
        // Requests of a provider at its own limit wait, in their places.
        let mut passed = Vec::new();
        while s.running < s.limit {
            let Some((key, w)) = s.queue.pop_first() else { break };
            let Ok(account) = s.pick(&w) else {
                passed.push((key, w));
                continue;
            };
            crate::base::metrics::get().admitted(key.0.as_str(), w.since.elapsed());
            s.take(w.chamber, &account, 1);
            let permit = Permit { admission: self.clone(), chamber: w.chamber, provider: account.clone() };
            if let Err(returned) = (w.sink)(permit) {
                // The chamber is gone: its permit comes back unused.
                std::mem::forget(returned);
                s.take(w.chamber, &account, -1);
            }
        }
        s.queue.extend(passed);
    }
}

impl State {
    /// Counts a permit out (`1`) or back in (`-1`).
    fn take(&mut self, chamber: i64, provider: &Option<String>, n: isize) {
        self.running = self.running.saturating_add_signed(n);
        if n > 0 {
            self.holders.insert(chamber);
        } else {
            self.holders.remove(&chamber);
        }
        if let Some(p) = provider {
            let count = self.provider_running.entry(p.clone()).or_insert(0);
            *count = count.saturating_add_signed(n);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let admission = self.admission.clone();
        let mut s = admission.0.lock().expect("admission lock");
        s.take(self.chamber, &self.provider, -1);
        admission.grant(&mut s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Granted = std::sync::mpsc::Receiver<(i64, Permit)>;

    fn sinks() -> (impl Fn(i64) -> Sink, Granted) {
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let tx = Arc::new(tx);
        let make = move |id: i64| -> Sink {
            let tx = tx.clone();
            Arc::new(move |p| tx.lock().unwrap().send((id, p)).map_err(|e| e.0.1))
        };
        (make, rx)
    }

    #[test]
    fn limit_and_priority() {
        let a = Admission::new(1, HashMap::new());
        let (sink, rx) = sinks();
        a.request(Trigger::Scheduled, 1, None, sink(1));
        let (id, first) = rx.try_recv().expect("the first request is admitted at once");
        assert_eq!(id, 1);
        a.request(Trigger::Scheduled, 2, None, sink(2));
        a.request(Trigger::Inbox, 3, None, sink(3));
        a.request(Trigger::Manual, 4, None, sink(4));
        assert!(rx.try_recv().is_err(), "the limit holds");
        assert_eq!(a.running(), 1);
        drop(first);
        let (id, p) = rx.try_recv().expect("the next is admitted when a slot frees");
        assert_eq!(id, 3, "inbox ranks first");
        assert_eq!(a.running(), 1);
        a.cancel(4);
        drop(p);
        assert_eq!(rx.try_recv().map(|g| g.0).ok(), Some(2), "manual was cancelled; scheduled is next");
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_chamber_holds_one_permit_at_most() {
        let a = Admission::new(4, HashMap::new());
        let (sink, rx) = sinks();
        a.request(Trigger::Scheduled, 1, None, sink(1));
        let (_, p) = rx.try_recv().expect("admitted");
        // Asked again while it holds the permit (mail arrived meanwhile).
        a.request(Trigger::Inbox, 1, None, sink(1));
        assert!(rx.try_recv().is_err(), "no second permit for the same chamber");
        assert_eq!(a.running(), 1);
        drop(p);
        a.request(Trigger::Inbox, 1, None, sink(1));
        assert_eq!(rx.try_recv().map(|g| g.0).ok(), Some(1), "once given back, it may ask again");
    }

    #[test]
    fn a_provider_limit_holds_and_lets_others_pass() {
        let a = Admission::new(3, HashMap::from([("p".to_string(), 1)]));
        let (sink, rx) = sinks();
        let p = || Some("p".to_string());
        a.request(Trigger::Scheduled, 1, p(), sink(1));
        a.request(Trigger::Inbox, 2, p(), sink(2));
        a.request(Trigger::Scheduled, 3, Some("q".into()), sink(3));
        a.request(Trigger::Scheduled, 4, None, sink(4));
        let got: Vec<i64> = rx.try_iter().map(|(id, permit)| (id, std::mem::forget(permit)).0).collect();
        assert_eq!(got, [1, 3, 4], "p's second waits; the others pass it");
        assert_eq!(a.depth(), (1, 3, 3));
    }

    #[test]
    fn a_provider_slot_goes_to_its_next_request() {
        let a = Admission::new(4, HashMap::from([("p".to_string(), 1)]));
        let (sink, rx) = sinks();
        a.request(Trigger::Scheduled, 1, Some("p".into()), sink(1));
        let (_, first) = rx.try_recv().expect("admitted");
        a.request(Trigger::Scheduled, 2, Some("p".into()), sink(2));
        assert!(rx.try_recv().is_err(), "p is at its limit");
        drop(first);
        assert_eq!(rx.try_recv().map(|g| g.0).ok(), Some(2));
    }

    #[tokio::test]
    async fn a_held_provider_waits_and_others_pass() {
        let a = Admission::new(4, HashMap::new());
        let (sink, rx) = sinks();
        a.hold("p", std::time::Duration::from_secs(60), true);
        a.request(Trigger::Scheduled, 1, Some("p".into()), sink(1));
        a.request(Trigger::Scheduled, 2, Some("q".into()), sink(2));
        let got: Vec<i64> = rx.try_iter().map(|(id, permit)| (id, std::mem::forget(permit)).0).collect();
        assert_eq!(got, [2], "p is held; q passes");
        // 1 waits for p's reset, not for one of the three free slots.
        assert_eq!((a.depth().0, a.waiting_for_a_slot()), (1, 0));
        let holds = a.holds();
        assert_eq!((holds[0].provider.as_str(), holds[0].waiting, holds[0].guessed), ("p", 1, true));
        assert!(holds[0].left > std::time::Duration::from_secs(50));
        // A later hold the provider named replaces the guess.
        a.hold("p", std::time::Duration::from_secs(90), false);
        assert!(!a.holds()[0].guessed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_account_sends_its_wakes_to_its_first_free_fallback_and_takes_them_back() {
        let a = Admission::new(4, HashMap::from([("spare".to_string(), 1)]));
        let (sink, rx) = sinks();
        let or = |id: i64| {
            a.request_or(Trigger::Scheduled, id, Some("work".into()), vec!["gone".into(), "spare".into()], sink(id))
        };
        let minute = std::time::Duration::from_secs(60);
        a.hold("work", 2 * minute, false);
        a.hold("gone", 10 * minute, false);
        or(1);
        let (_, on_spare) = rx.try_recv().expect("admitted on a fallback");
        assert_eq!(on_spare.account(), Some("spare"), "work and gone are held: spare takes it");
        // spare is at its own limit: the next waits rather than skip it.
        or(2);
        assert!(rx.try_recv().is_err(), "waits for spare's slot");
        drop(on_spare);
        let (id, p) = rx.try_recv().expect("spare's slot, given back");
        assert_eq!((id, p.account()), (2, Some("spare")));
        drop(p);
        // work's hold ends: its wakes are its own again.
        tokio::time::sleep(2 * minute + std::time::Duration::from_secs(1)).await;
        or(3);
        assert_eq!(rx.try_recv().expect("admitted").1.account(), Some("work"));
        // Every account held: it waits for the first to reset.
        a.hold("work", minute, false);
        a.hold("spare", 2 * minute, false);
        or(4);
        assert!(rx.try_recv().is_err(), "all held");
        tokio::time::sleep(minute + std::time::Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert_eq!(rx.try_recv().expect("admitted at work's reset").1.account(), Some("work"));
    }

    #[test]
    fn a_gone_chamber_returns_its_slot() {
        let a = Admission::new(1, HashMap::new());
        let (sink, rx) = sinks();
        drop(rx);
        a.request(Trigger::Inbox, 1, None, sink(1));
        assert_eq!(a.running(), 0);
    }
}
