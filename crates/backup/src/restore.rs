//! Restoring a backup point: into a fresh cluster whole, or one file into a running cluster.
//!
//! A whole restore replays the point through the ordinary client API, blob by blob in id
//! order, version by version in number order, so the restored cluster has the same blob ids
//! and version numbers:
//! - a blob id the point lacks (a deleted blob, the backup service's own state) is taken by a
//!   blob created and deleted at once;
//! - a version number the point lacks (given up by its writer, or removed by retention
//!   before the point) is taken by a version assigned and given up at once (it reads as
//!   aborted, not as removed);
//! - each version is replayed as the operation it was when the version before it was
//!   replayed too (an append as an append, a write as a write, so the restored cluster shares
//!   chunks between versions as the original did), else as its whole content;
//! - every blob keeps all its versions while they are replayed, and gets its retention policy
//!   (and directories theirs) at the end.
//!
//! Registered files (workflows) come back as ordinary files, written last (new blob ids),
//! each with as many replicas as it had holders.
//!
//! One file restored into a running cluster comes back in the storage class it had (a
//! memory-class one needs providers with memory-class room there, else `NoSpace`). A whole
//! restore builds a data directory, and the memory class holds nothing once its providers
//! restart: memory-class blobs come back on disk, and the restore counts them
//! (`memory_on_disk`). What is not kept: publication times (restored versions are published
//! now) and the cluster's providers (the restored cluster has the ones it was started with).

use std::collections::BTreeMap;

use tomus_client::{Append, Blob, Client, CommitOptions, Replace, WriteAt};
use tomus_metadata::Version;
use tomus_wire::manager::{
    AbortVersion, Assign, CreateBlob, DeleteBlob, FsCreateRetained, FsMkdir, FsSetRetention,
    SetRetention,
};
use tomus_wire::{EntryKind, Error, Result, Retention, StorageClass, WriteOp};

use crate::format::{Piece, PointManifest, RegisteredContent, VersionRecord};
use crate::point::{list_points, read_point, version_record};
use crate::target::Target;

/// What a restore did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Restored {
    pub point: String,
    pub blobs: u64,
    pub files: u64,
    pub versions: u64,
    pub bytes: u64,
    /// Blobs of the memory storage class brought back on disk (a whole restore builds a
    /// data directory; a memory class holds nothing once its providers restart).
    pub memory_on_disk: u64,
}

/// The point `at` names: a point id, a time (Unix ms, or RFC 3339 such as
/// `2026-01-02T03:04:05Z`: the newest point taken at or before it), or `None`: the newest.
pub async fn choose_point(target: &Target, at: Option<&str>) -> Result<String> {
    let points = list_points(target).await?;
    let newest = |ms: u64| {
        points
            .iter()
            .rev()
            .find(|p| p.parse::<u64>().is_ok_and(|t| t <= ms))
            .cloned()
            .ok_or_else(|| Error::not_found(format!("no backup point at or before {ms} ms")))
    };
    match at {
        None => points
            .last()
            .cloned()
            .ok_or_else(|| Error::not_found(format!("no backup point at {}", target.url))),
        Some(a) if points.iter().any(|p| p == a) => Ok(a.to_string()),
        Some(a) => {
            if let Ok(ms) = a.parse::<u64>() {
                return newest(ms);
            }
            let t = time::OffsetDateTime::parse(a, &time::format_description::well_known::Rfc3339)
                .map_err(|_| {
                    Error::invalid(format!(
                        "--at {a}: neither a point of {} nor a time (Unix ms or RFC 3339)",
                        target.url
                    ))
                })?;
            newest((t.unix_timestamp_nanos() / 1_000_000).max(0) as u64)
        }
    }
}

