//! Writing objects: PUT streamed into one version of the file's blob (a replacement, an S3
//! Express append at a checked offset, or an append where the store puts it), and CopyObject
//! as a metadata-only composition.

use futures::StreamExt;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, TrailingHeaders};
use tomus_client::{Append, Blob, BlobWriter, CommitOptions, CreateOptions, Extent, Replace};
use tomus_wire::{ErrorKind, FsEntry, Retention, StorageClass as Class, VersionInfo};

use crate::checksums::{declared_checksums, Verifier};
use crate::conditional::Expect;
use crate::errors::{custom, from_store, object_err, path_conflict, s3_err, Missing};
use crate::md5_lanes::{BodyMd5, LanesGone};
use crate::meta::{self, ObjectMeta};
use crate::objects::{Conditions, Found, EMPTY_MD5};
use crate::paths::{self, Target};
use crate::service::Gateway;
use crate::unsupported;
use crate::version_ids;

/// Extension: append at the offset the store assigns (concurrent appenders never overlap).
pub const APPEND_HEADER: &str = "x-tomus-append";
/// Where such an append landed, and the version it made.
pub const OFFSET_HEADER: &str = "x-tomus-offset";
pub const VERSION_HEADER: &str = "x-tomus-version";

fn invalid_write_offset(detail: &str) -> S3Error {
    custom(
        "InvalidWriteOffset",
        http::StatusCode::BAD_REQUEST,
        format!(
            "The write offset value that you specified does not match the current object size \
             ({detail})"
        ),
    )
}

/// A condition a PUT puts on the current version of its key (`If-Match`), checked again
/// once the body is in, just before the commit (see `conditional.rs`).
struct Guard<'a> {
    path: &'a str,
    key: &'a str,
    expect: Expect,
}

/// What a PUT's body is checked against: its Content-MD5 and flexible checksums, the latter
/// declared in headers or in the trailer of an `aws-chunked` body.
struct Checks<'a> {
    content_md5: Option<&'a str>,
    sums: Verifier,
    trailers: Option<TrailingHeaders>,
}

/// What a PUT does with its body.
enum Mode {
    Replace,
    /// S3 Express One Zone append: the object's size must be this.
    AppendAt(u64),
    /// `x-tomus-append: true`: wherever the store puts it.
    Append,
}

/// Descriptive metadata of a write from its headers.
fn meta_from_input(
    content_type: Option<String>,
    content_encoding: Option<String>,
    content_disposition: Option<String>,
    content_language: Option<String>,
    cache_control: Option<String>,
    user: Option<Metadata>,
) -> ObjectMeta {
    ObjectMeta {
        content_type,
        content_encoding: meta::object_encoding(content_encoding),
        content_disposition,
        content_language,
        cache_control,
        user: user.unwrap_or_default(),
        ..ObjectMeta::default()
    }
}

/// Streams `body` into `writer`, returning its MD5 and length, and feeding `sums` (the
/// flexible checksums, checked by the caller); with `content_md5` (the base64 Content-MD5
/// header), a body whose MD5 differs is refused (`BadDigest`) before anything is committed.
pub(crate) async fn drain(
    body: Option<StreamingBlob>,
    writer: &mut BlobWriter,
    content_md5: Option<&str>,
    sums: &mut Verifier,
) -> S3Result<([u8; 16], u64)> {
    let mut md5 = BodyMd5::default();
    let mut n = 0u64;
    if let Some(mut body) = body {
        while let Some(part) = body.next().await {
            let part = part.map_err(|e| {
                s3_err(
                    S3ErrorCode::IncompleteBody,
                    format!("reading the request body failed: {e}"),
                )
            })?;
            md5.update(&part).await.map_err(md5_lost)?;
            sums.update(&part);
            n += part.len() as u64;
            writer.write(&part).await.map_err(object_err)?;
        }
    }
    let md5 = md5.finish().await.map_err(md5_lost)?;
    if let Some(expected) = content_md5 {
        if base64_simd::STANDARD.encode_to_string(md5) != expected.trim() {
            return Err(s3_err(
                S3ErrorCode::BadDigest,
                "The Content-MD5 you specified did not match what we received.",
            ));
        }
    }
    Ok((md5, n))
}

fn md5_lost(_: LanesGone) -> S3Error {
    s3_err(
        S3ErrorCode::InternalError,
        "computing this upload's MD5 failed in the gateway; its log says why",
    )
}

fn header_is_true(headers: &http::HeaderMap, name: &str) -> bool {
    headers
        .get(name)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}

