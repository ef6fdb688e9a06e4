//! `[approvals]` in `cryo.toml`: which of the agent's tool calls run,
//! wait for a person, or are refused, and how long one waits.

use serde::Deserialize;

use super::error::{ConfigError, Lines};

/// `[approvals]` in `cryo.toml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApprovals {
    allow: Option<Vec<String>>,
    ask: Option<Vec<String>>,
    deny: Option<Vec<String>>,
    default: Option<String>,
    approval_wait: Option<String>,
}

/// `[approvals]`: its rules, its default (`ask` unless set) and
/// `approval_wait` (a duration of at most a day, default two minutes).
pub(super) fn parse(raw: RawApprovals, lines: &Lines) -> Result<cryo_core::approvals::Policy, ConfigError> {
    use cryo_core::approvals::{Action, Policy, Rule};
    let rules = |key: &str, list: Option<Vec<String>>| -> Result<Vec<Rule>, ConfigError> {
        let rules: Result<Vec<Rule>, _> = list.unwrap_or_default().iter().map(|r| Rule::parse(r)).collect();
        rules.map_err(|why| lines.invalid(key, format!("key `approvals.{key}`: {why}")))
    };
    let default = match raw.default.as_deref() {
        None => Action::Ask,
        Some(d) => Action::parse(d).ok_or_else(|| {
            lines.invalid(
                "default",
                format!("key `approvals.default`: {d:?} is not one of \"allow\", \"ask\", \"deny\""),
            )
        })?,
    };
    let wait = match raw.approval_wait.as_deref() {
        None => cryo_core::approvals::DEFAULT_WAIT,
        Some(w) => cryo_core::time::parse_duration(w)
            .filter(|d| *d >= chrono::Duration::zero() && *d <= chrono::Duration::days(1))
            .and_then(|d| d.to_std().ok())
            .ok_or_else(|| {
                lines.invalid(
                    "approval_wait",
                    format!("key `approvals.approval_wait`: {w:?} is not a duration of at most a day (such as \"2m\")"),
                )
            })?,
    };
    Ok(Policy {
        allow: rules("allow", raw.allow)?,
        ask: rules("ask", raw.ask)?,
        deny: rules("deny", raw.deny)?,
        default,
        wait,
    })
}
