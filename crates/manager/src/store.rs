//! The manager's durable state in redb: blobs, published versions, aborted version ranges,
//! retention, providers (and which drain), repaired chunks' replica sets. Every commit is
//! fsynced before the manager acknowledges what it records.

use std::path::Path;

use redb::{Database, ReadableTable, Table, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use tomus_metadata::{BlobId, ChunkId, ProviderId, Version};
use tomus_wire::{Attrs, Error, Result, Retention, VersionInfo};

const BLOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("blobs");
/// Key: (blob, version). Only published versions are stored.
const VERSIONS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("versions");
/// Key: (blob, first aborted version); value: end (exclusive).
const ABORTED: TableDefinition<(u64, u64), u64> = TableDefinition::new("aborted");
/// Key: blob; value: version numbers below it may have been handed out.
const RESERVED: TableDefinition<u64, u64> = TableDefinition::new("reserved");
const PROVIDERS: TableDefinition<u32, &[u8]> = TableDefinition::new("providers");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
/// Key: (blob, version); value: the version's attributes. Only versions that have some.
const ATTRS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("attrs");
/// Key: blob; value: its [`RetentionRecord`]. Only blobs whose policy was ever set.
const RETENTION: TableDefinition<u64, &[u8]> = TableDefinition::new("retention");
/// Key: provider; value: when its drain started (Unix ms). Only draining providers.
const DRAINING: TableDefinition<u32, u64> = TableDefinition::new("draining");
/// Key: chunk id; value: its replica set (`Vec<ProviderId>`) as repair last recorded it.
const REPLICAS: TableDefinition<u128, &[u8]> = TableDefinition::new("replicas");

/// A blob's durable record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BlobRecord {
    pub id: BlobId,
    pub chunk_size: u64,
    pub replication: u32,
    pub published: Version,
    pub size: u64,
    pub capacity: u64,
    /// Creation time, then the publication time of the latest version (Unix ms).
    pub modified_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProviderRecord {
    pub id: ProviderId,
    pub addr: String,
}

/// A blob's retention policy and how far it has removed versions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionRecord {
    pub policy: Retention,
    /// First retained version: published versions below it were removed (0: none). Retained
    /// versions are always a suffix of the published ones, so this one number says which.
    pub retained_from: Version,
}

pub struct Store {
    db: Database,
}

pub(crate) fn db_err(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("manager state store: {e}"))
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    bincode::serialize(v).map_err(db_err)
}

pub(crate) fn decode<T: for<'a> Deserialize<'a>>(b: &[u8]) -> Result<T> {
    bincode::deserialize(b).map_err(db_err)
}

/// One publication: the versions made visible (with their attributes) and the blob's new
/// record.
pub struct Publication {
    pub blob: BlobRecord,
    pub versions: Vec<VersionInfo>,
    /// Attributes of the versions that have some, committed in the same transaction.
    pub attrs: Vec<(tomus_metadata::Version, Attrs)>,
}