/// What the gateway's own files keep (bucket settings, multipart uploads and parts, logs of
/// hidden versions), and the objects of buckets that have had versioning (see
/// [`BucketState::object_retention`](crate::buckets::BucketState::object_retention)):
/// every version, rather than the namespace's per-directory policy.
pub(crate) const OBJECTS_KEEP: Retention = Retention::KeepAll;

impl Gateway {
    /// Opens the file of `path` for a new version, creating it (and its parent directories);
    /// `exclusive` refuses an existing file (If-None-Match: *). An empty directory in the
    /// way (left by a deleted "folder") is removed; anything else in the way is a conflict.
    /// Returns the blob and the file's entry: a new file appears only with its first
    /// version, so a request that fails before should give it up (`ns.abandon(&entry)`).
    /// A new file keeps what `retention` says; an existing one keeps its own policy.
    pub(crate) async fn open_for_write(
        &self,
        path: &str,
        exclusive: bool,
        retention: Retention,
    ) -> S3Result<(Blob, FsEntry)> {
        self.open_for_write_in(path, exclusive, retention, Class::Disk)
            .await
    }

    /// [`Gateway::open_for_write`] whose new file is in the storage class `storage` (an
    /// existing one keeps its class).
    pub(crate) async fn open_for_write_in(
        &self,
        path: &str,
        exclusive: bool,
        retention: Retention,
        storage: Class,
    ) -> S3Result<(Blob, FsEntry)> {
        let options = CreateOptions {
            exclusive,
            ..self.files
        };
        for _ in 0..2 {
            match self
                .ns
                .create_in(path, options, Some(retention), storage)
                .await
            {
                Ok((entry, blob)) => return Ok((blob, entry)),
                Err(e) if e.kind == ErrorKind::AlreadyExists && exclusive => {
                    return Err(s3_err(
                        S3ErrorCode::PreconditionFailed,
                        "the object exists (If-None-Match: *)",
                    ))
                }
                // Only a registered file (a workflow output, immutable) refuses a plain write.
                Err(e) if e.kind == ErrorKind::AlreadyExists => {
                    return Err(path_conflict(e.message))
                }
                Err(e) if e.kind == ErrorKind::IsADirectory => {
                    match self.ns.delete(path, false).await {
                        Ok(()) => continue,
                        Err(d) if d.kind == ErrorKind::NotFound => continue,
                        Err(d) if d.kind == ErrorKind::NotEmpty => {
                            return Err(path_conflict(format!(
                                "/{path} is a directory holding other keys (\"{path}/...\"); \
                                 tomus keeps keys as file paths, so a key cannot also be a \
                                 prefix of other keys followed by '/'"
                            )))
                        }
                        Err(d) => return Err(object_err(d)),
                    }
                }
                Err(e) if e.kind == ErrorKind::NotADirectory => {
                    return Err(path_conflict(format!(
                        "a parent of /{path} is an object; tomus keeps keys as file paths, so \
                         a key cannot extend another key with '/' ({})",
                        e.message
                    )))
                }
                Err(e) => return Err(object_err(e)),
            }
        }
        Err(path_conflict(format!("/{path} keeps changing kind; retry")))
    }

