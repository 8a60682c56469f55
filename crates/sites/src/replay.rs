//! The replication engine: replays the versions a scan found the site lacks (`scan.rs`)
//! there in publication order, so the site always holds a prefix of the source's history.
//!
//! Replaying a version writes the same bytes as one new version on the site's file at the
//! same path, with the source's attributes (an S3 ETag, content type...) and one more,
//! [`REPLICA_OF`] = `BLOB:VERSION` of the source. That attribute, published atomically
//! with the version, is the truth about what the site holds: before touching a file the
//! engine reads it from the site's latest version, so a version the site already has (a
//! pass interrupted after the site published but before the cursor was saved) is never
//! written twice, and nothing is skipped whatever the cursor says. The cursor (saved in the
//! source cluster) only spares the scan a round trip per unchanged file.
//!
//! When the site's file holds exactly the source's previous version, the version's own
//! operation is replayed with only the bytes it wrote: an append as an append at the
//! expected offset (a conditional append: another writer on the site makes it fail instead
//! of interleaving), a write as a write at its offset, a replacement as a replacement.
//! Otherwise (a new file, versions removed by retention in between, a file changed on the
//! site) the version's whole content is written as a replacement.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use serde::{Deserialize, Serialize};
use tomus_client::{
    Append, Blob, BlobWriter, Client, CommitOptions, CreateOptions, Replace, WriteAt,
};
use tomus_maintenance::throttle::Throttle;
use tomus_metadata::{BlobId, Version};
use tomus_wire::{Attrs, BlobInfo, Error, ErrorKind, FsEntry, Result, VersionInfo};

use crate::deletions::{delete_on_site, in_the_way};
use crate::pending::Created;
use crate::registered::{copy_registered, Copied};
pub use crate::scan::{scan, Item, RegisteredItem, Scan};

/// The version attribute naming the source version a site's version replays
/// (`BLOB:VERSION`).
pub const REPLICA_OF: &str = "sites:replica-of";

/// Bytes read from the source and written to the site per step of one version.
const PIECE: u64 = 8 << 20;
/// How long an append waits for versions in flight on the site to be published or given
/// up (a writer's lease is 10 s by default) before the version is written whole.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(60);
/// Pause between two tries of such an append.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(500);

/// What the site holds of one source file, as far as the service knows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCursor {
    /// The source file's blob; 0 for a registered file (which has none).
    pub src_blob: BlobId,
    /// The last version replayed; for a registered file, its creation time (Unix ms): it is
    /// immutable, so that names the copy made.
    pub src_version: Version,
    /// The site's blob at the path (a deletion at the source deletes it only if it is still
    /// this one).
    pub dst_blob: BlobId,
}

/// Where a rule stands: per source path, the last version replayed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub files: BTreeMap<String, FileCursor>,
}

/// Counters a pass advances as it goes (read by the status and the metrics).
#[derive(Default)]
pub struct Progress {
    /// Versions found behind by the last scan and not replayed since.
    pub versions_behind: AtomicU64,
    /// Publication time of the oldest of them (0: none).
    pub oldest_pending_ms: AtomicU64,
    pub versions_done: AtomicU64,
    pub bytes_done: AtomicU64,
    pub files_deleted: AtomicU64,
    /// When the last version was replayed (Unix ms).
    pub last_done_ms: AtomicU64,
}

/// What one [`replicate_once`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassReport {
    pub versions: u64,
    pub bytes: u64,
    pub deleted: u64,
}

/// The site's file at a path, as the engine found it.
struct SiteFile {
    blob: Blob,
    /// The source version its latest version replays, if it is a replica.
    replica: Option<(BlobId, Version)>,
    size: u64,
}

fn parse_replica(attrs: &Attrs) -> Option<(BlobId, Version)> {
    let (b, v) = attrs.get(REPLICA_OF)?.split_once(':')?;
    Some((b.parse().ok()?, v.parse().ok()?))
}