impl Store {
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let db = Database::create(dir.join("manager.redb")).map_err(db_err)?;
        let txn = db.begin_write().map_err(db_err)?;
        {
            txn.open_table(BLOBS).map_err(db_err)?;
            txn.open_table(VERSIONS).map_err(db_err)?;
            txn.open_table(ABORTED).map_err(db_err)?;
            txn.open_table(RESERVED).map_err(db_err)?;
            txn.open_table(PROVIDERS).map_err(db_err)?;
            txn.open_table(COUNTERS).map_err(db_err)?;
            txn.open_table(ATTRS).map_err(db_err)?;
            txn.open_table(RETENTION).map_err(db_err)?;
            txn.open_table(DRAINING).map_err(db_err)?;
            txn.open_table(REPLICAS).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)?;
        Ok(Store { db })
    }

    /// The database, for modules that keep tables of their own (the namespace).
    pub(crate) fn db(&self) -> &Database {
        &self.db
    }

    pub fn blobs(&self) -> Result<Vec<BlobRecord>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(BLOBS).map_err(db_err)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }

    pub fn providers(&self) -> Result<Vec<ProviderRecord>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(PROVIDERS).map_err(db_err)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }

    /// Allocates the next value of a durable counter (blob and provider ids).
    pub fn next_id(&self, counter: &str) -> Result<u64> {
        let txn = self.db.begin_write().map_err(db_err)?;
        let id = {
            let mut t = txn.open_table(COUNTERS).map_err(db_err)?;
            let next = t
                .get(counter)
                .map_err(db_err)?
                .map(|v| v.value())
                .unwrap_or(1);
            t.insert(counter, next + 1).map_err(db_err)?;
            next
        };
        txn.commit().map_err(db_err)?;
        Ok(id)
    }

    pub fn put_blob(&self, blob: &BlobRecord) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut t = txn.open_table(BLOBS).map_err(db_err)?;
            t.insert(blob.id, encode(blob)?.as_slice())
                .map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    pub fn put_provider(&self, p: &ProviderRecord) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut t = txn.open_table(PROVIDERS).map_err(db_err)?;
            t.insert(p.id, encode(p)?.as_slice()).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    /// Version numbers below the returned value may have been handed out before a restart.
    pub fn reserved(&self, blob: BlobId) -> Result<Option<Version>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(RESERVED).map_err(db_err)?;
        Ok(t.get(blob).map_err(db_err)?.map(|v| v.value()))
    }

    /// Durably reserves version numbers below `upto` (kept apart from the blob record so
    /// publications, committed concurrently, never overwrite it with an older value).
    pub fn reserve(&self, blob: BlobId, upto: Version) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        // A deleted blob gets no rows back.
        if !blob_exists(&txn, blob)? {
            return Err(deleted(blob));
        }
        {
            let mut t = txn.open_table(RESERVED).map_err(db_err)?;
            t.insert(blob, upto).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    /// Records that versions `[from, to)` of `blob` will never be published.
    pub fn put_aborted(&self, blob: BlobId, from: Version, to: Version) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        if !blob_exists(&txn, blob)? {
            return Ok(());
        }
        {
            let mut t = txn.open_table(ABORTED).map_err(db_err)?;
            t.insert((blob, from), to).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    pub fn aborted_ranges(&self, blob: BlobId) -> Result<Vec<(Version, Version)>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(ABORTED).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.range((blob, 0)..=(blob, u64::MAX)).map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            out.push((k.value().1, v.value()));
        }
        Ok(out)
    }

    /// Commits many publications (of any blobs) in one fsynced transaction: group commit.
    /// Returns the blobs whose publications were dropped because the blob was deleted
    /// meanwhile (its record is gone; writing the rows again would resurrect it).
    pub fn publish(&self, batch: &[Publication]) -> Result<Vec<BlobId>> {
        let txn = self.db.begin_write().map_err(db_err)?;
        let mut deleted = Vec::new();
        {
            let mut blobs = txn.open_table(BLOBS).map_err(db_err)?;
            let mut versions = txn.open_table(VERSIONS).map_err(db_err)?;
            let mut attrs = txn.open_table(ATTRS).map_err(db_err)?;
            for p in batch {
                if blobs.get(p.blob.id).map_err(db_err)?.is_none() {
                    deleted.push(p.blob.id);
                    continue;
                }
                for v in &p.versions {
                    versions
                        .insert((v.blob, v.version), encode(v)?.as_slice())
                        .map_err(db_err)?;
                }
                for (v, a) in &p.attrs {
                    attrs
                        .insert((p.blob.id, *v), encode(a)?.as_slice())
                        .map_err(db_err)?;
                }
                blobs
                    .insert(p.blob.id, encode(&p.blob)?.as_slice())
                    .map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)?;
        Ok(deleted)
    }

    pub fn version(&self, blob: BlobId, version: Version) -> Result<Option<VersionInfo>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(VERSIONS).map_err(db_err)?;
        match t.get((blob, version)).map_err(db_err)? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }

    /// Attributes of each (blob, version) (empty when it has none), in one read transaction.
    pub fn attrs(&self, keys: &[(BlobId, Version)]) -> Result<Vec<Attrs>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(ATTRS).map_err(db_err)?;
        keys.iter()
            .map(|k| match t.get(*k).map_err(db_err)? {
                Some(v) => decode(v.value()),
                None => Ok(Attrs::new()),
            })
            .collect()
    }

    /// Published versions of `blob` from `from` on.
    pub fn versions(&self, blob: BlobId, from: Version) -> Result<Vec<VersionInfo>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(VERSIONS).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.range((blob, from)..=(blob, u64::MAX)).map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }
}

