//! Registered files (workflows, AFM paper's "register, don't upload"): a file a task wrote on
//! its own node is shared by recording one entry, whatever its size. The namespace entry is
//! `Record::Registered { id }`; the record itself (size, CRC32C, holders, hints) lives in the
//! `registered` table under `id`, so renaming the entry moves nothing else.
//!
//! A registered file is immutable: registering it again at the same path with the same size
//! (and checksum) adds a holder (a reader that fetched it offers its copy), anything else is
//! refused. Holders are provider ids; the service turns them into current addresses.
//!
//! Deleting or replacing the entry leaves its record unnamed in the table. Collection
//! ([`Namespace::collect_unnamed_registered`], run by the manager's `registered copies`
//! worker) moves the copies of unnamed records, and those of dropped holders, into the
//! `registered_garbage` table, from which the worker asks each holder to remove them
//! (`DropRegistered`) and forgets those removed: the space of a deleted registered file,
//! its swarm readers' and replication agent's copies included, comes back.

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use tomus_metadata::ProviderId;
use tomus_wire::{Error, ErrorKind, Result};

use super::records::{get, make_parents, normalize, not_found, put, Record, NAMESPACE};
use super::Namespace;
use crate::store::{db_err, decode, encode};
use crate::versions::now_ms;

/// Registration id -> [`Stored`].
pub(super) const REGISTERED: TableDefinition<u64, &[u8]> = TableDefinition::new("registered");
/// Copies to remove: (provider, copy name) -> ().
pub(super) const GARBAGE: TableDefinition<(u32, &str), ()> =
    TableDefinition::new("registered_garbage");

/// Most holders one registered file keeps (readers that finished offer their copies).
const MAX_HOLDERS: usize = 64;
/// Most hints, and longest hint key or value.
const MAX_HINTS: usize = 16;
const MAX_HINT_LEN: usize = 256;

/// A registered file's record as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    pub size: u64,
    pub checksum: Option<u32>,
    /// (provider, name of the copy in its `registered` directory), first registered first.
    pub holders: Vec<(ProviderId, String)>,
    pub hints: Vec<(String, String)>,
    pub created_ms: u64,
}

/// What a registration asks for.
pub struct Registration {
    pub path: String,
    pub size: u64,
    pub checksum: Option<u32>,
    pub holder: ProviderId,
    pub name: String,
    pub hints: Vec<(String, String)>,
}

pub(super) fn immutable(path: &str) -> Error {
    Error::already_exists(format!(
        "/{path} is a registered file: registered files are immutable (`tomus fs persist` \
         turns one into an ordinary file)"
    ))
}

pub(super) fn not_a_blob(path: &str) -> Error {
    Error::invalid(format!(
        "/{path} is a registered file (held in place by its holders), not a blob: read it \
         with `tomus fs get`, or `tomus fs persist` it first"
    ))
}

fn check(r: &Registration) -> Result<()> {
    if r.hints.len() > MAX_HINTS
        || r.hints
            .iter()
            .any(|(k, v)| k.len() > MAX_HINT_LEN || v.len() > MAX_HINT_LEN)
    {
        return Err(Error::invalid(format!(
            "at most {MAX_HINTS} hints of at most {MAX_HINT_LEN} bytes each"
        )));
    }
    if r.name.is_empty() || r.name.len() > MAX_HINT_LEN {
        return Err(Error::invalid("a holder's copy needs a name"));
    }
    Ok(())
}

