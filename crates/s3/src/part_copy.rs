//! UploadPartCopy: a part of a multipart upload made from a range of an existing object,
//! composed from the source's chunks like CopyObject (no data moves). The part's ETag is
//! the MD5 of its bytes, as S3 gives it: the source's own ETag when the whole of a
//! single-part object is copied, otherwise computed by reading the range once.

use md5_many::{Digest, Md5};
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use tomus_client::{CommitOptions, Extent};

use crate::errors::{object_err, s3_err};
use crate::meta::{self, ObjectMeta};
use crate::multipart::{check_part_number, part_path};
use crate::objects::{byte_range, Conditions, Found};
use crate::service::Gateway;
use crate::unsupported;
use crate::writes::OBJECTS_KEEP;

/// Bytes read at a time to hash a copied range (bounded memory whatever the part's size).
const HASH_PIECE: u64 = 8 << 20;

/// The `[start, end)` of `x-amz-copy-source-range` (`bytes=first-last`, both given, as S3
/// requires) in a source of `size` bytes; the whole source without one.
fn copy_range(range: Option<&str>, size: u64) -> S3Result<(u64, u64)> {
    let Some(text) = range else {
        return Ok((0, size));
    };
    let bad = || {
        s3_err(
            S3ErrorCode::InvalidArgument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last where \
             first and last are the zero-based offsets of the first and last bytes to copy",
        )
    };
    let (first, last) = text
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(bad)?;
    let (first, last): (u64, u64) = (
        first.parse().map_err(|_| bad())?,
        last.parse().map_err(|_| bad())?,
    );
    if first > last {
        return Err(bad());
    }
    let parsed = Range::Int {
        first,
        last: Some(last),
    };
    // A range past the end of the source is refused rather than cut.
    match byte_range(Some(&parsed), size)? {
        Some((start, end)) if end == last + 1 => Ok((start, end)),
        _ => Err(s3_err(
            S3ErrorCode::InvalidRange,
            format!(
                "The requested range bytes={first}-{last} is not satisfiable (object size {size})"
            ),
        )),
    }
}

impl Gateway {
    /// The MD5 of bytes `[start, end)` of `src`'s version, as hex.
    async fn md5_of(&self, src: &Found, start: u64, end: u64) -> S3Result<String> {
        let whole = start == 0 && end == src.size();
        if whole && src.etag.len() == 32 && !src.etag.contains('-') {
            return Ok(src.etag.clone());
        }
        let mut md5 = Md5::new();
        let mut buf = vec![0u8; HASH_PIECE.min(end - start) as usize];
        let mut at = start;
        while at < end {
            let n = (end - at).min(HASH_PIECE) as usize;
            src.blob
                .read_version_into(&src.obj.version, at, &mut buf[..n])
                .await
                .map_err(object_err)?;
            md5.update(&buf[..n]);
            at += n as u64;
        }
        Ok(meta::hex(&md5.finalize()))
    }

    pub(crate) async fn upload_part_copy_op(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let i = req.input;
        unsupported::upload_part_copy(&i)?;
        check_part_number(i.part_number)?;
        self.upload(&i.bucket, &i.key, &i.upload_id).await?;
        let conditions = Conditions {
            if_match: i.copy_source_if_match.as_ref(),
            if_none_match: i.copy_source_if_none_match.as_ref(),
            if_modified_since: i.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: i.copy_source_if_unmodified_since.as_ref(),
        };
        let (src, _, _) = self.copy_source(&i.copy_source, &conditions).await?;
        let (start, end) = copy_range(i.copy_source_range.as_deref(), src.size())?;
        let etag = self.md5_of(&src, start, end).await?;
        let path = part_path(&i.bucket, &i.upload_id, i.part_number);
        let source = Extent {
            blob: src.blob.clone(),
            version: src.obj.version.version,
            offset: start,
            len: end - start,
        };
        let described = ObjectMeta {
            etag: Some(etag.clone()),
            ..ObjectMeta::default()
        };
        let options = CommitOptions {
            attrs: described.to_attrs(),
            expect_size: None,
        };
        let written = async {
            let (blob, entry) = self.open_for_write(&path, false, OBJECTS_KEEP).await?;
            let composed = blob.compose(&[source], &options).await;
            if composed.is_err() {
                self.ns.abandon(&entry).await;
            }
            composed.map_err(object_err)
        }
        .await;
        let info = self
            .settle_part(&i.bucket, &i.key, &i.upload_id, &path, written)
            .await?;
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(ETag::Strong(etag)),
                last_modified: Some(meta::timestamp(info.published_ms)),
                ..CopyPartResult::default()
            }),
            copy_source_version_id: src
                .bucket
                .versioned()
                .then(|| crate::version_ids::format(src.blob.id(), src.obj.version.version)),
            ..UploadPartCopyOutput::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_ranges_are_first_and_last_inclusive_and_must_fit() {
        assert_eq!(copy_range(None, 10).unwrap(), (0, 10));
        assert_eq!(copy_range(Some("bytes=0-9"), 10).unwrap(), (0, 10));
        assert_eq!(copy_range(Some("bytes=3-3"), 10).unwrap(), (3, 4));
        for bad in ["bytes=0-", "bytes=-5", "0-4", "bytes=5-2", "bytes=a-b"] {
            let e = copy_range(Some(bad), 10).unwrap_err();
            assert_eq!(e.code(), &S3ErrorCode::InvalidArgument, "{bad}");
        }
        let e = copy_range(Some("bytes=5-10"), 10).unwrap_err();
        assert_eq!(e.code(), &S3ErrorCode::InvalidRange);
    }
}
