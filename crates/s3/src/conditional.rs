//! Conditional writes and deletes: `If-Match` on PUT, CompleteMultipartUpload and DELETE
//! (and DELETE's `x-amz-if-match-last-modified-time` / `x-amz-if-match-size`, and the same
//! conditions of DeleteObjects entries). `If-None-Match: *` is the exclusive create of
//! `Gateway::open_for_write`.
//!
//! The manager has no compare-and-swap on a version's identity, only on the blob's size
//! (`CommitOptions::expect_size`), so a condition is checked against the current version
//! and the write then commits only if the blob still has that version's size: a concurrent
//! write of another size in between makes it fail with 412, as a check under a lock would.
//! The window that remains: a concurrent *replacement of the same size* published between
//! the check and the commit is not seen. PUT checks twice, before reading the body and
//! again after it (just before committing), so that window is not the length of the upload.
//! Deletes without versioning remove the file by name and have the same window.

use s3s::dto::*;
use s3s::{S3ErrorCode, S3Result};
use tomus_wire::ErrorKind;

use crate::errors::{object_err, s3_err};
use crate::meta::{self, ObjectMeta};
use crate::objects::etag_matches;
use crate::service::Gateway;

/// The conditions a write or delete puts on the current version of its key.
#[derive(Clone, Debug, Default)]
pub(crate) struct Expect {
    pub etag: Option<ETagCondition>,
    /// Last-Modified, in whole seconds as S3 compares it.
    pub modified: Option<Timestamp>,
    pub size: Option<i64>,
}

impl Expect {
    pub fn etag(etag: Option<&ETagCondition>) -> Expect {
        Expect {
            etag: etag.cloned(),
            ..Expect::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.etag.is_none() && self.modified.is_none() && self.size.is_none()
    }
}

/// The current version of a key as a condition sees it.
pub(crate) struct Current {
    pub etag: String,
    pub size: u64,
    pub modified_ms: u64,
}

/// Whether `current` meets `expect` (`PreconditionFailed` if not).
pub(crate) fn check(expect: &Expect, current: &Current) -> S3Result<()> {
    let failed = |what: &str| {
        Err(s3_err(
            S3ErrorCode::PreconditionFailed,
            format!("At least one of the pre-conditions you specified did not hold ({what})"),
        ))
    };
    if let Some(e) = &expect.etag {
        if !etag_matches(e, &current.etag) {
            return failed("If-Match");
        }
    }
    if let Some(t) = &expect.modified {
        if (current.modified_ms / 1000) as i64 != meta::unix_seconds(t) {
            return failed("x-amz-if-match-last-modified-time");
        }
    }
    if let Some(s) = expect.size {
        if i64::try_from(current.size).ok() != Some(s) {
            return failed("x-amz-if-match-size");
        }
    }
    Ok(())
}

impl Gateway {
    /// The current version of the file at `path` (`None`: no object, or a delete marker).
    pub(crate) async fn current(&self, path: &str) -> S3Result<Option<Current>> {
        let (obj, blob) = match self.ns.object(path, None).await {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind,
                    ErrorKind::NotFound | ErrorKind::IsADirectory | ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(object_err(e)),
        };
        let m = ObjectMeta::from_attrs(&obj.attrs);
        if m.delete_marker {
            return Ok(None);
        }
        Ok(Some(Current {
            etag: meta::etag(&m, blob.id(), obj.version.version),
            size: obj.version.size,
            modified_ms: match obj.version.published_ms {
                0 => obj.entry.created_ms,
                t => t,
            },
        }))
    }

    /// Checks `expect` (when it says anything) against the current version of `key` at
    /// `path`: `NoSuchKey` (404) when there is none, as S3 answers a conditional write or
    /// delete of a missing key, `PreconditionFailed` (412) when it does not match. Returns
    /// the size the commit should expect (`None`: no condition).
    pub(crate) async fn expect_current(
        &self,
        path: &str,
        key: &str,
        expect: &Expect,
    ) -> S3Result<Option<u64>> {
        if expect.is_empty() {
            return Ok(None);
        }
        let Some(current) = self.current(path).await? else {
            return Err(s3_err(
                S3ErrorCode::NoSuchKey,
                format!("{key}: no such object to check the condition against"),
            ));
        };
        check(expect, &current)?;
        Ok(Some(current.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current() -> Current {
        Current {
            etag: "abc".into(),
            size: 3,
            modified_ms: 5_500,
        }
    }

    #[test]
    fn conditions_compare_etag_time_and_size() {
        let c = current();
        assert!(check(&Expect::default(), &c).is_ok());
        let any = Expect::etag(Some(&ETagCondition::Any));
        assert!(check(&any, &c).is_ok());
        let same = Expect::etag(Some(&ETagCondition::ETag(ETag::Strong("abc".into()))));
        assert!(check(&same, &c).is_ok());
        let other = Expect::etag(Some(&ETagCondition::ETag(ETag::Strong("abd".into()))));
        let e = check(&other, &c).unwrap_err();
        assert_eq!(*e.code(), S3ErrorCode::PreconditionFailed);
        let sized = Expect {
            size: Some(3),
            ..Expect::default()
        };
        assert!(check(&sized, &c).is_ok());
        let wrong = Expect {
            size: Some(4),
            ..Expect::default()
        };
        assert!(check(&wrong, &c).is_err());
    }
}
