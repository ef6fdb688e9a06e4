//! `chamber diff`: what a `[git]` chamber's branch, or one session, changed.

use cryo_proto::v1 as pb;

use super::ask;
use crate::Ctx;
use crate::client::Result;
use crate::output;

pub(super) async fn diff(ctx: &Ctx, chamber: Option<String>, session: Option<u64>, stat: bool) -> Result<()> {
    let session = session.unwrap_or(0);
    let d = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_diff(pb::ChamberDiffRequest { chamber: Some(r), session }).await
    })
    .await?;
    if ctx.json {
        output::json(&cryo_proto::json::diff_json(&d));
        return Ok(());
    }
    let what = match (d.session, d.base.as_str()) {
        (0, "") => format!("branch {}", d.branch),
        (0, base) => format!("branch {} since it left {base}", d.branch),
        (n, _) => format!("session {n} on branch {}", d.branch),
    };
    let short = |s: &str| s.chars().take(7).collect::<String>();
    outln!(
        "{what}: {} commit{} ({}..{}), {} file{} changed, +{} -{}",
        d.commits,
        if d.commits == 1 { "" } else { "s" },
        short(&d.from),
        short(&d.to),
        d.files.len(),
        if d.files.len() == 1 { "" } else { "s" },
        d.additions,
        d.deletions
    );
    let width = d.files.iter().map(|f| f.path.chars().count()).max().unwrap_or(0);
    for f in &d.files {
        let counts = if f.binary { "binary".to_string() } else { format!("+{} -{}", f.additions, f.deletions) };
        outln!(" {:width$}  {counts}", cryo_proto::escape_controls(&f.path));
    }
    if !stat && !d.patch.is_empty() {
        outln!();
        // Agent-written text: no terminal controls reach the screen.
        out!("{}", cryo_proto::escape_controls(&d.patch));
        if d.cut {
            outln!("(the patch is cut at 4 MiB: see the rest with git in the chamber's worktree)");
        }
    }
    Ok(())
}
