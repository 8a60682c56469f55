//! Deleting objects: DELETE and DeleteObjects, with delete markers in versioned buckets and
//! the "delete the latest version" that versions, being immutable, allow.

use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use tomus_client::{CommitOptions, Extent};
use tomus_metadata::Version;
use tomus_wire::ErrorKind;

use crate::errors::{object_err, s3_err};
use crate::meta::ObjectMeta;
use crate::objects::parse_version_id;
use crate::paths::{self, Target};
use crate::service::Gateway;

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
    pub(crate) async fn delete_one(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
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
        if let Some(v) = parse_version_id(version_id)? {
            out.version_id = Some(v.to_string());
            out.delete_marker = self.delete_version(&path, key, v).await?.then_some(true);
            return Ok(out);
        }
        if state.versioned() {
            let (blob, _) = self.open_for_write(&path, false).await?;
            let marker = ObjectMeta {
                delete_marker: true,
                ..ObjectMeta::default()
            };
            let options = CommitOptions {
                attrs: marker.to_attrs(),
                expect_size: None,
            };
            let info = blob
                .writer()
                .commit_replace_with(&options)
                .await
                .map_err(object_err)?;
            out.delete_marker = Some(true);
            out.delete_marker_version_id = Some(info.version.to_string());
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

    /// DELETE of a version. Versions are immutable, so only the latest one can go: the newest
    /// older version that is not a delete marker becomes current again by a metadata-only
    /// copy (or the key goes when there is none). Returns whether `v` was a delete marker.
    async fn delete_version(&self, path: &str, key: &str, v: Version) -> S3Result<bool> {
        let (latest, blob) = match self.ns.object(path, None).await {
            Ok(x) => x,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(object_err(e)),
        };
        if latest.version.version != v {
            return Err(s3_err(
                S3ErrorCode::NotImplemented,
                format!(
                    "{key}: only the latest version ({}) can be deleted; tomus versions are \
                     immutable (see crates/s3/README.md)",
                    latest.version.version
                ),
            ));
        }
        let was_marker = ObjectMeta::from_attrs(&latest.attrs).delete_marker;
        let history = blob.versions_attrs().await.map_err(object_err)?;
        let previous = history
            .iter()
            .rev()
            .filter(|(info, _)| info.version < v)
            .find(|(_, a)| !ObjectMeta::from_attrs(a).delete_marker);
        match previous {
            Some((info, attrs)) => {
                let source = Extent {
                    blob: blob.clone(),
                    version: info.version,
                    offset: 0,
                    len: info.size,
                };
                let options = CommitOptions {
                    attrs: attrs.clone(),
                    expect_size: None,
                };
                blob.compose(&[source], &options)
                    .await
                    .map_err(object_err)?;
            }
            None => match self.ns.delete(path, false).await {
                Ok(()) => {}
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => return Err(object_err(e)),
            },
        }
        Ok(was_marker)
    }

    pub(crate) async fn delete_object_op(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let i = req.input;
        let d = self
            .delete_one(&i.bucket, &i.key, i.version_id.as_deref())
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
            match self
                .delete_one(&i.bucket, &o.key, o.version_id.as_deref())
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
