//! What `tomus fs` shows about the namespace: listings, `stat`, `du` and `versions`, as text
//! for people and as JSON with `--json`.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::{json, Value};
use tomus_client::Namespace;
use tomus_wire::{EntryKind, FsEntry, VersionState};

use super::paths::{display, join, relative, resolve, resolve_file};
use crate::ops_cmd::describe;
use crate::size::format_size;

pub fn entry_json(e: &FsEntry) -> Value {
    match (&e.kind, &e.blob) {
        (EntryKind::File, Some(b)) => json!({
            "path": display(&e.path), "type": "file", "size": b.size, "version": b.latest,
            "blob": b.id, "chunk_size": b.chunk_size, "replication": b.replication,
            "created_ms": e.created_ms, "modified_ms": b.modified_ms,
        }),
        _ => json!({"path": display(&e.path), "type": "directory", "created_ms": e.created_ms}),
    }
}

fn print_entry(e: &FsEntry) -> std::io::Result<()> {
    match (&e.kind, &e.blob) {
        (EntryKind::File, Some(b)) => {
            outln!("{:>12}  v{:<6}  /{}", format_size(b.size), b.latest, e.path)
        }
        _ => outln!("{:>12}  {:<7}  /{}/", "-", "dir", e.path),
    }
}

/// `ls [-r] PATH`: a file is listed as itself, a directory by its children (everything below
/// it with `-r`); a pattern lists each match that way.
pub async fn ls(ns: &Namespace, json_out: bool, arg: &str, recursive: bool) -> Result<()> {
    let mut entries = Vec::new();
    for entry in resolve(ns, arg).await? {
        match entry.kind {
            EntryKind::File | EntryKind::Registered => entries.push(entry),
            EntryKind::Dir if recursive => entries.extend(ns.walk(&entry.path).await?),
            EntryKind::Dir => entries.extend(ns.list(&entry.path).await?),
        }
    }
    // Registered files are shown with their holders, from their records.
    let mut rows = Vec::new();
    for e in &entries {
        let record = match e.kind {
            EntryKind::Registered => Some(ns.client().registered(&e.path).await?),
            _ => None,
        };
        rows.push((e, record));
    }
    if json_out {
        let rows: Vec<_> = rows
            .iter()
            .map(|(e, r)| match r {
                Some(r) => super::registered::file_json(r),
                None => entry_json(e),
            })
            .collect();
        outln!("{}", Value::Array(rows))?;
    } else {
        for (e, r) in &rows {
            match r {
                Some(r) => outln!("{}", super::registered::line(r))?,
                None => print_entry(e)?,
            }
        }
    }
    Ok(())
}

pub async fn stat(ns: &Namespace, json_out: bool, arg: &str) -> Result<()> {
    for e in resolve(ns, arg).await? {
        // The storage class is asked of the manager for files only (one request each).
        let storage = match &e.blob {
            Some(b) => Some(ns.client().storage_class(b.id).await?),
            None => None,
        };
        if json_out {
            let mut v = entry_json(&e);
            if let (Some(class), Some(map)) = (storage, v.as_object_mut()) {
                map.insert("storage".into(), class.name().into());
            }
            outln!("{v}")?;
            continue;
        }
        match &e.blob {
            Some(b) => outln!(
                "/{}: file, {} bytes at version {}, blob {} (chunk {}, replication {}, {} class)",
                e.path,
                b.size,
                b.latest,
                b.id,
                format_size(b.chunk_size),
                b.replication,
                storage.map_or("disk", |c| c.name())
            )?,
            None => outln!("/{}: directory", e.path)?,
        }
    }
    Ok(())
}

/// Bytes (of each file's latest version) and counts below one path.
#[derive(Default)]
struct Usage {
    bytes: u64,
    files: u64,
    dirs: u64,
}

impl Usage {
    fn add(&mut self, e: &FsEntry) {
        match &e.blob {
            Some(b) => {
                self.bytes += b.size;
                self.files += 1;
            }
            None => self.dirs += 1,
        }
    }
}

