//! The manager's durable state in redb: blobs, published versions, aborted version ranges,
//! retention, providers (and which drain), repaired chunks' replica sets, the measured
//! network topology. Nothing is acknowledged before it is on disk: publications are synced in
//! the publication journal (`journal.rs`) and reach redb in batches, every other change is a
//! fsynced redb commit. Every transaction goes through [`Store::write`] and [`Store::read`],
//! which first apply the journaled publications redb does not hold yet, so redb's rows and
//! change log follow the order in which things were acknowledged.

/// Blob records: creation, deletion tombstones, removal with a namespace change.
mod blobs;
/// The change log the maintenance service follows, and the cutoffs granted to it.
mod change_log;
/// The publication journal: publications durable before they are in redb.
mod journal;
/// Providers, their drains, and repaired chunks' replica sets.
mod providers;
/// The version rows deletions and expiries leave, removed a batch per transaction.
mod purge;
/// Retention policies and the expiry of versions they no longer keep.
mod retention;
/// The measured network matrix (DataSteward topology).
mod topology;
/// Version numbers: reservation, aborted ranges, publication, published versions.
mod versions;

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redb::{
    Database, Durability, ReadTransaction, ReadableTable, TableDefinition, TableHandle,
    WriteTransaction,
};
use serde::{Deserialize, Serialize};
use tomus_metadata::{BlobId, ProviderId, Version};
use tomus_wire::{Change, ClusterId, Error, Result, Retention};

pub(crate) use blobs::{delete_blob_in, remove_blobs_in};
use change_log::log_change;
use journal::{Group, Journal};
pub use retention::ExpiryPlan;
use versions::publish_rows;
pub use versions::{Dropped, Publication};

const BLOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("blobs");
/// Key: (blob, version). Only published versions are stored.
const VERSIONS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("versions");
/// Key: (blob, first aborted version); value: end (exclusive).
const ABORTED: TableDefinition<(u64, u64), u64> = TableDefinition::new("aborted");
/// Key: blob; value: version numbers below it may have been handed out.
const RESERVED: TableDefinition<u64, u64> = TableDefinition::new("reserved");
const PROVIDERS: TableDefinition<u32, &[u8]> = TableDefinition::new("providers");
/// Registration key -> the provider id it was given (see `Register`).
const PROVIDER_KEYS: TableDefinition<u128, u32> = TableDefinition::new("provider_keys");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
/// Key: (blob, version); value: the version's attributes. Only versions that have some.
const ATTRS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("attrs");
/// Key: blob; value: its [`RetentionRecord`]. Only blobs whose policy was ever set.
const RETENTION: TableDefinition<u64, &[u8]> = TableDefinition::new("retention");
/// Key: provider; value: when its drain started (Unix ms). Only draining providers.
const DRAINING: TableDefinition<u32, u64> = TableDefinition::new("draining");
/// Key: chunk id; value: its replica set (`Vec<ProviderId>`) as repair last recorded it.
const REPLICAS: TableDefinition<u128, &[u8]> = TableDefinition::new("replicas");
/// Key: blob; value: when it was deleted (Unix ms). A tombstone per deleted blob, written in
/// the transaction that removes its records: garbage collection deletes a blob's data only
/// on this positive record, never because a listing happened not to show the blob.
const DELETED: TableDefinition<u64, u64> = TableDefinition::new("deleted");
/// Key: a blob; value: its version rows below this version are still to be removed
/// (`purge.rs`); [`purge::DELETED_BLOB`] for a deleted blob, whose aborted ranges go too.
/// Deleting a blob or expiring versions only records this: removing a million rows in that
/// transaction held every publication for seconds. Needs no format bump: a build that does
/// not know the table leaves it, and those rows, alone. (Named `row_purge`: stores of a
/// development build have a `purging` table of another type.)
const PURGING: TableDefinition<u64, u64> = TableDefinition::new("row_purge");
/// Key: "matrix"; value: the [`TopologyMatrix`](tomus_wire::TopologyMatrix) last measured.
/// Needs no format bump: a build that does not know the table leaves it alone and loses
/// nothing but the matrix (re-measured at will), and an older store simply has none.
const TOPOLOGY: TableDefinition<&str, &[u8]> = TableDefinition::new("topology");

/// A blob's durable record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BlobRecord {
    pub id: BlobId,
    pub chunk_size: u64,
    pub replication: u32,
    pub published: Version,
    pub size: u64,
    pub capacity: u64,
    /// Creation time, then the publication time of the latest version (Unix ms).
    pub modified_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProviderRecord {
    pub id: ProviderId,
    pub addr: String,
}

