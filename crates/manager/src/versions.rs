//! The version manager: the only serialization point of the write protocol.
//!
//! It assigns version numbers (fixing append offsets at assignment time), hands each writer the
//! lower versions still in flight and the latest published tree, and publishes versions strictly
//! in assignment order once each of them and every lower one completed. Publications are group
//! committed (one fsynced transaction for all that completed meanwhile) before anyone is told.
//!
//! It also applies retention policies (older published versions are removed, the latest is
//! always kept) and forgets blobs whose files were deleted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tomus_metadata::{capacity_for, BlobId, Span, Version};
use tomus_wire::{
    Assignment, Attrs, BlobInfo, Error, ErrorKind, Result, Retention, VersionInfo, VersionList,
    VersionState, WriteOp, MAX_ATTRS_BYTES, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE,
};

use crate::store::{BlobRecord, Publication, RetentionRecord, Store};

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
    /// publications and policy changes; time-based policies are looked at every round).
    expiry_due: bool,
    /// Its file was deleted: waiting writers are told so.
    deleted: bool,
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
            deleted: false,
            record,
        }
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
}

impl BlobSlot {
    fn lock(&self) -> MutexGuard<'_, BlobState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct VersionManager {
    store: Arc<Store>,
    blobs: RwLock<HashMap<BlobId, Arc<BlobSlot>>>,
    commits: mpsc::UnboundedSender<Publication>,
    /// Serializes policy changes and expiry, so versions are never removed under a policy
    /// that was just replaced.
    expiry: Mutex<()>,
}

/// A retention policy in words, for messages.
pub fn describe(policy: Retention) -> String {
    match policy {
        Retention::KeepAll => "keep all".into(),
        Retention::KeepLast(n) => format!("keep last {n}"),
        Retention::KeepNewerThan(ms) => format!("keep versions newer than {ms} ms"),
    }
}

fn check_retention(policy: Retention) -> Result<()> {
    match policy {
        Retention::KeepLast(0) => Err(Error::invalid(
            "retention keep-last needs at least 1 version",
        )),
        Retention::KeepNewerThan(0) => Err(Error::invalid(
            "retention keep-newer-than needs at least 1 ms",
        )),
        _ => Ok(()),
    }
}

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

