//! `tomus fs register` and `tomus fs persist`, and reading registered files (workflows).
//!
//! `register LOCAL PATH` shares a file of this host in O(1): a provider of this host
//! hard-links it into its data directory (same file system required, nothing is copied) and
//! the manager records it. `get`/`cat` of a registered file fetch it from a holder (checksum
//! verified, failing over to the next holder); `persist PATH` turns it into an ordinary
//! striped, replicated file at the same path.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tomus_client::registered::{FetchMode, RegisterOptions};
use tomus_client::{Client, CreateOptions, Namespace};
use tomus_wire::{Error, FsEntry, RegisteredFile};

use super::paths::display;
use crate::size::format_size;

pub fn no_copy(path: &str) -> Error {
    Error::invalid(format!(
        "{} is a registered file: `tomus fs persist` it before copying it",
        display(path)
    ))
}

pub fn file_json(f: &RegisteredFile) -> Value {
    let holders: Vec<Value> = f
        .holders
        .iter()
        .map(|h| json!({"provider": h.provider, "addr": h.addr, "alive": h.alive}))
        .collect();
    json!({
        "path": display(&f.path), "type": "registered", "size": f.size,
        "checksum": f.checksum.map(|c| format!("{c:08x}")), "holders": holders,
        "hints": f.hints.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "created_ms": f.created_ms,
    })
}

/// One `ls` line: size, `reg`, path and holders.
pub fn line(f: &RegisteredFile) -> String {
    let holders: Vec<String> = f
        .holders
        .iter()
        .map(|h| {
            if h.alive {
                h.addr.clone()
            } else {
                format!("{} (down)", h.addr)
            }
        })
        .collect();
    format!(
        "{:>12}  {:<7}  /{}  holders: {}",
        format_size(f.size),
        "reg",
        f.path,
        holders.join(", ")
    )
}

pub async fn register(
    client: &Client,
    json_out: bool,
    local: &Path,
    path: &str,
    provider: Option<String>,
    hints: Vec<(String, String)>,
) -> Result<()> {
    let options = RegisterOptions { provider, hints };
    let f = client.register_file(local, path, options).await?;
    if json_out {
        outln!("{}", file_json(&f))?;
    } else {
        outln!("{}", display(&f.path))?;
    }
    Ok(())
}

/// Fetches a registered file to `target`; a failed fetch leaves no partial file behind.
pub async fn get_file(client: &Client, entry: &FsEntry, target: &Path) -> Result<Value> {
    match client
        .fetch_registered(&entry.path, target, FetchMode::Direct, None)
        .await
    {
        Ok(report) => Ok(json!({"path": display(&entry.path),
                               "local": target.display().to_string(), "size": report.bytes})),
        Err(e) => {
            let _ = std::fs::remove_file(target);
            Err(e.into())
        }
    }
}

/// Writes a registered file to stdout (fetched through a temporary file: the fetch writes
/// pieces at their offsets).
pub async fn cat(client: &Client, entry: &FsEntry) -> Result<()> {
    let tmp = temp_path("cat");
    let fetched = client
        .fetch_registered(&entry.path, &tmp, FetchMode::Direct, None)
        .await;
    let copied = fetched.map_err(anyhow::Error::from).and_then(|_| {
        let mut f = std::fs::File::open(&tmp)?;
        std::io::copy(&mut f, &mut std::io::stdout().lock())?;
        Ok(())
    });
    let _ = std::fs::remove_file(&tmp);
    copied
}

/// `persist PATH`: the registered file becomes an ordinary file (striped, replicated) at
/// the same path; its holders keep their copies until they are collected.
pub async fn persist(
    ns: &Namespace,
    json_out: bool,
    path: &str,
    options: CreateOptions,
) -> Result<()> {
    let client = ns.client();
    let file = client.registered(path).await?;
    let tmp = temp_path("persist");
    let staged = format!("{}.persisting-{}", file.path, std::process::id());
    let result = async {
        client
            .fetch_registered(&file.path, &tmp, FetchMode::Direct, None)
            .await?;
        super::tree::put_file(ns, &tmp, &staged, false, options).await?;
        ns.rename(&staged, &file.path)
            .await
            .with_context(|| format!("publishing {}", display(&file.path)))?;
        anyhow::Ok(())
    }
    .await;
    let _ = std::fs::remove_file(&tmp);
    result?;
    let entry = ns.stat(&file.path).await?;
    if json_out {
        outln!("{}", super::info::entry_json(&entry))?;
    } else {
        outln!("{}", display(&entry.path))?;
    }
    Ok(())
}

fn temp_path(what: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("tomus-{what}-{}-{nanos}", std::process::id()))
}
