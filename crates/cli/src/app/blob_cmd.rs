//! `tomus blob ...`: create and delete blobs, write and append files or stdin, read ranges
//! of any version, and show versions, locations and the list of blobs (text or `--json`).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;
use tomus_client::{Append, CommitOptions, WriteAt};
use tomus_wire::{ClusterSecret, VersionState};

use super::connect;
use crate::size::{format_size, parse_size};
use crate::transfer::{copy_range, fill_writer, open_input};

#[derive(Subcommand)]
pub(super) enum BlobCommand {
    /// Create a blob; prints its id.
    Create {
        /// Chunk size: a power of two from 4KiB to 256MiB.
        #[arg(long, default_value = "4MiB", value_parser = parse_size)]
        chunk_size: u64,
        /// Replicas of every chunk and metadata node.
        #[arg(long, default_value_t = 1)]
        replication: u32,
        /// Storage class: `disk`, or `memory` (chunks kept in the RAM of `--replication`
        /// providers; writes fail with NoSpace when their memory class is full).
        #[arg(long, default_value = "disk", value_parser = crate::size::parse_storage)]
        storage: tomus_wire::StorageClass,
    },
    /// Write FILE (or stdin) at OFFSET; prints the new version.
    Write {
        /// Blob id.
        id: u64,
        /// Where to write (any offset; past the end leaves a hole that reads as zeros).
        #[arg(value_parser = parse_size)]
        offset: u64,
        /// Input file; `-` or nothing reads stdin.
        file: Option<PathBuf>,
        /// Put the first replica on this machine's provider when there is one.
        #[arg(long)]
        local: bool,
    },
    /// Append FILE (or stdin); prints the new version and the offset it landed at.
    Append {
        /// Blob id.
        id: u64,
        /// Input file; `-` or nothing reads stdin.
        file: Option<PathBuf>,
        /// Put the first replica on this machine's provider when there is one.
        #[arg(long)]
        local: bool,
    },
    /// Read bytes to stdout (default: the whole latest version).
    Read(RangeArgs),
    /// Show a version's size, range and state.
    Stat {
        /// Blob id.
        id: u64,
        /// Version (default: the latest published).
        #[arg(long)]
        version: Option<u64>,
    },
    /// List published versions (and aborted ones).
    Versions {
        /// Blob id.
        id: u64,
    },
    /// Show which providers hold each range.
    Locations(RangeArgs),
    /// Set which versions are kept (the others are garbage-collected; the latest always
    /// stays).
    Retention(crate::ops_cmd::RetentionArgs),
    /// List all blobs.
    List,
    /// Delete a blob made with `tomus blob create`: reads of it fail from now on and its
    /// space comes back with garbage collection after the grace. A file's blob is refused
    /// (remove the file with `tomus fs rm`).
    Delete {
        /// Blob id.
        id: u64,
    },
}

/// A byte range of one version of a blob.
#[derive(Args)]
pub(super) struct RangeArgs {
    /// Blob id.
    id: u64,
    /// Version (default: the latest published).
    #[arg(long)]
    version: Option<u64>,
    /// First byte (accepts units: 4MiB).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    offset: u64,
    /// Bytes (default: to the end).
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
}