/// `du [-s] PATH`: the bytes and files below each directory child of PATH (or of PATH itself
/// with `-s`), counting each file's latest version.
pub async fn du(ns: &Namespace, json_out: bool, arg: &str, summary: bool) -> Result<()> {
    let mut rows: Vec<(String, Usage)> = Vec::new();
    for entry in resolve(ns, arg).await? {
        let below = match entry.kind {
            EntryKind::File | EntryKind::Registered => Vec::new(),
            EntryKind::Dir => ns.walk(&entry.path).await?,
        };
        if summary || entry.kind == EntryKind::File {
            let mut u = Usage::default();
            if entry.kind == EntryKind::File {
                u.add(&entry);
            }
            below.iter().for_each(|e| u.add(e));
            rows.push((entry.path, u));
            continue;
        }
        // One row per child, each with everything below it.
        let mut by_child: BTreeMap<String, Usage> = BTreeMap::new();
        for e in &below {
            let rel = relative(&entry.path, &e.path);
            let child = rel.split('/').next().unwrap_or(rel);
            let key = join(&entry.path, child);
            // A child directory is the row itself, not one of the directories below it.
            let counted = e.path != key || e.kind == EntryKind::File;
            let u = by_child.entry(key).or_default();
            if counted {
                u.add(e);
            }
        }
        rows.extend(by_child);
    }
    if json_out {
        let rows: Vec<_> = rows
            .iter()
            .map(|(p, u)| json!({"path": display(p), "bytes": u.bytes, "files": u.files, "dirs": u.dirs}))
            .collect();
        outln!("{}", Value::Array(rows))?;
    } else {
        for (p, u) in rows {
            let noun = if u.files == 1 { "file " } else { "files" };
            outln!(
                "{:>12}  {:>8} {noun}  {}",
                format_size(u.bytes),
                u.files,
                display(&p)
            )?;
        }
    }
    Ok(())
}

/// `versions PATH`: every version of a file that its retention still keeps, with its size and
/// publication time.
pub async fn versions(ns: &Namespace, json_out: bool, arg: &str) -> Result<()> {
    let entry = resolve_file(ns, arg).await?;
    let (_, blob) = ns.open(&entry.path).await?;
    let retention = entry.blob.as_ref().map(|b| b.retention).unwrap_or_default();
    let list = blob.versions().await?;
    // Version 0 is the empty file as created, before anything was written.
    let shown: Vec<_> = list.versions.iter().filter(|v| v.version > 0).collect();
    if json_out {
        let rows: Vec<_> = shown
            .iter()
            .map(|v| {
                json!({"version": v.version, "size": v.size, "published_ms": v.published_ms,
                       "append": v.append, "offset": v.span.offset, "written": v.span.size,
                       "state": state_name(v.state)})
            })
            .collect();
        let aborted: Vec<_> = list
            .aborted
            .iter()
            .map(|(a, b)| json!({"from": a, "to": b}))
            .collect();
        let out = json!({"path": display(&entry.path), "blob": blob.id(),
                         "retention": describe(retention), "versions": rows, "aborted": aborted});
        outln!("{out}")?;
        return Ok(());
    }
    outln!(
        "{}: blob {}, {}",
        display(&entry.path),
        blob.id(),
        describe(retention)
    )?;
    outln!(
        "{:>8}  {:>12}  {:<20}  WRITE",
        "VERSION",
        "SIZE",
        "PUBLISHED (UTC)"
    )?;
    for v in shown {
        let what = match (v.append, v.state) {
            (_, VersionState::Pending) => "pending".to_string(),
            (_, VersionState::Aborted) => "aborted".to_string(),
            (true, _) => format!(
                "append of {} at {}",
                format_size(v.span.size),
                v.span.offset
            ),
            (false, _) => format!("{} at {}", format_size(v.span.size), v.span.offset),
        };
        outln!(
            "{:>8}  {:>12}  {:<20}  {what}",
            v.version,
            format_size(v.size),
            utc(v.published_ms)
        )?;
    }
    Ok(())
}

fn state_name(s: VersionState) -> &'static str {
    match s {
        VersionState::Pending => "pending",
        VersionState::Published => "published",
        VersionState::Aborted => "aborted",
    }
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of Unix milliseconds; `-` for 0 (not published).
pub fn utc(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    tomus_wire::human::utc(ms)
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0), "-");
        assert_eq!(super::utc(1_000), "1970-01-01 00:00:01");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(super::utc(1_795_433_553_000), "2026-11-23 11:32:33");
    }
}
