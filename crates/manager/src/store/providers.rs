//! Providers the manager registered, which of them drain, and the replica sets repair
//! recorded for the chunks it copied.

use redb::ReadableTable;
use tomus_metadata::{ChunkId, ProviderId};
use tomus_wire::Result;

use super::{
    db_err, decode, draw, encode, ProviderRecord, Store, DRAINING, META, PROVIDERS, PROVIDER_KEYS,
    REPLICAS,
};

/// The key in `META` of [`Store::removed_before`].
const REMOVED_BEFORE: &str = "removed_before";

impl Store {
    pub fn providers(&self) -> Result<Vec<ProviderRecord>> {
        let txn = self.read()?;
        let table = txn.open_table(PROVIDERS).map_err(db_err)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(db_err)? {
            let (_, v) = row.map_err(db_err)?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }

    /// Saves the provider at `addr` under `id`, or under a new id from the provider counter
    /// when `id` is `None`, and that its registration key `key` names it: one transaction
    /// (one sync), so a registration answers sooner. Returns the id.
    pub fn put_provider(
        &self,
        id: Option<ProviderId>,
        addr: &str,
        key: u128,
    ) -> Result<ProviderId> {
        let txn = self.write()?;
        let id = {
            let id = match id {
                Some(id) => id,
                None => draw(&txn, "provider", 1)? as ProviderId,
            };
            let record = ProviderRecord {
                id,
                addr: addr.to_string(),
            };
            let mut t = txn.open_table(PROVIDERS).map_err(db_err)?;
            t.insert(id, encode(&record)?.as_slice()).map_err(db_err)?;
            let mut keys = txn.open_table(PROVIDER_KEYS).map_err(db_err)?;
            keys.insert(key, id).map_err(db_err)?;
            id
        };
        txn.commit().map_err(db_err)?;
        Ok(id)
    }

    /// The provider id registration key `key` was given, if any.
    pub fn provider_of_key(&self, key: u128) -> Result<Option<ProviderId>> {
        let txn = self.read()?;
        let keys = txn.open_table(PROVIDER_KEYS).map_err(db_err)?;
        let id = keys.get(key).map_err(db_err)?;
        Ok(id.map(|v| v.value()))
    }

    /// Draining providers and when each drain started.
    pub fn drains(&self) -> Result<Vec<(ProviderId, u64)>> {
        let txn = self.read()?;
        let t = txn.open_table(DRAINING).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            out.push((k.value(), v.value()));
        }
        Ok(out)
    }

    /// Records that providers started draining (at the given Unix ms).
    pub fn put_drains(&self, drains: &[(ProviderId, u64)]) -> Result<()> {
        let txn = self.write()?;
        {
            let mut t = txn.open_table(DRAINING).map_err(db_err)?;
            for (id, since) in drains {
                t.insert(*id, *since).map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)
    }

    /// Forgets providers: their records and drain marks. Writes whose data began storing
    /// before `removed_before` (Unix ms; it only moves forward) may have put data on them.
    pub fn remove_providers(&self, ids: &[ProviderId], removed_before: u64) -> Result<()> {
        let txn = self.write()?;
        {
            let mut providers = txn.open_table(PROVIDERS).map_err(db_err)?;
            let mut draining = txn.open_table(DRAINING).map_err(db_err)?;
            for id in ids {
                providers.remove(*id).map_err(db_err)?;
                draining.remove(*id).map_err(db_err)?;
            }
            // A removed provider that registers again is a new one, whatever its key.
            let mut keys = txn.open_table(PROVIDER_KEYS).map_err(db_err)?;
            keys.retain(|_, id| !ids.contains(&id)).map_err(db_err)?;
            let mut meta = txn.open_table(META).map_err(db_err)?;
            let before = meta
                .get(REMOVED_BEFORE)
                .map_err(db_err)?
                .map_or(0, |v| v.value());
            if removed_before > before {
                meta.insert(REMOVED_BEFORE, removed_before)
                    .map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)
    }

    /// What [`Store::remove_providers`] recorded last (0: nothing).
    pub fn removed_before(&self) -> Result<u64> {
        let txn = self.read()?;
        let meta = txn.open_table(META).map_err(db_err)?;
        let before = meta.get(REMOVED_BEFORE).map_err(db_err)?;
        Ok(before.map_or(0, |v| v.value()))
    }

    /// Upserts replica sets of chunks in one transaction (an empty set removes the entry).
    pub fn record_replicas(&self, entries: &[(ChunkId, Vec<ProviderId>)]) -> Result<()> {
        let txn = self.write()?;
        {
            let mut t = txn.open_table(REPLICAS).map_err(db_err)?;
            for (chunk, replicas) in entries {
                if replicas.is_empty() {
                    t.remove(chunk.0).map_err(db_err)?;
                } else {
                    t.insert(chunk.0, encode(replicas)?.as_slice())
                        .map_err(db_err)?;
                }
            }
        }
        txn.commit().map_err(db_err)
    }

    /// The recorded replica set of each chunk, in order (empty when none was recorded).
    pub fn chunk_replicas(&self, chunks: &[ChunkId]) -> Result<Vec<Vec<ProviderId>>> {
        let txn = self.read()?;
        let t = txn.open_table(REPLICAS).map_err(db_err)?;
        chunks
            .iter()
            .map(|c| match t.get(c.0).map_err(db_err)? {
                Some(v) => decode(v.value()),
                None => Ok(Vec::new()),
            })
            .collect()
    }
}
