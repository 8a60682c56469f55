//! Retention: each blob's policy, where it moves the first retained version, and the expiry
//! that moves it (the rows of the versions below follow in batches, `purge.rs`).

use redb::ReadableTable;
use tomus_metadata::{BlobId, Version};
use tomus_wire::{Change, Result, Retention, VersionInfo};

use super::blobs::{blob_exists, deleted};
use super::purge::queue_purge;
use super::{
    db_err, decode, encode, log_change, RetentionRecord, Store, PURGING, RETENTION, VERSIONS,
};

/// Where `policy` stands for `blob` at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiryPlan {
    /// The first version `policy` retains, if that removes at least one stored version.
    pub keep_from: Option<Version>,
    /// When time alone next moves a time-based policy past a version it keeps now (`None`:
    /// only a new publication can: the policy counts versions, or it keeps only the latest).
    pub recheck_at_ms: Option<u64>,
}

impl ExpiryPlan {
    const NOTHING: ExpiryPlan = ExpiryPlan {
        keep_from: None,
        recheck_at_ms: None,
    };
}

/// What `policy` removes among the published versions of `blob` from `retained_from` on (read
/// through `versions`; rows below it may still wait for their purge) at `now_ms`. The latest
/// published version is always retained.
fn plan_expiry(
    versions: &impl ReadableTable<(u64, u64), &'static [u8]>,
    blob: BlobId,
    retained_from: Version,
    policy: Retention,
    now_ms: u64,
) -> Result<ExpiryPlan> {
    let rows = || {
        versions
            .range((blob, retained_from)..=(blob, u64::MAX))
            .map_err(db_err)
    };
    let first_stored = match rows()?.next() {
        Some(row) => row.map_err(db_err)?.0.value().1,
        None => return Ok(ExpiryPlan::NOTHING),
    };
    let (keep_from, recheck_at_ms) = match policy {
        Retention::KeepAll => return Ok(ExpiryPlan::NOTHING),
        // The n-th newest; fewer than n stored: nothing to remove.
        Retention::KeepLast(n) => match rows()?.rev().nth(n.max(1) as usize - 1) {
            Some(row) => (row.map_err(db_err)?.0.value().1, None),
            None => return Ok(ExpiryPlan::NOTHING),
        },
        // The oldest published at or after the cutoff, else the latest. The cutoff passes
        // that version 1 ms after it is `ms` old; the latest it never passes.
        Retention::KeepNewerThan(ms) => {
            let cutoff = now_ms.saturating_sub(ms);
            let mut keep = first_stored;
            let mut recheck = None;
            let mut rows = rows()?.peekable();
            while let Some(row) = rows.next() {
                let (k, v) = row.map_err(db_err)?;
                keep = k.value().1;
                let info: VersionInfo = decode(v.value())?;
                if info.published_ms >= cutoff {
                    if rows.peek().is_some() {
                        recheck = Some(info.published_ms.saturating_add(ms).saturating_add(1));
                    }
                    break;
                }
            }
            (keep, recheck)
        }
    };
    Ok(ExpiryPlan {
        keep_from: (keep_from > first_stored).then_some(keep_from),
        recheck_at_ms,
    })
}

impl Store {
    pub fn retention(&self, blob: BlobId) -> Result<Option<RetentionRecord>> {
        let txn = self.read()?;
        let t = txn.open_table(RETENTION).map_err(db_err)?;
        match t.get(blob).map_err(db_err)? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }

    /// Durably sets the policy of `blob` (keeping how far earlier policies removed versions)
    /// and returns the record.
    pub fn set_retention(&self, blob: BlobId, policy: Retention) -> Result<RetentionRecord> {
        let txn = self.write()?;
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

    /// Where the policy of `blob` would move its first retained version at `now_ms`, and
    /// when time alone would move it next. A read transaction.
    pub fn plan_expiry(&self, blob: BlobId, policy: Retention, now_ms: u64) -> Result<ExpiryPlan> {
        let txn = self.read()?;
        let retention = txn.open_table(RETENTION).map_err(db_err)?;
        let retained_from = match retention.get(blob).map_err(db_err)? {
            Some(v) => decode::<RetentionRecord>(v.value())?.retained_from,
            None => 0,
        };
        let t = txn.open_table(VERSIONS).map_err(db_err)?;
        plan_expiry(&t, blob, retained_from, policy, now_ms)
    }

    /// Records, for each `(blob, keep_from)`, `keep_from` as the first retained version of
    /// `blob` and queues the rows of the versions below it (records and attributes) for
    /// their purge, all in one transaction: a retention round over many blobs costs one
    /// sync, not one per blob. Deleted blobs are left alone.
    pub fn expire(&self, expiries: &[(BlobId, Version)]) -> Result<()> {
        let txn = self.write()?;
        {
            let mut retention = txn.open_table(RETENTION).map_err(db_err)?;
            let mut purging = txn.open_table(PURGING).map_err(db_err)?;
            for &(blob, keep_from) in expiries {
                if keep_from == 0 || !blob_exists(&txn, blob)? {
                    continue;
                }
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
                queue_purge(&mut purging, blob, keep_from)?;
                let retained_from = keep_from;
                log_change(
                    &txn,
                    &Change::Expired {
                        blob,
                        retained_from,
                    },
                )?;
            }
        }
        txn.commit().map_err(db_err)
    }
}
