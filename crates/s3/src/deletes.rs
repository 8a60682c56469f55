//! Deleting objects: DELETE and DeleteObjects, with delete markers in versioned buckets, and
//! DELETE of a version (which hides it: versions are immutable, see `hidden.rs`).

use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use tomus_client::{CommitOptions, Extent, Replace};
use tomus_wire::{ErrorKind, VersionsFrom};

use crate::conditional::Expect;
use crate::errors::{object_err, s3_err};
use crate::meta::{self, ObjectMeta};
use crate::paths::{self, Target};
use crate::service::Gateway;
use crate::version_ids::{self, VersionRef};

impl Gateway {
    /// Removes now-empty directories between `path` and its bucket (S3 has no directories:
    /// the "folders" of a deleted key must not linger).
    pub(crate) async fn prune_parents(&self, bucket: &str, path: &str) {
        let mut p = path;
        while let Some((parent, _)) = p.rsplit_once('/') {
            if parent.len() <= bucket.len() || self.ns.delete(parent, false).await.is_err() {
                break;
            }
            p = parent;
        }
    }

    /// Deletes one key (or version); what DeleteObject and each entry of DeleteObjects do.
    /// `expect` are the request's conditions on the key's current version (`If-Match`,
    /// `x-amz-if-match-last-modified-time`, `x-amz-if-match-size`): 404 without one, 412
    /// when they do not hold.
    pub(crate) async fn delete_one(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        expect: &Expect,
    ) -> S3Result<DeletedObject> {
        let state = self.bucket(bucket).await?;
        let mut out = DeletedObject {
            key: Some(key.to_string()),
            ..DeletedObject::default()
        };
        let path = match paths::target(bucket, key)? {
            // A "folder": gone if empty; a non-empty one is implied by its keys anyway.
            Target::Dir(p) => {
                let _ = self.ns.delete(&p, false).await;
                return Ok(out);
            }
            Target::File(p) => p,
        };
        let expect_size = self.expect_current(&path, key, expect).await?;
        let version_id = match version_id {
            // The "null" version of a bucket without versioning is its current object: the
            // plain delete below. A bucket that has had versioning keeps none: nothing to do.
            Some(version_ids::NULL) if state.versioning.is_none() => None,
            Some(version_ids::NULL) => {
                out.version_id = Some(version_ids::NULL.into());
                return Ok(out);
            }
            other => other,
        };
        if let Some(v) = version_ids::parse(version_id)? {
            out.version_id = version_id.map(str::to_string);
            out.delete_marker = self.delete_version(&path, v).await?.then_some(true);
            return Ok(out);
        }
        if state.versioned() {
            let (blob, entry) = self
                .open_for_write(&path, false, state.object_retention())
                .await?;
            let marker = ObjectMeta {
                delete_marker: true,
                ..ObjectMeta::default()
            };
            let options = CommitOptions {
                attrs: marker.to_attrs(),
                expect_size,
            };
            let info = match blob.writer().commit(Replace::default(), &options).await {
                Ok(info) => info,
                Err(e) => {
                    self.ns.abandon(&entry).await;
                    return Err(object_err(e));
                }
            };
            out.delete_marker = Some(true);
            out.delete_marker_version_id = Some(version_ids::format(blob.id(), info.version));
            out.version_id = out.delete_marker_version_id.clone();
            return Ok(out);
        }
        match self.ns.delete(&path, false).await {
            Ok(()) => self.prune_parents(bucket, &path).await,
            // Deleting what is not an object succeeds, as in S3.
            Err(e)
                if matches!(
                    e.kind,
                    ErrorKind::NotFound
                        | ErrorKind::NotEmpty
                        | ErrorKind::IsADirectory
                        | ErrorKind::NotADirectory
                ) => {}
            Err(e) => return Err(object_err(e)),
        }
        Ok(out)
    }

