//! Whole listings of blobs and of a blob's versions, asked for page by page: a blob appended
//! to for an hour holds millions of versions, far more than one answer may carry.
//!
//! Pages follow ids and version numbers, so a listing shows each blob or version that
//! existed throughout it once; one created meanwhile may be listed, one removed meanwhile
//! (deleted, or expired by retention) may be missing or still listed. A blob deleted during
//! its version listing ends it with `NotFound`.

use std::future::Future;

use tomus_metadata::{BlobId, Version};
use tomus_wire::manager::{ListBlobs, ListVersions, VersionsAttrs};
use tomus_wire::{Attrs, BlobInfo, Result, VersionInfo, VersionList, VersionsFrom};
use tomus_wire::{MAX_ATTRS_LISTING, MAX_LISTING};

use crate::cluster::Cluster;

/// Every blob, in id order.
pub async fn blobs(cluster: &Cluster) -> Result<Vec<BlobInfo>> {
    let limit = MAX_LISTING;
    every_page(
        0,
        limit,
        |b: &BlobInfo| b.id,
        |after| cluster.manager(ListBlobs { after, limit }),
    )
    .await
}

/// Every retained published version of `blob` numbered above `after` (0: all), and the
/// aborted ranges that start above it.
pub async fn versions(cluster: &Cluster, blob: BlobId, after: Version) -> Result<VersionList> {
    let mut all = VersionList {
        versions: Vec::new(),
        aborted: Vec::new(),
    };
    loop {
        let page = cluster
            .manager(ListVersions {
                blob,
                after: all.versions.last().map_or(after, |v| v.version),
                limit: MAX_LISTING,
            })
            .await?;
        let last = page.versions.len() < MAX_LISTING as usize;
        all.versions.extend(page.versions);
        all.aborted.extend(page.aborted);
        if last {
            return Ok(all);
        }
    }
}

/// Every retained published version of `blob` numbered above `after` (0: all), with its
/// attributes.
pub async fn versions_attrs(
    cluster: &Cluster,
    blob: BlobId,
    after: Version,
) -> Result<Vec<(VersionInfo, Attrs)>> {
    let limit = MAX_ATTRS_LISTING;
    let number = |(v, _): &(VersionInfo, Attrs)| v.version;
    every_page(after, limit, number, |after| {
        let from = VersionsFrom::After(after);
        cluster.manager(VersionsAttrs { blob, from, limit })
    })
    .await
}

/// Every entry of a listing, asked for `limit` at a time: each page starts after the `key`
/// of the last entry so far (`first` before the first page), and a page shorter than `limit`
/// is the last.
async fn every_page<T, Page>(
    first: u64,
    limit: u32,
    key: impl Fn(&T) -> u64,
    mut page: impl FnMut(u64) -> Page,
) -> Result<Vec<T>>
where
    Page: Future<Output = Result<Vec<T>>>,
{
    let mut all: Vec<T> = Vec::new();
    loop {
        let after = all.last().map_or(first, &key);
        let got = page(after).await?;
        let last = got.len() < limit as usize;
        all.extend(got);
        if last {
            return Ok(all);
        }
    }
}
