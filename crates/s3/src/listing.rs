//! Object listings (ListObjects, ListObjectsV2) from the namespace's ordered listing.
//!
//! The namespace lists paths in byte order, which is S3's key order, so a listing is one
//! ordered scan below the deepest directory the prefix names: directories are skipped (only
//! files are objects), keys folded into a common prefix are skipped in one step by resuming
//! after everything that starts with it, and the page ends one item early so `IsTruncated`
//! is exact. The continuation token is the last item returned.

use std::future::Future;

use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use tomus_wire::{Attrs, EntryKind, ErrorKind, FsEntry};

use crate::errors::{from_store, s3_err, Missing};
use crate::meta::{self, ObjectMeta};
use crate::paths;
use crate::service::Gateway;

/// Keys per page when the client does not say (S3's default and maximum).
pub const MAX_KEYS: usize = 1000;

/// Sorts after every key that starts with the string it is appended to: key components are
/// at most 255 bytes, and 64 of the largest code point (256 bytes) outrank any of them.
fn skip_suffix() -> String {
    "\u{10FFFF}".repeat(64)
}

/// A cursor (exclusive) past every key that starts with `prefix`.
pub fn after_prefix(prefix: &str) -> String {
    format!("{prefix}{}", skip_suffix())
}

/// One entry of an ordered scan: a key relative to the bucket.
pub struct Entry<T> {
    pub key: String,
    pub dir: bool,
    pub data: T,
}

/// An ordered scan of keys: entries after `after` (exclusive), at most `limit`.
pub trait Pages {
    type Item;
    fn page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> impl Future<Output = S3Result<Vec<Entry<Self::Item>>>> + Send;
}

/// What to list.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub prefix: String,
    pub delimiter: Option<String>,
    /// Start after this key (exclusive), already adjusted by [`Query::resume_after`].
    pub after: Option<String>,
    pub max: usize,
}

/// One page of a listing.
pub struct Listing<T> {
    pub objects: Vec<(String, T)>,
    pub prefixes: Vec<String>,
    pub truncated: bool,
    /// The last key or common prefix returned (what the next page starts after).
    pub last: Option<Item>,
}

/// A returned item, as a continuation token remembers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Key(String),
    Prefix(String),
}

impl Item {
    /// The opaque continuation token: a kind letter and the hex of the item.
    pub fn token(&self) -> String {
        let (kind, s) = match self {
            Item::Key(k) => ('k', k),
            Item::Prefix(p) => ('p', p),
        };
        format!("{kind}{}", meta::hex(s.as_bytes()))
    }

    pub fn from_token(token: &str) -> S3Result<Item> {
        let bad = || {
            s3_err(
                S3ErrorCode::InvalidArgument,
                "The continuation token provided is incorrect",
            )
        };
        let mut chars = token.chars();
        let kind = chars.next().ok_or_else(bad)?;
        let hex = chars.as_str();
        if !hex.len().is_multiple_of(2) || !hex.is_ascii() {
            return Err(bad());
        }
        let bytes: Option<Vec<u8>> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
            .collect();
        let s = String::from_utf8(bytes.ok_or_else(bad)?).map_err(|_| bad())?;
        match kind {
            'k' => Ok(Item::Key(s)),
            'p' => Ok(Item::Prefix(s)),
            _ => Err(bad()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Item::Key(s) | Item::Prefix(s) => s,
        }
    }
}

impl Query {
    /// A query from a listing request's prefix, delimiter and max-keys (resuming nowhere yet).
    pub(crate) fn from_request(
        prefix: &Option<String>,
        delimiter: &Option<String>,
        requested_max: Option<i32>,
    ) -> S3Result<Query> {
        Ok(Query {
            prefix: prefix.clone().unwrap_or_default(),
            delimiter: delimiter.clone(),
            after: None,
            max: max_keys(requested_max)?,
        })
    }

