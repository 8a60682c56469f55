//! The read path: a version's tree resolved to chunk pieces (through the node cache and the
//! metadata DHT), the pieces fetched in parallel from their replicas.
//!
//! Each read is one traced operation ([`tomus_wire::trace::operation`]): without a request id
//! set by the caller it gets one, carried by its manager and provider requests, so one slow
//! read can be followed through the logs like a write.

use std::time::Instant;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use tomus_metadata::{resolve_range, ChunkPiece, NodeRef, Segment, Span, Version};
use tomus_wire::trace::operation;
use tomus_wire::{Error, ErrorKind, Result, VersionInfo};

use crate::blob::{Blob, Location};
use crate::chunks;
use crate::dht::DhtSource;

impl Blob {
    /// Segments of `[offset, offset + size)` at `version`, after checking the range.
    pub(crate) async fn segments(
        &self,
        offset: u64,
        size: u64,
        version: Option<Version>,
    ) -> Result<(VersionInfo, Vec<Segment>)> {
        let info = self.stat(version).await?;
        match self.segments_at(&info, offset, size).await {
            Err(e) if e.kind == ErrorKind::NotFound && version.is_some() => {
                // A cached record of a version retention removed since: the manager says so.
                let fresh = self.stat_fresh(info.version).await?;
                let segments = self.segments_at(&fresh, offset, size).await?;
                Ok((fresh, segments))
            }
            other => Ok((info, other?)),
        }
    }

    /// Segments of `[offset, offset + size)` of the version `info` describes.
    async fn segments_at(
        &self,
        info: &VersionInfo,
        offset: u64,
        size: u64,
    ) -> Result<Vec<Segment>> {
        let end = offset
            .checked_add(size)
            .ok_or_else(|| Error::out_of_range("offset + size overflows"))?;
        if offset > info.size {
            return Err(Error::out_of_range(format!(
                "offset {offset} is past the end of blob {} at version {} (size {})",
                self.id, info.version, info.size
            )));
        }
        if end > info.size {
            return Err(Error::out_of_range(format!(
                "the range {offset}..{end} ends past the end of blob {} at version {} (size {})",
                self.id, info.version, info.size
            )));
        }
        if size == 0 {
            return Ok(Vec::new());
        }
        let root = NodeRef {
            version: info.version,
            offset: 0,
            size: info.capacity,
        };
        let source = DhtSource {
            cluster: self.cluster(),
            blob: self.id,
        };
        let segments = resolve_range(root, Span::new(offset, size), &source).await?;
        Ok(coalesce(segments))
    }

    /// Reads `size` bytes at `offset` of `version` (`None`: latest published). The range is
    /// checked against the version before any memory is set aside for it.
    pub async fn read(&self, offset: u64, size: u64, version: Option<Version>) -> Result<Vec<u8>> {
        operation(async {
            let (info, segments) = self.segments(offset, size, version).await?;
            let len =
                usize::try_from(size).map_err(|_| Error::invalid("read too large for memory"))?;
            let mut buf = vec![0u8; len];
            self.fetch(&info, segments, &mut buf).await?;
            Ok(buf)
        })
        .await
    }

    /// Fills `buf` with the bytes at `offset` of `version`; returns the version read.
    pub async fn read_into(
        &self,
        offset: u64,
        buf: &mut [u8],
        version: Option<Version>,
    ) -> Result<Version> {
        operation(async {
            let (info, segments) = self.segments(offset, buf.len() as u64, version).await?;
            self.fetch(&info, segments, buf).await?;
            Ok(info.version)
        })
        .await
    }

    /// Fills `buf` with the bytes at `offset` of the published version `info` describes (from
    /// [`Blob::stat`] or a namespace lookup), saving the version lookup of [`Blob::read_into`].
    pub async fn read_version_into(
        &self,
        info: &VersionInfo,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        if info.blob != self.id {
            return Err(Error::invalid(format!(
                "version record of blob {} used to read blob {}",
                info.blob, self.id
            )));
        }
        operation(async {
            let segments = self.segments_at(info, offset, buf.len() as u64).await?;
            self.fetch(info, segments, buf).await
        })
        .await
    }

    /// The bytes `[offset, offset + len)` of the published version `info` describes, for a
    /// caller that hands them on (a socket) rather than keeps them. Where every piece is in a
    /// chunk file of a provider on this host and long enough to be worth it
    /// ([`tomus_wire::mapping::MIN_MAPPED_LEN`]), they are those files' pages, mapped and checked
    /// ([`crate::local::map_piece`]): no copy. Otherwise they are read into one buffer of
    /// `len` bytes from `buffer` (which lets the caller recycle its buffers) as
    /// [`Blob::read_version_into`] does.
    pub async fn read_version_bytes<B>(
        &self,
        info: &VersionInfo,
        offset: u64,
        len: u64,
        buffer: impl FnOnce(usize) -> B,
    ) -> Result<Vec<Bytes>>
    where
        B: AsRef<[u8]> + AsMut<[u8]> + Send + 'static,
    {
        if info.blob != self.id {
            return Err(Error::invalid(format!(
                "version record of blob {} used to read blob {}",
                info.blob, self.id
            )));
        }
        operation(async {
            let segments = self.segments_at(info, offset, len).await?;
            let started = Instant::now();
            if let Some(mapped) = self.map_segments(&segments).await {
                // The same line as a buffered read's (`fetch`), for the logs.
                tracing::debug!(
                    blob = %self.id,
                    version = info.version,
                    bytes = len,
                    pieces = segments.len(),
                    elapsed_us = started.elapsed().as_micros() as u64,
                    mapped = true,
                    "read"
                );
                return Ok(mapped);
            }
            let mut buf = buffer(len as usize);
            self.fetch(info, segments, buf.as_mut()).await?;
            Ok(vec![Bytes::from_owner(buf)])
        })
        .await
    }

