//! ListObjectVersions: the versions of each key, newest first, with delete markers.
//!
//! `MaxKeys` bounds the versions, delete markers and common prefixes of a page together, as
//! in S3, so a page may end inside a key's history: `NextKeyMarker` is then that key and
//! `NextVersionIdMarker` the last version listed, and the next page goes on with the key's
//! older versions (`KeyMarker` with `VersionIdMarker`) before the keys after it. A key's
//! versions are read from the manager newest first a page at a time, as far as the page
//! needs: a key overwritten a million times costs a page what it shows, not its history.

use std::collections::BTreeSet;

use futures::StreamExt;
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use tomus_metadata::Version;
use tomus_wire::{Attrs, BlobInfo, ErrorKind, FsEntry, VersionInfo};

use crate::buckets::owner;
use crate::errors::{object_err, s3_err};
use crate::listing::{Listing, Query};
use crate::meta::{self, ObjectMeta};
use crate::paths::{self, Target};
use crate::service::Gateway;
use crate::urlenc;
use crate::version_ids;

/// Keys whose newest versions are read at once.
const PARALLEL_KEYS: usize = 16;
/// Versions of each key read ahead (one more than this tells whether it has more): keys
/// with longer histories are read on when the page has room for them.
const FIRST_LOOK: usize = 32;

/// A page of ListObjectVersions as it is filled, in key order.
struct Page {
    room: usize,
    versions: Vec<ObjectVersion>,
    markers: Vec<DeleteMarkerEntry>,
    prefixes: Vec<String>,
    truncated: bool,
    /// Where the next page starts: the last key (with the last of its versions listed) or
    /// common prefix.
    next: Option<(String, Option<String>)>,
}

/// How a bucket names the versions of its keys.
#[derive(Clone, Copy)]
enum Naming {
    /// Every version, as `<blob>.<version>`.
    Versioned,
    /// A bucket that never had versioning: each key once, as its "null" version (the older
    /// versions waiting for collection are not S3 versions).
    Null,
}

impl Page {
    /// Lists `history` (newest first) of `key`; returns whether the page is full and the
    /// key has more versions than it took.
    fn add_key(
        &mut self,
        key: &str,
        blob: BlobInfo,
        history: Vec<(VersionInfo, Attrs)>,
        from_newest: bool,
        naming: Naming,
    ) -> bool {
        let cut = history.len() > self.room;
        let mut last_id = None;
        for (n, (v, attrs)) in history.into_iter().take(self.room).enumerate() {
            let id = match naming {
                Naming::Versioned => version_ids::format(blob.id, v.version),
                Naming::Null => version_ids::NULL.to_string(),
            };
            let m = ObjectMeta::from_attrs(&attrs);
            let is_latest = Some(from_newest && n == 0);
            let modified = Some(meta::timestamp(v.published_ms));
            last_id = Some(id.clone());
            self.room -= 1;
            if m.delete_marker {
                self.markers.push(DeleteMarkerEntry {
                    key: Some(key.to_string()),
                    version_id: Some(id),
                    is_latest,
                    last_modified: modified,
                    owner: Some(owner()),
                });
                continue;
            }
            self.versions.push(ObjectVersion {
                key: Some(key.to_string()),
                version_id: Some(id),
                is_latest,
                e_tag: Some(meta::etag_header(&m, blob.id, v.version)),
                size: Some(v.size as i64),
                last_modified: modified,
                owner: Some(owner()),
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                ..ObjectVersion::default()
            });
        }
        self.next = Some((key.to_string(), last_id));
        if cut {
            self.truncated = true;
        }
        cut
    }
}

impl Gateway {
    /// Up to `count` versions of `blob` that were not deleted, newest first, numbered below
    /// `before` (none when the blob is gone: its key was removed since it was listed), with
    /// the deleted versions, for reading on below them.
    async fn newest_versions(
        &self,
        blob: &BlobInfo,
        before: Version,
        count: usize,
    ) -> S3Result<(BTreeSet<Version>, Vec<(VersionInfo, Attrs)>)> {
        let hidden = self.hidden_versions(blob.id).await?;
        let history = self
            .visible_newest(&self.client.blob(blob), &hidden, before, count)
            .await?;
        Ok((hidden, history))
    }

