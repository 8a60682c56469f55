//! Changing the tree: renaming a file or a directory, deleting one. A file that goes (removed,
//! or replaced by a rename) takes its blob with it in the same transaction.

use tomus_wire::{Error, ErrorKind, Result};

use super::records::{
    get, make_parents, normalize, not_found, put, subtree_keys, subtree_prefix, visible, Record,
};
use super::{retention, Namespace};
use crate::store::db_err;
use crate::versions::now_ms;

impl Namespace {
    /// Moves a file or a directory tree to `to` (creating its parents); an existing file at
    /// `to` is replaced (and its blob deleted), an existing directory is not.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let from = normalize(from)?;
        let to = normalize(to)?;
        if from.is_empty() || to.is_empty() {
            return Err(Error::invalid(
                "the root directory cannot be renamed or replaced",
            ));
        }
        if from == to {
            // Nothing moves, but a rename of nothing is refused (as POSIX's rename(2)).
            return match visible(self.read(&from)?) {
                Some(_) => Ok(()),
                None => Err(not_found(&from)),
            };
        }
        if to.starts_with(&subtree_prefix(&from)) {
            return Err(Error::invalid(format!(
                "cannot move /{from} into itself (/{to})"
            )));
        }
        let _guard = self.lock_settled();
        self.change_removing(|t, policies| {
            let record = visible(get(t, &from)?).ok_or_else(|| not_found(&from))?;
            let mut replaced = match (get(t, &to)?, record) {
                (None, _) => Vec::new(),
                // A new file being written there: what is moved takes its place.
                (Some(Record::Pending { blob: old, .. }), _) => vec![old],
                (Some(Record::File { blob: old, .. }), Record::File { blob, .. }) => {
                    // Two names never share a blob; checked so a bug cannot lose the moved file.
                    if old == blob {
                        Vec::new()
                    } else {
                        vec![old]
                    }
                }
                // A registered file gives way to a file or another registered one (`tomus fs
                // persist` renames the persisted copy onto it). Its record stays behind in the
                // `registered` table, unnamed.
                (
                    Some(Record::Registered { .. }),
                    Record::File { .. } | Record::Registered { .. },
                ) => Vec::new(),
                (Some(_), _) => return Err(Error::already_exists(format!("/{to} already exists"))),
            };
            make_parents(t, &to, now_ms())?;
            let mut moves = vec![(from.clone(), to.clone())];
            if let Record::Dir { .. } = record {
                // A directory's policy, and those of the directories below it, go with it.
                retention::moved(policies, &from, &to)?;
                for key in subtree_keys(t, &from)? {
                    // Pending files stay at the path they were created at.
                    if let Some(Record::Pending { .. }) = get(t, &key)? {
                        continue;
                    }
                    let moved = format!("{to}{}", &key[from.len()..]);
                    moves.push((key, moved));
                }
            }
            for (i, (old, new)) in moves.into_iter().enumerate() {
                let r = get(t, &old)?.ok_or_else(|| not_found(&old))?;
                if i > 0 {
                    if let Some(Record::Pending { blob, .. }) = get(t, &new)? {
                        replaced.push(blob);
                    }
                }
                t.remove(old.as_str()).map_err(db_err)?;
                put(t, &new, &r)?;
            }
            Ok(((), replaced))
        })
    }

    /// Removes a file, or a directory (with everything below it when `recursive`; it must be
    /// empty otherwise). The blobs of removed files are deleted with them; their chunks'
    /// space comes back with garbage collection.
    pub fn delete(&self, path: &str, recursive: bool) -> Result<()> {
        let path = normalize(path)?;
        if path.is_empty() {
            return Err(Error::invalid("the root directory cannot be deleted"));
        }
        let _guard = self.lock_settled();
        self.change_removing(|t, policies| {
            let mut blobs = Vec::new();
            if let Some(Record::Dir { .. }) = get(t, &path)? {
                // Refused below unless the directory goes, and then its policies go too.
                retention::removed(policies, &path)?;
            }
            match visible(get(t, &path)?) {
                None => return Err(not_found(&path)),
                Some(Record::File { blob, .. } | Record::Pending { blob, .. }) => blobs.push(blob),
                // Its holders' copies are collected (see `registered.rs`).
                Some(Record::Registered { .. }) => {}
                Some(Record::Dir { .. }) if recursive => {
                    // New files being written below go too (their writers are told).
                    for key in subtree_keys(t, &path)? {
                        if let Some(Record::File { blob, .. } | Record::Pending { blob, .. }) =
                            get(t, &key)?
                        {
                            blobs.push(blob);
                        }
                        t.remove(key.as_str()).map_err(db_err)?;
                    }
                }
                Some(Record::Dir { .. }) => {
                    // Empty as far as anyone can see: new files being written below keep
                    // their paths and make the directory again when published.
                    for key in subtree_keys(t, &path)? {
                        if visible(get(t, &key)?).is_some() {
                            return Err(Error::new(
                                ErrorKind::NotEmpty,
                                format!("directory /{path} is not empty"),
                            ));
                        }
                    }
                }
            }
            t.remove(path.as_str()).map_err(db_err)?;
            Ok(((), blobs))
        })
    }
}