/// Whether `blob` has a record (it was created and not deleted).
fn blob_exists(txn: &WriteTransaction, blob: BlobId) -> Result<bool> {
    let t = txn.open_table(BLOBS).map_err(db_err)?;
    let found = t.get(blob).map_err(db_err)?.is_some();
    Ok(found)
}

fn deleted(blob: BlobId) -> Error {
    Error::not_found(format!("blob {blob} was deleted"))
}

/// Removes the rows of `blob`'s versions in `range` from a table keyed by (blob, version).
fn remove_versions<V: redb::Value + 'static>(
    t: &mut Table<(u64, u64), V>,
    blob: BlobId,
    range: std::ops::RangeInclusive<Version>,
) -> Result<()> {
    let (from, to) = range.into_inner();
    if from <= to {
        t.retain_in((blob, from)..=(blob, to), |_, _| false)
            .map_err(db_err)?;
    }
    Ok(())
}

/// Removes every record of `blobs` within `txn` (the caller's transaction, so a namespace
/// change and the removal of its files' blobs commit together).
pub(crate) fn remove_blobs_in(txn: &WriteTransaction, blobs: &[BlobId]) -> Result<()> {
    let mut records = txn.open_table(BLOBS).map_err(db_err)?;
    let mut versions = txn.open_table(VERSIONS).map_err(db_err)?;
    let mut attrs = txn.open_table(ATTRS).map_err(db_err)?;
    let mut aborted = txn.open_table(ABORTED).map_err(db_err)?;
    let mut reserved = txn.open_table(RESERVED).map_err(db_err)?;
    let mut retention = txn.open_table(RETENTION).map_err(db_err)?;
    for &blob in blobs {
        records.remove(blob).map_err(db_err)?;
        reserved.remove(blob).map_err(db_err)?;
        retention.remove(blob).map_err(db_err)?;
        remove_versions(&mut versions, blob, 0..=u64::MAX)?;
        remove_versions(&mut attrs, blob, 0..=u64::MAX)?;
        remove_versions(&mut aborted, blob, 0..=u64::MAX)?;
    }
    Ok(())
}

/// The first version `policy` retains among the published versions of `blob` still stored
/// (read through `versions`), if that removes at least one of them. The latest published
/// version is always retained.
fn plan_expiry(
    versions: &impl ReadableTable<(u64, u64), &'static [u8]>,
    blob: BlobId,
    policy: Retention,
    now_ms: u64,
) -> Result<Option<Version>> {
    let rows = || versions.range((blob, 0)..=(blob, u64::MAX)).map_err(db_err);
    let first_stored = match rows()?.next() {
        Some(row) => row.map_err(db_err)?.0.value().1,
        None => return Ok(None),
    };
    let keep_from = match policy {
        Retention::KeepAll => return Ok(None),
        // The n-th newest; fewer than n stored: nothing to remove.
        Retention::KeepLast(n) => match rows()?.rev().nth(n.max(1) as usize - 1) {
            Some(row) => row.map_err(db_err)?.0.value().1,
            None => return Ok(None),
        },
        // The oldest published at or after the cutoff, else the latest.
        Retention::KeepNewerThan(ms) => {
            let cutoff = now_ms.saturating_sub(ms);
            let mut keep = first_stored;
            for row in rows()? {
                let (k, v) = row.map_err(db_err)?;
                keep = k.value().1;
                let info: VersionInfo = decode(v.value())?;
                if info.published_ms >= cutoff {
                    break;
                }
            }
            keep
        }
    };
    Ok((keep_from > first_stored).then_some(keep_from))
}

