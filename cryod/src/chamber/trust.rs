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
use std::path::Path;

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

/// The prefix of the entries that keep, beside each key's digest, its value
/// as the operator reads it (secrets left out): what `trust --diff` shows
/// as before and after. Only the digests decide.
const SHOWN: &str = "shown.";

/// Each of [`KEYS`] and the digest of its value in `table` (absent keys
/// have a digest too: removing a limit is a change), with each value as
/// shown (see [`changes`]).
pub fn digests(table: &toml::Table) -> BTreeMap<String, String> {
    let mut d = digests_only(table);
    let keys: Vec<String> = d.keys().cloned().collect();
    for key in keys {
        let mut text = table.get(&key).map(|v| shown(&key, v)).unwrap_or_else(|| "(not set)".into());
        let folded: &[&str] = match key.as_str() {
            "sandbox" => &["network"],
            "max_session_duration" => &["stall_after", "loop_after"],
            _ => &[],
        };
        for extra in folded {
            if let Some(v) = table.get(*extra) {
                text.push_str(&format!(", {extra} = {}", shown(extra, v)));
            }
        }
        d.insert(format!("{SHOWN}{key}"), text);
    }
    d
}

/// A value as the operator reads it in a diff: its canonical text, with
/// every inline string of an environment (`env`) or of a key named like a
/// secret left out, and at most 300 characters.
fn shown(key: &str, v: &toml::Value) -> String {
    let mut text = String::new();
    write_canonical(&mut text, v, Some((key, false)));
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Whether a key's strings are secrets by its name.
fn secretish(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["key", "token", "secret", "password", "passwd", "credential"].iter().any(|w| k.contains(w))
}

/// Writes `v`'s canonical text (see [`canonical`]) to `out`. With
/// `redact`, the key naming `v` and whether it is an entry of an `env`
/// table (whose inline strings are keys; a `{ file = … }` entry names a
/// path), each string that is a secret is written as its length only.
fn write_canonical(out: &mut String, v: &toml::Value, redact: Option<(&str, bool)>) {
    match v {
        toml::Value::String(s) => match redact {
            Some((key, in_env)) if in_env || secretish(key) => {
                quote_into(out, &format!("(a secret of {} characters)", s.chars().count()))
            }
            _ => quote_into(out, s),
        },
        toml::Value::Table(t) => {
            let mut keys: Vec<&String> = t.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                quote_into(out, k);
                out.push(':');
                write_canonical(out, &t[k], redact.map(|(key, _)| (k.as_str(), key == "env")));
            }
            out.push('}');
        }
        toml::Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(out, x, redact);
            }
            out.push(']');
        }
        other => {
            use std::fmt::Write;
            let _ = write!(out, "{other}");
        }
    }
}

/// `s` quoted as a JSON string, written to `out`.
fn quote_into(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).expect("a string is always JSON"));
}

