//! Registered files (workflows: kept in place on their holders' disks, with no blob) on a
//! site. The site has none of the holders, so each is copied whole, as an ordinary file with
//! as many replicas as it has holders (as far as the site has providers), read from a holder
//! and checked against its CRC32C. It is immutable: the copy's [`REPLICA_OF`] names its
//! checksum and size, so a copy already on the site (a pass interrupted before its cursor
//! was saved) is not made again.

use tomus_client::registered::RegisteredPieces;
use tomus_client::{Client, CommitOptions, CreateOptions, Replace};
use tomus_maintenance::throttle::Throttle;
use tomus_metadata::BlobId;
use tomus_wire::{Attrs, ErrorKind, FsEntry, Result};

use crate::replay::{Progress, REPLICA_OF};
use crate::scan::RegisteredItem;

/// The [`REPLICA_OF`] of a registered file's copy.
fn marker(crc: u32, size: u64) -> String {
    format!("registered:{crc:08x}:{size}")
}

/// What copying a registered file came to (the site's errors are errors).
pub(crate) enum Copied {
    /// On the site, as its blob at the path.
    To(BlobId),
    /// No longer a registered file at the source: the next scan sees what it is now.
    Gone,
    /// No holder could give its bytes intact; why.
    Unreadable(String),
}

/// Copies the registered file `item` to the site. A new site file is added to `created`.
pub(crate) async fn copy_registered(
    source: &Client,
    target: &Client,
    item: &RegisteredItem,
    throttle: &Throttle,
    progress: &Progress,
    created: &mut Vec<FsEntry>,
) -> Result<Copied> {
    let path = &item.path;
    let file = match source.registered_checked(path).await {
        Ok(f) => f,
        // Deleted, or persisted (so now an ordinary file), since the scan.
        Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::InvalidArgument) => {
            return Ok(Copied::Gone)
        }
        Err(e) => return Err(e),
    };
    let crc = file.checksum.unwrap_or_default();
    let marker = marker(crc, file.size);
    let ns = target.namespace();
    let blob = match ns.object(path, None).await {
        Ok((o, blob)) if o.attrs.get(REPLICA_OF) == Some(&marker) => {
            return Ok(Copied::To(blob.id()))
        }
        // Another file there: the copy is its next version.
        Ok((_, blob)) => blob,
        Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::IsADirectory) => {
            if e.kind == ErrorKind::IsADirectory {
                // An empty directory gives way, as for any file (see `replay.rs`).
                ns.delete(path, false).await.map_err(|_| e)?;
            }
            let alive = target.writable_providers().await?;
            let options = CreateOptions {
                replication: (file.holders.len() as u32).min(alive).max(1),
                ..CreateOptions::default()
            };
            let (entry, blob) = ns.create(path, options).await?;
            if entry.blob.as_ref().is_some_and(|b| b.latest == 0) {
                created.push(entry);
            }
            blob
        }
        Err(e) => return Err(e),
    };
    // A copy that does not match the checksum: again, from the next holder on.
    let mut failures = Vec::new();
    let mut first = 0;
    loop {
        let mut reader = match RegisteredPieces::new(source, &file, first) {
            Ok(r) => r,
            Err(e) => return Ok(Copied::Unreadable(e.message)),
        };
        let mut writer = blob.writer();
        // The site failing fails the pass; only the holders' failures are this file's.
        let mut read = Ok(());
        loop {
            match reader.next().await {
                Ok(Some((_, data))) => {
                    throttle.take(data.len() as u64).await;
                    writer.write(&data).await?;
                }
                Ok(None) => break,
                Err(e) => {
                    read = Err(e);
                    break;
                }
            }
        }
        match read {
            Ok(()) if reader.crc() == crc => {
                let mut attrs = Attrs::new();
                attrs.insert(REPLICA_OF.into(), marker);
                let options = CommitOptions {
                    attrs,
                    expect_size: None,
                };
                writer.commit(Replace::default(), &options).await?;
                progress
                    .bytes_done
                    .fetch_add(file.size, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!("sites: registered file /{path} copied to the site");
                return Ok(Copied::To(blob.id()));
            }
            Ok(()) => failures.push(format!("checksum {:08x}, expected {crc:08x}", reader.crc())),
            Err(e) => failures.push(e.to_string()),
        }
        first += 1;
        if first >= reader.holders() {
            return Ok(Copied::Unreadable(format!(
                "no holder gave its bytes intact ({})",
                failures.join("; ")
            )));
        }
    }
}
