//! The hierarchical namespace (BSFS's namespace manager): directories and files, each file
//! backed by a blob. Stored in the manager's redb database, one fsynced transaction per change,
//! except that concurrent creations of new files share one (`creation.rs`).
//!
//! Keys are normalized paths (`a/b/c`), so a directory's subtree is one key range
//! (`a/b/` up to `a/b0`, `0` being the byte after `/`) and listings come out in the path
//! order S3 listings need. Every ancestor of an entry is itself an entry.
//!
//! Removing a file (deleting it, or renaming another file onto it) deletes its blob in the
//! same transaction: nothing else names a file's blob, and data composed from it into other
//! blobs is referenced by chunk, not through the blob.
//!
//! Create-on-commit: creating a new file records it *pending* (its blob, no parents made)
//! and the file appears, with its missing parent directories, in the transaction that
//! publishes its blob's first version (`bind_in`, called by the group commit). Until then
//! it is invisible to stat, listing and opening, and a failed or interrupted write leaves
//! nothing behind: its writer gives it up ([`Namespace::abandon`]), or, when the writer
//! died, [`Namespace::collect_abandoned`] drops it once no writer showed a sign of life for
//! the garbage-collection grace (a write that old would be refused anyway). A pending name
//! still occupies its path for changes: creating the same file again joins it (writers then
//! publish versions of one blob, as writers of an existing file do; an exclusive create is
//! refused), and a directory cannot be made there. Renaming something onto a pending path,
//! or deleting a directory tree holding one, drops it (its writers are told). A directory
//! rename leaves pending names where they are: they belong to the path they were created at.
//!
//! Retention: a new file's blob gets, when it is created, the policy of the nearest
//! directory above it that has one, else keep the last 3 versions (`retention.rs`).

use std::sync::{Arc, Mutex};

use redb::{ReadableTable, Table};
use tomus_metadata::BlobId;
use tomus_wire::{BlobInfo, EntryKind, Error, ErrorKind, FsEntry, Result, Retention};

use crate::store::{db_err, decode, remove_blobs_in, Store};
use crate::versions::{now_ms, NewBlob, VersionManager};
use creation::Creations;
use records::{
    ancestors, being_created, check_parents, get, is_a_dir, make_parents, normalize, not_a_dir,
    not_found, put, subtree_end, subtree_prefix, visible, Record, NAMESPACE,
};

/// Deleting a blob made with the blob API, refused for a file's blob.
mod blob_delete;
/// New files' blobs and pending entries committed in batches.
mod creation;
/// Listings and objects.
mod listing;
/// The records, their path keys and the checks every change uses.
mod records;
/// Files registered in place on their holders (workflows): one record each.
pub(crate) mod registered;
/// Renaming and deleting paths.
mod rename_delete;
/// Directory retention policies: what files created below a directory keep.
mod retention;
/// Snapshots of the tree held for the pages of one listing.
mod snapshots;

/// Binds the pending file `path` to `blob` within `txn` (the transaction publishing the
/// blob's first version), making its missing parent directories. Returns why it cannot
/// (the path is no longer this pending file, or a parent became a file meanwhile); the
/// pending record is then removed and the caller removes the blob. `Err`: the database
/// failed.
pub(crate) fn bind_in(
    txn: &redb::WriteTransaction,
    path: &str,
    blob: BlobId,
    now: u64,
) -> Result<Option<Error>> {
    let mut t = txn.open_table(NAMESPACE).map_err(db_err)?;
    let mine = match get(&t, path)? {
        Some(Record::Pending { blob: b, .. }) => b == blob,
        _ => false,
    };
    if !mine {
        return Ok(Some(Error::already_exists(format!(
            "/{path} was taken by another entry while this new file was written; nothing \
             was published"
        ))));
    }
    if let Err(e) = check_parents(&t, path) {
        t.remove(path).map_err(db_err)?;
        return Ok(Some(Error::new(
            e.kind,
            format!(
                "{} (it became so while the new file /{path} was written; nothing was \
                 published)",
                e.message
            ),
        )));
    }
    make_parents(&mut t, path, now)?;
    put(
        &mut t,
        path,
        &Record::File {
            blob,
            created_ms: now,
        },
    )?;
    Ok(None)
}

