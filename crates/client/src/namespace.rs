//! The file namespace: paths mapped to blobs by the manager (directories, files, rename,
//! delete). A file's content is its blob; every close of a written file is a version.

use tomus_metadata::{BlobId, Version};
use tomus_wire::manager::{
    FsAbandon, FsCreateIn, FsCreateRetained, FsDelete, FsGetRetention, FsList, FsListAttrs,
    FsListSnapshot, FsMkdir, FsObject, FsRename, FsSetRetention, FsStat,
};
use tomus_wire::{
    Attrs, EntryKind, Error, ErrorKind, FsEntry, FsRetention, FsSnapshotPage, ObjectInfo, Result,
    Retention, Rpc, StorageClass, VersionInfo, DEFAULT_CHUNK_SIZE,
};

use crate::{Blob, Client, CommitOptions, Extent};

/// Entries fetched per listing call.
const PAGE: u32 = 1000;
/// Listings started again when the manager let their snapshot go before their last page.
const SNAPSHOT_TRIES: u32 = 3;

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

/// Top-level names starting with this are tomus's own (the S3 gateway keeps its bucket
/// settings, multipart uploads in progress and deleted-version logs there): the namespace
/// of [`Client::namespace`] leaves them out of listings and refuses to change them.
pub const RESERVED_PREFIX: &str = ".tomus-";

/// Whether `path` lies in a reserved top-level directory (see [`RESERVED_PREFIX`]).
pub fn is_reserved(path: &str) -> bool {
    path.split('/')
        .find(|p| !p.is_empty())
        .is_some_and(|first| first.starts_with(RESERVED_PREFIX))
}

/// Refuses a URL given where a new name goes (`s3://b/k`, `tomus://x`, `tomus:/x`): the
/// manager would take it as the path `s3:/b/k` and make a directory named `s3:`. Paths here
/// are `dir/file`; fsspec and `tomus fs` turn `tomus://dir/file` into one before calling.
fn check_not_url(path: &str) -> Result<()> {
    let scheme_len = path
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .unwrap_or(0);
    let starts_alpha = path.starts_with(|c: char| c.is_ascii_alphabetic());
    if starts_alpha && scheme_len > 0 && path[scheme_len..].starts_with(":/") {
        return Err(Error::invalid(format!(
            "path {path:?} is a {}: URL, not a tomus path (dir/file)",
            &path[..scheme_len]
        )));
    }
    Ok(())
}

/// The namespace of a cluster, through one client connection. Cheap to clone.
#[derive(Clone)]
pub struct Namespace {
    client: Client,
    /// Reaches tomus's own reserved names (the S3 gateway).
    internal: bool,
}

impl Client {
    /// The namespace as users see it: reserved names (see [`RESERVED_PREFIX`]) are left out
    /// of listings (but for a listing of a reserved directory itself) and cannot be changed
    /// (`InvalidArgument`), though they can be read.
    pub fn namespace(&self) -> Namespace {
        Namespace {
            client: self.clone(),
            internal: false,
        }
    }

    /// The whole namespace, reserved names included: for tomus's own services.
    pub fn internal_namespace(&self) -> Namespace {
        Namespace {
            client: self.clone(),
            internal: true,
        }
    }
}