fn digests_only(table: &toml::Table) -> BTreeMap<String, String> {
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

/// Folds into the digest of each key the paths of `led` that lead
/// elsewhere than they say (a link on the way), and where they lead; each
/// is its key, the path named, and where it led when the file was read. A
/// link the agent plants or moves is then a change the operator must
/// accept, like an edit of the file. Paths without a link leave the
/// digest as it was.
pub fn fold_resolved<'a>(
    digests: &mut BTreeMap<String, String>,
    led: impl IntoIterator<Item = (&'a str, &'a Path, &'a Path)>,
) {
    let linked: Vec<(&str, &Path, &Path)> = led.into_iter().filter(|(_, named, resolved)| resolved != named).collect();
    let mut shown = Vec::new();
    for (key, digest) in digests.iter_mut().filter(|(k, _)| !k.starts_with(SHOWN)) {
        let led: Vec<&(&str, &Path, &Path)> = linked.iter().filter(|(k, _, _)| k == key).collect();
        if !led.is_empty() {
            let text: Vec<String> =
                led.iter().map(|(_, named, resolved)| format!("{}\0{}", named.display(), resolved.display())).collect();
            refold(digest, &text.join("\n"));
            for (_, named, resolved) in led {
                shown.push((key.clone(), format!(" ({} leads to {})", named.display(), resolved.display())));
            }
        }
    }
    for (key, more) in shown {
        refold_shown(digests, &key, &more);
    }
}

/// `digest` with `more` folded in.
fn refold_shown(digests: &mut BTreeMap<String, String>, key: &str, more: &str) {
    if let Some(text) = digests.get_mut(&format!("{SHOWN}{key}")) {
        text.push_str(more);
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
        refold_shown(digests, "provider", &format!(" (its CLI's own file sends it to {url})"));
    }
}

/// A value as text that depends on the value only, not on its layout in
/// the file: tables with their keys sorted, strings quoted as JSON.
fn canonical(v: &toml::Value) -> String {
    let mut out = String::new();
    write_canonical(&mut out, v, None);
    out
}

/// The keys whose digests differ between what was `accepted` and `now`.
pub fn changed(accepted: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<String> {
    KEYS.iter().chain(LATER_KEYS).filter(|k| accepted.get(**k) != now.get(**k)).map(|k| k.to_string()).collect()
}

/// A key the operator has not accepted: its value when last accepted
/// (`None`: accepted before values were kept, or never) and now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    pub key: String,
    pub before: Option<String>,
    pub after: String,
}

/// What changed between what was `accepted` and `now`, key by key.
pub fn changes(accepted: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<Change> {
    changed(accepted, now)
        .into_iter()
        .map(|key| {
            let shown = format!("{SHOWN}{key}");
            Change {
                before: accepted.get(&shown).cloned(),
                after: now.get(&shown).cloned().unwrap_or_else(|| "(not set)".into()),
                key,
            }
        })
        .collect()
}

/// The digests as the store keeps them.
pub fn to_json(d: &BTreeMap<String, String>) -> String {
    serde_json::to_string(d).unwrap_or_default()
}

/// The digests the store kept (an unreadable value accepts nothing).
pub fn from_json(s: &str) -> BTreeMap<String, String> {
    serde_json::from_str(s).unwrap_or_default()
}

/// Accepted digests as a resting chamber holds them: one byte string, a
/// quarter of their JSON. A known key is one byte, a digest its 16 bytes
/// and an unset value one byte; anything else is kept as written, so any
/// map reads back exactly ([`Packed::digests`]). At 10,000 chambers the
/// JSON held was 908 bytes a chamber, 12% of a resting chamber's heap;
/// packed, a scaffolded chamber's are 265, under a third.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed(Box<[u8]>);

/// A packed key or value written out: its length, then its bytes.
const OTHER: u8 = 0xff;
/// A value that is a digest (32 lowercase hex digits), as 16 bytes.
const DIGEST: u8 = 0;
/// A value shown as unset.
const UNSET: u8 = 1;
/// The text of a value shown as unset.
const UNSET_TEXT: &str = "(not set)";
/// A shown key's byte: its key's, plus this.
const SHOWN_KEY: u8 = 0x40;
const _: () = assert!(ALL_KEYS.len() < SHOWN_KEY as usize, "a key's byte would be a shown key's");

impl Packed {
    pub fn of(d: &BTreeMap<String, String>) -> Packed {
        let mut out = Vec::with_capacity(d.len() * 18);
        for (k, v) in d {
            match known(k) {
                Some(b) => out.push(b),
                None => other(&mut out, k),
            }
            if let Some(bytes) = hex16(v) {
                out.push(DIGEST);
                out.extend_from_slice(&bytes);
            } else if v == UNSET_TEXT {
                out.push(UNSET);
            } else {
                other(&mut out, v);
            }
        }
        Packed(out.into_boxed_slice())
    }

    /// The map it was packed from.
    pub fn digests(&self) -> BTreeMap<String, String> {
        let mut d = BTreeMap::new();
        let mut b = &self.0[..];
        while let Some((&tag, rest)) = b.split_first() {
            b = rest;
            let key = match tag {
                OTHER => text(&mut b),
                t if t >= SHOWN_KEY => ALL_KEYS.get(usize::from(t - SHOWN_KEY)).map(|k| format!("{SHOWN}{k}")),
                t => ALL_KEYS.get(usize::from(t)).map(|k| k.to_string()),
            };
            let Some((&tag, rest)) = b.split_first() else { break };
            b = rest;
            let value = match tag {
                DIGEST if b.len() >= 16 => {
                    let (digest, rest) = b.split_at(16);
                    b = rest;
                    Some(digest.iter().map(|x| format!("{x:02x}")).collect())
                }
                UNSET => Some(UNSET_TEXT.to_string()),
                OTHER => text(&mut b),
                _ => None,
            };
            // Only what this module packed is read: a short one ends here.
            let (Some(key), Some(value)) = (key, value) else { break };
            d.insert(key, value);
        }
        d
    }
}

/// Every key with a digest, in one order: a packed key is its place here.
const ALL_KEYS: [&str; KEYS.len() + LATER_KEYS.len()] = {
    let mut all = [""; KEYS.len() + LATER_KEYS.len()];
    let mut i = 0;
    while i < KEYS.len() {
        all[i] = KEYS[i];
        i += 1;
    }
    while i < all.len() {
        all[i] = LATER_KEYS[i - KEYS.len()];
        i += 1;
    }
    all
};

/// A key's byte, if it is one of [`ALL_KEYS`] or shown.
fn known(k: &str) -> Option<u8> {
    let (base, add) = match k.strip_prefix(SHOWN) {
        Some(base) => (base, SHOWN_KEY),
        None => (k, 0),
    };
    ALL_KEYS.iter().position(|a| *a == base).map(|i| i as u8 + add)
}

/// Writes `s` whole: [`OTHER`], its length (LEB128), its bytes.
fn other(out: &mut Vec<u8>, s: &str) {
    out.push(OTHER);
    let mut n = s.len();
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out.extend_from_slice(s.as_bytes());
}

/// Reads what [`other`] wrote after its tag.
fn text(b: &mut &[u8]) -> Option<String> {
    let (mut n, mut shift) = (0usize, 0u32);
    loop {
        let (&x, rest) = b.split_first()?;
        *b = rest;
        n |= usize::from(x & 0x7f).checked_shl(shift)?;
        if x & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    if n > b.len() {
        return None;
    }
    let (s, rest) = b.split_at(n);
    *b = rest;
    String::from_utf8(s.to_vec()).ok()
}

/// A digest's 16 bytes, if `v` is 32 lowercase hex digits.
fn hex16(v: &str) -> Option<[u8; 16]> {
    let v = v.as_bytes();
    if v.len() != 32 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 16];
    for (i, pair) in v.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
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

    /// A packed map reads back as it was, whatever it holds; the kept
    /// digests of a scaffolded chamber take a third of their JSON.
    #[test]
    fn packed_digests_read_back_as_they_were() {
        let scaffold = digests(&table("agent = \"sh agent.sh\"\nsandbox = \"off\"\nmax_session_duration = 3600\n"));
        let golden = from_json(GOLDEN);
        let odd: BTreeMap<String, String> = [
            ("agent", "072D94D458281F5321DB219786064EE8"),
            ("shown.agent", ""),
            ("a future key", "(not set)"),
            ("shown.git", &"é".repeat(200)),
            ("", "0123456789abcdef0123456789abcde"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for d in [scaffold.clone(), golden, odd, BTreeMap::new()] {
            assert_eq!(Packed::of(&d).digests(), d);
        }
        let packed = Packed::of(&scaffold).0.len();
        assert!(packed * 3 < to_json(&scaffold).len(), "{packed} bytes packed");
        // Cut short anywhere, it reads as much as it holds whole, never more.
        let whole = Packed::of(&scaffold);
        for n in 0..whole.0.len() {
            let part = Packed(whole.0[..n].into()).digests();
            assert!(part.iter().all(|(k, v)| scaffold.get(k) == Some(v)), "cut at {n}");
        }
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

    /// What `trust --diff` shows: each changed key's value before and
    /// after, with what it folds in, and never a secret.
    #[test]
    fn changes_show_each_value_before_and_after_without_secrets() {
        let before = digests(&table("agent = \"a\"\nmax_session_duration = 3600\n"));
        let after = digests(&table(
            "agent = \"a\"\nmax_session_duration = 3600\nstall_after = \"2h\"\n[provider]\n\
             env = { ANTHROPIC_API_KEY = \"sk-ant-SECRET\", OTHER = { file = \"/k\" } }\n",
        ));
        let c = changes(&before, &after);
        assert_eq!(c.iter().map(|c| c.key.as_str()).collect::<Vec<_>>(), ["provider", "max_session_duration"]);
        assert_eq!(c[1].before.as_deref(), Some("3600"));
        assert_eq!(c[1].after, "3600, stall_after = \"2h\"");
        assert_eq!(c[0].before.as_deref(), Some("(not set)"));
        assert!(c[0].after.contains("(a secret of 13 characters)") && c[0].after.contains("\"/k\""), "{:?}", c[0]);
        assert!(!to_json(&after).contains("SECRET"));
        // Digests kept before values were: the old value is not known.
        let old: BTreeMap<String, String> = before.into_iter().filter(|(k, _)| !k.starts_with(SHOWN)).collect();
        assert_eq!(changes(&old, &after)[1].before, None);
        // Only the digests decide.
        assert!(changes(&after, &after).is_empty());
    }

    /// The digests and the texts shown are those every earlier cryod kept
    /// (a digest that moved would hold every chamber at the next start).
    #[test]
    fn digests_are_those_kept_before() {
        let d = digests(&table(
            "agent = [\"claude\", \"-p\", \"q\\\"t\\u00e9\"]\nsandbox = \"bwrap\"\nnetwork = \"gateway\"\n\
             writable = [\"/a\", \"/b\"]\nmax_session_duration = 3600\nloop_after = 0\nstall_after = \"2h\"\n\
             memory_max = 1.5\ncpu_weight = true\n[provider]\nz = 1\nenv = { B_TOKEN = \"x\", A = { file = \"/k\" }, C = [\"s\"] }\n\
             password = \"p\"\nlist = [{ token = \"t\", n = 2 }]\n[[on_end]]\nchamber = \"b\"\n\
             [approvals]\ndefault = \"ask\"\n[budget]\ndaily_usd = 10.25\nwhen = 1979-05-27T07:32:00Z\n",
        ));
        assert_eq!(to_json(&d), GOLDEN);
    }

    const GOLDEN: &str = r#"{"agent":"fd49b4fab4a04d7a97a2e04c593505c0","approvals":"878ca3f4139798f3d6dfd59d8f579231","budget":"f4d80018d6a203abb84315ec6c882596","cpu_weight":"4e7117d8971eebf81cf741dcdb474467","max_session_duration":"de9af88686a8fdf89f45656048e076d5","memory_max":"386a2672e58e08ac97a207353dda1094","on_end":"60dedd1cf5abc40b88218f7ff603849f","precheck":"16acb08a31f3e67775137c2c3d100d96","provider":"11cb51e9f05b6bd4906981ce32f254ee","readable":"ff0f960d815692fcb7188d0f53a8a322","sandbox":"f547680472c57c2c31aff6137f4c0727","shown.agent":"[\"claude\",\"-p\",\"q\\\"té\"]","shown.approvals":"{\"default\":\"ask\"}","shown.budget":"{\"daily_usd\":10.25,\"when\":1979-05-27T07:32:00Z}","shown.cpu_weight":"true","shown.max_session_duration":"3600, stall_after = \"2h\", loop_after = 0","shown.memory_max":"1.5","shown.on_end":"[{\"chamber\":\"b\"}]","shown.precheck":"(not set)","shown.provider":"{\"env\":{\"A\":{\"file\":\"/k\"},\"B_TOKEN\":\"(a secret of 1 characters)\",\"C\":[\"(a secret of 1 characters)\"]},\"list\":[{\"n\":2,\"token\":\"(a secret of 1 characters)\"}],\"password\":\"(a secret of 1 characters)\",\"z\":1}","shown.readable":"(not set)","shown.sandbox":"\"bwrap\", network = \"gateway\"","shown.sync":"(not set)","shown.writable":"[\"/a\",\"/b\"]","sync":"cfc59757e90ca11bb23d203fdb6464a0","writable":"5748c01cd32a4a0a72037a29ad3632e7"}"#;

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
