//! The version manager: the only serialization point of the write protocol.
//!
//! It assigns version numbers (fixing append offsets at assignment time), hands each writer the
//! lower versions still in flight and the latest published tree, and publishes versions strictly
//! in assignment order once each of them and every lower one completed. Publications are group
//! committed (one fsynced transaction for all that completed meanwhile) before anyone is told.
//!
//! It also applies retention policies (older published versions are removed, the latest is
//! always kept) and forgets blobs whose files were deleted.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tomus_metadata::{capacity_for, BlobId, Span, Version};
use tomus_wire::{
    Assignment, Attrs, BlobInfo, Cutoffs, DataAge, Error, ErrorKind, Fate, Result, Retention,
    VersionInfo, VersionList, VersionState, VersionsFrom, WriteOp, MAX_ATTRS_BYTES, MAX_CHUNK_SIZE,
    MIN_CHUNK_SIZE,
};

use tomus_worker::Workers;

use crate::store::{BlobRecord, Publication, RetentionRecord, Store};

/// What garbage collection asks: fates of versions, cutoffs.
mod collection;
/// Publications committed in batches.
mod committer;
/// Writes that may have put data on a draining provider.
mod drains;
/// Retention policies and expiry.
mod retention;
/// Which blobs the periodic rounds look at.
mod watchlist;
/// Assignment, completion, publication, leases and aborts.
mod writes;

pub use drains::{drain_horizon, removal_fence};
pub(crate) use retention::check_retention;
pub use retention::describe;

/// Version numbers reserved durably at a time; a restarted manager skips the unused rest.
const RESERVE_BLOCK: u64 = 4096;
/// Largest blob size: keeps every offset computation far from overflow.
pub const MAX_BLOB_SIZE: u64 = 1 << 60;
pub const MAX_REPLICATION: u32 = 16;
/// How long `complete` waits for lower versions before telling the writer why it is still
/// unpublished; below the clients' 30 s request timeout so they get that reason, not a timeout.
const COMPLETE_WAIT: Duration = Duration::from_secs(20);

struct Pending {
    info: VersionInfo,
    completed: bool,
    /// When the writer got the number; its lease runs from here until it completes.
    assigned_at: Instant,
    /// Published with the version.
    attrs: Attrs,
    /// The published version its writer builds on (0: none): its metadata may refer to any
    /// node of that version's tree, so retention keeps that version while this one is pending.
    base: Version,
    /// Since when (manager ms) the data it refers to has been stored, and, for a version
    /// that reuses other versions' chunks, since when they were found referenced: garbage
    /// collection's cutoffs stay before these while the version is pending.
    stored_since: u64,
    reused_since: Option<u64>,
}

struct BlobState {
    /// Durable, published state.
    record: BlobRecord,
    latest: VersionInfo,
    /// Version numbers below this are durably reserved.
    reserved: Version,
    next_version: Version,
    /// Size and capacity after the latest assigned version (published or not).
    assigned_size: u64,
    assigned_capacity: u64,
    /// Every assigned version above the durable published one.
    pending: BTreeMap<Version, Pending>,
    /// Highest version handed to the committer.
    sent_upto: Version,
    /// Versions given up by lease expiry since this manager started, and why: for the
    /// writers still waiting on them.
    given_up: BTreeMap<Version, GiveUp>,
    retention: Retention,
    /// First retained version: published versions below it were removed by retention.
    /// Raised before their rows are deleted, so reads never see them half-removed.
    retained_from: Version,
    /// Whether the policy may remove versions that were not looked at yet (set by
    /// publications and policy changes).
    expiry_due: bool,
    /// When a time-based policy's cutoff next passes a version it keeps (from the last
    /// look at the store): the blob is looked at again then.
    expiry_at_ms: Option<u64>,
    /// Its file was deleted: waiting writers are told so.
    deleted: bool,
    /// Why it is gone when that is not a plain delete (its new file could not take its
    /// name): what waiting writers are told.
    gone: Option<Error>,
    /// The blob of a file being created: the path it takes when its first version is
    /// published (create-on-commit), until then invisible.
    naming: Option<Naming>,
}

/// The name a new file's blob takes with its first published version, and who holds it.
struct Naming {
    path: String,
    /// Writers that created (or joined) the new file and did not give it up.
    holders: u32,
    /// Last sign of life of a writer (creation, chunk placement, version assignment).
    touched: Instant,
}

