//! What deletions and expiries leave behind: the version rows (records, attributes, and a
//! deleted blob's aborted ranges) of versions no read can reach any more. Deleting a blob or
//! expiring versions records in `PURGING` how far its rows go; [`Store::purge_rows`] removes
//! them a batch per transaction (the manager's "row purge" worker), so that neither holds
//! the manager's write transactions for the whole of a blob. Removing 100,000 rows in the
//! deleting transaction held every other write for 2.5-2.7 s here.
//!
//! Nothing reads those rows meanwhile: every read of a blob goes through its in-memory record,
//! which a deleted blob no longer has and which hides versions below the first retained one
//! (`VersionManager::version`, listings from `retained_from`, and [`Store::plan_expiry`]
//! starting there too); blob ids are never reused.

use redb::{ReadableTable, Table};
use tomus_metadata::{BlobId, Version};
use tomus_tables::remove_range_at_most;
use tomus_wire::Result;

use super::{db_err, Store, ABORTED, ATTRS, PURGING, VERSIONS};

/// The mark of a deleted blob in `PURGING`: all its rows go.
pub(super) const DELETED_BLOB: Version = u64::MAX;
/// Blobs one [`Store::purge_rows`] looks at, at most.
const PURGE_BLOBS: usize = 256;

/// Records that the rows of `blob` below version `below` are to be removed (a deleted blob:
/// [`DELETED_BLOB`]); an earlier mark further on stays.
pub(super) fn queue_purge(
    purging: &mut Table<'_, u64, u64>,
    blob: BlobId,
    below: Version,
) -> Result<()> {
    let queued = purging.get(blob).map_err(db_err)?.map_or(0, |v| v.value());
    if below > queued {
        purging.insert(blob, below).map_err(db_err)?;
    }
    Ok(())
}

impl Store {
    /// Removes up to `at_most` rows that deletions and expiries left, in one transaction, and
    /// forgets the blobs that have none left; returns how many rows. Fewer than `at_most`:
    /// none are left. Nothing to remove costs a read transaction, not a commit.
    pub fn purge_rows(&self, at_most: u64) -> Result<u64> {
        {
            let txn = self.db.begin_read().map_err(db_err)?;
            let purging = txn.open_table(PURGING).map_err(db_err)?;
            if purging.first().map_err(db_err)?.is_none() {
                return Ok(0);
            }
        }
        let txn = self.write()?;
        let mut removed = 0;
        {
            let mut purging = txn.open_table(PURGING).map_err(db_err)?;
            let mut versions = txn.open_table(VERSIONS).map_err(db_err)?;
            let mut attrs = txn.open_table(ATTRS).map_err(db_err)?;
            let mut aborted = txn.open_table(ABORTED).map_err(db_err)?;
            let mut queued = Vec::new();
            for row in purging.iter().map_err(db_err)?.take(PURGE_BLOBS) {
                let (blob, below) = row.map_err(db_err)?;
                queued.push((blob.value(), below.value()));
            }
            for (blob, below) in queued {
                let last = if below == DELETED_BLOB {
                    u64::MAX
                } else {
                    below - 1
                };
                let rows = (blob, 0)..=(blob, last);
                removed += remove_range_at_most(&mut versions, rows.clone(), at_most - removed)
                    .map_err(db_err)?;
                removed += remove_range_at_most(&mut attrs, rows.clone(), at_most - removed)
                    .map_err(db_err)?;
                if below == DELETED_BLOB {
                    // Aborted ranges describe the versions a live blob still numbers.
                    removed += remove_range_at_most(&mut aborted, rows, at_most - removed)
                        .map_err(db_err)?;
                }
                if removed == at_most {
                    // It may have more: the next call looks again.
                    break;
                }
                purging.remove(blob).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)?;
        Ok(removed)
    }
}
