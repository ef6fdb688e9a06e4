//! What the operator accepts of a chamber's `cryo.toml`, as `direnv allow`
//! does for a folder's `.envrc`.
//!
//! The agent can write its own `cryo.toml`. The settings that decide how
//! it is confined, what cryod runs for it, what it may spend and where its
//! words go ([`KEYS`]) therefore take effect only once the operator has
//! accepted them: cryod keeps a digest of each (never its value: a
//! `[provider] env` value is a key) in its store, and a file whose digests
//! differ holds the chamber with one line naming the keys, until
//! `cryoctl chamber trust NAME` (or an operator's `chamber add`, or the
//! hub's settings page, where the operator is the one acting). The other
//! settings (the zone, the watched folders, the session's continuity) apply
//! as soon as they are read.

use std::collections::BTreeMap;

/// The settings the operator must accept: they decide confinement
/// (`sandbox`, `writable`, `readable`), run commands (`agent`,
/// `precheck`), reach outside the chamber (`provider`: the agent's
/// environment and key files; `on_end`: other chambers' inboxes; `sync`:
/// credentials and where messages go), or bound what a session may do
/// (`memory_max`, `cpu_weight`, `max_session_duration` with `stall_after`
/// and `loop_after`, `budget`).
pub const KEYS: &[&str] = &[
    "agent",
    "sandbox",
    "writable",
    "readable",
    "precheck",
    "provider",
    "on_end",
    "sync",
    "memory_max",
    "cpu_weight",
    "max_session_duration",
    "budget",
];

/// Settings the operator must accept that have a digest only when set:
/// `approvals` (which tool calls run, wait for a person, or are refused)
/// and `git` (which repository cryod fetches, and where it pushes).
pub const LATER_KEYS: &[&str] = &["approvals", "git"];

/// Each of [`KEYS`] and the digest of its value in `table` (absent keys
/// have a digest too: removing a limit is a change).
pub fn digests(table: &toml::Table) -> BTreeMap<String, String> {
    let mut d: BTreeMap<String, String> = KEYS
        .iter()
        .map(|k| {
            let canonical = match table.get(*k) {
                Some(v) => canonical(v),
                None => "absent".to_string(),
            };
            let digest = ring::digest::digest(&ring::digest::SHA256, format!("{k}\n{canonical}").as_bytes());
            (k.to_string(), hex::encode(&digest.as_ref()[..16]))
        })
        .collect();
    // `network` confines too: part of `sandbox`'s digest when it is set
    // (so chambers accepted before it existed are not held for it).
    if let (Some(v), Some(digest)) = (table.get("network"), d.get_mut("sandbox")) {
        refold(digest, &format!("network {}", canonical(v)));
    }
    // Keys with a digest only when set (so chambers accepted before they
    // existed are not held for them): `[approvals]` decides what the
    // agent's commands may do.
    for key in LATER_KEYS {
        if let Some(v) = table.get(*key) {
            let digest = ring::digest::digest(&ring::digest::SHA256, format!("{key}\n{}", canonical(v)).as_bytes());
            d.insert(key.to_string(), hex::encode(&digest.as_ref()[..16]));
        }
    }
    // So do `stall_after` and `loop_after`, which bound a session as its
    // time limit does: part of `max_session_duration`'s digest when set.
    for key in ["stall_after", "loop_after"] {
        if let (Some(v), Some(digest)) = (table.get(key), d.get_mut("max_session_duration")) {
            refold(digest, &format!("{key} {}", canonical(v)));
        }
    }
    d
}

/// Folds into the digest of each key of `reach` where its paths lead, for
/// those that lead elsewhere than they say (a link on the way): a link the
/// agent plants or moves is then a change the operator must accept, like
/// an edit of the file. Paths without a link leave the digest as it was.
pub fn fold_resolved(digests: &mut BTreeMap<String, String>, reach: &[super::config::Reach]) {
    for (key, digest) in digests.iter_mut() {
        let led: Vec<String> = reach
            .iter()
            .filter(|r| &r.key == key && r.resolved != r.named)
            .map(|r| format!("{}\0{}", r.named.display(), r.resolved.display()))
            .collect();
        if !led.is_empty() {
            refold(digest, &led.join("\n"));
        }
    }
}

/// `digest` with `more` folded in.
fn refold(digest: &mut String, more: &str) {
    let d = ring::digest::digest(&ring::digest::SHA256, format!("{digest}\n{more}").as_bytes());
    *digest = hex::encode(&d.as_ref()[..16]);
}

/// Folds into the digest of `provider` the upstream the agent's CLI names
/// in its own config file (a file the agent may write): sending the key
/// elsewhere is then a change the operator must accept. None leaves the
/// digest as it was.
pub fn fold_upstream(digests: &mut BTreeMap<String, String>, upstream: Option<&str>) {
    if let (Some(url), Some(digest)) = (upstream, digests.get_mut("provider")) {
        refold(digest, &format!("upstream {url}"));
    }
}

