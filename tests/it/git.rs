//! Issue 46: git-aware chambers. Real repositories made here (a checkout
//! the user works in, a bare "remote"), real sessions of scripted agents
//! that run the real git in their worktrees.

use std::path::{Path, PathBuf};
use std::process::Command;

use cryo_tests::{Chamber, Env, wait_until, wait_until_within};

/// `sh -c script` in `dir` with a git identity; its stdout, or a panic
/// with what it said.
fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .output()
        .expect("sh");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether git is here at all (every test needs it).
fn have_git() -> bool {
    let here = Command::new("git").arg("--version").output().is_ok_and(|o| o.status.success());
    if !here {
        eprintln!("SKIPPED: no git on this machine");
    }
    here
}

/// Whether git and the sandbox `mode` are both here.
fn have_git_and(mode: &str) -> bool {
    if let Some(why) = cryo_session::Sandbox::parse(mode).and_then(cryo_session::Sandbox::unavailable) {
        eprintln!("SKIPPED: {mode}: {why}");
        return false;
    }
    have_git()
}

/// The user's checkout: `main` with one file committed, and work of
/// their own left uncommitted (which no chamber may touch).
fn checkout(env: &Env) -> PathBuf {
    let main = env.path("project");
    std::fs::create_dir_all(&main).unwrap();
    sh(&main, "git init -q -b main . && echo hello > README && git add README && git commit -q -m first");
    std::fs::write(main.join("wip.txt"), "the user's own unfinished work\n").unwrap();
    main
}

/// An agent that writes down where it works and what it was told, runs
/// `work` there, and hibernates.
fn agent(work: &str) -> String {
    format!(
        "pwd > \"$CRYO_CHAMBER_DIR/where-$CRYO_SESSION.txt\"\nprintf '%s' \"$1\" > \"$CRYO_CHAMBER_DIR/prompt-$CRYO_SESSION.txt\"\n{work}\ncryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n"
    )
}

/// `cryo.toml`'s lines for chamber `name` on `repo`: its agent named by
/// its whole path (the session runs in the worktree, not the chamber).
fn git_toml(env: &Env, name: &str, repo: &Path, extra: &str) -> String {
    let script = env.path(name).join("agent.sh");
    format!("agent = \"sh {}\"\n[git]\nrepo = \"{}\"\n{extra}", script.display(), repo.display())
}

/// `cryoctl chamber diff ARGS --json`.
fn diff(env: &Env, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "chamber", "diff"];
    all.extend(args);
    env.cryoctl(&all).json()
}

