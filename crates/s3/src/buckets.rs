//! Buckets: the top-level directories of the namespace, and their settings (versioning) kept
//! as the attributes of one hidden file per bucket.

use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use tomus_client::{CommitOptions, Replace};
use tomus_wire::{Attrs, EntryKind, ErrorKind, Retention};

use crate::errors::{from_store, s3_err, Missing};
use crate::paths;
use crate::service::Gateway;
use crate::writes::OBJECTS_KEEP;

const VERSIONING: &str = "s3:versioning";
/// What the objects of a bucket without versioning keep: the current version.
const UNVERSIONED_KEEP: Retention = Retention::KeepLast(1);

/// What the gateway knows of an existing bucket.
#[derive(Clone, Debug, Default)]
pub struct BucketState {
    /// "Enabled" or "Suspended"; `None`: never enabled.
    pub versioning: Option<String>,
}

impl BucketState {
    /// Whether deletes leave delete markers and responses name versions.
    pub fn versioned(&self) -> bool {
        self.versioning.as_deref() == Some(BucketVersioningStatus::ENABLED)
    }

    /// What the file of a new object keeps. A bucket that never had versioning keeps only
    /// the current object, as S3 does: an overwritten version is collected after the GC
    /// grace. Once versioning has been enabled (even if suspended since) every version
    /// stays, as the version history S3 would keep.
    pub fn object_retention(&self) -> Retention {
        if self.versioning.is_some() {
            OBJECTS_KEEP
        } else {
            UNVERSIONED_KEEP
        }
    }
}

fn no_such_bucket(name: &str) -> s3s::S3Error {
    s3_err(
        S3ErrorCode::NoSuchBucket,
        format!("The specified bucket does not exist: {name}"),
    )
}

impl Gateway {
    /// The state of bucket `name`; `NoSuchBucket` when it is not a top-level directory.
    pub(crate) async fn bucket(&self, name: &str) -> S3Result<BucketState> {
        if let Some(s) = self.cached_bucket(name) {
            return Ok(s);
        }
        match self.ns.stat(name).await {
            Ok(e) if e.kind == EntryKind::Dir => {}
            Ok(_) => return Err(no_such_bucket(name)),
            Err(e) if e.kind == ErrorKind::NotFound => return Err(no_such_bucket(name)),
            Err(e) => return Err(from_store(e, Missing::Bucket)),
        }
        let settings = match self.ns.object(&paths::bucket_settings(name), None).await {
            Ok((o, _)) => o.attrs,
            Err(e) if e.kind == ErrorKind::NotFound => Attrs::new(),
            Err(e) => return Err(from_store(e, Missing::Bucket)),
        };
        let state = BucketState {
            versioning: settings.get(VERSIONING).cloned(),
        };
        self.cache_bucket(name, Some(state.clone()));
        Ok(state)
    }

