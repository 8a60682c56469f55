//! `DeleteBlob`: deletes a blob made with the blob API (`tomus blob delete`).
//!
//! Nothing indexes blobs by path, so the check that the blob backs no file walks the
//! namespace table once, under the namespace's writer lock and within the transaction that
//! deletes the blob: no file can take the blob meanwhile (a file's blob is created with it,
//! and renames move a file with its blob). The walk costs a read of every namespace entry,
//! which is fine for an occasional administrative delete.

use redb::{ReadableTable, WriteTransaction};
use tomus_metadata::BlobId;
use tomus_wire::{Error, ErrorKind, Result};

use super::{decode, Namespace, Record, NAMESPACE};
use crate::store::{db_err, delete_blob_in};

impl Namespace {
    /// Deletes `blob`, which must back no file (nor a new file being written): its records
    /// go and a tombstone stays, in one transaction; garbage collection reclaims its chunks
    /// and metadata after the grace. Writers of the blob are told it was deleted.
    pub fn delete_blob(&self, blob: BlobId) -> Result<()> {
        let _guard = self.lock_settled();
        let txn = self.store.write()?;
        if let Some(path) = file_of(&txn, blob)? {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "blob {blob} backs the file /{path}; remove the file instead (`tomus fs rm \
                     /{path}`), which deletes its blob"
                ),
            ));
        }
        delete_blob_in(&txn, blob)?;
        txn.commit().map_err(db_err)?;
        self.versions.forget_blobs(&[blob]);
        tracing::debug!("deleted blob {blob}");
        Ok(())
    }
}

/// The path of the file (or new file being written) backed by `blob`, if any.
fn file_of(txn: &WriteTransaction, blob: BlobId) -> Result<Option<String>> {
    let t = txn.open_table(NAMESPACE).map_err(db_err)?;
    for row in t.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        match decode(v.value())? {
            Record::File { blob: b, .. } | Record::Pending { blob: b, .. } if b == blob => {
                return Ok(Some(k.value().to_string()));
            }
            _ => {}
        }
    }
    Ok(None)
}
