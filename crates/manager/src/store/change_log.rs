//! The change log (every publication, expiry, deletion and abort, written in the transaction
//! that makes it) that the maintenance service follows, and the garbage-collection cutoffs
//! granted to it.

use redb::{ReadableTable, WriteTransaction};
use tomus_tables::remove_range;
use tomus_wire::{Change, ChangePage, Cutoffs, Result};

use super::{db_err, decode, draw, encode, Store, CHANGES, COUNTERS, MAX_CHANGES, META};

/// Appends `change` to the change log within `txn`, dropping the oldest entries past
/// [`MAX_CHANGES`].
pub(super) fn log_change(txn: &WriteTransaction, change: &Change) -> Result<()> {
    let seq = draw(txn, "change", 1)?;
    let mut log = txn.open_table(CHANGES).map_err(db_err)?;
    log.insert(seq, encode(change)?.as_slice())
        .map_err(db_err)?;
    if seq > MAX_CHANGES {
        remove_range(&mut log, 0..=seq - MAX_CHANGES).map_err(db_err)?;
    }
    Ok(())
}

impl Store {
    /// The change log after `after`, at most `limit` entries.
    pub fn changes(&self, after: u64, limit: usize) -> Result<ChangePage> {
        let txn = self.read()?;
        let log = txn.open_table(CHANGES).map_err(db_err)?;
        let counters = txn.open_table(COUNTERS).map_err(db_err)?;
        let next = counters
            .get("change")
            .map_err(db_err)?
            .map_or(1, |v| v.value());
        let first_kept = match log.first().map_err(db_err)? {
            Some((k, _)) => k.value(),
            None => next,
        };
        let mut changes = Vec::new();
        for row in log.range(after.saturating_add(1)..).map_err(db_err)? {
            if changes.len() >= limit {
                break;
            }
            let (k, v) = row.map_err(db_err)?;
            changes.push((k.value(), decode(v.value())?));
        }
        Ok(ChangePage {
            changes,
            first_kept,
            last: next - 1,
        })
    }

    /// Drops the changes up to `upto` (applied by their reader).
    pub fn trim_changes(&self, upto: u64) -> Result<()> {
        let txn = self.write()?;
        {
            let mut log = txn.open_table(CHANGES).map_err(db_err)?;
            remove_range(&mut log, 0..=upto).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    /// The garbage-collection cutoffs granted so far.
    pub fn cutoffs(&self) -> Result<Cutoffs> {
        let txn = self.read()?;
        let meta = txn.open_table(META).map_err(db_err)?;
        let get =
            |k: &str| -> Result<u64> { Ok(meta.get(k).map_err(db_err)?.map_or(0, |v| v.value())) };
        Ok(Cutoffs {
            fresh_ms: get("cutoff_fresh")?,
            reused_ms: get("cutoff_reused")?,
        })
    }

    /// Records the cutoffs granted (they only move forward).
    pub fn put_cutoffs(&self, c: Cutoffs) -> Result<()> {
        let txn = self.write()?;
        {
            let mut meta = txn.open_table(META).map_err(db_err)?;
            meta.insert("cutoff_fresh", c.fresh_ms).map_err(db_err)?;
            meta.insert("cutoff_reused", c.reused_ms).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }
}