    /// Resumes after a marker key (ListObjects' Marker, ListObjectVersions' KeyMarker); an
    /// empty marker means from the start.
    pub(crate) fn resume_after_marker(&mut self, marker: Option<&String>) {
        self.after = marker
            .filter(|m| !m.is_empty())
            .map(|m| self.resume_after(&Item::Key(m.clone())));
    }

    /// The exclusive cursor to resume after `item`: past a whole common prefix, or after a
    /// key. A plain key (StartAfter, Marker) that is itself one of this query's common
    /// prefixes is treated as that prefix, so a NextMarker that was a prefix is not repeated.
    pub fn resume_after(&self, item: &Item) -> String {
        match item {
            Item::Prefix(p) => after_prefix(p),
            Item::Key(k) => match self.common_prefix(k) {
                Some(cp) if cp == k => after_prefix(k),
                _ => k.clone(),
            },
        }
    }

    /// The common prefix `key` folds into, if any.
    fn common_prefix<'k>(&self, key: &'k str) -> Option<&'k str> {
        let d = self.delimiter.as_deref().filter(|d| !d.is_empty())?;
        let rest = key.strip_prefix(self.prefix.as_str())?;
        let at = rest.find(d)?;
        Some(&key[..self.prefix.len() + at + d.len()])
    }

    /// Where the scan starts: after the cursor, or just before the first key that can start
    /// with the prefix (the prefix less its last character: shorter, so never a match).
    fn start(&self) -> Option<String> {
        let floor = {
            let mut p = self.prefix.clone();
            p.pop();
            Some(p).filter(|p| !p.is_empty())
        };
        match (&self.after, floor) {
            (Some(a), Some(f)) => Some(if *a > f { a.clone() } else { f }),
            (Some(a), None) => Some(a.clone()),
            (None, f) => f,
        }
    }
}

/// One page of `q` over `source`.
pub async fn list<P: Pages>(source: &P, q: &Query) -> S3Result<Listing<P::Item>> {
    let mut out = Listing {
        objects: Vec::new(),
        prefixes: Vec::new(),
        truncated: false,
        last: None,
    };
    if q.max == 0 {
        return Ok(out);
    }
    let mut cursor = q.start();
    let mut count = 0usize;
    'scan: loop {
        // One more than needed tells whether the listing goes on; directories are skipped,
        // so ask for a few more.
        let limit = (q.max + 1 - count).clamp(64, MAX_KEYS + 1) as u32;
        let page = source.page(cursor.as_deref(), limit).await?;
        let full = page.len() == limit as usize;
        for e in page {
            cursor = Some(e.key.clone());
            if e.dir {
                continue;
            }
            if !e.key.starts_with(q.prefix.as_str()) {
                if e.key.as_str() > q.prefix.as_str() {
                    break 'scan; // past every key with the prefix
                }
                continue;
            }
            if count == q.max {
                out.truncated = true;
                break 'scan;
            }
            count += 1;
            if let Some(cp) = q.common_prefix(&e.key) {
                let cp = cp.to_string();
                cursor = Some(after_prefix(&cp));
                out.prefixes.push(cp.clone());
                out.last = Some(Item::Prefix(cp));
                continue 'scan; // resume past the whole prefix
            }
            out.last = Some(Item::Key(e.key.clone()));
            out.objects.push((e.key, e.data));
        }
        if !full {
            break;
        }
    }
    Ok(out)
}

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

