//! Following the manager's change log into the ledger: each published version is counted
//! (its delta read from the DHT), each expiry, deletion and given-up range applied, in log
//! order and in one ledger transaction per page with the new position. The manager may then
//! drop what was applied.
//!
//! When the log cannot tell what happened (the ledger is new or lost and the log no longer
//! starts at the beginning, or the manager's state predates the log), the ledger is rebuilt
//! from the cluster: each blob's first retained tree is counted whole, then every later
//! retained version in order. Changes made during the rebuild are applied after it; applying
//! is idempotent, so the overlap is harmless.

use std::collections::HashMap;
use std::sync::Arc;

use tomus_client::cluster::Cluster;
use tomus_client::dht::DhtSource;
use tomus_client::listing;
use tomus_metadata::{BlobId, NodeRef, NodeSource, Span, Version};
use tomus_wire::maintenance::{Changes, Fates, TrimChanges};
use tomus_wire::{now_ms, BlobInfo, Change, Error, ErrorKind, Fate, Result, VersionInfo};

use crate::delta::{self, delta, KnownWrites};
use crate::ledger::{Ledger, Step};

/// Changes asked for per request.
const PAGE: u32 = 1000;
/// Steps applied per ledger transaction during a rebuild.
const REBUILD_BATCH: usize = 256;

/// What one round of following did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Followed {
    /// Changes applied.
    pub changes: u64,
    /// Published versions counted.
    pub counted: u64,
    /// Whether the ledger had to be rebuilt from the cluster.
    pub rebuilt: bool,
    /// Findings that disagree with the model (logged; the audit reconciles).
    pub inconsistencies: u64,
}

/// Runs `f` on a blocking thread with the ledger (its transactions sync to disk).
pub(crate) async fn on_ledger<T: Send + 'static>(
    ledger: &Arc<Ledger>,
    f: impl FnOnce(&Ledger) -> Result<T> + Send + 'static,
) -> Result<T> {
    let ledger = ledger.clone();
    tokio::task::spawn_blocking(move || f(&ledger))
        .await
        .map_err(|e| Error::internal(format!("ledger task failed: {e}")))?
}

/// Applies the changes the manager logged since the ledger's position, up to where the log
/// stood when this began: writers that publish faster than their versions are counted must
/// not keep a pass from ever ending (the rest is applied by the next pass).
pub async fn follow(cluster: &Cluster, ledger: &Arc<Ledger>) -> Result<Followed> {
    let mut done = Followed::default();
    let mut cursor = on_ledger(ledger, |l| l.cursor()).await?;
    let mut until = None;
    loop {
        let page = cluster
            .manager(Changes {
                after: cursor,
                limit: PAGE,
            })
            .await?;
        let unrecorded = page
            .changes
            .iter()
            .any(|(_, c)| matches!(c, Change::Unrecorded));
        let requested = on_ledger(ledger, |l| l.rebuild_requested()).await?;
        if page.first_kept > cursor + 1 || unrecorded || requested {
            tracing::info!(
                "the change log does not cover the maintenance ledger's position ({cursor}, \
                 log from {}): rebuilding it from the cluster",
                page.first_kept
            );
            cursor = rebuild(cluster, ledger, page.last).await?;
            done.rebuilt = true;
            continue;
        }
        let until = *until.get_or_insert(page.last);
        let Some(&(last, _)) = page.changes.last() else {
            break;
        };
        let writes = Writes::of(&page.changes);
        prefetch(cluster, &writes).await;
        let mut counted: HashMap<BlobId, (Version, u64)> = HashMap::new();
        let mut steps = Vec::new();
        for (_, change) in &page.changes {
            done.counted +=
                steps_of(cluster, ledger, change, &writes, &mut counted, &mut steps).await?;
        }
        let now = now_ms();
        let applied = on_ledger(ledger, move |l| l.apply(&steps, last, now)).await?;
        done.inconsistencies += applied.inconsistencies.len() as u64;
        done.changes += page.changes.len() as u64;
        cursor = last;
        if let Err(e) = cluster.manager(TrimChanges { upto: last }).await {
            tracing::debug!("trimming the change log: {e}");
        }
        if cursor >= until {
            break;
        }
    }
    Ok(done)
}

