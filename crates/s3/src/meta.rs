//! Object metadata as version attributes: what a PUT records with its version and a GET,
//! HEAD or listing reads back.

use md5_many::{Digest, Md5};
use s3s::dto::{ETag, Metadata, Timestamp};
use tomus_metadata::{BlobId, Version};
use tomus_wire::Attrs;

use crate::checksums::Checksums;

const ETAG: &str = "s3:etag";
const CONTENT_TYPE: &str = "s3:content-type";
const CONTENT_ENCODING: &str = "s3:content-encoding";
const CONTENT_DISPOSITION: &str = "s3:content-disposition";
const CONTENT_LANGUAGE: &str = "s3:content-language";
const CACHE_CONTROL: &str = "s3:cache-control";
const EXPIRES: &str = "s3:expires";
/// On the version a CompleteMultipartUpload made: the upload's id, so that completing the
/// same upload again with the same parts answers as the first completion did.
const UPLOAD_ID: &str = "s3:upload-id";
const FULL_OBJECT_CHECKSUM: &str = "s3:full-object-checksum";
const USER_PREFIX: &str = "s3:meta:";
const DELETE_MARKER: &str = "s3:delete-marker";
const PARTS: &str = "s3:parts";
const PART_SIZES: &str = "s3:part-sizes";
/// On the copy that a DELETE of the latest version makes of the version below it (to make
/// that version current again): the copied version.
const RESTORED_FROM: &str = "s3:restored-from";
/// Longest run-length list of part sizes kept (version attributes are limited to 16 KiB in
/// all); an object whose part sizes do not fit cannot be read by `partNumber`.
const MAX_PART_SIZES: usize = 4096;

/// Content type of objects written without one (as S3).
pub const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

/// The metadata of one object version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Without quotes; `None` when the version was not written through S3 (see [`etag`]).
    pub etag: Option<String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub cache_control: Option<String>,
    /// The `Expires` header, in Unix seconds.
    pub expires: Option<i64>,
    pub user: Metadata,
    pub delete_marker: bool,
    /// Parts of a multipart upload.
    pub parts: Option<i32>,
    /// Their sizes, in order (for GET/HEAD with `partNumber`).
    pub part_sizes: Option<Vec<u64>>,
    /// The multipart upload that made this version.
    pub upload_id: Option<String>,
    /// Its flexible checksums (`x-amz-checksum-*`).
    pub checksums: Checksums,
    /// On a multipart upload's record: the client asked for a full-object checksum.
    pub full_object_checksum: bool,
}

/// Part sizes as runs, `SIZE*COUNT` joined by `,` (all parts but the last usually have one
/// size); `None` when that is longer than [`MAX_PART_SIZES`].
fn encode_part_sizes(sizes: &[u64]) -> Option<String> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &s in sizes {
        match runs.last_mut() {
            Some((size, n)) if *size == s => *n += 1,
            _ => runs.push((s, 1)),
        }
    }
    let text = runs
        .iter()
        .map(|(s, n)| format!("{s}*{n}"))
        .collect::<Vec<_>>()
        .join(",");
    (text.len() <= MAX_PART_SIZES).then_some(text)
}

fn decode_part_sizes(text: &str) -> Option<Vec<u64>> {
    let mut sizes = Vec::new();
    for run in text.split(',') {
        let (s, n) = run.split_once('*')?;
        let (s, n): (u64, usize) = (s.parse().ok()?, n.parse().ok()?);
        if sizes.len() + n > 10_000 {
            return None;
        }
        sizes.extend(std::iter::repeat_n(s, n));
    }
    Some(sizes)
}

impl ObjectMeta {
    pub fn from_attrs(attrs: &Attrs) -> ObjectMeta {
        let get = |k: &str| attrs.get(k).cloned();
        ObjectMeta {
            etag: get(ETAG),
            content_type: get(CONTENT_TYPE),
            content_encoding: get(CONTENT_ENCODING),
            content_disposition: get(CONTENT_DISPOSITION),
            content_language: get(CONTENT_LANGUAGE),
            cache_control: get(CACHE_CONTROL),
            expires: attrs.get(EXPIRES).and_then(|e| e.parse().ok()),
            user: attrs
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(USER_PREFIX)?.to_string(), v.clone())))
                .collect(),
            delete_marker: attrs.contains_key(DELETE_MARKER),
            parts: attrs.get(PARTS).and_then(|p| p.parse().ok()),
            part_sizes: attrs.get(PART_SIZES).and_then(|p| decode_part_sizes(p)),
            upload_id: get(UPLOAD_ID),
            checksums: Checksums::from_attrs(attrs),
            full_object_checksum: attrs.contains_key(FULL_OBJECT_CHECKSUM),
        }
    }

    pub fn to_attrs(&self) -> Attrs {
        let mut a = Attrs::new();
        let mut put = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                a.insert(k.to_string(), v.clone());
            }
        };
        put(ETAG, &self.etag);
        put(CONTENT_TYPE, &self.content_type);
        put(CONTENT_ENCODING, &self.content_encoding);
        put(CONTENT_DISPOSITION, &self.content_disposition);
        put(CONTENT_LANGUAGE, &self.content_language);
        put(CACHE_CONTROL, &self.cache_control);
        put(EXPIRES, &self.expires.map(|e| e.to_string()));
        put(UPLOAD_ID, &self.upload_id);
        put(PARTS, &self.parts.map(|p| p.to_string()));
        put(
            PART_SIZES,
            &self.part_sizes.as_deref().and_then(encode_part_sizes),
        );
        for (k, v) in &self.user {
            a.insert(
                format!("{USER_PREFIX}{}", k.to_ascii_lowercase()),
                v.clone(),
            );
        }
        if self.delete_marker {
            a.insert(DELETE_MARKER.into(), "1".into());
        }
        self.checksums.add_to(&mut a);
        if self.full_object_checksum {
            a.insert(FULL_OBJECT_CHECKSUM.into(), "1".into());
        }
        a
    }

    /// The same metadata without the ETag and parts (those describe content).
    pub fn descriptive(&self) -> ObjectMeta {
        ObjectMeta {
            etag: None,
            parts: None,
            part_sizes: None,
            upload_id: None,
            checksums: Checksums::default(),
            full_object_checksum: false,
            delete_marker: false,
            ..self.clone()
        }
    }

    pub fn content_type_or_default(&self) -> String {
        self.content_type
            .clone()
            .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.to_string())
    }

    /// The `Expires` header to answer with.
    pub fn expires_header(&self) -> Option<Timestamp> {
        self.expires
            .map(|s| timestamp(u64::try_from(s).unwrap_or(0).saturating_mul(1000)))
    }

    pub fn user_metadata(&self) -> Option<Metadata> {
        (!self.user.is_empty()).then(|| self.user.clone())
    }
}

