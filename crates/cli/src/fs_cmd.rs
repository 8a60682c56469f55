//! `tomus fs ...`: the hierarchical namespace from the command line.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::json;
use tomus_client::{Blob, Client, CommitOptions, CreateOptions};
use tomus_wire::{EntryKind, ErrorKind, FsEntry};

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

fn print_entry(e: &FsEntry) {
    match (&e.kind, &e.blob) {
        (EntryKind::File, Some(b)) => {
            println!("{:>12}  v{:<6}  /{}", format_size(b.size), b.latest, e.path)
        }
        _ => println!("{:>12}  {:<7}  /{}/", "-", "dir", e.path),
    }
}

/// Streams `input` into one new version of `blob` (a replacement, or an append): returns the
/// version, where the data landed and how many bytes it has.
async fn put_into(
    blob: &Blob,
    input: Box<dyn std::io::Read>,
    size: Option<u64>,
    append: bool,
) -> Result<(u64, u64, u64)> {
    let mut writer = blob.writer();
    fill_writer(input, size, &mut writer).await?;
    let bytes = writer.len();
    if !append {
        return Ok((writer.commit_replace().await?, 0, bytes));
    }
    if bytes == 0 {
        // Nothing to append: a new file still gets its (empty) first version, unless a
        // concurrent writer gave it content meanwhile.
        let empty = CommitOptions {
            expect_size: Some(0),
            ..CommitOptions::default()
        };
        if blob.latest().await? == 0 {
            match writer.commit_replace_with(&empty).await {
                Ok(info) => return Ok((info.version, 0, 0)),
                Err(e) if e.kind == ErrorKind::PreconditionFailed => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok((blob.latest().await?, blob.size(None).await?, 0));
    }
    match writer.commit_append().await? {
        Some((version, offset)) => Ok((version, offset, bytes)),
        None => Ok((blob.latest().await?, blob.size(None).await?, bytes)),
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
            // Checked before the cluster is touched: a bad input leaves nothing behind.
            let (input, size) = open_input(Some(&local))?;
            let options = CreateOptions {
                chunk_size,
                replication,
                exclusive: false,
            };
            let (entry, blob) = ns.create(&path, options).await?;
            let (version, offset, bytes) = match put_into(&blob, input, size, append).await {
                Ok(put) => put,
                Err(e) => {
                    // A new file appears only with its first version: give it up now.
                    ns.abandon(&entry).await;
                    return Err(e);
                }
            };
            if json_out {
                println!(
                    "{}",
                    json!({"path": path, "version": version, "offset": offset, "size": bytes})
                );
            } else if append {
                println!("{version} {offset}");
            } else {
                println!("{version}");
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
                println!("{}", serde_json::Value::Array(rows));
            } else {
                entries.iter().for_each(print_entry);
            }
        }
        FsCommand::Stat { path } => {
            let e = ns.stat(&path).await?;
            if json_out {
                println!("{}", entry_json(&e));
            } else {
                match &e.blob {
                    Some(b) => println!(
                        "/{}: file, {} bytes at version {}, blob {} (chunk {}, replication {})",
                        e.path,
                        b.size,
                        b.latest,
                        b.id,
                        format_size(b.chunk_size),
                        b.replication
                    ),
                    None => println!("/{}: directory", e.path),
                }
            }
        }
        FsCommand::Mkdir { path, parents } => {
            let e = ns.mkdir(&path, parents).await?;
            if json_out {
                println!("{}", entry_json(&e));
            }
        }
        FsCommand::Rm { path, recursive } => ns.delete(&path, recursive).await?,
        FsCommand::Mv { src, dst } => ns.rename(&src, &dst).await?,
    }
    Ok(())
}
