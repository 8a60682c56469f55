//! Reading objects: GET and HEAD of a version (conditional, ranged, streamed out in windows),
//! and the lookup every read and copy starts with.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use s3s::dto::*;
use s3s::stream::{ByteStream, RemainingLength};
use s3s::{Body, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, StdError};
use tokio::sync::mpsc;
use tomus_client::Blob;
use tomus_wire::{ErrorKind, ObjectInfo, VersionInfo};

use crate::buckets::BucketState;
use crate::errors::{object_err, s3_err};
use crate::meta::{self, ObjectMeta};
use crate::paths::{self, Target};
use crate::service::Gateway;
use crate::unsupported;
use crate::version_ids;
use crate::windows::WindowPool;

/// Bytes read from the store per request of a streamed GET, and how many are in flight.
/// Small windows keep what the store wrote into a buffer in cache until hyper sends it:
/// under 8 concurrent 128 MiB GETs, 2 MiB × 3 moved 1.5-2.5x the bytes of 16 MiB × 2 for
/// ~20% less gateway CPU per byte (noisy machine; 1 MiB × 4 was level, 8 MiB × 2 between).
pub(crate) const WINDOW: u64 = 2 << 20;
const WINDOWS_AHEAD: usize = 3;
/// The first window, read before the response starts (so a read error is a proper S3 error).
const FIRST_WINDOW: u64 = 1 << 20;
/// MD5 of no bytes: the ETag of directory ("folder") objects.
pub(crate) const EMPTY_MD5: &str = "d41d8cd98f00b204e9800998ecf8427e";

/// An object version found for a read.
pub(crate) struct Found {
    pub obj: ObjectInfo,
    pub blob: Blob,
    pub meta: ObjectMeta,
    pub etag: String,
    pub bucket: BucketState,
}

impl Found {
    pub fn size(&self) -> u64 {
        self.obj.version.size
    }

    /// When this version was published (creation time for a file never written).
    pub fn modified_ms(&self) -> u64 {
        match self.obj.version.published_ms {
            0 => self.obj.entry.created_ms,
            t => t,
        }
    }

    pub fn version_id(&self) -> Option<String> {
        self.bucket
            .versioned()
            .then(|| version_ids::format(self.blob.id(), self.obj.version.version))
    }
}

/// Conditional request headers.
#[derive(Default)]
pub(crate) struct Conditions<'a> {
    pub if_match: Option<&'a ETagCondition>,
    pub if_none_match: Option<&'a ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
}

pub(crate) fn etag_matches(cond: &ETagCondition, etag: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag,
    }
}

impl Conditions<'_> {
    /// RFC 9110 evaluation as S3 does it: If-Match (else If-Unmodified-Since) failing is 412;
    /// If-None-Match (else If-Modified-Since) failing is 304 for reads (`not_modified`),
    /// 412 otherwise (copy sources).
    pub fn check(&self, etag: &str, modified_ms: u64, not_modified: S3ErrorCode) -> S3Result<()> {
        let secs = (modified_ms / 1000) as i64;
        let failed = |m: &str| Err(s3_err(S3ErrorCode::PreconditionFailed, m.to_string()));
        match (self.if_match, self.if_unmodified_since) {
            (Some(m), _) if !etag_matches(m, etag) => return failed("If-Match did not match"),
            (None, Some(t)) if secs > meta::unix_seconds(t) => {
                return failed("modified since If-Unmodified-Since")
            }
            _ => {}
        }
        let unchanged = match (self.if_none_match, self.if_modified_since) {
            (Some(m), _) => etag_matches(m, etag),
            (None, Some(t)) => secs <= meta::unix_seconds(t),
            (None, None) => false,
        };
        if unchanged {
            let mut e = S3Error::with_message(not_modified, "Not Modified");
            // A 304 names the representation the client already has (RFC 9110 15.4.5).
            if let Ok(v) = http::HeaderValue::from_str(&format!("\"{etag}\"")) {
                let mut headers = http::HeaderMap::new();
                headers.insert(http::header::ETAG, v);
                e.set_headers(headers);
            }
            return Err(e);
        }
        Ok(())
    }
}