    pub(crate) async fn put_object_op(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let tomus_append = header_is_true(&req.headers, APPEND_HEADER);
        let trailers = req.trailing_headers;
        let headers = req.headers;
        let i = req.input;
        unsupported::put_object(&i)?;
        let state = self.bucket(&i.bucket).await?;
        let mode = match (tomus_append, i.write_offset_bytes) {
            (true, _) => Mode::Append,
            (false, Some(o)) => Mode::AppendAt(u64::try_from(o).map_err(|_| {
                s3_err(
                    S3ErrorCode::InvalidArgument,
                    "x-amz-write-offset-bytes is negative",
                )
            })?),
            (false, None) => Mode::Replace,
        };
        let path = match paths::target(&i.bucket, &i.key)? {
            Target::File(p) => p,
            Target::Dir(p) => return self.put_dir(&p, i.body).await,
        };
        let mut described = meta_from_input(
            i.content_type,
            i.content_encoding,
            i.content_disposition,
            i.content_language,
            i.cache_control,
            i.metadata,
        );
        described.expires = i.expires.as_ref().map(meta::unix_seconds);
        // An offset append's claim on its object, held until it commits or fails.
        let mut _claim = None;
        if !matches!(mode, Mode::Replace) {
            let latest = self.latest(&path).await?;
            if let Mode::AppendAt(o) = mode {
                // Refused before the body is read (see offset_appends.rs).
                match &latest {
                    None if o > 0 => {
                        return Err(invalid_write_offset(&format!(
                            "the object does not exist; offset {o}"
                        )))
                    }
                    Some((_, size)) if *size != o => {
                        return Err(invalid_write_offset(&format!(
                            "the object has {size} bytes; offset {o}"
                        )))
                    }
                    _ => {}
                }
                _claim = Some(self.offset_appends.claim(&path).ok_or_else(|| {
                    invalid_write_offset(&format!(
                        "another append at offset {o} to this object is in flight"
                    ))
                })?);
            }
            if described == ObjectMeta::default() {
                // Appends keep the object's content type and user metadata.
                described = latest.map(|(m, _)| m.descriptive()).unwrap_or_default();
            }
        }
        let exclusive = matches!(&i.if_none_match, Some(ETagCondition::Any));
        let guard = Guard {
            path: &path,
            key: &i.key,
            expect: Expect::etag(i.if_match.as_ref()),
        };
        // If-Match on a missing key is 404 and on another ETag 412, before the body is read.
        self.expect_current(&path, &i.key, &guard.expect).await?;
        let declared = declared_checksums!(i);
        let checks = Checks {
            content_md5: i.content_md5.as_deref(),
            sums: Verifier::new(declared, i.checksum_algorithm.as_ref(), &headers)?,
            trailers,
        };
        let storage = if unsupported::is_memory_class(i.storage_class.as_ref()) {
            Class::Memory
        } else {
            Class::Disk
        };
        let (blob, entry) = self
            .open_for_write_in(&path, exclusive, state.object_retention(), storage)
            .await?;
        let written = self
            .write(&blob, mode, &mut described, i.body, checks, &guard)
            .await;
        let (info, headers) = match written {
            Ok(x) => x,
            Err(e) => {
                self.ns.abandon(&entry).await;
                return Err(e);
            }
        };
        let sums = described.checksums.dto();
        let out = PutObjectOutput {
            e_tag: Some(meta::etag_header(&described, blob.id(), info.version)),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            checksum_type: described.checksums.kind(),
            version_id: state
                .versioned()
                .then(|| version_ids::format(blob.id(), info.version)),
            size: Some(info.size as i64),
            ..PutObjectOutput::default()
        };
        Ok(S3Response::with_headers(out, headers))
    }

    /// Streams `body` into one new version of `blob` as `mode` says, with `described`
    /// (given an ETag for replacements) as its metadata, if `guard` still holds once the body
    /// is in. Returns the version and the extension headers of an append.
    async fn write(
        &self,
        blob: &Blob,
        mode: Mode,
        described: &mut ObjectMeta,
        body: Option<StreamingBlob>,
        mut checks: Checks<'_>,
        guard: &Guard<'_>,
    ) -> S3Result<(VersionInfo, http::HeaderMap)> {
        let mut writer = blob.writer();
        let (md5, len) = drain(body, &mut writer, checks.content_md5, &mut checks.sums).await?;
        let trailers = checks.trailers.and_then(|t| t.take());
        let sums = checks.sums.finish(trailers.as_ref())?;
        // The commit publishes only if the blob still has the checked version's size.
        let guarded = self
            .expect_current(guard.path, guard.key, &guard.expect)
            .await?;
        let mut headers = http::HeaderMap::new();
        let expect_size = match mode {
            Mode::Replace => {
                described.etag = Some(meta::hex(&md5));
                described.checksums = sums;
                let options = CommitOptions {
                    attrs: described.to_attrs(),
                    expect_size: guarded,
                };
                let info = writer
                    .commit(Replace::default(), &options)
                    .await
                    .map_err(object_err)?;
                return Ok((info, headers));
            }
            Mode::AppendAt(o) => Some(o),
            Mode::Append => guarded,
        };
        // The checksums checked the appended bytes; the object's whole-content ones no
        // longer hold.
        described.checksums = Default::default();
        if len == 0 {
            return Err(s3_err(S3ErrorCode::InvalidArgument, "empty append"));
        }
        let options = CommitOptions {
            attrs: described.to_attrs(),
            expect_size,
        };
        let info = match writer.commit(Append, &options).await {
            Ok(Some(info)) => info,
            Ok(None) => return Err(s3_err(S3ErrorCode::InvalidArgument, "empty append")),
            Err(e) if e.kind == ErrorKind::PreconditionFailed => {
                return Err(invalid_write_offset(&e.message))
            }
            Err(e) => return Err(object_err(e)),
        };
        if let Ok(v) = http::HeaderValue::from_str(&info.span.offset.to_string()) {
            headers.insert(OFFSET_HEADER, v);
        }
        if let Ok(v) = http::HeaderValue::from_str(&info.version.to_string()) {
            headers.insert(VERSION_HEADER, v);
        }
        Ok((info, headers))
    }

