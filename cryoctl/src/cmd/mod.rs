//! One module per command group.

pub mod chamber;
pub mod daemon;
pub mod demo;
pub mod doctor;

/// `cryoctl hub`: the URL carries the token in its fragment, which a browser
/// never sends to a server (so it never lands in a log).
pub async fn hub(ctx: crate::Ctx) -> crate::client::Result<()> {
    let mut c = crate::client::control(&ctx.socket).await?;
    let r = c.hub(cryo_proto::v1::HubRequest {}).await?.into_inner();
    if ctx.json {
        crate::output::json(&serde_json::json!({
            "url": r.url, "token": r.token, "up": r.up,
            "error": if r.error.is_empty() { serde_json::Value::Null } else { r.error.clone().into() },
        }));
        return Ok(());
    }
    if r.up {
        println!("{}#token={}", r.url, r.token);
    } else {
        println!("the hub is not running: {}", r.error);
    }
    Ok(())
}
