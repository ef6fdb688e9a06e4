//! Issue 61: the book under `docs/` (and README.md) says what the programs
//! do. Every page is in the book's table of contents, every link between
//! pages (and into the repository) resolves, heading anchors included;
//! every `cryo.toml` and `cryod.toml` example parses as cryod parses it;
//! every `cryoctl` command line is one cryoctl accepts; every example that
//! shows output (a `console` block) is checked by the test that runs it
//! ([`EXAMPLES`], `cryo_tests::examples`).

use std::path::{Path, PathBuf};

/// Each output example of the book: its page, its command, and the test
/// that runs it and compares what it prints (`cryo_tests::examples::check`).
const EXAMPLES: &[(&str, &str, &str)] = &[
    ("README.md", "cryoctl chamber messages echo", "finish::a_newcomer_follows_the_readme_to_a_working_chamber"),
    ("docs/src/cost.md", "cryoctl usage --by model", "agents::claude_code_runs_a_two_session_plan"),
    ("docs/src/wakes.md", "cryoctl chamber schedule nightly -n 2", "wakes::the_schedule_explains_the_coming_wakes"),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The book's pages, README.md and ARCHITECTURE.md: (path, text).
fn pages() -> Vec<(PathBuf, String)> {
    let src = repo().join("docs/src");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    out.sort();
    out.push(repo().join("README.md"));
    out.push(repo().join("ARCHITECTURE.md"));
    out.into_iter().map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap())).collect()
}

/// The fenced code blocks of `text`: (info string, body, line of the fence).
fn blocks(text: &str) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) => open = Some((line.trim_start()[3..].trim().to_string(), String::new(), i + 1)),
            (Some(_), true) => out.push(open.take().unwrap()),
            (Some((_, body, _)), false) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, false) => {}
        }
    }
    out
}

/// Text outside code blocks and code spans, where links are links.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            // Code spans hold no links.
            let mut inside = false;
            for part in line.split('`') {
                if !inside {
                    out.push_str(part);
                }
                inside = !inside;
            }
            out.push('\n');
        }
    }
    out
}

/// A heading's anchor as mdBook and GitHub make it.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every `](target)` of the prose.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

