//! A handle on one blob, and what the manager says of its versions.

use tomus_metadata::{BlobId, Version};
use tomus_wire::manager::{GetVersion, VersionsAttrs};
use tomus_wire::{Attrs, BlobInfo, Result, VersionInfo, VersionList, VersionsFrom};

use crate::cluster::Cluster;
use crate::Client;

/// A handle on one blob. Cheap to clone.
#[derive(Clone)]
pub struct Blob {
    pub(crate) client: Client,
    pub(crate) id: BlobId,
    pub(crate) chunk_size: u64,
    pub(crate) replication: u32,
}

/// A byte range of a published version of a blob: one source of [`Blob::compose`].
#[derive(Clone)]
pub struct Extent {
    pub blob: Blob,
    pub version: Version,
    pub offset: u64,
    pub len: u64,
}

/// Where a range of a blob version is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub offset: u64,
    pub size: u64,
    /// Provider addresses holding the range (empty: a hole, reads as zeros).
    pub providers: Vec<String>,
}

impl Blob {
    pub(crate) fn new(client: Client, info: &BlobInfo) -> Self {
        Blob {
            client,
            id: info.id,
            chunk_size: info.chunk_size,
            replication: info.replication,
        }
    }

    pub fn id(&self) -> BlobId {
        self.id
    }
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }
    pub fn replication(&self) -> u32 {
        self.replication
    }

    pub(crate) fn cluster(&self) -> &Cluster {
        &self.client.cluster
    }

    /// The record of `version` (`None`: the latest published). A published version's record
    /// never changes, so one read before is served from the client's cache without asking the
    /// manager; the latest is always asked for.
    pub async fn stat(&self, version: Option<Version>) -> Result<VersionInfo> {
        let cache = &self.client.versions;
        if let Some(info) = version.and_then(|v| cache.get(self.id, v)) {
            return Ok(info);
        }
        let req = GetVersion {
            blob: self.id,
            version,
        };
        let info = self.cluster().manager(req).await?;
        cache.insert(&info);
        Ok(info)
    }

    /// The record of `version` as the manager has it now (not from the cache).
    pub(crate) async fn stat_fresh(&self, version: Version) -> Result<VersionInfo> {
        self.client.versions.forget(self.id, version);
        self.stat(Some(version)).await
    }

    pub async fn latest(&self) -> Result<Version> {
        Ok(self.stat(None).await?.version)
    }

    pub async fn size(&self, version: Option<Version>) -> Result<u64> {
        Ok(self.stat(version).await?.size)
    }

    /// Every retained published version with its attributes (see [`crate::listing`]).
    pub async fn versions_attrs(&self) -> Result<Vec<(VersionInfo, Attrs)>> {
        self.versions_attrs_after(0).await
    }

    /// [`Blob::versions_attrs`] of the versions numbered above `after`.
    pub async fn versions_attrs_after(&self, after: Version) -> Result<Vec<(VersionInfo, Attrs)>> {
        crate::listing::versions_attrs(self.cluster(), self.id, after).await
    }

    /// One page of [`Blob::versions_attrs`]: the first `limit` (at most
    /// [`tomus_wire::MAX_ATTRS_LISTING`]) retained published versions from `from` on, in its
    /// order; fewer than `limit`, the last page.
    pub async fn versions_attrs_page(
        &self,
        from: VersionsFrom,
        limit: u32,
    ) -> Result<Vec<(VersionInfo, Attrs)>> {
        let blob = self.id;
        let req = VersionsAttrs { blob, from, limit };
        self.cluster().manager(req).await
    }

    /// Every retained published version and the aborted ranges (see [`crate::listing`]).
    pub async fn versions(&self) -> Result<VersionList> {
        self.versions_after(0).await
    }

    /// [`Blob::versions`] of the versions numbered above `after`, with the aborted ranges
    /// that start above it.
    pub async fn versions_after(&self, after: Version) -> Result<VersionList> {
        crate::listing::versions(self.cluster(), self.id, after).await
    }
}
