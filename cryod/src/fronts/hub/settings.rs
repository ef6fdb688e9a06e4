//! A chamber's settings from the hub: the documented top-level keys of
//! `cryo.toml`, read and rewritten with toml_edit so the file keeps its
//! comments, order and every key the page does not touch. The new text is
//! checked by the same parser cryod loads it with before it replaces the
//! file; a bad value is one error line and the file is left as it was. The
//! chamber's watcher sees the change, so the next session uses it.
//! `[provider].env` values are never sent to the page, only their names.

use std::path::{Path, PathBuf};

use axum::extract::{Path as UrlPath, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use toml_edit::{DocumentMut, Item};

use super::{ApiResult, Hub, view};
use crate::error::Error;

/// The keys the page may set, with their TOML type.
pub const KEYS: &[(&str, Kind)] = &[
    ("agent", Kind::Text),
    ("timezone", Kind::Text),
    ("max_session_duration", Kind::Integer),
    ("stall_after", Kind::Text),
    ("loop_after", Kind::Integer),
    ("keep_exchanges", Kind::Bool),
    ("max_attempts", Kind::Integer),
    ("mcp", Kind::Bool),
    ("session", Kind::Text),
    ("resume_max_age", Kind::Text),
    ("resume_max_sessions", Kind::Integer),
    ("resume_max_tokens", Kind::Integer),
    ("precheck", Kind::Text),
    ("precheck_timeout", Kind::Integer),
    ("expect_activity_within", Kind::Text),
    ("sandbox", Kind::Text),
    ("memory_max", Kind::Text),
    ("cpu_weight", Kind::Integer),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Integer,
    Bool,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Integer => "integer",
            Kind::Bool => "bool",
        }
    }
}

/// Why the page's settings cannot be read from, or written into, the file.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The file is not TOML (the parser's first line).
    #[error("{}", one_line(.0))]
    Toml(#[from] toml_edit::TomlError),
    /// A key the page may not set.
    #[error("`{0}` is not a setting the hub changes ({known})", known = KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", "))]
    NotASetting(String),
    /// A value of the wrong type for its key.
    #[error("`{key}` takes {} {}, not {value}", article(*.kind), .kind.name())]
    WrongType { key: String, kind: Kind, value: Value },
}

/// The settable keys as the file has them (`null`: not set, the default
/// applies), and the provider's name and env names.
pub fn read(text: &str) -> Result<Value, SettingsError> {
    let doc: DocumentMut = text.parse()?;
    let mut keys = Vec::new();
    for (key, kind) in KEYS {
        let value = match doc.get(key).and_then(Item::as_value) {
            Some(v) if v.is_str() => json!(v.as_str()),
            Some(v) if v.is_integer() => json!(v.as_integer()),
            Some(v) if v.is_bool() => json!(v.as_bool()),
            _ => Value::Null,
        };
        let accept = crate::chamber::trust::KEYS.contains(key);
        keys.push(
            json!({ "key": key, "kind": kind.name(), "value": value, "hint": hint(key), "needs_acceptance": accept }),
        );
    }
    let provider = doc.get("provider").and_then(Item::as_table_like);
    let name = provider.and_then(|p| p.get("name")).and_then(Item::as_str);
    let env: Vec<&str> = provider
        .and_then(|p| p.get("env"))
        .and_then(Item::as_table_like)
        .map(|t| t.iter().map(|(k, _)| k).collect())
        .unwrap_or_default();
    Ok(json!({ "keys": keys, "provider": { "name": name, "env": env } }))
}

/// `text` with `changes` applied (a `null` value removes the key: the
/// default applies); everything else stays as written.
pub fn rewrite(text: &str, changes: &Map<String, Value>) -> Result<String, SettingsError> {
    let mut doc: DocumentMut = text.parse()?;
    for (key, value) in changes {
        let Some((_, kind)) = KEYS.iter().find(|(k, _)| k == key) else {
            return Err(SettingsError::NotASetting(key.clone()));
        };
        let new = match (kind, value) {
            (_, Value::Null) => {
                remove_keeping_comments(&mut doc, key);
                continue;
            }
            (Kind::Text, Value::String(s)) => toml_edit::value(s.as_str()),
            (Kind::Integer, Value::Number(n)) if n.as_i64().is_some_and(|n| n >= 0) => {
                toml_edit::value(n.as_i64().unwrap_or_default())
            }
            (Kind::Bool, Value::Bool(b)) => toml_edit::value(*b),
            (kind, v) => return Err(SettingsError::WrongType { key: key.clone(), kind: *kind, value: v.clone() }),
        };
        match doc.get_mut(key) {
            // Keep the line's comment and spacing: change only the value.
            Some(Item::Value(old)) => {
                let decor = old.decor().clone();
                let mut v = new.into_value().expect("a value");
                *v.decor_mut() = decor;
                *old = v;
            }
            _ => {
                doc.insert(key, new);
            }
        }
    }
    Ok(doc.to_string())
}