/// A blob's retention policy and how far it has removed versions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionRecord {
    pub policy: Retention,
    /// First retained version: published versions below it were removed (0: none). Retained
    /// versions are always a suffix of the published ones, so this one number says which.
    pub retained_from: Version,
}

/// Key: a property of the database; "schema": its format version; "cutoff_fresh" and
/// "cutoff_reused": the garbage-collection cutoffs granted (see [`Cutoffs`](tomus_wire::Cutoffs));
/// "removed_before": see [`Store::removed_before`]; "cluster_id": see [`Store::cluster_id`].
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Key: sequence number; value: a [`Change`] (the change log the maintenance service
/// follows). Written in the transaction that makes the change; at most [`MAX_CHANGES`] kept.
const CHANGES: TableDefinition<u64, &[u8]> = TableDefinition::new("changes");
/// Changes the log keeps: a maintenance service that falls further behind (or was off)
/// rebuilds what it derives from them.
const MAX_CHANGES: u64 = 1 << 20;
/// Format of the manager's state this build writes. 1: the tables up to issue 3 (no META
/// table); 2: blob tombstones (`DELETED`), the change log and GC cutoffs; 3: namespace
/// records of new files not published yet (create-on-commit), which format 2 cannot read;
/// 4: directory retention policies (the namespace's `dir_retention` table), which format 3
/// would ignore (its files would keep every version). Older formats are upgraded in place
/// at open (new tables are created empty, which is what they hold for an older store: a
/// maintenance service finds the change log starting late and rebuilds; a format 2
/// namespace holds no pending files; a format 3 one no directory policy, so every directory
/// follows the default and existing files keep the policies their blobs have); newer ones
/// are refused. 5: the publication journal (`publications.journal` beside the database) may
/// hold published versions redb does not have yet, which format 4 would never read.
const SCHEMA: u64 = 5;

/// The journal's file, beside the database.
const JOURNAL_FILE: &str = "publications.journal";
/// Journaled publications are made durable in redb, in one synced transaction, once the
/// oldest not durable there has waited this long. redb reclaims the pages that unsynced
/// transactions (those reads run, see [`Store::read`]) free only at a synced commit, so this
/// also bounds how long they stay unreclaimed...
const APPLY_EVERY: Duration = Duration::from_millis(50);
/// ... or once this many groups wait for redb.
const APPLY_GROUPS: usize = 256;

pub struct Store {
    db: Database,
    /// `None` for a store without a directory (`open_on`): every publication commits to
    /// redb.
    journal: Mutex<Option<Journal>>,
    /// Journaled publication groups redb does not hold yet, in journal order.
    unapplied: Mutex<Unapplied>,
    /// How many groups `unapplied` holds, read without its lock: zero means redb has them
    /// all.
    unapplied_count: AtomicUsize,
    /// Which cluster this state is ([`Store::cluster_id`]).
    cluster: ClusterId,
}

#[derive(Default)]
struct Unapplied {
    groups: Vec<Group>,
    /// When the oldest journaled group that redb does not hold durably was journaled (it
    /// may be applied already, by an unsynced transaction).
    undurable_since: Option<Instant>,
}

thread_local! {
    /// This thread holds a [`WriteTxn`]: its reads must not wait for the journal's lock,
    /// which it holds itself.
    static IN_WRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A redb write transaction of the store, begun with the journaled publications applied, so
/// they come before its own changes; it holds the journal's pending list until it commits or
/// is dropped.
pub(crate) struct WriteTxn<'a> {
    txn: WriteTransaction,
    unapplied: MutexGuard<'a, Unapplied>,
    count: &'a AtomicUsize,
    /// Committed with a sync (the default): then redb durably holds every journaled group.
    durable: bool,
    _in_write: InWrite,
}

struct InWrite;

impl InWrite {
    fn enter() -> Self {
        IN_WRITE.with(|f| f.set(true));
        InWrite
    }
}

impl Drop for InWrite {
    fn drop(&mut self) {
        IN_WRITE.with(|f| f.set(false));
    }
}

impl WriteTxn<'_> {
    /// Commits (fsynced unless the durability was lowered); the journaled groups it applied
    /// are then redb's.
    pub(crate) fn commit(self) -> std::result::Result<(), redb::CommitError> {
        let WriteTxn {
            txn,
            mut unapplied,
            count,
            durable,
            _in_write,
        } = self;
        txn.commit()?;
        unapplied.groups.clear();
        if durable {
            unapplied.undurable_since = None;
        }
        count.store(0, Ordering::Release);
        Ok(())
    }

    /// Commits without a sync: what it applies of the journal stays durable in the journal.
    fn unsynced(&mut self) {
        self.txn.set_durability(Durability::None);
        self.durable = false;
    }
}

