//! The model's transitions (see [`crate::ledger`]): counting a version's leaves and chunks,
//! expiring what retention removed, letting leaves die once nothing keeps them, forgetting
//! deleted blobs and laying down a rebuild's baseline, all on the tables of one write
//! transaction.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use redb::{ReadableTable, Table, WriteTransaction};
use tomus_metadata::{BlobId, ChunkId, NodeKey, NodeRef, Version};
use tomus_tables::remove_range;
use tomus_wire::Result;

use super::{
    chunk_track, db_err, decode, encode, leaf_key, Applied, BlobTrack, ChunkTrack, ChunkUse, Delta,
    Doom, LeafRefs, LeafTrack, Step, BLOBS, BY_PROVIDER, CHUNKS, DOOMED, LEAVES, META, SUPERSEDED,
    ZEROS,
};

/// The tables of one write transaction, and the model's transitions on them.
pub(super) struct Tables<'t> {
    meta: Table<'t, &'static str, u64>,
    blobs: Table<'t, u64, &'static [u8]>,
    superseded: Table<'t, (u64, u64), &'static [u8]>,
    leaves: Table<'t, (u64, u64, u64, u64), &'static [u8]>,
    chunks: Table<'t, u128, &'static [u8]>,
    zeros: Table<'t, (u64, u128), ()>,
    doomed: Table<'t, u64, &'static [u8]>,
    by_provider: Table<'t, (u32, u128), ()>,
    /// Chunk rows changed in this transaction, written back once by [`Tables::finish`]: a
    /// run of small appends references the same chunks from every leaf it adds (each new
    /// leaf inherits the pieces of the one before), so a row changes many times per page of
    /// changes, and redb's copy-on-write insert is most of what counting a version costs.
    changed_chunks: HashMap<ChunkId, ChunkTrack>,
    /// Leaf rows read or changed in this transaction, the changed ones written back once by
    /// [`Tables::finish`], for the same reason: every leaf of a small append names the
    /// leaves of the versions in flight beside it and its base, so a row's `dependents`
    /// changes many times per page of changes, and a flattened leaf's row lists a whole
    /// slot's chunks.
    changed_leaves: HashMap<(BlobId, NodeRef), LeafRow>,
}

/// Chunk `id`'s row among a transaction's `changed` rows, to change (`None`: not tracked):
/// read from `table` once per transaction, written back by [`Tables::finish`].
fn chunk_mut<'a>(
    changed: &'a mut HashMap<ChunkId, ChunkTrack>,
    table: &Table<'_, u128, &'static [u8]>,
    id: ChunkId,
) -> Result<Option<&'a mut ChunkTrack>> {
    Ok(match changed.entry(id) {
        Entry::Occupied(e) => Some(e.into_mut()),
        Entry::Vacant(e) => chunk_track(table, id)?.map(|t| e.insert(t)),
    })
}

/// A leaf row as this transaction sees it.
struct LeafRow {
    /// `None`: no such leaf (never was, or removed in this transaction).
    track: Option<LeafTrack>,
    /// Differs from the table: written back (or removed) by [`Tables::finish`].
    dirty: bool,
}

impl<'t> Tables<'t> {
    pub(super) fn open(txn: &'t WriteTransaction) -> Result<Self> {
        Ok(Tables {
            meta: txn.open_table(META).map_err(db_err)?,
            blobs: txn.open_table(BLOBS).map_err(db_err)?,
            superseded: txn.open_table(SUPERSEDED).map_err(db_err)?,
            leaves: txn.open_table(LEAVES).map_err(db_err)?,
            chunks: txn.open_table(CHUNKS).map_err(db_err)?,
            zeros: txn.open_table(ZEROS).map_err(db_err)?,
            doomed: txn.open_table(DOOMED).map_err(db_err)?,
            by_provider: txn.open_table(BY_PROVIDER).map_err(db_err)?,
            changed_chunks: HashMap::new(),
            changed_leaves: HashMap::new(),
        })
    }

    /// Records `cursor` as the last change applied and writes back the changed chunk and
    /// leaf rows.
    pub(super) fn finish(mut self, cursor: u64) -> Result<()> {
        self.write_back_leaves()?;
        let mut changed: Vec<(ChunkId, ChunkTrack)> = self.changed_chunks.drain().collect();
        changed.sort_unstable_by_key(|(id, _)| *id);
        for (id, track) in changed {
            self.chunks
                .insert(id.0, encode(&track)?.as_slice())
                .map_err(db_err)?;
        }
        self.meta.insert("cursor", cursor).map_err(db_err)?;
        Ok(())
    }

