//! Multipart uploads. Parts are files of a hidden staging directory
//! (`.tomus-uploads/<bucket>/<upload-id>/part-NNNNN`, written concurrently and in any order
//! like any PUT); the upload's key and metadata are the attributes of its `upload` file.
//! Completing composes the object's new version from the parts' chunks, so no data is copied.
//! UploadPart and ListParts are in `parts.rs`, UploadPartCopy in `part_copy.rs`.
//! A completion and an abort of one upload end it one way (see `claims.rs`).

use md5_many::{Digest, Md5};
use rand::Rng;
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use tomus_client::{CommitOptions, Extent, Replace};
use tomus_wire::{Attrs, BlobInfo, EntryKind, ErrorKind};

use crate::buckets::owner;
use crate::checksums::Checksums;
use crate::claims::{Claim, CLAIMED_FILE};
use crate::conditional::Expect;
use crate::errors::{from_store, object_err, s3_err, Missing};
use crate::meta::{self, ObjectMeta};
use crate::paths;
use crate::service::Gateway;
use crate::unsupported;
use crate::version_ids;
use crate::writes::OBJECTS_KEEP;

/// Smallest part but the last (S3's limit).
pub const MIN_PART_SIZE: u64 = 5 << 20;
const MAX_PART_NUMBER: i32 = 10_000;
pub(crate) const UPLOAD_FILE: &str = "upload";
const PART_PREFIX: &str = "part-";
pub(crate) const UPLOAD_KEY: &str = "s3:upload-key";

fn part_name(n: i32) -> String {
    format!("{PART_PREFIX}{n:05}")
}

/// Whether the checksums a completion lists for a part are those the part was stored with.
fn checksums_agree(listed: &CompletedPart, stored: &Checksums) -> bool {
    let given = Checksum {
        checksum_crc32: listed.checksum_crc32.clone(),
        checksum_crc32c: listed.checksum_crc32c.clone(),
        checksum_crc64nvme: listed.checksum_crc64nvme.clone(),
        checksum_sha1: listed.checksum_sha1.clone(),
        checksum_sha256: listed.checksum_sha256.clone(),
        ..Checksum::default()
    };
    stored.matches(&given)
}

/// The file of part `n` of upload `id` in `bucket`.
pub(crate) fn part_path(bucket: &str, id: &str, n: i32) -> String {
    format!("{}/{}", paths::upload_dir(bucket, id), part_name(n))
}

pub(crate) fn check_part_number(n: i32) -> S3Result<()> {
    if !(1..=MAX_PART_NUMBER).contains(&n) {
        return Err(s3_err(
            S3ErrorCode::InvalidArgument,
            format!("Part number must be an integer between 1 and {MAX_PART_NUMBER}"),
        ));
    }
    Ok(())
}

fn part_number(name: &str) -> Option<i32> {
    name.strip_prefix(PART_PREFIX)?.parse().ok()
}

/// Upload ids: creation time then randomness, 32 hex digits, so they sort by age.
fn new_upload_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    format!("{now:016x}{:016x}", rand::thread_rng().gen::<u64>())
}