/// The writes of the versions a page of changes publishes, per blob, in log order.
struct Writes {
    by_blob: HashMap<BlobId, BlobWrites>,
    /// For a blob the page publishes nothing of.
    none: KnownWrites,
}

struct BlobWrites {
    chunk_size: u64,
    versions: Vec<VersionInfo>,
    known: KnownWrites,
}

impl Writes {
    fn of(changes: &[(u64, Change)]) -> Self {
        let mut by_blob: HashMap<BlobId, BlobWrites> = HashMap::new();
        for (_, change) in changes {
            if let Change::Published {
                blob,
                chunk_size,
                versions,
                ..
            } = change
            {
                let w = by_blob.entry(*blob).or_insert_with(|| BlobWrites {
                    chunk_size: *chunk_size,
                    versions: Vec::new(),
                    known: KnownWrites::new(),
                });
                w.versions.extend(versions.iter().cloned());
                w.known.extend(versions.iter().map(|v| (v.version, v.span)));
            }
        }
        Writes {
            by_blob,
            none: KnownWrites::new(),
        }
    }

    fn known(&self, blob: BlobId) -> &KnownWrites {
        self.by_blob.get(&blob).map_or(&self.none, |w| &w.known)
    }
}

/// Loads into the node cache, with few requests, the nodes the deltas of a page's published
/// versions read: every version's new leaves, and its inner nodes that the walk of the next
/// version rewriting their range must read (where the two writes part; in a run of appends
/// into one slot, none). The nodes of a run of versions share their owners, so this is one
/// request per owner and blob rather than several per version.
async fn prefetch(cluster: &Cluster, writes: &Writes) {
    for (blob, w) in &writes.by_blob {
        let cs = w.chunk_size;
        // Range -> the write of the next version (in the page) that rewrites it.
        let mut next_writer: HashMap<Span, Span> = HashMap::new();
        let mut refs = Vec::new();
        for info in w.versions.iter().rev() {
            for s in delta::rewritten(info.span, info.capacity, cs) {
                let r = NodeRef {
                    version: info.version,
                    offset: s.offset,
                    size: s.size,
                };
                let read = s.size <= cs
                    || next_writer
                        .get(&s)
                        .is_none_or(|next| delta::must_read(r, s, *next, cs, &w.known));
                if read {
                    refs.push(r);
                }
                next_writer.insert(s, info.span);
            }
        }
        let source = DhtSource {
            cluster,
            blob: *blob,
        };
        // Misses are fetched again, one by one, by the deltas themselves.
        if let Err(e) = source.fetch(&refs).await {
            tracing::debug!("prefetching the new nodes of blob {blob}: {e}");
        }
    }
}

/// Turns one change into ledger steps; returns how many versions it counted. `counted`
/// tracks the last version counted per blob within the page (the ledger has the rest).
async fn steps_of(
    cluster: &Cluster,
    ledger: &Arc<Ledger>,
    change: &Change,
    writes: &Writes,
    counted: &mut HashMap<BlobId, (Version, u64)>,
    steps: &mut Vec<Step>,
) -> Result<u64> {
    match change {
        Change::Published {
            blob,
            chunk_size,
            replication,
            versions,
        } => {
            let mut n = 0;
            for info in versions {
                let prev = match counted.get(blob) {
                    Some(&p) => Some(p),
                    None => {
                        let b = *blob;
                        on_ledger(ledger, move |l| l.blob(b))
                            .await?
                            .filter(|t| t.counted > 0)
                            .map(|t| (t.counted, t.counted_capacity))
                    }
                };
                if prev.is_some_and(|(v, _)| info.version <= v) {
                    continue;
                }
                let known = writes.known(*blob);
                let step = match count(cluster, *blob, *chunk_size, *replication, info, prev, known)
                    .await
                {
                    Ok(step) => step,
                    // Deleted since: there is nothing of it to count (its deletion follows
                    // in the log, and its nodes may be gone already).
                    Err(e)
                        if matches!(e.kind, ErrorKind::NotFound | ErrorKind::Unavailable)
                            && deleted(cluster, *blob).await? =>
                    {
                        return Ok(n);
                    }
                    Err(e) => return Err(e),
                };
                steps.push(step);
                counted.insert(*blob, (info.version, info.capacity));
                n += 1;
            }
            Ok(n)
        }
        Change::Expired {
            blob,
            retained_from,
        } => {
            steps.push(Step::Expire {
                blob: *blob,
                retained_from: *retained_from,
            });
            Ok(0)
        }
        Change::Aborted { blob, from, to } => {
            steps.push(Step::Abort {
                blob: *blob,
                from: *from,
                to: *to,
            });
            Ok(0)
        }
        Change::Deleted { blob } => {
            steps.push(Step::Delete { blob: *blob });
            counted.remove(blob);
            Ok(0)
        }
        // Handled by the caller (a rebuild).
        Change::Unrecorded => Ok(0),
    }
}

