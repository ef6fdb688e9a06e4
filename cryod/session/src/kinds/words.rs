//! An agent line's words: split as a shell would (without expanding
//! anything), and a command of the user's own given its chamber's files
//! whole when it works elsewhere.

use std::path::Path;

use super::ACP_PREFIX;
use crate::Error;

/// An `agent` line's words: its command and arguments (after `acp:`, for
/// an ACP agent).
pub fn agent_words(agent: &str) -> crate::Result<Vec<String>> {
    split_words(agent.trim_start().strip_prefix(ACP_PREFIX).unwrap_or(agent))
}

/// Splits a command line into words: whitespace separates, single and double
/// quotes group, a backslash escapes the next character.
pub(super) fn split_words(s: &str) -> crate::Result<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(Error::Setting(format!("unbalanced quote in agent command {s:?}")));
    }
    if in_word {
        words.push(cur);
    }
    if words.is_empty() {
        return Err(Error::Setting("the agent command is empty".into()));
    }
    Ok(words)
}

/// A command of the user's own that works elsewhere than its chamber (a
/// `[git]` worktree): a word naming a file of the chamber by a relative
/// path (`sh agent.sh`) names it whole, as it did before the chamber had
/// a worktree; one the working folder has too is left as it is.
pub(super) fn in_chamber(words: Vec<String>, chamber: &Path, workdir: Option<&Path>) -> Vec<String> {
    let Some(workdir) = workdir.filter(|w| *w != chamber) else { return words };
    words
        .into_iter()
        .map(|w| {
            let relative = !w.starts_with('-') && !w.is_empty() && Path::new(&w).is_relative();
            if relative && chamber.join(&w).is_file() && !workdir.join(&w).exists() {
                chamber.join(&w).to_string_lossy().into_owned()
            } else {
                w
            }
        })
        .collect()
}