/// Why the new file `path`, found free when its creation was checked, can no longer be
/// created in the transaction `t` belongs to: the namespace lock keeps every other change
/// out in between, but not the group commit of publications, whose new file below `path`
/// makes `path` (or an ancestor) a directory. Only a free path with directories (or
/// nothing) above it may be created, as [`Namespace::create`] checked.
fn taken_since_checked(
    t: &Table<&'static str, &'static [u8]>,
    path: &str,
) -> Result<Option<Error>> {
    let why = match get(t, path)? {
        None => match check_parents(t, path) {
            Ok(()) => return Ok(None),
            Err(e) => e,
        },
        Some(Record::Dir { .. }) => is_a_dir(path),
        Some(_) => Error::already_exists(format!("/{path} already exists")),
    };
    Ok(Some(Error::new(
        why.kind,
        format!(
            "{} (it became so while the new file was being created; nothing was created)",
            why.message
        ),
    )))
}

/// What [`Namespace::create`] found under the lock.
enum Checked {
    /// The file is there (or being created): its entry, or why it cannot be joined.
    Exists(Result<FsEntry>),
    /// The new file's creation is queued: its id and creation time.
    Queued(u64, u64),
}

pub struct Namespace {
    store: Arc<Store>,
    versions: Arc<VersionManager>,
    /// Serializes changes, so a file's blob is created only once its path was found free.
    writer: Mutex<()>,
    /// New files checked and waiting for (or in) their batch's transaction.
    creations: Creations,
    /// Set when entries were removed or replaced: registered records may have lost their
    /// names (the copies collection looks then; see `registered.rs`).
    registered_unnamed: std::sync::atomic::AtomicBool,
    /// Snapshots held for listings of many pages (`FsListSnapshot`).
    snapshots: snapshots::Snapshots,
}