/// Restores point `id` into the cluster behind `client`, which must hold no blob yet.
pub async fn restore_cluster(client: &Client, target: &Target, id: &str) -> Result<Restored> {
    let point = read_point(target, id).await?;
    if !client.list_blobs().await?.is_empty() {
        return Err(Error::invalid(
            "the cluster to restore into already holds blobs: a whole restore needs a fresh one",
        ));
    }
    let mut done = Restored {
        point: id.to_string(),
        ..Default::default()
    };
    for e in &point.namespace {
        if e.kind == EntryKind::Dir {
            client
                .manager_call(FsMkdir {
                    path: e.path.clone(),
                    parents: true,
                })
                .await?;
        }
    }
    let by_id: BTreeMap<u64, &crate::format::BlobEntry> =
        point.blobs.iter().map(|b| (b.info.id, b)).collect();
    let last = by_id.keys().next_back().copied().unwrap_or(0);
    for id in 1..=last {
        let Some(entry) = by_id.get(&id) else {
            // An id the point does not hold: taken, so the next ones match.
            let info = client
                .manager_call(CreateBlob {
                    chunk_size: 1 << 20,
                    replication: 1,
                })
                .await?;
            check_id(id, info.id)?;
            client.manager_call(DeleteBlob { blob: info.id }).await?;
            continue;
        };
        let info = &entry.info;
        let blob = match &entry.path {
            Some(path) => {
                let e = client
                    .manager_call(FsCreateRetained {
                        path: path.clone(),
                        chunk_size: info.chunk_size,
                        replication: info.replication,
                        exclusive: true,
                        retention: Some(Retention::KeepAll),
                    })
                    .await?;
                let b = e
                    .blob
                    .ok_or_else(|| Error::internal(format!("/{path}: no blob")))?;
                check_id(id, b.id)?;
                done.files += 1;
                client.blob(&b)
            }
            None => {
                let b = client
                    .manager_call(CreateBlob {
                        chunk_size: info.chunk_size,
                        replication: info.replication,
                    })
                    .await?;
                check_id(id, b.id)?;
                client.blob(&b)
            }
        };
        done.blobs += 1;
        if entry.storage == StorageClass::Memory {
            done.memory_on_disk += 1;
        }
        let mut prev: Option<VersionRecord> = None;
        for v in 1..=info.latest {
            if !entry.versions.contains(&v) {
                give_up(client, &blob, v).await?;
                prev = None;
                continue;
            }
            let rec = version_record(target, info.id, v).await?;
            replay(target, &point, &blob, prev.as_ref(), &rec).await?;
            done.versions += 1;
            done.bytes += rec.info.size;
            prev = Some(rec);
        }
    }
    // Policies last: replaying kept every version.
    for b in &point.blobs {
        match &b.path {
            Some(path) => {
                client
                    .manager_call(FsSetRetention {
                        path: path.clone(),
                        retention: Some(b.info.retention),
                    })
                    .await?;
            }
            None => {
                client
                    .manager_call(SetRetention {
                        blob: b.info.id,
                        retention: b.info.retention,
                    })
                    .await?;
            }
        }
    }
    for (dir, policy) in &point.dir_retention {
        client
            .manager_call(FsSetRetention {
                path: dir.clone(),
                retention: Some(*policy),
            })
            .await?;
    }
    // Registered files last: their blobs are new (ids past the point's), and they get the
    // policy of their directory as any new file.
    for e in &point.namespace {
        if let Some(content) = &e.registered {
            restore_registered(client, target, &point, content, &e.path).await?;
            done.files += 1;
            done.blobs += 1;
            done.versions += 1;
            done.bytes += content.size;
        }
    }
    Ok(done)
}

/// Writes the registered file `content` of `point` as the new ordinary file `to`.
async fn restore_registered(
    client: &Client,
    target: &Target,
    point: &PointManifest,
    content: &RegisteredContent,
    to: &str,
) -> Result<()> {
    // As many replicas as it had holders, as far as the cluster has providers for them.
    let providers = client.writable_providers().await?;
    let options = tomus_client::CreateOptions {
        replication: content.holders.min(providers).max(1),
        exclusive: true,
        ..Default::default()
    };
    let (_, blob) = client.namespace().create(to, options).await?;
    let mut writer = blob.writer();
    copy_range(target, point, &content.pieces, 0, content.size, &mut writer).await?;
    writer
        .commit(Replace::default(), &CommitOptions::default())
        .await?;
    Ok(())
}

