//! Attachments from the hub: uploaded into the chamber's
//! `messages/attachments/` (the folder the sync bridges use), linked from the
//! message that goes with them, and served back to the page.
//!
//! An upload is capped at the bridges' own size, counted against the
//! chamber's quota (`[hub] attachment_quota_mb`), stored under a fresh name
//! made of safe characters only, and written only if the folder is the
//! chamber's own (not a link elsewhere). A file is served only from that
//! folder, as a download (`Content-Disposition: attachment`), typed as an
//! image only when its bytes are PNG, JPEG, GIF or WebP (never SVG or HTML),
//! else `application/octet-stream`, in a sandbox of its own.

use std::path::PathBuf;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cryo_sync::attach;
use serde::Deserialize;
use serde_json::json;

use super::{ApiError, Hub, Who};
use crate::error::Error;

/// Largest upload: what the bridges carry.
pub const MAX_UPLOAD: usize = attach::MAX_ATTACHMENT_BYTES;

#[derive(Deserialize)]
pub(super) struct Upload {
    /// The file's own name, for the stored name and the link's text.
    #[serde(default)]
    name: String,
}

/// The image types served as images, by their first bytes.
fn image_type(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// `POST /api/chambers/NAME/attachments?name=FILE` with the file as the
/// body: stores it, answering `{file, name, size, type, markdown}` (the
/// link to put in the message).
pub(super) async fn upload(
    State(hub): State<Hub>,
    axum::Extension(role): Who,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<Upload>,
    body: Bytes,
) -> Response {
    let v = match hub.chamber_for(&role, &name).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    if body.len() > MAX_UPLOAD {
        return too_large(format!("an attachment is at most {} MiB", MAX_UPLOAD >> 20));
    }
    if body.is_empty() {
        return ApiError(Error::Invalid("an empty file".into())).into_response();
    }
    if let Some(refused) = hub.over_rate(&role, true) {
        return refused;
    }
    let quota = hub.daemon.config().hub.attachment_quota_mb.saturating_mul(1 << 20);
    let now = hub.daemon.now();
    let prefix = format!("{}-{}", now.format("%Y%m%dT%H%M%S"), crate::base::random::hex(2));
    let stored = attach::safe_name(if q.name.is_empty() { "file" } else { &q.name }, &prefix);
    let root = PathBuf::from(&v.record.path);
    let kind = image_type(&body);
    let size = body.len();
    let _one_at_a_time = hub.uploads.lock().await;
    let file = stored.clone();
    // Nothing on the way is followed if a link: a folder that is one is
    // not the chamber's own.
    let wrote = crate::chamber::blocking(move || -> Result<bool, Error> {
        let refused = |e: crate::chamber::FileError| match e.is_planted() {
            true => Error::Precondition(format!("{e}: attachments go only into the chamber's own folder")),
            false => Error::Internal(format!("cannot store the attachment: {e}")),
        };
        if attach::used(&root).map_err(refused)? + size as u64 > quota {
            return Ok(false);
        }
        attach::store(&root, &file, &body).map_err(refused)?;
        Ok(true)
    })
    .await;
    match wrote {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => {
            return too_large(format!(
                "over the chamber's attachment quota ({} MiB; `[hub] attachment_quota_mb` in cryod.toml)",
                quota >> 20
            ));
        }
        Ok(Err(e)) | Err(e) => return ApiError(e).into_response(),
    }
    let rel = format!("{}/{stored}", attach::DIR);
    let label: String = q.name.chars().filter(|c| !"[]()\n\r".contains(*c)).collect();
    let label = if label.trim().is_empty() { stored.clone() } else { label };
    let markdown = format!("{}[{label}]({rel})", if kind.is_some() { "!" } else { "" });
    let kind = kind.unwrap_or("application/octet-stream");
    axum::Json(json!({ "file": rel, "name": stored, "size": size, "type": kind, "markdown": markdown })).into_response()
}

fn too_large(why: String) -> Response {
    super::refuse(StatusCode::PAYLOAD_TOO_LARGE, &why)
}

/// `GET /api/chambers/NAME/attachments/FILE`: the file, as a download.
pub(super) async fn fetch(
    State(hub): State<Hub>,
    axum::Extension(role): Who,
    UrlPath((name, file)): UrlPath<(String, String)>,
) -> Response {
    let v = match hub.chamber_for(&role, &name).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let not_found = || ApiError(Error::NotFound(format!("no attachment {file:?}"))).into_response();
    if file.contains('/') || file.starts_with('.') {
        return not_found();
    }
    let root = PathBuf::from(&v.record.path);
    let link = format!("{}/{file}", attach::DIR);
    let Ok(Some((_, bytes))) = crate::chamber::blocking(move || attach::uploadable(&root, &link)).await else {
        return not_found();
    };
    let kind = image_type(&bytes).unwrap_or("application/octet-stream");
    let mut r = (StatusCode::OK, bytes).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    let disposition = format!("attachment; filename=\"{file}\"");
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&disposition).unwrap_or(HeaderValue::from_static("attachment")),
    );
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'none'; sandbox"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::image_type;

    #[test]
    fn only_raster_images_are_images() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(image_type(b"\xff\xd8\xff\xe0"), Some("image/jpeg"));
        assert_eq!(image_type(b"GIF89a.."), Some("image/gif"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(image_type(b"<svg xmlns=\"http://www.w3.org/2000/svg\">"), None);
        assert_eq!(image_type(b"<html><script>"), None);
    }
}
