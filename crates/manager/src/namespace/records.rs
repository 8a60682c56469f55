//! Namespace records in the manager's redb table: the record kinds, normalized path keys,
//! subtree key ranges, and the checks and helpers every namespace change uses.

use std::ops::Bound;

use redb::{ReadableTable, Table, TableDefinition};
use serde::{Deserialize, Serialize};
use tomus_metadata::BlobId;
use tomus_wire::{Error, ErrorKind, Result};

use crate::store::{db_err, decode, encode};

pub(super) const NAMESPACE: TableDefinition<&str, &[u8]> = TableDefinition::new("namespace");

/// Longest path (bytes): an S3 key (1024) under a bucket name (63) and `/`; longest
/// component, as most file systems.
pub(super) const MAX_PATH: usize = 1024 + 64;
pub(super) const MAX_COMPONENT: usize = 255;
/// Most entries one listing call returns.
pub(super) const MAX_LIST: u32 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Record {
    Dir {
        created_ms: u64,
    },
    File {
        blob: BlobId,
        created_ms: u64,
    },
    /// A new file whose blob has no published version yet: invisible (new in format 3).
    Pending {
        blob: BlobId,
        created_ms: u64,
    },
    /// A file registered in place on its holders (workflows); `id` keys its record in the
    /// `registered` table (`registered.rs`), so a rename moves only this entry.
    Registered {
        id: u64,
        created_ms: u64,
    },
}

/// `r` as the namespace shows it: a pending file is not there yet.
pub(super) fn visible(r: Option<Record>) -> Option<Record> {
    r.filter(|r| !matches!(r, Record::Pending { .. }))
}

/// Checks `path` and returns it normalized: empty components (leading, trailing or doubled
/// `/`) are dropped; `.`, `..` and NUL bytes are refused.
pub(super) fn normalize(path: &str) -> Result<String> {
    let mut parts = Vec::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." {
            return Err(Error::invalid(format!(
                "path {path:?}: '.' and '..' are not allowed"
            )));
        }
        if part.contains('\0') {
            return Err(Error::invalid(format!("path {path:?} contains a NUL byte")));
        }
        if part.len() > MAX_COMPONENT {
            return Err(Error::invalid(format!(
                "path {path:?}: a component is longer than {MAX_COMPONENT} bytes"
            )));
        }
        parts.push(part);
    }
    let joined = parts.join("/");
    if joined.len() > MAX_PATH {
        return Err(Error::invalid(format!(
            "path is {} bytes long; the limit is {MAX_PATH}",
            joined.len()
        )));
    }
    Ok(joined)
}

/// `path`'s directory's key range prefix: `a/b/` for `a/b`, `` for the root.
pub(super) fn subtree_prefix(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("{path}/")
    }
}

/// First key after every key starting with `prefix` (which ends in `/`); `None`: unbounded.
pub(super) fn subtree_end(prefix: &str) -> Option<String> {
    prefix.strip_suffix('/').map(|p| format!("{p}0"))
}

/// Every proper ancestor of `path`, outermost first, without the root.
pub(super) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

pub(super) fn get(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    path: &str,
) -> Result<Option<Record>> {
    if path.is_empty() {
        return Ok(Some(Record::Dir { created_ms: 0 }));
    }
    match table.get(path).map_err(db_err)? {
        Some(v) => Ok(Some(decode(v.value())?)),
        None => Ok(None),
    }
}

pub(super) fn put(
    table: &mut Table<&'static str, &'static [u8]>,
    path: &str,
    r: &Record,
) -> Result<()> {
    table.insert(path, encode(r)?.as_slice()).map_err(db_err)?;
    Ok(())
}

/// Keys under the directory `path`, in order.
pub(super) fn subtree_keys(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    path: &str,
) -> Result<Vec<String>> {
    let prefix = subtree_prefix(path);
    let end = subtree_end(&prefix);
    let upper = match &end {
        Some(e) => Bound::Excluded(e.as_str()),
        None => Bound::Unbounded,
    };
    let mut keys = Vec::new();
    for row in table
        .range::<&str>((Bound::Included(prefix.as_str()), upper))
        .map_err(db_err)?
    {
        let (k, _) = row.map_err(db_err)?;
        keys.push(k.value().to_string());
    }
    Ok(keys)
}

pub(super) fn not_found(path: &str) -> Error {
    Error::not_found(format!("no such file or directory: /{path}"))
}

pub(super) fn not_a_dir(path: &str) -> Error {
    Error::new(
        ErrorKind::NotADirectory,
        format!("/{path} is a file, not a directory"),
    )
}

pub(super) fn is_a_dir(path: &str) -> Error {
    Error::new(ErrorKind::IsADirectory, format!("/{path} is a directory"))
}

pub(super) fn being_created(path: &str) -> Error {
    Error::already_exists(format!(
        "/{path} is a new file being written by another writer (it appears once published)"
    ))
}

/// Fails if an ancestor of `path` is a file (or a new file being written).
pub(super) fn check_parents(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    path: &str,
) -> Result<()> {
    for a in ancestors(path) {
        match get(t, a)? {
            Some(Record::Dir { .. }) | None => {}
            Some(Record::File { .. } | Record::Pending { .. } | Record::Registered { .. }) => {
                return Err(not_a_dir(a))
            }
        }
    }
    Ok(())
}

/// Creates the missing ancestors of `path` as directories; an ancestor that is a file fails
/// before anything is changed.
pub(super) fn make_parents(
    t: &mut Table<&'static str, &'static [u8]>,
    path: &str,
    now: u64,
) -> Result<()> {
    check_parents(t, path)?;
    for a in ancestors(path) {
        if get(t, a)?.is_none() {
            put(t, a, &Record::Dir { created_ms: now })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalized_and_checked() {
        assert_eq!(normalize("/a//b/c/").unwrap(), "a/b/c");
        assert_eq!(normalize("/").unwrap(), "");
        assert_eq!(normalize("").unwrap(), "");
        for bad in ["a/../b", "./a", "a\0b"] {
            assert_eq!(normalize(bad).unwrap_err().kind, ErrorKind::InvalidArgument);
        }
        assert!(normalize(&"x".repeat(MAX_COMPONENT + 1)).is_err());
        let long = vec!["y".repeat(200); 6].join("/");
        assert!(normalize(&long).is_err());
    }

    #[test]
    fn subtree_bounds_cover_exactly_the_subtree() {
        assert_eq!(subtree_prefix("a/b"), "a/b/");
        assert_eq!(subtree_end("a/b/").as_deref(), Some("a/b0"));
        assert_eq!(subtree_end(""), None);
        // Siblings that sort around the subtree stay outside it.
        for outside in ["a/b", "a/b-c", "a/b0", "a/ba"] {
            let p = subtree_prefix("a/b");
            let inside = outside >= p.as_str() && outside < subtree_end(&p).unwrap().as_str();
            assert!(!inside, "{outside}");
        }
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a", "a/b"]);
    }
}