    pub(super) fn step(&mut self, step: &Step, now_ms: u64, applied: &mut Applied) -> Result<()> {
        match step {
            Step::Count {
                blob,
                chunk_size,
                replication,
                version,
                capacity,
                delta,
            } => {
                let mut track = self.blob(*blob)?.unwrap_or(BlobTrack {
                    chunk_size: *chunk_size,
                    replication: *replication,
                    ..BlobTrack::default()
                });
                if *version <= track.counted {
                    return Ok(());
                }
                self.count(*blob, &track, *version, delta, now_ms, applied)?;
                track.counted = *version;
                track.counted_capacity = *capacity;
                self.put_blob(*blob, &track)
            }
            Step::Expire {
                blob,
                retained_from,
            } => self.expire(*blob, *retained_from, now_ms, applied),
            Step::Delete { blob } => {
                self.forget_blob(*blob, now_ms)?;
                self.doom(&Doom::Ranges(vec![(*blob, 0, Version::MAX)]))
            }
            Step::Abort { blob, from, to } => self.doom(&Doom::Ranges(vec![(*blob, *from, *to)])),
            Step::Reset { blob } => self.forget_blob(*blob, now_ms),
            Step::Baseline {
                blob,
                chunk_size,
                replication,
                version,
                capacity,
                retained_from,
                leaves,
            } => self.baseline(
                *blob,
                BlobTrack {
                    chunk_size: *chunk_size,
                    replication: *replication,
                    counted: *version,
                    counted_capacity: *capacity,
                    retained_from: *retained_from,
                },
                leaves,
                applied,
            ),
        }
    }

    fn blob(&self, blob: BlobId) -> Result<Option<BlobTrack>> {
        self.blobs
            .get(blob)
            .map_err(db_err)?
            .map(|v| decode(v.value()))
            .transpose()
    }

    fn put_blob(&mut self, blob: BlobId, track: &BlobTrack) -> Result<()> {
        self.blobs
            .insert(blob, encode(track)?.as_slice())
            .map_err(db_err)?;
        Ok(())
    }

