//! `tomus fs ...`: the hierarchical namespace from the command line.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::json;
use tomus_client::{Client, CreateOptions};
use tomus_wire::{EntryKind, FsEntry};

use crate::size::{format_size, parse_size};
use crate::transfer::{copy_range, fill_writer, open_input};

#[derive(Subcommand)]
pub enum FsCommand {
    /// Upload LOCAL (or stdin with `-`) to PATH; an existing file gets it as a new version.
    /// Prints the version (and, with --append, the offset it landed at).
    Put {
        /// Local file, or `-` for stdin.
        local: PathBuf,
        /// Destination path in tomus (missing parent directories are created).
        path: String,
        /// Append to the file instead of replacing its content (concurrent appends are safe).
        #[arg(long)]
        append: bool,
        /// Chunk size of a new file.
        #[arg(long, default_value = "4MiB", value_parser = parse_size)]
        chunk_size: u64,
        /// Replicas of a new file's chunks and metadata.
        #[arg(long, default_value_t = 1)]
        replication: u32,
    },
    /// Download PATH to LOCAL (default: stdout).
    Get {
        path: String,
        /// Local file to write; `-` or nothing: stdout.
        local: Option<PathBuf>,
        /// Version to read (default: the latest).
        #[arg(long)]
        version: Option<u64>,
    },
    /// Print a file's bytes (or a range of them).
    Cat {
        path: String,
        #[arg(long)]
        version: Option<u64>,
        #[arg(long, default_value = "0", value_parser = parse_size)]
        offset: u64,
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
    },
    /// List a directory (default: the root).
    Ls {
        #[arg(default_value = "/")]
        path: String,
        /// Everything below the directory.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Show a file or directory: kind, size, version, blob.
    Stat { path: String },
    /// Make a directory.
    Mkdir {
        path: String,
        /// Also make missing parents; an existing directory is fine.
        #[arg(short, long)]
        parents: bool,
    },
    /// Remove a file, or a directory with -r.
    Rm {
        path: String,
        #[arg(short, long)]
        recursive: bool,
    },
    /// Move (rename) a file or a directory tree; an existing file at DST is replaced.
    Mv { src: String, dst: String },
}

fn entry_json(e: &FsEntry) -> serde_json::Value {
    match (&e.kind, &e.blob) {
        (EntryKind::File, Some(b)) => json!({
            "path": format!("/{}", e.path), "type": "file", "size": b.size, "version": b.latest,
            "blob": b.id, "chunk_size": b.chunk_size, "replication": b.replication,
            "created_ms": e.created_ms, "modified_ms": b.modified_ms,
        }),
        _ => {
            json!({"path": format!("/{}", e.path), "type": "directory", "created_ms": e.created_ms})
        }
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

pub async fn run(client: &Client, json_out: bool, cmd: FsCommand) -> Result<()> {
    let ns = client.namespace();
    match cmd {
        FsCommand::Put {
            local,
            path,
            append,
            chunk_size,
            replication,
        } => {
            let options = CreateOptions {
                chunk_size,
                replication,
                exclusive: false,
            };
            let (_, blob) = ns.create(&path, options).await?;
            let (input, size) = open_input(Some(&local))?;
            let mut writer = blob.writer();
            fill_writer(input, size, &mut writer).await?;
            let bytes = writer.len();
            let (version, offset) = if append {
                match writer.commit_append().await? {
                    Some(landed) => landed,
                    None => (blob.latest().await?, blob.size(None).await?),
                }
            } else {
                (writer.commit_replace().await?, 0)
            };
            if json_out {
                outln!(
                    "{}",
                    json!({"path": path, "version": version, "offset": offset, "size": bytes})
                )?;
            } else if append {
                outln!("{version} {offset}")?;
            } else {
                outln!("{version}")?;
            }
        }
        FsCommand::Get {
            path,
            local,
            version,
        } => {
            let (_, blob) = ns.open(&path).await?;
            match local {
                Some(p) if p.as_os_str() != "-" => {
                    let mut f = std::fs::File::create(&p)
                        .with_context(|| format!("cannot create {}", p.display()))?;
                    copy_range(&blob, version, 0, None, &mut f).await?;
                }
                _ => {
                    copy_range(&blob, version, 0, None, &mut std::io::stdout().lock()).await?;
                }
            }
        }
        FsCommand::Cat {
            path,
            version,
            offset,
            size,
        } => {
            let (_, blob) = ns.open(&path).await?;
            copy_range(&blob, version, offset, size, &mut std::io::stdout().lock()).await?;
        }
        FsCommand::Ls { path, recursive } => {
            let entry = ns.stat(&path).await?;
            let entries = match entry.kind {
                EntryKind::File => vec![entry],
                EntryKind::Dir if recursive => ns.walk(&path).await?,
                EntryKind::Dir => ns.list(&path).await?,
            };
            if json_out {
                let rows: Vec<_> = entries.iter().map(entry_json).collect();
                outln!("{}", serde_json::Value::Array(rows))?;
            } else {
                entries.iter().try_for_each(print_entry)?;
            }
        }
        FsCommand::Stat { path } => {
            let e = ns.stat(&path).await?;
            if json_out {
                outln!("{}", entry_json(&e))?;
            } else {
                match &e.blob {
                    Some(b) => outln!(
                        "/{}: file, {} bytes at version {}, blob {} (chunk {}, replication {})",
                        e.path,
                        b.size,
                        b.latest,
                        b.id,
                        format_size(b.chunk_size),
                        b.replication
                    ),
                    None => outln!("/{}: directory", e.path),
                }?
            }
        }
        FsCommand::Mkdir { path, parents } => {
            let e = ns.mkdir(&path, parents).await?;
            if json_out {
                outln!("{}", entry_json(&e))?;
            }
        }
        FsCommand::Rm { path, recursive } => ns.delete(&path, recursive).await?,
        FsCommand::Mv { src, dst } => ns.rename(&src, &dst).await?,
    }
    Ok(())
}
