//! The commit protocol: a version number for stored chunks, the version's metadata in the
//! DHT, and the wait for its publication. One `Commit` describes every kind of version (a
//! write, an append, a replacement, a composed copy); a version given up behind a dead
//! writer's is committed again, and one whose metadata fails to store is aborted at once so
//! the writers behind it need not wait for its lease.

use std::time::Instant;

use tomus_metadata::{
    build_version, ChunkId, InFlight, Node, NodeRef, PublishedTree, StoredChunk, Version, WritePlan,
};
use tomus_wire::manager::{AbortVersion, Assign, Complete};
use tomus_wire::{Assignment, Attrs, DataAge, ErrorKind, Result, VersionInfo, WriteOp};

use crate::blob::Blob;
use crate::dht::{self, DhtSource};
use crate::write::timed;

/// How many times a write is committed when versions below it keep being given up.
const COMMIT_ATTEMPTS: u32 = 5;

/// What a commit publishes with its version, and the condition it sets.
#[derive(Clone, Debug, Default)]
pub struct CommitOptions {
    /// Attributes published atomically with the version (see [`Attrs`]).
    pub attrs: Attrs,
    /// Commit only if the blob's size after every version assigned so far is this (an append
    /// at a known offset); a `PreconditionFailed` error otherwise, with nothing published.
    pub expect_size: Option<u64>,
}

/// A version to commit.
pub(crate) struct Commit<'a> {
    pub op: WriteOp,
    /// The chunks holding the version's data, in data order.
    pub chunks: Vec<StoredChunk>,
    pub options: Option<&'a CommitOptions>,
    /// When storing the chunks began (`None`: they are stored with the assignment).
    pub stored_at: Option<Instant>,
    /// When the chunks of other versions it reuses were found referenced (a composed copy).
    pub reused_at: Option<Instant>,
}

impl Commit<'_> {
    /// How old the data is now, as the manager checks it against garbage collection.
    fn data_age(&self) -> DataAge {
        let ms = |at: Instant| at.elapsed().as_millis() as u64;
        DataAge {
            stored_ms: self.stored_at.map_or(0, ms),
            reused_ms: self.reused_at.map(ms),
        }
    }
}

/// Total bytes of `chunks`.
pub(crate) fn len(chunks: &[StoredChunk]) -> u64 {
    chunks.iter().map(|c| c.len).sum()
}

impl Blob {
    /// Commits `c`: assigns its version, stores its metadata and waits for its publication.
    pub(crate) async fn commit(&self, c: Commit<'_>) -> Result<VersionInfo> {
        let mut attempt = 1;
        loop {
            let assigned = self.assign_and_store(&c).await;
            let outcome = match assigned {
                Ok(a) => self.complete(a.version).await,
                Err(e) => Err(e),
            };
            match outcome {
                Err(e) if e.kind == ErrorKind::Retry && attempt < COMMIT_ATTEMPTS => {
                    tracing::info!("blob {}: {e}; committing again", self.id);
                    attempt += 1;
                }
                other => {
                    if let Ok(v) = &other {
                        self.log_committed(v);
                    }
                    return other;
                }
            }
        }
    }

    /// The debug event of every commit (`TOMUS_LOG=tomus_client=debug`), carrying the
    /// request id of the write.
    pub(crate) fn log_committed(&self, v: &VersionInfo) {
        tracing::debug!(
            blob = %self.id,
            version = v.version,
            size = v.size,
            "committed"
        );
    }

    /// Gets a version for the stored chunks of `c` and stores its metadata. A version whose
    /// metadata fails to store is aborted, so the writers behind it need not wait for its
    /// lease.
    pub(crate) async fn assign_and_store(&self, c: &Commit<'_>) -> Result<Assignment> {
        let (assignment, assign_took) = timed(self.assign(c)).await;
        let assignment = assignment?;
        let chunks = spanning(&assignment, c.chunks.clone());
        let replaces = matches!(c.op, WriteOp::Replace { .. });
        let (stored, metadata_took) =
            timed(self.store_metadata(&assignment, &chunks, replaces)).await;
        if let Err(e) = stored {
            self.abort(assignment.version).await;
            return Err(e);
        }
        tracing::debug!(
            blob = %self.id,
            version = assignment.version,
            assign_us = assign_took.as_micros() as u64,
            metadata_us = metadata_took.as_micros() as u64,
            "version assigned and its metadata stored"
        );
        Ok(assignment)
    }

    /// A version for `c` (its chunks not yet part of it).
    pub(crate) async fn assign(&self, c: &Commit<'_>) -> Result<Assignment> {
        let req = Assign {
            blob: self.id,
            op: c.op,
            attrs: c.options.map(|o| o.attrs.clone()).unwrap_or_default(),
            expect_size: c.options.and_then(|o| o.expect_size),
            data: c.data_age(),
        };
        self.cluster().manager(req).await
    }

    /// Waits until `version`, whose chunks and metadata are stored, is published.
    pub(crate) async fn complete(&self, version: Version) -> Result<VersionInfo> {
        let complete = Complete {
            blob: self.id,
            version,
        };
        let info = self.cluster().manager(complete).await?;
        self.client.versions.insert(&info);
        Ok(info)
    }

    /// Gives up `version`, which this writer cannot finish. Best effort: should the manager
    /// not hear of it, the version's lease runs out instead.
    pub(crate) async fn abort(&self, version: Version) {
        let req = AbortVersion {
            blob: self.id,
            version,
        };
        if let Err(e) = self.cluster().manager(req).await {
            tracing::info!("blob {}: aborting version {version}: {e}", self.id);
        }
    }

    async fn store_metadata(
        &self,
        a: &Assignment,
        chunks: &[StoredChunk],
        replaces: bool,
    ) -> Result<()> {
        let nodes = self.build_metadata(a, chunks, replaces).await?;
        dht::put_nodes(self.cluster(), self.id, self.replication, nodes).await
    }

    /// The nodes of version `a` holding `chunks` (which span the whole assigned range).
    pub(crate) async fn build_metadata(
        &self,
        a: &Assignment,
        chunks: &[StoredChunk],
        replaces: bool,
    ) -> Result<Vec<(NodeRef, Node)>> {
        let in_flight: Vec<InFlight> = a
            .in_flight
            .iter()
            .map(|&(version, span, capacity)| InFlight {
                version,
                span,
                capacity,
            })
            .collect();
        let plan = WritePlan {
            chunk_size: self.chunk_size,
            version: a.version,
            span: a.span,
            capacity: a.capacity,
            chunks,
            published: a
                .published
                .map(|(version, capacity)| PublishedTree { version, capacity }),
            in_flight: &in_flight,
            replaces,
        };
        let source = DhtSource {
            cluster: self.cluster(),
            blob: self.id,
        };
        build_version(&plan, &source).await
    }
}

/// `chunks` and, when the assigned range is longer (a replacement spans the previous content
/// too), zeros clearing the rest.
pub(crate) fn spanning(a: &Assignment, mut chunks: Vec<StoredChunk>) -> Vec<StoredChunk> {
    let data = len(&chunks);
    if a.span.size > data {
        chunks.push(StoredChunk {
            chunk: ChunkId::ZEROS,
            len: a.span.size - data,
            replicas: Vec::new(),
            chunk_offset: 0,
        });
    }
    chunks
}