/// Whether the manager positively knows `blob` deleted.
async fn deleted(cluster: &Cluster, blob: BlobId) -> Result<bool> {
    let fates = cluster
        .manager(Fates {
            items: vec![(blob, 1)],
        })
        .await?;
    Ok(fates.first() == Some(&Fate::Deleted))
}

/// The step counting version `info` of `blob`, published after `prev`.
async fn count(
    cluster: &Cluster,
    blob: BlobId,
    chunk_size: u64,
    replication: u32,
    info: &VersionInfo,
    prev: Option<(Version, u64)>,
    known: &KnownWrites,
) -> Result<Step> {
    let source = DhtSource { cluster, blob };
    Ok(Step::Count {
        blob,
        chunk_size,
        replication,
        version: info.version,
        capacity: info.capacity,
        delta: delta(&source, chunk_size, info, prev, known).await?,
    })
}

/// Rebuilds the ledger from the cluster's current state; returns the log position it
/// reflects (`since`: the last entry logged before the rebuild began).
async fn rebuild(cluster: &Cluster, ledger: &Arc<Ledger>, since: u64) -> Result<u64> {
    let blobs = listing::blobs(cluster).await?;
    let listed: HashMap<BlobId, &BlobInfo> = blobs.iter().map(|b| (b.id, b)).collect();
    // Tracked blobs the cluster no longer lists: deleted, if the manager says so.
    let tracked = on_ledger(ledger, |l| l.blobs()).await?;
    let gone: Vec<(BlobId, Version)> = tracked
        .iter()
        .filter(|(id, _)| !listed.contains_key(id))
        .map(|(id, _)| (*id, 1))
        .collect();
    if !gone.is_empty() {
        let fates = cluster
            .manager(Fates {
                items: gone.clone(),
            })
            .await?;
        let steps: Vec<Step> = gone
            .iter()
            .zip(fates)
            .filter(|(_, f)| *f == Fate::Deleted)
            .map(|((blob, _), _)| Step::Delete { blob: *blob })
            .collect();
        apply_keeping_cursor(ledger, steps).await?;
    }
    for blob in &blobs {
        rebuild_blob(cluster, ledger, blob).await?;
    }
    on_ledger(ledger, move |l| l.rebuilt(since)).await?;
    Ok(since)
}

/// Rebuilds what the ledger tracks of one blob: its first retained tree whole, then its
/// later retained versions in order.
async fn rebuild_blob(cluster: &Cluster, ledger: &Arc<Ledger>, blob: &BlobInfo) -> Result<()> {
    let versions = match listing::versions(cluster, blob.id, 0).await {
        Ok(v) => v.versions,
        // Deleted meanwhile: its change follows.
        Err(e) if e.kind == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let source = DhtSource {
        cluster,
        blob: blob.id,
    };
    let steps = delta::rebuild(
        &source,
        blob.id,
        blob.chunk_size,
        blob.replication,
        &versions,
    )
    .await?;
    // The baseline goes first, alone; the counts in batches.
    let mut steps = steps.into_iter();
    let head: Vec<Step> = steps.by_ref().take(2).collect();
    apply_keeping_cursor(ledger, head).await?;
    let rest: Vec<Step> = steps.collect();
    for batch in rest.chunks(REBUILD_BATCH) {
        apply_keeping_cursor(ledger, batch.to_vec()).await?;
    }
    Ok(())
}

/// Applies steps without moving the ledger's position in the change log.
async fn apply_keeping_cursor(ledger: &Arc<Ledger>, steps: Vec<Step>) -> Result<()> {
    if steps.is_empty() {
        return Ok(());
    }
    on_ledger(ledger, move |l| {
        let cursor = l.cursor()?;
        l.apply(&steps, cursor, now_ms()).map(|_| ())
    })
    .await
}
