//! What an install puts beside the binaries: man pages (clap_mangen, from
//! the same definitions as `--help`) and the shells' completion scripts,
//! in the user's own folders (no root needed).

use std::path::{Path, PathBuf};

/// Writes a page for `cmd` and each of its subcommands into `dir`
/// (`cryoctl.1`, `cryoctl-chamber.1`, `cryoctl-chamber-add.1`, ...);
/// returns the files written.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    page(cmd, &["cryoctl".to_string()], dir, &mut written)?;
    Ok(written)
}

/// The page of `cmd`, reached as `words` (`cryoctl chamber add`), then its
/// subcommands'.
fn page(cmd: clap::Command, words: &[String], dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let name = words.join("-");
    let cmd = cmd.display_name(name.clone()).bin_name(words.join(" "));
    let mut bytes = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut bytes)?;
    let path = dir.join(format!("{name}.1"));
    cryo_files::write_file(&path, &bytes, cryo_files::NewFile::DURABLE).map_err(std::io::Error::from)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let mut next = words.to_vec();
        next.push(sub.get_name().to_string());
        page(sub.clone(), &next, dir, written)?;
    }
    Ok(())
}

/// Where each shell looks for a user's completions, and where man looks
/// for a user's pages (`$XDG_DATA_HOME`, else `~/.local/share`; fish's
/// under `$XDG_CONFIG_HOME`).
pub struct Places {
    pub man: PathBuf,
    pub shells: Vec<(&'static str, PathBuf)>,
}

pub fn places() -> Places {
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let data = var("XDG_DATA_HOME").unwrap_or_else(|| home.join(".local/share"));
    let config = var("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
    Places {
        man: data.join("man/man1"),
        shells: vec![
            ("bash", data.join("bash-completion/completions/cryoctl")),
            ("zsh", data.join("zsh/site-functions/_cryoctl")),
            ("fish", config.join("fish/completions/cryoctl.fish")),
        ],
    }
}

/// Writes the man pages and the completion scripts where [`places`] says;
/// returns one line saying where (or what failed: an install goes on).
pub fn install(cmd: clap::Command) -> String {
    let p = places();
    let mut failed = Vec::new();
    if let Err(e) = man_pages(cmd, &p.man) {
        failed.push(format!("man pages in {}: {e}", p.man.display()));
    }
    for (shell, path) in &p.shells {
        let written = crate::complete::registration(shell)
            .ok_or_else(|| std::io::Error::other("cryoctl printed no script"))
            .and_then(|bytes| {
                std::fs::create_dir_all(path.parent().expect("a folder"))?;
                cryo_files::write_file(path, &bytes, cryo_files::NewFile::DURABLE)
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        if let Err(e) = written {
            failed.push(format!("{shell} completions in {}: {e}", path.display()));
        }
    }
    if failed.is_empty() {
        format!("man pages in {} (`man cryoctl`); bash, zsh and fish completions", p.man.display())
    } else {
        format!("could not write {}", failed.join("; "))
    }
}

/// Removes what [`install`] wrote (what is missing is no error).
pub fn uninstall() {
    let p = places();
    if let Ok(entries) = std::fs::read_dir(&p.man) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name == "cryoctl.1" || (name.starts_with("cryoctl-") && name.ends_with(".1")) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    for (_, path) in &p.shells {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_page_for_each_command() {
        let dir = tempfile::tempdir().unwrap();
        let cmd = clap::Command::new("x")
            .about("the tool")
            .subcommand(clap::Command::new("chamber").about("chambers").subcommand(clap::Command::new("add")));
        let written = super::man_pages(cmd, dir.path()).unwrap();
        let names: Vec<String> = written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into()).collect();
        assert_eq!(names, ["cryoctl.1", "cryoctl-chamber.1", "cryoctl-chamber-add.1"]);
        let top = std::fs::read_to_string(dir.path().join("cryoctl.1")).unwrap();
        assert!(top.contains(".TH cryoctl") && top.contains("the tool"), "{top}");
        let add = std::fs::read_to_string(dir.path().join("cryoctl-chamber-add.1")).unwrap();
        assert!(add.contains("cryoctl chamber add"), "{add}");
    }
}
