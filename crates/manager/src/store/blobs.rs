//! Blob records: listing them, creating one with the next id, and removing them (with a
//! tombstone each, in the caller's transaction) when their files go; their version rows
//! follow in batches (`purge.rs`).

use redb::{ReadableTable, WriteTransaction};
use tomus_metadata::BlobId;
use tomus_wire::{Change, Error, Result, Retention};

use super::purge::{queue_purge, DELETED_BLOB};
use super::{
    db_err, decode, draw, encode, log_change, BlobRecord, RetentionRecord, Store, BLOBS, COUNTERS,
    DELETED, PURGING, RESERVED, RETENTION,
};

impl Store {
    pub fn blobs(&self) -> Result<Vec<BlobRecord>> {
        let txn = self.read()?;
        let table = txn.open_table(BLOBS).map_err(db_err)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }

    /// Creates one blob record per retention policy of `policies`, with the next blob ids,
    /// those policies and version numbers below `reserve_upto` reserved, in one
    /// transaction (one sync for them all, and no id is ever handed out without its record;
    /// a policy is there before any version is, and a first write needs no sync of its own to
    /// reserve numbers). `make(i, id)` gives the record of the `i`-th blob, and `also(txn, i,
    /// id)` adds what the caller records with it (a new file's entry) to the same
    /// transaction.
    pub fn create_blobs(
        &self,
        policies: &[Retention],
        reserve_upto: u64,
        mut make: impl FnMut(usize, BlobId) -> BlobRecord,
        mut also: impl FnMut(&WriteTransaction, usize, BlobId) -> Result<()>,
    ) -> Result<Vec<BlobRecord>> {
        let txn = self.write()?;
        let first = draw(&txn, "blob", policies.len() as u64)?;
        let mut records = Vec::with_capacity(policies.len());
        {
            let mut blobs = txn.open_table(BLOBS).map_err(db_err)?;
            let mut retention = txn.open_table(RETENTION).map_err(db_err)?;
            let mut reserved = txn.open_table(RESERVED).map_err(db_err)?;
            for (i, &policy) in policies.iter().enumerate() {
                let id = first + i as u64;
                let record = make(i, id);
                blobs
                    .insert(id, encode(&record)?.as_slice())
                    .map_err(db_err)?;
                if policy != Retention::KeepAll {
                    let r = RetentionRecord {
                        policy,
                        retained_from: 0,
                    };
                    retention
                        .insert(id, encode(&r)?.as_slice())
                        .map_err(db_err)?;
                }
                reserved.insert(id, reserve_upto).map_err(db_err)?;
                records.push(record);
            }
        }
        for (i, record) in records.iter().enumerate() {
            also(&txn, i, record.id)?;
        }
        txn.commit().map_err(db_err)?;
        Ok(records)
    }

    /// Which of `blobs` were deleted (have a tombstone).
    pub fn deleted(&self, blobs: &[BlobId]) -> Result<Vec<bool>> {
        let txn = self.read()?;
        let t = txn.open_table(DELETED).map_err(db_err)?;
        blobs
            .iter()
            .map(|b| Ok(t.get(*b).map_err(db_err)?.is_some()))
            .collect()
    }

    /// The next blob id to be handed out: ids below it were created at some point.
    pub fn next_blob_id(&self) -> Result<BlobId> {
        let txn = self.read()?;
        let t = txn.open_table(COUNTERS).map_err(db_err)?;
        Ok(t.get("blob").map_err(db_err)?.map_or(1, |v| v.value()))
    }
}

/// Whether `blob` has a record (it was created and not deleted).
pub(super) fn blob_exists(txn: &WriteTransaction, blob: BlobId) -> Result<bool> {
    let t = txn.open_table(BLOBS).map_err(db_err)?;
    let found = t.get(blob).map_err(db_err)?.is_some();
    Ok(found)
}

pub(super) fn deleted(blob: BlobId) -> Error {
    Error::not_found(format!("blob {blob} was deleted"))
}

/// Removes every record of `blobs` within `txn` (the caller's transaction, so a namespace
/// change and the removal of its files' blobs commit together) and leaves a tombstone for
/// each.
pub(crate) fn remove_blobs_in(txn: &WriteTransaction, blobs: &[BlobId]) -> Result<()> {
    // Called by every group commit of publications, nearly always with nothing to remove:
    // opening its tables for nothing was 1.5% of the manager's time under small appends.
    if blobs.is_empty() {
        return Ok(());
    }
    let now = tomus_wire::now_ms();
    let mut tombstones = txn.open_table(DELETED).map_err(db_err)?;
    let mut records = txn.open_table(BLOBS).map_err(db_err)?;
    let mut reserved = txn.open_table(RESERVED).map_err(db_err)?;
    let mut retention = txn.open_table(RETENTION).map_err(db_err)?;
    let mut purging = txn.open_table(PURGING).map_err(db_err)?;
    for &blob in blobs {
        if records.remove(blob).map_err(db_err)?.is_some() {
            tombstones.insert(blob, now).map_err(db_err)?;
            log_change(txn, &Change::Deleted { blob })?;
            // Its version rows go in batches, later.
            queue_purge(&mut purging, blob, DELETED_BLOB)?;
        }
        reserved.remove(blob).map_err(db_err)?;
        retention.remove(blob).map_err(db_err)?;
    }
    Ok(())
}

/// Deletes `blob` within `txn` as [`remove_blobs_in`] does, after checking it exists: an
/// unknown blob, or one deleted before, is `NotFound`.
pub(crate) fn delete_blob_in(txn: &WriteTransaction, blob: BlobId) -> Result<()> {
    if !blob_exists(txn, blob)? {
        let t = txn.open_table(DELETED).map_err(db_err)?;
        let tombstone = t.get(blob).map_err(db_err)?.is_some();
        return Err(if tombstone {
            deleted(blob)
        } else {
            Error::not_found(format!("blob {blob} does not exist"))
        });
    }
    remove_blobs_in(txn, &[blob])
}
