//! The manager's durable state in redb: blobs, published versions, aborted version ranges,
//! providers. Every commit is fsynced before the manager acknowledges what it records.

use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use tomus_metadata::{BlobId, ProviderId, Version};
use tomus_wire::{Attrs, Error, Result, VersionInfo};

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
        {
            let mut t = txn.open_table(RESERVED).map_err(db_err)?;
            t.insert(blob, upto).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    /// Records that versions `[from, to)` of `blob` will never be published.
    pub fn put_aborted(&self, blob: BlobId, from: Version, to: Version) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
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
    pub fn publish(&self, batch: &[Publication]) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut blobs = txn.open_table(BLOBS).map_err(db_err)?;
            let mut versions = txn.open_table(VERSIONS).map_err(db_err)?;
            let mut attrs = txn.open_table(ATTRS).map_err(db_err)?;
            for p in batch {
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
        txn.commit().map_err(db_err)
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

    pub fn versions(&self, blob: BlobId) -> Result<Vec<VersionInfo>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(VERSIONS).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.range((blob, 0)..=(blob, u64::MAX)).map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }
}
