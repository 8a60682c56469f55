//! The gateway state and the `s3s::S3` trait: each operation is implemented in the module of
//! its resource (buckets, objects, listing, multipart); this file only routes to them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};
use tomus_client::{Client, CreateOptions, Namespace};

use crate::buckets::BucketState;
use crate::objects::WINDOW;
use crate::offset_appends::InFlight;
use crate::windows::WindowPool;

/// Idle GET windows kept for reuse (at most 64 MiB).
const IDLE_WINDOWS: usize = 32;

/// How long a bucket's existence and settings are trusted without asking the manager again
/// (a bucket removed by another gateway or `tomus fs` may be seen for this long).
const BUCKET_TTL: Duration = Duration::from_secs(1);

/// The S3 service over one cluster. Cheap to share: one per gateway process.
pub struct Gateway {
    pub(crate) client: Client,
    pub(crate) ns: Namespace,
    /// How new object files are created.
    pub(crate) files: CreateOptions,
    buckets: Mutex<HashMap<String, (Instant, BucketState)>>,
    /// Recycled read buffers of streamed GETs.
    pub(crate) windows: Arc<WindowPool>,
    /// Objects with an S3 Express offset append in flight.
    pub(crate) offset_appends: InFlight,
}

impl Gateway {
    pub fn new(client: Client, files: CreateOptions) -> Gateway {
        Gateway {
            ns: client.internal_namespace(),
            client,
            files: CreateOptions {
                exclusive: false,
                ..files
            },
            buckets: Mutex::new(HashMap::new()),
            windows: WindowPool::new(WINDOW as usize, IDLE_WINDOWS),
            offset_appends: InFlight::default(),
        }
    }

    pub(crate) fn cached_bucket(&self, name: &str) -> Option<BucketState> {
        let cache = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        match cache.get(name) {
            Some((at, state)) if at.elapsed() < BUCKET_TTL => Some(state.clone()),
            _ => None,
        }
    }

    pub(crate) fn cache_bucket(&self, name: &str, state: Option<BucketState>) {
        let mut cache = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        match state {
            Some(s) => cache.insert(name.to_string(), (Instant::now(), s)),
            None => cache.remove(name),
        };
    }
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.create_bucket_op(req).await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        self.delete_bucket_op(req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.head_bucket_op(req).await
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        self.list_buckets_op(req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.get_bucket_location_op(req).await
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        self.get_bucket_versioning_op(req).await
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        self.put_bucket_versioning_op(req).await
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        self.put_object_op(req).await
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        self.get_object_op(req).await
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        self.head_object_op(req).await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        self.get_object_attributes_op(req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.delete_object_op(req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.delete_objects_op(req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        self.upload_part_copy_op(req).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        self.copy_object_op(req).await
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        self.list_objects_op(req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        self.list_objects_v2_op(req).await
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        self.list_object_versions_op(req).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.create_multipart_upload_op(req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.upload_part_op(req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        self.list_parts_op(req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        self.list_multipart_uploads_op(req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.abort_multipart_upload_op(req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.complete_multipart_upload_op(req).await
    }
}