/// Removes a top-level `key`, keeping the comments around it: those above
/// it (and one at its line's end) move onto what follows it, the next key,
/// the next table, or the end of the file.
fn remove_keeping_comments(doc: &mut DocumentMut, key: &str) {
    let order: Vec<String> = doc.as_table().iter().map(|(k, _)| k.to_string()).collect();
    let Some((gone, item)) = doc.as_table_mut().remove_entry(key) else { return };
    let mut kept = decor_text(gone.leaf_decor().prefix());
    if let Some(comment) = item.as_value().and_then(|v| v.decor().suffix()).map(|s| decor_text(Some(s)))
        && let Some(at) = comment.find('#')
    {
        kept.push_str(comment[at..].trim_end());
        kept.push('\n');
    }
    if !kept.contains('#') {
        return;
    }
    let table = doc.as_table_mut();
    let next = order.iter().skip_while(|k| *k != key).nth(1).filter(|n| table.contains_key(n)).cloned();
    match next {
        Some(n) if table.get(&n).is_some_and(|i| i.is_table()) => {
            let t = table.get_mut(&n).and_then(Item::as_table_mut).expect("a table");
            let after = decor_text(t.decor().prefix());
            t.decor_mut().set_prefix(kept + &after);
        }
        Some(n) => {
            let mut k = table.key_mut(&n).expect("the next key");
            let after = decor_text(k.leaf_decor().prefix());
            k.leaf_decor_mut().set_prefix(kept + &after);
        }
        None => {
            let after = doc.trailing().as_str().unwrap_or_default().to_string();
            doc.set_trailing(kept + &after);
        }
    }
}

/// What a decor holds, as text (a parsed one is spans of the source).
fn decor_text(raw: Option<&toml_edit::RawString>) -> String {
    raw.and_then(|r| r.as_str()).unwrap_or_default().to_string()
}

/// What a key takes, in its unit, as the page shows beside it.
fn hint(key: &str) -> &'static str {
    match key {
        "agent" => "claude, codex, opencode, or a command",
        "timezone" => "an IANA zone, such as Europe/Berlin",
        "max_session_duration" => "seconds",
        "stall_after" => "a duration, such as 20m",
        "loop_after" => "tool calls in a row; 0 for never",
        "max_attempts" => "0 to 100",
        "session" => "fresh or resume",
        "resume_max_age" => "a duration, such as 7d",
        "precheck" => "a command; exit 0 to wake",
        "precheck_timeout" => "seconds",
        "expect_activity_within" => "a duration, such as 2d",
        "sandbox" => "auto, landlock, bwrap or off",
        "memory_max" => "bytes, such as 2G",
        "cpu_weight" => "1 to 10000",
        "resume_max_sessions" | "resume_max_tokens" => "a whole number",
        _ => "",
    }
}

fn article(kind: Kind) -> &'static str {
    if kind == Kind::Integer { "an" } else { "a" }
}

fn one_line(e: &toml_edit::TomlError) -> String {
    e.to_string().lines().find(|l| !l.trim().is_empty()).unwrap_or("not TOML").trim().to_string()
}

async fn config_path(hub: &Hub, name: &str) -> Result<(PathBuf, PathBuf), Error> {
    let v = view(hub, name).await.map_err(|e| e.0)?;
    let dir = PathBuf::from(&v.record.path);
    Ok((dir.join("cryo.toml"), dir))
}

/// The chamber's `cryo.toml`, read off the runtime's workers.
async fn read_text(dir: &Path) -> Result<String, Error> {
    let dir = dir.to_path_buf();
    let text = crate::chamber::blocking(move || crate::chamber::config::read_text(&dir)).await?;
    text.map_err(|e| Error::Precondition(e.to_string()))
}

