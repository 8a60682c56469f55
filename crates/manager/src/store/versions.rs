//! Version numbers of blobs: reserving them across restarts, recording given-up ranges,
//! publishing versions with their attributes (group commit), and reading them back.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::Instant;

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use tomus_metadata::{BlobId, Version};
use tomus_wire::{Attrs, Change, Error, Result, VersionInfo};

use super::blobs::{blob_exists, deleted, remove_blobs_in};
use super::journal::RESET_AFTER;
use super::{
    db_err, decode, encode, log_change, BlobRecord, Store, ABORTED, APPLY_EVERY, APPLY_GROUPS,
    ATTRS, BLOBS, RESERVED, VERSIONS,
};
use crate::namespace::bind_in;

/// One publication: the versions made visible (with their attributes) and the blob's new
/// record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Publication {
    pub blob: BlobRecord,
    pub versions: Vec<VersionInfo>,
    /// Attributes of the versions that have some, committed in the same transaction.
    pub attrs: Vec<(Version, Attrs)>,
    /// The path of the new file this blob is (its first publication): bound to the blob in
    /// the same transaction, so the file appears exactly with its first version.
    pub name: Option<String>,
}

/// Publications a group commit dropped.
#[derive(Default)]
pub struct Dropped {
    /// Blobs deleted while their publications waited (their records are gone; writing the
    /// rows again would resurrect them).
    pub deleted: Vec<BlobId>,
    /// Blobs of new files that could not take their names (the path became a directory, or
    /// a parent a file, while they were written), with why; removed in the same
    /// transaction.
    pub unnamed: Vec<(BlobId, Error)>,
}

impl Dropped {
    pub fn contains(&self, blob: BlobId) -> bool {
        self.deleted.contains(&blob) || self.unnamed.iter().any(|(b, _)| *b == blob)
    }
}

impl Store {
    /// Version numbers below the returned value may have been handed out before a restart.
    pub fn reserved(&self, blob: BlobId) -> Result<Option<Version>> {
        let txn = self.read()?;
        let t = txn.open_table(RESERVED).map_err(db_err)?;
        Ok(t.get(blob).map_err(db_err)?.map(|v| v.value()))
    }

    /// Durably reserves version numbers below `upto` (kept apart from the blob record so
    /// publications, committed concurrently, never overwrite it with an older value).
    pub fn reserve(&self, blob: BlobId, upto: Version) -> Result<()> {
        let txn = self.write()?;
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
        let txn = self.write()?;
        if !blob_exists(&txn, blob)? {
            return Ok(());
        }
        {
            let mut t = txn.open_table(ABORTED).map_err(db_err)?;
            t.insert((blob, from), to).map_err(db_err)?;
        }
        log_change(&txn, &Change::Aborted { blob, from, to })?;
        txn.commit().map_err(db_err)
    }

    pub fn aborted_ranges(&self, blob: BlobId) -> Result<Vec<(Version, Version)>> {
        self.aborted_ranges_starting(blob, 0, u64::MAX)
    }

