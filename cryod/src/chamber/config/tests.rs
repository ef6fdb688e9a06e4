//! `cryo.toml` read as users write it: defaults, every table, and errors
//! that name the file, line and key.

use super::*;
use std::path::Path;

fn p(text: &str) -> Result<Loaded, ConfigError> {
    parse(Path::new("/c/cryo.toml"), text, Path::new("/c"), chrono_tz::UTC)
}

/// The line a `cryo.toml` of `text` is refused with.
fn fault(text: &str) -> String {
    p(text).err().expect("refused").to_string()
}

/// Paths the agent could put a link on (under its chamber, or a
/// `writable` folder) are watched; where one leads is in the digest.
#[test]
fn paths_under_the_agents_reach_are_held_to_where_they_led() {
    let t = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(t.path()).unwrap().join("c");
    let outside = dir.parent().unwrap().join("outside");
    for d in [dir.join("out"), dir.join(".codex"), outside.clone()] {
        std::fs::create_dir_all(d).unwrap();
    }
    let text = format!(
        "writable = [\"./out\"]\nreadable = [\"{}\"]\n[provider]\nenv = {{ CODEX_HOME = \"./.codex\", KEY = \"sk-1\" }}\n",
        outside.display()
    );
    let load = || parse(&dir.join(FILE), &text, &dir, chrono_tz::UTC).unwrap();
    let first = load();
    let watched: Vec<&Path> = first.config.reach.iter().map(|r| r.named.as_path()).collect();
    // The folder outside the agent's reach is not watched (the operator
    // may keep links there: a rotated key); the API key is no path.
    assert_eq!(watched, [dir.join("out").as_path(), dir.join(".codex").as_path()]);
    assert_eq!(first.config.moved(), None);
    // The agent makes its CLI's state folder a link to a folder outside.
    std::fs::remove_dir(dir.join(".codex")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join(".codex")).unwrap();
    let line = first.config.moved().unwrap();
    assert!(line.contains("`provider`") && line.contains("now leads to"), "{line}");
    let second = load();
    assert_eq!(super::super::trust::changed(&first.trust, &second.trust), ["provider"]);
}

#[test]
fn defaults() {
    let c = p("").unwrap().config;
    assert_eq!(c.agent, "opencode");
    assert_eq!(c.max_session_duration, 3600);
    assert_eq!(c.watch_dirs, vec![PathBuf::from("/c/messages/inbox")]);
    assert_eq!(c.max_attempts, 10);
    assert!(c.mcp);
    assert!(!p("mcp = false\n").unwrap().config.mcp);
    let e = fault("mcp = \"no\"\n");
    assert!(e.starts_with("/c/cryo.toml:1:") && e.contains("mcp"), "{e}");
}

#[test]
fn continuity_keys() {
    let c = p("").unwrap().config.continuity;
    assert!(!c.resume && c.max_sessions == 10 && c.max_tokens.is_none());
    let c = p("session = \"resume\"\nresume_max_age = \"90m\"\nresume_max_sessions = 3\nresume_max_tokens = 500000\n")
        .unwrap()
        .config
        .continuity;
    assert_eq!(
        (c.resume, c.max_age, c.max_sessions, c.max_tokens),
        (true, chrono::Duration::minutes(90), 3, Some(500_000))
    );
    for (bad, line) in [
        ("session = \"again\"\n", 1),
        ("agent = \"x\"\nresume_max_age = \"soon\"\n", 2),
        ("resume_max_sessions = 0\n", 1),
        ("memory_max = \"lots\"\n", 1),
        ("memory_max = \"150%\"\n", 1),
        ("cpu_weight = 0\n", 1),
    ] {
        let e = fault(bad);
        assert!(e.starts_with(&format!("/c/cryo.toml:{line}:")), "{e}");
    }
}