/// `GET /api/chambers/NAME/settings`.
pub(super) async fn get(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let (path, dir) = config_path(&hub, &name).await?;
    let text = read_text(&dir).await?;
    let v = read(&text).map_err(|e| Error::Precondition(format!("{}: {e}", path.display())))?;
    Ok(axum::Json(v))
}

/// `PUT /api/chambers/NAME/settings` with `{KEY: VALUE, ...}`: rewrites
/// `cryo.toml`, answering the settings as they now are.
/// `PUT /api/chambers/NAME/settings`: the keys changed. A change cryod's
/// parser refuses is answered 400 with `error` (one line) and `fields`:
/// each changed key that is refused on its own, with its reason (no file
/// path: the page shows it beside its field), so every bad field is
/// marked at once.
pub(super) async fn put(
    State(hub): State<Hub>,
    UrlPath(name): UrlPath<String>,
    axum::Json(changes): axum::Json<Map<String, Value>>,
) -> Result<axum::Json<Value>, Response> {
    let refused = |e: Error| super::api::ApiError(e).into_response();
    // Only the keys the page may set, named before anything is read.
    if let Some(other) = changes.keys().find(|k| !KEYS.iter().any(|(key, _)| key == k)) {
        return Err(refused(Error::Invalid(SettingsError::NotASetting(other.clone()).to_string())));
    }
    let (path, dir) = config_path(&hub, &name).await.map_err(refused)?;
    let _one_writer = hub.settings.lock().await;
    let text = read_text(&dir).await.map_err(refused)?;
    let tz = hub.daemon.system_zone();
    // What cryod would make of a text: refused here rather than faulting the chamber.
    let check = |changes: &Map<String, Value>| -> Result<(String, crate::chamber::config::Loaded), String> {
        let new = rewrite(&text, changes).map_err(|e| e.to_string())?;
        let loaded = crate::chamber::config::parse(&path, &new, &dir, tz).map_err(|e| without_path(&e.to_string()))?;
        Ok((new, loaded))
    };
    let (new, mut loaded) = match check(&changes) {
        Ok(ok) => ok,
        Err(why) => {
            // Each key alone, so that every bad one is named.
            let fields: Map<String, Value> = changes
                .iter()
                .filter_map(|(k, v)| {
                    let one = Map::from_iter([(k.clone(), v.clone())]);
                    check(&one).err().map(|e| (k.clone(), Value::String(e)))
                })
                .collect();
            let error = match fields.len() {
                0 => format!("these changes together are refused: {why}"),
                1 => why,
                n => format!("{n} settings are refused: each says why beside it"),
            };
            let body = json!({ "error": error, "fields": fields });
            return Err((axum::http::StatusCode::BAD_REQUEST, axum::Json(body)).into_response());
        }
    };
    loaded.pin_upstream(&dir);
    // The operator is the one acting: what the file will say of the keys
    // they changed is accepted first, so the chamber is never held for it
    // (and refused while other keys have changes not accepted).
    let chamber = crate::daemon::ChamberRef::Name(name.clone());
    let touched = changes.keys().cloned().collect();
    hub.daemon
        .trust(&chamber, Some(crate::supervisor::Edit { digests: loaded.trust, touched }), false)
        .await
        .map_err(refused)?;
    let (root, bytes) = (dir.clone(), new.clone().into_bytes());
    let write = move || {
        let d = crate::chamber::Dir::open(&root)?;
        d.write(Path::new(crate::chamber::config::FILE), &bytes, crate::chamber::NewFile::DURABLE)
    };
    if let Err(e) =
        crate::chamber::blocking(write).await.and_then(|r| r.map_err(|e| Error::Internal(format!("cannot write {e}"))))
    {
        // Not accepted again as it stays (that would accept what the agent
        // may have written meanwhile): if the keys changed differ from it,
        // the chamber is held until the operator looks.
        return Err(refused(e));
    }
    read(&new).map(axum::Json).map_err(|e| refused(Error::Internal(e.to_string())))
}

