//! The file namespace: paths mapped to blobs by the manager (directories, files, rename,
//! delete). A file's content is its blob; every close of a written file is a version.

use tomus_metadata::Version;
use tomus_wire::manager::{
    FsCreate, FsDelete, FsList, FsListAttrs, FsMkdir, FsObject, FsRename, FsStat,
};
use tomus_wire::{
    Attrs, EntryKind, Error, ErrorKind, FsEntry, ObjectInfo, Result, Rpc, VersionInfo,
    DEFAULT_CHUNK_SIZE,
};

use crate::{Blob, Client, CommitOptions, Extent};

/// Entries fetched per listing call.
const PAGE: u32 = 1000;

/// How `create` makes a new file.
#[derive(Clone, Copy, Debug)]
pub struct CreateOptions {
    pub chunk_size: u64,
    pub replication: u32,
    /// Fail with `AlreadyExists` instead of returning an existing file.
    pub exclusive: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            chunk_size: DEFAULT_CHUNK_SIZE,
            replication: 1,
            exclusive: false,
        }
    }
}

/// The namespace of a cluster, through one client connection. Cheap to clone.
#[derive(Clone)]
pub struct Namespace {
    client: Client,
}

impl Client {
    pub fn namespace(&self) -> Namespace {
        Namespace {
            client: self.clone(),
        }
    }
}

impl Namespace {
    async fn call<R: Rpc>(&self, req: R) -> Result<R::Response> {
        self.client.cluster.manager(req).await
    }

    /// The blob of a file entry.
    fn blob_of(&self, entry: &FsEntry) -> Result<Blob> {
        match (&entry.kind, &entry.blob) {
            (EntryKind::File, Some(info)) => Ok(self.client.blob_handle(info.clone())),
            _ => Err(Error::new(
                ErrorKind::IsADirectory,
                format!("/{} is a directory", entry.path),
            )),
        }
    }

    pub async fn stat(&self, path: &str) -> Result<FsEntry> {
        self.call(FsStat { path: path.into() }).await
    }

    /// Makes a directory; with `parents`, also its missing parents, and an existing
    /// directory is fine.
    pub async fn mkdir(&self, path: &str, parents: bool) -> Result<FsEntry> {
        let req = FsMkdir {
            path: path.into(),
            parents,
        };
        self.call(req).await
    }

    /// Creates the file `path` (and its missing parent directories) on a new blob; an
    /// existing file is opened instead unless `options.exclusive`.
    pub async fn create(&self, path: &str, options: CreateOptions) -> Result<(FsEntry, Blob)> {
        let req = FsCreate {
            path: path.into(),
            chunk_size: options.chunk_size,
            replication: options.replication,
            exclusive: options.exclusive,
        };
        let entry = self.call(req).await?;
        let blob = self.blob_of(&entry)?;
        Ok((entry, blob))
    }

    /// Opens an existing file.
    pub async fn open(&self, path: &str) -> Result<(FsEntry, Blob)> {
        let entry = self.stat(path).await?;
        let blob = self.blob_of(&entry)?;
        Ok((entry, blob))
    }

    /// One page of the entries under the directory `path`, in path order: its children, or
    /// every descendant when `recursive`; only paths after `start_after`.
    pub async fn list_page(
        &self,
        path: &str,
        recursive: bool,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<FsEntry>> {
        let req = FsList {
            path: path.into(),
            recursive,
            start_after: start_after.map(str::to_string),
            limit,
        };
        self.call(req).await
    }

    /// The file `path` with one of its versions (`None`: the latest published) and that
    /// version's attributes, in one round trip.
    pub async fn object(&self, path: &str, version: Option<Version>) -> Result<(ObjectInfo, Blob)> {
        let req = FsObject {
            path: path.into(),
            version,
        };
        let o = self.call(req).await?;
        let blob = self.blob_of(&o.entry)?;
        // Reads of this version need not ask the manager for its record again.
        self.client.versions.insert(&o.version);
        Ok((o, blob))
    }

    /// [`Namespace::list_page`] with the attributes of each file's latest published version
    /// (empty for directories).
    pub async fn list_page_attrs(
        &self,
        path: &str,
        recursive: bool,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<(FsEntry, Attrs)>> {
        let req = FsListAttrs {
            path: path.into(),
            recursive,
            start_after: start_after.map(str::to_string),
            limit,
        };
        self.call(req).await
    }

    async fn list_all(&self, path: &str, recursive: bool) -> Result<Vec<FsEntry>> {
        let mut out: Vec<FsEntry> = Vec::new();
        loop {
            let after = out.last().map(|e| e.path.clone());
            let page = self
                .list_page(path, recursive, after.as_deref(), PAGE)
                .await?;
            let full = page.len() == PAGE as usize;
            out.extend(page);
            if !full {
                return Ok(out);
            }
        }
    }

    /// The children of the directory `path`.
    pub async fn list(&self, path: &str) -> Result<Vec<FsEntry>> {
        self.list_all(path, false).await
    }

    /// Every entry below the directory `path`, in path order.
    pub async fn walk(&self, path: &str) -> Result<Vec<FsEntry>> {
        self.list_all(path, true).await
    }

    /// Moves a file or a directory tree (an existing file at `to` is replaced).
    pub async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let req = FsRename {
            from: from.into(),
            to: to.into(),
        };
        self.call(req).await
    }

    /// Removes a file, or a directory (everything below it when `recursive`).
    pub async fn delete(&self, path: &str, recursive: bool) -> Result<()> {
        let req = FsDelete {
            path: path.into(),
            recursive,
        };
        self.call(req).await
    }

    /// Copies the file `from` (at `version`; `None`: its latest published) to `to` without
    /// copying data, as S3's CopyObject does: the new version of `to` refers to the chunks
    /// `from`'s bytes are stored in, and carries the same attributes. A new `to` gets `from`'s
    /// chunk size and replication; an existing file gets the copy as its new version. The two
    /// are independent from then on. Returns the version of `to` written.
    pub async fn copy(
        &self,
        from: &str,
        to: &str,
        version: Option<Version>,
    ) -> Result<VersionInfo> {
        let (src, src_blob) = self.object(from, version).await?;
        if src.entry.path == to.trim_matches('/') {
            return Err(Error::invalid(format!(
                "/{} cannot be copied onto itself",
                src.entry.path
            )));
        }
        let options = CreateOptions {
            chunk_size: src_blob.chunk_size(),
            replication: src_blob.replication(),
            exclusive: false,
        };
        let (entry, blob) = self.create(to, options).await?;
        let fresh = entry.blob.as_ref().is_some_and(|b| b.latest == 0);
        let extent = Extent {
            blob: src_blob,
            version: src.version.version,
            offset: 0,
            len: src.version.size,
        };
        let sources: Vec<Extent> = if extent.len == 0 {
            Vec::new()
        } else {
            vec![extent]
        };
        let options = CommitOptions {
            attrs: src.attrs,
            expect_size: None,
        };
        match blob.compose(&sources, &options).await {
            Ok(info) => Ok(info),
            Err(e) => {
                if fresh {
                    // Nothing was published: the new name goes (best effort).
                    let _ = self.delete(&entry.path, false).await;
                }
                Err(e)
            }
        }
    }
}