impl Namespace {
    /// Registers `r.path` held by `r.holder`, or adds that holder to the registered file
    /// already there (same size, same checksum when both are known). Returns the path as
    /// normalized and the record.
    pub fn register(&self, r: Registration) -> Result<(String, Stored)> {
        check(&r)?;
        let path = normalize(&r.path)?;
        if path.is_empty() {
            return Err(super::records::is_a_dir(&path));
        }
        let _guard = self.lock_settled();
        let txn = self.store.write()?;
        let stored = {
            let mut names = txn.open_table(NAMESPACE).map_err(db_err)?;
            let mut table = txn.open_table(REGISTERED).map_err(db_err)?;
            match get(&names, &path)? {
                Some(Record::Registered { id, .. }) => {
                    let mut s: Stored = match table.get(id).map_err(db_err)? {
                        Some(v) => decode(v.value())?,
                        None => return Err(Error::internal(format!("/{path}: record {id} lost"))),
                    };
                    let differs = s.size != r.size
                        || matches!((s.checksum, r.checksum), (Some(a), Some(b)) if a != b);
                    if differs {
                        return Err(immutable(&path));
                    }
                    if s.checksum.is_none() {
                        s.checksum = r.checksum;
                    }
                    s.holders.retain(|(p, _)| *p != r.holder);
                    if s.holders.len() >= MAX_HOLDERS {
                        return Err(Error::new(
                            ErrorKind::PreconditionFailed,
                            format!("/{path} has {MAX_HOLDERS} holders already"),
                        ));
                    }
                    s.holders.push((r.holder, r.name));
                    table.insert(id, encode(&s)?.as_slice()).map_err(db_err)?;
                    s
                }
                Some(Record::Dir { .. }) => return Err(super::records::is_a_dir(&path)),
                Some(_) => {
                    return Err(Error::already_exists(format!(
                        "/{path} already exists (an ordinary file)"
                    )))
                }
                None => {
                    let now = now_ms();
                    make_parents(&mut names, &path, now)?;
                    let id = match table.last().map_err(db_err)? {
                        Some((k, _)) => k.value() + 1,
                        None => 1,
                    };
                    let s = Stored {
                        size: r.size,
                        checksum: r.checksum,
                        holders: vec![(r.holder, r.name)],
                        hints: r.hints,
                        created_ms: now,
                    };
                    table.insert(id, encode(&s)?.as_slice()).map_err(db_err)?;
                    let entry = Record::Registered {
                        id,
                        created_ms: now,
                    };
                    put(&mut names, &path, &entry)?;
                    s
                }
            }
        };
        txn.commit().map_err(db_err)?;
        Ok((path, stored))
    }

    /// The record of the registered file `path`.
    pub fn registered(&self, path: &str) -> Result<(String, Stored)> {
        let path = normalize(path)?;
        let txn = self.store.read()?;
        let names = txn.open_table(NAMESPACE).map_err(db_err)?;
        let id = match get(&names, &path)? {
            Some(Record::Registered { id, .. }) => id,
            Some(_) => return Err(Error::invalid(format!("/{path} is not a registered file"))),
            None => return Err(not_found(&path)),
        };
        let table = txn.open_table(REGISTERED).map_err(db_err)?;
        let stored = match table.get(id).map_err(db_err)? {
            Some(v) => decode(v.value())?,
            None => return Err(Error::internal(format!("/{path}: record {id} lost"))),
        };
        Ok((path, stored))
    }

    /// Changes the record of the registered file `path` in one transaction.
    fn change_registered(
        &self,
        path: &str,
        change: impl FnOnce(&str, &mut Stored) -> Result<()>,
    ) -> Result<(String, Stored)> {
        let path = normalize(path)?;
        let _guard = self.lock_settled();
        let txn = self.store.write()?;
        let stored = {
            let names = txn.open_table(NAMESPACE).map_err(db_err)?;
            let Some(Record::Registered { id, .. }) = get(&names, &path)? else {
                return Err(not_found(&path));
            };
            let mut table = txn.open_table(REGISTERED).map_err(db_err)?;
            let mut s: Stored = match table.get(id).map_err(db_err)? {
                Some(v) => decode(v.value())?,
                None => return Err(Error::internal(format!("/{path}: record {id} lost"))),
            };
            change(&path, &mut s)?;
            table.insert(id, encode(&s)?.as_slice()).map_err(db_err)?;
            s
        };
        txn.commit().map_err(db_err)?;
        Ok((path, stored))
    }