    /// The key a `KeyMarker` with a `VersionIdMarker` resumes inside, with its blob and the
    /// version to go on below; `None` when nothing of it is left to list (the key is gone,
    /// was written again as a new object since, is not listed by this query, or the marker
    /// was its "null" version).
    async fn resume_inside(
        &self,
        bucket: &str,
        q: &Query,
        key: &str,
        marker: &str,
        naming: Naming,
    ) -> S3Result<Option<(BlobInfo, Version)>> {
        let marked = match naming {
            Naming::Null if marker == version_ids::NULL => return Ok(None),
            _ => version_ids::parse(Some(marker))?,
        };
        let Some(marked) = marked else {
            return Ok(None);
        };
        if !key.starts_with(q.prefix.as_str()) || q.folds(key) {
            return Ok(None);
        }
        let Ok(Target::File(path)) = paths::target(bucket, key) else {
            return Ok(None);
        };
        let entry: FsEntry = match self.ns.stat(&path).await {
            Ok(e) => e,
            Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Ok(None)
            }
            Err(e) => return Err(object_err(e)),
        };
        Ok(entry
            .blob
            .filter(|b| marked.of(b.id))
            .map(|b| (b, marked.version)))
    }

    pub(crate) async fn list_object_versions_op(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let i = req.input;
        let enc = urlenc::requested(i.encoding_type.as_ref())?;
        let mut q = Query::from_request(&i.prefix, &i.delimiter, i.max_keys)?;
        let key_marker = i.key_marker.as_deref().filter(|k| !k.is_empty());
        let version_marker = i.version_id_marker.as_deref().filter(|v| !v.is_empty());
        if version_marker.is_some() && key_marker.is_none() {
            return Err(s3_err(
                S3ErrorCode::InvalidArgument,
                "A version-id marker cannot be specified without a key marker.",
            ));
        }
        q.resume_after_marker(i.key_marker.as_ref());
        let naming = match self.bucket(&i.bucket).await?.versioning {
            None => Naming::Null,
            Some(_) => Naming::Versioned,
        };
        let mut page = Page {
            room: q.max,
            versions: Vec::new(),
            markers: Vec::new(),
            prefixes: Vec::new(),
            truncated: false,
            next: None,
        };
        if q.max == 0 {
            // MaxKeys=0 lists nothing, and says nothing of what follows.
        } else if let (Some(key), Some(marker)) = (key_marker, version_marker) {
            if let Some((blob, below)) = self
                .resume_inside(&i.bucket, &q, key, marker, naming)
                .await?
            {
                let wanted = match naming {
                    Naming::Versioned => page.room + 1,
                    Naming::Null => 0,
                };
                let (_, history) = self.newest_versions(&blob, below, wanted).await?;
                page.add_key(key, blob, history, false, naming);
            }
        }
        if q.max > 0 && !page.truncated {
            self.list_keys(&i.bucket, q.clone(), naming, &mut page)
                .await?;
        }

        let (next_key, next_version) = match page.next.filter(|_| page.truncated) {
            Some((key, version)) => (Some(key), version),
            None => (None, None),
        };
        // With EncodingType=url, S3 encodes KeyMarker, NextKeyMarker, Prefix, Key and
        // Delimiter (and the common prefixes).
        let encode_keys = |mut v: Vec<ObjectVersion>| {
            for o in &mut v {
                o.key = o.key.take().map(|k| urlenc::name(enc, k));
            }
            v
        };
        let mut markers = page.markers;
        for m in &mut markers {
            m.key = m.key.take().map(|k| urlenc::name(enc, k));
        }
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
            versions: Some(encode_keys(page.versions)),
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

    /// Fills the rest of `page` with the keys and common prefixes after `q`'s marker, in key
    /// order, as long as it has room.
    async fn list_keys(
        &self,
        bucket: &str,
        mut q: Query,
        naming: Naming,
        page: &mut Page,
    ) -> S3Result<()> {
        // Each key or prefix listed takes at least one place (but for keys whose every
        // version was deleted); with no room left, one item tells whether more follow.
        q.max = page.room.max(1);
        let listing = self.scan(bucket, &q, true).await?;
        let more = listing.truncated;
        let items = in_key_order(listing);
        let first_look = match naming {
            Naming::Versioned => page.room.min(FIRST_LOOK) + 1,
            Naming::Null => 1,
        };
        // Built eagerly (a stream closure over borrowed entries would not be Send), read
        // ahead in order, and only as far as the page gets.
        let fetches: Vec<_> = items
            .iter()
            .filter_map(|item| match item {
                Listed::Key(_, entry) => entry.blob.clone(),
                Listed::Prefix(_) => None,
            })
            .map(|blob| async move { self.newest_versions(&blob, Version::MAX, first_look).await })
            .collect();
        let mut histories = futures::stream::iter(fetches).buffered(PARALLEL_KEYS);
        for item in items {
            if page.room == 0 {
                page.truncated = true;
                return Ok(());
            }
            match item {
                Listed::Prefix(p) => {
                    page.room -= 1;
                    page.next = Some((p.clone(), None));
                    page.prefixes.push(p);
                }
                Listed::Key(key, entry) => {
                    let Some(blob) = entry.blob else { continue };
                    let (hidden, mut history) =
                        histories.next().await.transpose()?.unwrap_or_default();
                    let wanted = page.room + 1;
                    if matches!(naming, Naming::Versioned)
                        && history.len() == first_look
                        && wanted > first_look
                    {
                        let below = history.last().map_or(Version::MAX, |(v, _)| v.version);
                        let rest = wanted - history.len();
                        let handle = self.client.blob(&blob);
                        let more = self.visible_newest(&handle, &hidden, below, rest).await?;
                        history.extend(more);
                    }
                    if page.add_key(&key, blob, history, true, naming) {
                        return Ok(());
                    }
                }
            }
        }
        page.truncated = more;
        Ok(())
    }
}

/// An item of a listing: a key or a common prefix.
enum Listed {
    Key(String, FsEntry),
    Prefix(String),
}

/// A listing's keys and common prefixes merged back into the order the scan met them: a
/// common prefix sorts where its first key did, and no key outside it sorts between the
/// prefix and that key.
fn in_key_order(listing: Listing<(FsEntry, Attrs)>) -> Vec<Listed> {
    let mut items: Vec<Listed> = listing
        .objects
        .into_iter()
        .map(|(k, (entry, _))| Listed::Key(k, entry))
        .chain(listing.prefixes.into_iter().map(Listed::Prefix))
        .collect();
    items.sort_by(|a, b| a.name().cmp(b.name()));
    items
}

impl Listed {
    fn name(&self) -> &str {
        match self {
            Listed::Key(k, _) | Listed::Prefix(k) => k,
        }
    }
}