/// Runs a blob command against the cluster at `addr`.
pub(super) async fn run(
    addr: &str,
    secret: Option<ClusterSecret>,
    json_out: bool,
    cmd: BlobCommand,
) -> Result<()> {
    let local = matches!(
        cmd,
        BlobCommand::Write { local: true, .. } | BlobCommand::Append { local: true, .. }
    );
    let client = connect(addr, secret, local).await?;
    match cmd {
        BlobCommand::Create {
            chunk_size,
            replication,
            storage,
        } => {
            let b = client
                .create_blob_in(chunk_size, replication, storage)
                .await?;
            if json_out {
                outln!(
                    "{}",
                    json!({"id": b.id(), "chunk_size": b.chunk_size(),
                           "replication": b.replication(), "storage": storage.name()})
                )?;
            } else {
                outln!("{}", b.id())?;
            }
        }
        BlobCommand::Write {
            id, offset, file, ..
        } => {
            let blob = client.open_blob(id).await?;
            let mut writer = blob.writer();
            let (input, size) = open_input(file.as_deref())?;
            fill_writer(input, size, &mut writer).await?;
            let len = writer.len();
            let info = writer
                .commit(WriteAt { offset }, &CommitOptions::default())
                .await?
                .ok_or_else(empty_input)?;
            print_landed(json_out, info.version, offset, len, false)?;
        }
        BlobCommand::Append { id, file, .. } => {
            let blob = client.open_blob(id).await?;
            let mut writer = blob.writer();
            let (input, size) = open_input(file.as_deref())?;
            fill_writer(input, size, &mut writer).await?;
            let len = writer.len();
            let info = writer
                .commit(Append, &CommitOptions::default())
                .await?
                .ok_or_else(empty_input)?;
            print_landed(json_out, info.version, info.span.offset, len, true)?;
        }
        BlobCommand::Read(RangeArgs {
            id,
            version,
            offset,
            size,
        }) => {
            let blob = client.open_blob(id).await?;
            copy_range(&blob, version, offset, size, &mut std::io::stdout().lock()).await?;
        }
        BlobCommand::Stat { id, version } => {
            let blob = client.open_blob(id).await?;
            let v = blob.stat(version).await?;
            if json_out {
                outln!(
                    "{}",
                    json!({"blob": id, "version": v.version, "size": v.size, "chunk_size": blob.chunk_size(),
                           "replication": blob.replication(), "write_offset": v.span.offset,
                           "write_size": v.span.size, "append": v.append, "state": state_name(v.state)})
                )?;
            } else {
                outln!(
                    "blob {id} version {} size {} ({})  chunk size {}  replication {}",
                    v.version,
                    v.size,
                    format_size(v.size),
                    format_size(blob.chunk_size()),
                    blob.replication()
                )?;
            }
        }
        BlobCommand::Versions { id } => {
            let blob = client.open_blob(id).await?;
            let list = blob.versions().await?;
            if json_out {
                let versions: Vec<_> = list
                    .versions
                    .iter()
                    .map(|v| json!({"version": v.version, "offset": v.span.offset, "size": v.span.size,
                                    "blob_size": v.size, "append": v.append, "state": state_name(v.state)}))
                    .collect();
                let aborted: Vec<_> = list
                    .aborted
                    .iter()
                    .map(|(a, b)| json!({"from": a, "to": b}))
                    .collect();
                outln!("{}", json!({"versions": versions, "aborted": aborted}))?;
            } else {
                outln!(
                    "{:>8}  {:>9}  {:>14}  {:>12}  {:>14}",
                    "VERSION",
                    "STATE",
                    "OFFSET",
                    "WRITTEN",
                    "BLOB SIZE"
                )?;
                for v in &list.versions {
                    let kind = if v.append { "append" } else { "write" };
                    outln!(
                        "{:>8}  {:>9}  {:>14}  {:>12}  {:>14}  {kind}",
                        v.version,
                        state_name(v.state),
                        v.span.offset,
                        v.span.size,
                        v.size
                    )?;
                }
                for (a, b) in &list.aborted {
                    outln!(
                        "versions {a}..{} aborted (not published before a manager restart)",
                        b - 1
                    )?;
                }
            }
        }
        BlobCommand::Locations(RangeArgs {
            id,
            version,
            offset,
            size,
        }) => {
            let blob = client.open_blob(id).await?;
            let total = blob.size(version).await?;
            let size = size.unwrap_or(total.saturating_sub(offset));
            let locs = blob.locations(offset, size, version).await?;
            if json_out {
                let rows: Vec<_> = locs
                    .iter()
                    .map(|l| json!({"offset": l.offset, "size": l.size, "providers": l.providers}))
                    .collect();
                outln!("{}", serde_json::Value::Array(rows))?;
            } else {
                for l in locs {
                    let where_ = if l.providers.is_empty() {
                        "(hole: zeros)".to_string()
                    } else {
                        l.providers.join(",")
                    };
                    outln!("{:>14} {:>12}  {where_}", l.offset, l.size)?;
                }
            }
        }
        BlobCommand::Delete { id } => {
            client.delete_blob(id).await?;
            if json_out {
                outln!("{}", json!({"deleted": id}))?;
            } else {
                outln!("deleted blob {id}")?;
            }
        }
        BlobCommand::Retention(a) => crate::ops_cmd::set_retention(&client, json_out, a).await?,
        BlobCommand::List => {
            let blobs = client.list_blobs().await?;
            if json_out {
                let rows: Vec<_> = blobs
                    .iter()
                    .map(|b| json!({"id": b.id, "latest": b.latest, "size": b.size, "chunk_size": b.chunk_size, "replication": b.replication}))
                    .collect();
                outln!("{}", serde_json::Value::Array(rows))?;
            } else {
                outln!(
                    "{:>8}  {:>8}  {:>14}  {:>10}  {:>3}",
                    "ID",
                    "VERSION",
                    "SIZE",
                    "CHUNK",
                    "R"
                )?;
                for b in blobs {
                    outln!(
                        "{:>8}  {:>8}  {:>14}  {:>10}  {:>3}",
                        b.id,
                        b.latest,
                        b.size,
                        format_size(b.chunk_size),
                        b.replication
                    )?;
                }
            }
        }
    }
    Ok(())
}

fn empty_input() -> tomus_wire::Error {
    tomus_wire::Error::invalid("the input is empty: nothing to write")
}

/// Prints where a write landed: `VERSION` (or `VERSION OFFSET` for appends), or JSON.
fn print_landed(
    json_out: bool,
    version: u64,
    offset: u64,
    size: u64,
    with_offset: bool,
) -> std::io::Result<()> {
    if json_out {
        outln!(
            "{}",
            json!({"version": version, "offset": offset, "size": size})
        )
    } else if with_offset {
        outln!("{version} {offset}")
    } else {
        outln!("{version}")
    }
}

fn state_name(s: VersionState) -> &'static str {
    match s {
        VersionState::Pending => "pending",
        VersionState::Published => "published",
        VersionState::Aborted => "aborted",
    }
}