impl BlobState {
    /// A blob's in-memory state from its durable records.
    fn new(record: BlobRecord, latest: VersionInfo, next: Version, r: RetentionRecord) -> Self {
        BlobState {
            latest,
            reserved: next,
            next_version: next,
            assigned_size: record.size,
            assigned_capacity: record.capacity,
            pending: BTreeMap::new(),
            sent_upto: record.published,
            given_up: BTreeMap::new(),
            retention: r.policy,
            retained_from: r.retained_from,
            expiry_due: true,
            expiry_at_ms: None,
            deleted: false,
            gone: None,
            naming: None,
            record,
        }
    }

    /// What a writer of a deleted blob is told.
    fn gone_error(&self) -> Error {
        self.gone
            .clone()
            .unwrap_or_else(|| blob_deleted(self.record.id))
    }

    /// Whether nothing was published, sent for publication or assigned: a new file that
    /// may be dropped without anyone having seen it.
    fn unwritten(&self) -> bool {
        self.record.published == 0 && self.sent_upto == 0 && self.pending.is_empty()
    }

    /// Why version `v` is unreadable if retention removed it.
    fn removed(&self, v: Version) -> Option<Error> {
        (v > 0 && v < self.retained_from).then(|| {
            let blob = self.record.id;
            let why = match self.retention {
                Retention::KeepAll => "an earlier retention policy".to_string(),
                p => format!("its retention policy ({})", describe(p)),
            };
            Error::not_found(format!("version {v} of blob {blob} was removed by {why}"))
        })
    }
}

#[derive(Clone, Copy, Debug)]
enum GiveUp {
    /// Its writer did not complete within the lease.
    Expired,
    /// Its writer gave it up: storing its data or metadata failed.
    Abandoned,
    /// Assigned while the expired version `0` was in flight: its metadata refers to that
    /// version, so it is given up too, and its writer can simply retry.
    Behind(Version),
}

struct BlobSlot {
    state: Mutex<BlobState>,
    published: watch::Sender<Version>,
    /// Held while version numbers are being reserved on disk.
    reserving: tokio::sync::Mutex<()>,
}

/// What an assignment attempt under the blob's lock came to.
enum Attempt {
    Assigned(Assignment),
    /// Version numbers below this must be reserved first.
    Reserve(Version),
}

impl BlobSlot {
    fn lock(&self) -> MutexGuard<'_, BlobState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct VersionManager {
    store: Arc<Store>,
    blobs: RwLock<BTreeMap<BlobId, Arc<BlobSlot>>>,
    commits: mpsc::UnboundedSender<Publication>,
    /// Serializes policy changes and expiry, so versions are never removed under a policy
    /// that was just replaced.
    expiry: Mutex<()>,
    /// The garbage-collection cutoffs granted. Assignments read them while they check a
    /// writer's data and record it pending; a grant writes them once it has seen every
    /// pending writer, so no writer slips between the two.
    cutoffs: RwLock<Cutoffs>,
    /// Writes that may have put data on draining providers.
    drains: drains::DrainWatch,
    /// The blobs the periodic rounds look at (a leaf lock: see `watchlist.rs`).
    watchlist: Mutex<watchlist::Watchlist>,
    /// Dropped with the version manager, which stops its committer.
    committer_stop: watch::Sender<bool>,
}

/// How much older a writer's data may be than its own measure of its age says (the
/// request's transit): cutoffs and refusals keep this much margin.
const LATENCY_SLACK_MS: u64 = 250;
fn blob_deleted(blob: BlobId) -> Error {
    Error::not_found(format!("blob {blob} was deleted"))
}

fn version_zero(blob: BlobId) -> VersionInfo {
    VersionInfo {
        blob,
        version: 0,
        span: Span::new(0, 0),
        size: 0,
        capacity: 0,
        state: VersionState::Published,
        append: false,
        published_ms: 0,
    }
}

pub use tomus_wire::now_ms;

fn blob_info(s: &BlobState) -> BlobInfo {
    BlobInfo {
        id: s.record.id,
        chunk_size: s.record.chunk_size,
        replication: s.record.replication,
        latest: s.record.published,
        size: s.record.size,
        modified_ms: s.record.modified_ms,
        retention: s.retention,
    }
}

/// A blob to create: its chunk size, replication and retention policy.
#[derive(Clone, Copy, Debug)]
pub struct NewBlob {
    pub chunk_size: u64,
    pub replication: u32,
    pub retention: Retention,
}