impl Store {
    pub fn retention(&self, blob: BlobId) -> Result<Option<RetentionRecord>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(RETENTION).map_err(db_err)?;
        match t.get(blob).map_err(db_err)? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }

    /// Durably sets the policy of `blob` (keeping how far earlier policies removed versions)
    /// and returns the record.
    pub fn set_retention(&self, blob: BlobId, policy: Retention) -> Result<RetentionRecord> {
        let txn = self.db.begin_write().map_err(db_err)?;
        if !blob_exists(&txn, blob)? {
            return Err(deleted(blob));
        }
        let record = {
            let mut t = txn.open_table(RETENTION).map_err(db_err)?;
            let old: RetentionRecord = match t.get(blob).map_err(db_err)? {
                Some(v) => decode(v.value())?,
                None => RetentionRecord::default(),
            };
            let record = RetentionRecord { policy, ..old };
            t.insert(blob, encode(&record)?.as_slice())
                .map_err(db_err)?;
            record
        };
        txn.commit().map_err(db_err)?;
        Ok(record)
    }

    /// Where the policy of `blob` would move its first retained version at `now_ms`
    /// (`None`: nothing to remove). A read transaction: cheap enough to ask every second.
    pub fn plan_expiry(
        &self,
        blob: BlobId,
        policy: Retention,
        now_ms: u64,
    ) -> Result<Option<Version>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(VERSIONS).map_err(db_err)?;
        plan_expiry(&t, blob, policy, now_ms)
    }

    /// Removes the published versions of `blob` below `keep_from` (their records and
    /// attributes) and records `keep_from` as its first retained version, in one transaction.
    /// A deleted blob is left alone.
    pub fn expire(&self, blob: BlobId, keep_from: Version) -> Result<()> {
        if keep_from == 0 {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(db_err)?;
        if !blob_exists(&txn, blob)? {
            return Ok(());
        }
        {
            let mut retention = txn.open_table(RETENTION).map_err(db_err)?;
            let old: RetentionRecord = match retention.get(blob).map_err(db_err)? {
                Some(v) => decode(v.value())?,
                None => RetentionRecord::default(),
            };
            let record = RetentionRecord {
                retained_from: old.retained_from.max(keep_from),
                ..old
            };
            retention
                .insert(blob, encode(&record)?.as_slice())
                .map_err(db_err)?;
            let mut versions = txn.open_table(VERSIONS).map_err(db_err)?;
            let below = 0..=keep_from.saturating_sub(1);
            remove_versions(&mut versions, blob, below.clone())?;
            let mut attrs = txn.open_table(ATTRS).map_err(db_err)?;
            remove_versions(&mut attrs, blob, below)?;
        }
        txn.commit().map_err(db_err)
    }

    /// Draining providers and when each drain started.
    pub fn drains(&self) -> Result<Vec<(ProviderId, u64)>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(DRAINING).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            out.push((k.value(), v.value()));
        }
        Ok(out)
    }

    /// Records that providers started draining (at the given Unix ms).
    pub fn put_drains(&self, drains: &[(ProviderId, u64)]) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut t = txn.open_table(DRAINING).map_err(db_err)?;
            for (id, since) in drains {
                t.insert(*id, *since).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)
    }

    /// Forgets providers: their records and drain marks.
    pub fn remove_providers(&self, ids: &[ProviderId]) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut providers = txn.open_table(PROVIDERS).map_err(db_err)?;
            let mut draining = txn.open_table(DRAINING).map_err(db_err)?;
            for id in ids {
                providers.remove(*id).map_err(db_err)?;
                draining.remove(*id).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)
    }

    /// Upserts replica sets of chunks in one transaction (an empty set removes the entry).
    pub fn record_replicas(&self, entries: &[(ChunkId, Vec<ProviderId>)]) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut t = txn.open_table(REPLICAS).map_err(db_err)?;
            for (chunk, replicas) in entries {
                if replicas.is_empty() {
                    t.remove(chunk.0).map_err(db_err)?;
                } else {
                    t.insert(chunk.0, encode(replicas)?.as_slice())
                        .map_err(db_err)?;
                }
            }
        }
        txn.commit().map_err(db_err)
    }

    /// The recorded replica set of each chunk, in order (empty when none was recorded).
    pub fn chunk_replicas(&self, chunks: &[ChunkId]) -> Result<Vec<Vec<ProviderId>>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(REPLICAS).map_err(db_err)?;
        chunks
            .iter()
            .map(|c| match t.get(c.0).map_err(db_err)? {
                Some(v) => decode(v.value()),
                None => Ok(Vec::new()),
            })
            .collect()
    }
}