impl Deref for WriteTxn<'_> {
    type Target = WriteTransaction;
    fn deref(&self) -> &WriteTransaction {
        &self.txn
    }
}

impl DerefMut for WriteTxn<'_> {
    fn deref_mut(&mut self) -> &mut WriteTransaction {
        &mut self.txn
    }
}

/// Writes the rows of journaled `groups` into `txn` and records the last one's sequence
/// number as applied.
fn apply_groups(txn: &WriteTransaction, groups: &[Group]) -> Result<()> {
    let Some((last, _)) = groups.last() else {
        return Ok(());
    };
    for (_, group) in groups {
        // Their blobs existed when they were journaled, and deletions apply them first; a
        // blob gone anyway (replay after a crash) just gets no rows back.
        publish_rows(txn, group)?;
    }
    let mut meta = txn.open_table(META).map_err(db_err)?;
    meta.insert("journal_applied", *last).map_err(db_err)?;
    Ok(())
}

/// A redb error of the manager's store: `NoSpace` for a full disk; ends the process when the
/// store must be reopened (see [`tomus_tables::store_error`]).
/// Hands out `n` consecutive numbers of the counter `name` (which starts at 1) within
/// `txn`: the first of them.
fn draw(txn: &WriteTransaction, name: &str, n: u64) -> Result<u64> {
    let mut counters = txn.open_table(COUNTERS).map_err(db_err)?;
    let first = counters.get(name).map_err(db_err)?.map_or(1, |v| v.value());
    counters.insert(name, first + n).map_err(db_err)?;
    Ok(first)
}

pub(crate) fn db_err(e: impl Into<redb::Error>) -> Error {
    tomus_tables::store_error("manager state store", e)
}

/// A row that does not encode or decode: damage or a bug, not I/O.
pub(crate) fn row_err(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("manager state store: {e}"))
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    bincode::serialize(v).map_err(row_err)
}

pub(crate) fn decode<T: for<'a> Deserialize<'a>>(b: &[u8]) -> Result<T> {
    bincode::deserialize(b).map_err(row_err)
}