    /// DELETE of a version. Versions are immutable and the bytes stay until tomus has garbage
    /// collection, so a deleted version is *hidden* (`hidden.rs`): GET/HEAD of its id answer
    /// `NoSuchVersion` and ListObjectVersions skips it. Deleting the latest version also makes
    /// the newest older visible version (a delete marker too, as in S3) current again, by a
    /// metadata-only copy under a new version id (S3 keeps its old id) that records what it
    /// copies, or removes the key when there is none. Deleting the version such a copy was
    /// made of deletes the copy too (it *is* that version, made current), so deleting every
    /// listed version, in any order, leaves no key. An id the key never had (or already
    /// deleted) succeeds, as in S3. Returns whether `v` was a delete marker.
    async fn delete_version(&self, path: &str, wanted: VersionRef) -> S3Result<bool> {
        let (latest, blob) = match self.ns.object(path, None).await {
            Ok(x) => x,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(object_err(e)),
        };
        // A version of an earlier object of this key is gone already.
        if !wanted.of(blob.id()) {
            return Ok(false);
        }
        let v = wanted.version;
        let hidden = self.hidden_versions(blob.id()).await?;
        if hidden.contains(&v) {
            return Ok(false);
        }
        // Version `v` with its attributes: the first version above `v - 1`, if it is `v`.
        let found = blob
            .versions_attrs_page(VersionsFrom::After(v.saturating_sub(1)), 1)
            .await;
        let Some((_, attrs)) = found
            .map_err(object_err)?
            .into_iter()
            .find(|(info, _)| info.version == v)
        else {
            return Ok(false);
        };
        let was_marker = ObjectMeta::from_attrs(&attrs).delete_marker;
        let current = latest.version.version;
        // The current version is `v`, or the copy of `v` an earlier delete made current.
        let copy_of_v = current != v && meta::restored_from(&latest.attrs) == Some(v);
        if current != v && !copy_of_v {
            self.hide_version(blob.id(), v).await?;
            return Ok(was_marker);
        }
        // As in S3, the version below becomes current, even a delete marker (the key then
        // stays deleted). Every version between it and a copy of it is already hidden.
        let previous = self.visible_newest(&blob, &hidden, v, 1).await?.pop();
        match previous {
            Some((info, attrs)) => {
                let options = CommitOptions {
                    attrs: meta::restored_copy(&attrs, info.version),
                    expect_size: None,
                };
                if info.size == 0 {
                    // Nothing to compose from: an empty version with the same attributes.
                    blob.writer()
                        .commit(Replace::default(), &options)
                        .await
                        .map_err(object_err)?;
                } else {
                    let source = Extent {
                        blob: blob.clone(),
                        version: info.version,
                        offset: 0,
                        len: info.size,
                    };
                    blob.compose(&[source], &options)
                        .await
                        .map_err(object_err)?;
                }
                // The deleted version (and its copy) are no longer the latest: they go from the
                // history.
                self.hide_version(blob.id(), v).await?;
                if copy_of_v {
                    self.hide_version(blob.id(), current).await?;
                }
            }
            None => {
                match self.ns.delete(path, false).await {
                    Ok(()) => {}
                    Err(e) if e.kind == ErrorKind::NotFound => {}
                    Err(e) => return Err(object_err(e)),
                }
                self.forget_hidden(blob.id()).await;
            }
        }
        Ok(was_marker)
    }

    pub(crate) async fn delete_object_op(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let i = req.input;
        let expect = Expect {
            etag: i.if_match,
            modified: i.if_match_last_modified_time,
            size: i.if_match_size,
        };
        let d = self
            .delete_one(&i.bucket, &i.key, i.version_id.as_deref(), &expect)
            .await?;
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: d.delete_marker,
            version_id: d.delete_marker_version_id.or(d.version_id),
            ..DeleteObjectOutput::default()
        }))
    }

    pub(crate) async fn delete_objects_op(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let i = req.input;
        self.bucket(&i.bucket).await?;
        if i.delete.objects.len() > 1000 {
            return Err(s3_err(
                S3ErrorCode::MalformedXML,
                "DeleteObjects takes at most 1000 keys",
            ));
        }
        let quiet = i.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for o in i.delete.objects {
            let expect = Expect {
                etag: o.e_tag.clone().map(ETagCondition::ETag),
                modified: o.last_modified_time.clone(),
                size: o.size,
            };
            match self
                .delete_one(&i.bucket, &o.key, o.version_id.as_deref(), &expect)
                .await
            {
                Ok(d) if !quiet => deleted.push(d),
                Ok(_) => {}
                Err(e) => errors.push(Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(o.key),
                    message: e.message().map(str::to_string),
                    version_id: o.version_id,
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..DeleteObjectsOutput::default()
        }))
    }
}
