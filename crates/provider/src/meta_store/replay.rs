//! Opening the log: its format checked, its records replayed, a torn tail cut off.
//!
//! Logs written before the header existed start with an ordinary record; they are format 1.
//! Opening one replays it, then upgrades it in place by the compaction path: the header and
//! the live nodes go to a temporary file, which is synced and renamed over the log, and the
//! directory is synced. A crash before the rename leaves the old log whole (and the temporary
//! file, removed at the next start, which upgrades again); after it, the new one. The log is
//! upgraded rather than kept headerless so that every log this build has opened carries its
//! format, which a later format change (or a downgrade) relies on; it costs one rewrite of
//! the live nodes, and drops the dead ones on the way. An empty log (new, or cut back to
//! nothing) gets its header written in place: a crash that tears it leaves a damaged first
//! record with nothing after it, which the next start cuts off and writes again.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader};
use std::path::Path;
use std::sync::Arc;

use tomus_metadata::{Node, NodeKey};
use tomus_wire::{Error, Result};

use super::record::{
    damaged_header, encode_log_header, header_version, read_record, record_size, Record,
    LOG_HEADER_LEN,
};
use super::snapshot::{compact_path, parent_dir, rewrite};
use super::FORMAT_VERSION;
use crate::group_commit::append;
use crate::{io_error, sync_dir};
use tomus_wire::zeroed_ahead::drop_torn_tail;

/// What replaying the log found.
pub(super) struct Replayed {
    pub(super) file: File,
    /// Length of the intact records.
    pub(super) len: u64,
    /// Bytes of the records of the nodes held.
    pub(super) live: u64,
    pub(super) nodes: HashMap<NodeKey, Arc<Node>>,
}

/// Opens the log, checks its format, applies every intact record and cuts the file after
/// the last one. Writes the header of an empty log; upgrades a log without a header.
pub(super) fn replay(path: &Path, fsync: bool) -> Result<Replayed> {
    let fail = |e: io::Error| io_error(format_args!("opening metadata log {}", path.display()), e);
    // What a compaction (or an upgrade) that did not finish left behind.
    match fs::remove_file(compact_path(path)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(fail(e)),
        _ => {}
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(fail)?;
    let file_len = file.metadata().map_err(fail)?.len();
    let mut reader = BufReader::with_capacity(1 << 20, &file);
    let mut map = HashMap::new();
    let mut live = 0u64;
    let mut pos = 0u64;
    let mut headerless = false;
    while pos < file_len {
        match read_record(&mut reader, file_len - pos).map_err(fail)? {
            Ok((record, size)) => {
                if pos == 0 {
                    // The first record says which format the log has; checked before
                    // anything is changed.
                    if let Record::Delete(key) = &record {
                        if let Some(version) = header_version(key) {
                            if version != FORMAT_VERSION {
                                return Err(Error::internal(format!(
                                    "metadata log {}: format version {version}, this build \
                                     reads format version {FORMAT_VERSION} (and logs without \
                                     a format header, which are version 1); written by a \
                                     newer tomus? The file was left as it is",
                                    path.display()
                                )));
                            }
                            live += size;
                            pos += size;
                            continue;
                        }
                    }
                    headerless = true;
                }
                let gone = match record {
                    Record::Put(key, node) => {
                        live += size;
                        map.insert(key, Arc::new(node)).map(|old| (key, old))
                    }
                    Record::Delete(key) => map.remove(&key).map(|old| (key, old)),
                };
                if let Some((key, old)) = gone {
                    live = live.saturating_sub(record_size(&key, &old));
                }
                pos += size;
            }
            Err(damage) => {
                if pos == 0 && file_len > LOG_HEADER_LEN && damaged_header(&file).map_err(fail)? {
                    return Err(Error::internal(format!(
                        "metadata log {}: its format header is damaged ({damage}), so its \
                         format is unknown; not opened, and left as it is (replaying it as \
                         a torn write would cut off the whole log)",
                        path.display()
                    )));
                }
                drop_torn_tail(&file, path, "metadata log", pos, &damage, fsync).map_err(fail)?;
                break;
            }
        }
    }
    drop(reader);
    if pos == 0 {
        // Empty: new, or cut back to nothing. Nothing to lose, so the header is written in
        // place; the directory sync makes a new file's name durable with it.
        let header = encode_log_header()?;
        append(&file, 0, &header, fsync)
            .and_then(|()| {
                if fsync {
                    sync_dir(parent_dir(path))
                } else {
                    Ok(())
                }
            })
            .map_err(fail)?;
        let len = header.len() as u64;
        return Ok(Replayed {
            file,
            len,
            live: len,
            nodes: map,
        });
    }
    if headerless {
        let snapshot: Vec<(NodeKey, Arc<Node>)> =
            map.iter().map(|(k, n)| (*k, n.clone())).collect();
        let (file, len) = rewrite(path, &snapshot)
            .and_then(|written| sync_dir(parent_dir(path)).map(|()| written))
            .map_err(|e| {
                io_error(
                    format_args!(
                        "upgrading metadata log {} to format version {FORMAT_VERSION}",
                        path.display()
                    ),
                    e,
                )
            })?;
        tracing::info!(
            "metadata log {}: upgraded to format version {FORMAT_VERSION} ({} nodes, {pos} \
             bytes before, {len} after)",
            path.display(),
            map.len()
        );
        return Ok(Replayed {
            file,
            len,
            live: len,
            nodes: map,
        });
    }
    Ok(Replayed {
        file,
        len: pos,
        live,
        nodes: map,
    })
}
