//! The namespace as the ordered source of a listing: the files below the directory a prefix
//! names, with their latest attributes, keys relative to the bucket.

use s3s::S3Result;
use tomus_wire::{Attrs, EntryKind, ErrorKind, FsEntry};

use super::{list, Entry, Listing, Pages, Query};
use crate::errors::{from_store, Missing};
use crate::meta::ObjectMeta;
use crate::paths;
use crate::service::Gateway;

/// The files below one directory of the namespace, with their latest attributes.
struct NamespacePages<'a> {
    gw: &'a Gateway,
    bucket: &'a str,
    dir: String,
    /// Also list keys whose latest version is a delete marker (version listings).
    deleted: bool,
}

impl Pages for NamespacePages<'_> {
    type Item = (FsEntry, Attrs);

    async fn page(&self, after: Option<&str>, limit: u32) -> S3Result<Vec<Entry<Self::Item>>> {
        let after = after.map(|a| format!("{}/{a}", self.bucket));
        let entries = match self
            .gw
            .ns
            .list_page_attrs(&self.dir, true, after.as_deref(), limit)
            .await
        {
            Ok(e) => e,
            // The prefix names no directory: nothing below it.
            Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(from_store(e, Missing::Bucket)),
        };
        Ok(entries
            .into_iter()
            .filter_map(|(e, a)| {
                let key = paths::key_of(self.bucket, &e.path)?.to_string();
                // Directories are not objects; deleted keys are not listed either.
                let skip = e.kind == EntryKind::Dir
                    || (!self.deleted && ObjectMeta::from_attrs(&a).delete_marker);
                Some(Entry {
                    key,
                    dir: skip,
                    data: (e, a),
                })
            })
            .collect())
    }
}

/// The directory to scan for `prefix`: the part up to its last `/`.
fn scan_dir(bucket: &str, prefix: &str) -> String {
    match prefix.rfind('/') {
        Some(i) => format!("{bucket}/{}", &prefix[..i]),
        None => bucket.to_string(),
    }
}

impl Gateway {
    /// One page of `q` over the files of `bucket`, with their latest attributes; keys whose
    /// latest version is a delete marker only when `deleted`.
    pub(crate) async fn scan(
        &self,
        bucket: &str,
        q: &Query,
        deleted: bool,
    ) -> S3Result<Listing<(FsEntry, Attrs)>> {
        self.bucket(bucket).await?;
        let source = NamespacePages {
            gw: self,
            bucket,
            dir: scan_dir(bucket, &q.prefix),
            deleted,
        };
        list(&source, q).await
    }
}
