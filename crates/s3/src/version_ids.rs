//! S3 version ids. A blob's version numbers start again at 1 in the new blob of a key that
//! was removed and written again (a DELETE without versioning removes the file and its
//! history), so the number alone would name different contents over a key's life: a stale id
//! would read the new object's bytes. A version id is therefore `<blob id>.<version>`, unique
//! for as long as the store assigns blob ids (never reused), and an id of another blob than
//! the key's current one is `NoSuchVersion`.
//!
//! Ids issued before this scheme were the bare version number; they still parse, as that
//! version of the key's *current* blob (what they meant when issued, as long as the key was
//! not removed since), so clients holding them keep working. Only such old ids can still
//! name a later object's version; no id issued now can.

use s3s::{S3ErrorCode, S3Result};
use tomus_metadata::{BlobId, Version};

use crate::errors::s3_err;

/// A version named by an S3 version id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VersionRef {
    /// The blob it is a version of (`None`: an id from before blob ids were part of it).
    pub blob: Option<BlobId>,
    pub version: Version,
}

impl VersionRef {
    /// Whether this names a version of `blob`.
    pub fn of(&self, blob: BlobId) -> bool {
        self.blob.is_none_or(|b| b == blob)
    }
}

/// The version id S3 gives objects of a bucket without versioning: here, the current
/// version of such an object (the only one such a bucket keeps).
pub(crate) const NULL: &str = "null";

/// The S3 version id of version `version` of blob `blob`.
pub(crate) fn format(blob: BlobId, version: Version) -> String {
    format!("{blob}.{version}")
}

/// Parses a version id (`None`: the request named none).
pub(crate) fn parse(id: Option<&str>) -> S3Result<Option<VersionRef>> {
    let Some(s) = id else { return Ok(None) };
    let bad = || {
        s3_err(
            S3ErrorCode::InvalidArgument,
            format!("Invalid version id specified: {s:?}"),
        )
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let r = match s.split_once('.') {
        Some((b, v)) if digits(b) && digits(v) => VersionRef {
            blob: Some(b.parse().map_err(|_| bad())?),
            version: v.parse().map_err(|_| bad())?,
        },
        None if digits(s) => VersionRef {
            blob: None,
            version: s.parse().map_err(|_| bad())?,
        },
        _ => return Err(bad()),
    };
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ids_name_blob_and_version() {
        let id = format(17, 3);
        assert_eq!(id, "17.3");
        let r = parse(Some(&id)).unwrap().unwrap();
        assert_eq!(
            r,
            VersionRef {
                blob: Some(17),
                version: 3
            }
        );
        assert!(r.of(17) && !r.of(18));
        assert_eq!(parse(None).unwrap(), None);
    }

    #[test]
    fn old_ids_are_versions_of_the_current_blob() {
        let r = parse(Some("12")).unwrap().unwrap();
        assert_eq!(r.blob, None);
        assert_eq!(r.version, 12);
        assert!(r.of(1) && r.of(2));
    }

    #[test]
    fn malformed_ids_are_invalid() {
        for s in [
            "null",
            "",
            "1.",
            ".1",
            "1.2.3",
            "-1",
            "a.1",
            "1.x",
            "99999999999999999999",
        ] {
            assert!(parse(Some(s)).is_err(), "{s}");
        }
    }
}