impl Namespace {
    pub fn open(store: Arc<Store>, versions: Arc<VersionManager>) -> Result<Self> {
        let txn = store.write()?;
        txn.open_table(NAMESPACE).map_err(db_err)?;
        txn.open_table(retention::POLICIES).map_err(db_err)?;
        txn.open_table(registered::REGISTERED).map_err(db_err)?;
        txn.open_table(registered::GARBAGE).map_err(db_err)?;
        txn.commit().map_err(db_err)?;
        // New files being written when the manager stopped: named again, so their first
        // publication binds them (or the grace drops them when their writers are gone).
        let txn = store.read()?;
        let table = txn.open_table(NAMESPACE).map_err(db_err)?;
        for row in table.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            if let Record::Pending { blob, .. } = decode(v.value())? {
                if let Err(e) = versions.name_pending(blob, k.value()) {
                    tracing::warn!("new file /{}: {e}", k.value());
                }
            }
        }
        Ok(Namespace {
            store,
            versions,
            writer: Mutex::new(()),
            creations: Creations::default(),
            registered_unnamed: std::sync::atomic::AtomicBool::new(true),
            snapshots: snapshots::Snapshots::default(),
        })
    }

    fn entry(&self, path: String, r: Record) -> Result<FsEntry> {
        Ok(match r {
            Record::Dir { created_ms } => FsEntry {
                path,
                kind: EntryKind::Dir,
                created_ms,
                blob: None,
            },
            Record::File { blob, created_ms } | Record::Pending { blob, created_ms } => FsEntry {
                path,
                kind: EntryKind::File,
                created_ms,
                blob: Some(self.versions.blob_info(blob)?),
            },
            Record::Registered { created_ms, .. } => FsEntry {
                path,
                kind: EntryKind::Registered,
                created_ms,
                blob: None,
            },
        })
    }

    /// Runs `change` in one write transaction, committed (fsynced) only if it succeeds.
    fn change<T>(
        &self,
        change: impl FnOnce(&mut Table<&'static str, &'static [u8]>) -> Result<T>,
    ) -> Result<T> {
        let txn = self.store.write()?;
        let out = {
            let mut table = txn.open_table(NAMESPACE).map_err(db_err)?;
            change(&mut table)?
        };
        txn.commit().map_err(db_err)?;
        Ok(out)
    }

    /// [`Namespace::change`] for changes that remove or move entries: `change` also gets
    /// the directory policies (to move or remove them with their directories) and returns
    /// the blobs of the removed files, which are deleted in the same transaction and then
    /// forgotten by the version manager.
    fn change_removing<T>(
        &self,
        change: impl FnOnce(
            &mut Table<&'static str, &'static [u8]>,
            &mut retention::Policies<'_>,
        ) -> Result<(T, Vec<BlobId>)>,
    ) -> Result<T> {
        let txn = self.store.write()?;
        let (out, blobs) = {
            let mut table = txn.open_table(NAMESPACE).map_err(db_err)?;
            let mut policies = txn.open_table(retention::POLICIES).map_err(db_err)?;
            change(&mut table, &mut policies)?
        };
        remove_blobs_in(&txn, &blobs)?;
        txn.commit().map_err(db_err)?;
        self.registered_unnamed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.versions.forget_blobs(&blobs);
        if !blobs.is_empty() {
            tracing::debug!("deleted blobs {blobs:?} with their files");
        }
        Ok(out)
    }

    fn read(&self, path: &str) -> Result<Option<Record>> {
        let txn = self.store.read_unjournaled()?;
        let table = txn.open_table(NAMESPACE).map_err(db_err)?;
        get(&table, path)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The namespace lock, once every creation queued before it is committed: a change other
    /// than a creation sees them as if each had committed under the lock.
    fn lock_settled(&self) -> std::sync::MutexGuard<'_, ()> {
        let guard = self.lock();
        self.creations.settle();
        guard
    }

    pub fn stat(&self, path: &str) -> Result<FsEntry> {
        let path = normalize(path)?;
        match visible(self.read(&path)?) {
            // Its blob may have been deleted with the file since the read.
            Some(r) => self.entry(path.clone(), r).map_err(|e| match e.kind {
                ErrorKind::NotFound => not_found(&path),
                _ => e,
            }),
            None => Err(not_found(&path)),
        }
    }

    /// The entry of the file at `path` if it exists and has been published (what a
    /// non-exclusive [`Namespace::create`] returns for it), without taking the namespace lock;
    /// `None` for anything else, which `create` then handles.
    pub fn existing_file(&self, path: &str) -> Result<Option<FsEntry>> {
        let path = normalize(path)?;
        match self.read(&path)? {
            // Its blob may have been deleted with the file since the read: `create` decides.
            Some(r @ Record::File { .. }) => match self.entry(path, r) {
                Ok(entry) => Ok(Some(entry)),
                Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            },
            _ => Ok(None),
        }
    }

    pub fn mkdir(&self, path: &str, parents: bool) -> Result<FsEntry> {
        let path = normalize(path)?;
        let _guard = self.lock_settled();
        let record = self.change(|t| {
            match get(t, &path)? {
                Some(Record::Dir { created_ms }) if parents => {
                    return Ok(Record::Dir { created_ms })
                }
                Some(Record::Dir { .. }) => {
                    return Err(Error::already_exists(format!("/{path} already exists")))
                }
                Some(Record::File { .. } | Record::Registered { .. }) => {
                    return Err(not_a_dir(&path))
                }
                Some(Record::Pending { .. }) => return Err(being_created(&path)),
                None => {}
            }
            let now = now_ms();
            if parents {
                make_parents(t, &path, now)?;
            } else {
                let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
                match get(t, parent)? {
                    Some(Record::Dir { .. }) => {}
                    Some(Record::File { .. } | Record::Registered { .. }) => {
                        return Err(not_a_dir(parent))
                    }
                    Some(Record::Pending { .. }) | None => return Err(not_found(parent)),
                }
            }
            let r = Record::Dir { created_ms: now };
            put(t, &path, &r)?;
            Ok(r)
        })?;
        self.entry(path, record)
    }

    /// Creates the file `path` on a new blob, pending until its first version is published
    /// (which also makes its missing parent directories), and says whether this call made
    /// it. An existing file is returned as it is unless `exclusive`; so is a new file another
    /// writer is creating (this writer joins it): `false`. What is decided at a file's
    /// creation only, such as its storage class, is for the call that made it. A new file's
    /// blob keeps what `policy` says, else what the directory it is created in gives its
    /// files (see `retention.rs`), from its first version on.
    pub fn create(
        &self,
        path: &str,
        chunk_size: u64,
        replication: u32,
        exclusive: bool,
        policy: Option<Retention>,
    ) -> Result<(FsEntry, bool)> {
        let path = normalize(path)?;
        if path.is_empty() {
            return Err(is_a_dir(&path));
        }
        loop {
            let queued = {
                let _guard = self.lock();
                if self.creations.in_flight(&path) {
                    if exclusive {
                        return Err(being_created(&path));
                    }
                    None // joined once its batch is committed
                } else {
                    Some(self.check_creation(&path, chunk_size, replication, exclusive, policy)?)
                }
            };
            match queued {
                None => self.creations.wait_for(&path),
                Some(Checked::Exists(entry)) => return entry.map(|e| (e, false)),
                Some(Checked::Queued(id, created_ms)) => {
                    let blob = self
                        .creations
                        .outcome(id, |batch| self.commit_creations(batch))?;
                    let record = Record::Pending {
                        blob: blob.id,
                        created_ms,
                    };
                    return self.entry(path, record).map(|e| (e, true));
                }
            }
        }
    }

    /// [`Namespace::create`] under the namespace lock: what is at `path` already, or the new
    /// file's creation checked and queued.
    fn check_creation(
        &self,
        path: &str,
        chunk_size: u64,
        replication: u32,
        exclusive: bool,
        policy: Option<Retention>,
    ) -> Result<Checked> {
        let existing = |r| Ok(Checked::Exists(self.entry(path.to_string(), r)));
        match self.read(path)? {
            Some(r @ Record::File { .. }) if !exclusive => return existing(r),
            Some(Record::File { .. }) => {
                return Err(Error::already_exists(format!("/{path} already exists")))
            }
            Some(r @ Record::Pending { blob, .. }) if !exclusive => {
                self.versions.name_pending(blob, path)?;
                return existing(r);
            }
            Some(Record::Pending { .. }) => return Err(being_created(path)),
            Some(Record::Dir { .. }) => return Err(is_a_dir(path)),
            Some(Record::Registered { .. }) => return Err(registered::immutable(path)),
            None => {}
        }
        // Checked before the blob exists, so a refused path leaves no blob behind.
        if let Some(parent) = self.creations.ancestor_in_flight(path) {
            return Err(not_a_dir(&parent));
        }
        let inherited = {
            let txn = self.store.read_unjournaled()?;
            let table = txn.open_table(NAMESPACE).map_err(db_err)?;
            check_parents(&table, path)?;
            retention::effective_in(&txn, path)?.0
        };
        // The policy is recorded with the blob, before any version exists.
        let blob = NewBlob {
            chunk_size,
            replication,
            retention: policy.unwrap_or(inherited),
        };
        blob.check()?;
        let created_ms = now_ms();
        let id = self.creations.queue(path.to_string(), blob, created_ms);
        Ok(Checked::Queued(id, created_ms))
    }

    /// Commits a batch of checked creations: their blobs and pending entries in one
    /// transaction, then each blob named for its path. One outcome per creation, in order.
    fn commit_creations(&self, batch: &[creation::Queued]) -> Vec<Result<BlobInfo>> {
        let new: Vec<NewBlob> = batch.iter().map(|q| q.blob).collect();
        // Creations whose path was taken between their check and this transaction: (index,
        // why). Their blobs are removed in the same transaction.
        let mut taken: Vec<(usize, Error)> = Vec::new();
        let created = self.versions.create_blobs_with(&new, |txn, i, blob| {
            let mut t = txn.open_table(NAMESPACE).map_err(db_err)?;
            let q = &batch[i];
            if let Some(why) = taken_since_checked(&t, &q.path)? {
                drop(t);
                remove_blobs_in(txn, &[blob])?;
                taken.push((i, why));
                return Ok(());
            }
            let created_ms = q.created_ms;
            put(&mut t, &q.path, &Record::Pending { blob, created_ms })
        });
        match created {
            Ok(blobs) => blobs
                .into_iter()
                .zip(batch)
                .enumerate()
                .map(|(i, (blob, q))| {
                    if let Some((_, why)) = taken.iter().find(|(j, _)| *j == i) {
                        self.versions.forget_blobs(&[blob.id]);
                        return Err(why.clone());
                    }
                    self.versions.name_pending(blob.id, &q.path)?;
                    Ok(blob)
                })
                .collect(),
            Err(e) => batch.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    /// A writer of the new file `path` (on `blob`) gives it up, having published nothing:
    /// once no writer holds it, it is dropped with its blob. Anything else at `path` (the
    /// file was published meanwhile, by another writer) is left alone.
    pub fn abandon(&self, path: &str, blob: BlobId) -> Result<()> {
        let path = normalize(path)?;
        let _guard = self.lock_settled();
        if !self.versions.release_pending(blob) {
            return Ok(());
        }
        self.change_removing(|t, _| {
            if let Some(Record::Pending { blob: b, .. }) = get(t, &path)? {
                if b == blob {
                    t.remove(path.as_str()).map_err(db_err)?;
                }
            }
            Ok(((), vec![blob]))
        })
    }

    /// Drops the new files whose writers showed no sign of life for `grace` (nothing of them
    /// was ever published or assigned), with their blobs. Returns how many.
    pub fn collect_abandoned(&self, grace: std::time::Duration) -> Result<usize> {
        // Under the lock: no writer joins one of them meanwhile.
        let _guard = self.lock_settled();
        let abandoned = self.versions.abandoned_files(grace);
        if abandoned.is_empty() {
            return Ok(0);
        }
        let n = abandoned.len();
        self.change_removing(|t, _| {
            let mut blobs = Vec::new();
            for (blob, path) in abandoned {
                if let Some(Record::Pending { blob: b, .. }) = get(t, &path)? {
                    if b == blob {
                        t.remove(path.as_str()).map_err(db_err)?;
                    }
                }
                tracing::info!("dropping the new file /{path}: its writer gave no sign of life");
                blobs.push(blob);
            }
            Ok(((), blobs))
        })?;
        Ok(n)
    }
}
