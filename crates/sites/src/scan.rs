//! Scanning the source: which versions of a replicated subtree the site lacks, as the rule's
//! cursor says, and which files it holds are gone from the source.
//!
//! A scan reads only the source: the subtree's files, and for each file whose latest version
//! is past the cursor, its retained published versions. Every version past the cursor is an
//! item; items of all files come in publication order (ties: blob, version), so replaying
//! them in order keeps the site's history a prefix of the source's.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use tomus_client::Client;
use tomus_metadata::{BlobId, Version};
use tomus_wire::{Attrs, BlobInfo, EntryKind, ErrorKind, Result, VersionInfo, VersionState};

use crate::replay::{Cursor, Progress};

/// One source version to replay.
pub struct Item {
    pub path: String,
    pub blob: BlobInfo,
    pub version: VersionInfo,
    pub attrs: Attrs,
}

/// A registered file (workflows: kept in place on its holders, with no blob) the site
/// lacks: copied whole, as an ordinary file (`registered.rs`).
pub struct RegisteredItem {
    pub path: String,
    pub created_ms: u64,
}

/// What a scan found: versions to replay (in order), registered files to copy, and files
/// gone from the source.
#[derive(Default)]
pub struct Scan {
    /// The replicated subtree.
    pub root: String,
    pub items: Vec<Item>,
    pub registered: Vec<RegisteredItem>,
    /// Paths in the cursor no longer in the subtree (or now another blob's).
    pub gone: Vec<String>,
    /// Aborted version ranges of each blob with items.
    pub(crate) aborted: HashMap<BlobId, Vec<(Version, Version)>>,
}

fn in_subtree(root: &str, path: &str) -> bool {
    tomus_backup::point::selected(&[root.to_string()], path)
        && !tomus_client::namespace::is_reserved(path)
}

/// Reads the source: the versions of `root`'s files past `cursor`.
pub async fn scan(source: &Client, root: &str, cursor: &Cursor) -> Result<Scan> {
    let ns = source.internal_namespace();
    let entries = if root.is_empty() {
        ns.walk("").await?
    } else {
        match ns.stat(root).await {
            Ok(e) if matches!(e.kind, EntryKind::File | EntryKind::Registered) => vec![e],
            Ok(_) => ns.walk(root).await?,
            Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        }
    };
    let mut out = Scan {
        root: root.to_string(),
        ..Scan::default()
    };
    let mut present = HashSet::new();
    for e in entries {
        if !in_subtree(root, &e.path) {
            continue;
        }
        let info = match (e.kind, e.blob) {
            (EntryKind::File, Some(info)) => info,
            (EntryKind::Registered, _) => {
                present.insert(e.path.clone());
                // Immutable: the copy the cursor records is this file if made after it.
                let copied = cursor
                    .files
                    .get(&e.path)
                    .is_some_and(|c| c.src_blob == 0 && c.src_version == e.created_ms);
                if !copied {
                    out.registered.push(RegisteredItem {
                        path: e.path,
                        created_ms: e.created_ms,
                    });
                }
                continue;
            }
            _ => continue,
        };
        let done = match cursor.files.get(&e.path) {
            Some(c) if c.src_blob == info.id => c.src_version,
            _ => 0,
        };
        present.insert(e.path.clone());
        if info.latest <= done {
            continue;
        }
        let blob = source.blob(&info);
        // Only what the cursor has not recorded: an appended log has millions of versions.
        // (An aborted range that starts at or below `done` and reaches above it is not
        // listed; a version after it is then copied whole, not chained: see `replay.rs`.)
        let listing = tokio::try_join!(blob.versions_attrs_after(done), blob.versions_after(done));
        let (listed, list) = match listing {
            Ok(x) => x,
            // Deleted since the listing: the next scan sees it gone.
            Err(e) if e.kind == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        out.aborted.insert(info.id, list.aborted);
        for (v, attrs) in listed {
            if v.version <= info.latest && v.state == VersionState::Published {
                out.items.push(Item {
                    path: e.path.clone(),
                    blob: info.clone(),
                    version: v,
                    attrs,
                });
            }
        }
    }
    out.gone = cursor
        .files
        .keys()
        .filter(|p| !present.contains(*p))
        .cloned()
        .collect();
    out.items
        .sort_by_key(|i| (i.version.published_ms, i.version.blob, i.version.version));
    Ok(out)
}

impl Scan {
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.registered.is_empty() && self.gone.is_empty()
    }

    /// Publishes the scan's backlog in `progress`.
    pub fn publish(&self, progress: &Progress) {
        progress.versions_behind.store(
            (self.items.len() + self.registered.len()) as u64,
            Ordering::Relaxed,
        );
        let oldest = self.items.first().map_or(0, |i| i.version.published_ms);
        progress.oldest_pending_ms.store(oldest, Ordering::Relaxed);
    }
}