    async fn remove_settings(&self, name: &str) -> S3Result<()> {
        match self.ns.delete(&paths::bucket_settings(name), false).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(from_store(e, Missing::Bucket)),
        }
    }

    /// Whether any file lies below the directory `dir`.
    async fn holds_files(&self, dir: &str) -> S3Result<bool> {
        let mut after: Option<String> = None;
        loop {
            let page = self
                .ns
                .list_page(dir, true, after.as_deref(), 1000)
                .await
                .map_err(|e| from_store(e, Missing::Bucket))?;
            if page.iter().any(|e| e.kind == EntryKind::File) {
                return Ok(true);
            }
            if page.len() < 1000 {
                return Ok(false);
            }
            after = page.last().map(|e| e.path.clone());
        }
    }

    /// Gives every file below `dir` the policy of keeping all its versions.
    async fn keep_every_version(&self, dir: &str) -> S3Result<()> {
        let mut after: Option<String> = None;
        loop {
            let page = self
                .ns
                .list_page(dir, true, after.as_deref(), 1000)
                .await
                .map_err(|e| from_store(e, Missing::Bucket))?;
            for file in page.iter().filter(|e| e.kind == EntryKind::File) {
                match self.ns.set_retention(&file.path, Some(OBJECTS_KEEP)).await {
                    Ok(_) => {}
                    // Deleted meanwhile: nothing to keep.
                    Err(e) if e.kind == ErrorKind::NotFound => {}
                    Err(e) => return Err(from_store(e, Missing::Bucket)),
                }
            }
            if page.len() < 1000 {
                return Ok(());
            }
            after = page.last().map(|e| e.path.clone());
        }
    }

    pub(crate) async fn create_bucket_op(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let name = req.input.bucket;
        match self.ns.mkdir(&name, false).await {
            Ok(_) => {}
            // Every bucket is the caller's (tomus has no accounts), and this gateway is in
            // us-east-1, where S3 answers re-creating your own bucket with 200 and leaves it
            // (and its settings) as it is.
            Err(e) if e.kind == ErrorKind::AlreadyExists => {
                return Ok(S3Response::new(CreateBucketOutput {
                    location: Some(format!("/{name}")),
                }))
            }
            Err(e) if e.kind == ErrorKind::NotADirectory => {
                return Err(s3_err(
                    S3ErrorCode::BucketAlreadyExists,
                    format!("a top-level file named {name} exists in the namespace"),
                ))
            }
            Err(e) => return Err(from_store(e, Missing::Bucket)),
        }
        // A bucket removed outside the gateway may have left its settings behind.
        self.remove_settings(&name).await?;
        self.cache_bucket(&name, None);
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{name}")),
        }))
    }

    pub(crate) async fn delete_bucket_op(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let name = req.input.bucket;
        self.bucket(&name).await?;
        match self.ns.delete(&name, false).await {
            Ok(()) => {}
            // Only directories left (made by `tomus fs`, say): empty as far as S3 can see.
            Err(e) if e.kind == ErrorKind::NotEmpty && !self.holds_files(&name).await? => {
                self.ns
                    .delete(&name, true)
                    .await
                    .map_err(|e| from_store(e, Missing::Bucket))?;
            }
            Err(e) if e.kind == ErrorKind::NotEmpty => {
                return Err(s3_err(
                    S3ErrorCode::BucketNotEmpty,
                    format!("The bucket you tried to delete is not empty: {name}"),
                ))
            }
            Err(e) => return Err(from_store(e, Missing::Bucket)),
        }
        self.cache_bucket(&name, None);
        // Uploads in progress go with the bucket.
        let uploads = format!("{}/{name}", paths::UPLOADS_DIR);
        match self.ns.delete(&uploads, true).await {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(from_store(e, Missing::Bucket)),
        }
        self.remove_settings(&name).await?;
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    pub(crate) async fn head_bucket_op(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.bucket(&req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some("us-east-1".into()),
            ..HeadBucketOutput::default()
        }))
    }

    pub(crate) async fn list_buckets_op(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let entries = self
            .ns
            .list("")
            .await
            .map_err(|e| from_store(e, Missing::Bucket))?;
        // Top-level directories whose names are not bucket names (the gateway's own hidden
        // ones, or made by `tomus fs`) are not buckets.
        let buckets = entries
            .into_iter()
            .filter(|e| e.kind == EntryKind::Dir && s3s::path::check_bucket_name(&e.path))
            .map(|e| Bucket {
                name: Some(e.path),
                creation_date: Some(crate::meta::timestamp(e.created_ms)),
                bucket_region: None,
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(owner()),
            ..ListBucketsOutput::default()
        }))
    }

    pub(crate) async fn get_bucket_location_op(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.bucket(&req.input.bucket).await?;
        // No constraint: the default region, as S3 answers for us-east-1.
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    pub(crate) async fn get_bucket_versioning_op(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let state = self.bucket(&req.input.bucket).await?;
        Ok(S3Response::new(GetBucketVersioningOutput {
            status: state.versioning.map(BucketVersioningStatus::from),
            mfa_delete: None,
        }))
    }

    pub(crate) async fn put_bucket_versioning_op(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let name = req.input.bucket;
        let before = self.bucket(&name).await?;
        let status = match req.input.versioning_configuration.status {
            Some(s) => s.as_str().to_string(),
            None => return Ok(S3Response::new(PutBucketVersioningOutput::default())),
        };
        if status != BucketVersioningStatus::ENABLED && status != BucketVersioningStatus::SUSPENDED
        {
            return Err(s3_err(
                S3ErrorCode::MalformedXML,
                format!("versioning status {status:?} is neither Enabled nor Suspended"),
            ));
        }
        let settings = paths::bucket_settings(&name);
        let (_, blob) = self
            .ns
            .create_retained(&settings, self.files, OBJECTS_KEEP)
            .await
            .map_err(|e| from_store(e, Missing::Bucket))?;
        let options = CommitOptions {
            attrs: [(VERSIONING.to_string(), status)].into_iter().collect(),
            expect_size: None,
        };
        blob.writer()
            .commit(Replace::default(), &options)
            .await
            .map_err(|e| from_store(e, Missing::Bucket))?;
        self.cache_bucket(&name, None);
        if before.versioning.is_none() {
            // The objects written before keep only their current version: from now on they
            // keep their history (the current one is S3's "null" version).
            self.keep_every_version(&name).await?;
        }
        Ok(S3Response::new(PutBucketVersioningOutput::default()))
    }
}

/// The one owner every bucket and object has (tomus has no accounts).
pub fn owner() -> Owner {
    Owner {
        display_name: Some("tomus".into()),
        id: Some("tomus".into()),
    }
}