/// The Content-Encoding to keep for an object: the request's without `aws-chunked`, which
/// describes how the body was sent (SigV4 chunks), not the object (as S3 strips it).
pub fn object_encoding(header: Option<String>) -> Option<String> {
    let kept: Vec<&str> = header
        .as_deref()?
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(","))
}

/// The version a version is a restored copy of (see `deletes.rs`).
pub fn restored_from(attrs: &Attrs) -> Option<Version> {
    attrs.get(RESTORED_FROM).and_then(|v| v.parse().ok())
}

/// The attributes of a restored copy of version `source` with attributes `attrs`.
pub fn restored_copy(attrs: &Attrs, source: Version) -> Attrs {
    let mut a = attrs.clone();
    a.insert(RESTORED_FROM.into(), source.to_string());
    a
}

/// Hex MD5 of the concatenation of `parts` (for S3's multipart ETag).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The ETag of a version: the one its S3 writer recorded (MD5 of a single PUT, `md5-N` of a
/// multipart upload), else a stable tag derived from the blob and version, so versions
/// written by other clients (the CLI, Python, appends) still get a distinct validator.
pub fn etag(meta: &ObjectMeta, blob: BlobId, version: Version) -> String {
    match &meta.etag {
        Some(e) => e.clone(),
        None => hex(&Md5::digest(format!("tomus:{blob}:{version}").as_bytes())),
    }
}

pub fn etag_header(meta: &ObjectMeta, blob: BlobId, version: Version) -> ETag {
    ETag::Strong(etag(meta, blob, version))
}

/// The S3 timestamp of Unix milliseconds.
pub fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

/// Whole seconds since the epoch of an S3 timestamp (HTTP dates have second precision).
pub fn unix_seconds(t: &Timestamp) -> i64 {
    time::OffsetDateTime::from(t.clone()).unix_timestamp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_chunked_is_not_an_object_encoding() {
        let enc = |s: &str| object_encoding(Some(s.to_string()));
        assert_eq!(enc("aws-chunked"), None);
        assert_eq!(enc("aws-chunked,gzip"), Some("gzip".into()));
        assert_eq!(enc("gzip, aws-chunked"), Some("gzip".into()));
        assert_eq!(enc("br"), Some("br".into()));
        assert_eq!(object_encoding(None), None);
    }

    #[test]
    fn attributes_round_trip() {
        let mut m = ObjectMeta {
            etag: Some("abc".into()),
            content_type: Some("text/csv".into()),
            cache_control: Some("no-cache".into()),
            parts: Some(3),
            ..ObjectMeta::default()
        };
        m.user.insert("color".into(), "blue".into());
        assert_eq!(ObjectMeta::from_attrs(&m.to_attrs()), m);
        let d = m.descriptive();
        assert_eq!((d.etag, d.parts), (None, None));
        assert_eq!(d.user.get("color").map(String::as_str), Some("blue"));
    }

    #[test]
    fn versions_without_an_etag_get_a_stable_distinct_one() {
        let m = ObjectMeta::default();
        assert_eq!(etag(&m, 1, 2), etag(&m, 1, 2));
        assert_ne!(etag(&m, 1, 2), etag(&m, 1, 3));
        assert_eq!(etag(&m, 1, 2).len(), 32);
        assert_eq!(unix_seconds(&timestamp(1_500_000_000_999)), 1_500_000_000);
    }

    #[test]
    fn part_sizes_are_kept_as_runs() {
        let sizes = vec![5 << 20, 5 << 20, 5 << 20, 7, 6 << 20, 1];
        let m = ObjectMeta {
            parts: Some(6),
            part_sizes: Some(sizes.clone()),
            ..ObjectMeta::default()
        };
        let a = m.to_attrs();
        assert_eq!(a[PART_SIZES], "5242880*3,7*1,6291456*1,1*1");
        assert_eq!(ObjectMeta::from_attrs(&a).part_sizes, Some(sizes));
        // Too many different sizes: not kept.
        let varied: Vec<u64> = (1..=2000).collect();
        assert_eq!(encode_part_sizes(&varied), None);
        assert_eq!(decode_part_sizes("1*x"), None);
    }
}