/// Opens (or creates, with the source file's chunk size, replication and retention) the
/// site's file at `path` for the source blob `info`. A new file (pending until its first
/// version is published) is added to `created`.
async fn open_site_file(
    target: &Client,
    path: &str,
    info: &BlobInfo,
    created: &mut Vec<FsEntry>,
) -> Result<SiteFile> {
    let ns = target.namespace();
    match ns.object(path, None).await {
        Ok((o, blob)) => {
            return Ok(SiteFile {
                replica: parse_replica(&o.attrs),
                size: o.version.size,
                blob,
            })
        }
        Err(e) if e.kind == ErrorKind::NotFound => {}
        // An empty directory where the source now has a file (left by an older build, which
        // kept the directories its deletions emptied) gives way; one with entries does not.
        Err(e) if e.kind == ErrorKind::IsADirectory => match ns.delete(path, false).await {
            Ok(()) => tracing::info!(
                "sites: /{path} is a file at the source: its empty directory on the site removed"
            ),
            Err(_) => return Err(e),
        },
        Err(e) => return Err(e),
    }
    // The site may have fewer providers than the source's replication.
    let alive = target.writable_providers().await?;
    let options = CreateOptions {
        chunk_size: info.chunk_size,
        replication: info.replication.min(alive.max(1)),
        exclusive: false,
    };
    // The site's copy keeps what the source file keeps.
    let (entry, blob) = ns.create_retained(path, options, info.retention).await?;
    let size = entry.blob.as_ref().map_or(0, |b| b.size);
    if entry.blob.as_ref().is_some_and(|b| b.latest == 0) {
        created.push(entry);
    }
    Ok(SiteFile {
        replica: None,
        size,
        blob,
    })
}

/// Whether every version strictly between `from` and `to` was given up (so the site's copy
/// of `from` is the content `to` was written over).
fn only_aborted_between(from: Version, to: Version, aborted: &[(Version, Version)]) -> bool {
    (from + 1..to).all(|v| aborted.iter().any(|(a, b)| *a <= v && v < *b))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    /// The whole content, as a replacement.
    Full,
    Append,
    Write,
}

/// Versions whose data is read from the source and stored on the site ahead of the one
/// being published there: stores overlap with the round trips of publication, while
/// publications stay one at a time, in order.
const PIPELINE: usize = 4;

/// One version to replay, with the operation chosen for it (`None`: the site has it) and
/// what the site's file will be once it is published.
struct Planned {
    item: Item,
    op: Option<Op>,
    dst: Blob,
    /// The site's file size before it.
    size_before: u64,
}

/// Chooses each item's operation from the site's files as found, assuming each version
/// before it is published as planned (publication checks that: see [`commit`]).
async fn plan(
    target: &Client,
    scan: &mut Scan,
    created: &mut Vec<FsEntry>,
) -> Result<Vec<Planned>> {
    let mut files: HashMap<String, SiteFile> = HashMap::new();
    let mut out = Vec::new();
    for item in std::mem::take(&mut scan.items) {
        let file = match files.entry(item.path.clone()) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(open_site_file(target, &item.path, &item.blob, created).await?)
            }
        };
        let v = &item.version;
        let held = file.replica.filter(|(b, _)| *b == item.blob.id);
        let size_before = file.size;
        let op = if held.is_some_and(|(_, hv)| hv >= v.version) {
            // Already on the site (an earlier pass published it, its cursor was not saved).
            None
        } else {
            let aborted = scan.aborted.get(&item.blob.id).map_or(&[][..], |a| a);
            // A new (empty) copy takes a version that wrote all its content as it was
            // written: the first append of a log stays an append.
            let fresh = file.replica.is_none()
                && file.size == 0
                && v.span.offset == 0
                && v.span.size == v.size;
            let chained =
                fresh || held.is_some_and(|(_, hv)| only_aborted_between(hv, v.version, aborted));
            let end = v.span.offset + v.span.size;
            Some(if !chained {
                Op::Full
            } else if v.append && v.span.offset == file.size {
                Op::Append
            } else if v.span.offset == 0 && end >= file.size {
                Op::Full
            } else {
                Op::Write
            })
        };
        if op.is_some() {
            file.replica = Some((item.blob.id, v.version));
            file.size = v.size;
        }
        out.push(Planned {
            dst: file.blob.clone(),
            item,
            op,
            size_before,
        });
    }
    Ok(out)
}