/// Whether `id` has the form of an upload id (so it names a directory of the namespace).
pub(crate) fn well_formed(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

fn no_such_upload(id: &str) -> s3s::S3Error {
    s3_err(
        S3ErrorCode::NoSuchUpload,
        format!(
            "The specified upload does not exist. The upload ID may be invalid, or the upload \
             may have been aborted or completed: {id}"
        ),
    )
}

/// The S3 multipart ETag: MD5 of the parts' binary MD5s, then `-N`.
pub fn multipart_etag(part_etags: &[String]) -> Option<String> {
    let mut md5 = Md5::new();
    for e in part_etags {
        if e.len() != 32 {
            return None;
        }
        for i in (0..32).step_by(2) {
            md5.update([u8::from_str_radix(e.get(i..i + 2)?, 16).ok()?]);
        }
    }
    Some(format!(
        "{}-{}",
        meta::hex(&md5.finalize()),
        part_etags.len()
    ))
}

/// A part as stored: its file's blob and ETag.
pub(crate) struct StoredPart {
    pub(crate) number: i32,
    pub(crate) blob: BlobInfo,
    pub(crate) etag: String,
    pub(crate) checksums: Checksums,
}

impl Gateway {
    /// The metadata recorded when upload `id` of `key` was created; `NoSuchUpload` if there
    /// is no such upload (or it is for another key).
    pub(crate) async fn upload(&self, bucket: &str, key: &str, id: &str) -> S3Result<ObjectMeta> {
        self.bucket(bucket).await?;
        if !well_formed(id) {
            return Err(no_such_upload(id));
        }
        let file = format!("{}/{UPLOAD_FILE}", paths::upload_dir(bucket, id));
        match self.ns.object(&file, None).await {
            Ok((o, _)) if o.attrs.get(UPLOAD_KEY).map(String::as_str) == Some(key) => {
                Ok(ObjectMeta::from_attrs(&o.attrs))
            }
            Ok(_) => Err(no_such_upload(id)),
            Err(e) if e.kind == ErrorKind::NotFound => Err(no_such_upload(id)),
            Err(e) => Err(from_store(e, Missing::Upload)),
        }
    }

    /// The parts stored for an upload, by part number.
    pub(crate) async fn stored_parts(&self, dir: &str) -> S3Result<Vec<StoredPart>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .ns
                .list_page_attrs(dir, false, after.as_deref(), 1000)
                .await
                .map_err(|e| from_store(e, Missing::Upload))?;
            let full = page.len() == 1000;
            after = page.last().map(|(e, _)| e.path.clone());
            for (e, attrs) in page {
                let name = e.path.rsplit('/').next().unwrap_or_default();
                if let (Some(number), Some(blob)) = (part_number(name), e.blob) {
                    let described = ObjectMeta::from_attrs(&attrs);
                    let etag = meta::etag(&described, blob.id, blob.latest);
                    out.push(StoredPart {
                        number,
                        blob,
                        etag,
                        checksums: described.checksums,
                    });
                }
            }
            if !full {
                return Ok(out);
            }
        }
    }

    pub(crate) async fn create_multipart_upload_op(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let i = req.input;
        unsupported::create_multipart_upload(&i)?;
        self.bucket(&i.bucket).await?;
        paths::file_path(&i.bucket, &i.key)?;
        let id = new_upload_id();
        let described = ObjectMeta {
            content_type: i.content_type,
            content_encoding: meta::object_encoding(i.content_encoding),
            content_disposition: i.content_disposition,
            content_language: i.content_language,
            cache_control: i.cache_control,
            expires: i.expires.as_ref().map(meta::unix_seconds),
            full_object_checksum: i
                .checksum_type
                .as_ref()
                .is_some_and(|t| t.as_str() == ChecksumType::FULL_OBJECT),
            user: i.metadata.unwrap_or_default(),
            ..ObjectMeta::default()
        };
        let mut attrs: Attrs = described.to_attrs();
        attrs.insert(UPLOAD_KEY.into(), i.key.clone());
        let file = format!("{}/{UPLOAD_FILE}", paths::upload_dir(&i.bucket, &id));
        let (blob, entry) = self.open_for_write(&file, true, OBJECTS_KEEP).await?;
        let options = CommitOptions {
            attrs,
            expect_size: None,
        };
        if let Err(e) = blob.writer().commit(Replace::default(), &options).await {
            self.ns.abandon(&entry).await;
            return Err(object_err(e));
        }
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(id),
            ..CreateMultipartUploadOutput::default()
        }))
    }

    pub(crate) async fn list_multipart_uploads_op(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let i = req.input;
        self.bucket(&i.bucket).await?;
        let root = format!("{}/{}", paths::UPLOADS_DIR, i.bucket);
        let dirs = match self.ns.list(&root).await {
            Ok(d) => d,
            Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(from_store(e, Missing::Upload)),
        };
        let mut uploads = Vec::new();
        for d in dirs.into_iter().filter(|d| d.kind == EntryKind::Dir) {
            let id = d.path.rsplit('/').next().unwrap_or_default().to_string();
            let file = format!("{}/{UPLOAD_FILE}", d.path);
            // An upload completed or aborted meanwhile is simply not listed.
            if let Ok((o, _)) = self.ns.object(&file, None).await {
                if let Some(key) = o.attrs.get(UPLOAD_KEY) {
                    uploads.push((key.clone(), id, o.entry.created_ms));
                }
            }
        }
        let prefix = i.prefix.clone().unwrap_or_default();
        uploads.retain(|(k, _, _)| k.starts_with(&prefix));
        uploads.sort();
        if let Some(km) = i.key_marker.as_ref().filter(|m| !m.is_empty()) {
            let idm = i.upload_id_marker.clone().unwrap_or_default();
            uploads.retain(|(k, id, _)| k > km || (k == km && !idm.is_empty() && *id > idm));
        }
        let max = i.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
        let truncated = uploads.len() > max;
        uploads.truncate(max);
        let (next_key, next_id) = match uploads.last().filter(|_| truncated) {
            Some((k, id, _)) => (Some(k.clone()), Some(id.clone())),
            None => (None, None),
        };
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(i.bucket),
            prefix: i.prefix,
            key_marker: i.key_marker,
            upload_id_marker: i.upload_id_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: next_key,
            next_upload_id_marker: next_id,
            uploads: Some(
                uploads
                    .into_iter()
                    .map(|(key, id, created)| MultipartUpload {
                        key: Some(key),
                        upload_id: Some(id),
                        initiated: Some(meta::timestamp(created)),
                        owner: Some(owner()),
                        initiator: Some(Initiator {
                            display_name: Some("tomus".into()),
                            id: Some("tomus".into()),
                        }),
                        ..MultipartUpload::default()
                    })
                    .collect(),
            ),
            ..ListMultipartUploadsOutput::default()
        }))
    }

    pub(crate) async fn complete_multipart_upload_op(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let i = req.input;
        unsupported::customer_key(
            i.sse_customer_algorithm.as_ref(),
            i.sse_customer_key.as_ref(),
            i.sse_customer_key_md5.as_ref(),
        )?;
        let wanted = i
            .multipart_upload
            .as_ref()
            .and_then(|m| m.parts.clone())
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                s3_err(
                    S3ErrorCode::MalformedXML,
                    "You must specify at least one part",
                )
            })?;
        loop {
            if let Some(out) = self.complete_once(&i, &wanted).await? {
                return Ok(S3Response::new(out));
            }
        }
    }

    /// One attempt at completing upload `i` with the parts `wanted`; `None` when another
    /// request took the claim on the upload between this one's checks and its claim (the
    /// upload is then ended, claimed, or open again: the caller tries again).
    async fn complete_once(
        &self,
        i: &CompleteMultipartUploadInput,
        wanted: &[CompletedPart],
    ) -> S3Result<Option<CompleteMultipartUploadOutput>> {
        let (described, held) = match self.upload(&i.bucket, &i.key, &i.upload_id).await {
            Ok(d) => (d, false),
            Err(e) if *e.code() == S3ErrorCode::NoSuchUpload => {
                match self.await_claim(&i.bucket, &i.key, &i.upload_id).await? {
                    Claim::Reopened => return Ok(None),
                    // Its completion died: this one finishes it.
                    Claim::Abandoned(d) => (*d, true),
                    // A retried completion (its first answer lost) finds the object it made.
                    Claim::Ended => {
                        return match self.completed(i, wanted).await? {
                            Some(out) => Ok(Some(out)),
                            None => Err(e),
                        }
                    }
                }
            }
            Err(e) => return Err(e),
        };
        let state = self.bucket(&i.bucket).await?;
        let dir = paths::upload_dir(&i.bucket, &i.upload_id);
        let stored = self.stored_parts(&dir).await?;
        let numbers: Vec<i32> = wanted.iter().map(|w| w.part_number.unwrap_or(0)).collect();
        if numbers.windows(2).any(|w| w[0] >= w[1]) {
            return Err(s3_err(
                S3ErrorCode::InvalidPartOrder,
                "The list of parts was not in ascending order. Parts must be ordered by part \
                 number.",
            ));
        }
        let mut chosen: Vec<&StoredPart> = Vec::with_capacity(wanted.len());
        for (n, (w, &number)) in wanted.iter().zip(&numbers).enumerate() {
            let part = stored.iter().find(|p| p.number == number);
            let etag_ok = |p: &StoredPart| {
                w.e_tag.as_ref().is_none_or(|e| e.value() == p.etag)
                    && checksums_agree(w, &p.checksums)
            };
            let part = match part {
                Some(p) if etag_ok(p) => p,
                _ => {
                    return Err(s3_err(
                        S3ErrorCode::InvalidPart,
                        format!(
                            "One or more of the specified parts could not be found (part \
                             {number}), or its ETag did not match."
                        ),
                    ))
                }
            };
            if n + 1 < wanted.len() && part.blob.size < MIN_PART_SIZE {
                return Err(s3_err(
                    S3ErrorCode::EntityTooSmall,
                    format!(
                        "Your proposed upload is smaller than the minimum allowed size: part \
                         {number} has {} bytes; every part but the last needs {MIN_PART_SIZE}",
                        part.blob.size
                    ),
                ));
            }
            chosen.push(part);
        }
        let etags: Vec<String> = chosen.iter().map(|p| p.etag.clone()).collect();
        let etag = multipart_etag(&etags).ok_or_else(|| {
            s3_err(
                S3ErrorCode::InvalidPart,
                "a part has an ETag that is not an MD5 (was it written outside S3?)",
            )
        })?;
        let sources: Vec<Extent> = chosen
            .iter()
            .map(|p| Extent {
                blob: self.client.blob(&p.blob),
                version: p.blob.latest,
                offset: 0,
                len: p.blob.size,
            })
            .collect();
        let mut object = described.descriptive();
        object.etag = Some(etag.clone());
        object.parts = Some(chosen.len() as i32);
        object.part_sizes = Some(chosen.iter().map(|p| p.blob.size).collect());
        object.upload_id = Some(i.upload_id.clone());
        let parts_sums: Vec<(Checksums, u64)> = chosen
            .iter()
            .map(|p| (p.checksums.clone(), p.blob.size))
            .collect();
        object.checksums = Checksums::of_parts(&parts_sums, described.full_object_checksum);
        let path = paths::file_path(&i.bucket, &i.key)?;
        // If-Match: 404 on a missing key, 412 on another ETag; the composition then commits
        // only if the object still has the checked version's size (see `conditional.rs`).
        let expect_size = self
            .expect_current(&path, &i.key, &Expect::etag(i.if_match.as_ref()))
            .await?;
        let exclusive = matches!(&i.if_none_match, Some(ETagCondition::Any));
        let options = CommitOptions {
            attrs: object.to_attrs(),
            expect_size,
        };
        // The parts check out: the claim, then the object.
        let open = format!("{dir}/{UPLOAD_FILE}");
        let claimed = format!("{dir}/{CLAIMED_FILE}");
        if !held {
            match self.ns.rename(&open, &claimed).await {
                Ok(()) => {}
                Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(from_store(e, Missing::Upload)),
            }
        }
        let composed = async {
            let (blob, entry) = self
                .open_for_write(&path, exclusive, state.object_retention())
                .await?;
            match blob.compose(&sources, &options).await {
                Ok(info) => Ok((blob, info)),
                Err(e) => {
                    self.ns.abandon(&entry).await;
                    Err(object_err(e))
                }
            }
        }
        .await;
        let (blob, info) = match composed {
            Ok(done) => done,
            Err(e) => {
                // The upload stays open, as S3 leaves it after a failed completion.
                if let Err(back) = self.ns.rename(&claimed, &open).await {
                    tracing::warn!("giving back the claim on upload {}: {back}", i.upload_id);
                }
                return Err(e);
            }
        };
        // The parts' data now belongs to the object's version; drop the staging files.
        if let Err(e) = self.ns.delete(&dir, true).await {
            tracing::warn!("removing the parts of upload {}: {e}", i.upload_id);
        }
        let sums = object.checksums.dto();
        Ok(Some(CompleteMultipartUploadOutput {
            bucket: Some(i.bucket.clone()),
            key: Some(i.key.clone()),
            e_tag: Some(ETag::Strong(etag)),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            checksum_type: object.checksums.kind(),
            location: Some(format!("/{}/{}", i.bucket, i.key)),
            version_id: state
                .versioned()
                .then(|| version_ids::format(blob.id(), info.version)),
            ..CompleteMultipartUploadOutput::default()
        }))
    }
}

