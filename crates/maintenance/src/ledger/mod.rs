//! The ledger: what the maintenance service knows of every blob's metadata and every chunk,
//! kept up to date change by change instead of rediscovered by full scans.
//!
//! Model. A published version `w` adds new nodes (those on paths through its write) and
//! *supersedes*, at each range it rewrote, the node the previous published version had
//! there. A superseded inner node is in the trees of the versions before `w` only, so it is
//! dead once retention removed every version below `w` (`retained_from >= w`). A superseded
//! leaf may still be read through the leaves of later versions that name it as their base
//! or as a layer (a lower version in flight when they were written): it dies when it is
//! superseded and removed *and* no live leaf names it (its `dependents` count is 0). A leaf
//! that dies releases the leaves it names and the chunks it refers to. A chunk is live while
//! some live leaf refers to it (`count > 0`, over all blobs: copies made of metadata only
//! share chunks); once unreferenced it is deleted after the reuse cutoff passed the time it
//! became unreferenced (a copy in progress may still be about to refer to it).
//!
//! Tables (redb, `maintenance.redb` next to the manager's state):
//! - `meta`: `cursor` (the last change-log entry applied), `schema`.
//! - `blobs`: blob -> `BlobTrack` (last counted version, its capacity, first retained).
//! - `superseded`: (blob, w) -> the nodes version `w` superseded, until `w` is removed.
//! - `leaves`: (blob, version, offset, size) -> `LeafTrack` for every live leaf.
//! - `chunks`: chunk -> `ChunkTrack` (reference count, length, replicas).
//! - `zeros`: (unreferenced since ms, chunk) for chunks whose count fell to 0.
//! - `doomed`: id -> `Doom`, deletions owed to providers, kept until carried out.
//! - `by_provider`: (provider, chunk) for each copy a chunk row lists: what a provider that
//!   fails or drains held, found without a scan.
//!
//! Every change of the manager's log is applied in one transaction with the new cursor, so
//! a crash replays nothing twice and loses nothing. Applying is idempotent per version
//! anyway (a version at or below `counted` is skipped), so a rebuild that overlaps changes
//! is safe.

/// Deletions owed to providers, forgotten once carried out.
mod deletions;
/// Where chunks' copies are.
mod replicas;
/// What the ledger is told: the changes to apply.
mod steps;
/// The rows: what is tracked of blobs, leaves and chunks.
mod tracks;
/// The model's transitions, in one write transaction.
mod transitions;

use std::collections::HashSet;
use std::path::Path;

use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};
use tomus_metadata::{BlobId, ChunkId, NodeRef};
use tomus_wire::{Error, Result};

pub use steps::{Applied, ChunkUse, Delta, LeafRefs, Step};
pub use tracks::{BlobTrack, ChunkTrack, Doom, LeafTrack};
use transitions::Tables;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const BLOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("blobs");
const SUPERSEDED: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("superseded");
const LEAVES: TableDefinition<(u64, u64, u64, u64), &[u8]> = TableDefinition::new("leaves");
const CHUNKS: TableDefinition<u128, &[u8]> = TableDefinition::new("chunks");
const ZEROS: TableDefinition<(u64, u128), ()> = TableDefinition::new("zeros");
const DOOMED: TableDefinition<u64, &[u8]> = TableDefinition::new("doomed");
const BY_PROVIDER: TableDefinition<(u32, u128), ()> = TableDefinition::new("by_provider");

/// Format of the ledger; another one is rebuilt from the cluster rather than read.
const SCHEMA: u64 = 1;

/// Counts of what the ledger holds, for `tomus status` and the benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerStats {
    pub blobs: u64,
    pub leaves: u64,
    pub chunks: u64,
    /// Chunks no leaf refers to any more, waiting for the reuse cutoff.
    pub unreferenced_chunks: u64,
    /// Deletions owed to providers.
    pub doomed: u64,
}

pub struct Ledger {
    db: Database,
}