impl NewBlob {
    /// Refuses chunk sizes, replications and policies the manager does not take.
    pub fn check(&self) -> Result<()> {
        check_retention(self.retention)?;
        let chunk_size = self.chunk_size;
        if !chunk_size.is_power_of_two() || !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size)
        {
            return Err(Error::invalid(format!(
                "chunk size {chunk_size} must be a power of two from 4 KiB to 256 MiB"
            )));
        }
        if !(1..=MAX_REPLICATION).contains(&self.replication) {
            return Err(Error::invalid(format!(
                "replication {} must be between 1 and {MAX_REPLICATION}",
                self.replication
            )));
        }
        Ok(())
    }
}

impl VersionManager {
    /// Loads every blob from the store. Versions assigned but unpublished before a restart are
    /// recorded as aborted and numbering continues after the reserved block.
    pub fn open(store: Arc<Store>, workers: &Workers) -> Result<Arc<Self>> {
        let mut blobs = BTreeMap::new();
        for record in store.blobs()? {
            let reserved = store.reserved(record.id)?.unwrap_or(record.published + 1);
            let next_version = reserved.max(record.published + 1);
            if next_version > record.published + 1 {
                let from = record.published + 1;
                if !store
                    .aborted_ranges(record.id)?
                    .contains(&(from, next_version))
                {
                    store.put_aborted(record.id, from, next_version)?;
                    tracing::info!(
                        "blob {}: versions {from}..{next_version} were not published before restart; marked aborted",
                        record.id
                    );
                }
            }
            let latest = match record.published {
                0 => version_zero(record.id),
                v => store.version(record.id, v)?.ok_or_else(|| {
                    Error::internal(format!("blob {}: published version {v} missing", record.id))
                })?,
            };
            let (tx, _) = watch::channel(record.published);
            let retention = store.retention(record.id)?.unwrap_or_default();
            let state = BlobState::new(record, latest, next_version, retention);
            blobs.insert(
                state.record.id,
                Arc::new(BlobSlot {
                    state: Mutex::new(state),
                    published: tx,
                    reserving: Default::default(),
                }),
            );
        }
        let blob_ids = blobs.keys().copied().collect();
        let (commits, rx) = mpsc::unbounded_channel();
        let cutoffs = RwLock::new(store.cutoffs()?);
        let store_removed_before = store.removed_before()?;
        let vm = Arc::new(VersionManager {
            store,
            blobs: RwLock::new(blobs),
            commits,
            expiry: Mutex::new(()),
            cutoffs,
            drains: drains::DrainWatch::removed_before(store_removed_before),
            // Every blob is looked at once after a restart (its `expiry_due` starts set).
            watchlist: Mutex::new(watchlist::Watchlist::expiry_due_for(blob_ids)),
            committer_stop: watch::channel(false).0,
        });
        let committer = committer::Committer {
            vm: Arc::downgrade(&vm),
            queue: rx,
            next: None,
            closed: false,
            published: 0,
            commits: 0,
        };
        workers.spawn(committer, vm.committer_stop.subscribe(), None);
        Ok(vm)
    }

