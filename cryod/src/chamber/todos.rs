//! `todo.json` on disk, plus the id high-water mark kept in `.cryo/state.json`
//! (so an id is never reused, even after the highest one is removed).

use std::path::{Path, PathBuf};

use chrono_tz::Tz;
use cryo_core::todo::{self, TodoList};

use super::write_atomic;

pub fn todo_path(dir: &Path) -> PathBuf {
    dir.join("todo.json")
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join(".cryo/state.json")
}

fn high_water(dir: &Path) -> u64 {
    std::fs::read(state_path(dir))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("todo_high_water").and_then(|h| h.as_u64()))
        .unwrap_or(0)
}

/// Reads the list. A missing file is an empty list; a file that does not parse
/// is an error naming it (and is never overwritten).
pub fn load(dir: &Path, tz: Tz) -> Result<TodoList, String> {
    let path = todo_path(dir);
    let text = match std::fs::read(&path) {
        Ok(b) => String::from_utf8(b).map_err(|_| format!("{}: not UTF-8 text", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: cannot read: {e}", path.display())),
    };
    todo::parse_file(&text, tz, high_water(dir)).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes the list (and the high-water mark) atomically.
pub fn save(dir: &Path, list: &TodoList, tz: Tz) -> std::io::Result<()> {
    if list.high_water > high_water(dir) {
        std::fs::create_dir_all(dir.join(".cryo"))?;
        let state = serde_json::json!({ "todo_high_water": list.high_water });
        write_atomic(&state_path(dir), format!("{state}\n").as_bytes())?;
    }
    write_atomic(&todo_path(dir), todo::render_file(list, tz).as_bytes())
}