/// A parser's line without the file it names (`/PATH/cryo.toml:12: `):
/// the page says which field, and a server path is not the reader's.
fn without_path(line: &str) -> String {
    match line.split_once("cryo.toml:") {
        Some((_, rest)) => {
            let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit() || c == ':');
            rest.trim_start().to_string()
        }
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# my chamber\nagent = \"claude\"  # the model I pay for\n\n# Longest session\nmax_session_duration = 3600\n# timezone = \"UTC\"\n\n[provider]\nname = \"anthropic\"\nenv = { ANTHROPIC_API_KEY = \"sk-secret\" }\n";

    fn changes(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_change_keeps_every_comment_and_the_order() {
        let new = rewrite(FILE, &changes(json!({ "agent": "codex", "timezone": "Europe/Berlin" }))).unwrap();
        assert!(
            new.starts_with("# my chamber\nagent = \"codex\"  # the model I pay for\n\n# Longest session\n"),
            "{new}"
        );
        // A new key goes after the last one set, before the comments that lead into the next table.
        assert!(
            new.contains("max_session_duration = 3600\ntimezone = \"Europe/Berlin\"\n# timezone = \"UTC\"\n"),
            "{new}"
        );
        assert!(
            new.contains("[provider]\nname = \"anthropic\"\nenv = { ANTHROPIC_API_KEY = \"sk-secret\" }\n"),
            "{new}"
        );
        // The new key sits with the top-level keys, before [provider].
        assert!(new.find("timezone = \"Europe").unwrap() < new.find("[provider]").unwrap(), "{new}");
        let removed = rewrite(&new, &changes(json!({ "timezone": null }))).unwrap();
        assert!(!removed.contains("timezone = \"Europe"), "{removed}");
    }

    /// The comments above a removed key, and the one at its line's end,
    /// stay: on the next key, the next table, or at the end of the file.
    #[test]
    fn a_removed_keys_comments_stay() {
        let removed = rewrite(FILE, &changes(json!({ "max_session_duration": null }))).unwrap();
        assert_eq!(removed, FILE.replace("max_session_duration = 3600\n", ""), "only the key's own line goes");
        let removed = rewrite(FILE, &changes(json!({ "agent": null }))).unwrap();
        assert!(
            removed.starts_with("# my chamber\n# the model I pay for\n\n# Longest session\nmax_session_duration"),
            "{removed}"
        );
        let last = "agent = \"x\"\n# about the limit\nmax_attempts = 3 # three\n# the end\n";
        let removed = rewrite(last, &changes(json!({ "max_attempts": null }))).unwrap();
        assert_eq!(removed, "agent = \"x\"\n# about the limit\n# three\n# the end\n");
        let before_table = "# lead\nagent = \"x\"\n\n[provider]\nname = \"a\"\n";
        let removed = rewrite(before_table, &changes(json!({ "agent": null }))).unwrap();
        assert_eq!(removed, "# lead\n\n[provider]\nname = \"a\"\n");
    }

    #[test]
    fn secrets_stay_in_the_file() {
        let v = read(FILE).unwrap();
        assert_eq!(v["provider"]["env"], json!(["ANTHROPIC_API_KEY"]));
        assert!(!v.to_string().contains("sk-secret"));
        assert_eq!(
            v["keys"][0],
            json!({ "key": "agent", "kind": "text", "value": "claude", "hint": "claude, codex, opencode, or a command", "needs_acceptance": true })
        );
        assert_eq!(v["keys"][1]["needs_acceptance"], false, "timezone");
    }

    #[test]
    fn wrong_keys_and_types_are_one_line() {
        let e = rewrite(FILE, &changes(json!({ "provider": "x" }))).unwrap_err();
        assert!(matches!(e, SettingsError::NotASetting(_)), "{e}");
        assert!(e.to_string().starts_with("`provider` is not a setting the hub changes"), "{e}");
        let e = rewrite(FILE, &changes(json!({ "max_session_duration": "long" }))).unwrap_err();
        assert_eq!(e.to_string(), "`max_session_duration` takes an integer, not \"long\"");
        assert!(rewrite("agent = ", &Map::new()).unwrap_err().to_string().lines().count() == 1);
    }

    #[test]
    fn the_sandbox_and_the_limits_are_settings() {
        let new = rewrite(FILE, &changes(json!({ "sandbox": "bwrap", "memory_max": "2G", "cpu_weight": 50 }))).unwrap();
        assert!(new.contains("sandbox = \"bwrap\"\n") && new.contains("memory_max = \"2G\"\n"), "{new}");
        assert!(new.contains("cpu_weight = 50\n"), "{new}");
        let e = rewrite(FILE, &changes(json!({ "cpu_weight": "high" }))).unwrap_err();
        assert_eq!(e.to_string(), "`cpu_weight` takes an integer, not \"high\"");
    }
}