impl Namespace {
    /// The client this namespace goes through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn call<R: Rpc>(&self, req: R) -> Result<R::Response> {
        self.client.cluster.manager(req).await
    }

    /// Refuses a change under a reserved name unless this is the internal namespace.
    fn check_changeable(&self, path: &str) -> Result<()> {
        if self.internal || !is_reserved(path) {
            return Ok(());
        }
        let first = path.split('/').find(|p| !p.is_empty()).unwrap_or_default();
        Err(Error::invalid(format!(
            "/{first} is reserved for tomus's own use (top-level names starting with \
             {RESERVED_PREFIX:?} hold the S3 gateway's state); it cannot be changed here"
        )))
    }

    /// Whether a listing of `listed` shows `entry`: reserved names only when asked for by
    /// name (a listing of `/.tomus-uploads` shows what it holds).
    fn shows(&self, listed: &str, entry: &FsEntry) -> bool {
        self.internal || is_reserved(listed) || !is_reserved(&entry.path)
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
        self.check_changeable(path)?;
        check_not_url(path)?;
        let req = FsMkdir {
            path: path.into(),
            parents,
        };
        self.call(req).await
    }

    /// Creates the file `path` on a new blob; an existing file is opened instead unless
    /// `options.exclusive`. A new file (its entry's blob at version 0) appears, with its
    /// missing parent directories, only when its first version is published; a writer that
    /// gives up before should [`Namespace::abandon`] it (else the manager drops it after
    /// the garbage-collection grace). Concurrent creators of one new file share its blob,
    /// as writers of an existing file do; an exclusive one is refused (`AlreadyExists`).
    pub async fn create(&self, path: &str, options: CreateOptions) -> Result<(FsEntry, Blob)> {
        self.create_with(path, options, None).await
    }

    /// [`Namespace::create`] whose new file keeps what `retention` says rather than what
    /// its directory gives new files (see [`Namespace::retention`]); an existing file keeps
    /// its own policy.
    pub async fn create_retained(
        &self,
        path: &str,
        options: CreateOptions,
        retention: Retention,
    ) -> Result<(FsEntry, Blob)> {
        self.create_with(path, options, Some(retention)).await
    }

    /// [`Namespace::create`] whose new file is in the storage class `storage` (an existing
    /// file keeps its own); `retention` as in [`Namespace::create_retained`].
    pub async fn create_in(
        &self,
        path: &str,
        options: CreateOptions,
        retention: Option<Retention>,
        storage: StorageClass,
    ) -> Result<(FsEntry, Blob)> {
        if storage == StorageClass::Disk {
            return self.create_with(path, options, retention).await;
        }
        self.check_changeable(path)?;
        let req = FsCreateIn {
            path: path.into(),
            chunk_size: options.chunk_size,
            replication: options.replication,
            exclusive: options.exclusive,
            retention,
            storage,
        };
        let entry = self.call(req).await?;
        // Not noted as `storage`: a file with nothing written yet may be another writer's,
        // made in its own class. The manager answers the class once, at the first write.
        let blob = self.blob_of(&entry)?;
        Ok((entry, blob))
    }

    /// Creates or opens `path`; a new file keeps what `retention` says (`None`: what its
    /// directory gives new files).
    async fn create_with(
        &self,
        path: &str,
        options: CreateOptions,
        retention: Option<Retention>,
    ) -> Result<(FsEntry, Blob)> {
        self.check_changeable(path)?;
        check_not_url(path)?;
        let req = FsCreateRetained {
            path: path.into(),
            chunk_size: options.chunk_size,
            replication: options.replication,
            exclusive: options.exclusive,
            retention,
        };
        let entry = self.call(req).await?;
        let blob = self.blob_of(&entry)?;
        if entry.blob.as_ref().is_some_and(|b| b.latest == 0) {
            // A file with nothing written yet: made by this request, in the disk class, or
            // by another writer being created. Either way this writer asked for the disk
            // class, so its chunks are disk chunks (at worst some of a memory-class file
            // another writer is making land on disk, durable). Spares every new file a
            // request to the manager at its first write.
            self.client.note_class(blob.id(), StorageClass::Disk);
        }
        Ok((entry, blob))
    }

    /// The retention policy of the file `path`, or the one the directory `path` gives the
    /// files created below it (its own, its nearest ancestor's, or
    /// [`DEFAULT_FILE_RETENTION`](tomus_wire::DEFAULT_FILE_RETENTION)), and where it comes
    /// from.
    pub async fn retention(&self, path: &str) -> Result<FsRetention> {
        self.call(FsGetRetention { path: path.into() }).await
    }

    /// Sets the policy of the file `path` (applied at once), or the one the directory `path`
    /// gives the files created below it from now on (files already there keep theirs);
    /// `None` makes a directory follow its parent again.
    pub async fn set_retention(
        &self,
        path: &str,
        retention: Option<Retention>,
    ) -> Result<FsRetention> {
        self.check_changeable(path)?;
        let req = FsSetRetention {
            path: path.into(),
            retention,
        };
        self.call(req).await
    }

    /// Gives up the new file `entry` (as [`Namespace::create`] returned it) when nothing was
    /// published: it never appears. Does nothing for a file that has a version. Best effort:
    /// should the manager not hear of it, it drops the file after its grace.
    pub async fn abandon(&self, entry: &FsEntry) {
        if let Some(blob) = entry.blob.as_ref().filter(|b| b.latest == 0) {
            if let Err(e) = self.abandon_new(&entry.path, blob.id).await {
                tracing::info!("giving up the new file /{}: {e}", entry.path);
            }
        }
    }

    /// [`Namespace::abandon`] by path and blob id (nothing happens unless `path` is a new
    /// file of `blob` with nothing published).
    pub async fn abandon_new(&self, path: &str, blob: BlobId) -> Result<()> {
        let req = FsAbandon {
            path: path.into(),
            blob,
        };
        self.call(req).await
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
        let mut page = self.list_raw(path, recursive, start_after, limit).await?;
        page.retain(|e| self.shows(path, e));
        Ok(page)
    }

    /// One page as the manager returned it, reserved names included.
    async fn list_raw(
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
        let mut page = self.call(req).await?;
        page.retain(|(e, _)| self.shows(path, e));
        Ok(page)
    }

    async fn list_all(&self, path: &str, recursive: bool) -> Result<Vec<FsEntry>> {
        let mut attempt = 1;
        loop {
            match self.list_snapshot(path, recursive).await {
                // The manager let the snapshot go (idle, or pushed out by other listings):
                // start again, on a new one.
                Err(e) if e.kind == ErrorKind::PreconditionFailed && attempt < SNAPSHOT_TRIES => {
                    attempt += 1;
                }
                done => return done,
            }
        }
    }

    /// Every page of a listing, all read from the snapshot of the tree its first page took.
    async fn list_snapshot(&self, path: &str, recursive: bool) -> Result<Vec<FsEntry>> {
        let mut out: Vec<FsEntry> = Vec::new();
        let mut snapshot = None;
        let mut after: Option<String> = None;
        loop {
            let req = FsListSnapshot {
                path: path.into(),
                recursive,
                snapshot,
                start_after: after.clone(),
                limit: PAGE,
            };
            let page: FsSnapshotPage = self.call(req).await?;
            after = page.entries.last().map(|e| e.path.clone());
            // Filtered after the cut, so a page thinned by hidden names is not taken for the
            // last one.
            out.extend(page.entries.into_iter().filter(|e| self.shows(path, e)));
            match page.snapshot {
                Some(id) => snapshot = Some(id),
                None => return Ok(out),
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
        self.check_changeable(from)?;
        self.check_changeable(to)?;
        check_not_url(to)?;
        let req = FsRename {
            from: from.into(),
            to: to.into(),
        };
        self.call(req).await
    }

    /// Removes a file, or a directory (everything below it when `recursive`).
    pub async fn delete(&self, path: &str, recursive: bool) -> Result<()> {
        self.check_changeable(path)?;
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
                // A new file appears only with its first version: give it up now.
                self.abandon(&entry).await;
                Err(e)
            }
        }
    }
}