#[test]
fn every_page_is_in_the_book_and_every_link_resolves() {
    let src = repo().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed = links(&summary);
    let mut wrong = Vec::new();
    for (path, text) in pages() {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if path.starts_with(&src) && name != "SUMMARY.md" && !listed.contains(&name) {
            wrong.push(format!("docs/src/{name} is not in SUMMARY.md"));
        }
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() { path.clone() } else { path.parent().unwrap().join(file) };
            let shown = format!("{}: ]({link})", path.strip_prefix(repo()).unwrap().display());
            if !target.exists() {
                wrong.push(format!("{shown}: no such file"));
                continue;
            }
            if !anchor.is_empty() && target.extension().is_some_and(|x| x == "md") {
                let there = std::fs::read_to_string(&target).unwrap();
                if !anchors(&there).iter().any(|a| a == anchor) {
                    wrong.push(format!("{shown}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A `toml` block is a chamber's `cryo.toml`, unless its first line says
/// `# cryod.toml`; a block marked `toml,ignore` is a fragment (shown, not
/// checked).
#[test]
fn every_config_example_parses() {
    let dir = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (path, text) in pages() {
        for (info, body, line) in blocks(&text) {
            if info != "toml" {
                continue;
            }
            checked += 1;
            let at = format!("{}:{line}", path.strip_prefix(repo()).unwrap().display());
            if body.trim_start().starts_with("# cryod.toml") {
                if let Err(e) = cryod::config::Config::parse(Path::new("cryod.toml"), &body) {
                    wrong.push(format!("{at}: cryod.toml: {e}"));
                }
                continue;
            }
            // A table alone is part of a chamber's file, which names its agent.
            let has_agent =
                body.lines().any(|l| l.trim_start().starts_with("agent ") || l.trim_start().starts_with("agent="));
            let text = if has_agent { body.clone() } else { format!("agent = \"sh agent.sh\"\n{body}") };
            let r = cryod::chamber::config::parse(Path::new("cryo.toml"), &text, dir.path(), chrono_tz::UTC);
            if let Err(e) = r {
                wrong.push(format!("{at}: cryo.toml: {e}"));
            }
        }
    }
    assert!(checked > 10, "only {checked} toml blocks found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Splits a shell line into words (quotes and backslashes as sh reads
/// them; `$(…)` and `$VAR` left as they are).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (None, '\\') => word.extend(chars.next()),
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

/// The `cryoctl` command lines of the `sh` blocks: each one's words, up to
/// a comment, `;`, `&&`, `|` or a redirection.
fn cryoctl_lines(body: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in body.lines() {
        let line = line.trim();
        for part in line.split(['|', ';']).flat_map(|p| p.split("&&")) {
            let part = part.trim();
            let part = match part.find(" #") {
                Some(i) => &part[..i],
                None => part,
            };
            let part = part.trim_end_matches('\\').trim();
            let Some(rest) = part.strip_prefix("cryoctl ") else { continue };
            if rest.contains("$(")
                || rest.contains('<')
                || rest.contains('>')
                || rest.contains("...")
                || rest.contains('…')
            {
                continue;
            }
            out.push(words(rest));
        }
    }
    out
}

#[test]
fn every_cryoctl_line_is_one_cryoctl_accepts() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (path, text) in pages() {
        for (info, body, line) in blocks(&text) {
            if info != "sh" {
                continue;
            }
            for args in cryoctl_lines(&body) {
                checked += 1;
                // `--help` after the words: clap checks the commands and
                // flags named, and prints help instead of running it.
                let out = std::process::Command::new(cryo_tests::bin("cryoctl"))
                    .args(&args)
                    .arg("--help")
                    .env("CRYO_SOCKET", "/nonexistent/cryod.sock")
                    .output()
                    .unwrap();
                if !out.status.success() {
                    let at = path.strip_prefix(repo()).unwrap().display();
                    let said = String::from_utf8_lossy(&out.stderr);
                    let first = said.lines().next().unwrap_or("").to_string();
                    wrong.push(format!("{at}:{line}: cryoctl {}: {first}", args.join(" ")));
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} cryoctl lines found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn shell_words_are_split_as_sh_splits_them() {
    assert_eq!(
        words(r#"chamber send ci "please check" --x 'a b' c\ d"#),
        ["chamber", "send", "ci", "please check", "--x", "a b", "c d"]
    );
    assert_eq!(slug("Files and settings"), "files-and-settings");
    assert_eq!(slug("Figures while it runs: `/metrics`"), "figures-while-it-runs-metrics");
}

/// Every example that shows output is one a test runs: listed in
/// [`EXAMPLES`], whose test hands what the command prints to
/// `cryo_tests::examples::check` (an example no test checks would drift).
#[test]
fn every_output_example_is_checked() {
    let mut found = Vec::new();
    for (path, text) in pages() {
        let page = path.strip_prefix(repo()).unwrap().display().to_string();
        for (command, _, line) in cryo_tests::examples::examples(&text) {
            found.push((page.clone(), command, line));
        }
    }
    let listed = |page: &str, command: &str| EXAMPLES.iter().any(|(p, c, _)| *p == page && *c == command);
    let unchecked: Vec<String> =
        found.iter().filter(|(p, c, _)| !listed(p, c)).map(|(p, c, l)| format!("{p}:{l}: `{c}`")).collect();
    assert!(
        unchecked.is_empty(),
        "examples no test checks (add each to EXAMPLES with its test):\n{}",
        unchecked.join("\n")
    );
    for (page, command, test) in EXAMPLES {
        assert!(found.iter().any(|(p, c, _)| p == page && c == command), "{page} no longer shows `{command}`");
        // The test named checks it: its source hands the page to `check`.
        let (file, name) = test.split_once("::").unwrap();
        let source = std::fs::read_to_string(repo().join(format!("tests/it/{file}.rs"))).unwrap();
        let body = source.split(&format!("fn {name}(")).nth(1).unwrap_or_else(|| panic!("no test {test}"));
        let calls = source.contains(&format!("examples::check(\"{page}\", \"{command}\""));
        assert!(calls && !body.is_empty(), "{test} does not check {page}'s `{command}`");
    }
    // A plain block of output (no `console`) escapes the check.
    for (path, text) in pages() {
        for (info, body, line) in blocks(&text) {
            let shows = body.lines().next().is_some_and(|l| l.starts_with("$ "));
            assert!(!shows || info == "console", "{}:{line}: output shown outside a `console` block", path.display());
        }
    }
}

const KEYS_BEGIN: &str = "<!-- every key: generated from the code by `it book::the_reference_lists_every_key_the_code_takes` (CRYO_BLESS=1 writes it) -->";
const KEYS_END: &str = "<!-- end of every key -->";

/// The reference's list of every key, from the code's own definitions.
fn every_key() -> String {
    let list = |lists: Vec<(&str, Vec<String>)>| -> String {
        let mut out = String::new();
        for (table, keys) in lists {
            let keys: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
            let table = if table.is_empty() { "top level".to_string() } else { format!("`{table}`") };
            out.push_str(&format!("- {table}: {}\n", keys.join(", ")));
        }
        out
    };
    let legacy: Vec<String> =
        cryod::config::LEGACY_KEYS.iter().filter(|k| **k != "providers").map(|k| format!("`{k}`")).collect();
    format!(
        "{KEYS_BEGIN}\n\n`cryo.toml`:\n\n{}\nThe seed system's (cryochamber's) keys, each accepted with a warning: \
         `[[providers]]` (its first entry is used as `[provider]`), and, ignored, {}.\n\n`cryod.toml`:\n\n{}\n\
         {KEYS_END}",
        list(cryod::chamber::config::key_lists()),
        legacy.join(", "),
        list(cryod::config::key_lists())
    )
}

/// The reference lists every key of `cryo.toml` and `cryod.toml`, table by
/// table, exactly as the code defines them: a key added, renamed or removed
/// in the code and not in the book fails here (`CRYO_BLESS=1` rewrites the
/// list).
#[test]
fn the_reference_lists_every_key_the_code_takes() {
    let path = repo().join("docs/src/reference.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (Some(start), Some(end)) = (text.find(KEYS_BEGIN), text.find(KEYS_END)) else {
        panic!("{} has no generated key list ({KEYS_BEGIN} ... {KEYS_END})", path.display())
    };
    let now = &text[start..end + KEYS_END.len()];
    let want = every_key();
    if now != want && std::env::var_os("CRYO_BLESS").is_some() {
        std::fs::write(&path, text.replace(now, &want)).unwrap();
        return;
    }
    assert_eq!(now, want, "docs/src/reference.md's key list is not the code's (CRYO_BLESS=1 rewrites it)");
}