/// The paths of a diff's files.
fn paths(d: &serde_json::Value) -> Vec<String> {
    d["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect()
}

fn status(env: &Env, c: &Chamber) -> serde_json::Value {
    env.cryoctl(&["--json", "chamber", "status", &c.name]).json()[0].clone()
}

#[test]
fn two_chambers_on_one_repository_work_apart_and_leave_the_checkout_alone() {
    if !have_git() {
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    let main = checkout(&env);
    let head = sh(&main, "git rev-parse HEAD");
    let work = |who: &str| {
        format!(
            "echo {who} > {who}-only.txt && git add {who}-only.txt && git commit -q -m \"{who}'s work\"\necho left by {who} > left.txt"
        )
    };
    let a = env.chamber("a", &agent(&work("a")), &git_toml(&env, "a", &main, ""));
    let b = env.chamber("b", &agent(&work("b")), &git_toml(&env, "b", &main, ""));
    env.cryoctl(&["chamber", "start", "a"]).ok();
    env.cryoctl(&["chamber", "start", "b"]).ok();
    wait_kept(&a, 1);
    wait_kept(&b, 1);
    for (c, other) in [(&a, "b"), (&b, "a")] {
        let wt = c.dir.join("worktree");
        assert_eq!(
            c.read("where-1.txt").trim(),
            wt.display().to_string(),
            "the session works in its worktree: {}",
            c.cryo_log()
        );
        assert!(wt.join(format!("{}-only.txt", c.name)).is_file());
        assert!(!wt.join(format!("{other}-only.txt")).exists(), "{}'s worktree holds {other}'s work", c.name);
        let prompt = c.read("prompt-1.txt");
        assert!(prompt.contains(&format!("on branch `cryo/{}`", c.name)), "{prompt}");
        assert!(prompt.contains("The base is `main`"), "{prompt}");
        assert!(prompt.contains(&c.dir.display().to_string()), "the chamber's folder is named: {prompt}");
        // What the agent left uncommitted is a commit naming the session.
        let last = sh(&wt, "git log -1 --format=%s");
        assert!(last.contains("what session 1 left uncommitted"), "{last}");
        assert_eq!(sh(&wt, "git status --porcelain"), "", "nothing is left uncommitted");
        // What cryod writes for a CLI there is never committed as work.
        let exclude = std::fs::read_to_string(wt.join(".git/info/exclude")).unwrap();
        assert!(exclude.lines().any(|l| l == "/.gemini/settings.json"), "{exclude}");
        let d = diff(&env, &[&c.name, "--session", "1"]);
        let mut want = vec!["left.txt".to_string(), format!("{}-only.txt", c.name)];
        want.sort();
        assert_eq!(paths(&d), want, "{d}");
        assert_eq!(
            (d["commits"].as_u64(), d["additions"].as_u64(), d["deletions"].as_u64()),
            (Some(2), Some(2), Some(0))
        );
        assert!(d["patch"].as_str().unwrap().contains(&format!("+left by {}", c.name)), "{d}");
        let whole = diff(&env, &[&c.name]);
        assert_eq!((whole["base"].as_str(), paths(&whole)), (Some("main"), paths(&d)));
        let log = c.cryo_log();
        assert!(log.contains(&format!("git: 2 commits on cryo/{} (2 files, +2 -0)", c.name)), "{log}");
        // The ledger and the status have it too.
        let s = status(&env, c);
        assert_eq!(s["git"]["commits"].as_u64(), Some(2), "{s}");
        assert_eq!(s["sessions"][0]["git"]["files"].as_u64(), Some(2), "{s}");
    }
    // The user's checkout: not a file, branch or commit of theirs changed.
    assert_eq!(sh(&main, "git status --porcelain"), "?? wip.txt\n");
    assert_eq!(sh(&main, "git rev-parse HEAD"), head);
    assert_eq!(sh(&main, "git branch --format='%(refname:short)'"), "main\n", "no branch pushed without `push`");
    assert_eq!(std::fs::read_to_string(main.join("wip.txt")).unwrap(), "the user's own unfinished work\n");
}

/// Waits until `n` sessions' work is kept (each says so in `cryo.log`,
/// after its session's block ends).
fn wait_kept(c: &Chamber, n: usize) {
    c.wait_ended(n);
    let kept = || c.cryo_log().lines().filter(|l| l.contains("] git: ") && l.contains(" commit")).count();
    wait_until(&format!("{}: {n} sessions' work kept; cryo.log:\n{}", c.name, c.cryo_log()), || kept() >= n);
}

/// Waits until `rel` is in the chamber's folder.
fn wait_file(c: &Chamber, rel: &str) {
    wait_until(&format!("{}: {rel}; cryo.log:\n{}", c.name, c.cryo_log()), || c.dir.join(rel).exists());
}

#[test]
fn the_base_moving_is_told_and_a_crash_mid_session_loses_nothing() {
    if !have_git() {
        return;
    }
    let env = Env::new();
    let mut d = env.start_daemon();
    let main = checkout(&env);
    let script = agent(
        "case $CRYO_SESSION in\n\
         1) echo one > one.txt ;;\n\
         2) echo two > two.txt; touch \"$CRYO_CHAMBER_DIR/in-2\"; while :; do sleep 0.2; done ;;\n\
         *) ls > \"$CRYO_CHAMBER_DIR/seen-$CRYO_SESSION.txt\" ;;\n\
         esac",
    );
    let c = env.chamber("c", &script, &git_toml(&env, "c", &main, ""));
    env.cryoctl(&["chamber", "start", "c"]).ok();
    wait_kept(&c, 1);
    // The base gains two commits between sessions.
    sh(&main, "echo x > x && git add x && git commit -qm x && echo y > y && git add y && git commit -qm y");
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    wait_file(&c, "in-2");
    let prompt = c.read("prompt-2.txt");
    assert!(prompt.contains("base moved: 2 commits since your last session"), "{prompt}");
    // cryod dies mid-session, the agent's work uncommitted.
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let _d = env.start_daemon();
    // The interrupted session's work is run again, or a wake asked for.
    if !c.dir.join("seen-3.txt").exists() {
        let _ = env.cryoctl(&["chamber", "wake", "c"]);
    }
    wait_file(&c, "seen-3.txt");
    let log = c.cryo_log();
    assert!(log.contains("session 2's work, settled now: git: 1 commit on cryo/c"), "{log}");
    let d2 = diff(&env, &["c", "--session", "2"]);
    assert_eq!(paths(&d2), vec!["two.txt".to_string()], "{d2}");
    assert!(d2["patch"].as_str().unwrap().contains("+two"), "{d2}");
    // Session 3 started from the branch, with session 2's work on it.
    let seen = c.read("seen-3.txt");
    assert!(seen.contains("one.txt") && seen.contains("two.txt") && seen.contains("x"), "{seen}");
    let wt = c.dir.join("worktree");
    let subjects = sh(&wt, "git log --format=%s cryo/c");
    assert!(subjects.contains("what session 2 left uncommitted"), "{subjects}");
    assert!(c.read("prompt-3.txt").contains("base moved: 0 commits"), "{}", c.read("prompt-3.txt"));
    // The whole branch against its base: both sessions' files, not the base's.
    let whole = diff(&env, &["c"]);
    assert_eq!(paths(&whole), vec!["one.txt".to_string(), "two.txt".to_string()], "{whole}");
}

#[test]
fn a_repository_cryod_cannot_prepare_holds_the_chamber_with_its_line() {
    if !have_git() {
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    let main = checkout(&env);
    let attention = |c: &Chamber| status(&env, c)["attention"].as_str().unwrap_or_default().to_string();
    // A base the repository does not have: the session does not start.
    let nobase = env.chamber("nobase", &agent("touch ran"), &git_toml(&env, "nobase", &main, "base = \"nope\"\n"));
    let said = env.cryoctl(&["chamber", "start", "nobase"]).fails(1).to_string();
    assert!(said.contains("the base \"nope\" is not in"), "{said}");
    wait_until("the missing base's line", || attention(&nobase).contains("the base \"nope\" is not in"));
    assert!(attention(&nobase).contains("set [git] base to a branch it has"), "{}", attention(&nobase));
    assert!(!nobase.dir.join("where-1.txt").exists(), "the agent ran");
    assert!(!nobase.dir.join("worktree").exists());
    // A worktree left locked: held until the lock goes.
    let locked = env.chamber("locked", &agent("touch ran"), &git_toml(&env, "locked", &main, ""));
    env.cryoctl(&["chamber", "start", "locked"]).ok();
    wait_kept(&locked, 1);
    std::fs::write(locked.dir.join("worktree/.git/index.lock"), "").unwrap();
    env.cryoctl(&["chamber", "wake", "locked"]).ok();
    wait_until("the lock's line", || attention(&locked).contains("the worktree is locked"));
    assert!(attention(&locked).contains("remove it once no git runs there"), "{}", attention(&locked));
    assert!(!locked.dir.join("where-2.txt").exists(), "the agent ran in a locked worktree");
    assert!(locked.cryo_log().contains("agent could not start: git: the worktree is locked"), "{}", locked.cryo_log());
    std::fs::remove_file(locked.dir.join("worktree/.git/index.lock")).unwrap();
    // Mid-merge: held too, with what to do.
    let wt = locked.dir.join("worktree");
    std::fs::write(wt.join(".git/MERGE_HEAD"), sh(&wt, "git rev-parse HEAD")).unwrap();
    let _ = env.cryoctl(&["chamber", "wake", "locked"]);
    wait_until("the merge's line", || attention(&locked).contains("in the middle of a merge"));
    std::fs::remove_file(wt.join(".git/MERGE_HEAD")).unwrap();
    env.cryoctl(&["chamber", "wake", "locked"]).ok();
    // The sessions that could not start had numbers of their own.
    let ran_again = || {
        std::fs::read_dir(&locked.dir).unwrap().flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("where-") && name != "where-1.txt"
        })
    };
    wait_until("a session once the worktree is clear", ran_again);
    // The user's checkout was never used instead.
    assert_eq!(sh(&main, "git status --porcelain"), "?? wip.txt\n");
    assert!(!main.join("ran").exists());
    // An edit of [git] nobody accepted (the agent's) is not acted on: not
    // by a session, nor by a diff, which would fetch from the new repo.
    let toml = locked.dir.join("cryo.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        text.replace(&format!("repo = \"{}\"", main.display()), "repo = \"http://127.0.0.1:9/evil.git\""),
    )
    .unwrap();
    wait_until("the edit held", || status(&env, &locked).to_string().contains("which the operator has not accepted"));
    let said = env.cryoctl(&["chamber", "diff", "locked"]).fails(1).to_string();
    assert!(said.contains("[git] changed and is not accepted yet"), "{said}");
}