    /// Metadata and size of the latest version of the file at `path` (`None`: no such file).
    async fn latest(&self, path: &str) -> S3Result<Option<(ObjectMeta, u64)>> {
        match self.ns.object(path, None).await {
            Ok((o, _)) => Ok(Some((ObjectMeta::from_attrs(&o.attrs), o.version.size))),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
            // Whatever is in the way, opening the file for the write reports it.
            Err(e) if matches!(e.kind, ErrorKind::IsADirectory | ErrorKind::NotADirectory) => {
                Ok(None)
            }
            Err(e) => Err(object_err(e)),
        }
    }

    /// PUT of a `key/` "folder" object: a directory; only an empty body makes sense.
    async fn put_dir(
        &self,
        path: &str,
        body: Option<StreamingBlob>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        if let Some(mut body) = body {
            while let Some(part) = body.next().await {
                let part = part.map_err(|e| s3_err(S3ErrorCode::IncompleteBody, e.to_string()))?;
                if !part.is_empty() {
                    return Err(s3_err(
                        S3ErrorCode::InvalidArgument,
                        "a key ending in '/' is a directory in tomus and cannot hold data",
                    ));
                }
            }
        }
        self.ns.mkdir(path, true).await.map_err(object_err)?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong(EMPTY_MD5.into())),
            ..PutObjectOutput::default()
        }))
    }

    /// The object a copy reads (`x-amz-copy-source`), once the `x-amz-copy-source-if-*`
    /// `conditions` hold on it: the version, its file's path, and whether the source named
    /// a version.
    pub(crate) async fn copy_source(
        &self,
        source: &CopySource,
        conditions: &Conditions<'_>,
    ) -> S3Result<(Found, String, bool)> {
        let CopySource::Bucket {
            bucket,
            key,
            version_id,
        } = source
        else {
            return Err(s3_err(
                S3ErrorCode::NotImplemented,
                "copy sources must be bucket/key",
            ));
        };
        let src = self.find(bucket, key, version_id.as_deref()).await?;
        conditions.check(
            &src.etag,
            src.modified_ms(),
            S3ErrorCode::PreconditionFailed,
        )?;
        Ok((src, paths::file_path(bucket, key)?, version_id.is_some()))
    }

    pub(crate) async fn copy_object_op(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let i = req.input;
        unsupported::copy_object(&i)?;
        let dst = self.bucket(&i.bucket).await?;
        let conditions = Conditions {
            if_match: i.copy_source_if_match.as_ref(),
            if_none_match: i.copy_source_if_none_match.as_ref(),
            if_modified_since: i.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: i.copy_source_if_unmodified_since.as_ref(),
        };
        let (src, src_path, src_version) = self.copy_source(&i.copy_source, &conditions).await?;
        let replace = i
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let dst_path = paths::file_path(&i.bucket, &i.key)?;
        if dst_path == src_path && !replace && !src_version {
            return Err(s3_err(
                S3ErrorCode::InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself \
                 without changing the object's metadata.",
            ));
        }
        let mut described = if replace {
            let mut m = meta_from_input(
                i.content_type,
                i.content_encoding,
                i.content_disposition,
                i.content_language,
                i.cache_control,
                i.metadata,
            );
            m.expires = i.expires.as_ref().map(meta::unix_seconds);
            m
        } else {
            src.meta.descriptive()
        };
        // The content is the source's: so are its ETag, checksums and part count.
        described.etag = Some(src.etag.clone());
        described.checksums = src.meta.checksums.clone();
        described.parts = src.meta.parts;
        described.part_sizes = src.meta.part_sizes.clone();
        let (blob, entry) = self
            .open_for_write(&dst_path, false, dst.object_retention())
            .await?;
        let source = Extent {
            blob: src.blob.clone(),
            version: src.obj.version.version,
            offset: 0,
            len: src.size(),
        };
        let options = CommitOptions {
            attrs: described.to_attrs(),
            expect_size: None,
        };
        let info = match blob.compose(&[source], &options).await {
            Ok(info) => info,
            Err(e) => {
                self.ns.abandon(&entry).await;
                return Err(from_store(e, Missing::Key));
            }
        };
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(ETag::Strong(src.etag.clone())),
                last_modified: Some(meta::timestamp(info.published_ms)),
                ..CopyObjectResult::default()
            }),
            version_id: dst
                .versioned()
                .then(|| version_ids::format(blob.id(), info.version)),
            copy_source_version_id: src.version_id(),
            ..CopyObjectOutput::default()
        }))
    }
}
