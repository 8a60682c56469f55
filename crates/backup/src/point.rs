//! Taking one backup point: the cluster's state read as of one moment, what the target lacks
//! uploaded, the manifest written last.
//!
//! Order, and why:
//! 1. The namespace is listed first, then the blob records: a file's versions are capped at
//!    the latest version its namespace entry showed, so the point is the namespace at the
//!    moment of its listing (a version published later is not in it). The listing's pages
//!    all read one snapshot of the tree, so a file moved meanwhile is in the point once.
//! 2. The target's `chunks/` listing is the index of what is uploaded. Each version not yet
//!    recorded at the target is resolved to chunk pieces; each chunk the index lacks (or has
//!    a shorter prefix of) is read from a provider and uploaded, once. An interrupted point
//!    left its chunks behind, so the next attempt resumes where it stopped.
//! 3. Version records, after the chunks they name.
//! 4. The point manifest, last: a point is listed only once everything it names is there.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use tomus_client::Client;
use tomus_metadata::{BlobId, ChunkPiece, ProviderId, Segment, Version};
use tomus_wire::{EntryKind, Error, ErrorKind, FsEntry, Result};

use crate::format::{self, BlobEntry, PathEntry, Piece, PointManifest, VersionRecord};
use crate::registered::{self, KnownFiles};
use crate::target::Target;

/// Top-level directory of the namespace where the backup service keeps its configuration
/// and status; never backed up itself.
pub const STATE_DIR: &str = ".tomus-backup";

/// Chunk uploads in flight at once.
const PARALLEL_UPLOADS: usize = 4;

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How far the point in progress is (read by the status).
#[derive(Default)]
pub struct Progress {
    pub chunks_total: AtomicU64,
    pub chunks_done: AtomicU64,
    pub bytes_uploaded: AtomicU64,
}

/// Whether `path` lies in one of the subtrees `paths` (empty: everything). Geo-replication
/// (crates/sites) selects its subtrees the same way.
pub fn selected(paths: &[String], path: &str) -> bool {
    paths.is_empty()
        || paths.iter().any(|p| {
            let p = p.trim_matches('/');
            p.is_empty() || path == p || path.starts_with(&format!("{p}/"))
        })
}

/// Chunks a point needs: how long a prefix of each, and where to read it.
#[derive(Default)]
struct Needed {
    chunks: HashMap<String, (u64, Vec<ProviderId>, tomus_metadata::ChunkId)>,
}

impl Needed {
    fn add(&mut self, p: &ChunkPiece) {
        let end = p.chunk_offset + p.len;
        let e = self
            .chunks
            .entry(p.chunk.to_string())
            .or_insert((0, p.replicas.clone(), p.chunk));
        e.0 = e.0.max(end);
    }
}

/// The chunks each version record at a target names, remembered between points so a point
/// need not read back the records of versions an earlier point recorded (records never
/// change). One per target.
#[derive(Default)]
pub struct Known {
    chunks_of: HashMap<String, Vec<String>>,
    files: KnownFiles,
    /// Whether `files` was filled from the newest point at the target yet.
    files_seeded: bool,
}

fn chunks_of(pieces: &[Piece]) -> Vec<String> {
    pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Data { chunk, .. } => Some(chunk.clone()),
            Piece::Zeros { .. } => None,
        })
        .collect()
}