/// The checksums a GET or HEAD answers with: those of the version, when the client asked
/// (`x-amz-checksum-mode: ENABLED`) and reads the whole object (they describe only that).
fn shown_checksums(mode: Option<&ChecksumMode>, whole: bool, f: &Found) -> Checksum {
    let asked = mode.is_some_and(|m| m.as_str() == ChecksumMode::ENABLED);
    if asked && whole {
        f.meta.checksums.dto()
    } else {
        Checksum::default()
    }
}

/// The bytes `[start, end)` a Range asks for, or `InvalidRange`.
pub(crate) fn byte_range(range: Option<&Range>, size: u64) -> S3Result<Option<(u64, u64)>> {
    let Some(r) = range else { return Ok(None) };
    match r.check(size) {
        Ok(r) => Ok(Some((r.start, r.end))),
        Err(_) => Err(s3_err(
            S3ErrorCode::InvalidRange,
            format!("The requested range is not satisfiable (object size {size})"),
        )),
    }
}

/// The bytes `[start, end)` a read asks for: the `Range`, or part `part` (`partNumber`) of a
/// multipart object, whose part sizes the version keeps. Part 1 of an object that was not
/// uploaded in parts is the whole object (as in S3).
pub(crate) fn read_range(
    range: Option<&Range>,
    part: Option<i32>,
    f: &Found,
) -> S3Result<Option<(u64, u64)>> {
    let Some(n) = part else {
        return byte_range(range, f.size());
    };
    if range.is_some() {
        return Err(s3_err(
            S3ErrorCode::InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter",
        ));
    }
    let no_part = |count: usize| {
        Err(crate::errors::custom(
            "InvalidPartNumber",
            http::StatusCode::RANGE_NOT_SATISFIABLE,
            format!("the object has {count} part(s); part {n} does not exist"),
        ))
    };
    if f.meta.parts.is_none() {
        return if n == 1 { Ok(None) } else { no_part(1) };
    }
    let Some(sizes) = &f.meta.part_sizes else {
        return Err(s3_err(
            S3ErrorCode::NotImplemented,
            "this multipart object was completed without recording its part sizes (too many \
             different sizes, or an older gateway); use Range",
        ));
    };
    if n < 1 || n as usize > sizes.len() {
        return no_part(sizes.len());
    }
    let start: u64 = sizes[..n as usize - 1].iter().sum();
    Ok(Some((start, start + sizes[n as usize - 1])))
}

/// A response body fed by a task that reads the object window by window.
struct Windows {
    rx: mpsc::Receiver<Result<Bytes, StdError>>,
    remaining: usize,
}

impl Stream for Windows {
    type Item = Result<Bytes, StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let p = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(Ok(b))) = &p {
            self.remaining = self.remaining.saturating_sub(b.len());
        }
        p
    }
}

impl ByteStream for Windows {
    fn remaining_length(&self) -> RemainingLength {
        RemainingLength::new_exact(self.remaining)
    }
}

/// Bytes `[offset, offset + len)` of a version, in pieces: the chunk files' own pages where
/// they are on this host (no copy), else a window from `pool`.
async fn read_window(
    pool: &Arc<WindowPool>,
    blob: &Blob,
    info: &VersionInfo,
    offset: u64,
    len: u64,
) -> S3Result<Vec<Bytes>> {
    blob.read_version_bytes(info, offset, len, |n| pool.take(n))
        .await
        .map_err(object_err)
}