    fn slot(&self, blob: BlobId) -> Result<Arc<BlobSlot>> {
        let blobs = self.blobs.read().unwrap_or_else(|p| p.into_inner());
        blobs
            .get(&blob)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("blob {blob} does not exist")))
    }

    /// Creates a blob whose versions `retention` keeps (a policy in place before its first
    /// version).
    pub fn create_blob(
        &self,
        chunk_size: u64,
        replication: u32,
        retention: Retention,
    ) -> Result<BlobInfo> {
        let new = [NewBlob {
            chunk_size,
            replication,
            retention,
        }];
        new[0].check()?;
        let mut created = self.create_blobs_with(&new, |_, _, _| Ok(()))?;
        created
            .pop()
            .ok_or_else(|| Error::internal("no blob was created"))
    }

    /// Creates the blobs `new` in one transaction, with `also(txn, i, id)` recording what goes
    /// with the `i`-th (a new file's entry) in it too: one sync for all. Each must have passed
    /// [`NewBlob::check`].
    pub fn create_blobs_with(
        &self,
        new: &[NewBlob],
        also: impl FnMut(&redb::WriteTransaction, usize, BlobId) -> Result<()>,
    ) -> Result<Vec<BlobInfo>> {
        let reserved = 1 + RESERVE_BLOCK;
        let make = |i: usize, id| BlobRecord {
            id,
            chunk_size: new[i].chunk_size,
            replication: new[i].replication,
            published: 0,
            size: 0,
            capacity: 0,
            modified_ms: now_ms(),
        };
        let policies: Vec<Retention> = new.iter().map(|b| b.retention).collect();
        let records = self.store.create_blobs(&policies, reserved, make, also)?;
        let mut infos = Vec::with_capacity(records.len());
        let mut blobs = self.blobs.write().unwrap_or_else(|p| p.into_inner());
        for (record, retention) in records.into_iter().zip(policies) {
            let id = record.id;
            let (tx, _) = watch::channel(0);
            let policy = RetentionRecord {
                policy: retention,
                retained_from: 0,
            };
            let mut state = BlobState::new(record, version_zero(id), 1, policy);
            state.reserved = reserved;
            // No version for a policy to remove yet.
            state.expiry_due = false;
            infos.push(blob_info(&state));
            blobs.insert(
                id,
                Arc::new(BlobSlot {
                    state: Mutex::new(state),
                    published: tx,
                    reserving: Default::default(),
                }),
            );
        }
        Ok(infos)
    }

    pub fn blob_info(&self, blob: BlobId) -> Result<BlobInfo> {
        Ok(blob_info(&self.slot(blob)?.lock()))
    }

    /// The first `limit` blobs with ids above `after`, in id order.
    pub fn list_blobs(&self, after: BlobId, limit: usize) -> Vec<BlobInfo> {
        let page: Vec<Arc<BlobSlot>> = {
            let blobs = self.blobs.read().unwrap_or_else(|p| p.into_inner());
            let above = (std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded);
            blobs
                .range(above)
                .take(limit)
                .map(|(_, s)| s.clone())
                .collect()
        };
        page.iter().map(|s| blob_info(&s.lock())).collect()
    }

    /// A blob's chunk size and replication, for placing its chunks (a sign of life of the
    /// writer of a new file).
    pub fn chunk_size(&self, blob: BlobId) -> Result<(u64, u32)> {
        let slot = self.slot(blob)?;
        let mut s = slot.lock();
        if let Some(n) = &mut s.naming {
            n.touched = Instant::now();
        }
        Ok((s.record.chunk_size, s.record.replication))
    }

    /// Records that the unpublished blob `blob` is the new file `path` (one more writer
    /// holding it): its first publication binds it to that path.
    pub(crate) fn name_pending(&self, blob: BlobId, path: &str) -> Result<()> {
        let slot = self.slot(blob)?;
        let mut s = slot.lock();
        if s.record.published > 0 {
            return Ok(());
        }
        match &mut s.naming {
            Some(n) => {
                n.holders = n.holders.saturating_add(1);
                n.touched = Instant::now();
            }
            None => {
                s.naming = Some(Naming {
                    path: path.to_string(),
                    holders: 1,
                    touched: Instant::now(),
                });
                self.mark_active(&s);
            }
        }
        Ok(())
    }

    /// A writer of the new file of `blob` gives it up; true when no writer holds it any
    /// more and nothing of it was ever assigned, so it may be dropped at once.
    pub(crate) fn release_pending(&self, blob: BlobId) -> bool {
        let Ok(slot) = self.slot(blob) else {
            return false;
        };
        let mut s = slot.lock();
        let unwritten = s.unwritten();
        match &mut s.naming {
            Some(n) => {
                n.holders = n.holders.saturating_sub(1);
                n.holders == 0 && unwritten
            }
            None => false,
        }
    }

    /// New files (blob, path) with nothing assigned whose writers showed no sign of life
    /// for `grace`: their writers are gone (a write that old would be refused anyway).
    pub(crate) fn abandoned_files(&self, grace: Duration) -> Vec<(BlobId, String)> {
        let mut out = Vec::new();
        for (_, slot) in self.active_slots() {
            let s = slot.lock();
            if let Some(n) = &s.naming {
                if s.unwritten() && n.touched.elapsed() > grace {
                    out.push((s.record.id, n.path.clone()));
                }
            }
        }
        out
    }

    /// A version's record; `None` asks for the latest published.
    pub fn version(&self, blob: BlobId, version: Option<Version>) -> Result<VersionInfo> {
        let slot = self.slot(blob)?;
        let (published, latest, next_version, pending) = {
            let s = slot.lock();
            if let Some(e) = version.and_then(|v| s.removed(v)) {
                return Err(e);
            }
            let pending = version.and_then(|v| s.pending.get(&v).map(|p| p.info.clone()));
            (
                s.record.published,
                s.latest.clone(),
                s.next_version,
                pending,
            )
        };
        let v = match version {
            None => return Ok(latest),
            Some(v) => v,
        };
        if v == 0 {
            return Ok(version_zero(blob));
        }
        if v == latest.version {
            return Ok(latest);
        }
        if let Some(p) = pending {
            return Err(Error::new(
                ErrorKind::VersionNotPublished,
                format!(
                    "version {} of blob {blob} is not published yet (latest published: {published})",
                    p.version
                ),
            ));
        }
        if v >= next_version {
            return Err(Error::not_found(format!(
                "version {v} of blob {blob} does not exist (latest published: {published})"
            )));
        }
        if let Some(info) = self.store.version(blob, v)? {
            return Ok(info);
        }
        // Retention may have removed it since the check above.
        if let Some(e) = slot.lock().removed(v) {
            return Err(e);
        }
        Err(Error::new(
            ErrorKind::VersionAborted,
            format!("version {v} of blob {blob} was aborted and holds no data"),
        ))
    }

    /// Attributes of published versions of blobs (empty for versions that have none).
    pub fn attrs(&self, keys: &[(BlobId, Version)]) -> Result<Vec<Attrs>> {
        self.store.attrs(keys)
    }

    /// The first `limit` retained published versions of `blob` from `from` on, in its
    /// order, with their attributes.
    pub fn versions_attrs(
        &self,
        blob: BlobId,
        from: VersionsFrom,
        limit: usize,
    ) -> Result<Vec<(VersionInfo, Attrs)>> {
        let retained_from = self.slot(blob)?.lock().retained_from;
        let versions = match from {
            VersionsFrom::After(after) => {
                let first = retained_from.max(after.saturating_add(1));
                self.store.versions(blob, first..=u64::MAX, limit, false)?
            }
            // Nothing retained below `before` (and no inverted range for the store).
            VersionsFrom::Before(before) if before <= retained_from => Vec::new(),
            VersionsFrom::Before(before) => {
                self.store
                    .versions(blob, retained_from..=before - 1, limit, true)?
            }
        };
        let keys: Vec<_> = versions.iter().map(|v| (blob, v.version)).collect();
        let attrs = self.store.attrs(&keys)?;
        Ok(versions.into_iter().zip(attrs).collect())
    }

    /// The first `limit` retained published versions of `blob` numbered above `after`, with
    /// the aborted ranges that start among the versions the page covers: up to its last
    /// version, or to the end when the page is the last one.
    pub fn versions(&self, blob: BlobId, after: Version, limit: usize) -> Result<VersionList> {
        let first = after.saturating_add(1);
        let from = self.slot(blob)?.lock().retained_from.max(first);
        let versions = self.store.versions(blob, from..=u64::MAX, limit, false)?;
        let covered_to = match versions.last() {
            Some(last) if versions.len() == limit => last.version,
            _ => u64::MAX,
        };
        Ok(VersionList {
            aborted: self
                .store
                .aborted_ranges_starting(blob, first, covered_to)?,
            versions,
        })
    }

    /// The newest `limit` retained published versions of `blob`, newest first, with the
    /// aborted ranges that start after the oldest of them (all of them when the page holds
    /// every retained version): for pages that show a blob's recent history.
    pub fn newest_versions(&self, blob: BlobId, limit: usize) -> Result<VersionList> {
        let from = self.slot(blob)?.lock().retained_from;
        let versions = self.store.versions(blob, from..=u64::MAX, limit, true)?;
        let first = match versions.last() {
            Some(oldest) if versions.len() == limit => oldest.version,
            _ => 0,
        };
        Ok(VersionList {
            aborted: self.store.aborted_ranges_starting(blob, first, u64::MAX)?,
            versions,
        })
    }

    /// How many blobs exist.
    pub fn blob_count(&self) -> usize {
        self.blobs.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Forgets deleted blobs (their records are already gone from the store): later
    /// requests find nothing and writers waiting on them are told.
    pub fn forget_blobs(&self, ids: &[BlobId]) {
        let slots: Vec<Arc<BlobSlot>> = {
            let mut blobs = self.blobs.write().unwrap_or_else(|p| p.into_inner());
            ids.iter().filter_map(|id| blobs.remove(id)).collect()
        };
        for slot in slots {
            {
                let mut s = slot.lock();
                s.deleted = true;
                s.pending.clear();
            }
            slot.published.send_modify(|_| {});
        }
    }

    /// [`VersionManager::forget_blobs`] for the blobs of new files that could not take
    /// their names, each with why (what their writers are told).
    pub fn forget_unnamed(&self, failed: &[(BlobId, Error)]) {
        for (blob, why) in failed {
            if let Ok(slot) = self.slot(*blob) {
                slot.lock().gone = Some(why.clone());
            }
        }
        let ids: Vec<BlobId> = failed.iter().map(|(b, _)| *b).collect();
        self.forget_blobs(&ids);
    }
}