/// Takes one point of the cluster behind `client` on `target`; returns its manifest.
pub async fn take_point(
    client: &Client,
    target: &Target,
    paths: &[String],
    progress: &Progress,
    known: &mut Known,
) -> Result<PointManifest> {
    let taken_ms = now_ms();
    // Blobs first, then the namespace: a file published between the two listings is in the
    // namespace listing, so no file's blob is taken for a blob of the blob API.
    let blobs = client.list_blobs().await?;
    let ns = client.internal_namespace();
    let all: Vec<FsEntry> = ns.walk("").await?;
    // Neither this service's state nor geo-replication's: a cluster restored from a point
    // must not start replicating to a site on its own (the site may hold newer versions).
    let own = |p: &str| {
        [STATE_DIR, ".tomus-sites"]
            .iter()
            .any(|d| p == *d || p.starts_with(&format!("{d}/")))
    };
    let mut files: std::collections::HashSet<BlobId> = std::collections::HashSet::new();
    for e in &all {
        if let Some(b) = &e.blob {
            files.insert(b.id);
        }
    }
    let entries: Vec<FsEntry> = all
        .into_iter()
        .filter(|e| !own(&e.path) && selected(paths, &e.path))
        .collect();

    // Which blobs the point holds, each with the latest version that belongs to it.
    let mut caps: BTreeMap<BlobId, (tomus_wire::BlobInfo, Option<String>)> = BTreeMap::new();
    for e in &entries {
        if let (EntryKind::File, Some(b)) = (&e.kind, &e.blob) {
            caps.insert(b.id, (b.clone(), Some(e.path.clone())));
        }
    }
    if paths.is_empty() {
        for b in blobs {
            // Blobs that back no file are the blob API's (a file deleted since the blob
            // listing has its blob deleted too, and is skipped below).
            if !files.contains(&b.id) {
                caps.entry(b.id).or_insert((b, None));
            }
        }
    }
    let mut dir_retention = Vec::new();
    let mut dirs: Vec<String> = entries
        .iter()
        .filter(|e| e.kind == EntryKind::Dir)
        .map(|e| e.path.clone())
        .collect();
    dirs.insert(0, String::new());
    for d in dirs {
        match ns.retention(&d).await {
            Ok(r) if r.from.as_deref() == Some(d.as_str()) => dir_retention.push((d, r.retention)),
            Ok(_) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }

    // What the target holds already.
    let mut index: HashMap<String, (u64, String)> = HashMap::new();
    for (name, _) in target.list(format::CHUNKS).await? {
        if let Some((id, len, _)) = format::parse_chunk_key(&name) {
            let e = index.entry(id).or_insert((0, String::new()));
            if len >= e.0 {
                *e = (len, name);
            }
        }
    }
    let mut recorded: std::collections::HashSet<String> = target
        .list(format::VERSIONS)
        .await?
        .into_iter()
        .map(|(n, _)| n)
        .collect();

    // Versions to record, and the chunks they need.
    let mut needed = Needed::default();
    let mut new_records: Vec<VersionRecord> = Vec::new();
    let mut point_chunks: BTreeMap<String, String> = BTreeMap::new();
    let mut blob_entries = Vec::new();
    let mut logical = 0u64;
    for (id, (info, path)) in &caps {
        let blob = client.blob(info);
        let listed = tokio::try_join!(blob.versions_attrs(), client.storage_class(*id));
        let (listed, storage) = match listed {
            Ok(v) => v,
            // Deleted since the listing: not in the point.
            Err(e) if e.kind == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let mut versions = Vec::new();
        for (v, attrs) in listed {
            if v.version == 0 || v.version > info.latest {
                continue;
            }
            let key = format::version_key(*id, v.version);
            if recorded.contains(&key) {
                // Recorded by an earlier point: its chunks are there; name them again.
                let chunks = match known.chunks_of.get(&key) {
                    Some(c) => c.clone(),
                    None => {
                        let old: VersionRecord = decode(&target.get(&key).await?, &key)?;
                        let c = chunks_of(&old.pieces);
                        known.chunks_of.insert(key.clone(), c.clone());
                        c
                    }
                };
                for chunk in chunks {
                    if let Some((_, name)) = index.get(&chunk) {
                        point_chunks.insert(chunk, name.clone());
                    }
                }
                logical += v.size;
                versions.push(v.version);
                continue;
            }
            let segments = match blob.segments_of(&v).await {
                Ok(s) => s,
                // Removed by retention since it was listed: not retained at the point.
                Err(e) if e.kind == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let pieces = segments
                .iter()
                .map(|s| match s {
                    Segment::Zeros(span) => Piece::Zeros {
                        start: span.offset,
                        len: span.size,
                    },
                    Segment::Data(p) => {
                        needed.add(p);
                        Piece::Data {
                            start: p.start,
                            len: p.len,
                            chunk: p.chunk.to_string(),
                            chunk_offset: p.chunk_offset,
                        }
                    }
                })
                .collect();
            logical += v.size;
            versions.push(v.version);
            new_records.push(VersionRecord {
                info: v,
                attrs,
                pieces,
            });
        }
        blob_entries.push(BlobEntry {
            info: info.clone(),
            versions,
            path: path.clone(),
            storage,
        });
    }

    // Chunks the index lacks, uploaded once.
    let missing: Vec<_> = needed
        .chunks
        .into_iter()
        .filter_map(|(id, (need, replicas, chunk))| match index.get(&id) {
            Some((len, name)) if *len >= need => {
                point_chunks.insert(id, name.clone());
                None
            }
            _ => Some((id, need, replicas, chunk)),
        })
        .collect();
    progress
        .chunks_total
        .store(missing.len() as u64, Ordering::Relaxed);
    let uploaded_names = Mutex::new(Vec::new());
    stream::iter(missing.into_iter().map(|(id, need, replicas, chunk)| {
        let uploaded_names = &uploaded_names;
        async move {
            let piece = ChunkPiece {
                start: 0,
                len: need,
                chunk,
                chunk_offset: 0,
                replicas,
            };
            let data = client.read_piece(&piece).await?;
            let name = format::chunk_key(&id, need, &format::sha256_hex(&data));
            target.put(&name, Bytes::from(data)).await?;
            progress.chunks_done.fetch_add(1, Ordering::Relaxed);
            progress.bytes_uploaded.fetch_add(need, Ordering::Relaxed);
            if let Ok(mut v) = uploaded_names.lock() {
                v.push((id, name));
            }
            Ok::<(), Error>(())
        }
    }))
    .buffer_unordered(PARALLEL_UPLOADS)
    .try_collect::<()>()
    .await?;
    if let Ok(v) = uploaded_names.into_inner() {
        point_chunks.extend(v);
    }

    // Version records, after their chunks.
    for r in &new_records {
        let key = format::version_key(r.info.blob, r.info.version);
        let body = serde_json::to_vec(r).map_err(|e| Error::internal(e.to_string()))?;
        progress
            .bytes_uploaded
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        target.put(&key, Bytes::from(body)).await?;
        known.chunks_of.insert(key.clone(), chunks_of(&r.pieces));
        recorded.insert(key);
    }

    // Registered files' bytes, read from their holders. A file an earlier point holds (they
    // are immutable) is named again without reading it: after a restart, from the newest
    // point at the target.
    if !known.files_seeded {
        known.files_seeded = true;
        if let Some(newest) = list_points(target).await?.last() {
            registered::remember(&mut known.files, &read_point(target, newest).await?);
        }
    }
    let mut unreadable = Vec::new();
    let mut namespace = Vec::with_capacity(entries.len());
    for e in &entries {
        let content = if e.kind == EntryKind::Registered {
            let mut objects = Vec::new();
            match registered::back_up(
                client,
                target,
                &e.path,
                &index,
                &mut known.files,
                &mut objects,
            )
            .await
            {
                Ok((content, uploaded)) => {
                    progress
                        .bytes_uploaded
                        .fetch_add(uploaded, Ordering::Relaxed);
                    logical += content.size;
                    point_chunks.extend(objects);
                    Some(content)
                }
                // Deleted (or persisted, so no longer registered) since the listing, maybe
                // while its bytes were read.
                Err(err) if gone(&err) => continue,
                Err(err) => match client.registered(&e.path).await {
                    Err(now) if gone(&now) => continue,
                    // No holder can give its bytes now (down, or damaged copies): left out
                    // of this point, said in it and in the status, rather than failing every
                    // point until the holders come back.
                    _ if err.kind == ErrorKind::Unavailable => {
                        tracing::warn!("backup: /{} left out of this point: {err}", e.path);
                        unreadable.push(format!("/{}: {}", e.path, err.message));
                        continue;
                    }
                    _ => return Err(err),
                },
            }
        } else {
            None
        };
        namespace.push(PathEntry {
            path: e.path.clone(),
            kind: e.kind,
            blob: e.blob.as_ref().map(|b| b.id),
            registered: content,
        });
    }
    // Only what this point holds is worth remembering (deleted files would pile up).
    registered::forget_all_but(&mut known.files, &namespace);
    let mut manifest = PointManifest {
        format: format::FORMAT,
        id: format::point_id(taken_ms),
        taken_ms,
        completed_ms: now_ms(),
        paths: paths.to_vec(),
        namespace,
        blobs: blob_entries,
        dir_retention,
        chunks: point_chunks,
        uploaded_bytes: progress.bytes_uploaded.load(Ordering::Relaxed),
        logical_bytes: logical,
        unreadable,
    };
    manifest.completed_ms = now_ms();
    let body = serde_json::to_vec(&manifest).map_err(|e| Error::internal(e.to_string()))?;
    target
        .put(&format::point_key(&manifest.id), Bytes::from(body))
        .await?;
    Ok(manifest)
}

/// Whether `e` says a registered file is no longer one (deleted, or persisted).
fn gone(e: &Error) -> bool {
    matches!(e.kind, ErrorKind::NotFound | ErrorKind::InvalidArgument)
}

pub(crate) fn decode<T: for<'a> serde::Deserialize<'a>>(data: &[u8], name: &str) -> Result<T> {
    serde_json::from_slice(data).map_err(|e| Error::corrupt(format!("{name}: unreadable: {e}")))
}

/// The complete points at `target`, oldest first.
pub async fn list_points(target: &Target) -> Result<Vec<String>> {
    let mut ids: Vec<String> = target
        .list(format::POINTS)
        .await?
        .into_iter()
        .filter_map(|(n, _)| {
            n.strip_prefix("points/")
                .and_then(|f| f.strip_suffix(".json"))
                .map(str::to_string)
        })
        .collect();
    ids.sort();
    Ok(ids)
}

pub async fn read_point(target: &Target, id: &str) -> Result<PointManifest> {
    let key = format::point_key(id);
    let m: PointManifest = decode(&target.get(&key).await?, &key)?;
    if m.format > format::FORMAT {
        return Err(Error::invalid(format!(
            "point {id} has format {}; this build reads up to {}",
            m.format,
            format::FORMAT
        )));
    }
    Ok(m)
}

/// Keeps the newest `keep` points: older manifests go first (so they are no longer listed),
/// then the chunk objects and version records no remaining point names. Returns the points
/// removed.
pub async fn prune(target: &Target, keep: usize) -> Result<Vec<String>> {
    let points = list_points(target).await?;
    if keep == 0 || points.len() <= keep {
        return Ok(Vec::new());
    }
    let (old, kept) = points.split_at(points.len() - keep);
    for id in old {
        target.delete(&format::point_key(id)).await?;
    }
    let mut live_chunks = std::collections::HashSet::new();
    let mut live_versions = std::collections::HashSet::new();
    for id in kept {
        let m = read_point(target, id).await?;
        live_chunks.extend(m.chunks.into_values());
        for b in &m.blobs {
            for v in &b.versions {
                live_versions.insert(format::version_key(b.info.id, *v));
            }
        }
    }
    for (name, _) in target.list(format::CHUNKS).await? {
        if !live_chunks.contains(&name) {
            target.delete(&name).await?;
        }
    }
    for (name, _) in target.list(format::VERSIONS).await? {
        if !live_versions.contains(&name) {
            target.delete(&name).await?;
        }
    }
    Ok(old.to_vec())
}

/// The version records of a point's blob, by version.
pub async fn version_record(target: &Target, blob: BlobId, v: Version) -> Result<VersionRecord> {
    let key = format::version_key(blob, v);
    decode(&target.get(&key).await?, &key)
}
