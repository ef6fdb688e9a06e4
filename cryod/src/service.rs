//! The service files that run cryod under systemd (a user unit) or launchd
//! (a LaunchAgent): the templates live in `packaging/`, and rendering here
//! puts in the installed binary's path, escaped by each format's own rules.

use std::path::Path;

/// The systemd user unit's template.
pub const SYSTEMD_TEMPLATE: &str = include_str!("../../packaging/systemd/cryod.service");
/// The LaunchAgent's template.
pub const LAUNCHD_TEMPLATE: &str = include_str!("../../packaging/launchd/dev.cryo.cryod.plist");
/// The LaunchAgent's label.
pub const LAUNCHD_LABEL: &str = "dev.cryo.cryod";
/// The unit's file name.
pub const SYSTEMD_UNIT: &str = "cryod.service";

/// An argument of an `ExecStart=` line, quoted with systemd's escapes:
/// backslash and double quote C-escaped, `%` doubled (specifiers), `$`
/// doubled (variable expansion).
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
pub fn exec_start(path: &str) -> String {
    let plain = !path.chars().any(|c| matches!(c, '"' | '\\' | '\'') || c.is_control());
    if plain {
        format!("\"{}\"", path.replace('%', "%%"))
    } else {
        format!("/bin/sh -c \"exec \\\"$$0\\\"\" {}", systemd_arg(path))
    }
}

/// Text for an XML (plist) string element.
pub fn xml_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

/// The systemd unit for `cryod` at `exe`.
pub fn render_systemd(exe: &Path) -> String {
    SYSTEMD_TEMPLATE.replace("{{exec_start}}", &exec_start(&exe.to_string_lossy()))
}

/// The LaunchAgent for `cryod` at `exe`, logging under `logs`.
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
}
