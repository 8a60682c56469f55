//! The parts of a multipart upload: UploadPart, ListParts, and what keeps a part from
//! outliving its upload. Parts are files of the upload's staging directory (see
//! `multipart.rs`); UploadPartCopy is in `part_copy.rs`.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, TrailingHeaders};
use tomus_client::{CommitOptions, Replace};
use tomus_wire::ErrorKind;

use crate::buckets::owner;
use crate::checksums::{declared_checksums, Checksums, Verifier};
use crate::errors::object_err;
use crate::meta::{self, ObjectMeta};
use crate::multipart::{check_part_number, part_path, StoredPart};
use crate::paths;
use crate::service::Gateway;
use crate::unsupported;
use crate::writes::OBJECTS_KEEP;

impl Gateway {
    pub(crate) async fn upload_part_op(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let trailers = req.trailing_headers;
        let headers = req.headers;
        let i = req.input;
        unsupported::customer_key(
            i.sse_customer_algorithm.as_ref(),
            i.sse_customer_key.as_ref(),
            i.sse_customer_key_md5.as_ref(),
        )?;
        check_part_number(i.part_number)?;
        self.upload(&i.bucket, &i.key, &i.upload_id).await?;
        let path = part_path(&i.bucket, &i.upload_id, i.part_number);
        let declared = declared_checksums!(i);
        let sums = Verifier::new(declared, i.checksum_algorithm.as_ref(), &headers)?;
        let written = async {
            let (blob, entry) = self.open_for_write(&path, false, OBJECTS_KEEP).await?;
            let stored = self
                .store_body(&blob, i.body, i.content_md5.as_deref(), sums, trailers)
                .await;
            if stored.is_err() {
                self.ns.abandon(&entry).await;
            }
            stored
        }
        .await;
        let (etag, sums) = self
            .settle_part(&i.bucket, &i.key, &i.upload_id, &path, written)
            .await?;
        let dto = sums.dto();
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(etag)),
            checksum_crc32: dto.checksum_crc32,
            checksum_crc32c: dto.checksum_crc32c,
            checksum_crc64nvme: dto.checksum_crc64nvme,
            checksum_sha1: dto.checksum_sha1,
            checksum_sha256: dto.checksum_sha256,
            ..UploadPartOutput::default()
        }))
    }

    /// Streams a body into one new version of `blob` recording its MD5 as the ETag and its
    /// flexible checksums once they match what the request declared (in `trailers` too).
    pub(crate) async fn store_body(
        &self,
        blob: &tomus_client::Blob,
        body: Option<StreamingBlob>,
        content_md5: Option<&str>,
        mut sums: Verifier,
        trailers: Option<TrailingHeaders>,
    ) -> S3Result<(String, Checksums)> {
        let mut writer = blob.writer();
        let (md5, _) = crate::writes::drain(body, &mut writer, content_md5, &mut sums).await?;
        let trailers = trailers.and_then(|t| t.take());
        let sums = sums.finish(trailers.as_ref())?;
        let etag = meta::hex(&md5);
        let described = ObjectMeta {
            etag: Some(etag.clone()),
            checksums: sums.clone(),
            ..ObjectMeta::default()
        };
        let options = CommitOptions {
            attrs: described.to_attrs(),
            expect_size: None,
        };
        writer
            .commit(Replace::default(), &options)
            .await
            .map_err(object_err)?;
        Ok((etag, sums))
    }

    pub(crate) async fn list_parts_op(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let i = req.input;
        self.upload(&i.bucket, &i.key, &i.upload_id).await?;
        let dir = paths::upload_dir(&i.bucket, &i.upload_id);
        let max = i.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let marker = i.part_number_marker.unwrap_or(0);
        let mut parts: Vec<StoredPart> = self
            .stored_parts(&dir)
            .await?
            .into_iter()
            .filter(|p| p.number > marker)
            .collect();
        let truncated = parts.len() > max;
        parts.truncate(max);
        let next = parts.last().map(|p| p.number).filter(|_| truncated);
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(i.upload_id),
            max_parts: Some(max as i32),
            part_number_marker: i.part_number_marker,
            next_part_number_marker: next,
            is_truncated: Some(truncated),
            owner: Some(owner()),
            parts: Some(
                parts
                    .into_iter()
                    .map(|p| Part {
                        part_number: Some(p.number),
                        size: Some(p.blob.size as i64),
                        e_tag: Some(ETag::Strong(p.etag)),
                        last_modified: Some(meta::timestamp(p.blob.modified_ms)),
                        ..Part::default()
                    })
                    .collect(),
            ),
            ..ListPartsOutput::default()
        }))
    }

    /// What a part write of upload `id` answers, once `written` (its outcome) is known. The
    /// upload may have been aborted or completed meanwhile, which removes its directory with
    /// the parts in it. A part published after that would make the directory again: a
    /// directory with no upload file, which ListMultipartUploads does not show and nothing
    /// removes, so its bytes would be held for good. Such a part is deleted here, with the
    /// directory once empty, and the write answers `NoSuchUpload`, as it does when the
    /// removal took the part before it was published. A part published while the upload
    /// still exists is removed by whatever ends the upload later.
    pub(crate) async fn settle_part<T>(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        part: &str,
        written: S3Result<T>,
    ) -> S3Result<T> {
        let gone = match self.upload(bucket, key, id).await {
            Ok(_) => return written,
            Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchUpload => e,
            Err(e) => return written.and(Err(e)),
        };
        if written.is_ok() {
            if let Err(e) = self.ns.delete(part, false).await {
                if e.kind != ErrorKind::NotFound {
                    tracing::warn!("removing /{part}, written after its upload ended: {e}");
                }
            }
        }
        // The last part to go takes the directory; the others find it not empty (or gone).
        match self.ns.delete(&paths::upload_dir(bucket, id), false).await {
            Ok(()) => {}
            Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::NotEmpty) => {}
            Err(e) => tracing::warn!("removing the directory of ended upload {id}: {e}"),
        }
        Err(gone)
    }
}
