//! Directory retention policies: the policy a directory gives the files created below it.
//!
//! A directory may have a policy of its own (`tomus fs retention DIR --keep-last N`); a new
//! file gets, at its creation, the policy of the nearest directory above it that has one, or
//! [`DEFAULT_FILE_RETENTION`]. The policy is then the file's blob's own: changing a
//! directory's policy later changes what files created below it from then on get, not the
//! files already there. Policies are kept in their own table, keyed by the directory's
//! normalized path (`""`: the root), and move and go with their directories in the
//! transaction that moves or removes them.

use std::ops::Bound;

use redb::{ReadableTable, Table, TableDefinition};
use tomus_wire::{EntryKind, Error, FsRetention, Result, Retention, DEFAULT_FILE_RETENTION};

use super::{ancestors, get, normalize, not_found, subtree_end, subtree_prefix, visible};
use super::{Namespace, Record, NAMESPACE};
use crate::store::{db_err, decode, encode};
use crate::versions::check_retention;

/// Key: a directory's normalized path (`""`: the root); value: its [`Retention`]. Only
/// directories that have a policy of their own (new in manager state format 4).
pub(super) const POLICIES: TableDefinition<&str, &[u8]> = TableDefinition::new("dir_retention");

pub(super) type Policies<'t> = Table<'t, &'static str, &'static [u8]>;

fn own(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    dir: &str,
) -> Result<Option<Retention>> {
    match t.get(dir).map_err(db_err)? {
        Some(v) => Ok(Some(decode(v.value())?)),
        None => Ok(None),
    }
}

/// The policy a new file at `path` gets, and the directory it comes from (`None`: the
/// default): the nearest ancestor of `path` with a policy.
fn effective(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    path: &str,
) -> Result<(Retention, Option<String>)> {
    let mut dirs: Vec<&str> = ancestors(path).collect();
    dirs.insert(0, "");
    for dir in dirs.into_iter().rev() {
        if let Some(p) = own(t, dir)? {
            return Ok((p, Some(dir.to_string())));
        }
    }
    Ok((DEFAULT_FILE_RETENTION, None))
}

/// [`effective`] within a read transaction.
pub(super) fn effective_in(
    txn: &redb::ReadTransaction,
    path: &str,
) -> Result<(Retention, Option<String>)> {
    let t = txn.open_table(POLICIES).map_err(db_err)?;
    effective(&t, path)
}

/// Keys of `t` in the subtree of `dir` (not `dir` itself).
fn subtree(t: &Policies<'_>, dir: &str) -> Result<Vec<String>> {
    let prefix = subtree_prefix(dir);
    let end = subtree_end(&prefix);
    let upper = match &end {
        Some(e) => Bound::Excluded(e.as_str()),
        None => Bound::Unbounded,
    };
    let mut keys = Vec::new();
    for row in t
        .range::<&str>((Bound::Included(prefix.as_str()), upper))
        .map_err(db_err)?
    {
        let (k, _) = row.map_err(db_err)?;
        keys.push(k.value().to_string());
    }
    Ok(keys)
}

/// Moves the policies of the directory `from` and of the directories below it to `to`.
pub(super) fn moved(t: &mut Policies<'_>, from: &str, to: &str) -> Result<()> {
    let mut keys = subtree(t, from)?;
    keys.push(from.to_string());
    for key in keys {
        let value = t
            .remove(key.as_str())
            .map_err(db_err)?
            .map(|v| v.value().to_vec());
        if let Some(value) = value {
            let new = format!("{to}{}", &key[from.len()..]);
            t.insert(new.as_str(), value.as_slice()).map_err(db_err)?;
        }
    }
    Ok(())
}

/// Forgets the policies of the directory `dir` and of the directories below it.
pub(super) fn removed(t: &mut Policies<'_>, dir: &str) -> Result<()> {
    let mut keys = subtree(t, dir)?;
    keys.push(dir.to_string());
    for key in keys {
        t.remove(key.as_str()).map_err(db_err)?;
    }
    Ok(())
}

/// A policy as a directory entry's answer.
fn answer(
    path: String,
    kind: EntryKind,
    (retention, from): (Retention, Option<String>),
) -> FsRetention {
    FsRetention {
        path,
        kind,
        retention,
        from,
    }
}

impl Namespace {
    /// The policy of the file `path`, or the one the directory `path` gives new files below
    /// it, and where it comes from.
    pub fn retention(&self, path: &str) -> Result<FsRetention> {
        let path = normalize(path)?;
        let txn = self.store.read()?;
        let table = txn.open_table(NAMESPACE).map_err(db_err)?;
        match visible(get(&table, &path)?) {
            None => Err(not_found(&path)),
            Some(Record::Dir { .. }) => {
                let policies = txn.open_table(POLICIES).map_err(db_err)?;
                // The directory's own policy first: `effective` looks at ancestors only.
                let own = own(&policies, &path)?.map(|p| (p, Some(path.clone())));
                let found = match own {
                    Some(found) => found,
                    None => effective(&policies, &path)?,
                };
                Ok(answer(path, EntryKind::Dir, found))
            }
            Some(Record::Registered { .. }) => Err(super::registered::not_a_blob(&path)),
            Some(Record::File { blob, .. } | Record::Pending { blob, .. }) => {
                // Pending is not visible: listed for completeness.
                let info = self.versions.blob_info(blob)?;
                let from = Some(path.clone());
                Ok(answer(path, EntryKind::File, (info.retention, from)))
            }
        }
    }

    /// Sets the policy of the file `path` (its blob's, applied at once), or the one the
    /// directory `path` gives files created below it from now on (`None`: its parent's
    /// again). Files already below a directory keep their policies.
    pub fn set_retention(&self, path: &str, policy: Option<Retention>) -> Result<FsRetention> {
        let path = normalize(path)?;
        if let Some(p) = policy {
            check_retention(p)?;
        }
        let _guard = self.lock_settled();
        let txn = self.store.write()?;
        let record = {
            let table = txn.open_table(NAMESPACE).map_err(db_err)?;
            visible(get(&table, &path)?)
        };
        match record {
            None => Err(not_found(&path)),
            Some(Record::Registered { .. }) => Err(super::registered::not_a_blob(&path)),
            Some(Record::File { blob, .. } | Record::Pending { blob, .. }) => {
                let Some(policy) = policy else {
                    return Err(Error::invalid(format!(
                        "/{path} is a file: it needs a policy (--keep-last, --keep-newer-than \
                         or --keep-all); only a directory can follow its parent's"
                    )));
                };
                drop(txn);
                let info = self.versions.set_retention(blob, policy)?;
                let from = Some(path.clone());
                Ok(answer(path, EntryKind::File, (info.retention, from)))
            }
            Some(Record::Dir { .. }) => {
                {
                    let mut t = txn.open_table(POLICIES).map_err(db_err)?;
                    match policy {
                        Some(p) => {
                            t.insert(path.as_str(), encode(&p)?.as_slice())
                                .map_err(db_err)?;
                        }
                        None => {
                            t.remove(path.as_str()).map_err(db_err)?;
                        }
                    }
                }
                txn.commit().map_err(db_err)?;
                drop(_guard);
                self.retention(&path)
            }
        }
    }
}