impl Gateway {
    /// The answer to completing upload `i` again with the parts `wanted`, if it was completed
    /// with those parts and its object is still current (S3 answers such a retry with 200).
    async fn completed(
        &self,
        i: &CompleteMultipartUploadInput,
        wanted: &[CompletedPart],
    ) -> S3Result<Option<CompleteMultipartUploadOutput>> {
        let found = match self.find(&i.bucket, &i.key, None).await {
            Ok(f) => f,
            Err(e) if matches!(e.code(), S3ErrorCode::NoSuchKey) => return Ok(None),
            Err(e) => return Err(e),
        };
        if found.meta.upload_id.as_deref() != Some(i.upload_id.as_str()) {
            return Ok(None);
        }
        let etags: Option<Vec<String>> = wanted
            .iter()
            .map(|w| w.e_tag.as_ref().map(|e| e.value().to_string()))
            .collect();
        // The multipart ETag digests the parts' ETags in order: the same list gives it back.
        if etags.and_then(|e| multipart_etag(&e)).as_deref() != Some(found.etag.as_str()) {
            return Ok(None);
        }
        Ok(Some(CompleteMultipartUploadOutput {
            bucket: Some(i.bucket.clone()),
            key: Some(i.key.clone()),
            e_tag: Some(ETag::Strong(found.etag.clone())),
            location: Some(format!("/{}/{}", i.bucket, i.key)),
            version_id: found.version_id(),
            ..CompleteMultipartUploadOutput::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_etags_are_md5_of_md5s() {
        // MD5("a") and MD5("b"); the result is what S3 returns for those two parts.
        let parts = [
            "0cc175b9c0f1b6a831c399e269772661".to_string(),
            "92eb5ffee6ae2fec3ad71c777531578f".to_string(),
        ];
        let mut expect = Md5::new();
        expect.update(Md5::digest(b"a"));
        expect.update(Md5::digest(b"b"));
        let want = format!("{}-2", meta::hex(&expect.finalize()));
        assert_eq!(multipart_etag(&parts).unwrap(), want);
        assert!(multipart_etag(&["xyz".to_string()]).is_none());
        assert_eq!(part_number(&part_name(42)), Some(42));
        assert_eq!(new_upload_id().len(), 32);
    }
}