/// A task that is aborted when dropped (prepared versions no one will publish).
struct Task<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> std::future::Future for Task<T> {
    type Output = std::result::Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// Replays a scan's items (then its deletions) from `source` onto `target`, advancing
/// `cursor` and `progress` after each version. Stops early, with `Ok(false)`, once `budget`
/// is spent or a version is gone from the source meanwhile (the caller saves the cursor and
/// calls again, after a new scan); `Ok(true)` when all is done. On an error the cursor holds
/// everything done before it.
pub async fn apply(
    source: &Client,
    target: &Client,
    scan: Scan,
    cursor: &mut Cursor,
    throttle: &Arc<Throttle>,
    progress: &Progress,
    budget: Duration,
) -> Result<bool> {
    let mut created = Created::new(target);
    let outcome = apply_planned(
        source,
        target,
        scan,
        cursor,
        throttle,
        progress,
        budget,
        &mut created.entries,
    )
    .await;
    created.settle(cursor).await;
    outcome
}

/// [`apply`], adding the site files it creates to `created`.
#[allow(clippy::too_many_arguments)]
async fn apply_planned(
    source: &Client,
    target: &Client,
    mut scan: Scan,
    cursor: &mut Cursor,
    throttle: &Arc<Throttle>,
    progress: &Progress,
    budget: Duration,
    created: &mut Vec<FsEntry>,
) -> Result<bool> {
    let started = Instant::now();
    // Deletions go last, except those in the way of this pass's versions (see
    // `deletions.rs`).
    let gone = std::mem::take(&mut scan.gone);
    let written = scan.items.iter().map(|i| i.path.as_str());
    let copied = scan.registered.iter().map(|r| r.path.as_str());
    let (first, later) = in_the_way(gone, written.chain(copied));
    for path in first {
        delete_on_site(source, target, &scan.root, &path, cursor, progress).await?;
    }
    scan.gone = later;
    let planned = plan(target, &mut scan, created).await?;
    let total = planned.len();
    let next_ms: Vec<u64> = planned
        .iter()
        .map(|p| p.item.version.published_ms)
        .collect();
    // Data is read and stored up to PIPELINE versions ahead, in tasks of their own so that
    // it goes on while a version is being published.
    let mut prepared = futures::stream::iter(planned.into_iter().map(|p| {
        let (source, throttle) = (source.clone(), throttle.clone());
        Task(tokio::spawn(async move {
            let writer = match p.op {
                Some(op) => Some(prepare(&source, &p, op, &throttle).await),
                None => None,
            };
            (p, writer)
        }))
    }))
    .buffered(PIPELINE);
    let mut n = 0;
    while let Some(joined) = prepared.next().await {
        let (p, writer) =
            joined.map_err(|e| Error::internal(format!("replication task failed: {e}")))?;
        if let Some(writer) = writer {
            let writer = match writer {
                Ok(w) => w,
                // Removed by retention since the scan: a new scan plans without it.
                Err(e) if e.kind == ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(e),
            };
            let op = p.op.unwrap_or(Op::Full);
            commit(source, &p, op, writer, throttle, progress).await?;
        }
        cursor.files.insert(
            p.item.path.clone(),
            FileCursor {
                src_blob: p.item.blob.id,
                src_version: p.item.version.version,
                dst_blob: p.dst.id(),
            },
        );
        n += 1;
        progress
            .versions_behind
            .store((total - n) as u64, Ordering::Relaxed);
        progress
            .oldest_pending_ms
            .store(next_ms.get(n).copied().unwrap_or(0), Ordering::Relaxed);
        progress
            .last_done_ms
            .store(tomus_wire::now_ms(), Ordering::Relaxed);
        progress.versions_done.fetch_add(1, Ordering::Relaxed);
        if n < total && started.elapsed() > budget {
            return Ok(false);
        }
    }
    let registered = std::mem::take(&mut scan.registered);
    let copies = registered.len();
    // Files no holder can give now: the others, and the deletions, go on without them.
    let mut unreadable = Vec::new();
    for (i, r) in registered.into_iter().enumerate() {
        let copied = copy_registered(source, target, &r, throttle, progress, created).await?;
        if let Copied::Unreadable(why) = &copied {
            unreadable.push(format!("/{}: {why}", r.path));
        }
        if let Copied::To(dst_blob) = copied {
            cursor.files.insert(
                r.path,
                FileCursor {
                    src_blob: 0,
                    src_version: r.created_ms,
                    dst_blob,
                },
            );
            progress.versions_done.fetch_add(1, Ordering::Relaxed);
            progress
                .last_done_ms
                .store(tomus_wire::now_ms(), Ordering::Relaxed);
        }
        progress
            .versions_behind
            .store((copies - i - 1) as u64, Ordering::Relaxed);
        if i + 1 < copies && started.elapsed() > budget {
            return Ok(false);
        }
    }
    for path in std::mem::take(&mut scan.gone) {
        delete_on_site(source, target, &scan.root, &path, cursor, progress).await?;
    }
    if !unreadable.is_empty() {
        // Retried by the next pass, as any failure.
        return Err(Error::unavailable(format!(
            "{} registered file(s) could not be copied: {}",
            unreadable.len(),
            unreadable.join("; ")
        )));
    }
    Ok(true)
}

/// The bytes `op` writes for a planned version: `(from, len)` of its content.
fn range(p: &Planned, op: Op) -> (u64, u64) {
    let v = &p.item.version;
    match op {
        Op::Full => (0, v.size),
        Op::Append | Op::Write => (v.span.offset, v.span.size.min(v.size - v.span.offset)),
    }
}

/// Reads a version's bytes from the source and stores them on the site (not yet visible).
async fn prepare(source: &Client, p: &Planned, op: Op, throttle: &Throttle) -> Result<BlobWriter> {
    let (from, len) = range(p, op);
    let src = source.blob(&p.item.blob);
    let mut writer = p.dst.writer();
    let mut at = from;
    while at < from + len {
        let n = PIECE.min(from + len - at);
        throttle.take(n).await;
        let data = src.read(at, n, Some(p.item.version.version)).await?;
        writer.write(&data).await?;
        at += n;
    }
    Ok(writer)
}

/// Publishes a prepared version on the site. When the site's file was not what the plan
/// expected (someone else wrote it, so an append's expected size fails or the result has
/// another size), the version is written again whole, so the site's file is the source's
/// version after all and the plan of the versions after it holds.
async fn commit(
    source: &Client,
    p: &Planned,
    op: Op,
    writer: BlobWriter,
    throttle: &Throttle,
    progress: &Progress,
) -> Result<()> {
    let v = &p.item.version;
    let mut attrs = p.item.attrs.clone();
    attrs.insert(
        REPLICA_OF.into(),
        format!("{}:{}", p.item.blob.id, v.version),
    );
    let mut options = CommitOptions {
        attrs,
        expect_size: None,
    };
    let published = match op {
        Op::Full => writer.commit(Replace::default(), &options).await.map(Some),
        Op::Append => {
            options.expect_size = Some(p.size_before);
            append_once_settled(source, p, writer, &options, throttle).await
        }
        Op::Write => {
            writer
                .commit(
                    WriteAt {
                        offset: v.span.offset,
                    },
                    &options,
                )
                .await
        }
    };
    let size = match published {
        Ok(Some(info)) => Some(info.size),
        Ok(None) => None,
        Err(e) if e.kind == ErrorKind::PreconditionFailed => None,
        Err(e) => return Err(e),
    };
    progress
        .bytes_done
        .fetch_add(range(p, op).1, Ordering::Relaxed);
    if size == Some(v.size) || op == Op::Full {
        return Ok(());
    }
    tracing::warn!(
        "sites: /{} on the site was changed by someone else; writing version {} whole",
        p.item.path,
        v.version
    );
    let writer = prepare(source, p, Op::Full, throttle).await?;
    options.expect_size = None;
    writer.commit(Replace::default(), &options).await?;
    progress.bytes_done.fetch_add(v.size, Ordering::Relaxed);
    Ok(())
}

/// Publishes a prepared append on the site, expecting the site's file at its planned size.
/// The manager counts the versions in flight in that size, so the append is refused while
/// the site holds one nobody else published: typically this service's own, left by a run
/// killed in the middle of a publication, which the site gives up once its writer's lease
/// runs out. Until then, or [`IN_FLIGHT_WAIT`], the append is prepared and tried again
/// (writing the version whole instead would wait for the same give-up, and would turn an
/// append into a replacement). A file that someone else changed has another published
/// size: the refusal is returned at once.
async fn append_once_settled(
    source: &Client,
    p: &Planned,
    mut writer: BlobWriter,
    options: &CommitOptions,
    throttle: &Throttle,
) -> Result<Option<VersionInfo>> {
    let deadline = Instant::now() + IN_FLIGHT_WAIT;
    loop {
        match writer.commit(Append, options).await {
            Err(e)
                if e.kind == ErrorKind::PreconditionFailed
                    && Instant::now() < deadline
                    && p.dst.size(None).await? == p.size_before =>
            {
                tokio::time::sleep(IN_FLIGHT_POLL).await;
                writer = prepare(source, p, Op::Append, throttle).await?;
            }
            other => return other,
        }
    }
}

/// One catch-up pass of `path` from `source` to `target` without the service (for other
/// services and tools): everything the scan finds is replayed, deletions included. `cursor`
/// may start empty: what the site already holds is recognised and not sent again.
pub async fn replicate_once(
    source: &Client,
    target: &Client,
    path: &str,
    cursor: &mut Cursor,
) -> Result<PassReport> {
    let root = crate::config::normalize(path);
    let progress = Progress::default();
    let mut found = scan(source, &root, cursor).await?;
    let throttle = Arc::new(Throttle::new(0));
    while !apply(
        source,
        target,
        found,
        cursor,
        &throttle,
        &progress,
        Duration::MAX,
    )
    .await?
    {
        // A version went away meanwhile: scan again.
        found = scan(source, &root, cursor).await?;
    }
    Ok(PassReport {
        versions: progress.versions_done.load(Ordering::Relaxed),
        bytes: progress.bytes_done.load(Ordering::Relaxed),
        deleted: progress.files_deleted.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_follows_on_only_across_given_up_numbers() {
        assert!(only_aborted_between(3, 4, &[]));
        assert!(!only_aborted_between(3, 5, &[]));
        assert!(only_aborted_between(3, 7, &[(4, 6), (6, 7)]));
        assert!(!only_aborted_between(3, 7, &[(4, 6)]));
    }

    #[test]
    fn the_replica_record_names_blob_and_version() {
        let mut attrs = Attrs::new();
        assert_eq!(parse_replica(&attrs), None);
        attrs.insert(REPLICA_OF.into(), "12:345".into());
        assert_eq!(parse_replica(&attrs), Some((12, 345)));
        attrs.insert(REPLICA_OF.into(), "garbage".into());
        assert_eq!(parse_replica(&attrs), None);
    }
}
