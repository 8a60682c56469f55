//! ListObjects and ListObjectsV2: a page of the scan as S3's listing entries and common
//! prefixes, resumed from a continuation token, StartAfter or Marker.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};
use tomus_wire::{Attrs, FsEntry};

use super::{Item, Query};
use crate::meta::{self, ObjectMeta};
use crate::service::Gateway;
use crate::urlenc::{self, Encoder};

/// The S3 listing entry of a file.
fn object_of(key: String, entry: &FsEntry, attrs: &Attrs) -> Option<Object> {
    let info = entry.blob.as_ref()?;
    let m = ObjectMeta::from_attrs(attrs);
    Some(Object {
        key: Some(key),
        size: Some(info.size as i64),
        e_tag: Some(meta::etag_header(&m, info.id, info.latest)),
        last_modified: Some(meta::timestamp(info.modified_ms)),
        storage_class: Some(ObjectStorageClass::from_static(
            ObjectStorageClass::STANDARD,
        )),
        ..Object::default()
    })
}

struct Page {
    objects: Vec<Object>,
    prefixes: Vec<CommonPrefix>,
    truncated: bool,
    last: Option<Item>,
}

impl Gateway {
    /// A page of the listing, its keys and common prefixes encoded as `enc` says (`last`
    /// stays as it is: tokens and markers are made from it).
    async fn list_page(&self, bucket: &str, q: &Query, enc: Option<Encoder>) -> S3Result<Page> {
        let l = self.scan(bucket, q, false).await?;
        Ok(Page {
            objects: l
                .objects
                .into_iter()
                .filter_map(|(k, (e, a))| object_of(urlenc::name(enc, k), &e, &a))
                .collect(),
            prefixes: l
                .prefixes
                .into_iter()
                .map(|p| CommonPrefix {
                    prefix: Some(urlenc::name(enc, p)),
                })
                .collect(),
            truncated: l.truncated,
            last: l.last,
        })
    }

    pub(crate) async fn list_objects_v2_op(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let i = req.input;
        let enc = urlenc::requested(i.encoding_type.as_ref())?;
        let mut q = Query::from_request(&i.prefix, &i.delimiter, i.max_keys)?;
        // An empty token is no token, as S3 treats it (the listing starts over).
        let resume = match (&i.continuation_token, &i.start_after) {
            (Some(t), _) if !t.is_empty() => Some(Item::from_token(t)?),
            (None, Some(s)) if !s.is_empty() => Some(Item::Key(s.clone())),
            _ => None,
        };
        q.after = resume.map(|r| q.resume_after(&r));
        let page = self.list_page(&i.bucket, &q, enc).await?;
        let key_count = (page.objects.len() + page.prefixes.len()) as i32;
        // With EncodingType=url, S3 encodes Delimiter, Prefix, Key and StartAfter (and the
        // common prefixes); the continuation tokens are opaque (hex) and need no encoding.
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(i.bucket),
            prefix: Some(urlenc::name(enc, q.prefix)),
            delimiter: urlenc::opt(enc, i.delimiter),
            max_keys: Some(q.max as i32),
            key_count: Some(key_count),
            continuation_token: i.continuation_token,
            start_after: urlenc::opt(enc, i.start_after),
            is_truncated: Some(page.truncated),
            next_continuation_token: page
                .truncated
                .then(|| page.last.as_ref().map(Item::token))
                .flatten(),
            contents: Some(page.objects),
            common_prefixes: Some(page.prefixes),
            encoding_type: i.encoding_type,
            ..ListObjectsV2Output::default()
        }))
    }

    pub(crate) async fn list_objects_op(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let i = req.input;
        let enc = urlenc::requested(i.encoding_type.as_ref())?;
        let mut q = Query::from_request(&i.prefix, &i.delimiter, i.max_keys)?;
        q.resume_after_marker(i.marker.as_ref());
        let page = self.list_page(&i.bucket, &q, enc).await?;
        // S3 returns NextMarker only with a delimiter; clients use the last key otherwise.
        let next_marker = (page.truncated && q.delimiter.is_some())
            .then(|| page.last.as_ref().map(|l| l.as_str().to_string()))
            .flatten();
        // With EncodingType=url, S3 encodes Delimiter, Marker, Prefix, NextMarker and Key (and
        // the common prefixes).
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(i.bucket),
            prefix: Some(urlenc::name(enc, q.prefix)),
            delimiter: urlenc::opt(enc, i.delimiter),
            marker: urlenc::opt(enc, i.marker),
            max_keys: Some(q.max as i32),
            is_truncated: Some(page.truncated),
            next_marker: urlenc::opt(enc, next_marker),
            contents: Some(page.objects),
            common_prefixes: Some(page.prefixes),
            encoding_type: i.encoding_type,
            ..ListObjectsOutput::default()
        }))
    }
}