/// Under each sandbox: the agent commits in its worktree, and cannot
/// write the user's checkout.
fn confined(mode: &str) {
    if !have_git_and(mode) {
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    let main = checkout(&env);
    let work = format!(
        "echo mine > mine.txt && git add mine.txt && git commit -q -m mine && echo committed > \"$CRYO_CHAMBER_DIR/committed\"\n\
         echo loose > loose.txt\n\
         if touch {main}/evil 2>/dev/null; then echo yes; else echo no; fi > \"$CRYO_CHAMBER_DIR/wrote-main\"",
        main = main.display()
    );
    let extra = format!("sandbox = \"{mode}\"\n");
    let toml = format!("{extra}{}", git_toml(&env, "c", &main, ""));
    let c = env.chamber("c", &agent(&work), &toml);
    env.cryoctl(&["chamber", "start", "c"]).ok();
    wait_kept(&c, 1);
    assert_eq!(c.read("committed").trim(), "committed", "git works in the worktree: {}", c.cryo_log());
    assert_eq!(c.read("wrote-main").trim(), "no", "the user's checkout is not writable");
    assert!(!main.join("evil").exists());
    assert!(c.cryo_log().contains("git: 2 commits on cryo/c"), "{}", c.cryo_log());
    let d = diff(&env, &["c", "--session", "1"]);
    assert_eq!(paths(&d), vec!["loose.txt".to_string(), "mine.txt".to_string()], "{d}");
}

#[test]
fn git_under_bwrap() {
    confined("bwrap");
}

#[test]
fn git_under_landlock() {
    confined("landlock");
}

/// The one `history/*/git.txt` of a chamber (after a reset or removal).
fn history_git(c: &Chamber) -> String {
    let history = c.dir.join("history");
    let dirs =
        std::fs::read_dir(&history).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>()).unwrap_or_default();
    let texts: Vec<String> = dirs.iter().filter_map(|d| std::fs::read_to_string(d.join("git.txt")).ok()).collect();
    assert_eq!(texts.len(), 1, "one git.txt in {}", history.display());
    texts[0].clone()
}