impl Store {
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("manager.redb");
        let db = Database::create(&path).map_err(db_err)?;
        let store = Self::prepare(db, &path.display().to_string())?;
        store.replay_journal(&dir.join(JOURNAL_FILE))?;
        Ok(store)
    }

    /// Applies what the journal holds beyond redb (publications acknowledged before a crash
    /// or a stop), durably, then starts the journal again empty.
    fn replay_journal(&self, path: &Path) -> Result<()> {
        let applied = {
            let txn = self.db.begin_read().map_err(db_err)?;
            let meta = txn.open_table(META).map_err(db_err)?;
            let applied = meta.get("journal_applied").map_err(db_err)?;
            applied.map_or(0, |v| v.value())
        };
        let (mut journal, groups) = Journal::open(path, applied)?;
        if !groups.is_empty() {
            let versions: usize = groups
                .iter()
                .flat_map(|(_, g)| g)
                .map(|p| p.versions.len())
                .sum();
            tracing::info!(
                "publication journal {}: applying {} groups ({versions} versions) redb did \
                 not hold yet",
                path.display(),
                groups.len()
            );
            let txn = self.db.begin_write().map_err(db_err)?;
            apply_groups(&txn, &groups)?;
            txn.commit().map_err(db_err)?;
        }
        // Zeros are written ahead once, by either.
        if journal.len() > 0 {
            journal.reset()?;
        } else {
            journal.refill();
        }
        *self.journal.lock().unwrap_or_else(PoisonError::into_inner) = Some(journal);
        Ok(())
    }

    /// Begins a write transaction with the journaled publications applied first.
    pub(crate) fn write(&self) -> Result<WriteTxn<'_>> {
        let unapplied = self
            .unapplied
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let in_write = InWrite::enter();
        let txn = self.db.begin_write().map_err(db_err)?;
        apply_groups(&txn, &unapplied.groups)?;
        Ok(WriteTxn {
            txn,
            unapplied,
            count: &self.unapplied_count,
            durable: true,
            _in_write: in_write,
        })
    }

    /// Begins a read transaction that sees every acknowledged publication: journaled ones
    /// redb does not hold yet are applied first (not synced: the journal keeps them durable).
    pub(crate) fn read(&self) -> Result<ReadTransaction> {
        if self.journal_pending() {
            let mut txn = self.write()?;
            if !txn.unapplied.groups.is_empty() {
                txn.unsynced();
                txn.commit().map_err(db_err)?;
            }
        }
        self.db.begin_read().map_err(db_err)
    }

    /// Begins a read transaction for the tables the journal never writes: the namespace's
    /// (paths and their retention policies), since a publication that binds a file name is
    /// committed to redb, never journaled (see `publish`). It applies nothing first: under 8
    /// S3 clients overwriting 4 KiB objects, each PUT looked its path up through
    /// [`Store::read`], which applied the previous PUT's publication in a redb transaction
    /// of its own (19% of the manager's samples); through this, a PUT cost the servers
    /// 943-1,042 µs of CPU instead of 1,106-1,173.
    pub(crate) fn read_unjournaled(&self) -> Result<ReadTransaction> {
        self.db.begin_read().map_err(db_err)
    }

    /// Whether journaled publications wait for redb and this thread may take the journal's
    /// lock to see them: not while it holds a [`WriteTxn`], which holds that lock and applied
    /// them already.
    fn journal_pending(&self) -> bool {
        self.unapplied_count.load(Ordering::Acquire) > 0 && !IN_WRITE.with(|f| f.get())
    }

    /// Makes redb durably hold every journaled publication: applies those it does not hold
    /// and commits with a sync, even with nothing left to apply (earlier unsynced
    /// transactions may have applied them).
    fn apply_journaled_durably(&self) -> Result<()> {
        self.write()?.commit().map_err(db_err)
    }

    /// A store on any redb storage backend (tests use one whose syncs are slow).
    pub fn open_on(backend: impl redb::StorageBackend, name: &str) -> Result<Self> {
        let db = Database::builder()
            .create_with_backend(backend)
            .map_err(db_err)?;
        Self::prepare(db, name)
    }

    /// Checks the format of the state in `db` (called `name` in errors), upgrades an older
    /// one and creates the tables.
    fn prepare(db: Database, name: &str) -> Result<Self> {
        let txn = db.begin_write().map_err(db_err)?;
        let fresh = !txn
            .list_tables()
            .map_err(db_err)?
            .any(|t| t.name() == "blobs");
        let mut unrecorded = false;
        let cluster;
        {
            let mut meta = txn.open_table(META).map_err(db_err)?;
            let found = meta.get("schema").map_err(db_err)?.map(|v| v.value());
            match found {
                Some(v) if v > SCHEMA => {
                    return Err(Error::invalid(format!(
                        "the manager state in {name} has format {v}; this build reads formats \
                         1 to {SCHEMA} (a newer tomus wrote it)"
                    )))
                }
                Some(SCHEMA) => {}
                None if fresh => meta.insert("schema", SCHEMA).map(|_| ()).map_err(db_err)?,
                older => {
                    let older = older.unwrap_or(1);
                    tracing::info!("manager state in {name}: upgrading format {older} to {SCHEMA}");
                    meta.insert("schema", SCHEMA).map_err(db_err)?;
                    // Format 2 has the change log already.
                    unrecorded = older < 2;
                }
            }
            // Drawn once, when the state is created (or first opened by a build that keeps
            // one): the identity this manager's providers keep.
            let found = meta.get("cluster_id").map_err(db_err)?.map(|v| v.value());
            cluster = match found {
                Some(id) => id,
                None => {
                    let id = rand::random::<ClusterId>();
                    meta.insert("cluster_id", id).map_err(db_err)?;
                    id
                }
            };
        }
        {
            txn.open_table(BLOBS).map_err(db_err)?;
            txn.open_table(VERSIONS).map_err(db_err)?;
            txn.open_table(ABORTED).map_err(db_err)?;
            txn.open_table(RESERVED).map_err(db_err)?;
            txn.open_table(PROVIDERS).map_err(db_err)?;
            txn.open_table(PROVIDER_KEYS).map_err(db_err)?;
            txn.open_table(COUNTERS).map_err(db_err)?;
            txn.open_table(ATTRS).map_err(db_err)?;
            txn.open_table(RETENTION).map_err(db_err)?;
            txn.open_table(DRAINING).map_err(db_err)?;
            txn.open_table(REPLICAS).map_err(db_err)?;
            txn.open_table(DELETED).map_err(db_err)?;
            txn.open_table(PURGING).map_err(db_err)?;
            txn.open_table(CHANGES).map_err(db_err)?;
            txn.open_table(TOPOLOGY).map_err(db_err)?;
        }
        if unrecorded {
            // The blobs already there have a history the log never saw.
            log_change(&txn, &Change::Unrecorded)?;
        }
        txn.commit().map_err(db_err)?;
        Ok(Store {
            db,
            journal: Mutex::new(None),
            unapplied: Mutex::new(Unapplied::default()),
            unapplied_count: AtomicUsize::new(0),
            cluster,
        })
    }

    /// The cluster this state belongs to ([`ClusterId`]).
    pub fn cluster_id(&self) -> ClusterId {
        self.cluster
    }
}