/// A redb error of the ledger: `NoSpace` for a full disk; ends the process when the ledger
/// must be reopened (see [`tomus_tables::store_error`]).
fn db_err(e: impl Into<redb::Error>) -> Error {
    tomus_tables::store_error("maintenance ledger", e)
}

/// A row that does not encode or decode: damage or a bug, not I/O.
fn row_err(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("maintenance ledger: {e}"))
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    bincode::serialize(v).map_err(row_err)
}

fn decode<T: for<'a> Deserialize<'a>>(b: &[u8]) -> Result<T> {
    bincode::deserialize(b).map_err(row_err)
}

/// A chunk's track in `chunks` (`None`: not tracked).
fn chunk_track(
    chunks: &impl ReadableTable<u128, &'static [u8]>,
    id: ChunkId,
) -> Result<Option<ChunkTrack>> {
    chunks
        .get(id.0)
        .map_err(db_err)?
        .map(|v| decode(v.value()))
        .transpose()
}

fn leaf_key(blob: BlobId, r: NodeRef) -> (u64, u64, u64, u64) {
    (blob, r.version, r.offset, r.size)
}

impl Ledger {
    /// Opens (creating) the ledger at `path`. A ledger of another format is set aside and
    /// started afresh: it is rebuilt from the cluster.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let db = Database::create(path).map_err(db_err)?;
        let ledger = Ledger { db };
        if !ledger.prepare()? {
            drop(ledger);
            let aside = path.with_extension("redb.old");
            tracing::warn!(
                "the maintenance ledger {} has another format; moved to {} and rebuilt",
                path.display(),
                aside.display()
            );
            std::fs::rename(path, &aside)?;
            let ledger = Ledger {
                db: Database::create(path).map_err(db_err)?,
            };
            ledger.prepare()?;
            return Ok(ledger);
        }
        Ok(ledger)
    }

    /// A ledger in memory (tests, benchmarks).
    pub fn in_memory() -> Result<Self> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(db_err)?;
        let ledger = Ledger { db };
        ledger.prepare()?;
        Ok(ledger)
    }

    /// Creates the tables; whether the format is this build's.
    fn prepare(&self) -> Result<bool> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut meta = txn.open_table(META).map_err(db_err)?;
            let schema = meta.get("schema").map_err(db_err)?.map(|v| v.value());
            match schema {
                Some(SCHEMA) => {}
                Some(_) => return Ok(false),
                None => {
                    meta.insert("schema", SCHEMA).map_err(db_err)?;
                }
            }
            txn.open_table(BLOBS).map_err(db_err)?;
            txn.open_table(SUPERSEDED).map_err(db_err)?;
            txn.open_table(LEAVES).map_err(db_err)?;
            txn.open_table(CHUNKS).map_err(db_err)?;
            txn.open_table(ZEROS).map_err(db_err)?;
            txn.open_table(DOOMED).map_err(db_err)?;
            txn.open_table(BY_PROVIDER).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)?;
        Ok(true)
    }

    /// Makes the next follow rebuild the ledger from the cluster (the audit found it wrong).
    pub fn request_rebuild(&self) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut meta = txn.open_table(META).map_err(db_err)?;
            meta.insert("rebuild", 1).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    /// Records that a rebuild reflecting the change log up to `cursor` is done.
    pub fn rebuilt(&self, cursor: u64) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut meta = txn.open_table(META).map_err(db_err)?;
            meta.insert("cursor", cursor).map_err(db_err)?;
            meta.remove("rebuild").map_err(db_err)?;
        }
        txn.commit().map_err(db_err)
    }

    /// Whether a rebuild was requested and not done yet.
    pub fn rebuild_requested(&self) -> Result<bool> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let meta = txn.open_table(META).map_err(db_err)?;
        Ok(meta
            .get("rebuild")
            .map_err(db_err)?
            .is_some_and(|v| v.value() == 1))
    }

    /// The last change-log entry applied (0: none).
    pub fn cursor(&self) -> Result<u64> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let meta = txn.open_table(META).map_err(db_err)?;
        Ok(meta.get("cursor").map_err(db_err)?.map_or(0, |v| v.value()))
    }

    pub fn blob(&self, blob: BlobId) -> Result<Option<BlobTrack>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(BLOBS).map_err(db_err)?;
        t.get(blob)
            .map_err(db_err)?
            .map(|v| decode(v.value()))
            .transpose()
    }

    /// Every blob tracked.
    pub fn blobs(&self) -> Result<Vec<(BlobId, BlobTrack)>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(BLOBS).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            out.push((k.value(), decode(v.value())?));
        }
        Ok(out)
    }

    /// Applies `steps` in order and records `cursor`, in one transaction.
    pub fn apply(&self, steps: &[Step], cursor: u64, now_ms: u64) -> Result<Applied> {
        let txn = self.db.begin_write().map_err(db_err)?;
        let mut applied = Applied::default();
        {
            let mut t = Tables::open(&txn)?;
            for step in steps {
                t.step(step, now_ms, &mut applied)?;
            }
            t.finish(cursor)?;
        }
        txn.commit().map_err(db_err)?;
        for i in &applied.inconsistencies {
            tracing::error!("maintenance ledger: {i}");
        }
        Ok(applied)
    }

    /// Bytes on the providers (length times copies) of the chunks that only versions older
    /// than their blob's latest refer to: what retention keeps for the history, and what
    /// dropping it would give back. One walk of every tracked leaf (the audit's pace, not
    /// every round); memory in proportion to the old versions' chunks.
    pub fn old_version_bytes(&self) -> Result<u64> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let leaves = txn.open_table(LEAVES).map_err(db_err)?;
        let mut old: HashSet<ChunkId> = HashSet::new();
        for row in leaves.iter().map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            let leaf: LeafTrack = decode(v.value())?;
            if leaf.superseded_at.is_some() {
                old.extend(leaf.chunks);
            }
        }
        if old.is_empty() {
            return Ok(0);
        }
        for row in leaves.iter().map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            let leaf: LeafTrack = decode(v.value())?;
            if leaf.superseded_at.is_none() {
                for c in &leaf.chunks {
                    old.remove(c);
                }
            }
        }
        let chunks = txn.open_table(CHUNKS).map_err(db_err)?;
        let mut bytes = 0u64;
        for id in old {
            if let Some(track) = chunk_track(&chunks, id)? {
                let copies = track.replicas.len().max(1) as u64;
                bytes = bytes.saturating_add(track.len * copies);
            }
        }
        Ok(bytes)
    }

    /// The ledger's counts: one table length each, however much the ledger holds.
    pub fn stats(&self) -> Result<LedgerStats> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let len = |n: std::result::Result<u64, redb::StorageError>| n.map_err(db_err);
        Ok(LedgerStats {
            blobs: len(txn.open_table(BLOBS).map_err(db_err)?.len())?,
            leaves: len(txn.open_table(LEAVES).map_err(db_err)?.len())?,
            chunks: len(txn.open_table(CHUNKS).map_err(db_err)?.len())?,
            unreferenced_chunks: len(txn.open_table(ZEROS).map_err(db_err)?.len())?,
            doomed: len(txn.open_table(DOOMED).map_err(db_err)?.len())?,
        })
    }

    /// The bytes on the providers of the chunks waiting for deletion (each chunk's length
    /// times its copies). Reads each of those chunks' rows: its cost grows with them.
    pub fn unreferenced_bytes(&self) -> Result<u64> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let zeros = txn.open_table(ZEROS).map_err(db_err)?;
        let chunks = txn.open_table(CHUNKS).map_err(db_err)?;
        let mut bytes = 0u64;
        for row in zeros.iter().map_err(db_err)? {
            let (k, _) = row.map_err(db_err)?;
            if let Some(track) = chunk_track(&chunks, ChunkId(k.value().1))? {
                let copies = track.replicas.len().max(1) as u64;
                bytes = bytes.saturating_add(track.len * copies);
            }
        }
        Ok(bytes)
    }
}