impl VersionManager {
    /// Loads every blob from the store. Versions assigned but unpublished before a restart are
    /// recorded as aborted and numbering continues after the reserved block.
    pub fn open(store: Arc<Store>) -> Result<Arc<Self>> {
        let mut blobs = HashMap::new();
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
                }),
            );
        }
        let (commits, rx) = mpsc::unbounded_channel();
        let vm = Arc::new(VersionManager {
            store,
            blobs: RwLock::new(blobs),
            commits,
            expiry: Mutex::new(()),
        });
        tokio::spawn(committer(Arc::downgrade(&vm), rx));
        Ok(vm)
    }

    fn slot(&self, blob: BlobId) -> Result<Arc<BlobSlot>> {
        let blobs = self.blobs.read().unwrap_or_else(|p| p.into_inner());
        blobs
            .get(&blob)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("blob {blob} does not exist")))
    }

    pub fn create_blob(&self, chunk_size: u64, replication: u32) -> Result<BlobInfo> {
        if !chunk_size.is_power_of_two() || !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk_size)
        {
            return Err(Error::invalid(format!(
                "chunk size {chunk_size} must be a power of two from 4 KiB to 256 MiB"
            )));
        }
        if !(1..=MAX_REPLICATION).contains(&replication) {
            return Err(Error::invalid(format!(
                "replication {replication} must be between 1 and {MAX_REPLICATION}"
            )));
        }
        let id = self.store.next_id("blob")?;
        let record = BlobRecord {
            id,
            chunk_size,
            replication,
            published: 0,
            size: 0,
            capacity: 0,
            modified_ms: now_ms(),
        };
        self.store.put_blob(&record)?;
        let (tx, _) = watch::channel(0);
        let state = BlobState::new(record, version_zero(id), 1, RetentionRecord::default());
        let info = blob_info(&state);
        let mut blobs = self.blobs.write().unwrap_or_else(|p| p.into_inner());
        blobs.insert(
            id,
            Arc::new(BlobSlot {
                state: Mutex::new(state),
                published: tx,
            }),
        );
        Ok(info)
    }

    pub fn blob_info(&self, blob: BlobId) -> Result<BlobInfo> {
        Ok(blob_info(&self.slot(blob)?.lock()))
    }

    pub fn list_blobs(&self) -> Vec<BlobInfo> {
        let slots: Vec<Arc<BlobSlot>> = {
            let blobs = self.blobs.read().unwrap_or_else(|p| p.into_inner());
            blobs.values().cloned().collect()
        };
        let mut out: Vec<BlobInfo> = slots.iter().map(|s| blob_info(&s.lock())).collect();
        out.sort_by_key(|b| b.id);
        out
    }

    pub fn chunk_size(&self, blob: BlobId) -> Result<(u64, u32)> {
        let slot = self.slot(blob)?;
        let s = slot.lock();
        Ok((s.record.chunk_size, s.record.replication))
    }

    /// Assigns the next version of `blob` for `op`.
    pub fn assign(&self, blob: BlobId, op: WriteOp) -> Result<Assignment> {
        self.assign_with(blob, op, Attrs::new(), None)
    }

    /// Assigns the next version of `blob` for `op`, to be published with `attrs`; with
    /// `expect_size`, only if the size after every assigned version is that.
    pub fn assign_with(
        &self,
        blob: BlobId,
        op: WriteOp,
        attrs: Attrs,
        expect_size: Option<u64>,
    ) -> Result<Assignment> {
        let attr_bytes: usize = attrs.iter().map(|(k, v)| k.len() + v.len()).sum();
        if attr_bytes > MAX_ATTRS_BYTES {
            return Err(Error::invalid(format!(
                "version attributes hold {attr_bytes} bytes; the limit is {MAX_ATTRS_BYTES}"
            )));
        }
        let slot = self.slot(blob)?;
        let mut s = slot.lock();
        if s.deleted {
            return Err(blob_deleted(blob));
        }
        if let Some(expected) = expect_size.filter(|e| *e != s.assigned_size) {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "blob {blob} has size {} (counting writes in flight), not {expected}",
                    s.assigned_size
                ),
            ));
        }
        let (offset, size, append) = match op {
            WriteOp::Write { size: 0, .. } => return Err(Error::invalid("empty write")),
            WriteOp::Append { size: 0 } => return Err(Error::invalid("zero-length append")),
            WriteOp::Write { offset, size } => (offset, size, false),
            WriteOp::Append { size } => (s.assigned_size, size, true),
            // Spans the old content too, so the part past the new size is cleared. Empty by
            // empty gives an empty span: a version that changes no byte (new attributes).
            WriteOp::Replace { size } => (0, size.max(s.assigned_size), false),
        };
        let end = offset
            .checked_add(size)
            .filter(|e| *e <= MAX_BLOB_SIZE)
            .ok_or_else(|| {
                Error::out_of_range(format!(
                    "write of {size} bytes at offset {offset} passes the {MAX_BLOB_SIZE} byte limit"
                ))
            })?;
        let new_size = match op {
            WriteOp::Replace { size } => size,
            _ => s.assigned_size.max(end),
        };
        let version = s.next_version;
        if version >= s.reserved {
            let upto = version + RESERVE_BLOCK;
            self.store.reserve(blob, upto)?;
            s.reserved = upto;
        }
        let capacity = s
            .assigned_capacity
            .max(capacity_for(s.record.chunk_size, end));
        let in_flight = s
            .pending
            .values()
            .map(|p| (p.info.version, p.info.span, p.info.capacity))
            .collect();
        let published = (s.record.published > 0).then_some((s.record.published, s.record.capacity));
        let span = Span::new(offset, size);
        s.pending.insert(
            version,
            Pending {
                info: VersionInfo {
                    blob,
                    version,
                    span,
                    size: new_size,
                    capacity,
                    state: VersionState::Pending,
                    append,
                    published_ms: 0,
                },
                completed: false,
                assigned_at: Instant::now(),
                attrs,
            },
        );
        s.next_version += 1;
        s.assigned_size = new_size;
        s.assigned_capacity = capacity;
        Ok(Assignment {
            version,
            span,
            capacity,
            published,
            in_flight,
        })
    }

    /// Marks `version` complete and waits until it is published (durably).
    pub async fn complete(&self, blob: BlobId, version: Version) -> Result<VersionInfo> {
        let slot = self.slot(blob)?;
        let mut changes = slot.published.subscribe();
        {
            let mut s = slot.lock();
            if s.deleted {
                return Err(blob_deleted(blob));
            }
            if s.given_up.contains_key(&version) {
                return Err(not_pending(&s, blob, version));
            }
            if version > s.record.published {
                match s.pending.get_mut(&version) {
                    Some(p) => p.completed = true,
                    None => return Err(not_pending(&s, blob, version)),
                }
                self.send_completed_prefix(&mut s);
            }
        }
        let deadline = tokio::time::Instant::now() + COMPLETE_WAIT;
        loop {
            {
                let s = slot.lock();
                if s.deleted {
                    return Err(blob_deleted(blob));
                }
                if s.record.published >= version {
                    break;
                }
                if !s.pending.contains_key(&version) {
                    return Err(not_pending(&s, blob, version));
                }
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::internal("version manager shut down")),
                Err(_) => {
                    return Err(Error::unavailable(format!(
                        "version {version} of blob {blob} is complete but waits for lower \
                         versions still in flight; it will be published once they finish"
                    )))
                }
            }
        }
        self.version(blob, Some(version))
    }

    /// Gives up every version whose writer has held it unfinished for longer than `lease`,
    /// with the versions assigned after it (their metadata refers to it): later writers are
    /// not blocked by a dead one. Returns how many versions were given up.
    pub fn expire_leases(&self, lease: Duration) -> Result<usize> {
        let slots: Vec<(BlobId, Arc<BlobSlot>)> = {
            let blobs = self.blobs.read().unwrap_or_else(|p| p.into_inner());
            blobs.iter().map(|(id, s)| (*id, s.clone())).collect()
        };
        let mut given_up = 0;
        for (blob, slot) in slots {
            let mut s = slot.lock();
            let expired = s
                .pending
                .iter()
                .find(|(_, p)| !p.completed && p.assigned_at.elapsed() > lease)
                .map(|(v, _)| *v);
            let Some(first) = expired else { continue };
            tracing::warn!(
                "blob {blob}: version {first} was not completed within its {:.1}s lease; \
                 versions {first}..{} given up",
                lease.as_secs_f64(),
                s.next_version
            );
            given_up += self.give_up(blob, &mut s, first, GiveUp::Expired)?;
            drop(s);
            // Wakes the writers waiting on the given-up versions.
            slot.published.send_modify(|_| {});
        }
        Ok(given_up)
    }

    /// Gives up `version`, which its writer could not finish (its data or metadata failed to
    /// store), with the versions assigned after it, at once rather than after the lease. Given
    /// up already: nothing to do. Completed or published: refused.
    pub fn abort(&self, blob: BlobId, version: Version) -> Result<()> {
        let slot = self.slot(blob)?;
        let mut s = slot.lock();
        if s.given_up.contains_key(&version) {
            return Ok(());
        }
        match s.pending.get(&version) {
            Some(p) if !p.completed => {}
            Some(_) => {
                return Err(Error::invalid(format!(
                    "version {version} of blob {blob} is complete; it cannot be aborted"
                )))
            }
            None if version <= s.record.published && version > 0 => {
                return Err(Error::invalid(format!(
                    "version {version} of blob {blob} is published; it cannot be aborted"
                )))
            }
            None => return Err(not_pending(&s, blob, version)),
        }
        tracing::info!(
            "blob {blob}: version {version} aborted by its writer; versions {version}..{} given up",
            s.next_version
        );
        self.give_up(blob, &mut s, version, GiveUp::Abandoned)?;
        drop(s);
        slot.published.send_modify(|_| {});
        Ok(())
    }

    /// Gives up the pending versions from `first` on, `first` for `why` and the later ones as
    /// behind it; durably first, so a restart lists them as aborted too. Returns how many.
    fn give_up(
        &self,
        blob: BlobId,
        s: &mut BlobState,
        first: Version,
        why: GiveUp,
    ) -> Result<usize> {
        self.store.put_aborted(blob, first, s.next_version)?;
        let victims: Vec<Version> = s.pending.range(first..).map(|(v, _)| *v).collect();
        for v in &victims {
            s.pending.remove(v);
            s.given_up.insert(
                *v,
                if *v == first {
                    why
                } else {
                    GiveUp::Behind(first)
                },
            );
        }
        // The next versions continue from the last one still standing; appends close the
        // gap the given-up ones leave.
        let (size, capacity) = match s.pending.values().next_back() {
            Some(p) => (p.info.size, p.info.capacity),
            None => (s.record.size, s.record.capacity),
        };
        s.assigned_size = size;
        s.assigned_capacity = capacity;
        Ok(victims.len())
    }

    /// Hands the completed versions right above the last sent one to the committer.
    fn send_completed_prefix(&self, s: &mut BlobState) {
        // Pending holds every assigned version above the published one, in order; numbers
        // skipped by a restart were never assigned, so the next pending entry is the next
        // version to publish.
        let mut batch = Vec::new();
        let mut attrs = Vec::new();
        let now = now_ms();
        for p in s.pending.range(s.sent_upto + 1..).map(|(_, p)| p) {
            if !p.completed {
                break;
            }
            let mut info = p.info.clone();
            info.state = VersionState::Published;
            info.published_ms = now;
            if !p.attrs.is_empty() {
                attrs.push((info.version, p.attrs.clone()));
            }
            batch.push(info);
        }
        let Some(last) = batch.last() else { return };
        s.sent_upto = last.version;
        let record = BlobRecord {
            published: last.version,
            size: last.size,
            capacity: last.capacity,
            modified_ms: now,
            ..s.record.clone()
        };
        // The committer lives as long as the manager; a send failure means shutdown.
        let _ = self.commits.send(Publication {
            blob: record,
            versions: batch,
            attrs,
        });
    }

    /// Applies a durable publication to the in-memory state and wakes the waiting writers.
    fn published(&self, p: Publication) {
        let Ok(slot) = self.slot(p.blob.id) else {
            return;
        };
        let mut s = slot.lock();
        if p.blob.published <= s.record.published {
            return;
        }
        for v in &p.versions {
            s.pending.remove(&v.version);
        }
        if let Some(last) = p.versions.last() {
            s.latest = last.clone();
        }
        s.record = p.blob;
        s.expiry_due = true;
        let v = s.record.published;
        drop(s);
        slot.published.send_replace(v);
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

    /// Every published version of `blob` with its attributes.
    pub fn versions_attrs(&self, blob: BlobId) -> Result<Vec<(VersionInfo, Attrs)>> {
        let versions = self.versions(blob)?.versions;
        let keys: Vec<_> = versions.iter().map(|v| (blob, v.version)).collect();
        let attrs = self.store.attrs(&keys)?;
        Ok(versions.into_iter().zip(attrs).collect())
    }

    /// The retained published versions of `blob` and its aborted ranges.
    pub fn versions(&self, blob: BlobId) -> Result<VersionList> {
        let from = self.slot(blob)?.lock().retained_from;
        Ok(VersionList {
            versions: self.store.versions(blob, from)?,
            aborted: self.store.aborted_ranges(blob)?,
        })
    }

    /// How many blobs exist.
    pub fn blob_count(&self) -> usize {
        self.blobs.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Sets the retention policy of `blob` durably and applies it at once. Blocks on fsync.
    pub fn set_retention(&self, blob: BlobId, policy: Retention) -> Result<BlobInfo> {
        check_retention(policy)?;
        let slot = self.slot(blob)?;
        let _expiry = self.expiry.lock().unwrap_or_else(|p| p.into_inner());
        if slot.lock().deleted {
            return Err(blob_deleted(blob));
        }
        self.store.set_retention(blob, policy)?;
        {
            let mut s = slot.lock();
            s.retention = policy;
            s.expiry_due = true;
        }
        // The policy is durable; if removing versions fails, the periodic round retries.
        if let Err(e) = self.expire_locked(blob, &slot, now_ms()) {
            tracing::error!("blob {blob}: applying its new retention failed: {e}");
        }
        let info = blob_info(&slot.lock());
        Ok(info)
    }

    /// Removes the versions the blobs' policies no longer retain at `now_ms`. Returns how
    /// many blobs lost versions; a blob that fails is logged and retried next time.
    pub fn enforce_retention(&self, now_ms: u64) -> usize {
        let slots: Vec<(BlobId, Arc<BlobSlot>)> = {
            let blobs = self.blobs.read().unwrap_or_else(|p| p.into_inner());
            blobs.iter().map(|(id, s)| (*id, s.clone())).collect()
        };
        let mut changed = 0;
        for (blob, slot) in slots {
            let due = {
                let s = slot.lock();
                match s.retention {
                    Retention::KeepAll => false,
                    Retention::KeepLast(_) => s.expiry_due,
                    // Time alone moves its cutoff.
                    Retention::KeepNewerThan(_) => true,
                }
            };
            if !due {
                continue;
            }
            let _expiry = self.expiry.lock().unwrap_or_else(|p| p.into_inner());
            match self.expire_locked(blob, &slot, now_ms) {
                Ok(true) => changed += 1,
                Ok(false) => {}
                Err(e) => tracing::error!("blob {blob}: applying its retention failed: {e}"),
            }
        }
        changed
    }

    /// Applies the policy of `blob` at `now_ms`; the caller holds `self.expiry`. Returns
    /// whether versions were removed.
    fn expire_locked(&self, blob: BlobId, slot: &BlobSlot, now_ms: u64) -> Result<bool> {
        let policy = {
            let mut s = slot.lock();
            if s.deleted {
                return Ok(false);
            }
            s.expiry_due = false;
            s.retention
        };
        // Planned on the durable rows (not the in-memory mark), so a failed removal is
        // planned again next time.
        let Some(keep_from) = self.store.plan_expiry(blob, policy, now_ms)? else {
            return Ok(false);
        };
        {
            // Reads answer "removed" from here on, before the rows go.
            let mut s = slot.lock();
            s.retained_from = s.retained_from.max(keep_from);
        }
        if let Err(e) = self.store.expire(blob, keep_from) {
            slot.lock().expiry_due = true;
            return Err(e);
        }
        tracing::debug!(
            "blob {blob}: versions below {keep_from} removed ({})",
            describe(policy)
        );
        Ok(true)
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
}

/// Why `version` of `blob` is not pending (any more).
fn not_pending(s: &BlobState, blob: BlobId, version: Version) -> Error {
    match s.given_up.get(&version) {
        Some(GiveUp::Behind(lower)) => Error::new(
            ErrorKind::Retry,
            format!(
                "version {version} of blob {blob} was given up with version {lower}, whose \
                 writer did not finish; the write can be done again"
            ),
        ),
        Some(GiveUp::Expired) => Error::new(
            ErrorKind::VersionAborted,
            format!(
                "version {version} of blob {blob} was aborted: its writer did not complete it \
                 within the lease"
            ),
        ),
        Some(GiveUp::Abandoned) => Error::new(
            ErrorKind::VersionAborted,
            format!(
                "version {version} of blob {blob} was aborted by its writer, which could not \
                 store its data"
            ),
        ),
        None if version < s.next_version => Error::new(
            ErrorKind::VersionAborted,
            format!("version {version} of blob {blob} was aborted"),
        ),
        None => Error::not_found(format!(
            "version {version} of blob {blob} was never assigned"
        )),
    }
}

/// Commits publications in batches: everything queued while the previous commit ran goes into
/// the next fsynced transaction.
async fn committer(
    vm: std::sync::Weak<VersionManager>,
    mut rx: mpsc::UnboundedReceiver<Publication>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let Some(manager) = vm.upgrade() else { return };
        let store = manager.store.clone();
        drop(manager);
        // Blobs deleted while their publications waited: dropped, not published.
        let deleted = loop {
            let attempt = {
                let store = store.clone();
                // Moves the batch to the blocking pool and back so a failed commit can retry.
                let b = std::mem::take(&mut batch);
                tokio::task::spawn_blocking(move || {
                    let r = store.publish(&b);
                    (r, b)
                })
                .await
            };
            match attempt {
                Ok((Ok(deleted), b)) => {
                    batch = b;
                    break deleted;
                }
                Ok((Err(e), b)) => {
                    batch = b;
                    tracing::error!("publishing {} versions failed, retrying: {e}", batch.len());
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => {
                    tracing::error!("publication task failed: {e}");
                    return;
                }
            }
        };
        let Some(manager) = vm.upgrade() else { return };
        manager.forget_blobs(&deleted);
        for p in batch.into_iter().filter(|p| !deleted.contains(&p.blob.id)) {
            manager.published(p);
        }
    }
}