/// Restores the file at `path` in point `id` as the new file `to` of the running cluster
/// behind `client`: its retained versions in order (numbered afresh), then its policy.
pub async fn restore_file(
    client: &Client,
    target: &Target,
    id: &str,
    path: &str,
    to: &str,
) -> Result<Restored> {
    let point = read_point(target, id).await?;
    let path = path.trim_matches('/');
    let registered = point
        .namespace
        .iter()
        .find(|e| e.path == path)
        .and_then(|e| e.registered.as_ref());
    if let Some(content) = registered {
        restore_registered(client, target, &point, content, to).await?;
        return Ok(Restored {
            point: id.to_string(),
            files: 1,
            blobs: 1,
            versions: 1,
            bytes: content.size,
            ..Restored::default()
        });
    }
    let entry = point
        .blobs
        .iter()
        .find(|b| b.path.as_deref() == Some(path))
        .ok_or_else(|| Error::not_found(format!("/{path} is not a file of point {id}")))?;
    let (_, blob) = client
        .namespace()
        .create_in(
            to,
            tomus_client::CreateOptions {
                chunk_size: entry.info.chunk_size,
                replication: entry.info.replication,
                exclusive: true,
            },
            Some(Retention::KeepAll),
            entry.storage,
        )
        .await?;
    let mut done = Restored {
        point: id.to_string(),
        files: 1,
        blobs: 1,
        ..Default::default()
    };
    for v in &entry.versions {
        let rec = version_record(target, entry.info.id, *v).await?;
        // Numbered afresh: each is its whole content.
        replay(target, &point, &blob, None, &rec).await?;
        done.versions += 1;
        done.bytes += rec.info.size;
    }
    client
        .namespace()
        .set_retention(to, Some(entry.info.retention))
        .await?;
    Ok(done)
}

fn check_id(want: u64, got: u64) -> Result<()> {
    if want == got {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "restored blob got id {got} where the point has {want}: the cluster is not fresh \
             (or another client creates blobs in it meanwhile)"
        )))
    }
}

/// Takes version number `v` of `blob` and gives it up: a number the point does not hold.
async fn give_up(client: &Client, blob: &Blob, v: Version) -> Result<()> {
    let a = client
        .manager_call(Assign {
            blob: blob.id(),
            op: WriteOp::Append { size: 1 },
            attrs: Default::default(),
            expect_size: None,
            data: Default::default(),
        })
        .await?;
    if a.version != v {
        return Err(Error::internal(format!(
            "blob {}: version {} assigned where {v} was to be given up",
            blob.id(),
            a.version
        )));
    }
    client
        .manager_call(AbortVersion {
            blob: blob.id(),
            version: v,
        })
        .await
}

/// Writes bytes `[start, end)` of the content `pieces` tile into `writer`, piece by piece.
async fn copy_range(
    target: &Target,
    point: &PointManifest,
    pieces: &[Piece],
    start: u64,
    end: u64,
    writer: &mut tomus_client::BlobWriter,
) -> Result<()> {
    for p in pieces {
        let (ps, pe) = (p.start(), p.start() + p.len());
        let (s, e) = (ps.max(start), pe.min(end));
        if s >= e {
            continue;
        }
        match p {
            Piece::Zeros { .. } => writer.write(&vec![0u8; (e - s) as usize]).await?,
            Piece::Data {
                chunk,
                chunk_offset,
                ..
            } => {
                let name = point.chunks.get(chunk).ok_or_else(|| {
                    Error::corrupt(format!(
                        "point {} names no object for chunk {chunk}",
                        point.id
                    ))
                })?;
                let from = chunk_offset + (s - ps);
                let data = target.get_range(name, from, from + (e - s)).await?;
                if data.len() as u64 != e - s {
                    return Err(Error::corrupt(format!("{name}: short object")));
                }
                writer.write(&data).await?;
            }
        }
    }
    Ok(())
}

