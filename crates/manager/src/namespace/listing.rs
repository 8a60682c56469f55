//! Reading the tree: a directory's entries in path order, and a file with one of its versions.

use std::ops::Bound;
use std::sync::Arc;

use redb::ReadableTable;
use tomus_metadata::{BlobId, Version};
use tomus_wire::{Attrs, EntryKind, Error, ErrorKind, FsEntry, FsSnapshotPage, ObjectInfo, Result};

use super::records::{
    get, is_a_dir, normalize, not_a_dir, not_found, subtree_end, subtree_prefix, visible, Record,
    MAX_LIST, NAMESPACE,
};
use super::snapshots::Tree;
use super::{registered, Namespace};
use crate::store::{db_err, decode};

impl Namespace {
    /// Entries under the directory `path` in path order, after `start_after`, at most `limit`.
    pub fn list(
        &self,
        path: &str,
        recursive: bool,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<FsEntry>> {
        let txn = self.store.read_unjournaled()?;
        let table = txn.open_table(NAMESPACE).map_err(db_err)?;
        self.list_in(&table, path, recursive, start_after, limit)
    }

    /// [`Namespace::list`] read from one snapshot of the tree for every page: the first page
    /// (`snapshot: None`) takes it, and holds it unless that page is the last.
    pub fn list_snapshot(
        &self,
        path: &str,
        recursive: bool,
        snapshot: Option<u64>,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<FsSnapshotPage> {
        let tree: Tree = match snapshot {
            Some(id) => self.snapshots.get(id)?,
            None => {
                let txn = self.store.read_unjournaled()?;
                Arc::new(txn.open_table(NAMESPACE).map_err(db_err)?)
            }
        };
        let entries = self.list_in(tree.as_ref(), path, recursive, start_after, limit)?;
        let snapshot = match (snapshot, entries.len() < limit as usize) {
            (Some(id), true) => {
                self.snapshots.release(id);
                None
            }
            (Some(id), false) => Some(id),
            (None, true) => None,
            (None, false) => Some(self.snapshots.hold(tree)),
        };
        Ok(FsSnapshotPage { snapshot, entries })
    }

    fn list_in(
        &self,
        table: &impl ReadableTable<&'static str, &'static [u8]>,
        path: &str,
        recursive: bool,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<FsEntry>> {
        let path = normalize(path)?;
        if limit == 0 || limit > MAX_LIST {
            return Err(Error::invalid(format!(
                "list limit {limit} must be between 1 and {MAX_LIST}"
            )));
        }
        match visible(get(table, &path)?) {
            Some(Record::Dir { .. }) => {}
            Some(_) => return Err(not_a_dir(&path)),
            None => return Err(not_found(&path)),
        }
        let prefix = subtree_prefix(&path);
        let end = subtree_end(&prefix);
        let mut from = match start_after {
            Some(s) if s > prefix.as_str() => Bound::Excluded(s.to_string()),
            _ => Bound::Included(prefix.clone()),
        };
        let mut out = Vec::new();
        'scan: while out.len() < limit as usize {
            let lower = match &from {
                Bound::Included(s) => Bound::Included(s.as_str()),
                Bound::Excluded(s) => Bound::Excluded(s.as_str()),
                Bound::Unbounded => Bound::Unbounded,
            };
            let upper = match &end {
                Some(e) => Bound::Excluded(e.as_str()),
                None => Bound::Unbounded,
            };
            for row in table.range::<&str>((lower, upper)).map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                let key = k.value();
                if let (false, Some((child, _))) = (recursive, key[prefix.len()..].split_once('/'))
                {
                    // Below a child directory: skip its whole subtree in one step.
                    from = Bound::Included(format!("{prefix}{child}0"));
                    continue 'scan;
                }
                let record: Record = decode(v.value())?;
                if let Record::Pending { .. } = record {
                    continue;
                }
                match self.entry(key.to_string(), record) {
                    Ok(entry) => out.push(entry),
                    // A file deleted (with its blob) since this snapshot: gone, as after.
                    Err(e) if e.kind == ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                if out.len() == limit as usize {
                    break;
                }
            }
            break;
        }
        Ok(out)
    }

    /// The file at `path` with one of its versions (`None`: the latest published) and that
    /// version's attributes.
    pub fn object(&self, path: &str, version: Option<Version>) -> Result<ObjectInfo> {
        let entry = self.stat(path)?;
        let blob = match (&entry.kind, &entry.blob) {
            (EntryKind::File, Some(b)) => b.id,
            (EntryKind::Registered, _) => return Err(registered::not_a_blob(&entry.path)),
            _ => return Err(is_a_dir(&entry.path)),
        };
        let version = self.versions.version(blob, version)?;
        let attrs = match version.version {
            0 => Attrs::new(),
            v => self.versions.attrs(&[(blob, v)])?.pop().unwrap_or_default(),
        };
        Ok(ObjectInfo {
            entry,
            version,
            attrs,
        })
    }

    /// [`Namespace::list`] with the attributes of each file's latest published version.
    pub fn list_attrs(
        &self,
        path: &str,
        recursive: bool,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<(FsEntry, Attrs)>> {
        let entries = self.list(path, recursive, start_after, limit)?;
        let keys: Vec<(BlobId, Version)> = entries
            .iter()
            .filter_map(|e| e.blob.as_ref())
            .filter(|b| b.latest > 0)
            .map(|b| (b.id, b.latest))
            .collect();
        let mut attrs = self.versions.attrs(&keys)?.into_iter();
        Ok(entries
            .into_iter()
            .map(|e| {
                let a = match &e.blob {
                    Some(b) if b.latest > 0 => attrs.next().unwrap_or_default(),
                    _ => Attrs::new(),
                };
                (e, a)
            })
            .collect())
    }
}