#[test]
fn stall_after_and_loop_after() {
    use super::Watch;
    use std::time::Duration;
    let w = p("").unwrap().config.watch;
    assert_eq!(w, Watch { stall_after: None, loop_after: Some(super::DEFAULT_LOOP_AFTER) });
    let w = p("stall_after = \"20m\"\nloop_after = 0\n").unwrap().config.watch;
    assert_eq!(w, Watch { stall_after: Some(Duration::from_secs(1200)), loop_after: None });
    assert_eq!(p("loop_after = 5\n").unwrap().config.watch.loop_after, Some(5));
    for (bad, says) in [
        ("stall_after = \"soon\"\n", "is not a duration"),
        ("stall_after = \"0s\"\n", "is not a duration"),
        ("stall_after = 20\n", "stall_after"),
        ("loop_after = 1\n", "would end a session at its first tool call"),
        ("loop_after = -3\n", "loop_after"),
    ] {
        let e = fault(bad);
        assert!(e.starts_with("/c/cryo.toml:1:") && e.contains(says), "{bad}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[test]
fn the_template_parses() {
    let text = include_str!("../templates/cryo.toml")
        .replace("{{agent}}", "claude")
        .replace("{{sandbox}}", "bwrap")
        .replace("{{provider}}", "# [provider]");
    let l = p(&text).unwrap();
    assert!(l.warnings.is_empty());
    assert_eq!(l.config.agent, "claude");
    assert_eq!(l.config.sandbox, Some(crate::config::Sandbox::Bwrap));
}

#[test]
fn seed_files_parse_with_warnings() {
    let seed = "agent = \"opencode\"\nmax_session_duration = 3600\nwatch_dirs = [\"messages/inbox\"]\nzulip_poll_interval = 5\n\n[[providers]]\nname = \"x\"\n";
    let l = p(seed).unwrap();
    assert_eq!(l.warnings.len(), 2, "{:?}", l.warnings);
    assert!(l.warnings[0].contains("/c/cryo.toml:6") || l.warnings[0].contains("/c/cryo.toml:4"), "{:?}", l.warnings);
}

#[test]
fn errors_name_file_line_and_key() {
    let e = fault("agent = \"x\"\nmax_sesion_duration = 5\n");
    assert!(e.starts_with("/c/cryo.toml:2:") && e.contains("max_sesion_duration"), "{e}");
    let e = fault("agent = \"x\"\n[provider]\nenv = { A = 1 }\n");
    assert!(e.starts_with("/c/cryo.toml:3:"), "{e}");
    let e = fault("timezone = \"Mars/Olympus\"\n");
    assert!(e.contains("cryo.toml:1") && e.contains("timezone"), "{e}");
    let e = fault("agent = \"x\n");
    assert!(e.starts_with("/c/cryo.toml:1:"), "{e}");
    assert!(matches!(p("agent = \"x\n"), Err(ConfigError::Toml(_))));
    assert!(matches!(p("max_attempts = 101\n"), Err(ConfigError::Invalid { .. })));
    let e = fault("[sync.github]\nrepo = \"a/b\"\n");
    assert!(e.contains("discussion"), "{e}");
    assert!(!e.contains('\n'));
}

#[test]
fn on_end_tables() {
    let c = p("[[on_end]]\nchamber = \"b\"\nwhen = \"any\"\n\n[[on_end]]\nchamber = \"c\"\nwhen = \"failed\"\nmessage = \"{chamber} #{session}\"\nmax_per_hour = 2\n")
        .unwrap()
        .config;
    let links: Vec<_> =
        c.on_end.iter().map(|c| (c.link.chamber.as_str(), c.at.as_str(), c.link.max_per_hour)).collect();
    assert_eq!(links, vec![("b", "/c/cryo.toml:2", 6), ("c", "/c/cryo.toml:6", 2)]);
    assert_eq!(
        fault("[[on_end]]\nchamber = \"b\"\nwhen = \"often\"\n"),
        "/c/cryo.toml:3: [[on_end]] `when`: \"often\" is none of \"completed\", \"hibernated\", \"failed\", \"any\""
    );
    assert!(
        fault("[[on_end]]\nchamber = \"b\"\nwhen = \"any\"\nmessage = \"{sumary}\"\n")
            .starts_with("/c/cryo.toml:4: [[on_end]] `message`: {sumary} is not a placeholder")
    );
    assert!(fault("[[on_end]]\nchamber = \"b\"\nwhen = \"any\"\nmax_per_hour = 0\n").starts_with("/c/cryo.toml:4:"));
    assert!(fault("[[on_end]]\nchamber = \"b\"\n").contains("missing field `when`"));
}

#[test]
fn a_fallback_account_replaces_the_key_and_endpoint_and_another_agent_the_rest() {
    let text = "agent = \"claude\"\n[provider]\nname = \"work\"\nenv = { ANTHROPIC_API_KEY = \"sk-work\", \
                ANTHROPIC_BASE_URL = \"https://proxy.work\", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\" }\n";
    let c = p(text).unwrap().config;
    let spare: crate::config::ProviderConfig =
        toml::from_str("env = { ANTHROPIC_API_KEY = { file = \"/keys/spare\" } }\n").unwrap();
    let on = c.on_account("spare", &spare);
    assert_eq!(on.provider_name.as_deref(), Some("spare"));
    assert_eq!(on.agent, "claude");
    // Work's key and endpoint are gone; the spare's key is read at spawn.
    assert_eq!(on.provider_env.keys().collect::<Vec<_>>(), ["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]);
    assert_eq!(on.provider_env_files["ANTHROPIC_API_KEY"], PathBuf::from("/keys/spare"));
    let openai: crate::config::ProviderConfig =
        toml::from_str("agent = \"codex\"\nenv = { OPENAI_API_KEY = \"sk-o\" }\n").unwrap();
    let on = c.on_account("openai", &openai);
    assert_eq!(on.agent, "codex");
    assert_eq!(on.provider_env.iter().collect::<Vec<_>>(), [(&"OPENAI_API_KEY".to_string(), &"sk-o".to_string())]);
}

/// Issue 59, case 4: Landlock limits ports, not addresses, so it never
/// holds `network = "gateway"`: refused with one line naming the key.
#[test]
fn network_gateway_under_landlock_is_refused() {
    let said = fault("sandbox = \"landlock\"\nnetwork = \"gateway\"\n");
    assert!(said.contains("cryo.toml:2") && said.contains("needs sandbox = \"bwrap\""), "{said}");
    assert!(p("sandbox = \"bwrap\"\nnetwork = \"gateway\"\n").is_ok());
}

/// Issue 59, case 8: a key written inline in `[provider] env` (which the
/// agent can read) is a warning naming the key-file form; a key in a file,
/// and a variable that holds no secret, are not.
#[test]
fn an_inline_key_is_warned_about() {
    let l = p("[provider]\nenv = { ANTHROPIC_API_KEY = \"sk-1\", ANTHROPIC_BASE_URL = \"http://x\" }\n").unwrap();
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert!(l.warnings[0].contains("ANTHROPIC_API_KEY") && l.warnings[0].contains("{ file = "), "{:?}", l.warnings);
    let l = p("[provider]\nenv = { ANTHROPIC_API_KEY = { file = \"/k\" } }\n").unwrap();
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
}

/// Lines that hold only a comment are not lexed (a scaffolded file is nearly
/// all comments) and change nothing: the same settings and digests, an
/// error still on its line. A multi-line string keeps its lines that begin
/// with `#`, and a comment with a control character is still refused.
#[test]
fn comment_lines_are_skipped_and_change_nothing() {
    let plain = "agent = \"sh a.sh\"\nwatch_dirs = [\n  \"in\",\n]\nmax_attempts = 3\n";
    let commented = "# top\r\nagent = \"sh a.sh\" # after\n  # indented\nwatch_dirs = [\n  # inside\n  \"in\",\n]\n\t# a tab\n\
                     max_attempts = 3\n# the last, no break";
    let (a, b) = (p(plain).unwrap(), p(commented).unwrap());
    assert_eq!(format!("{:?}", a.config), format!("{:?}", b.config));
    assert_eq!((a.trust, a.warnings), (b.trust, b.warnings));
    let at = fault("# one\n# two\n\nmax_attempts = \"many\"\n");
    assert!(at.starts_with("/c/cryo.toml:4:"), "{at}");
    let kept = p("precheck = \"\"\"\n# not a comment\ntrue\"\"\"\n").unwrap();
    assert_eq!(kept.config.precheck.as_deref(), Some("# not a comment\ntrue"));
    assert!(p("# a bell \u{7}\nagent = \"sh a.sh\"\n").is_err());
    assert!(p("\u{c}# after a form feed\nagent = \"sh a.sh\"\n").is_err());
    assert!(p("agent = \"sh a.sh\"\n# a carriage return that ends no line\r").is_err());
}