    /// Every one of `segments` as bytes without a copy (holes as zeros), or `None` when a
    /// piece cannot be mapped from a chunk file on this host.
    async fn map_segments(&self, segments: &[Segment]) -> Option<Vec<Bytes>> {
        let mut out = Vec::with_capacity(segments.len());
        for seg in segments {
            out.push(match seg {
                Segment::Zeros(span) => Bytes::from(vec![0; span.size as usize]),
                Segment::Data(piece) => chunks::map_piece(self.cluster(), piece).await?,
            });
        }
        Some(out)
    }

    /// Fetches `segments` of the version `info` into `buf`. Data gone (a version removed by
    /// retention since its record was read) is reported as the manager explains it.
    async fn fetch(
        &self,
        info: &VersionInfo,
        segments: Vec<Segment>,
        buf: &mut [u8],
    ) -> Result<()> {
        let started = Instant::now();
        let pieces = segments.len();
        match self.read_segments(segments, buf).await {
            Err(e) if e.kind == ErrorKind::NotFound => {
                self.stat_fresh(info.version).await?;
                Err(e)
            }
            Ok(()) => {
                // The client's line of a read, under its request id (next to the servers').
                tracing::debug!(
                    blob = %self.id,
                    version = info.version,
                    bytes = buf.len(),
                    pieces,
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "read"
                );
                Ok(())
            }
            other => other,
        }
    }

    /// Fetches `segments` (which tile `buf`) into `buf`, in parallel.
    async fn read_segments(&self, segments: Vec<Segment>, buf: &mut [u8]) -> Result<()> {
        let mut jobs: Vec<(ChunkPiece, &mut [u8])> = Vec::new();
        let mut rest = buf;
        for seg in segments {
            let (head, tail) = rest.split_at_mut(seg.span().size as usize);
            rest = tail;
            match seg {
                Segment::Zeros(_) => head.fill(0),
                Segment::Data(piece) => jobs.push((piece, head)),
            }
        }
        let cluster = self.cluster();
        let reads: Vec<_> = jobs
            .into_iter()
            .map(|(piece, out)| async move { chunks::read_piece(cluster, &piece, out).await })
            .collect();
        stream::iter(reads)
            .buffer_unordered(self.client.options.parallelism)
            .try_collect::<()>()
            .await
    }

    /// Where every byte of the published version `info` describes lives: its chunk pieces
    /// and holes in data order (what a backup copies, chunk by chunk).
    pub async fn segments_of(&self, info: &VersionInfo) -> Result<Vec<Segment>> {
        operation(self.segments_at(info, 0, info.size)).await
    }

    /// Which providers hold each part of `[offset, offset + size)` at `version`.
    pub async fn locations(
        &self,
        offset: u64,
        size: u64,
        version: Option<Version>,
    ) -> Result<Vec<Location>> {
        operation(self.locations_traced(offset, size, version)).await
    }

    async fn locations_traced(
        &self,
        offset: u64,
        size: u64,
        version: Option<Version>,
    ) -> Result<Vec<Location>> {
        let (_, segments) = self.segments(offset, size, version).await?;
        let mut out: Vec<Location> = Vec::new();
        for seg in segments {
            let span = seg.span();
            let mut providers = Vec::new();
            if let Segment::Data(p) = &seg {
                for id in &p.replicas {
                    providers.push(self.cluster().addr_of(*id).await?);
                }
            }
            match out.last_mut() {
                Some(last)
                    if last.providers == providers && last.offset + last.size == span.offset =>
                {
                    last.size += span.size
                }
                _ => out.push(Location {
                    offset: span.offset,
                    size: span.size,
                    providers,
                }),
            }
        }
        Ok(out)
    }
}

/// Joins segments that continue each other in the same chunk (a chunk that spans two leaf
/// slots), so it is fetched with one request.
fn coalesce(segments: Vec<Segment>) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::with_capacity(segments.len());
    for s in segments {
        match (out.last_mut(), &s) {
            (Some(Segment::Data(a)), Segment::Data(b))
                if a.chunk == b.chunk
                    && a.start + a.len == b.start
                    && a.chunk_offset + a.len == b.chunk_offset =>
            {
                a.len += b.len
            }
            (Some(Segment::Zeros(a)), Segment::Zeros(b)) if a.end() == b.offset => a.size += b.size,
            _ => out.push(s),
        }
    }
    out
}
