//! Where chunks' copies are: lookups by chunk and by provider (what a provider that fails or
//! drains held, through the `by_provider` index), and the replica sets repair made.

use tomus_metadata::{ChunkId, ProviderId};
use tomus_wire::Result;

use super::{chunk_track, db_err, decode, encode, ChunkTrack, Ledger, BY_PROVIDER, CHUNKS};

impl Ledger {
    /// The tracked state of `chunks` (`None`: not tracked).
    pub fn chunks(&self, ids: &[ChunkId]) -> Result<Vec<Option<ChunkTrack>>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let t = txn.open_table(CHUNKS).map_err(db_err)?;
        ids.iter().map(|id| chunk_track(&t, *id)).collect()
    }

    /// Referenced chunks with a copy on any of `providers`, at most `limit`.
    pub fn chunks_on(
        &self,
        providers: &[ProviderId],
        limit: usize,
    ) -> Result<Vec<(ChunkId, ChunkTrack)>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let chunks = txn.open_table(CHUNKS).map_err(db_err)?;
        let index = txn.open_table(BY_PROVIDER).map_err(db_err)?;
        let mut ids: Vec<u128> = Vec::new();
        for p in providers {
            for row in index.range((*p, 0)..=(*p, u128::MAX)).map_err(db_err)? {
                ids.push(row.map_err(db_err)?.0.value().1);
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let mut out = Vec::new();
        for id in ids {
            if out.len() >= limit {
                break;
            }
            if let Some(v) = chunks.get(id).map_err(db_err)? {
                let track: ChunkTrack = decode(v.value())?;
                if track.count > 0 {
                    out.push((ChunkId(id), track));
                }
            }
        }
        Ok(out)
    }

    /// Records where chunks' copies are now (after repair).
    pub fn set_replicas(&self, entries: &[(ChunkId, Vec<ProviderId>)]) -> Result<()> {
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut t = txn.open_table(CHUNKS).map_err(db_err)?;
            let mut index = txn.open_table(BY_PROVIDER).map_err(db_err)?;
            for (id, replicas) in entries {
                let Some(mut track) = chunk_track(&t, *id)? else {
                    continue;
                };
                for p in &track.replicas {
                    index.remove((*p, id.0)).map_err(db_err)?;
                }
                for p in replicas {
                    index.insert((*p, id.0), ()).map_err(db_err)?;
                }
                track.replicas = replicas.clone();
                t.insert(id.0, encode(&track)?.as_slice()).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)
    }
}