    /// The holder of copy `name` computed the file's checksum.
    pub fn set_checksum(&self, path: &str, name: &str, checksum: u32) -> Result<()> {
        self.change_registered(path, |path, s| {
            if !s.holders.iter().any(|(_, n)| n == name) {
                return Err(Error::not_found(format!(
                    "/{path} has no copy named {name}"
                )));
            }
            match s.checksum {
                None => {
                    s.checksum = Some(checksum);
                    Ok(())
                }
                Some(c) if c == checksum => Ok(()),
                Some(c) => Err(Error::corrupt(format!(
                    "/{path}: copy {name} has checksum {checksum:08x}, the file {c:08x}"
                ))),
            }
        })
        .map(|_| ())
    }

    /// `provider` stops holding `path` (its copy was found damaged, or it is gone); its
    /// copy is collected.
    pub fn drop_holder(&self, path: &str, provider: ProviderId) -> Result<(String, Stored)> {
        let mut dropped = Vec::new();
        let out = self.change_registered(path, |_, s| {
            s.holders.retain(|(p, n)| {
                if *p == provider {
                    dropped.push((*p, n.clone()));
                }
                *p != provider
            });
            Ok(())
        })?;
        self.add_garbage(&dropped)?;
        Ok(out)
    }

    fn add_garbage(&self, copies: &[(ProviderId, String)]) -> Result<()> {
        if copies.is_empty() {
            return Ok(());
        }
        let txn = self.store.write()?;
        {
            let mut garbage = txn.open_table(GARBAGE).map_err(db_err)?;
            for (p, name) in copies {
                garbage.insert((*p, name.as_str()), ()).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)
    }

    /// Moves the copies of registered records no entry names any more (deleted, or
    /// replaced by a rename or `persist`) to the garbage table and removes the records.
    /// Scans the namespace only after entries were removed or replaced. Returns the number
    /// of records removed.
    pub fn collect_unnamed_registered(&self) -> Result<usize> {
        use std::sync::atomic::Ordering;
        if !self.registered_unnamed.swap(false, Ordering::Relaxed) {
            return Ok(0);
        }
        let _guard = self.lock_settled();
        let txn = self.store.write()?;
        let removed = {
            let names = txn.open_table(NAMESPACE).map_err(db_err)?;
            let mut table = txn.open_table(REGISTERED).map_err(db_err)?;
            if table.first().map_err(db_err)?.is_none() {
                return Ok(0);
            }
            let mut named = std::collections::HashSet::new();
            for row in names.iter().map_err(db_err)? {
                let (_, v) = row.map_err(db_err)?;
                if let Record::Registered { id, .. } = decode(v.value())? {
                    named.insert(id);
                }
            }
            let mut unnamed = Vec::new();
            for row in table.iter().map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                if !named.contains(&k.value()) {
                    let s: Stored = decode(v.value())?;
                    unnamed.push((k.value(), s.holders));
                }
            }
            let mut garbage = txn.open_table(GARBAGE).map_err(db_err)?;
            for (id, holders) in &unnamed {
                table.remove(*id).map_err(db_err)?;
                for (p, name) in holders {
                    garbage.insert((*p, name.as_str()), ()).map_err(db_err)?;
                }
            }
            unnamed.len()
        };
        txn.commit().map_err(db_err)?;
        Ok(removed)
    }

    /// The copies waiting to be removed, by provider.
    pub fn registered_garbage(&self) -> Result<Vec<(ProviderId, Vec<String>)>> {
        let txn = self.store.read()?;
        let garbage = txn.open_table(GARBAGE).map_err(db_err)?;
        let mut out: Vec<(ProviderId, Vec<String>)> = Vec::new();
        for row in garbage.iter().map_err(db_err)? {
            let (k, _) = row.map_err(db_err)?;
            let (p, name) = k.value();
            match out.last_mut() {
                Some((last, names)) if *last == p => names.push(name.to_string()),
                _ => out.push((p, vec![name.to_string()])),
            }
        }
        Ok(out)
    }

    /// The copies `names` of `provider` were removed.
    pub fn forget_garbage(&self, provider: ProviderId, names: &[String]) -> Result<()> {
        let txn = self.store.write()?;
        {
            let mut garbage = txn.open_table(GARBAGE).map_err(db_err)?;
            for name in names {
                garbage.remove((provider, name.as_str())).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)
    }
}
