//! Issue 25: what an agent can reach. Keys kept outside the chamber
//! (`[provider].env` values read from a file at each spawn).

use cryo_tests::{Env, wait_until};

/// Says what `MY_KEY` held, then hibernates.
const SAYS_KEY: &str = "cryo-agent send \"key=${MY_KEY:-none}\" >/dev/null\ncryo-agent hibernate\n";

#[test]
fn a_provider_key_is_read_from_its_file_at_each_spawn() {
    let env = Env::new();
    let _d = env.start_daemon();
    let keys = env.home().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    env.write_secret("keys/k", "sk-from-a-file\n", 0o600);
    let c = env.chamber("c", SAYS_KEY, "[provider]\nenv = { MY_KEY = { file = \"~/keys/k\" }, OTHER = \"plain\" }\n");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let said: Vec<String> = c.messages("messages/outbox").into_iter().map(|(_, t)| t).collect();
    assert!(said.iter().any(|t| t.contains("key=sk-from-a-file\n")), "the key, without its newline: {said:?}");
    assert!(!c.read("cryo.toml").contains("sk-from"), "the key is not in the chamber");

    // Rotated: the next session has the new key.
    env.write_secret("keys/k", "sk-rotated", 0o600);
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    c.wait_ended(2);
    assert!(c.messages("messages/outbox").iter().any(|(_, t)| t.contains("key=sk-rotated")));

    // Readable by others: the session does not start, and says why (never the key).
    env.write_secret("keys/k", "sk-exposed", 0o644);
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    wait_until("the refused spawn", || c.read("cryo.log").contains("readable by others"));
    let log = c.read("cryo.log");
    assert!(log.contains("[provider].env.MY_KEY") && log.contains("chmod 600"), "{log}");
    assert!(!log.contains("sk-exposed") && !c.read("cryo-agent.log").contains("sk-exposed"));
    assert!(!c.messages("messages/outbox").iter().any(|(_, t)| t.contains("sk-exposed")));
}

#[test]
fn a_malformed_key_value_is_one_line_naming_it() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", SAYS_KEY, "");
    let before = c.read("cryo.toml");
    let bad = format!("{before}\n[provider]\nenv = {{ MY_KEY = {{ path = \"/x\" }} }}\n");
    std::fs::write(c.dir.join("cryo.toml"), &bad).unwrap();
    wait_until("the fault", || env.cryoctl(&["chamber", "status", "c", "--json"]).json()[0]["state"] == "faulted");
    let status = env.cryoctl(&["chamber", "status", "c", "--json"]).json();
    let fault = status[0]["fault"].as_str().unwrap();
    assert!(fault.contains("cryo.toml") && fault.contains("{ file = \"PATH\" }"), "{fault}");
    assert_eq!(fault.lines().count(), 1, "{fault}");
    assert_eq!(c.read("cryo.toml"), bad, "the file is left as it was");
}
