//! Object listings (ListObjects, ListObjectsV2) from the namespace's ordered listing.
//!
//! The namespace lists paths in byte order, which is S3's key order, so a listing is one
//! ordered scan below the deepest directory the prefix names: directories are skipped (only
//! files are objects), keys folded into a common prefix are skipped in one step by resuming
//! after everything that starts with it, and the page ends one item early so `IsTruncated`
//! is exact. The continuation token is the last item returned.
//!
//! This file holds that scan over any ordered source ([`Pages`]); the namespace as such a
//! source is in `namespace.rs`, the S3 requests in `requests.rs`.

/// The files below a directory of the namespace as an ordered scan.
mod namespace;
/// ListObjects and ListObjectsV2.
mod requests;
#[cfg(test)]
mod tests;

use std::future::Future;

use s3s::S3ErrorCode;
use s3s::S3Result;

use crate::errors::s3_err;
use crate::meta;

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

    /// Whether `key` is listed folded into one of this query's common prefixes.
    pub(crate) fn folds(&self, key: &str) -> bool {
        self.common_prefix(key).is_some()
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
