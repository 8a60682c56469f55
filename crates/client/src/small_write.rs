//! Small writes (one chunk of at most [`crate::placements::SMALL_WRITE`]): their chunk is
//! stored once their version is assigned, not before, which takes a round trip and a disk
//! sync off their latency. (Large writes store their data first, so their version is not held
//! in flight, delaying the publication of every later version, for the whole transfer.)
//!
//! A disk-class small write goes to its version's metadata owners: one request to each
//! carries the chunk and the version's nodes. A memory-class one goes where the manager's
//! placement says (providers with room in memory), stored beside the assignment. A chunk that
//! fails to store aborts the version, and the write is done the long way, with failover to
//! other providers (a memory-class one only when a provider was unreachable: the others'
//! failures, such as no room left in memory, are the caller's).

use std::time::Instant;

use tomus_metadata::StoredChunk;
use tomus_wire::{Assignment, Error, ErrorKind, Result, VersionInfo, WriteOp};

use crate::blob::Blob;
use crate::commit::{spanning, Commit, CommitOptions};
use crate::write::timed;
use crate::{chunks, dht};

impl Blob {
    /// A small write of `data` as `op`; `options` are published with the version, as for any
    /// commit.
    pub(crate) async fn commit_small(
        &self,
        op: WriteOp,
        data: &[u8],
        options: Option<&CommitOptions>,
    ) -> Result<VersionInfo> {
        let small = SmallWrite {
            op,
            data,
            options,
            started: Instant::now(),
        };
        if self.client.is_memory_class(self.id).await? {
            return self.commit_small_placed(&small).await;
        }
        self.commit_small_beside_metadata(&small).await
    }

    /// Once the version is assigned, one request to each of its metadata owners stores the
    /// chunk and the version's nodes: a small write costs the providers one request per
    /// replica, not two.
    async fn commit_small_beside_metadata(&self, w: &SmallWrite<'_>) -> Result<VersionInfo> {
        let (assigned, assign_took) = timed(self.assign(&w.commit(Vec::new()))).await;
        let a = assigned?;
        let (stored, store_took) = timed(self.store_small_write(&a, w)).await;
        let chunk = match stored {
            Ok(chunk) => chunk,
            // An owner failed (down, its disk full), and a version's ring position fixes its
            // owners: the write goes the long way, its metadata with failover along the ring.
            Err(e) => return self.small_write_the_long_way(w, a.version, &e).await,
        };
        let (completed, complete_took) = timed(self.complete(a.version)).await;
        // Where a small write's latency goes (`TOMUS_LOG=tomus_client=debug`).
        tracing::debug!(
            blob = %self.id,
            version = a.version,
            assign_us = assign_took.as_micros() as u64,
            store_us = store_took.as_micros() as u64,
            complete_us = complete_took.as_micros() as u64,
            total_us = w.started.elapsed().as_micros() as u64,
            "small write"
        );
        self.settle_small(completed, w.commit(vec![chunk])).await
    }

    /// Stores the chunk of `w` and version `a`'s metadata on the version's metadata owners;
    /// returns the chunk.
    async fn store_small_write(&self, a: &Assignment, w: &SmallWrite<'_>) -> Result<StoredChunk> {
        let owners =
            dht::version_owners(self.cluster(), self.id, a.version, self.replication).await?;
        let chunk = StoredChunk {
            chunk: chunks::new_chunk_id(false),
            len: w.data.len() as u64,
            replicas: owners.iter().map(|(id, _)| *id).collect(),
            chunk_offset: 0,
        };
        let all = spanning(a, vec![chunk.clone()]);
        let replaces = matches!(w.op, WriteOp::Replace { .. });
        let nodes = self.build_metadata(a, &all, replaces).await?;
        dht::put_small_write(self.cluster(), self.id, &owners, nodes, chunk.chunk, w.data).await?;
        Ok(chunk)
    }

    /// A memory-class small write: its chunk is stored where placement says while the version
    /// is assigned and its metadata stored.
    async fn commit_small_placed(&self, w: &SmallWrite<'_>) -> Result<VersionInfo> {
        let replicas = self.small_placement().await?;
        let len = w.data.len() as u64;
        let chunk = chunks::whole_chunk(chunks::new_chunk_id(true), len, &replicas);
        let first = w.commit(vec![chunk.clone()]);
        let store = chunks::put_chunk_as(self.cluster(), chunk.chunk, w.data, &replicas);
        let (assigned, (stored, chunk_took)) =
            futures::join!(self.assign_and_store(&first), timed(store));
        match (assigned, stored) {
            (Ok(a), Ok(())) => {
                let (completed, complete_took) = timed(self.complete(a.version)).await;
                // Its chunk's store ran beside the assignment and the metadata's.
                tracing::debug!(
                    blob = %self.id,
                    version = a.version,
                    chunk_us = chunk_took.as_micros() as u64,
                    complete_us = complete_took.as_micros() as u64,
                    total_us = w.started.elapsed().as_micros() as u64,
                    "small write"
                );
                self.settle_small(completed, first).await
            }
            // The provider that failed is suspected now: the next placement avoids it. A
            // provider out of memory-class room answers NoSpace, which no other one changes.
            (Ok(a), Err(e)) if e.kind == ErrorKind::Unavailable => {
                self.small_write_the_long_way(w, a.version, &e).await
            }
            (Ok(a), Err(e)) => {
                self.abort(a.version).await;
                Err(e)
            }
            // A chunk stored without a version is collected as garbage after the grace period.
            (Err(e), _) => Err(e),
        }
    }

    /// Gives up `version`, whose chunk failed to store (`e`), and does the write again: its
    /// chunk where placement says, with failover, then a commit.
    async fn small_write_the_long_way(
        &self,
        w: &SmallWrite<'_>,
        version: u64,
        e: &Error,
    ) -> Result<VersionInfo> {
        self.abort(version).await;
        tracing::info!(
            "blob {}: {e}; storing the small write the long way",
            self.id
        );
        let stored = self.store_chunks(w.data).await?;
        self.commit(w.commit(stored)).await
    }

    /// The outcome of a small write's `Complete`: a version given up behind a dead writer's
    /// is committed again as `again` (its chunk is stored).
    async fn settle_small(
        &self,
        completed: Result<VersionInfo>,
        again: Commit<'_>,
    ) -> Result<VersionInfo> {
        match completed {
            Err(e) if e.kind == ErrorKind::Retry => self.commit(again).await,
            other => {
                if let Ok(v) = &other {
                    self.log_committed(v);
                }
                other
            }
        }
    }
}

/// A small write in progress.
struct SmallWrite<'a> {
    op: WriteOp,
    data: &'a [u8],
    options: Option<&'a CommitOptions>,
    started: Instant,
}

impl<'a> SmallWrite<'a> {
    /// Its commit with `chunks`, stored since it started.
    fn commit(&self, chunks: Vec<StoredChunk>) -> Commit<'a> {
        Commit {
            op: self.op,
            chunks,
            options: self.options,
            stored_at: Some(self.started),
            reused_at: None,
        }
    }
}