    /// Leaf `r`'s row, read from the table once per transaction.
    fn leaf_row(&mut self, blob: BlobId, r: NodeRef) -> Result<&mut LeafRow> {
        Ok(match self.changed_leaves.entry((blob, r)) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let track = self
                    .leaves
                    .get(leaf_key(blob, r))
                    .map_err(db_err)?
                    .map(|v| decode(v.value()))
                    .transpose()?;
                e.insert(LeafRow {
                    track,
                    dirty: false,
                })
            }
        })
    }

    fn leaf(&mut self, blob: BlobId, r: NodeRef) -> Result<Option<&LeafTrack>> {
        Ok(self.leaf_row(blob, r)?.track.as_ref())
    }

    /// Leaf `r`'s row, to change: it is written back by [`Tables::finish`].
    fn leaf_mut(&mut self, blob: BlobId, r: NodeRef) -> Result<Option<&mut LeafTrack>> {
        let row = self.leaf_row(blob, r)?;
        row.dirty |= row.track.is_some();
        Ok(row.track.as_mut())
    }

    fn put_leaf(&mut self, blob: BlobId, r: NodeRef, leaf: LeafTrack) {
        let row = LeafRow {
            track: Some(leaf),
            dirty: true,
        };
        self.changed_leaves.insert((blob, r), row);
    }

    /// Takes leaf `r`'s row out: it is removed from the table by [`Tables::finish`].
    fn remove_leaf(&mut self, blob: BlobId, r: NodeRef) -> Result<Option<LeafTrack>> {
        let row = self.leaf_row(blob, r)?;
        let track = row.track.take();
        row.dirty |= track.is_some();
        Ok(track)
    }

    /// Writes the leaf rows changed so far to their table, in key order.
    fn write_back_leaves(&mut self) -> Result<()> {
        let mut changed: Vec<_> = self
            .changed_leaves
            .drain()
            .filter(|(_, row)| row.dirty)
            .collect();
        changed.sort_unstable_by_key(|((blob, r), _)| leaf_key(*blob, *r));
        for ((blob, r), row) in changed {
            let key = leaf_key(blob, r);
            match row.track {
                Some(leaf) => {
                    self.leaves
                        .insert(key, encode(&leaf)?.as_slice())
                        .map_err(db_err)?;
                }
                None => {
                    self.leaves.remove(key).map_err(db_err)?;
                }
            }
        }
        Ok(())
    }

    fn doom(&mut self, doom: &Doom) -> Result<()> {
        let next = self
            .doomed
            .last()
            .map_err(db_err)?
            .map_or(1, |(k, _)| k.value() + 1);
        self.doomed
            .insert(next, encode(doom)?.as_slice())
            .map_err(db_err)?;
        Ok(())
    }

    /// Adds a reference to each chunk `leaf` uses.
    fn reference(&mut self, uses: &[ChunkUse], replication: u32) -> Result<()> {
        for u in uses {
            let track = match chunk_mut(&mut self.changed_chunks, &self.chunks, u.id)? {
                Some(track) => track,
                None => {
                    for p in &u.replicas {
                        self.by_provider.insert((*p, u.id.0), ()).map_err(db_err)?;
                    }
                    self.changed_chunks.entry(u.id).or_insert(ChunkTrack {
                        replicas: u.replicas.clone(),
                        ..ChunkTrack::default()
                    })
                }
            };
            if track.count == 0 && track.zero_since > 0 {
                self.zeros
                    .remove((track.zero_since, u.id.0))
                    .map_err(db_err)?;
                track.zero_since = 0;
            }
            track.count += 1;
            track.len = track.len.max(u.extent);
            track.replication = track.replication.max(replication);
        }
        Ok(())
    }

    /// Drops a reference to each of `chunks`; those left unreferenced wait for deletion.
    fn release(&mut self, chunks: &[ChunkId], now_ms: u64, applied: &mut Applied) -> Result<()> {
        for id in chunks {
            self.release_n(*id, 1, now_ms, applied)?;
        }
        Ok(())
    }

    /// Drops `n` references to chunk `id`; left unreferenced, it waits for deletion.
    fn release_n(&mut self, id: ChunkId, n: u32, now_ms: u64, applied: &mut Applied) -> Result<()> {
        let Some(track) = chunk_mut(&mut self.changed_chunks, &self.chunks, id)? else {
            applied.inconsistencies.push(format!(
                "a leaf referred to chunk {id}, which is not tracked"
            ));
            return Ok(());
        };
        let was = track.count;
        track.count = track.count.saturating_sub(n);
        if track.count == 0 && was > 0 {
            track.zero_since = now_ms.max(1);
            self.zeros
                .insert((track.zero_since, id.0), ())
                .map_err(db_err)?;
        }
        Ok(())
    }

    /// Records a new leaf and what it refers to.
    fn add_leaf(
        &mut self,
        blob: BlobId,
        r: NodeRef,
        refs: &LeafRefs,
        replication: u32,
        superseded_at: Option<Version>,
        applied: &mut Applied,
    ) -> Result<()> {
        if self.leaf(blob, r)?.is_some() {
            return Ok(());
        }
        self.reference(&refs.chunks, replication)?;
        for named in &refs.refs {
            match self.leaf_mut(blob, *named)? {
                Some(l) => l.dependents += 1,
                None => applied.inconsistencies.push(format!(
                    "leaf {r:?} of blob {blob} names leaf {named:?}, which is not tracked"
                )),
            }
        }
        let mut chunks: Vec<ChunkId> = refs.chunks.iter().map(|u| u.id).collect();
        chunks.sort_unstable();
        chunks.dedup();
        let track = LeafTrack {
            chunks,
            refs: refs.refs.clone(),
            dependents: 0,
            superseded_at,
        };
        self.put_leaf(blob, r, track);
        Ok(())
    }

    fn count(
        &mut self,
        blob: BlobId,
        track: &BlobTrack,
        version: Version,
        delta: &Delta,
        now_ms: u64,
        applied: &mut Applied,
    ) -> Result<()> {
        for (r, refs) in &delta.leaves {
            self.add_leaf(blob, *r, refs, track.replication, None, applied)?;
        }
        for r in &delta.superseded {
            if r.size == track.chunk_size {
                if let Some(l) = self.leaf_mut(blob, *r)? {
                    l.superseded_at = Some(version);
                }
            }
        }
        if !delta.superseded.is_empty() {
            self.superseded
                .insert((blob, version), encode(&delta.superseded)?.as_slice())
                .map_err(db_err)?;
        }
        // Superseded by a version retention already removed (counted late, after a rebuild).
        if version <= track.retained_from {
            self.expire(blob, track.retained_from, now_ms, applied)?;
        }
        Ok(())
    }

    fn expire(
        &mut self,
        blob: BlobId,
        retained_from: Version,
        now_ms: u64,
        applied: &mut Applied,
    ) -> Result<()> {
        let Some(mut track) = self.blob(blob)? else {
            return Ok(());
        };
        track.retained_from = track.retained_from.max(retained_from);
        self.put_blob(blob, &track)?;
        let due: Vec<(Version, Vec<NodeRef>)> = {
            let mut out = Vec::new();
            for row in self
                .superseded
                .range((blob, 0)..=(blob, track.retained_from))
                .map_err(db_err)?
            {
                let (k, v) = row.map_err(db_err)?;
                out.push((k.value().1, decode(v.value())?));
            }
            out
        };
        let mut dead_inner = Vec::new();
        for (w, refs) in due {
            self.superseded.remove((blob, w)).map_err(db_err)?;
            for r in refs {
                if r.size > track.chunk_size {
                    dead_inner.push(NodeKey { blob, node: r });
                } else {
                    self.maybe_die(blob, r, &track, now_ms, applied)?;
                }
            }
        }
        if !dead_inner.is_empty() {
            self.doom(&Doom::Nodes(dead_inner))?;
        }
        Ok(())
    }

    /// Deletes leaf `r` if nothing keeps it (superseded by a removed version, named by no
    /// live leaf), and the leaves only it kept, in turn.
    fn maybe_die(
        &mut self,
        blob: BlobId,
        r: NodeRef,
        track: &BlobTrack,
        now_ms: u64,
        applied: &mut Applied,
    ) -> Result<()> {
        let mut stack = vec![r];
        let mut dead = Vec::new();
        while let Some(r) = stack.pop() {
            let Some(leaf) = self.leaf(blob, r)? else {
                continue;
            };
            let removed = leaf.superseded_at.is_some_and(|s| s <= track.retained_from);
            if !removed || leaf.dependents > 0 {
                continue;
            }
            let Some(leaf) = self.remove_leaf(blob, r)? else {
                continue;
            };
            dead.push(NodeKey { blob, node: r });
            self.release(&leaf.chunks, now_ms, applied)?;
            for named in leaf.refs {
                if let Some(l) = self.leaf_mut(blob, named)? {
                    l.dependents = l.dependents.saturating_sub(1);
                    if l.dependents == 0 {
                        stack.push(named);
                    }
                }
            }
        }
        if !dead.is_empty() {
            self.doom(&Doom::Nodes(dead))?;
        }
        Ok(())
    }

    /// Drops everything tracked of `blob`; its chunks lose its references.
    fn forget_blob(&mut self, blob: BlobId, now_ms: u64) -> Result<()> {
        // The table must hold this transaction's changes before it is scanned.
        self.write_back_leaves()?;
        // The references its leaves hold, per chunk: a run of small appends names each chunk
        // from many leaves (every flattened leaf names a whole slot's), each row changes once.
        let mut held: HashMap<ChunkId, u32> = HashMap::new();
        let range = (blob, 0, 0, 0)..=(blob, u64::MAX, u64::MAX, u64::MAX);
        for row in self.leaves.range(range).map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            let leaf: LeafTrack = decode(v.value())?;
            for c in leaf.chunks {
                *held.entry(c).or_default() += 1;
            }
        }
        let mut held: Vec<(ChunkId, u32)> = held.into_iter().collect();
        held.sort_unstable();
        let mut applied = Applied::default();
        for (id, n) in held {
            self.release_n(id, n, now_ms, &mut applied)?;
        }
        let leaves = (blob, 0, 0, 0)..=(blob, u64::MAX, u64::MAX, u64::MAX);
        remove_range(&mut self.leaves, leaves).map_err(db_err)?;
        remove_range(&mut self.superseded, (blob, 0)..=(blob, u64::MAX)).map_err(db_err)?;
        self.blobs.remove(blob).map_err(db_err)?;
        Ok(())
    }

    fn baseline(
        &mut self,
        blob: BlobId,
        track: BlobTrack,
        leaves: &[(NodeRef, LeafRefs, bool)],
        applied: &mut Applied,
    ) -> Result<()> {
        // A leaf only named by others (`in_tree` false) dies with the last of them. Leaves
        // are added before the ones naming them, so their rows exist.
        let by_ref: HashMap<NodeRef, usize> = leaves
            .iter()
            .enumerate()
            .map(|(i, (r, _, _))| (*r, i))
            .collect();
        let mut order: Vec<usize> = Vec::with_capacity(leaves.len());
        let mut placed = vec![false; leaves.len()];
        for start in 0..leaves.len() {
            let mut stack = vec![(start, false)];
            while let Some((i, expanded)) = stack.pop() {
                if placed[i] {
                    continue;
                }
                if expanded {
                    placed[i] = true;
                    order.push(i);
                    continue;
                }
                stack.push((i, true));
                for named in &leaves[i].1.refs {
                    if let Some(&j) = by_ref.get(named) {
                        if !placed[j] {
                            stack.push((j, false));
                        }
                    }
                }
            }
        }
        for i in order {
            let (r, refs, in_tree) = &leaves[i];
            // Reached only through another leaf: already out of the tree.
            let superseded_at = (!in_tree).then_some(track.counted);
            self.add_leaf(blob, *r, refs, track.replication, superseded_at, applied)?;
        }
        self.put_blob(blob, &track)
    }
}