pub(crate) fn max_keys(requested: Option<i32>) -> S3Result<usize> {
    match requested {
        None => Ok(MAX_KEYS),
        Some(n) if n < 0 => Err(s3_err(
            S3ErrorCode::InvalidArgument,
            "max-keys must be a non-negative integer",
        )),
        Some(n) => Ok((n as usize).min(MAX_KEYS)),
    }
}

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

    async fn list_page(&self, bucket: &str, q: &Query) -> S3Result<Page> {
        let l = self.scan(bucket, q, false).await?;
        Ok(Page {
            objects: l
                .objects
                .into_iter()
                .filter_map(|(k, (e, a))| object_of(k, &e, &a))
                .collect(),
            prefixes: l
                .prefixes
                .into_iter()
                .map(|p| CommonPrefix { prefix: Some(p) })
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
        let mut q = Query::from_request(&i.prefix, &i.delimiter, i.max_keys)?;
        let resume = match (&i.continuation_token, &i.start_after) {
            (Some(t), _) => Some(Item::from_token(t)?),
            (None, Some(s)) if !s.is_empty() => Some(Item::Key(s.clone())),
            _ => None,
        };
        q.after = resume.map(|r| q.resume_after(&r));
        let page = self.list_page(&i.bucket, &q).await?;
        let key_count = (page.objects.len() + page.prefixes.len()) as i32;
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(i.bucket),
            prefix: Some(q.prefix),
            delimiter: i.delimiter,
            max_keys: Some(q.max as i32),
            key_count: Some(key_count),
            continuation_token: i.continuation_token,
            start_after: i.start_after,
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
        let mut q = Query::from_request(&i.prefix, &i.delimiter, i.max_keys)?;
        q.resume_after_marker(i.marker.as_ref());
        let page = self.list_page(&i.bucket, &q).await?;
        // S3 returns NextMarker only with a delimiter; clients use the last key otherwise.
        let next_marker = (page.truncated && q.delimiter.is_some())
            .then(|| page.last.as_ref().map(|l| l.as_str().to_string()))
            .flatten();
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(i.bucket),
            prefix: Some(q.prefix),
            delimiter: i.delimiter,
            marker: i.marker,
            max_keys: Some(q.max as i32),
            is_truncated: Some(page.truncated),
            next_marker,
            contents: Some(page.objects),
            common_prefixes: Some(page.prefixes),
            encoding_type: i.encoding_type,
            ..ListObjectsOutput::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The namespace's recursive listing of a set of keys: every key and, as directories,
    /// every proper `/`-prefix of a key, in byte order.
    struct Mem {
        entries: BTreeSet<(String, bool)>,
    }

    impl Mem {
        fn new(keys: &[&str]) -> Mem {
            let mut entries = BTreeSet::new();
            for k in keys {
                for (i, _) in k.match_indices('/') {
                    entries.insert((k[..i].to_string(), true));
                }
                entries.insert((k.to_string(), false));
            }
            Mem { entries }
        }
    }

    impl Pages for Mem {
        type Item = ();
        async fn page(&self, after: Option<&str>, limit: u32) -> S3Result<Vec<Entry<()>>> {
            Ok(self
                .entries
                .iter()
                .filter(|(k, _)| after.is_none_or(|a| k.as_str() > a))
                .take(limit as usize)
                .map(|(k, d)| Entry {
                    key: k.clone(),
                    dir: *d,
                    data: (),
                })
                .collect())
        }
    }

    /// What S3 returns for the whole listing: keys with the prefix, folded by the delimiter.
    fn reference(keys: &[&str], prefix: &str, delim: Option<&str>) -> Vec<Item> {
        let q = Query {
            prefix: prefix.into(),
            delimiter: delim.map(str::to_string),
            ..Query::default()
        };
        let mut sorted: Vec<&str> = keys.to_vec();
        sorted.sort();
        sorted.dedup();
        let mut out: Vec<Item> = Vec::new();
        for k in sorted.into_iter().filter(|k| k.starts_with(prefix)) {
            let item = match q.common_prefix(k) {
                Some(cp) => Item::Prefix(cp.to_string()),
                None => Item::Key(k.to_string()),
            };
            if out.last() != Some(&item) {
                out.push(item);
            }
        }
        out
    }

    /// Every page of the listing, resuming from each page's token.
    fn paginate(keys: &[&str], prefix: &str, delim: Option<&str>, max: usize) -> Vec<Item> {
        let source = Mem::new(keys);
        let mut q = Query {
            prefix: prefix.into(),
            delimiter: delim.map(str::to_string),
            after: None,
            max,
        };
        let mut all = Vec::new();
        for _ in 0..10_000 {
            let l = futures::executor::block_on(list(&source, &q)).unwrap();
            assert!(l.objects.len() + l.prefixes.len() <= max);
            let mut page: Vec<Item> = l
                .objects
                .iter()
                .map(|(k, _)| Item::Key(k.clone()))
                .chain(l.prefixes.iter().map(|p| Item::Prefix(p.clone())))
                .collect();
            page.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            all.extend(page);
            if !l.truncated {
                return all;
            }
            let token = Item::from_token(&l.last.unwrap().token()).unwrap();
            q.after = Some(q.resume_after(&token));
        }
        panic!("listing does not end");
    }

    const KEYS: &[&str] = &[
        "a",
        "a-b",
        "a.txt",
        "a/1",
        "a/2/x",
        "a/2/y",
        "a/3",
        "ab/c",
        "b",
        "logs/2023-12",
        "logs/2024-01",
        "logs/2024-02/x",
        "logs/2024-03",
        "z/z/z",
    ];

    #[test]
    fn pages_match_the_whole_listing() {
        for prefix in [
            "",
            "a",
            "a/",
            "a/2",
            "logs/2024-",
            "logs/2024-02/",
            "nothing",
            "z/",
        ] {
            for delim in [None, Some("/"), Some("-"), Some("2/")] {
                let want = reference(KEYS, prefix, delim);
                for max in [1, 2, 3, 5, 1000] {
                    let got = paginate(KEYS, prefix, delim, max);
                    assert_eq!(got, want, "prefix {prefix:?} delimiter {delim:?} max {max}");
                }
            }
        }
    }

    #[test]
    fn delimiter_folds_keys_into_common_prefixes() {
        let got = paginate(KEYS, "", Some("/"), 1000);
        let names: Vec<&str> = got.iter().map(Item::as_str).collect();
        assert_eq!(
            names,
            ["a", "a-b", "a.txt", "a/", "ab/", "b", "logs/", "z/"]
        );
        assert!(matches!(got[3], Item::Prefix(_)));
    }

    #[test]
    fn start_after_and_markers_that_are_prefixes() {
        let source = Mem::new(KEYS);
        let mut q = Query {
            delimiter: Some("/".into()),
            max: 1000,
            ..Query::default()
        };
        q.after = Some(q.resume_after(&Item::Key("a/".into())));
        let l = futures::executor::block_on(list(&source, &q)).unwrap();
        assert_eq!(l.prefixes, ["ab/", "logs/", "z/"]);
        q.after = Some(q.resume_after(&Item::Key("a/1".into())));
        let l = futures::executor::block_on(list(&source, &q)).unwrap();
        assert_eq!(l.prefixes[0], "a/", "keys after a/1 still fold into a/");
        let mut q = Query {
            max: 0,
            ..Query::default()
        };
        let l = futures::executor::block_on(list(&source, &q)).unwrap();
        assert!(!l.truncated && l.objects.is_empty());
        q.max = 2;
        let l = futures::executor::block_on(list(&source, &q)).unwrap();
        assert!(l.truncated);
    }

    #[test]
    fn many_keys_paginate_exactly() {
        let keys: Vec<String> = (0..2500).map(|i| format!("d{}/k{i:05}", i % 7)).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let got = paginate(&refs, "", None, 1000);
        assert_eq!(got.len(), 2500);
        assert_eq!(got, reference(&refs, "", None));
        assert_eq!(
            paginate(&refs, "d3", Some("/"), 1),
            [Item::Prefix("d3/".into())]
        );
    }

    #[test]
    fn tokens_round_trip_and_reject_garbage() {
        for item in [Item::Key("a/é x".into()), Item::Prefix("p/".into())] {
            assert_eq!(Item::from_token(&item.token()).unwrap(), item);
        }
        for bad in ["", "x00", "k0", "kzz", "k\u{e9}"] {
            assert!(Item::from_token(bad).is_err(), "{bad:?}");
        }
        assert!(after_prefix("a/").as_str() > "a/zzz/zzz");
        assert!(after_prefix("a/").as_str() < "a0");
    }
}
