//! Where buckets and keys live in the namespace: a bucket is a top-level directory and a key
//! is a path below it, so `tomus fs`, fsspec and S3 see the same files.
//!
//! The namespace is hierarchical, so a key must be a clean path: no empty components (a
//! leading, doubled or trailing `/`), no `.` or `..` components, no NUL, components of at most
//! 255 bytes. A key ending in one `/` names a directory (the "folder" markers S3 tools create).

use s3s::{S3ErrorCode, S3Result};

use crate::errors::s3_err;

/// Hidden top-level directory holding the parts of multipart uploads in progress. Its name is
/// not a valid bucket name, so no S3 request can reach it.
pub const UPLOADS_DIR: &str = ".tomus-uploads";
/// Hidden top-level directory holding one file per bucket whose attributes are the bucket's
/// settings (versioning).
pub const BUCKETS_DIR: &str = ".tomus-buckets";
/// Hidden top-level directory holding, per blob, the log of its deleted versions (see
/// `hidden.rs`).
pub const HIDDEN_DIR: &str = ".tomus-deleted-versions";

/// Longest key component the namespace stores.
const MAX_COMPONENT: usize = 255;

/// What a key names in the namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A file: an object.
    File(String),
    /// A directory (the key ends in `/`): an empty "folder" object.
    Dir(String),
}

/// The namespace path of `key` in `bucket`, or why the key cannot be stored.
pub fn target(bucket: &str, key: &str) -> S3Result<Target> {
    let (body, dir) = match key.strip_suffix('/') {
        Some(b) => (b, true),
        None => (key, false),
    };
    let bad = |why: &str| {
        Err(s3_err(
            S3ErrorCode::InvalidArgument,
            format!(
                "key {key:?} cannot be stored: tomus keeps keys as file paths, and {why} \
                 (see crates/s3/README.md)"
            ),
        ))
    };
    if body.is_empty() {
        return bad("an empty key or a lone '/' names no file");
    }
    for part in body.split('/') {
        match part {
            "" => {
                return bad(
                    "empty path components (leading, doubled or trailing '/') are not allowed",
                )
            }
            "." | ".." => return bad("'.' and '..' components are not allowed"),
            p if p.contains('\0') => return bad("NUL bytes are not allowed"),
            p if p.len() > MAX_COMPONENT => {
                return bad("a path component is longer than 255 bytes")
            }
            _ => {}
        }
    }
    let path = format!("{bucket}/{body}");
    Ok(if dir {
        Target::Dir(path)
    } else {
        Target::File(path)
    })
}

/// The namespace path of `key` in `bucket`, which must name a file (not end in `/`).
pub fn file_path(bucket: &str, key: &str) -> S3Result<String> {
    match target(bucket, key)? {
        Target::File(p) => Ok(p),
        Target::Dir(_) => Err(s3_err(
            S3ErrorCode::InvalidArgument,
            format!("key {key:?} names a directory; this operation needs an object key"),
        )),
    }
}

/// The key of a namespace path under `bucket` (`None` if it is not below the bucket).
pub fn key_of<'a>(bucket: &str, path: &'a str) -> Option<&'a str> {
    path.strip_prefix(bucket)?.strip_prefix('/')
}

/// Directory holding the parts of upload `id` of `bucket`.
pub fn upload_dir(bucket: &str, id: &str) -> String {
    format!("{UPLOADS_DIR}/{bucket}/{id}")
}

/// The settings file of `bucket`.
pub fn bucket_settings(bucket: &str) -> String {
    format!("{BUCKETS_DIR}/{bucket}")
}

/// The log of the deleted versions of `blob`.
pub fn hidden_log(blob: tomus_metadata::BlobId) -> String {
    format!("{HIDDEN_DIR}/{blob}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_keys_map_to_paths() {
        assert_eq!(
            target("b", "a/b.txt").unwrap(),
            Target::File("b/a/b.txt".into())
        );
        assert_eq!(target("b", "dir/").unwrap(), Target::Dir("b/dir".into()));
        assert_eq!(key_of("b", "b/a/c"), Some("a/c"));
        assert_eq!(key_of("b", "bb/a"), None);
        assert!(file_path("b", "dir/").is_err());
    }

    #[test]
    fn keys_that_are_not_paths_are_refused() {
        let long = "x".repeat(256);
        for bad in [
            "/a",
            "a//b",
            "./a",
            "a/../b",
            "a\0b",
            "/",
            "",
            long.as_str(),
        ] {
            let e = target("b", bad).unwrap_err();
            assert_eq!(e.code(), &S3ErrorCode::InvalidArgument, "{bad:?}");
        }
        assert!(target("b", "a//").is_err());
    }
}
