//! What a `[git]` chamber's branch, or one session, changed: read from
//! cryod's copy alone.

use super::{Failed, Git, Place, count, last_base, rev};

/// The longest patch a diff shows (the rest is cut, and said so).
pub const MAX_PATCH: usize = 4 * 1024 * 1024;

/// One file of a diff.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileChange {
    pub path: String,
    /// `None` for a binary file.
    pub additions: Option<u64>,
    pub deletions: Option<u64>,
}

/// What changed between two commits of the branch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diff {
    pub branch: String,
    pub base: Option<String>,
    pub session: Option<u64>,
    pub from: String,
    pub to: String,
    pub commits: u64,
    pub files: Vec<FileChange>,
    pub additions: u64,
    pub deletions: u64,
    pub patch: String,
    /// The patch was longer than [`MAX_PATCH`] and is cut there.
    pub cut: bool,
}

pub(super) async fn numstat(git: &Git, p: &Place<'_>, from: &str, to: &str) -> Result<Vec<FileChange>, Failed> {
    let out = git.trusted(&p.store, &["diff", "--numstat", "-z", "--no-renames", from, to, "--"], false).await?;
    Ok(parse_numstat(&out.stdout))
}

/// `git diff --numstat -z --no-renames`: `ADDED\tDELETED\tPATH\0` each
/// (`-` for a binary file's counts).
fn parse_numstat(text: &str) -> Vec<FileChange> {
    text.split('\0')
        .filter(|r| !r.is_empty())
        .filter_map(|r| {
            let mut parts = r.splitn(3, '\t');
            let (a, d, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some(FileChange { path: path.to_string(), additions: a.parse().ok(), deletions: d.parse().ok() })
        })
        .collect()
}

/// Session `session`'s changes, or (none) the branch's since it left the
/// base.
pub async fn diff(git: &Git, p: &Place<'_>, session: Option<u64>) -> Result<Diff, Failed> {
    if !p.store.join("HEAD").is_file() {
        return Err(Failed::Missing("no session has worked in the repository yet".into()));
    }
    let branch = p.branch();
    let local = format!("refs/heads/{branch}");
    let to_branch = rev(git, p, &local).await?;
    let (from, to, base) = match session {
        Some(n) => {
            let at = |end: &str| format!("refs/cryo/sessions/{n}/{end}");
            let gone = || Failed::Unrecorded { session: n };
            let from = rev(git, p, &at("start")).await?.ok_or_else(gone)?;
            let to = rev(git, p, &at("end")).await?.ok_or_else(gone)?;
            (from, to, None)
        }
        None => {
            let to = to_branch.ok_or_else(|| Failed::Missing(format!("the branch {branch} is not made yet")))?;
            let b = last_base(p);
            let seen = match &b {
                Some(b) => rev(git, p, &b.local).await?,
                None => None,
            };
            let from = match seen {
                Some(tip) => git.trusted(&p.store, &["merge-base", &tip, &to], false).await?.stdout.trim().to_string(),
                None => to.clone(),
            };
            (from, to, b.map(|b| b.name))
        }
    };
    let files = numstat(git, p, &from, &to).await?;
    let out = git
        .trusted(
            &p.store,
            &["diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", &from, &to, "--"],
            false,
        )
        .await?;
    let mut patch = out.stdout;
    let cut = patch.len() > MAX_PATCH;
    if cut {
        let mut at = MAX_PATCH;
        while !patch.is_char_boundary(at) {
            at -= 1;
        }
        patch.truncate(at);
    }
    Ok(Diff {
        commits: count(git, p, &from, &to).await?,
        additions: files.iter().filter_map(|f| f.additions).sum(),
        deletions: files.iter().filter_map(|f| f.deletions).sum(),
        branch,
        base,
        session,
        from,
        to,
        files,
        patch,
        cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numstat_lines() {
        let text = "3\t1\tsrc/a.rs\0-\t-\timg.png\0";
        let files = parse_numstat(text);
        assert_eq!(files.len(), 2);
        assert_eq!(files[0], FileChange { path: "src/a.rs".into(), additions: Some(3), deletions: Some(1) });
        assert_eq!(files[1].additions, None);
    }
}
