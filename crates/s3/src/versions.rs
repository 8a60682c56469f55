//! ListObjectVersions: every published version of each key, newest first, with delete
//! markers. Pages hold whole keys (a key's versions are never split across pages), so the
//! key marker alone says where the next page starts.

use futures::{StreamExt, TryStreamExt};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};
use tomus_wire::{Attrs, FsEntry, VersionInfo};

use crate::buckets::owner;
use crate::errors::object_err;
use crate::listing::{Item, Query};
use crate::meta::{self, ObjectMeta};
use crate::service::Gateway;
use crate::urlenc;
use crate::version_ids;

/// Keys whose version lists are fetched at once.
const PARALLEL_KEYS: usize = 16;

impl Gateway {
    /// The versions of a key that were not deleted (see `hidden.rs`), oldest first.
    async fn key_versions(&self, entry: &FsEntry) -> S3Result<Vec<(VersionInfo, Attrs)>> {
        let Some(info) = &entry.blob else {
            return Ok(Vec::new());
        };
        let (history, hidden) = futures::try_join!(
            async {
                self.client
                    .blob(info)
                    .versions_attrs()
                    .await
                    .map_err(object_err)
            },
            self.hidden_versions(info.id)
        )?;
        Ok(history
            .into_iter()
            .filter(|(v, _)| !hidden.contains(&v.version))
            .collect())
    }

    pub(crate) async fn list_object_versions_op(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let i = req.input;
        let enc = urlenc::requested(i.encoding_type.as_ref())?;
        let mut q = Query::from_request(&i.prefix, &i.delimiter, i.max_keys)?;
        q.resume_after_marker(i.key_marker.as_ref());
        // A bucket that never had versioning shows each object once, as its "null" version
        // (the older versions waiting for collection are not S3 versions).
        let unversioned = self.bucket(&i.bucket).await?.versioning.is_none();
        let page = self.scan(&i.bucket, &q, true).await?;
        // Futures built eagerly: a stream closure over borrowed entries would not be Send.
        let fetches: Vec<_> = page
            .objects
            .iter()
            .map(|(_, (entry, _))| self.key_versions(entry))
            .collect();
        let histories: Vec<Vec<(VersionInfo, Attrs)>> = futures::stream::iter(fetches)
            .buffered(PARALLEL_KEYS)
            .try_collect()
            .await?;
        let mut versions = Vec::new();
        let mut markers = Vec::new();
        let mut last_version = None;
        for ((key, (entry, _)), history) in page.objects.iter().zip(histories) {
            let key = urlenc::name(enc, key.clone());
            let blob = entry.blob.as_ref().map(|b| b.id).unwrap_or_default();
            let latest = history.last().map(|(v, _)| v.version);
            let shown = if unversioned { 1 } else { history.len() };
            for (v, attrs) in history.iter().rev().take(shown) {
                let m = ObjectMeta::from_attrs(attrs);
                let id = if unversioned {
                    version_ids::NULL.to_string()
                } else {
                    version_ids::format(blob, v.version)
                };
                let is_latest = Some(v.version) == latest;
                let modified = meta::timestamp(v.published_ms);
                last_version = Some(id.clone());
                if m.delete_marker {
                    markers.push(DeleteMarkerEntry {
                        key: Some(key.clone()),
                        version_id: Some(id),
                        is_latest: Some(is_latest),
                        last_modified: Some(modified),
                        owner: Some(owner()),
                    });
                    continue;
                }
                versions.push(ObjectVersion {
                    key: Some(key.clone()),
                    version_id: Some(id),
                    is_latest: Some(is_latest),
                    e_tag: Some(meta::etag_header(&m, blob, v.version)),
                    size: Some(v.size as i64),
                    last_modified: Some(modified),
                    owner: Some(owner()),
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    ..ObjectVersion::default()
                });
            }
        }
        let (next_key, next_version) = match page.last.as_ref().filter(|_| page.truncated) {
            Some(Item::Key(k)) => (Some(k.clone()), last_version),
            Some(Item::Prefix(p)) => (Some(p.clone()), None),
            None => (None, None),
        };
        // With EncodingType=url, S3 encodes KeyMarker, NextKeyMarker, Prefix, Key and
        // Delimiter (and the common prefixes).
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(i.bucket),
            prefix: Some(urlenc::name(enc, q.prefix)),
            delimiter: urlenc::opt(enc, i.delimiter),
            key_marker: urlenc::opt(enc, i.key_marker),
            version_id_marker: i.version_id_marker,
            max_keys: Some(q.max as i32),
            is_truncated: Some(page.truncated),
            next_key_marker: urlenc::opt(enc, next_key),
            next_version_id_marker: next_version,
            versions: Some(versions),
            delete_markers: Some(markers),
            common_prefixes: Some(
                page.prefixes
                    .into_iter()
                    .map(|p| CommonPrefix {
                        prefix: Some(urlenc::name(enc, p)),
                    })
                    .collect(),
            ),
            encoding_type: i.encoding_type,
            ..ListObjectVersionsOutput::default()
        }))
    }
}