    /// The aborted ranges of `blob` that start in `first..=last`.
    pub fn aborted_ranges_starting(
        &self,
        blob: BlobId,
        first: Version,
        last: Version,
    ) -> Result<Vec<(Version, Version)>> {
        let txn = self.read()?;
        let t = txn.open_table(ABORTED).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.range((blob, first)..=(blob, last)).map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            out.push((k.value().1, v.value()));
        }
        Ok(out)
    }

    /// Makes many publications (of any blobs) durable at once: group commit. A group that
    /// binds no file name is appended to the publication journal and synced, and reaches redb
    /// with others later (see `journal.rs`); one that does commits to redb, fsynced, with
    /// whatever the journal held before it. Returns the publications it dropped.
    pub fn publish(&self, batch: &[Publication]) -> Result<Dropped> {
        let mut journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(journal) = journal
            .as_mut()
            .filter(|_| batch.iter().all(|p| p.name.is_none()))
        else {
            let txn = self.write()?;
            let dropped = publish_rows(&txn, batch)?;
            txn.commit().map_err(db_err)?;
            return Ok(dropped);
        };
        // Blobs deleted while their publications waited: dropped, not journaled. A deletion
        // committed after this check applies the journaled group before it removes the
        // blob's rows, so the rows never outlive the blob.
        let mut dropped = Dropped::default();
        {
            let txn = self.db.begin_read().map_err(db_err)?;
            let blobs = txn.open_table(BLOBS).map_err(db_err)?;
            for p in batch {
                if blobs.get(p.blob.id).map_err(db_err)?.is_none() {
                    dropped.deleted.push(p.blob.id);
                }
            }
        }
        let group: Vec<Publication> = batch
            .iter()
            .filter(|p| !dropped.contains(p.blob.id))
            .cloned()
            .collect();
        if group.is_empty() {
            return Ok(dropped);
        }
        let seq = journal.last_seq + 1;
        journal.append(seq, &group)?;
        // Durable from here on: whatever follows must not make the caller publish again.
        let due = {
            let mut unapplied = self
                .unapplied
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            unapplied.groups.push((seq, group));
            self.unapplied_count
                .store(unapplied.groups.len(), Ordering::Release);
            let since = *unapplied.undurable_since.get_or_insert_with(Instant::now);
            since.elapsed() >= APPLY_EVERY
                || unapplied.groups.len() >= APPLY_GROUPS
                || journal.len() > RESET_AFTER
        };
        if due {
            match self.apply_journaled_durably() {
                // Only then may the journal start again.
                Ok(()) if journal.len() > RESET_AFTER => {
                    if let Err(e) = journal.reset() {
                        tracing::warn!("{e}");
                    }
                }
                Ok(()) => {}
                // The groups stay journaled and pending: the next transaction applies them.
                Err(e) => tracing::warn!("applying journaled publications to redb: {e}"),
            }
        }
        journal.refill();
        Ok(dropped)
    }

    pub fn version(&self, blob: BlobId, version: Version) -> Result<Option<VersionInfo>> {
        // A version just published is often still in the journal only: found there, it
        // costs no redb transaction (a completed writer asks for its version).
        if self.journal_pending() {
            let unapplied = self
                .unapplied
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let journaled = unapplied
                .groups
                .iter()
                .rev()
                .flat_map(|(_, group)| group)
                .filter(|p| p.blob.id == blob)
                .flat_map(|p| &p.versions)
                .find(|v| v.version == version);
            if let Some(v) = journaled {
                return Ok(Some(v.clone()));
            }
        }
        // Not journaled-only: redb has it if anyone does.
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(VERSIONS).map_err(db_err)?;
        match t.get((blob, version)).map_err(db_err)? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }

    /// Attributes of each (blob, version) (empty when it has none), in one read transaction.
    pub fn attrs(&self, keys: &[(BlobId, Version)]) -> Result<Vec<Attrs>> {
        let txn = self.read()?;
        let t = txn.open_table(ATTRS).map_err(db_err)?;
        keys.iter()
            .map(|k| match t.get(*k).map_err(db_err)? {
                Some(v) => decode(v.value()),
                None => Ok(Attrs::new()),
            })
            .collect()
    }

    /// Published versions of `blob` numbered in `numbers`: the first `limit`, or with
    /// `newest`, the last `limit` (newest first).
    pub fn versions(
        &self,
        blob: BlobId,
        numbers: std::ops::RangeInclusive<Version>,
        limit: usize,
        newest: bool,
    ) -> Result<Vec<VersionInfo>> {
        let txn = self.read()?;
        let t = txn.open_table(VERSIONS).map_err(db_err)?;
        let (first, last) = numbers.into_inner();
        let rows = t.range((blob, first)..=(blob, last)).map_err(db_err)?;
        let decode_row = |row: std::result::Result<_, redb::StorageError>| {
            let (_, v): (_, redb::AccessGuard<'_, &[u8]>) = row.map_err(db_err)?;
            decode(v.value())
        };
        if newest {
            rows.rev().take(limit).map(decode_row).collect()
        } else {
            rows.take(limit).map(decode_row).collect()
        }
    }
}

/// Writes the rows of `batch`'s publications in `txn`: version rows, attributes, blob
/// records, a new file's name, the change log. Returns the publications it dropped.
pub(super) fn publish_rows(txn: &WriteTransaction, batch: &[Publication]) -> Result<Dropped> {
    let mut dropped = Dropped::default();
    {
        let mut blobs = txn.open_table(BLOBS).map_err(db_err)?;
        let mut versions = txn.open_table(VERSIONS).map_err(db_err)?;
        let mut attrs = txn.open_table(ATTRS).map_err(db_err)?;
        for p in batch {
            if dropped.contains(p.blob.id) {
                continue;
            }
            if blobs.get(p.blob.id).map_err(db_err)?.is_none() {
                dropped.deleted.push(p.blob.id);
                continue;
            }
            if let Some(path) = &p.name {
                // The file is created when its first version is published: the same
                // instant, not the later one this group commit runs at.
                if let Some(why) = bind_in(txn, path, p.blob.id, p.blob.modified_ms)? {
                    dropped.unnamed.push((p.blob.id, why));
                    continue;
                }
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
            if !p.versions.is_empty() {
                let change = Change::Published {
                    blob: p.blob.id,
                    chunk_size: p.blob.chunk_size,
                    replication: p.blob.replication,
                    versions: p.versions.clone(),
                };
                log_change(txn, &change)?;
            }
        }
    }
    let unnamed: Vec<BlobId> = dropped.unnamed.iter().map(|(b, _)| *b).collect();
    remove_blobs_in(txn, &unnamed)?;
    Ok(dropped)
}