/// How a version is replayed: as the append or write it was (only the bytes it wrote), or
/// as its whole content.
enum Replayed {
    Append,
    Write,
    Whole,
}

/// Replays the version `rec` on `blob`, whose latest version is `prev` (`None`: unknown, or
/// not the version just before): as the same operation when it can be, else as its whole
/// content. Checks the version number it gets.
async fn replay(
    target: &Target,
    point: &PointManifest,
    blob: &Blob,
    prev: Option<&VersionRecord>,
    rec: &VersionRecord,
) -> Result<()> {
    let info = &rec.info;
    let options = CommitOptions {
        attrs: rec.attrs.clone(),
        expect_size: None,
    };
    let follows = prev.filter(|p| p.info.version + 1 == info.version);
    let span_end = info.span.offset + info.span.size;
    let mut writer = blob.writer();
    let replayed = match follows {
        Some(p) if info.append && p.info.size == info.span.offset && info.span.size > 0 => {
            Replayed::Append
        }
        Some(p)
            if !info.append
                && rec.attrs.is_empty()
                && info.span.size > 0
                && !(info.span.offset == 0 && info.span.size >= p.info.size) =>
        {
            Replayed::Write
        }
        _ => Replayed::Whole,
    };
    let (from, to) = match replayed {
        Replayed::Whole => (0, info.size),
        Replayed::Append | Replayed::Write => (info.span.offset, span_end),
    };
    copy_range(target, point, &rec.pieces, from, to, &mut writer).await?;
    let got: Option<Version> = match replayed {
        Replayed::Append => writer.commit(Append, &options).await?.map(|v| v.version),
        Replayed::Write => {
            let at = WriteAt {
                offset: info.span.offset,
            };
            writer
                .commit(at, &CommitOptions::default())
                .await?
                .map(|v| v.version)
        }
        Replayed::Whole => Some(writer.commit(Replace::default(), &options).await?.version),
    };
    if got != Some(info.version) {
        return Err(Error::internal(format!(
            "blob {}: replaying version {} published {got:?}",
            blob.id(),
            info.version
        )));
    }
    Ok(())
}

/// The points of `target` with a summary each, oldest first.
pub async fn describe(target: &Target) -> Result<Vec<PointManifest>> {
    let mut out = Vec::new();
    for id in list_points(target).await? {
        out.push(read_point(target, &id).await?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test stops at its first error")]

    use super::*;

    #[tokio::test]
    async fn at_names_a_point_or_a_time() {
        let dir = std::env::temp_dir().join(format!("tomus-backup-at-{}", std::process::id()));
        let target = Target::open(&format!("file://{}", dir.display()), 0).unwrap();
        assert_eq!(
            choose_point(&target, None).await.unwrap_err().kind,
            tomus_wire::ErrorKind::NotFound
        );
        // 2026-01-01T00:00:00Z and one hour later.
        let (p1, p2) = ("001767225600000", "001767229200000");
        for p in [p1, p2] {
            target
                .put(
                    &crate::format::point_key(p),
                    bytes::Bytes::from_static(b"{}"),
                )
                .await
                .unwrap();
        }
        assert_eq!(choose_point(&target, None).await.unwrap(), p2);
        assert_eq!(choose_point(&target, Some(p1)).await.unwrap(), p1);
        assert_eq!(
            choose_point(&target, Some("1767225600500")).await.unwrap(),
            p1
        );
        let at = Some("2026-01-01T00:30:00Z");
        assert_eq!(choose_point(&target, at).await.unwrap(), p1);
        let at = Some("2026-01-01T02:00:00+01:00");
        assert_eq!(choose_point(&target, at).await.unwrap(), p2);
        assert!(choose_point(&target, Some("1000")).await.is_err());
        assert!(choose_point(&target, Some("yesterday")).await.is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