/// The body of bytes `[start, end)` of a version. One window is read before answering, so a
/// small object's read errors are proper S3 errors; larger ones stream, `WINDOWS_AHEAD`
/// windows ahead.
async fn body(
    pool: Arc<WindowPool>,
    blob: Blob,
    info: VersionInfo,
    start: u64,
    end: u64,
) -> S3Result<StreamingBlob> {
    let first = (end - start).min(FIRST_WINDOW);
    let mut head = read_window(&pool, &blob, &info, start, first).await?;
    if start + first == end && head.len() == 1 {
        return Ok(StreamingBlob::from(Body::from(head.remove(0))));
    }
    // Pieces, not windows: a window comes as one piece per chunk it spans.
    let (tx, rx) = mpsc::channel(2 * WINDOWS_AHEAD);
    tokio::spawn(async move {
        let windows = (start + first..end)
            .step_by(WINDOW as usize)
            .map(|o| (o, WINDOW.min(end - o)));
        let reads = futures::stream::iter(windows)
            .map(|(o, n)| {
                let (pool, blob, info) = (&pool, &blob, &info);
                async move { read_window(pool, blob, info, o, n).await }
            })
            .buffered(WINDOWS_AHEAD);
        let mut reads = std::pin::pin!(futures::stream::once(async { Ok(head) }).chain(reads));
        while let Some(r) = reads.next().await {
            match r {
                Ok(pieces) => {
                    for piece in pieces {
                        // A closed channel: the client went away.
                        if tx.send(Ok(piece)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(Box::new(e) as StdError)).await;
                    return;
                }
            }
        }
    });
    Ok(StreamingBlob::new(Windows {
        rx,
        remaining: (end - start) as usize,
    }))
}

impl Gateway {
    /// The object version `key` (at `version_id`) names, for reads; delete markers are
    /// reported as S3 does.
    pub(crate) async fn find(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> S3Result<Found> {
        let state = self.bucket(bucket).await?;
        let path = paths::file_path(bucket, key)?;
        let version_id = match version_id {
            // The current object of a bucket that never had versioning.
            Some(version_ids::NULL) if state.versioning.is_none() => None,
            Some(version_ids::NULL) => {
                return Err(s3_err(
                    S3ErrorCode::NoSuchVersion,
                    format!(
                    "{key}: tomus keeps no \"null\" version in a bucket that has had versioning"
                ),
                ))
            }
            other => other,
        };
        let wanted = version_ids::parse(version_id)?;
        let version = wanted.map(|w| w.version);
        let (obj, blob) = match self.ns.object(&path, version).await {
            Ok(x) => x,
            Err(e) => {
                let missing = match e.kind {
                    _ if version.is_some() => S3ErrorCode::NoSuchVersion,
                    ErrorKind::NotFound | ErrorKind::IsADirectory | ErrorKind::NotADirectory => {
                        S3ErrorCode::NoSuchKey
                    }
                    _ => return Err(object_err(e)),
                };
                return Err(s3_err(missing, format!("{key}: {}", e.message)));
            }
        };
        if let Some(w) = wanted {
            // An id of an earlier object of this key (removed since) names nothing now.
            if !w.of(blob.id()) {
                return Err(s3_err(
                    S3ErrorCode::NoSuchVersion,
                    format!("{key}: no version {:?}", version_id.unwrap_or_default()),
                ));
            }
            let v = w.version;
            if self.hidden_versions(blob.id()).await?.contains(&v) {
                return Err(s3_err(
                    S3ErrorCode::NoSuchVersion,
                    format!("{key}: version {v} was deleted"),
                ));
            }
        }
        let meta = ObjectMeta::from_attrs(&obj.attrs);
        if meta.delete_marker {
            let mut headers = http::HeaderMap::new();
            headers.insert(
                "x-amz-delete-marker",
                http::HeaderValue::from_static("true"),
            );
            let id = version_ids::format(blob.id(), obj.version.version);
            if let Ok(v) = http::HeaderValue::from_str(&id) {
                headers.insert("x-amz-version-id", v);
            }
            let mut e = match version {
                Some(_) => s3_err(
                    S3ErrorCode::MethodNotAllowed,
                    "The specified method is not allowed against a delete marker",
                ),
                None => s3_err(S3ErrorCode::NoSuchKey, format!("{key} was deleted")),
            };
            e.set_headers(headers);
            return Err(e);
        }
        let etag = meta::etag(&meta, blob.id(), obj.version.version);
        Ok(Found {
            obj,
            blob,
            meta,
            etag,
            bucket: state,
        })
    }

    /// The creation time of the directory a `key/` names (an empty "folder" object).
    pub(crate) async fn find_dir(&self, bucket: &str, path: &str, key: &str) -> S3Result<u64> {
        self.bucket(bucket).await?;
        match self.ns.stat(path).await {
            Ok(e) if e.kind == tomus_wire::EntryKind::Dir => Ok(e.created_ms),
            Ok(_) => Err(s3_err(S3ErrorCode::NoSuchKey, key.to_string())),
            Err(e) if e.kind == ErrorKind::NotFound || e.kind == ErrorKind::NotADirectory => {
                Err(s3_err(S3ErrorCode::NoSuchKey, key.to_string()))
            }
            Err(e) => Err(object_err(e)),
        }
    }

    pub(crate) async fn get_object_op(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let i = req.input;
        unsupported::customer_key(
            i.sse_customer_algorithm.as_ref(),
            i.sse_customer_key.as_ref(),
            i.sse_customer_key_md5.as_ref(),
        )?;
        if let Target::Dir(path) = paths::target(&i.bucket, &i.key)? {
            let created = self.find_dir(&i.bucket, &path, &i.key).await?;
            return Ok(S3Response::new(GetObjectOutput {
                body: Some(StreamingBlob::from(Body::empty())),
                content_length: Some(0),
                e_tag: Some(ETag::Strong(EMPTY_MD5.into())),
                last_modified: Some(meta::timestamp(created)),
                content_type: Some(meta::DEFAULT_CONTENT_TYPE.into()),
                ..GetObjectOutput::default()
            }));
        }
        let f = self
            .find(&i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        let conditions = Conditions {
            if_match: i.if_match.as_ref(),
            if_none_match: i.if_none_match.as_ref(),
            if_modified_since: i.if_modified_since.as_ref(),
            if_unmodified_since: i.if_unmodified_since.as_ref(),
        };
        conditions.check(&f.etag, f.modified_ms(), S3ErrorCode::NotModified)?;
        let size = f.size();
        let range = read_range(i.range.as_ref(), i.part_number, &f)?;
        let (start, end) = range.unwrap_or((0, size));
        let sums = shown_checksums(i.checksum_mode.as_ref(), range.is_none(), &f);
        let body = if start == end {
            StreamingBlob::from(Body::empty())
        } else {
            body(
                self.windows.clone(),
                f.blob.clone(),
                f.obj.version.clone(),
                start,
                end,
            )
            .await?
        };
        let m = &f.meta;
        Ok(S3Response::new(GetObjectOutput {
            body: Some(body),
            content_length: Some((end - start) as i64),
            content_range: range
                .filter(|(s, e)| e > s)
                .map(|(s, e)| format!("bytes {s}-{}/{size}", e - 1)),
            accept_ranges: Some("bytes".into()),
            content_type: Some(m.content_type_or_default()),
            content_encoding: m.content_encoding.clone(),
            content_disposition: m.content_disposition.clone(),
            content_language: m.content_language.clone(),
            cache_control: m.cache_control.clone(),
            expires: m.expires_header(),
            checksum_crc32: sums.checksum_crc32.clone(),
            checksum_crc32c: sums.checksum_crc32c.clone(),
            checksum_crc64nvme: sums.checksum_crc64nvme.clone(),
            checksum_sha1: sums.checksum_sha1.clone(),
            checksum_sha256: sums.checksum_sha256.clone(),
            checksum_type: (sums != Checksum::default())
                .then(|| f.meta.checksums.kind())
                .flatten(),
            e_tag: Some(ETag::Strong(f.etag.clone())),
            last_modified: Some(meta::timestamp(f.modified_ms())),
            metadata: m.user_metadata(),
            parts_count: m.parts,
            version_id: f.version_id(),
            ..GetObjectOutput::default()
        }))
    }

    pub(crate) async fn head_object_op(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let i = req.input;
        unsupported::customer_key(
            i.sse_customer_algorithm.as_ref(),
            i.sse_customer_key.as_ref(),
            i.sse_customer_key_md5.as_ref(),
        )?;
        if let Target::Dir(path) = paths::target(&i.bucket, &i.key)? {
            let created = self.find_dir(&i.bucket, &path, &i.key).await?;
            return Ok(S3Response::new(HeadObjectOutput {
                content_length: Some(0),
                e_tag: Some(ETag::Strong(EMPTY_MD5.into())),
                last_modified: Some(meta::timestamp(created)),
                content_type: Some(meta::DEFAULT_CONTENT_TYPE.into()),
                ..HeadObjectOutput::default()
            }));
        }
        let f = self
            .find(&i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        let conditions = Conditions {
            if_match: i.if_match.as_ref(),
            if_none_match: i.if_none_match.as_ref(),
            if_modified_since: i.if_modified_since.as_ref(),
            if_unmodified_since: i.if_unmodified_since.as_ref(),
        };
        conditions.check(&f.etag, f.modified_ms(), S3ErrorCode::NotModified)?;
        let size = f.size();
        let range = read_range(i.range.as_ref(), i.part_number, &f)?;
        let (start, end) = range.unwrap_or((0, size));
        let sums = shown_checksums(i.checksum_mode.as_ref(), range.is_none(), &f);
        let m = &f.meta;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some((end - start) as i64),
            content_range: range
                .filter(|(s, e)| e > s)
                .map(|(s, e)| format!("bytes {s}-{}/{size}", e - 1)),
            accept_ranges: Some("bytes".into()),
            content_type: Some(m.content_type_or_default()),
            content_encoding: m.content_encoding.clone(),
            content_disposition: m.content_disposition.clone(),
            content_language: m.content_language.clone(),
            cache_control: m.cache_control.clone(),
            expires: m.expires_header(),
            checksum_crc32: sums.checksum_crc32.clone(),
            checksum_crc32c: sums.checksum_crc32c.clone(),
            checksum_crc64nvme: sums.checksum_crc64nvme.clone(),
            checksum_sha1: sums.checksum_sha1.clone(),
            checksum_sha256: sums.checksum_sha256.clone(),
            checksum_type: (sums != Checksum::default())
                .then(|| f.meta.checksums.kind())
                .flatten(),
            e_tag: Some(ETag::Strong(f.etag.clone())),
            last_modified: Some(meta::timestamp(f.modified_ms())),
            metadata: m.user_metadata(),
            parts_count: m.parts,
            version_id: f.version_id(),
            ..HeadObjectOutput::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_or_are_unsatisfiable() {
        let r = |s: &str| Range::parse(s).unwrap();
        assert_eq!(byte_range(None, 10).unwrap(), None);
        assert_eq!(byte_range(Some(&r("bytes=0-3")), 10).unwrap(), Some((0, 4)));
        assert_eq!(byte_range(Some(&r("bytes=5-")), 10).unwrap(), Some((5, 10)));
        assert_eq!(byte_range(Some(&r("bytes=-3")), 10).unwrap(), Some((7, 10)));
        assert_eq!(
            byte_range(Some(&r("bytes=8-100")), 10).unwrap(),
            Some((8, 10))
        );
        for bad in ["bytes=10-20", "bytes=-0", "bytes=0-"] {
            let size = if bad == "bytes=0-" { 0 } else { 10 };
            let e = byte_range(Some(&r(bad)), size).unwrap_err();
            assert_eq!(e.code(), &S3ErrorCode::InvalidRange, "{bad}");
        }
        assert!(Range::parse("bytes=5-2").is_err());
    }

    #[test]
    fn conditions_follow_s3_precedence() {
        let tag = ETagCondition::ETag(ETag::Strong("abc".into()));
        let other = ETagCondition::ETag(ETag::Strong("zzz".into()));
        let old = meta::timestamp(1_000_000);
        let new = meta::timestamp(9_000_000);
        let code = |c: Conditions<'_>, modified: u64| {
            c.check("abc", modified, S3ErrorCode::NotModified)
                .err()
                .map(|e| e.code().clone())
        };
        assert_eq!(code(Conditions::default(), 5_000_000), None);
        let c = Conditions {
            if_match: Some(&other),
            ..Conditions::default()
        };
        assert_eq!(code(c, 5_000_000), Some(S3ErrorCode::PreconditionFailed));
        // If-Match holds, so a failing If-Unmodified-Since is ignored.
        let c = Conditions {
            if_match: Some(&tag),
            if_unmodified_since: Some(&old),
            ..Conditions::default()
        };
        assert_eq!(code(c, 5_000_000), None);
        let c = Conditions {
            if_unmodified_since: Some(&old),
            ..Conditions::default()
        };
        assert_eq!(code(c, 5_000_000), Some(S3ErrorCode::PreconditionFailed));
        let c = Conditions {
            if_none_match: Some(&tag),
            ..Conditions::default()
        };
        assert_eq!(code(c, 5_000_000), Some(S3ErrorCode::NotModified));
        // If-None-Match does not match, so If-Modified-Since is ignored.
        let c = Conditions {
            if_none_match: Some(&other),
            if_modified_since: Some(&new),
            ..Conditions::default()
        };
        assert_eq!(code(c, 5_000_000), None);
        let c = Conditions {
            if_modified_since: Some(&new),
            ..Conditions::default()
        };
        assert_eq!(code(c, 5_000_000), Some(S3ErrorCode::NotModified));
        let c = Conditions {
            if_modified_since: Some(&old),
            ..Conditions::default()
        };
        assert_eq!(code(c, 5_000_000), None);
    }
}