#[test]
fn a_fresh_worktree_each_session_and_none_kept_past_a_reset_or_removal() {
    if !have_git() {
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    let main = checkout(&env);
    let work = "echo $CRYO_SESSION >> count.txt\nls -a > \"$CRYO_CHAMBER_DIR/ls-$CRYO_SESSION.txt\"\ntouch untracked-$CRYO_SESSION";
    let s = env.chamber("s", &agent(work), &git_toml(&env, "s", &main, "mode = \"session\"\n"));
    env.cryoctl(&["chamber", "start", "s"]).ok();
    wait_kept(&s, 1);
    assert!(!s.dir.join("worktree").exists(), "a session's worktree goes with it");
    env.cryoctl(&["chamber", "wake", "s"]).ok();
    wait_kept(&s, 2);
    let ls = s.read("ls-2.txt");
    assert!(ls.contains("count.txt") && ls.contains("untracked-1") && !ls.contains("untracked-2"), "{ls}");
    let d = diff(&env, &["s"]);
    assert_eq!(paths(&d), ["count.txt", "untracked-1", "untracked-2"].map(String::from).to_vec(), "{d}");
    // A reset prunes the worktree and cryod's copy; history keeps the
    // branch's name, and its commits in a bundle git fetches from.
    env.cryoctl(&["chamber", "reset", "s", "--yes"]).ok();
    let kept = history_git(&s);
    assert!(kept.starts_with("branch cryo/s at "), "{kept}");
    let fetch = kept.lines().find_map(|l| l.strip_prefix("its commits: ")).expect("the bundle's line").to_string();
    sh(&main, &fetch);
    assert_eq!(sh(&main, "git show cryo-kept/cryo/s:count.txt"), "1\n2\n", "the branch's work, from the bundle");
    assert!(!env.state_dir().join("git/1.git").exists(), "cryod's copy is pruned");
    // A removal prunes as well.
    let w = env.chamber("w", &agent("touch work"), &git_toml(&env, "w", &main, ""));
    env.cryoctl(&["chamber", "start", "w"]).ok();
    wait_kept(&w, 1);
    assert!(w.dir.join("worktree/work").exists());
    env.cryoctl(&["chamber", "remove", "w"]).ok();
    assert!(!w.dir.join("worktree").exists(), "the worktree is pruned");
    assert!(history_git(&w).starts_with("branch cryo/w at "), "{}", history_git(&w));
}

/// Issue 60, case 7: network work after a session (the pull request call,
/// here held unanswered by an API that accepts and never replies, well
/// inside the client's 150 s) runs off the chamber's path: meanwhile the
/// chamber answers its operator at once, a second session is prepared,
/// runs and ends, and when the call fails its note reaches `cryo.log`.
#[test]
fn a_hanging_pull_request_call_blocks_nothing_of_the_chamber() {
    use cryo_tests::fake_github;
    if !have_git() {
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    // The remote: a bare repository on this machine (pushed to by path).
    let bare = env.path("remote.git");
    sh(env.root(), &format!("git init -q --bare -b main {}", bare.display()));
    let main = checkout(&env);
    sh(&main, &format!("git push -q {} main", bare.display()));
    env.write_secret("gh-token", fake_github::TOKEN, 0o600);
    let token = env.home().join("gh-token");
    // The API: connections are accepted (the kernel's backlog) and never answered.
    let api = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    api.set_nonblocking(true).unwrap();
    let script = env.path("c").join("agent.sh");
    let toml = format!(
        "agent = \"sh {}\"\n[git]\nrepo = \"{}\"\npull_request = true\n[sync.github]\nrepo = \"{}/{}\"\nissue = {}\ntoken_file = \"{}\"\napi_url = \"http://{}\"\n",
        script.display(),
        bare.display(),
        fake_github::OWNER,
        fake_github::REPO,
        fake_github::ISSUE,
        token.display(),
        api.local_addr().unwrap()
    );
    let c = env.chamber("c", &agent("echo one >> feature.txt"), &toml);
    env.cryoctl(&["chamber", "start", "c"]).ok();
    // Session 1's push is done and its pull request call hangs. (The
    // issue bridge's calls are told to come back in an hour.)
    let mut held = Vec::new();
    wait_until_within(std::time::Duration::from_secs(60), "the pull request call", || {
        if let Ok((mut conn, _)) = api.accept() {
            use std::io::{Read, Write};
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
            let mut head = [0u8; 512];
            let n = conn.read(&mut head).unwrap_or(0);
            if String::from_utf8_lossy(&head[..n]).lines().next().is_some_and(|l| l.contains("/pulls")) {
                held.push(conn);
            } else {
                let _ = conn.write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 3600\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        }
        !held.is_empty()
    });
    let remote = |rev: &str| sh(&bare, &format!("git show {rev}"));
    assert_eq!(remote("cryo/c:feature.txt"), "one\n", "pushed before the call: {}", c.cryo_log());
    // The chamber answers, and a second session runs, while it hangs.
    let s = status(&env, &c);
    assert_eq!(s["sessions"][0]["number"].as_u64(), Some(1), "{s}");
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    wait_until_within(std::time::Duration::from_secs(60), "session 2 to end while the call hangs", || c.ended() >= 2);
    assert_eq!(c.read("where-2.txt").trim(), c.dir.join("worktree").display().to_string());
    // Nothing told of session 1's work yet: its call is still held.
    assert!(!c.cryo_log().contains("the pull request:"), "{}", c.cryo_log());
    // The API goes away: each call fails, and says so.
    drop(held);
    drop(api);
    wait_until(&format!("the failed calls noted; cryo.log:\n{}", c.cryo_log()), || {
        c.cryo_log().matches("git: the pull request:").count() >= 2
    });
}

#[test]
fn the_branch_is_pushed_and_its_draft_pull_request_kept_up_to_date() {
    use cryo_tests::fake_github::{self, FakeGithub};
    if !have_git() {
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    let gh = FakeGithub::start();
    let bare = gh.serve_git(&env.path("github"));
    // The remote's main, pushed there as a person would.
    let main = checkout(&env);
    sh(&main, &format!("git push -q {} main", bare.display()));
    env.write_secret("gh-token", fake_github::TOKEN, 0o600);
    let token = env.home().join("gh-token");
    let work = "echo \"session $CRYO_SESSION\" >> feature.txt";
    let script = env.path("c").join("agent.sh");
    let toml = format!(
        "agent = \"sh {}\"\n[git]\nrepo = \"{}\"\npull_request = true\n[sync.github]\nrepo = \"{}/{}\"\nissue = {}\ntoken_file = \"{}\"\napi_url = \"{}\"\n",
        script.display(),
        gh.git_url(),
        fake_github::OWNER,
        fake_github::REPO,
        fake_github::ISSUE,
        token.display(),
        gh.url()
    );
    let c = env.chamber("c", &agent(work), &toml);
    env.cryoctl(&["chamber", "start", "c"]).ok();
    wait_kept(&c, 1);
    let remote = |rev: &str| sh(&bare, &format!("git show {rev}"));
    assert_eq!(remote("cryo/c:feature.txt"), "session 1\n", "the branch reached the remote: {}", c.cryo_log());
    let pulls = gh.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert_eq!((pulls[0].head.as_str(), pulls[0].base.as_str(), pulls[0].draft), ("cryo/c", "main", true));
    assert!(pulls[0].body.contains("Session 1:"), "{}", pulls[0].body);
    assert!(c.cryo_log().contains("; pull request #1"), "{}", c.cryo_log());
    assert_eq!(status(&env, &c)["git"]["pull_request"].as_u64(), Some(1));
    // The next session: the same pull request, brought up to date.
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    wait_kept(&c, 2);
    assert_eq!(remote("cryo/c:feature.txt"), "session 1\nsession 2\n");
    let pulls = gh.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert!(pulls[0].body.contains("Session 2:"), "{}", pulls[0].body);
    // Someone else pushes to the branch: cryo never overwrites it.
    let other = env.path("other");
    sh(env.root(), &format!("git clone -q {} {}", bare.display(), other.display()));
    sh(
        &other,
        "git checkout -q cryo/c && echo theirs > theirs.txt && git add theirs.txt && git commit -qm theirs && git push -q origin cryo/c",
    );
    let theirs = sh(&other, "git rev-parse HEAD");
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    wait_kept(&c, 3);
    assert_eq!(sh(&bare, "git rev-parse cryo/c"), theirs, "their push stands");
    let log = c.cryo_log();
    assert!(log.contains("moved since cryo's last push"), "{log}");
    // Nothing was sent to another host, nor without the token.
    assert_eq!(gh.unauthenticated(), 0);
}

/// The hub's run diff in headless Chromium: the files, their counts and
/// the patch exactly as `chamber diff` has them, agent text as text only.
#[test]
fn the_hub_shows_a_runs_diff() {
    let Some(dir) = crate::browser::driver() else {
        eprintln!("SKIPPED the hub's diff in Chromium: needs node, /usr/bin/chromium and tests/browser's modules");
        return;
    };
    if !have_git() {
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    let main = checkout(&env);
    sh(&main, "printf 'one\\ntwo\\n' > list.txt && git add list.txt && git commit -qm list");
    // "a b/list.txt": its patch header also ends in " b/list.txt", and must
    // not stand in for list.txt's on the run's page.
    let work = "printf 'one\\n<script>alert(1)</script>\\n' > list.txt\necho '<img src=x onerror=alert(1)>' > new.html\n\
                mkdir -p 'a b' && echo decoy > 'a b/list.txt'";
    let c = env.chamber("c", &agent(work), &git_toml(&env, "c", &main, ""));
    env.cryoctl(&["chamber", "start", "c"]).ok();
    wait_kept(&c, 1);
    let want = diff(&env, &["c", "--session", "1"]);
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/hub-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let vars = [("CHAMBER", "c".to_string()), ("SHOTS", shots.display().to_string())];
    let seen = crate::browser::run_driver(&dir, "diff.mjs", &env, &vars);
    crate::browser::assert_everywhere_clean(&seen);
    for width in [390, 1280] {
        let line = seen[format!("git_line_{width}")]["text"].as_str().unwrap().to_string();
        assert!(line.contains("cryo/c") && line.contains("+3") && line.contains("−1"), "{line}");
        assert_eq!(seen[format!("changes_{width}")].as_str(), Some("+3 −1"), "{seen}");
        let files = seen[format!("files_{width}")].clone();
        assert_eq!(
            files,
            serde_json::json!([["a b/list.txt", "+1", "−0"], ["list.txt", "+1", "−1"], ["new.html", "+1", "−0"]]),
            "{seen}"
        );
        let patch = &seen[format!("patch_{width}")];
        assert_eq!(
            patch["text"].as_str().unwrap().trim_end(),
            want["patch"].as_str().unwrap().trim_end(),
            "the patch whole"
        );
        assert_eq!(patch["markup"], 0, "agent text stays text: {seen}");
        assert!(
            patch["added"].as_array().unwrap().contains(&serde_json::json!("+<script>alert(1)</script>")),
            "{seen}"
        );
        assert!(patch["deleted"].as_array().unwrap().contains(&serde_json::json!("-two")), "{seen}");
        assert_eq!(seen["axe"][format!("diff_{width}")], serde_json::json!([]), "{seen}");
        // Issue 63, case 5: the run's page, each file folded open (few of
        // them), agent text as text, as wide as the page allows; the
        // branch's whole diff on asking.
        let files = &seen[format!("run_files_{width}")];
        let paths: Vec<&str> = files.as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["a b/list.txt", "list.txt", "new.html"], "{seen}");
        assert!(files.as_array().unwrap().iter().all(|f| f["open"] == true && f["markup"] == 0), "{seen}");
        // Each fold holds its own file's patch, whose header names it exactly.
        assert!(files.as_array().unwrap().iter().all(|f| f["own"] == true), "{seen}");
        let w = &seen[format!("run_diff_width_{width}")];
        assert!(w["page"].as_i64() <= Some(width) && w["diff"].as_i64() > Some(width * 3 / 4 - 60), "{seen}");
        assert_eq!(
            seen[format!("branch_files_{width}")],
            serde_json::json!(["a b/list.txt", "list.txt", "new.html"]),
            "{seen}"
        );
        assert_eq!(seen["axe"][format!("run_diff_{width}")], serde_json::json!([]), "{seen}");
    }
}

/// A known CLI in a `[git]` chamber (the real Claude Code and Codex against
/// the scripted model server): it works in the worktree (its own tools'
/// folder, `codex -C`), commits there, still writes its chamber's notes
/// through `$CRYO_CHAMBER_DIR`, and what it leaves is kept.
fn a_known_cli_works_in_its_worktree(bin: &str, provider: fn(&Env, &cryo_tests::model::ModelServer) -> String) {
    use cryo_tests::model::{ModelServer, Script};
    if !have_git() {
        return;
    }
    let Some(path) = crate::agents::cli(bin) else { return };
    let script = Script::new().on(
        "- session: 1\n",
        &[
            "pwd > \"$CRYO_CHAMBER_DIR/where.txt\"",
            "echo made > by-cli.txt && git add by-cli.txt && git commit -q -m 'the cli commits'",
            "echo note >> \"$CRYO_CHAMBER_DIR/NOTES.md\" && echo loose > loose.txt",
            "cryo-agent todo add 'go on' --at +1h",
            "cryo-agent hibernate --summary 'worked on the branch'",
        ],
    );
    let model = ModelServer::start(script);
    let env = Env::new();
    let main = checkout(&env);
    let toml = format!(
        "agent = \"{}\"\n[provider]\n{}\n[git]\nrepo = \"{}\"\n",
        path.display(),
        provider(&env, &model),
        main.display()
    );
    let _d = env.start_daemon();
    let c = env.chamber(bin, "", &toml);
    env.cryoctl(&["chamber", "start", bin]).ok();
    wait_until_within(crate::agents::SESSION_DEADLINE, "the session's work kept", || {
        c.cryo_log().lines().any(|l| l.contains("] git: ") && l.contains(" commit"))
    });
    let diag = format!("cryo.log:\n{}\ncryo-agent.log:\n{}", c.cryo_log(), c.read("cryo-agent.log"));
    assert!(c.cryo_log().contains("hibernate accepted"), "{diag}");
    assert_eq!(c.read("where.txt").trim(), c.dir.join("worktree").display().to_string(), "{diag}");
    assert!(c.read("NOTES.md").contains("note"), "{diag}");
    let wt = c.dir.join("worktree");
    let subjects = sh(&wt, "git log --format=%s -3");
    assert!(subjects.contains("the cli commits") && subjects.contains("what session 1 left uncommitted"), "{subjects}");
    let d = diff(&env, &[bin, "--session", "1"]);
    assert_eq!(paths(&d), vec!["by-cli.txt".to_string(), "loose.txt".to_string()], "{d}");
    assert_eq!(sh(&main, "git status --porcelain"), "?? wip.txt\n");
}

#[test]
fn claude_code_works_in_its_worktree() {
    a_known_cli_works_in_its_worktree("claude", crate::agents::claude_provider);
}

#[test]
fn codex_works_in_its_worktree() {
    a_known_cli_works_in_its_worktree("codex", crate::agents::codex_provider);
}

/// A hostile agent links its branch's ref to a repository it cannot read
/// (in the user's home, hidden from it) and names that repository's objects
/// as its alternates: cryod's copy fetches the worktree jailed as the
/// agent, so nothing of that repository reaches it, nor the next session.
fn a_linked_ref_brings_nothing_unreadable(mode: &str) {
    if !have_git_and(mode) {
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    let main = checkout(&env);
    let secret = env.home().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    sh(&secret, "git init -q -b main . && echo TOPSECRET > s.txt && git add s.txt && git commit -q -m secret");
    let secret_head = sh(&secret, "git rev-parse HEAD").trim().to_string();
    let work = format!(
        "echo mine > mine.txt && git add mine.txt && git commit -q -m mine\n\
         git checkout -q --detach && rm -f .git/refs/heads/cryo/c && ln -s {s}/.git/refs/heads/main .git/refs/heads/cryo/c\n\
         echo {s}/.git/objects > .git/objects/info/alternates",
        s = secret.display()
    );
    let toml = format!("sandbox = \"{mode}\"\n{}", git_toml(&env, "c", &main, ""));
    let c = env.chamber("c", &agent(&work), &toml);
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    // Kept or refused: either way cryod's copy never holds the secret.
    let store = env.state_dir().join("git/1.git");
    wait_until("the session's work kept or refused", || {
        c.cryo_log()
            .lines()
            .any(|l| l.contains("] git: ") && (l.contains(" commit") || l.contains("left in its worktree")))
    });
    let has = Command::new("git")
        .args(["--git-dir", &store.to_string_lossy(), "cat-file", "-e", &secret_head])
        .status()
        .unwrap();
    assert!(!has.success(), "the secret commit reached cryod's copy: {}", c.cryo_log());
    let all = Command::new("git")
        .args(["--git-dir", &store.to_string_lossy(), "log", "--all", "--format=%s"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&all.stdout).contains("secret"), "{}", String::from_utf8_lossy(&all.stdout));
}

#[test]
fn a_linked_ref_brings_nothing_unreadable_under_bwrap() {
    a_linked_ref_brings_nothing_unreadable("bwrap");
}

#[test]
fn a_linked_ref_brings_nothing_unreadable_under_landlock() {
    a_linked_ref_brings_nothing_unreadable("landlock");
}
