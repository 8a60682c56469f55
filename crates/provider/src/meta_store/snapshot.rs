//! A whole new log holding the header and the live nodes, written to a temporary file,
//! synced and renamed over the log: how compaction and the upgrade of a headerless log
//! replace it, so that a crash leaves either log whole.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tomus_metadata::{Node, NodeKey};

use super::record::{encode_log_header, encode_record};

/// Suffix of the file a compaction writes before renaming it over the log.
const COMPACT_SUFFIX: &str = ".compact";

/// Replaces the log at `path` with one holding the header and `nodes`: written to a temporary
/// file, synced, renamed over the log. The caller syncs the directory. Returns the new file,
/// open for appending, and its length.
pub(super) fn rewrite(path: &Path, nodes: &[(NodeKey, Arc<Node>)]) -> io::Result<(File, u64)> {
    let tmp = compact_path(path);
    match write_snapshot(&tmp, nodes).and_then(|written| fs::rename(&tmp, path).map(|()| written)) {
        Ok(written) => Ok(written),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Writes the header and `nodes` as a new log at `path`, synced (always: it is about to
/// replace the whole log). Returns the file, open for appending, and its length.
fn write_snapshot(path: &Path, nodes: &[(NodeKey, Arc<Node>)]) -> io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, &file);
    let header = encode_log_header().map_err(|e| io::Error::other(e.message))?;
    out.write_all(&header)?;
    let mut record = Vec::new();
    let mut len = header.len() as u64;
    for (key, node) in nodes {
        record.clear();
        encode_record(&mut record, key, node).map_err(|e| io::Error::other(e.message))?;
        out.write_all(&record)?;
        len += record.len() as u64;
    }
    out.flush()?;
    drop(out);
    file.sync_all()?;
    Ok((file, len))
}

pub(super) fn compact_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(COMPACT_SUFFIX);
    PathBuf::from(name)
}

pub(super) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}
