//! The deletions the ledger owes: nodes and version ranges to delete from the providers, and
//! chunks unreferenced long enough to go; each is forgotten once carried out.

use std::ops::Bound;

use tomus_metadata::ChunkId;
use tomus_wire::Result;

use super::{
    chunk_track, db_err, decode, ChunkTrack, Doom, Ledger, BY_PROVIDER, CHUNKS, DOOMED, ZEROS,
};

impl Ledger {
    /// Deletions owed to providers after `after`, oldest first, at most `limit`.
    pub fn doomed(&self, after: u64, limit: usize) -> Result<Vec<(u64, Doom)>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(DOOMED).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t
            .range(after.saturating_add(1)..)
            .map_err(db_err)?
            .take(limit)
        {
            let (k, v) = row.map_err(db_err)?;
            out.push((k.value(), decode(v.value())?));
        }
        Ok(out)
    }

    /// Marks deletions carried out.
    pub fn done_doomed(&self, ids: &[u64]) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut t = txn.open_table(DOOMED).map_err(db_err)?;
            for id in ids {
                t.remove(*id).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)
    }

    /// Chunks unreferenced since before `cutoff_ms`, at most `limit`, oldest first: those
    /// after `after` (the `zero_since` and id of one returned before), so chunks that
    /// cannot be deleted yet do not hide the ones behind them.
    pub fn unreferenced_before(
        &self,
        cutoff_ms: u64,
        after: Option<(u64, ChunkId)>,
        limit: usize,
    ) -> Result<Vec<(ChunkId, ChunkTrack)>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let zeros = txn.open_table(ZEROS).map_err(db_err)?;
        let chunks = txn.open_table(CHUNKS).map_err(db_err)?;
        let mut out = Vec::new();
        let lower = match after {
            Some((since, id)) => Bound::Excluded((since, id.0)),
            None => Bound::Unbounded,
        };
        let range = zeros
            .range::<(u64, u128)>((lower, Bound::Excluded((cutoff_ms, 0))))
            .map_err(db_err)?;
        for row in range.take(limit) {
            let (k, _) = row.map_err(db_err)?;
            let id = k.value().1;
            if let Some(v) = chunks.get(id).map_err(db_err)? {
                out.push((ChunkId(id), decode(v.value())?));
            }
        }
        Ok(out)
    }

    /// Forgets chunks whose deletion was carried out, if they are still unreferenced (the
    /// cutoff guarantees they are; the check guards against a bug). Returns those forgotten.
    pub fn forget_chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkId>> {
        let txn = self.db.begin_write().map_err(db_err)?;
        let mut forgotten = Vec::new();
        {
            let mut chunks = txn.open_table(CHUNKS).map_err(db_err)?;
            let mut zeros = txn.open_table(ZEROS).map_err(db_err)?;
            let mut by_provider = txn.open_table(BY_PROVIDER).map_err(db_err)?;
            for id in ids {
                let Some(track) = chunk_track(&chunks, *id)? else {
                    continue;
                };
                if track.count > 0 {
                    tracing::error!("chunk {id} was deleted while referenced again");
                    continue;
                }
                chunks.remove(id.0).map_err(db_err)?;
                zeros.remove((track.zero_since, id.0)).map_err(db_err)?;
                for p in &track.replicas {
                    by_provider.remove((*p, id.0)).map_err(db_err)?;
                }
                forgotten.push(*id);
            }
        }
        txn.commit().map_err(db_err)?;
        Ok(forgotten)
    }
}
