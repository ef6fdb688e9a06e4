//! The service files that run cryod under systemd (a user unit) or launchd
//! (a LaunchAgent), as `cryoctl daemon install` writes them: the templates
//! live in `packaging/`, and rendering here puts in the installed binary's
//! path, escaped by each format's own rules. cryod itself never reads them.
//!
//! Both formats are rendered on every platform (the tests check both); the
//! other platform's items are unused outside the tests.

use std::path::Path;

/// The systemd user unit's template.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub const SYSTEMD_TEMPLATE: &str = include_str!("../../../../packaging/systemd/cryod.service");
/// The LaunchAgent's template.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub const LAUNCHD_TEMPLATE: &str = include_str!("../../../../packaging/launchd/dev.cryo.cryod.plist");
/// The LaunchAgent's label.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub const LAUNCHD_LABEL: &str = "dev.cryo.cryod";
/// The unit's file name.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub const SYSTEMD_UNIT: &str = "cryod.service";

/// An argument of an `ExecStart=` line, quoted with systemd's escapes:
/// backslash and double quote C-escaped, `%` doubled (specifiers), `$`
/// doubled (variable expansion).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub fn systemd_arg(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The command of `ExecStart=` for the binary at `path`. systemd takes the
/// executable quoted (`%` still doubled; `$` is not expanded there) but
/// refuses one whose name has quotes or backslashes; such a path is handed
/// to `/bin/sh`, which `exec`s it, so cryod is still the main process.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub fn exec_start(path: &str) -> String {
    let plain = !path.chars().any(|c| matches!(c, '"' | '\\' | '\'') || c.is_control());
    if plain {
        format!("\"{}\"", path.replace('%', "%%"))
    } else {
        format!("/bin/sh -c \"exec \\\"$$0\\\"\" {}", systemd_arg(path))
    }
}

/// Text for an XML (plist) string element.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub fn xml_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

/// The systemd unit for `cryod` at `exe`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub fn render_systemd(exe: &Path) -> String {
    SYSTEMD_TEMPLATE.replace("{{exec_start}}", &exec_start(&exe.to_string_lossy()))
}

/// The LaunchAgent for `cryod` at `exe`, logging under `logs`.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub fn render_launchd(exe: &Path, logs: &Path) -> String {
    LAUNCHD_TEMPLATE
        .replace("{{exec}}", &xml_text(&exe.to_string_lossy()))
        .replace("{{logs}}", &xml_text(&logs.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_escaping() {
        assert_eq!(exec_start("/usr/bin/cryod"), "\"/usr/bin/cryod\"");
        assert_eq!(exec_start("/opt/my apps/cryod"), "\"/opt/my apps/cryod\"");
        assert_eq!(exec_start("/a/100%/b"), "\"/a/100%%/b\"");
        assert_eq!(exec_start("/a/$HOME/b"), "\"/a/$HOME/b\"");
        assert_eq!(exec_start("/a/\"q\"/b"), r#"/bin/sh -c "exec \"$$0\"" "/a/\"q\"/b""#);
        assert_eq!(exec_start("/a\\b$%"), r#"/bin/sh -c "exec \"$$0\"" "/a\\b$$%%""#);
        let unit = render_systemd(Path::new("/opt/my apps/cryod"));
        assert!(unit.contains("ExecStart=\"/opt/my apps/cryod\"\n"), "{unit}");
        assert!(unit.starts_with("# cryod:"));
        assert!(!unit.contains("{{"));
    }

    #[test]
    fn plist_escaping() {
        let p = render_launchd(Path::new("/Users/a&b/<x>/cryod"), Path::new("/Users/a&b/Library/Logs/cryo"));
        assert!(p.contains("<string>/Users/a&amp;b/&lt;x&gt;/cryod</string>"), "{p}");
        assert!(p.contains("<string>/Users/a&amp;b/Library/Logs/cryo/cryod.log</string>"));
        assert!(
            p.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!--"),
            "the comment comes right after the XML declaration"
        );
        assert!(!p.contains("{{"));
    }

    /// Paths that need each escape: spaces, `%`, `$`, quotes, backslashes.
    const ODD: &[&str] = &["plain", "with space", "100%done", "$HOME-like", "quote\"d", "back\\slash", "it's"];

    #[test]
    fn rendered_units_pass_systemd_analyze_verify() {
        if std::process::Command::new("systemd-analyze").arg("--version").output().is_err() {
            eprintln!("SKIPPED rendered_units_pass_systemd_analyze_verify: systemd-analyze is not installed");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("xdg-run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        for odd in ODD {
            let dir = tmp.path().join(format!("bins/{odd}"));
            std::fs::create_dir_all(&dir).unwrap();
            let exe = dir.join("cryod");
            std::fs::copy("/bin/true", &exe).unwrap();
            let unit = render_systemd(&exe);
            let unit_dir = tmp.path().join(format!("units/{}", odd.len()));
            std::fs::create_dir_all(&unit_dir).unwrap();
            let path = unit_dir.join("cryod.service");
            std::fs::write(&path, &unit).unwrap();
            for user in [true, false] {
                let mut c = std::process::Command::new("systemd-analyze");
                if user {
                    c.arg("--user").env("XDG_RUNTIME_DIR", &run);
                }
                let out = c.arg("verify").arg(&path).output().unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success() && stderr.trim().is_empty(), "{odd:?} (user: {user}): {stderr}\n{unit}");
            }
        }
    }

    #[test]
    fn rendered_plists_are_well_formed_and_keep_the_path() {
        let probe = std::process::Command::new("python3").arg("-c").arg("import plistlib").output();
        if !matches!(probe, Ok(ref o) if o.status.success()) {
            eprintln!(
                "SKIPPED rendered_plists_are_well_formed_and_keep_the_path: python3 with plistlib is not available"
            );
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        for odd in ODD.iter().chain(&["a&b", "<tag>"]) {
            let exe = std::path::PathBuf::from(format!("/Users/me/{odd}/cryod"));
            let plist = render_launchd(&exe, Path::new("/Users/me/Library/Logs/cryo"));
            let file = tmp.path().join("agent.plist");
            std::fs::write(&file, &plist).unwrap();
            let out = std::process::Command::new("python3")
                .arg("-c")
                .arg("import plistlib,sys; d=plistlib.load(open(sys.argv[1],'rb')); print(d['ProgramArguments'][0]); print(d['Label'], d['RunAtLoad'], d['KeepAlive'])")
                .arg(&file)
                .output()
                .unwrap();
            assert!(out.status.success(), "{odd:?}: {}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8(out.stdout).unwrap();
            let mut lines = text.lines();
            assert_eq!(lines.next().unwrap(), exe.to_str().unwrap());
            assert_eq!(lines.next().unwrap(), "dev.cryo.cryod True True");
        }
    }

    #[test]
    fn rendered_service_files_snapshots() {
        let exe = Path::new("/home/me/.cargo/bin/cryod");
        insta::with_settings!({ snapshot_path => "snapshots", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!("systemd_unit", render_systemd(exe));
            insta::assert_snapshot!("launchd_plist", render_launchd(exe, Path::new("/Users/me/Library/Logs/cryo")));
            insta::assert_snapshot!("systemd_unit_odd_path", render_systemd(Path::new("/opt/a \"b\" 100%/$x\\cryod")));
        });
    }
}