/// A value as text that depends on the value only, not on its layout in
/// the file: tables with their keys sorted, strings quoted as JSON.
fn canonical(v: &toml::Value) -> String {
    match v {
        toml::Value::Table(t) => {
            let mut keys: Vec<&String> = t.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys.iter().map(|k| format!("{}:{}", quoted(k), canonical(&t[*k]))).collect();
            format!("{{{}}}", parts.join(","))
        }
        toml::Value::Array(a) => format!("[{}]", a.iter().map(canonical).collect::<Vec<_>>().join(",")),
        toml::Value::String(s) => quoted(s),
        other => other.to_string(),
    }
}

fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// The keys whose digests differ between what was `accepted` and `now`.
pub fn changed(accepted: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<String> {
    KEYS.iter().chain(LATER_KEYS).filter(|k| accepted.get(**k) != now.get(**k)).map(|k| k.to_string()).collect()
}

/// The digests as the store keeps them.
pub fn to_json(d: &BTreeMap<String, String>) -> String {
    serde_json::to_string(d).unwrap_or_default()
}

/// The digests the store kept (an unreadable value accepts nothing).
pub fn from_json(s: &str) -> BTreeMap<String, String> {
    serde_json::from_str(s).unwrap_or_default()
}

/// The hold's line: which keys changed, and what to do.
pub fn held(chamber: &str, keys: &[String]) -> String {
    let keys = keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
    format!(
        "cryo.toml changed {keys}, which the operator has not accepted (they decide how the agent is confined, \
         what runs for it and what it may reach): run `cryoctl chamber trust {chamber}` to accept them, or undo \
         the change"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(s: &str) -> toml::Table {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn only_the_operators_keys_count_and_layout_does_not() {
        let base = digests(&table("agent = \"claude\"\nsandbox = \"bwrap\"\ntimezone = \"UTC\"\n"));
        // Another layout of the same values, and another zone: nothing to accept.
        let same = digests(&table("timezone = \"Europe/Berlin\"\nsandbox = 'bwrap'\n  agent   =   \"claude\"\n"));
        assert!(changed(&base, &same).is_empty());
        let off = digests(&table("agent = \"claude\"\nsandbox = \"off\"\n"));
        assert_eq!(changed(&base, &off), ["sandbox"]);
        let hook = digests(&table(
            "agent = \"claude\"\nsandbox = \"bwrap\"\nprecheck = \"true\"\n[provider]\nenv = { K = { file = \"/x\" } }\n",
        ));
        assert_eq!(changed(&base, &hook), ["precheck", "provider"]);
        // `network` is part of `sandbox`: setting or dropping it is a change
        // the operator accepts; a file without it digests as it always did.
        let netted = digests(&table("agent = \"claude\"\nsandbox = \"bwrap\"\nnetwork = \"gateway\"\n"));
        assert_eq!(changed(&base, &netted), ["sandbox"]);
        assert_eq!(changed(&netted, &base), ["sandbox"]);
        // A removed limit is a change too.
        let limited = digests(&table("agent = \"claude\"\nsandbox = \"bwrap\"\nmax_session_duration = 60\n"));
        assert_eq!(changed(&limited, &base), ["max_session_duration"]);
        // So is a loosened watch: it bounds a session as its time does.
        for watch in ["loop_after = 0\n", "stall_after = \"9h\"\n"] {
            let loose = digests(&table(&format!("agent = \"claude\"\nsandbox = \"bwrap\"\n{watch}")));
            assert_eq!(changed(&base, &loose), ["max_session_duration"], "{watch}");
        }
        // Nothing accepted yet: every key is to accept.
        assert_eq!(changed(&BTreeMap::new(), &base).len(), KEYS.len());
        assert_eq!(from_json(&to_json(&base)), base);
    }

    #[test]
    fn a_secret_value_is_kept_as_a_digest_only() {
        let d = digests(&table("[provider]\nenv = { ANTHROPIC_API_KEY = \"sk-ant-SECRET\" }\n"));
        assert!(!to_json(&d).contains("SECRET"));
    }

    /// `[approvals]` has a digest only when set: a chamber accepted before
    /// it existed is not held for it, and setting, changing or removing it
    /// is a change the operator accepts.
    #[test]
    fn approvals_count_once_set() {
        let none = digests(&table("agent = \"a\"\n"));
        let set = digests(&table("agent = \"a\"\n[approvals]\ndefault = \"allow\"\n"));
        let other = digests(&table("agent = \"a\"\n[approvals]\ndefault = \"ask\"\n"));
        assert!(!none.contains_key("approvals"));
        assert_eq!(changed(&none, &none), Vec::<String>::new());
        assert_eq!(changed(&none, &set), ["approvals"]);
        assert_eq!(changed(&set, &other), ["approvals"]);
        assert_eq!(changed(&set, &none), ["approvals"], "removing the policy loosens it");
        assert_eq!(set["agent"], none["agent"], "the agent's own digest is its own");
    }
}
